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

/// The transport's own planning (the node blob each process builds, its first usable port,
/// `openib::ping::transport_pair` and the winner rule) for processes on fixture nodes `a`
/// and `b`: (A's port, B's port, the CPC), or None when the ports do not pair.
fn transport_plan(a: &str, b: &str, cross: bool) -> Option<(String, String, Option<String>)> {
    use openib_cpc::{select, Advert, CpcConfig, HostFacts, PortView};
    use openib_ports::{derive, DeriveConfig, Filter, Topology};
    let side = |f: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(f);
        let topo = Topology::from_fixture_file(&path).unwrap();
        let d = derive(&topo, &DeriveConfig::default());
        let all = derive(
            &topo,
            &DeriveConfig {
                filter: Filter::All,
                ..DeriveConfig::default()
            },
        );
        let host = HostFacts {
            rdmacm: Ok(()),
            ucm: false,
            kernel: "test".into(),
        };
        let node =
            openib::modex::build::build_node(&all, &topo, 0, &host, &CpcConfig::default()).unwrap();
        let name = d.usable().next().unwrap().name();
        let i = node.port_names.iter().position(|n| *n == name).unwrap();
        let p = &node.blob.ports[i];
        let view = PortView {
            index: i,
            subnet_id: p.subnet_id,
            link_layer: p.link_layer.wire(),
            mtu: openib_ports::Mtu::from_enum(p.mtu).unwrap(),
        };
        let ads: Vec<Advert> = p
            .cpcs
            .iter()
            .map(|r| Advert {
                index: r.cpc,
                priority: r.priority,
            })
            .collect();
        (name, view, ads)
    };
    let (na, va, aa) = side(a);
    let (nb, vb, ab) = side(b);
    openib::ping::transport_pair(&[va], &[vb], cross)?;
    let cpc = select(&aa, &ab)
        .and_then(|w| openib_cpc::CpcId::from_index(w.index))
        .map(|c| c.name().to_string());
    Some((na, nb, cpc))
}

/// `openib check` reports the pair and CPC the transport's planning picks (the same function),
/// with and without crossing subnets; `connectable` follows the transport.
#[test]
fn check_reports_what_the_transport_does() {
    let dir = std::env::temp_dir().join(format!("openib-check-t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("ib-dual-port.json", "ib-dual-port.json"),
        ("ib-dual-port.json", "ib-two-subnets.json"),
        ("ib-two-subnets.json", "ib-two-hcas-default-prefix.json"),
        ("roce.json", "roce.json"),
        ("ib-dual-port.json", "roce.json"),
    ];
    let mut crossed = false;
    for (fa, fb) in cases {
        let a = doc(&dir, &format!("a-{fa}"), fa, &[]);
        let b = doc(&dir, &format!("b-{fb}"), fb, &[]);
        for cross in [false, true] {
            let extra: &[&str] = if cross {
                &["--allow-cross-subnet"]
            } else {
                &[]
            };
            let (code, v) = check(&a, &b, extra);
            let t = &v["transport"];
            let want = transport_plan(fa, fb, cross);
            let what = format!("{fa} vs {fb}, cross {cross}: {v}");
            match &want {
                Some((pa, pb, cpc)) => {
                    assert_eq!(t["reachable"], true, "{what}");
                    assert_eq!(t["a_port"], pa.as_str(), "{what}");
                    assert_eq!(t["b_port"], pb.as_str(), "{what}");
                    assert_eq!(t["cpc"].as_str(), cpc.as_deref(), "{what}");
                    // Exactly the transport's row is marked.
                    let marked: Vec<&Value> = v["pairs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|r| r["transport"] == true)
                        .collect();
                    assert_eq!(marked.len(), 1, "{what}");
                    assert_eq!(marked[0]["a_port"], pa.as_str(), "{what}");
                    assert_eq!(marked[0]["b_port"], pb.as_str(), "{what}");
                    if cross && transport_plan(fa, fb, false).is_none() {
                        crossed = true;
                    }
                }
                None => {
                    assert_eq!(t["reachable"], false, "{what}");
                    assert!(t["cpc"].is_null(), "{what}");
                }
            }
            let connects = want.as_ref().is_some_and(|w| w.2.is_some());
            assert_eq!(v["connectable"], connects, "{what}");
            assert_eq!(code, if connects { 0 } else { 1 }, "{what}");
        }
    }
    assert!(crossed, "some case connects only across subnets");
    std::fs::remove_dir_all(&dir).ok();
}
