//! `openib sim fence --procs P --failures F --seed S [--seeds N] [--json]`: runs the resilient fence
//! ([`crate::runtime::resilient`]) for P virtual processes in the deterministic simulator
//! ([`crate::sim`]) with F random failures, and reports rounds, messages and the agreement.
//!
//! `openib sim group-create [--max-procs N] [--json]`: measures group creation (issue 32,
//! [`crate::runtime::group_create`]) in its simulator: steps and messages against p = 16, 64,
//! ..., N, failure-free and with 1, 2 and 4 failures ([`group_create::sim::measure`]); the JSON
//! document is what `openib plot` draws.

use super::exit;
use crate::runtime::group_create;
use crate::sim::{run as simulate, SimConfig};

#[derive(clap::Subcommand, Debug)]
pub enum SimCmd {
    /// Simulate one resilient fence with random fail-stop failures (before the call, during
    /// it, during the agreement); exit 0 when every survivor agreed and every process that
    /// decided before dying decided the same (uniform agreement).
    Fence(FenceArgs),
    /// Measure group creation (issue 32) in its simulator: steps and messages per process
    /// against p = 16, 64, ..., --max-procs (times 4), failure-free and with 1, 2 and 4
    /// failures; exit 0 when the judge found every run right (termination, uniform
    /// agreement, validity).
    GroupCreate(GroupCreateArgs),
}

