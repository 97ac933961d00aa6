//! Progress bars (indicatif) of long commands: drawn on a terminal's stderr, never when
//! stderr is not a terminal or with `--json` (the output is then exactly what it was without
//! them). `openib sim fence --seeds N` here; `openib bench` and `openib stress` use the same
//! `cli::progress` on rank 0, and their guest tests (not terminals) parse their output as before.

#[path = "common/prereq.rs"]
mod prereq;

use std::process::{Command, Output};

fn openib(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(args)
        .output()
        .unwrap()
}

const FENCE: [&str; 6] = ["sim", "fence", "--procs", "48", "--failures", "3"];

fn fence(extra: &[&str]) -> Output {
    let mut args = FENCE.to_vec();
    args.extend(extra);
    openib(&args)
}

#[test]
fn many_seeds_off_a_terminal_print_exactly_the_single_seed_runs() {
    for json in [false, true] {
        let j: &[&str] = if json { &["--json"] } else { &[] };
        let mut args = vec!["--seed", "5", "--seeds", "4"];
        args.extend(j);
        let many = fence(&args);
        assert!(
            many.status.success(),
            "{}",
            String::from_utf8_lossy(&many.stderr)
        );
        assert!(
            many.stderr.is_empty(),
            "nothing on stderr off a terminal: {:?}",
            String::from_utf8_lossy(&many.stderr)
        );
        let mut want = Vec::new();
        for seed in 5..9 {
            let s = seed.to_string();
            let mut args = vec!["--seed", s.as_str()];
            args.extend(j);
            let one = fence(&args);
            assert!(one.status.success());
            assert!(one.stderr.is_empty());
            want.extend(one.stdout);
        }
        assert_eq!(
            String::from_utf8_lossy(&many.stdout),
            String::from_utf8_lossy(&want),
            "json {json}"
        );
        assert_eq!(String::from_utf8_lossy(&many.stdout).lines().count(), 4);
    }
}

#[test]
fn bad_seed_counts_are_bad_usage() {
    assert_eq!(fence(&["--seeds", "0"]).status.code(), Some(2));
    let o = fence(&["--seed", "18446744073709551615", "--seeds", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--seeds"));
}

/// Runs `args` with stdout and stderr on a pseudo-terminal (util-linux `script`); what the
/// terminal received.
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let found = Command::new("script").arg("--version").output().is_ok();
    if !prereq::have(
        found,
        "script (util-linux, Debian's bsdutils) is not installed",
    ) {
        return None;
    }
    let cmd = std::iter::once(env!("CARGO_BIN_EXE_openib"))
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .env("COLUMNS", "160")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn a_terminal_shows_the_bar_and_json_does_not() {
    let mut args = FENCE.to_vec();
    args.extend(["--seeds", "6"]);
    let Some(tty) = on_a_terminal(&args) else {
        return;
    };
    assert!(tty.contains("openib sim fence ["), "no bar: {tty:?}");
    assert!(tty.contains("/6"), "no count: {tty:?}");
    assert_eq!(tty.matches("agreed in").count(), 6, "{tty:?}");
    args.push("--json");
    let tty = on_a_terminal(&args).unwrap();
    assert!(
        !tty.contains("openib sim fence ["),
        "a bar with --json: {tty:?}"
    );
    assert_eq!(tty.matches("\"agreed\":true").count(), 6, "{tty:?}");
}

#[test]
fn the_docs_describe_the_progress_bars() {
    let cli = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
    assert!(cli.contains("## Progress"));
    for c in [
        "`openib bench`",
        "`openib stress`",
        "`openib sim fence --seeds N`",
    ] {
        assert!(cli.contains(c), "docs/CLI.md: {c}");
    }
    let rt =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/RUNTIME.md")).unwrap();
    assert!(rt.contains("[--seeds N]"));
}
