//! The SoftRoCE guest harness's boot watch (tests/softroce/guest, `boot_decision`), without a
//! guest: `guest boot-decision CONSOLE ELAPSED CONSOLE_TIMEOUT BOOT_TIMEOUT ATTEMPT` says what
//! the watch does with a console file after ELAPSED seconds. A console still empty after the
//! console deadline boots once more (a TCG guest that never started); a console with output
//! is never retried: it fails at the boot deadline as before.

use std::path::{Path, PathBuf};
use std::process::Command;

fn guest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/softroce/guest")
}

/// The decision for `console` after `elapsed` s (console deadline 90 s, boot deadline 180 s).
fn decide(console: &Path, elapsed: u32, attempt: u32) -> String {
    let out = Command::new(guest())
        .arg("boot-decision")
        .arg(console)
        .args([
            elapsed.to_string(),
            "90".into(),
            "180".into(),
            attempt.to_string(),
        ])
        .output()
        .expect("run tests/softroce/guest");
    assert!(
        out.status.success(),
        "guest boot-decision failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A fresh scratch directory of this test under the target directory.
fn scratch(test: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("guest_boot")
        .join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn console(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn an_empty_console_past_its_deadline_boots_once_more_then_fails() {
    let dir = scratch("empty");
    let empty = console(&dir, "empty.log", "");
    let missing = dir.join("not-yet.log");
    // Before the console deadline: wait (a TCG kernel prints nothing for a while at loglevel 4).
    assert_eq!(decide(&empty, 10, 1), "wait");
    assert_eq!(decide(&missing, 89, 1), "wait");
    // Past it, on the first attempt: boot again; on the second: fail.
    assert_eq!(decide(&empty, 90, 1), "retry");
    assert_eq!(decide(&missing, 120, 1), "retry");
    assert_eq!(decide(&empty, 90, 2), "fail-empty");
}

#[test]
fn a_console_with_output_is_never_retried() {
    let dir = scratch("output");
    let booting = console(
        &dir,
        "booting.log",
        "openib-guest: [3.10s] init started\nopenib-guest: [3.90s] modules loaded\n",
    );
    // Printed something, not started yet: wait until the boot deadline, then fail at once.
    assert_eq!(decide(&booting, 90, 1), "wait");
    assert_eq!(decide(&booting, 179, 1), "wait");
    assert_eq!(decide(&booting, 180, 1), "fail-boot");
    // A setup failure printed on the console: the same (no second boot hides it).
    let fatal = console(
        &dir,
        "fatal.log",
        "openib-guest: [3.10s] init started\nopenib-guest: [4.00s] FATAL: insmod rdma_rxe.ko failed\n",
    );
    assert_eq!(decide(&fatal, 180, 1), "fail-boot");
    // A kernel panic before init: output, so no retry either.
    let panic = console(&dir, "panic.log", "Kernel panic - not syncing: VFS\n");
    assert_eq!(decide(&panic, 100, 1), "wait");
    assert_eq!(decide(&panic, 200, 1), "fail-boot");
}

#[test]
fn a_started_command_is_started_whatever_the_clock() {
    let dir = scratch("started");
    let started = console(
        &dir,
        "started.log",
        "openib-guest: [3.10s] init started\nopenib-guest: [9.50s] command started\n",
    );
    assert_eq!(decide(&started, 1, 1), "started");
    assert_eq!(decide(&started, 500, 2), "started");
}

#[test]
fn bad_arguments_are_refused_by_name() {
    let out = Command::new(guest())
        .args(["boot-decision", "/nonexistent", "ten", "90", "180", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'ten' is not a number"), "{err}");
}
