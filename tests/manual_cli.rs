//! `openib completions SHELL` and `openib man`: generated from the clap definition, so they
//! name the real subcommands and flags; docs/CLI.md documents both.

use std::process::Command;

fn openib(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(args)
        .output()
        .unwrap()
}

/// The subcommands `openib --help` lists (clap's help, a separate rendering of the same
/// definition): the lines of its "Commands:" section.
fn subcommands() -> Vec<String> {
    let o = openib(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8(o.stdout).unwrap();
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(String::from)
        .collect();
    for want in [
        "ports",
        "bench",
        "stress",
        "modex",
        "sim",
        "ompi",
        "completions",
        "man",
    ] {
        assert!(list.iter().any(|n| n == want), "{want} not in {list:?}");
    }
    list
}

#[test]
fn completions_name_every_subcommand_and_real_flags_for_every_shell() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = openib(&["completions", shell]);
        assert!(
            o.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = String::from_utf8(o.stdout).unwrap();
        for s in &subs {
            assert!(text.contains(s.as_str()), "{shell}: no subcommand {s}");
        }
        // Flags of nested subcommands and a value list.
        for flag in ["sizes", "laps", "ppn", "detect-delay", "fixture"] {
            assert!(text.contains(flag), "{shell}: no flag --{flag}");
        }
        assert!(!text.contains("--no-such-flag"));
    }
}

#[test]
fn the_bash_completion_is_valid_bash() {
    let o = openib(&["completions", "bash"]);
    let dir = std::env::temp_dir().join(format!("openib-compl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("openib.bash");
    std::fs::write(&f, &o.stdout).unwrap();
    let check = Command::new("bash").arg("-n").arg(&f).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        check.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn an_unknown_shell_is_bad_usage() {
    let o = openib(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tcsh"));
}

#[test]
fn the_man_page_lists_every_subcommand_and_global_flag() {
    let o = openib(&["man"]);
    assert!(o.status.success());
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.contains(".TH openib 1"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"));
    assert!(page.contains("\\-\\-verbose"));
    for s in subcommands() {
        assert!(
            page.contains(&format!("openib\\-{}(1)", s.replace('-', "\\-"))),
            "no openib-{s}(1) in the page"
        );
    }
}

#[test]
fn a_subcommand_page_has_its_flags() {
    let o = openib(&["man", "bench"]);
    assert!(o.status.success());
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.contains(".TH openib-bench 1"), "{page}");
    for flag in [
        "\\-\\-sizes",
        "\\-\\-iters",
        "\\-\\-laps",
        "\\-\\-no\\-sendi",
    ] {
        assert!(page.contains(flag), "no {flag}");
    }
    let o = openib(&["man", "modex", "size"]);
    assert!(o.status.success());
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.contains(".TH openib-modex-size 1"));
    assert!(page.contains("\\-\\-ppn"));
    assert!(
        page.contains("openib 0."),
        "the source line names openib and its version"
    );
}

#[test]
fn an_unknown_man_page_is_bad_usage_naming_it() {
    let o = openib(&["man", "modex", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("\"nope\"") && err.contains("openib modex"),
        "{err}"
    );
    assert!(err.contains("size"), "names the known ones: {err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn man_dir_writes_a_page_per_subcommand() {
    let dir = std::env::temp_dir().join(format!("openib-man-{}", std::process::id()));
    let o = openib(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut want = vec!["openib.1".to_string(), "openib-modex-size.1".into()];
    want.extend(subcommands().iter().map(|s| format!("openib-{s}.1")));
    for f in &want {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        assert!(text.contains(".TH "), "{f} missing or empty");
    }
    assert!(!dir.join("openib-help.1").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_doc_documents_completions_and_man() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
    assert!(doc.contains("## `openib completions` and `openib man`"));
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(doc.contains(shell), "docs/CLI.md: {shell}");
    }
    assert!(doc.contains("openib man --dir DIR"));
}
