//! Fail-stop ranks during the modex exchange under `openib run` (issue 7): with
//! `OPENIB_FAULT=<point>:<ranks>` one or two of 8 ranks SIGKILL themselves before their put,
//! after it (before the fence) or inside the fence. Every survivor must exit 0 having rebuilt
//! and checked every other survivor, name the same failed set, and the lowest survivor's JSON
//! must list exactly the survivors and `"failed"`. Each case runs 20 times (different victims,
//! the first root among them) to catch races. Host only: fixtures, no RDMA device.
//!
//! The cases and the checks they share with tests/pmix_faults.rs are in
//! tests/common/fault_cases.rs; here is what `openib run` adds: its exit status and rank lines,
//! and one live leader per (emulated) node. Timing decides nothing but the hang bound
//! ([`fault_cases::HANG_BOUND`], far above the ~0.1 s a run takes here).

#[path = "common/fault_cases.rs"]
mod fault_cases;
#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "common/victims.rs"]
mod victims;

use fault_cases::{bin, Launcher, Outcome, NP, RUNS};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Instant;

/// `openib run -n 8 --nodes N --timeout 60 -- openib modex exchange --json ... [--mode M]`.
struct Embedded;

impl Launcher for Embedded {
    const TEST: &'static str = "modex_fault";
    const BACKEND: &'static str = "embedded";
    const EMULATES_NODES: bool = true;

    fn launch(&self, fault: Option<&str>, mode: Option<&str>, nodes: u32) -> Outcome {
        let mut c = Command::new(bin());
        fault_cases::clean_env(&mut c);
        if let Some(f) = fault {
            c.env("OPENIB_FAULT", f);
        }
        c.args([
            "run",
            "-n",
            &NP.to_string(),
            "--nodes",
            &nodes.to_string(),
            "--timeout",
            "60",
            "--",
            bin(),
        ])
        .args(fault_cases::exchange_args());
        if let Some(m) = mode {
            c.args(["--mode", m]);
        }
        let t0 = Instant::now();
        let o = c.output().expect("start openib run");
        Outcome {
            code: o.status.code(),
            took: t0.elapsed(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn check_endings(&self, o: &Outcome, dead: &[u32], ctx: &str) {
        let err = &o.stderr;
        // The launcher's status is the worst child's: the victims' SIGKILL (128 + 9).
        assert_eq!(o.code, Some(137), "{ctx}");
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
    }

    fn check_peers(&self, peers: &[Value], mode: Option<&str>, ctx: &str) {
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
    }
}

/// One case of tests/common/fault_cases.rs under `openib run`.
fn under_openib_run(point: &str, two: bool) {
    fault_cases::case(&Embedded, point, two);
}

#[test]
fn one_rank_dies_before_its_put() {
    under_openib_run("before-put", false);
}

#[test]
fn two_ranks_die_before_their_put() {
    under_openib_run("before-put", true);
}

#[test]
fn one_rank_dies_after_its_put() {
    under_openib_run("after-put", false);
}

#[test]
fn two_ranks_die_after_their_put() {
    under_openib_run("after-put", true);
}

#[test]
fn one_rank_dies_inside_the_fence() {
    under_openib_run("in-fence", false);
}

#[test]
fn two_ranks_die_inside_the_fence() {
    under_openib_run("in-fence", true);
}

/// The other modes (one fence; on the embedded runtime a second, non-collecting one) and
/// emulated nodes: each point once per run, modes, node counts and victim counts rotating.
#[test]
fn other_modes_and_emulated_nodes() {
    fault_cases::other_modes(&Embedded, "other modes and nodes");
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
