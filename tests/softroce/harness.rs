//! Shared helpers for integration tests that run commands inside the
//! SoftRoCE guest (`tests/softroce/guest`, see docs/SOFTROCE.md).
//!
//! Use it from a test file with
//!
//! ```ignore
//! #[path = "softroce/harness.rs"]
//! mod harness;
//! ```
//!
//! Every `guest_run` boots a fresh guest (about 10-20 s under TCG), so group
//! the checks of one test file into few boots.  Concurrent runs are safe: each
//! has its own job dir, and `guest prepare` takes a lock on the cache.
//!
//! A harness failure (exit status 125: no qemu, no kernel, the guest did not
//! boot, timeout, ...) makes the test FAIL with the harness's stderr; it never
//! passes silently.  The only way to skip is `OPENIB_SKIP_GUEST=1`, and under CI
//! (`CI` set) even that fails the test (tests/common/prereq.rs).
#![allow(dead_code)]

#[path = "../common/prereq.rs"]
pub mod prereq;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{OnceLock, RwLock};

/// The guests of this test binary: each `guest_run` holds it shared, a `guest_run_alone_ok`
/// exclusively.
static GUESTS: RwLock<()> = RwLock::new(());

/// Exit status of `guest run` when the harness itself failed.  A command run
/// in the guest must not use it.
pub const HARNESS_FAILURE: i32 = 125;

/// The harness script.
pub fn guest_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/softroce/guest")
}

/// True when `OPENIB_SKIP_GUEST=1` (no guest on this machine): then the test should return at
/// once. Under CI that is a missing prerequisite and fails the test; elsewhere it prints a
/// loud SKIPPED line to stderr (tests/common/prereq.rs).
pub fn skip_guest(test: &str) -> bool {
    if std::env::var("OPENIB_SKIP_GUEST").as_deref() == Ok("1") {
        prereq::missing(&format!(
            "OPENIB_SKIP_GUEST=1 ({test} did not run in the SoftRoCE guest)"
        ));
        true
    } else {
        false
    }
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- harness stderr ---\n{}\n--- stdout ---\n{}",
        match out.status.code() {
            Some(c) => format!("exit status {c}"),
            None => format!("killed ({:?})", out.status),
        },
        String::from_utf8_lossy(&out.stderr).trim_end(),
        String::from_utf8_lossy(&out.stdout).trim_end(),
    )
}

/// `guest prepare`, once per test process.  Err holds the reason.
pub fn try_prepare() -> Result<(), String> {
    static PREPARED: OnceLock<Result<(), String>> = OnceLock::new();
    PREPARED
        .get_or_init(|| {
            let out = Command::new(guest_script())
                .arg("prepare")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot start {}: {e}", guest_script().display()))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(describe(
                    "the SoftRoCE guest harness failed in `guest prepare`",
                    &out,
                ))
            }
        })
        .clone()
}

/// Run `guest run ARGS -- CMD` and return CMD's output and exit status, or
/// Err with the harness's stderr when the harness itself failed.
pub fn try_guest_run(args: &[&str], cmd: &[&str]) -> Result<Output, String> {
    let _shared = GUESTS.read().unwrap_or_else(|e| e.into_inner());
    run_guest(args, cmd)
}

/// One guest boot running CMD (the part of `try_guest_run` under its hold on [`GUESTS`]).
fn run_guest(args: &[&str], cmd: &[&str]) -> Result<Output, String> {
    assert!(!cmd.is_empty(), "guest_run: empty command");
    try_prepare()?;
    let out = Command::new(guest_script())
        .arg("run")
        .args(tmp_shares())
        .args(args)
        .arg("--")
        .args(cmd)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", guest_script().display()))?;
    match out.status.code() {
        Some(HARNESS_FAILURE) | None => Err(describe(
            &format!("the SoftRoCE guest harness failed running {cmd:?} (options {args:?})"),
            &out,
        )),
        Some(_) => Ok(out),
    }
}

/// `--share DIR` for the checkout and the test binaries' target directory when they live under
/// /tmp (which the guest replaces with its own tmpfs), so CI may clone anywhere.
fn tmp_shares() -> Vec<String> {
    let mut dirs = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR"))];
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/deps/<test>: share the target directory.
        if let Some(t) = exe.ancestors().nth(3) {
            dirs.push(t.to_path_buf());
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        let Ok(d) = d.canonicalize() else { continue };
        let mut comps = d.components();
        let (Some(_root), Some(first), Some(second)) = (comps.next(), comps.next(), comps.next())
        else {
            continue;
        };
        if first.as_os_str() == "tmp" {
            let top = PathBuf::from("/tmp")
                .join(second.as_os_str())
                .display()
                .to_string();
            if !out.contains(&top) {
                out.push("--share".to_string());
                out.push(top);
            }
        }
    }
    out
}

/// Like `try_guest_run`, but panics (failing the test) on a harness failure.
pub fn guest_run(args: &[&str], cmd: &[&str]) -> Output {
    try_guest_run(args, cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// Panics unless CMD exited 0; returns its stdout.
pub fn guest_run_ok(args: &[&str], cmd: &[&str]) -> String {
    succeeded(cmd, guest_run(args, cmd))
}

/// `guest_run_ok` once no other test of this binary has a guest running, and with none
/// started until it ends: for tests whose processes spin against each other (lock contention
/// on the guest's 2 vCPUs), which run about 5 times slower, and slow their neighbour too, when
/// a second guest shares the host's 2 cores (2026-12-07: 219 s beside another guest against
/// 45 s alone). A timing matter only: what the test checks is the same either way.
pub fn guest_run_alone_ok(args: &[&str], cmd: &[&str]) -> String {
    let _alone = GUESTS.write().unwrap_or_else(|e| e.into_inner());
    succeeded(cmd, run_guest(args, cmd).unwrap_or_else(|e| panic!("{e}")))
}

/// Panics unless CMD's guest run exited 0; returns its stdout.
fn succeeded(cmd: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        describe(&format!("{cmd:?} failed in the guest"), &out)
    );
    stdout(&out)
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The lines of `text` between a line `=== NAME` and the next `=== ` line,
/// for scripts that run several checks in one boot.
pub fn section(text: &str, name: &str) -> Option<String> {
    let head = format!("=== {name}");
    let mut lines = text.lines();
    lines.by_ref().find(|l| l.trim_end() == head)?;
    Some(
        lines
            .take_while(|l| !l.starts_with("=== "))
            .map(|l| format!("{l}\n"))
            .collect(),
    )
}
