//! What every launcher's run of `openib modex exchange --json` is checked against (tests/
//! modex_exchange.rs under mpirun and `openib run`, tests/slurm.rs under srun): rank 0's JSON
//! rebuilds every peer, with one leader per node, and each peer's ports and CPCs are those
//! `openib ports --json` derives from the same fixture.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};

/// The `openib` binary of this test build.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_openib")
}

/// A fixture of tests/fixtures/.
pub fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `c` without any inherited `OPENIB_*`, `PMIX_*` or `OMPI_*` setting, allowed to run mpirun as
/// root.
pub fn clean(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENIB_") || k.starts_with("PMIX_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
}

/// Runs `c` (cleaned) and panics, with its output, unless it exits 0.
pub fn run(c: &mut Command) -> Output {
    let o = clean(c).output().expect("start");
    assert!(
        o.status.success(),
        "{:?} failed ({:?})\nstdout: {}\nstderr: {}",
        c,
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The one JSON document of `o`'s stdout.
pub fn doc(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// The usable ports and CPC names a fixture gives, as `openib ports --json` derives them.
pub fn expected(fix: &str, include: Option<&str>) -> (Vec<String>, BTreeSet<String>) {
    let mut c = Command::new(bin());
    c.args(["ports", "--json", "--fixture", fix]);
    if let Some(i) = include {
        c.args(["--include", i]);
    }
    let v = doc(&run(&mut c));
    let mut ports = Vec::new();
    let mut cpcs = BTreeSet::new();
    for p in v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["usable"] == true)
    {
        ports.push(p["name"].as_str().unwrap().to_string());
        for c in p["cpcs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["usable"] == true)
        {
            cpcs.insert(c["name"].as_str().unwrap().to_string());
        }
    }
    (ports, cpcs)
}

/// `size` peers on `nodes` distinct nodes, one leader per node, and leaders putting more than
/// the other processes of their node.
pub fn check_peers(v: &Value, size: usize, nodes: usize) {
    assert_eq!(v["size"], size as u64, "{v}");
    let peers = v["peers"].as_array().unwrap();
    assert_eq!(peers.len(), size);
    let leaders: Vec<u64> = peers
        .iter()
        .filter(|p| p["leader"] == true)
        .map(|p| p["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(leaders.len(), nodes, "one leader per node: {leaders:?}");
    let node_names: BTreeSet<&str> = peers.iter().map(|p| p["node"].as_str().unwrap()).collect();
    assert_eq!(node_names.len(), nodes);
    for p in peers {
        let put = p["put_bytes"].as_u64().unwrap();
        assert!(
            put > 0 || size == 1 || peers.iter().filter(|q| q["node"] == p["node"]).count() == 1,
            "{p}"
        );
        if p["leader"] == true {
            // Leaders put the node blob; others only their proc blob (smaller).
            for q in peers
                .iter()
                .filter(|q| q["node"] == p["node"] && q["leader"] == false)
            {
                assert!(put > q["put_bytes"].as_u64().unwrap(), "leader {p} vs {q}");
            }
        }
    }
}

/// The ports rank 0 rebuilt for `rank`.
pub fn peer_ports(v: &Value, rank: usize) -> Vec<String> {
    v["peers"][rank]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The CPCs rank 0 rebuilt for `rank`.
pub fn peer_cpcs(v: &Value, rank: usize) -> BTreeSet<String> {
    v["peers"][rank]["cpcs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// A whole run of `size` ranks on `nodes` nodes under a PMIx launcher, in `mode`, with every
/// rank on fixture `fix`: backend and mode as asked, [`check_peers`], and every peer's ports
/// and CPCs those of the fixture.
pub fn check_pmix_run(v: &Value, fix: &str, mode: &str, size: usize, nodes: usize) {
    let (ports, cpcs) = expected(fix, None);
    assert_eq!(v["backend"], "pmix", "{v}");
    assert_eq!(v["mode"], mode, "{v}");
    check_peers(v, size, nodes);
    for r in 0..size {
        assert_eq!(peer_ports(v, r), ports, "rank {r} in {mode}");
        assert_eq!(peer_cpcs(v, r), cpcs, "rank {r} in {mode}");
    }
}
