//! Whether the `openib` binary the integration tests run injects faults (the cargo feature
//! `fault-injection`, which the package's dev-dependency on itself turns on for every test
//! build). The tests that set `OPENIB_FAULT` call [`require`] first: without the feature they
//! fail naming it, never pass on a binary that ignores the fault.
#![allow(dead_code)]

use std::process::Command;
use std::sync::OnceLock;

/// The feature a fault test needs.
pub const FEATURE: &str = "fault-injection";

/// `Err(why)` unless `bin` accepts `OPENIB_FAULT` (`openib config` flags it in a build without
/// fault injection).
pub fn check(bin: &str) -> Result<(), String> {
    let out = Command::new(bin)
        .args(["config", "--json", "OPENIB_FAULT"])
        .env("OPENIB_FAULT", "in-connect:0")
        .output()
        .map_err(|e| format!("{bin} config: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "{bin} config --json ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    match &v["settings"][0]["error"] {
        serde_json::Value::Null if out.status.success() => Ok(()),
        e => Err(format!(
            "{bin} was built without the cargo feature `{FEATURE}` (openib config: {e})"
        )),
    }
}

/// Panics, naming the missing feature, unless the test binary `openib` injects faults.
pub fn require(test: &str) {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(why) = BUILT.get_or_init(|| check(env!("CARGO_BIN_EXE_openib"))) {
        panic!("{test} needs fault injection: {why}");
    }
}
