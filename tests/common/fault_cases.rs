//! The fail-stop cases of the modex exchange (issue 7), shared by tests/modex_fault.rs (the
//! embedded runtime under `openib run`), tests/pmix_faults.rs (the PMIx test server) and, the
//! launcher and the kill points, tests/slurm.rs (srun, where a death ends the step): 8 ranks
//! of `openib modex exchange --json` with `OPENIB_FAULT=<point>:<victims>`, one or two victims,
//! [`RUNS`] runs (the victims rotate, rank 0 among them). What differs between the launchers
//! (how a run starts, how it reports each rank's end, what else its JSON promises) is a
//! [`Launcher`]; the checks every survivor owes are here:
//! - the run ends within [`HANG_BOUND`] (the launchers kill it later anyway);
//! - every survivor says the same failed set, the victims;
//! - the lowest survivor's JSON names the launcher's backend and lists exactly the survivors,
//!   and `"failed"` = the victims.
//!
//! Timing decides nothing but the hang bound. The including file declares the modules
//! `fault_feature` and `victims` (tests/common/).
#![allow(dead_code)]

use crate::{fault_feature, victims};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

pub const RUNS: usize = 20;
pub const NP: u32 = 8;
/// A run that takes longer than this hangs.
pub const HANG_BOUND: Duration = Duration::from_secs(30);

/// The `openib` binary of this test build.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_openib")
}

/// The port fixture every rank reads (two ports of one device).
pub fn fixture() -> String {
    format!(
        "{}/tests/fixtures/ib-dual-port.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `command` without any inherited `OPENIB_*`, `PMIX_*` or `OMPI_*` setting.
pub fn clean_env(command: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENIB_") || k.starts_with("PMIX_") || k.starts_with("OMPI_") {
            command.env_remove(k);
        }
    }
}

/// The `openib modex exchange` arguments every rank runs with (then `--mode M` if any).
pub fn exchange_args() -> Vec<String> {
    [
        "modex",
        "exchange",
        "--json",
        "--fixture",
        &fixture(),
        "--timeout",
        "20",
    ]
    .map(String::from)
    .to_vec()
}

/// What a launcher's run gave.
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

/// One way of starting [`NP`] ranks of `openib modex exchange`.
pub trait Launcher {
    /// The test file's name, for the fault-feature check.
    const TEST: &'static str;
    /// The `"backend"` the lowest survivor's JSON names.
    const BACKEND: &'static str;
    /// Whether it can spread the ranks over emulated nodes (`--nodes`).
    const EMULATES_NODES: bool;
    /// Runs the ranks with `fault` (none: no fault), `--mode mode`, on `nodes` nodes.
    fn launch(&self, fault: Option<&str>, mode: Option<&str>, nodes: u32) -> Outcome;
    /// The launcher's own verdict: its exit status, and how it says each rank ended.
    fn check_endings(&self, o: &Outcome, dead: &[u32], ctx: &str);
    /// What else the launcher's JSON promises of its `peers`.
    fn check_peers(&self, _peers: &[Value], _mode: Option<&str>, _ctx: &str) {}
    /// A note after the times (a launcher's own counters).
    fn note(&self) -> String {
        String::new()
    }
}

/// One run with `point` at `dead` (empty: no fault); checks everything, returns its duration.
pub fn one_run<L: Launcher>(
    l: &L,
    point: &str,
    dead: &[u32],
    mode: Option<&str>,
    nodes: u32,
) -> Duration {
    let ranks: Vec<String> = dead.iter().map(u32::to_string).collect();
    let fault = format!("{point}:{}", ranks.join(","));
    if !dead.is_empty() {
        fault_feature::require(L::TEST);
    }
    let o = l.launch((!dead.is_empty()).then_some(fault.as_str()), mode, nodes);
    let ctx = format!(
        "OPENIB_FAULT={fault} mode {mode:?} nodes {nodes}: status {:?}, {:?}\nstdout: {}\nstderr: {}",
        o.code, o.took, o.stdout, o.stderr
    );
    assert!(o.took < HANG_BOUND, "took {:?}: {ctx}", o.took);
    l.check_endings(&o, dead, &ctx);
    let survivors: Vec<u32> = (0..NP).filter(|r| !dead.contains(r)).collect();
    // Every survivor names the same failed set: the victims.
    if !dead.is_empty() {
        for &r in &survivors {
            let line = format!(
                "openib modex exchange: rank {r}: survivors agree; failed rank(s) {dead:?}"
            );
            assert!(o.stderr.lines().any(|l| l == line), "rank {r}: {ctx}");
        }
    }
    assert_eq!(
        o.stderr.matches("survivors agree").count(),
        if dead.is_empty() { 0 } else { survivors.len() },
        "{ctx}"
    );
    // The lowest survivor's table: exactly the survivors.
    let v: Value =
        serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("not one JSON ({e}): {ctx}"));
    assert_eq!(v["backend"], L::BACKEND, "{ctx}");
    assert_eq!(v["size"], NP as u64, "{ctx}");
    assert_eq!(v["reporter"], survivors[0] as u64, "{ctx}");
    let failed: Vec<u32> = v["failed"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"failed\": {ctx}"))
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(failed, dead, "{ctx}");
    let peers = v["peers"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"peers\": {ctx}"));
    let listed: Vec<u32> = peers
        .iter()
        .map(|p| p["rank"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(listed, survivors, "{ctx}");
    l.check_peers(peers, mode, &ctx);
    o.took
}

/// Prints the times of `what` (the test's output with --nocapture).
pub fn report<L: Launcher>(l: &L, what: &str, mut times: Vec<Duration>) {
    times.sort();
    eprintln!(
        "{what}: {} runs, median {:?}, max {:?}{}",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1],
        l.note()
    );
}

/// One case `RUNS` times: `point` at one victim (or two, with `two`), the default mode, one
/// node.
pub fn case<L: Launcher>(l: &L, point: &str, two: bool) {
    let times = (0..RUNS)
        .map(|run| one_run(l, point, &victims::victims(NP, two, run), None, 1))
        .collect();
    report(
        l,
        &format!("{point}, {} victim(s)", if two { 2 } else { 1 }),
        times,
    );
}

/// The per-process and on-demand modes (one fence, then a second, non-collecting one): every
/// point in each run, modes and victim counts rotating, and the node count (1 to 3) too where
/// the launcher emulates nodes.
pub fn other_modes<L: Launcher>(l: &L, what: &str) {
    let mut times = Vec::new();
    for run in 0..RUNS {
        let mode = ["per-process", "on-demand"][run % 2];
        let nodes = if L::EMULATES_NODES {
            1 + (run / 2) as u32 % 3
        } else {
            1
        };
        for point in ["before-put", "after-put", "in-fence"] {
            let dead = victims::victims(NP, run % 4 >= 2, run);
            times.push(one_run(l, point, &dead, Some(mode), nodes));
        }
    }
    report(l, what, times);
}
