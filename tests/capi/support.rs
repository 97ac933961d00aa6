//! Shared by the C ABI tests (`tests/capi_abi.rs`, `tests/softroce_capi.rs`): builds
//! `libopenib.so` (package openib-capi) into this test build's target directory, next to the
//! `openib` binary, and compiles the C programs of `tests/c` against `include/openib.h`.
//!
//! `cargo build --workspace --all-targets` builds the library too; the build here makes a
//! single `cargo test --test softroce_capi` use the current sources rather than a stale file.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn header() -> PathBuf {
    root().join("include/openib.h")
}

/// The directory of the `openib` binary: `<target>/<profile>`, where libopenib.so goes.
pub fn profile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_openib"))
        .parent()
        .expect("the binary has a directory")
        .to_path_buf()
}

/// `cargo build -p openib-capi` with this build's profile and target directory, once per test
/// process; returns the path of libopenib.so.
pub fn lib() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = profile_dir();
            let profile = match dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev".to_string(),
                Some(p) => p.to_string(),
                None => return Err(format!("no profile in {}", dir.display())),
            };
            let target = dir.parent().expect("<target>/<profile>");
            let out = Command::new(env!("CARGO"))
                .args(["build", "-p", "openib-capi", "--profile", &profile])
                .arg("--target-dir")
                .arg(target)
                .current_dir(root())
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cargo build -p openib-capi failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let so = dir.join("libopenib.so");
            if so.is_file() {
                Ok(so)
            } else {
                Err(format!("{} was not built", so.display()))
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Where the compiled C programs go: `<target>/<profile>/capi-c`.
pub fn c_dir() -> PathBuf {
    let d = profile_dir().join("capi-c");
    std::fs::create_dir_all(&d).expect("create the C build directory");
    d
}

pub fn cc_program() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Runs the C compiler; panics with its output on failure.
pub fn run_cc(args: &[&str]) {
    let cc = cc_program();
    let out = Command::new(&cc).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {cc} ({e}): install a C compiler (scripts/setup installs gcc)")
    });
    assert!(
        out.status.success(),
        "{cc} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const CFLAGS: &[&str] = &[
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-pedantic",
    "-Werror",
    "-O1",
    "-g",
];

/// Compiles `tests/c/NAME.c` to `c_dir()/NAME`, strict C99, with `extra` link arguments.
pub fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let src = root().join(format!("tests/c/{name}.c"));
    let exe = c_dir().join(name);
    let include = root().join("include");
    let mut args: Vec<String> = CFLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("-I{}", include.display()));
    args.push(src.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("-o".into());
    args.push(exe.display().to_string());
    run_cc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    exe
}

/// Compiles a program that links against libopenib.so (found through its rpath).
pub fn compile_linked(name: &str) -> PathBuf {
    let dir = lib().parent().expect("lib dir").display().to_string();
    compile(
        name,
        &[
            &format!("-L{dir}"),
            "-lopenib",
            &format!("-Wl,-rpath,{dir}"),
            "-pthread",
        ],
    )
}

/// The function names the header declares: `openib_xxx(` outside comments.
pub fn header_functions(text: &str) -> BTreeSet<String> {
    let code = strip_comments(text);
    let b = code.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(pos) = code[i..].find("openib_") {
        let start = i + pos;
        let mut end = start + "openib_".len();
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'_') {
            end += 1;
        }
        let word_start =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut k = end;
        while k < b.len() && b[k].is_ascii_whitespace() {
            k += 1;
        }
        if word_start && k < b.len() && b[k] == b'(' {
            out.insert(code[start..end].to_string());
        }
        i = end;
    }
    out
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                let end = rest[b + 2..].find("*/").expect("unterminated comment") + b + 4;
                out.push(' ');
                rest = &rest[end..];
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
            (Some(_), None) => unreachable!(),
        }
    }
}

/// The functions a shared library defines and exports (`nm -D --defined-only`, type T).
pub fn exported_functions(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    assert!(
        out.status.success(),
        "nm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [_, "T", name] => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// Asserts that both ranks of a `tests/c/exchange.c` run printed their summary for `n`
/// messages each way and that each checked its peer (`ctx`: what to print on failure).
pub fn assert_exchange_ok(text: &str, n: u32, ctx: &str) {
    for rank in 0..2 {
        let want = format!("exchange: rank {rank} ok: {n} messages each way (");
        let line = text
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no summary of rank {rank}: {ctx}"));
        assert!(line.ends_with("peer ok"), "{line}");
    }
}
