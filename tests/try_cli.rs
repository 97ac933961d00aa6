//! `scripts/try`, README's first command: its flags, and one whole run in the SoftRoCE guest
//! (the ports, every pair connecting through its CPC and each CPC alone, openib against
//! perftest measured in the same run), with the test build of `openib` and few iterations.

#[path = "softroce/harness.rs"]
mod harness;

use std::process::{Command, Output};

fn try_cmd(args: &[&str]) -> Output {
    Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/try"))
        .args(args)
        .output()
        .expect("scripts/try runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn bad_flags_are_refused_with_exit_status_2_naming_them() {
    for (args, says) in [
        (&["--bogus"][..], "unknown argument '--bogus'"),
        (&["--sizes", "8,x"][..], "--sizes wants N,N"),
        (&["--iters", "0"][..], "--iters wants a positive number"),
        (&["--iters"][..], "--iters needs a value"),
    ] {
        let out = try_cmd(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
}

#[test]
fn a_binary_that_is_not_there_is_refused_with_exit_status_3() {
    let out = try_cmd(&["--openib", "/work-does-not-exist/openib"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("/work-does-not-exist/openib is missing"),
        "{}",
        text(&out)
    );
}

#[test]
fn one_run_shows_the_ports_the_connections_and_openib_against_perftest() {
    if harness::skip_guest("try_cli") {
        return;
    }
    let out = try_cmd(&[
        "--openib",
        env!("CARGO_BIN_EXE_openib"),
        "--sizes",
        "8,65536",
        "--iters",
        "20",
    ]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The three steps, in order.
    let at = |s: &str| {
        stdout
            .find(s)
            .unwrap_or_else(|| panic!("no {s:?} in:\n{all}"))
    };
    assert!(
        at("== 1/3") < at("== 2/3") && at("== 2/3") < at("== 3/3"),
        "{all}"
    );
    assert!(stdout.contains("rxe0 port 1: ACTIVE"), "{all}");
    // Three ranks: every pair connected and exchanged.
    assert!(
        stdout.contains("openib ping: 3 rank(s), 3 pair(s)"),
        "{all}"
    );
    assert_eq!(
        stdout.matches("message each way ok").count(),
        3,
        "every pair of three ranks: {all}"
    );
    for cpc in ["udcm", "oob", "rdmacm"] {
        let line = stdout
            .lines()
            .find(|l| {
                l.trim_start().starts_with(cpc) && l.contains("connected, a message each way")
            })
            .unwrap_or_else(|| panic!("no line for {cpc}: {all}"));
        assert!(line.contains("0->1"), "{line}");
    }
    // The table: a row per size with both systems' numbers (no timing is judged).
    assert!(
        stdout.contains("anchors: openib,perftest; 1 round(s)"),
        "{all}"
    );
    for size in ["8", "65536"] {
        let row = stdout
            .lines()
            .find(|l| l.split('|').next().is_some_and(|c| c.trim() == size))
            .unwrap_or_else(|| panic!("no row for {size}: {all}"));
        let numbers = row
            .split(|c: char| c == '|' || c.is_whitespace())
            .filter(|w| w.parse::<f64>().is_ok_and(|v| v > 0.0))
            .count();
        assert!(numbers >= 5, "size, two latencies, two bandwidths: {row}");
    }
    assert!(stdout.contains("try: every step worked"), "{all}");
}
