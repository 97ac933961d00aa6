//! `openib group-create`'s usage errors, on the host (no RDMA device needed): each is exit 2
//! with a message naming what is wrong, before any transport is opened.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_openib"))
        .arg("group-create")
        .args(args)
        .env("OPENIB_RUNTIME", "singleton")
        .env_remove("OPENIB_FAULT")
        .output()
        .expect("runs openib");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_usage_is_exit_2_naming_the_problem() {
    let (code, err) = run(&["--timeout", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--timeout must be a positive number"), "{err}");
    let (code, err) = run(&["--group", "4-2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("range \"4-2\" runs backwards"), "{err}");
    let (code, err) = run(&["--group", "0-3", "--random-groups", "5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}
