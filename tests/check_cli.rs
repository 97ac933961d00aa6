//! `openib check` on fixture documents: which pairs connect, the winner and why, and advice.

use serde_json::Value;
use std::process::Command;

fn openib(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openib"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for k in [
        "OPENIB_CPC_INCLUDE",
        "OPENIB_CPC_EXCLUDE",
        "OPENIB_CPC_PRIORITY",
        "OPENIB_IF_INCLUDE",
        "OPENIB_IF_EXCLUDE",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c.output().unwrap()
}

/// `openib ports --json` of a fixture, with extra environment, written to a temp file.
fn doc(dir: &std::path::Path, name: &str, fixture: &str, env: &[(&str, &str)]) -> String {
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            &format!("tests/fixtures/{fixture}"),
        ],
        env,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = dir.join(name);
    std::fs::write(&p, &o.stdout).unwrap();
    p.display().to_string()
}

fn check(a: &str, b: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["check", a, b, "--json"];
    args.extend_from_slice(extra);
    let o = openib(&args, &[]);
    (
        o.status.code().unwrap(),
        serde_json::from_slice(&o.stdout).expect("JSON"),
    )
}

#[test]
fn scenarios() {
    let dir = std::env::temp_dir().join(format!("openib-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ib = doc(&dir, "ib.json", "ib-dual-port.json", &[]);
    let roce = doc(&dir, "roce.json", "roce.json", &[]);
    let only_udcm = doc(
        &dir,
        "udcm.json",
        "ib-dual-port.json",
        &[("OPENIB_CPC_INCLUDE", "udcm")],
    );
    let only_rdmacm = doc(
        &dir,
        "rdmacm.json",
        "ib-dual-port.json",
        &[("OPENIB_CPC_INCLUDE", "rdmacm")],
    );
    let two_subnets = doc(&dir, "two.json", "ib-two-subnets.json", &[]);

    // Same fabric: both ports pair, udcm (63) wins.
    let (code, v) = check(&ib, &ib, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["pairs"].as_array().unwrap().len(), 2);
    assert!(v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["cpc"] == "udcm"));

    // Symmetric: swapping the two documents changes nothing but the sides.
    let (_, v1) = check(&ib, &only_rdmacm, &[]);
    let (_, v2) = check(&only_rdmacm, &ib, &[]);
    assert_eq!(v1["pairs"][0]["cpc"], "rdmacm");
    assert_eq!(v1["pairs"][0]["cpc"], v2["pairs"][0]["cpc"]);

    // Disjoint CPC lists: reachable, but no CPC; the advice names the fix.
    let (code, v) = check(&only_udcm, &only_rdmacm, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["connectable"], false);
    assert!(v["pairs"][0]["cpc"].is_null());
    let why = v["pairs"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("no common CPC") && why.contains("OPENIB_CPC_INCLUDE"),
        "{why}"
    );

    // IB against RoCE: nothing reachable, and it says so.
    let (code, v) = check(&ib, &roce, &[]);
    assert_eq!(code, 1);
    assert!(v["advice"][0].as_str().unwrap().contains("share no"), "{v}");
    let (code, _) = check(&ib, &roce, &["--allow-cross-subnet"]);
    assert_eq!(code, 1, "InfiniBand never pairs with Ethernet");

    // Different IB subnets connect only when crossing subnets is allowed.
    let (code, _) = check(&ib, &two_subnets, &[]);
    assert_eq!(code, 1);
    let (code, v) = check(&ib, &two_subnets, &["--allow-cross-subnet"]);
    assert_eq!(code, 0, "{v}");

    // Garbage input is a clear error.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"nope\": 1}").unwrap();
    let o = openib(&["check", bad.to_str().unwrap(), &ib], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no \"ports\" array"));
    std::fs::remove_dir_all(&dir).ok();
}
