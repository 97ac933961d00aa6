//! The PMIx runtime under Slurm: `srun --mpi=pmix` on the one-machine cluster of
//! `scripts/slurm` (tests/common/slurm.rs: two emulated nodes n1 and n2 on 127.0.0.1, Debian
//! 12's slurm-wlm 22.05 with its pmix_v4 plugin and libpmix 4.2.2).
//!
//! - The modex exchange in every mode on one node and on two: rank 0 rebuilds every peer, with
//!   one leader per node and the nodes Slurm named (tests/common/exchange.rs's checks, as under
//!   mpirun in tests/modex_exchange.rs).
//! - The checks reject runs that exchanged nothing: srun can exit 0 when its tasks did
//!   nothing, so every verdict reads the output, never the exit status alone.
//! - The fail-stop kill points (tests/common/fault_cases.rs), once each: Slurm's pmix plugin
//!   kills the whole step when a task dies without `PMIx_Finalize` (its server error handler
//!   calls `slurm_kill_job_step`), so the survivors cannot carry on as under
//!   tests/pmix_faults.rs's server; what holds is that the step ends at once, srun fails and
//!   names the victim, and no rank claims a table or a failed set that is wrong.
//!
//! Slurm not installed (or not root) fails these under CI and skips them loudly elsewhere
//! (tests/common/prereq.rs). Every wait is bounded: `--immediate`, `--wait` and a deadline
//! after which srun is killed.

#[path = "common/exchange.rs"]
mod exchange;
#[path = "common/fault_cases.rs"]
mod fault_cases;
#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "common/prereq.rs"]
mod prereq;
#[path = "common/slurm.rs"]
mod slurm;
#[path = "common/victims.rs"]
mod victims;

use fault_cases::{Launcher, Outcome, HANG_BOUND, NP};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// An srun is killed after this.
const KILL_AFTER: Duration = Duration::from_secs(90);

const MODES: [&str; 3] = ["gathered", "per-process", "on-demand"];

/// `srun --mpi=MPI -N nodes -n np PROGRAM...` on the test cluster, bounded.
fn srun(c: &slurm::Cluster, mpi: &str, nodes: u32, np: u32, program: &[&str]) -> slurm::Ran {
    let mut cmd = c.srun(mpi, nodes, np);
    cmd.args(program);
    let _one = slurm::serial();
    slurm::run_bounded(cmd, KILL_AFTER)
}

fn exchange_cmd(fix: &str, mode: &str) -> Vec<String> {
    [
        exchange::bin(),
        "modex",
        "exchange",
        "--json",
        "--fixture",
        fix,
        "--mode",
        mode,
        "--timeout",
        "20",
    ]
    .map(String::from)
    .to_vec()
}

/// Everything an srun of `np` ranks of the exchange on `nodes` nodes owes: exit 0, rank 0's
/// one JSON table rebuilding every peer (tests/common/exchange.rs) on the nodes n1..n`nodes`.
/// Panics otherwise.
fn check_exchange(r: &slurm::Ran, fix: &str, mode: &str, np: usize, nodes: usize) {
    let ctx = r.describe();
    assert_eq!(r.code, Some(0), "{mode} on {nodes} node(s): {ctx}");
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{mode} on {nodes} node(s): not one JSON table ({e}): {ctx}"));
    exchange::check_pmix_run(&v, fix, mode, np, nodes);
    let names: BTreeSet<&str> = v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["node"].as_str().unwrap())
        .collect();
    let want: BTreeSet<String> = (1..=nodes).map(|k| format!("n{k}")).collect();
    assert_eq!(
        names,
        want.iter().map(String::as_str).collect(),
        "Slurm's node names: {ctx}"
    );
}

#[test]
fn srun_exchange_every_mode_on_one_and_two_nodes() {
    let Some(c) = slurm::cluster() else { return };
    let fix = exchange::fixture("ib-dual-port.json");
    for nodes in [1, 2] {
        for mode in MODES {
            let cmd = exchange_cmd(&fix, mode);
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let r = srun(c, "pmix", nodes, 4, &args);
            check_exchange(&r, &fix, mode, 4, nodes as usize);
            eprintln!("{mode} on {nodes} node(s): ok in {:?}", r.took);
        }
    }
}

/// The checks above fail on runs that exchanged nothing, whatever srun's exit status: tasks
/// that print nothing and exit 0 (srun exits 0), the exchange without Slurm's PMIx (`--mpi=none`:
/// four singletons, four tables of one), and a program that cannot start.
#[test]
fn srun_that_exchanges_nothing_fails_the_checks() {
    let Some(c) = slurm::cluster() else { return };
    let fix = exchange::fixture("ib-dual-port.json");
    let cmd = exchange_cmd(&fix, "gathered");
    let exchange: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let missing = [&["/nonexistent/openib"][..], &exchange[1..]].concat();
    for (what, mpi, program) in [
        ("tasks that print nothing", "pmix", vec!["true"]),
        ("no PMIx from Slurm (--mpi=none)", "none", exchange.clone()),
        ("a program that does not exist", "pmix", missing),
    ] {
        let r = srun(c, mpi, 2, 4, &program);
        let verdict = std::panic::catch_unwind(|| check_exchange(&r, &fix, "gathered", 4, 2));
        assert!(
            verdict.is_err(),
            "{what}: the checks passed a run that exchanged nothing: {}",
            r.describe()
        );
        eprintln!("{what}: srun exited {:?}; the checks failed it", r.code);
    }
}

