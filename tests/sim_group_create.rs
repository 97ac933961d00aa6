//! Group creation (issue 32) in its simulator, the long runs: many random cases from a seed
//! (`stress`, `stress_harsh`) and the measurement of steps and messages against p (`measure`).
//! `#[ignore]`d, run in release by scripts/test with small parameters and a new seed each run
//! (printed first, so a failure can be replayed: `SIM_SEED=S`); the fast cases and the fixed
//! regression seeds are the library's tests (`cargo test -p openib --lib group_create`).
//!
//! Variables (simulator knobs, not settings): `SIM_SEED` (the first seed; default 1),
//! `SIM_RUNS` (random cases), `SIM_MAXP` (the largest p).

use openib::runtime::group_create::sim::{
    log2_ceil, measure as measure_point, run, SimConfig, SimReport, MEASURED_FAILURES,
};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn check(r: &SimReport, what: &str) {
    assert!(
        r.ok(),
        "{what}: p={} seed={} dead={:?} decided then died {:?}: {:?}",
        r.p,
        r.seed,
        r.dead,
        r.decided_then_died,
        r.problems
    );
}

/// `SIM_RUNS` cases (default `default_runs`) of `case` from `SIM_SEED` on, at most `SIM_MAXP`
/// processes (default `default_max_p`); the seed and sizes are printed before the first run.
fn sweep(name: &str, case: fn(u64, u64) -> SimConfig, default_runs: u64, default_max_p: u64) {
    let runs = env_u64("SIM_RUNS").unwrap_or(default_runs);
    let base = env_u64("SIM_SEED").unwrap_or(1);
    let max_p = env_u64("SIM_MAXP").unwrap_or(default_max_p);
    eprintln!("{name}: SIM_SEED={base} SIM_RUNS={runs} SIM_MAXP={max_p}");
    for i in 0..runs {
        let seed = base.wrapping_add(i);
        check(
            &run(&case(seed, max_p)),
            &format!("{name}: replay with SIM_SEED={seed} SIM_RUNS=1 SIM_MAXP={max_p}"),
        );
    }
}

/// Many random cases (default 20,000 of at most 60 processes): groups that differ for none to
/// 60 % of the processes, up to 12 victims, random delays and detection delays.
#[test]
#[ignore = "long: scripts/test runs it in release with SIM_RUNS, SIM_MAXP and a new SIM_SEED"]
fn stress() {
    sweep("stress", SimConfig::random_case, 20_000, 60);
}

/// Harsher random cases (default 5,000 of at most 24 processes): most groups differ, long
/// delays and detection delays, up to every process but one dying.
#[test]
#[ignore = "long: scripts/test runs it in release with SIM_RUNS, SIM_MAXP and a new SIM_SEED"]
fn stress_harsh() {
    sweep("stress_harsh", SimConfig::harsh_case, 5_000, 24);
}

/// Steps and messages against p = 16, 64, ... up to `SIM_MAXP` (default 4,096), failure-free
/// and with 1, 2 and 4 failures (`sim::measure`: 3 seeds each, the worst steps and the mean
/// messages), as a table. A measurement: the judge must find every run right and the
/// failure-free runs must keep issue 32's bound (`2 ceil(log2 p) + 2` steps, `5 (p - 1)`
/// messages); no bound on the runs with failures. The whole table to 65,536:
/// `SIM_MAXP=65536 cargo test --release --test sim_group_create -- --ignored --nocapture
/// measure` (or `openib sim group-create --max-procs 65536`).
#[test]
#[ignore = "a measurement: scripts/test runs it in release to 4,096 processes"]
fn measure() {
    let max_p = env_u64("SIM_MAXP").unwrap_or(4096) as u32;
    println!(
        "| p | failures | steps (max) | bound 2*ceil(log2 p)+2 | messages (mean) | per process |"
    );
    println!("|---|---|---|---|---|---|");
    let mut p = 16u32;
    while p <= max_p {
        for f in MEASURED_FAILURES {
            let m = measure_point(p, f);
            assert!(m.problems.is_empty(), "{:?}", m.problems);
            let bound = 2 * log2_ceil(p) + 2;
            if f == 0 {
                assert!(m.steps_max <= bound, "p={p}: {} steps", m.steps_max);
                assert_eq!(m.messages_mean, 5 * u64::from(p - 1), "p={p}");
            }
            println!(
                "| {p} | {f} | {} | {bound} | {} | {:.2} |",
                m.steps_max,
                m.messages_mean,
                m.messages_mean as f64 / f64::from(p)
            );
        }
        p *= 4;
    }
}

/// The disagreement the random stress of CI found on 2026-12-05 (SIM_SEED=1796491159 run, case
/// seed 1796493854, p = 5), now a regression check: groups {0,1,2} for ranks 0-2, {0,1,2,3}
/// for 3, {0,1,2,4} for 4; rank 1 dead before the call, ranks 2 and 4 dying on their first
/// proposal, rank 0 right after deciding. Root 0 proposed {0,2}; rank 2 accepted it and passed
/// it to 3 and 4, of whom 0 never heard. Then 0 decided alone and died, and rank 3 decided the
/// {0,2} it had accepted. (0 decides {0}: 2 died without acknowledging, and so did 1, so the
/// root makes a new attempt without 2; from the morning to the evening of 2026-12-06 one
/// unacknowledged death made none and 0 decided {0,2}.) A process now
/// refuses a root's own value of a view lacking participants it knows (it answers with its
/// view), so rank 3 decides a value of its own in which 0 is agreed dead: disjoint from 0's, as
/// docs/RUNTIME.md's rule ("Decisions nobody can pass on") allows.
#[test]
fn regression_a_decider_that_never_heard_of_a_participant() {
    let r = run(&SimConfig::random_case(1796493854, 64));
    check(&r, "seed 1796493854");
    assert_eq!((r.p, r.decided_then_died.clone()), (5, vec![0]));
    let zero = r.values[0].as_ref().expect("rank 0 decided");
    let three = r.values[3].as_ref().expect("rank 3 decided");
    assert_eq!(**zero.group(), vec![0]);
    assert!(three.failed.contains(&0), "{three:?}");
    assert!(!three.group().iter().any(|x| zero.group().contains(x)));
}
