//! Fault injection is built only with the cargo feature `fault-injection` (issue 27): every
//! test build has it (the package's dev-dependency on itself), a default build has none in it
//! and refuses `OPENIB_FAULT` by name.
//!
//! The default build is the one `scripts/test` makes with `cargo build -p openib --bin openib`
//! (no dev-dependencies, so no feature) and hands over in `OPENIB_TEST_DEFAULT_BIN`; without
//! it the test fails under CI (`CI` set) and elsewhere skips, saying so on stderr.

#[path = "common/fault_feature.rs"]
mod fault_feature;

use std::io::Write;
use std::process::Command;

/// Text of [`openib::fault::point`]'s report: in a binary that can inject faults, absent from
/// one that cannot (no call of it survives the `cfg`).
const POINT_TEXT: &[u8] = b"OPENIB_FAULT: rank ";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_test_builds_inject_faults() {
    // At compile time: the library of a test build has the feature.
    const {
        assert!(
            openib::fault::BUILT,
            "the test build lacks the cargo feature `fault-injection`"
        )
    };
    let bin = env!("CARGO_BIN_EXE_openib");
    fault_feature::check(bin).unwrap();
    let bytes = std::fs::read(bin).unwrap();
    assert!(contains(&bytes, POINT_TEXT), "{bin} lacks fault::point");
    // In-process: a set OPENIB_FAULT is accepted.
    std::env::set_var("OPENIB_FAULT", "in-connect:0");
    let ok = openib::fault::check_available();
    std::env::remove_var("OPENIB_FAULT");
    ok.unwrap();
}

#[test]
fn a_default_build_refuses_openib_fault_by_name() {
    let Some(bin) = std::env::var_os("OPENIB_TEST_DEFAULT_BIN") else {
        let why = "OPENIB_TEST_DEFAULT_BIN is not set (scripts/test builds a default `openib` \
                   with `cargo build -p openib --bin openib` and sets it)";
        if std::env::var_os("CI").is_some() {
            panic!("{why}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: a_default_build_refuses_openib_fault_by_name: {why}"
        );
        return;
    };
    let bin = bin.to_str().expect("a UTF-8 path").to_string();
    let bytes = std::fs::read(&bin).unwrap_or_else(|e| panic!("{bin}: {e}"));
    assert!(
        !contains(&bytes, POINT_TEXT),
        "{bin}: a fault point is compiled into the default build"
    );
    // Every command but `config` refuses to start, naming the setting, its value and the
    // missing feature.
    for args in [&["ping"][..], &["run", "-n", "2", "--", "true"][..]] {
        let out = Command::new(&bin)
            .args(args)
            .env("OPENIB_FAULT", "in-connect:1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("OPENIB_FAULT=\"in-connect:1\" (from the environment)")
                && err.contains("no fault injection")
                && err.contains("`fault-injection`"),
            "{args:?}: {err}"
        );
    }
    // `openib config` shows it, flagged.
    let out = Command::new(&bin)
        .args(["config", "--json", "OPENIB_FAULT"])
        .env("OPENIB_FAULT", "lie-seq:0")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["settings"][0];
    assert_eq!(row["value"], "lie-seq:0", "{v}");
    assert!(
        row["error"]
            .as_str()
            .is_some_and(|e| e.contains("no fault injection")),
        "{v}"
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(fault_feature::check(&bin).is_err());
    // Unset (or blank), nothing is refused.
    let out = Command::new(&bin)
        .args(["config", "OPENIB_FAULT"])
        .env("OPENIB_FAULT", " ")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
