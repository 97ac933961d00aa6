//! `openib sim fence --procs P --failures F --seed S [--seeds N] [--json]`: runs the resilient fence
//! ([`crate::runtime::resilient`]) for P virtual processes in the deterministic simulator
//! ([`crate::sim`]) with F random failures, and reports rounds, messages and the agreement.

use super::exit;
use crate::sim::{run as simulate, SimConfig};

#[derive(clap::Subcommand, Debug)]
pub enum SimCmd {
    /// Simulate one resilient fence with random fail-stop failures (before the call, during
    /// it, during the agreement); exit 0 when every survivor agreed and every process that
    /// decided before dying decided the same (uniform agreement).
    Fence(FenceArgs),
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
