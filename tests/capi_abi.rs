//! The C ABI on the host, no RDMA device needed: the header and libopenib.so agree, the header
//! is strict C99 and C++, and a C program that dlopens the library gets clean errors, among
//! them "no RDMA device" from openib_open on a machine without one.

#[path = "common/prereq.rs"]
mod prereq;
#[path = "capi/support.rs"]
mod support;

use std::process::Command;

/// The whole API: a function added to or removed from both the header and the library (so
/// the agreement check below still passes) must be added here too, on purpose.
const API: &[&str] = &[
    "openib_add_procs",
    "openib_close",
    "openib_compare_swap",
    "openib_compare_swap_addr",
    "openib_compare_swap_addr_token",
    "openib_connect_all",
    "openib_del_procs",
    "openib_eager_limit",
    "openib_fetch_add",
    "openib_fetch_add_addr",
    "openib_fetch_add_addr_token",
    "openib_flush",
    "openib_get",
    "openib_get_addr",
    "openib_get_addr_token",
    "openib_group_create",
    "openib_last_error",
    "openib_mem_alloc",
    "openib_mem_free",
    "openib_mem_len",
    "openib_mem_ptr",
    "openib_mem_register",
    "openib_mem_remote",
    "openib_open",
    "openib_open_runtime",
    "openib_port_name",
    "openib_poll_completion",
    "openib_progress",
    "openib_progress_poll",
    "openib_put",
    "openib_put_addr",
    "openib_put_addr_token",
    "openib_quiesce",
    "openib_rank",
    "openib_reachable",
    "openib_send",
    "openib_send_mem",
    "openib_send_nocopy",
    "openib_sendi",
    "openib_set_handler",
    "openib_size",
    "openib_strerror",
    "openib_usable_ports",
];

#[test]
fn header_and_library_export_the_same_functions() {
    let text = std::fs::read_to_string(support::header()).expect("include/openib.h");
    let declared = support::header_functions(&text);
    let exported = support::exported_functions(&support::lib());
    let api: std::collections::BTreeSet<String> = API.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        declared, api,
        "include/openib.h declares another API than this test lists"
    );
    let missing: Vec<_> = declared.difference(&exported).collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && undeclared.is_empty(),
        "declared in include/openib.h but not exported by libopenib.so: {missing:?}; \
         exported but not declared: {undeclared:?}"
    );
    // Nothing but the API: every exported function is openib_*.
    assert!(
        exported.iter().all(|s| s.starts_with("openib_")),
        "{exported:?}"
    );
}

#[test]
fn header_parser_sees_declarations_only() {
    let text = "/* openib_commented(x) */\nint openib_a(void);\n// openib_b(\nvoid *openib_c (int);\ntypedef void (*openib_cb)(int);\n";
    let got: Vec<String> = support::header_functions(text).into_iter().collect();
    assert_eq!(got, ["openib_a", "openib_c"]);
}

#[test]
fn header_is_strict_c99_and_cpp() {
    let h = support::header().display().to_string();
    support::run_cc(&[
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        "-fsyntax-only",
        "-x",
        "c",
        &h,
    ]);
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-fsyntax-only",
            "-x",
            "c++",
            &h,
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx} ({e}): scripts/setup installs g++"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True when this machine has an RDMA device (then openib_open would succeed).
fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn open_without_a_device_fails_cleanly_through_dlopen() {
    let exe = support::compile("open_fail", &["-ldl"]);
    let lib = support::lib();
    let out = Command::new(&exe)
        .arg(&lib)
        .env_remove("OPENIB_RT_SOCKET")
        .env_remove("PMIX_NAMESPACE")
        .env_remove("PMIX_RANK")
        .env("OPENIB_RUNTIME", "singleton")
        .output()
        .expect("run open_fail");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if has_rdma_device() {
        // The check needs a machine without an RDMA device (CI's has none).
        prereq::missing(&format!(
            "this machine has an RDMA device, the no-device check needs none\n{stdout}"
        ));
        return;
    }
    assert!(
        out.status.success(),
        "open_fail failed:\n{stdout}\n{stderr}"
    );
    let line = |p: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(p))
            .unwrap_or_else(|| panic!("no {p:?} line:\n{stdout}"))
            .to_string()
    };
    let open = line("open: ");
    let error = line("error: ");
    // OPENIB_ERR_NO_DEVICE, as `openib ports` exits 4; OPENIB_ERR_NO_VERBS without libibverbs.
    match open.split_whitespace().next() {
        Some("-3") => assert!(error.contains("no RDMA device found"), "{error}"),
        Some("-2") => assert!(error.contains("libibverbs"), "{error}"),
        _ => panic!("openib_open returned {open}: {error}"),
    }
    eprintln!("openib_open without a device: {open}: {error}");
}

#[test]
fn exchange_compiles_against_the_header_and_library() {
    let exe = support::compile_linked("exchange");
    assert!(exe.is_file());
}

#[test]
fn own_rank_compiles_against_the_header_and_library() {
    let exe = support::compile_linked("own_rank");
    assert!(exe.is_file());
}
