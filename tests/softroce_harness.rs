//! Tests of the SoftRoCE guest harness itself (tests/softroce/guest): the
//! guest boots, rxe0 is there and ACTIVE, `--rxe-down` takes the port down,
//! output and exit status come back, and the chroot is usable.
//!
//! Two guest boots in all: one shared by the checks on a normal guest, one
//! with `--rxe-down`.  A harness failure fails these tests (never a silent
//! pass); `OPENIB_SKIP_GUEST=1` skips them loudly.

#[path = "softroce/harness.rs"]
mod harness;

use std::process::Output;
use std::sync::OnceLock;

/// One boot of a normal guest for the checks below.  The script prints
/// sections and ends like `sh -c 'echo out; echo err >&2; exit 7'`.
const BASIC_SCRIPT: &str = r#"
echo "=== devinfo"
ibv_devinfo -v
echo "devinfo-status: $?"
echo "=== hostname"
hostname
echo "=== procsub"
cat <(echo hi)
echo "=== cwd"
pwd
echo "=== end"
echo out
echo err >&2
exit 7
"#;

fn basic_run() -> &'static Output {
    static RUN: OnceLock<Result<Output, String>> = OnceLock::new();
    match RUN.get_or_init(|| harness::try_guest_run(&[], &["bash", "-c", BASIC_SCRIPT])) {
        Ok(out) => out,
        Err(e) => panic!("{e}"),
    }
}

/// The port 1 block of device `dev` in `ibv_devinfo -v` output: its
/// `name: value` pairs (first occurrence wins; GIDs are kept as "GID[  n]").
fn devinfo_port(text: &str, dev: &str) -> Option<Vec<(String, String)>> {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|l| l.trim_start().strip_prefix("hca_id:").map(str::trim) == Some(dev))?;
    let mut in_port = false;
    let mut kv = Vec::new();
    for l in lines {
        let t = l.trim();
        if t.starts_with("hca_id:") {
            break;
        }
        if let Some((k, v)) = t.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k == "port" {
                if in_port {
                    break;
                }
                in_port = v == "1";
                continue;
            }
            if in_port {
                kv.push((k.to_string(), v.to_string()));
            }
        }
    }
    in_port.then_some(kv)
}

fn field<'a>(kv: &'a [(String, String)], key: &str) -> Option<&'a str> {
    kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[test]
fn rxe0_is_active_on_ethernet() {
    if harness::skip_guest("rxe0_is_active_on_ethernet") {
        return;
    }
    let out = basic_run();
    let text = harness::stdout(out);
    let devinfo = harness::section(&text, "devinfo").expect("no devinfo section in the output");
    assert!(
        devinfo.contains("devinfo-status: 0"),
        "ibv_devinfo -v failed in the guest:\n{devinfo}\nstderr:\n{}",
        harness::stderr(out)
    );
    let port = devinfo_port(&devinfo, "rxe0")
        .unwrap_or_else(|| panic!("no rxe0 port 1 in ibv_devinfo -v:\n{devinfo}"));
    assert_eq!(
        field(&port, "state"),
        Some("PORT_ACTIVE (4)"),
        "ibv_devinfo -v:\n{devinfo}"
    );
    assert_eq!(
        field(&port, "link_layer"),
        Some("Ethernet"),
        "ibv_devinfo -v:\n{devinfo}"
    );
    assert_eq!(
        field(&port, "phys_state"),
        Some("LINK_UP (5)"),
        "ibv_devinfo -v:\n{devinfo}"
    );
    // rxe0 sits on veth0 with 10.77.0.1: the IPv4-mapped RoCE v2 GID.
    assert!(
        port.iter()
            .any(|(k, v)| k.starts_with("GID[") && v == "::ffff:10.77.0.1, RoCE v2"),
        "no ::ffff:10.77.0.1 RoCE v2 GID in ibv_devinfo -v:\n{devinfo}"
    );
}

#[test]
fn rxe_down_gives_a_port_that_is_not_active() {
    if harness::skip_guest("rxe_down_gives_a_port_that_is_not_active") {
        return;
    }
    let text = harness::guest_run_ok(&["--rxe-down"], &["ibv_devinfo", "-v"]);
    let port = devinfo_port(&text, "rxe0")
        .unwrap_or_else(|| panic!("no rxe0 port 1 in ibv_devinfo -v:\n{text}"));
    let state = field(&port, "state").unwrap_or("");
    assert!(
        !state.contains("ACTIVE"),
        "rxe0 port 1 is {state:?} with --rxe-down:\n{text}"
    );
    // Measured: a veth0 set down gives PORT_DOWN with phys_state DISABLED.
    assert_eq!(state, "PORT_DOWN (1)", "ibv_devinfo -v:\n{text}");
    assert_eq!(
        field(&port, "phys_state"),
        Some("DISABLED (3)"),
        "ibv_devinfo -v:\n{text}"
    );
}

#[test]
fn exit_status_stdout_and_stderr_pass_through() {
    if harness::skip_guest("exit_status_stdout_and_stderr_pass_through") {
        return;
    }
    let out = basic_run();
    let text = harness::stdout(out);
    assert_eq!(
        out.status.code(),
        Some(7),
        "stdout:\n{text}\nstderr:\n{}",
        harness::stderr(out)
    );
    assert_eq!(
        harness::section(&text, "end").as_deref(),
        Some("out\n"),
        "stdout:\n{text}"
    );
    assert_eq!(harness::stderr(out), "err\n", "stderr of the command");
}

#[test]
fn chroot_has_process_substitution_hostname_and_cwd() {
    if harness::skip_guest("chroot_has_process_substitution_hostname_and_cwd") {
        return;
    }
    let text = harness::stdout(basic_run());
    assert_eq!(
        harness::section(&text, "procsub").as_deref(),
        Some("hi\n"),
        "stdout:\n{text}"
    );
    let host = harness::section(&text, "hostname").unwrap_or_default();
    let host = host.trim();
    assert!(
        !host.is_empty() && host != "(none)",
        "guest hostname is {host:?}"
    );
    assert_eq!(
        harness::section(&text, "cwd").as_deref().map(str::trim),
        Some(env!("CARGO_MANIFEST_DIR")),
        "the command's cwd in the guest"
    );
}

#[test]
fn devinfo_parser_reads_port_one() {
    let sample = "hca_id:\trxe0\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\
                  \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n\
                  \t\t\tGID[  1]:\t\t::ffff:10.77.0.1, RoCE v2\n";
    let port = devinfo_port(sample, "rxe0").unwrap();
    assert_eq!(field(&port, "state"), Some("PORT_ACTIVE (4)"));
    assert_eq!(field(&port, "link_layer"), Some("Ethernet"));
    assert_eq!(field(&port, "GID[  1]"), Some("::ffff:10.77.0.1, RoCE v2"));
    assert!(devinfo_port(sample, "mlx5_0").is_none());
}