#[derive(clap::Args, Debug)]
pub struct GroupCreateArgs {
    /// The largest p (16..=65536): p runs over 16, 64, 256, ... up to it.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub max_procs: u32,
    /// Print one JSON document: {"kind": "group-create-sim", "failures": [0, 1, 2, 4],
    /// "seeds_with_failures", "rows": [{"p", "failures", "runs", "steps_max",
    /// "messages_mean", "messages_per_process", "steps_bound", "fence_steps",
    /// "log2_p", "problems"}]} (what `openib plot` draws).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct FenceArgs {
    /// Virtual processes (1..=65536).
    #[arg(long, default_value_t = 64)]
    pub procs: u32,
    /// Processes that fail (random victims and timing; at most procs - 1).
    #[arg(long, default_value_t = 0)]
    pub failures: u32,
    /// RNG seed: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run this many seeds, from --seed on (seed, seed + 1, ...): one line (or JSON line) each,
    /// exit 0 only when every one agreed. A progress bar on a terminal (not with --json).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// A death is noticed 1 to 1 + this many rounds later by each process.
    #[arg(long, default_value_t = 3)]
    pub detect_delay: u64,
    /// Print JSON: {"rounds", "messages", "survivors", "agreed", "p", "f", "seed", "failed",
    /// "dead", "decided_then_died", "by_kind", "problems"}.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `sim` subcommand; returns the exit code (0: agreed, 1: not agreed, 2: bad usage).
pub fn run(cmd: SimCmd) -> i32 {
    match cmd {
        SimCmd::Fence(a) => fence(&a),
        SimCmd::GroupCreate(a) => group_create_sweep(&a),
    }
}

/// The p of the sweep: 16, 64, ... up to `max`.
fn sweep_procs(max: u32) -> Vec<u32> {
    std::iter::successors(Some(16u32), |p| p.checked_mul(4))
        .take_while(|&p| p <= max)
        .collect()
}

/// The JSON row of one measured point: the measurement, and the reference lines at its p
/// (the failure-free bound `2 ceil(log2 p) + 2`, the resilient fence's `4 ceil(log2 p)`
/// steps, and `ceil(log2 p)`, the `p log2 p` message bound per process).
fn measured_row(m: &group_create::sim::Measured) -> serde_json::Value {
    let log2_p = group_create::sim::log2_ceil(m.p);
    serde_json::json!({
        "p": m.p,
        "failures": m.failures,
        "runs": m.runs,
        "steps_max": m.steps_max,
        "messages_mean": m.messages_mean,
        "messages_per_process": m.messages_mean as f64 / f64::from(m.p),
        "steps_bound": 2 * log2_p + 2,
        "fence_steps": 4 * log2_p,
        "log2_p": log2_p,
        "problems": m.problems,
    })
}

fn group_create_sweep(a: &GroupCreateArgs) -> i32 {
    let procs = sweep_procs(a.max_procs);
    let failures = group_create::sim::MEASURED_FAILURES;
    let progress = super::progress::Progress::new(
        (procs.len() * failures.len()) as u64,
        "openib sim group-create",
        a.json,
    );
    let mut rows = Vec::new();
    let mut all_right = true;
    if !a.json {
        println!("| p | failures | steps (max) | bound 2*ceil(log2 p)+2 | messages (mean) | per process |");
        println!("|---|---|---|---|---|---|");
    }
    for &p in &procs {
        for f in failures {
            progress.set_message(format!("p={p} failures={f}"));
            let m = group_create::sim::measure(p, f);
            all_right &= m.problems.is_empty();
            let row = measured_row(&m);
            if !a.json {
                progress.suspend(|| {
                    println!(
                        "| {p} | {f} | {} | {} | {} | {:.2} |",
                        m.steps_max,
                        row["steps_bound"],
                        m.messages_mean,
                        row["messages_per_process"].as_f64().unwrap_or(0.0)
                    );
                    for e in &m.problems {
                        println!("  problem: {e}");
                    }
                });
            }
            rows.push(row);
            progress.inc(1);
        }
    }
    progress.finish();
    if a.json {
        let doc = serde_json::json!({
            "kind": "group-create-sim",
            "failures": failures,
            "seeds_with_failures": group_create::sim::MEASURED_SEEDS,
            "rows": rows,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("a document serializes")
        );
    }
    if all_right {
        exit::OK
    } else {
        exit::ERROR
    }
}

fn fence(a: &FenceArgs) -> i32 {
    if a.procs == 0 || a.procs > 65_536 {
        eprintln!("openib sim fence: --procs must be 1..=65536");
        return exit::USAGE;
    }
    if a.failures >= a.procs {
        eprintln!("openib sim fence: --failures must be below --procs (someone must survive)");
        return exit::USAGE;
    }
    let Some(last) = a.seed.checked_add(a.seeds - 1) else {
        eprintln!("openib sim fence: --seed + --seeds passes 2^64");
        return exit::USAGE;
    };
    let progress = if a.seeds > 1 {
        super::progress::Progress::new(a.seeds, "openib sim fence", a.json)
    } else {
        super::progress::Progress::none()
    };
    let mut all_agreed = true;
    for seed in a.seed..=last {
        progress.set_message(format!("seed {seed}"));
        all_agreed &= one_seed(a, seed, &progress);
        progress.inc(1);
    }
    progress.finish();
    if all_agreed {
        exit::OK
    } else {
        exit::ERROR
    }
}

/// One simulated fence with `seed`, printed (with the bar hidden); whether it agreed.
fn one_seed(a: &FenceArgs, seed: u64, progress: &super::progress::Progress) -> bool {
    let mut cfg = SimConfig::random(a.procs, a.failures, seed);
    cfg.max_detect_delay = a.detect_delay;
    let r = simulate(&cfg);
    progress.suspend(|| print_report(a, &r));
    r.agreed
}

fn print_report(a: &FenceArgs, r: &crate::sim::SimReport) {
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&r).expect("a report serializes")
        );
    } else {
        println!(
            "p={} f={} seed={}: {} in {} rounds, {} messages, {} survivors, failed {:?}, \
             decided then died {:?}",
            r.p,
            r.f,
            r.seed,
            if r.agreed { "agreed" } else { "NOT AGREED" },
            r.rounds,
            r.messages,
            r.survivors,
            r.failed,
            r.decided_then_died
        );
        for p in &r.problems {
            println!("  problem: {p}");
        }
    }
}
