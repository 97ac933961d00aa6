//! The one rule for a test whose prerequisite is missing (a compiler, libpmix, mpirun, the
//! SoftRoCE guest, a machine without an RDMA device, ...):
//!
//! - under CI (the `CI` environment variable set to anything but empty, `0` or `false`, as CI
//!   services set it) the test FAILS, naming what is missing;
//! - elsewhere it is skipped, with a `SKIPPED:` line written straight to the process's stderr
//!   (not captured by libtest, so it shows without `--nocapture`).
//!
//! A prerequisite that is present but broken (the test server does not compile, the guest
//! harness fails) is not "missing": that is a plain test failure, never a skip.
//!
//! Use it from a test file with
//!
//! ```ignore
//! #[path = "common/prereq.rs"]
//! mod prereq;
//!
//! let Some(server) = prereq::require(build_server()) else { return };
//! if !prereq::have(mpirun_found(), "mpirun is not installed") { return; }
//! ```
#![allow(dead_code)]

use std::io::Write;

/// Whether this run is CI's: `CI` set to anything but empty, `0` or `false`.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("this test")
        .to_string()
}

/// A prerequisite is missing (`why` says which and how to get it): panics under CI, else
/// writes `SKIPPED: <test>: <why>` to stderr and returns; the caller then returns at once.
pub fn missing(why: &str) {
    let test = test_name();
    if under_ci() {
        panic!("prerequisite missing for {test}: {why} (CI is set: a missing prerequisite fails)");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {why} (set CI=1 to make this a failure)"
    );
}

/// `true` when `present`; otherwise [`missing`]`(why)` and `false` (skip the test).
pub fn have(present: bool, why: &str) -> bool {
    if !present {
        missing(why);
    }
    present
}

/// Why something the test needs cannot be had.
#[derive(Debug, Clone)]
pub enum Unmet {
    /// Not on this machine (a package not installed): fails under CI, skips elsewhere.
    Missing(String),
    /// Present but broken (e.g. a compile error in a test's C source): always a failure.
    Broken(String),
}

/// The value, or `None` after [`missing`] for [`Unmet::Missing`]; panics for
/// [`Unmet::Broken`] whether or not under CI.
pub fn require<T>(r: Result<T, Unmet>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Unmet::Missing(why)) => {
            missing(&why);
            None
        }
        Err(Unmet::Broken(why)) => panic!("{why}"),
    }
}