/// `srun --mpi=pmix -N nodes -n 8 openib modex exchange --json ...` (tests/common/fault_cases.rs).
struct Srun(&'static slurm::Cluster);

impl Launcher for Srun {
    const TEST: &'static str = "slurm";
    const BACKEND: &'static str = "pmix";
    const EMULATES_NODES: bool = true;

    fn launch(&self, fault: Option<&str>, mode: Option<&str>, nodes: u32) -> Outcome {
        let mut cmd = self.0.srun("pmix", nodes, NP);
        if let Some(f) = fault {
            cmd.env("OPENIB_FAULT", f);
        }
        cmd.arg(exchange::bin())
            .args(&fault_cases::exchange_args()[..]);
        if let Some(m) = mode {
            cmd.args(["--mode", m]);
        }
        let _one = slurm::serial();
        let r = slurm::run_bounded(cmd, KILL_AFTER);
        Outcome {
            code: r.code,
            stdout: r.stdout,
            stderr: r.stderr,
            took: r.took,
        }
    }

    fn check_endings(&self, o: &Outcome, dead: &[u32], ctx: &str) {
        if dead.is_empty() {
            assert_eq!(o.code, Some(0), "{ctx}");
            assert!(!o.stderr.contains("srun: error"), "{ctx}");
        } else {
            // Slurm ends the whole step: srun fails, naming every victim killed.
            assert!(o.code.is_some_and(|c| c != 0), "{ctx}");
            let killed = killed_tasks(&o.stderr);
            for v in dead {
                assert!(killed.contains(v), "srun names no killed task {v}: {ctx}");
            }
        }
    }
}

/// The tasks srun reports killed: `srun: error: n1: task 2: Killed`,
/// `srun: error: n1: tasks 0-1,3: Killed`.
fn killed_tasks(stderr: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for l in stderr.lines().filter(|l| l.starts_with("srun: error: ")) {
        let Some(l) = l.strip_suffix(": Killed") else {
            continue;
        };
        let Some((_, list)) = l.rsplit_once(": task") else {
            continue;
        };
        let list = list.trim_start_matches('s').trim();
        for part in list.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                out.extend(a..=b);
            }
        }
    }
    out
}

#[test]
fn killed_tasks_reads_srun_lines() {
    let text = "srun: error: n1: task 2: Killed\nsrun: error: n2: tasks 0-1,4,6-7: Killed\n\
                srun: error: n1: task 3: Exited with exit code 1\n";
    assert_eq!(killed_tasks(text), BTreeSet::from([0, 1, 2, 4, 6, 7]));
}

/// Each kill point once, on two nodes (a run without a fault first, checked as every launcher's
/// in tests/common/fault_cases.rs): the step ends within the hang bound, srun fails naming the
/// victims killed, each victim died where it was told to, and whatever a rank printed before
/// Slurm killed the step is right: a survivors' agreement names exactly the victims, and a
/// table lists exactly the ranks it does not call failed, none failed but victims.
#[test]
fn srun_kill_points_end_the_step_naming_the_victims() {
    let Some(c) = slurm::cluster() else { return };
    let l = Srun(c);
    fault_cases::one_run(&l, "before-put", &[], None, 2);
    fault_feature::require(Srun::TEST);
    for (run, point) in ["before-put", "after-put", "in-fence"]
        .into_iter()
        .enumerate()
    {
        let dead = victims::victims(NP, run == 2, run);
        let list: Vec<String> = dead.iter().map(u32::to_string).collect();
        let fault = format!("{point}:{}", list.join(","));
        let o = l.launch(Some(&fault), None, 2);
        let ctx = format!(
            "OPENIB_FAULT={fault}: exit {:?} after {:?}\nstdout: {}\nstderr: {}",
            o.code, o.took, o.stdout, o.stderr
        );
        assert!(o.took < HANG_BOUND, "{ctx}");
        l.check_endings(&o, &dead, &ctx);
        for v in &dead {
            let said = format!("openib: OPENIB_FAULT: rank {v} dies at {point} ");
            assert!(o.stderr.contains(&said), "no `{said}`: {ctx}");
        }
        for line in o.stderr.lines().filter(|l| l.contains("survivors agree")) {
            assert!(
                line.ends_with(&format!("failed rank(s) {dead:?}")),
                "{line}: {ctx}"
            );
        }
        if !o.stdout.trim().is_empty() {
            let v: Value = serde_json::from_str(&o.stdout)
                .unwrap_or_else(|e| panic!("not one JSON table ({e}): {ctx}"));
            assert_eq!(v["backend"], "pmix", "{ctx}");
            assert_eq!(v["size"], NP as u64, "{ctx}");
            let failed: BTreeSet<u32> = v["failed"]
                .as_array()
                .unwrap_or_else(|| panic!("no failed: {ctx}"))
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert!(failed.iter().all(|f| dead.contains(f)), "{ctx}");
            let listed: BTreeSet<u32> = v["peers"]
                .as_array()
                .unwrap_or_else(|| panic!("no peers: {ctx}"))
                .iter()
                .map(|p| p["rank"].as_u64().unwrap() as u32)
                .collect();
            let want: BTreeSet<u32> = (0..NP).filter(|r| !failed.contains(r)).collect();
            assert_eq!(listed, want, "{ctx}");
        }
        eprintln!(
            "{fault}: srun exited {:?} after {:?}; a table printed: {}",
            o.code,
            o.took,
            !o.stdout.trim().is_empty()
        );
    }
}
