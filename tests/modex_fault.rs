//! Fail-stop ranks during the modex exchange under `openib run` (issue 7): with
//! `OPENIB_FAULT=<point>:<ranks>` one or two of 8 ranks SIGKILL themselves before their put,
//! after it (before the fence) or inside the fence. Every survivor must exit 0 having rebuilt
//! and checked every other survivor, name the same failed set, and the lowest survivor's JSON
//! must list exactly the survivors and `"failed"`. Each case runs 20 times (different victims,
//! the first root among them) to catch races. Host only: fixtures, no RDMA device.
//!
//! Timing decides nothing but the hang bound ([`HANG_BOUND`], far above the ~0.1 s a run
//! takes here).

#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "common/victims.rs"]
mod victims;

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 20;
const NP: u32 = 8;
/// A run that takes longer than this hangs (the launcher kills it at `--timeout` anyway).
const HANG_BOUND: Duration = Duration::from_secs(30);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_openib")
}

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/ib-dual-port.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `openib run -n 8 --nodes N -- openib modex exchange --json [--mode M]` with `point` at
/// `dead`; checks everything and returns how long the run took.
fn one_run(point: &str, dead: &[u32], mode: Option<&str>, nodes: u32) -> Duration {
    let ranks: Vec<String> = dead.iter().map(u32::to_string).collect();
    let fault = format!("{point}:{}", ranks.join(","));
    fault_feature::require("modex_fault");
    let mut c = Command::new(bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENIB_") || k.starts_with("PMIX_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
    c.env("OPENIB_FAULT", &fault).args([
        "run",
        "-n",
        &NP.to_string(),
        "--nodes",
        &nodes.to_string(),
        "--timeout",
        "60",
        "--",
        bin(),
        "modex",
        "exchange",
        "--json",
        "--fixture",
        &fixture(),
        "--timeout",
        "20",
    ]);
    if let Some(m) = mode {
        c.args(["--mode", m]);
    }
    let t0 = Instant::now();
    let o = c.output().expect("start openib run");
    let took = t0.elapsed();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let ctx = format!(
        "OPENIB_FAULT={fault}: status {:?}\nstdout: {out}\nstderr: {err}",
        o.status
    );
    assert!(took < HANG_BOUND, "took {took:?}: {ctx}");
    // The launcher's status is the worst child's: the victims' SIGKILL (128 + 9).
    assert_eq!(o.status.code(), Some(137), "{ctx}");
    // Only the victims ended badly; every survivor exited 0.
    let bad: BTreeSet<u32> = err
        .lines()
        .filter_map(|l| l.strip_prefix("openib run: rank "))
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("garbled line {l:?}: {ctx}"))
        })
        .collect();
    assert_eq!(bad, dead.iter().copied().collect(), "{ctx}");
    for &d in dead {
        assert!(
            err.contains(&format!("openib run: rank {d} (pid"))
                && err.contains("was killed by signal 9"),
            "{ctx}"
        );
    }
    let survivors: Vec<u32> = (0..NP).filter(|r| !dead.contains(r)).collect();
    // Every survivor names the same failed set: the victims.
    let want = format!("{dead:?}");
    for &r in &survivors {
        let line =
            format!("openib modex exchange: rank {r}: survivors agree; failed rank(s) {want}");
        assert!(err.lines().any(|l| l == line), "rank {r}: {ctx}");
    }
    assert_eq!(
        err.matches("survivors agree").count(),
        survivors.len(),
        "{ctx}"
    );
    // The lowest survivor's table: exactly the survivors, each checked by every survivor.
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {ctx}"));
    assert_eq!(v["backend"], "embedded", "{ctx}");
    assert_eq!(v["size"], NP as u64, "{ctx}");
    assert_eq!(v["reporter"], survivors[0] as u64, "{ctx}");
    let failed: Vec<u32> = v["failed"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"failed\": {ctx}"))
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(failed, dead, "{ctx}");
    let peers = v["peers"].as_array().unwrap();
    let listed: Vec<u32> = peers
        .iter()
        .map(|p| p["rank"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(listed, survivors, "{ctx}");
    // At most one leader per node; with the gathered mode a dead leader's node elects the
    // next live rank, in the other modes a leader that died after its blob got through
    // stays the publisher (and is not listed).
    let mut by_node: std::collections::BTreeMap<&str, usize> = Default::default();
    for p in peers.iter().filter(|p| p["leader"] == true) {
        *by_node.entry(p["node"].as_str().unwrap()).or_default() += 1;
    }
    assert!(by_node.values().all(|&n| n == 1), "{ctx}");
    if mode.is_none() {
        let nodes_listed: BTreeSet<&str> =
            peers.iter().map(|p| p["node"].as_str().unwrap()).collect();
        assert_eq!(
            by_node.len(),
            nodes_listed.len(),
            "every node has a live leader: {ctx}"
        );
    }
    for p in peers {
        assert_eq!(
            p["ports"],
            serde_json::json!(["mlx5_0:1", "mlx5_0:2"]),
            "{ctx}"
        );
    }
    took
}

/// Runs one case `RUNS` times and prints the times (the test's output with --nocapture).
fn case(point: &str, two: bool) {
    let mut times = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        times.push(one_run(point, &victims::victims(NP, two, run), None, 1));
    }
    times.sort();
    eprintln!(
        "{point}, {} victim(s): {RUNS} runs, median {:?}, max {:?}",
        if two { 2 } else { 1 },
        times[RUNS / 2],
        times[RUNS - 1]
    );
}

#[test]
fn one_rank_dies_before_its_put() {
    case("before-put", false);
}

#[test]
fn two_ranks_die_before_their_put() {
    case("before-put", true);
}

#[test]
fn one_rank_dies_after_its_put() {
    case("after-put", false);
}

#[test]
fn two_ranks_die_after_their_put() {
    case("after-put", true);
}

#[test]
fn one_rank_dies_inside_the_fence() {
    case("in-fence", false);
}

#[test]
fn two_ranks_die_inside_the_fence() {
    case("in-fence", true);
}

/// The other modes (one fence; on the embedded runtime a second, non-collecting one) and
/// emulated nodes: each point once per run, modes, node counts and victim counts rotating.
#[test]
fn other_modes_and_emulated_nodes() {
    let mut times = Vec::new();
    for run in 0..RUNS {
        let mode = ["per-process", "on-demand"][run % 2];
        let nodes = 1 + (run / 2) as u32 % 3;
        for point in ["before-put", "after-put", "in-fence"] {
            times.push(one_run(
                point,
                &victims::victims(NP, run % 4 >= 2, run),
                Some(mode),
                nodes,
            ));
        }
    }
    times.sort();
    eprintln!(
        "other modes and nodes: {} runs, median {:?}, max {:?}",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

#[test]
fn victim_sets_cover_rank_0_and_are_distinct_pairs() {
    assert!((0..RUNS).any(|r| victims::victims(NP, false, r) == [0]));
    assert!((0..RUNS).any(|r| victims::victims(NP, true, r).contains(&0)));
    for r in 0..RUNS {
        let v = victims::victims(NP, true, r);
        assert_eq!(v.len(), 2);
        assert!(v[0] < v[1] && v[1] < NP, "{v:?}");
    }
}
