//! The resilient fence in the deterministic simulator (issue 7): property-style loops over
//! seeds and sizes, and the named failure cases (root, leaves, whole subtrees, during the
//! agreement, right after deciding). Every run must terminate with every survivor holding the
//! same failed set and the same data (exactly the non-failed members' contributions), and
//! every process that decided and then died holding that same decision (uniform agreement).

use openib::sim::{run, Rng, SimConfig, SimReport, When};

fn cfg(procs: u32, failures: Vec<(u32, When)>, seed: u64) -> SimConfig {
    SimConfig {
        procs,
        failures,
        seed,
        max_detect_delay: 3,
        max_rounds: 20_000,
    }
}

fn check(r: &SimReport) {
    assert!(
        r.agreed,
        "p={} seed={} dead={:?} decided then died {:?}: {:?}",
        r.p, r.seed, r.dead, r.decided_then_died, r.problems
    );
    assert!(r.decided_then_died.iter().all(|d| r.dead.contains(d)));
    assert_eq!(r.survivors as usize, r.p as usize - r.dead.len());
    assert!(r.failed.iter().all(|f| r.dead.contains(f)));
}

fn log2_ceil(p: u32) -> u64 {
    (32 - (p.max(1) - 1).leading_zeros()) as u64
}

#[test]
fn no_failures_takes_log_p_rounds_and_4_messages_per_process() {
    for p in [1u32, 2, 3, 5, 8, 16, 33, 64, 100, 257, 1000, 4096] {
        for seed in 0..if p > 1000 { 1 } else { 3 } {
            let r = run(&cfg(p, vec![], seed));
            check(&r);
            // Gather and propose, each at most the tree depth; the acks straight to the root
            // and its commits straight back, one step each (issue 32's bound).
            let bound = if p == 1 { 0 } else { 2 * log2_ceil(p) + 2 };
            assert!(r.rounds <= bound, "p={p}: {} rounds", r.rounds);
            assert_eq!(r.messages, 4 * (p as u64 - 1), "p={p}");
            assert!(r.failed.is_empty());
        }
    }
}

#[test]
fn random_failures_always_agree() {
    let mut rng = Rng::new(2026);
    for seed in 0..400u64 {
        let p = 2 + rng.below(150) as u32;
        let f = rng.below((p as u64).min(12)) as u32;
        let mut c = SimConfig::random(p, f, seed);
        c.max_detect_delay = rng.below(6);
        after_deciding(&mut c, &mut rng);
        check(&run(&c));
    }
}

/// Makes about a third of `c`'s victims die 0 to 2 rounds after they decide instead.
fn after_deciding(c: &mut SimConfig, rng: &mut Rng) {
    for x in c.failures.iter_mut() {
        if rng.below(3) == 0 {
            x.1 = When::AfterDecide(rng.below(3));
        }
    }
}

/// Uniform agreement: processes that die right after deciding (in the same round, their
/// commits half sent, or 1 to 2 rounds later), roots among them, and often every process that
/// had the decision, decided what the survivors decide. Removing the Paxos re-propose rule
/// (a new root re-proposes the highest accepted proposal) fails this test.
#[test]
fn processes_that_die_right_after_deciding_decided_the_same() {
    let (mut runs, mut hit, mut root_hit) = (0u32, 0u32, 0u32);
    for p in [2u32, 3, 4, 5, 8, 16, 33, 64] {
        for k in [0u64, 1, 2] {
            for seed in 0..16u64 {
                let mut rng = Rng::new(seed.wrapping_mul(0x9e37) ^ (u64::from(p) << 8) ^ k);
                let mut failures = vec![(0u32, When::AfterDecide(k))];
                match seed % 4 {
                    // The first root alone.
                    0 => {}
                    // Whoever gets a commit first dies with it (the decision may live only
                    // among the dead).
                    1 => failures.extend((1..p - 1).map(|r| (r, When::OnFirst("commit")))),
                    // The first root dies before deciding, the second right after.
                    2 if p > 2 => {
                        failures[0].1 = When::OnFirst("ack");
                        failures.push((1, When::AfterDecide(k)));
                    }
                    // Random others, right after deciding or on their first commit.
                    _ => {
                        for r in 1..p - 1 {
                            match rng.below(3) {
                                0 => failures.push((r, When::AfterDecide(rng.below(3)))),
                                1 => failures.push((r, When::OnFirst("commit"))),
                                _ => {}
                            }
                        }
                    }
                }
                let mut c = cfg(p, failures, seed);
                c.max_detect_delay = rng.below(4);
                let r = run(&c);
                check(&r);
                if k == 2 {
                    // Every live member decides one step after the root (its commits go
                    // straight to them): a root dying two steps after deciding mostly dies
                    // after the fence ended. Checked, not counted.
                    continue;
                }
                runs += 1;
                hit += u32::from(!r.decided_then_died.is_empty());
                root_hit += u32::from(r.decided_then_died.first() == Some(&0));
            }
        }
    }
    // The case is hit, roots included (a run where no process decides before dying checks
    // nothing new).
    assert!(
        hit * 10 >= runs * 9,
        "{hit} of {runs} runs had a decided process die"
    );
    assert!(
        root_hit * 2 >= runs,
        "{root_hit} of {runs} runs had the root die decided"
    );
}

#[test]
fn many_failures_in_bigger_jobs_agree() {
    for (p, f) in [
        (512u32, 5u32),
        (512, 51),
        (1024, 10),
        (1024, 102),
        (300, 299),
    ] {
        for seed in 0..3 {
            check(&run(&SimConfig::random(p, f, seed)));
        }
    }
}

#[test]
fn the_root_dies_at_every_step() {
    for p in [2u32, 3, 16, 64] {
        let mut whens = vec![When::Before];
        whens.extend((0..16).map(When::AtRound));
        whens.extend(["up", "propose", "ack", "commit"].map(When::OnFirst));
        for w in whens {
            for seed in 0..4 {
                check(&run(&cfg(p, vec![(0, w)], seed)));
                // The first two roots.
                if p > 2 {
                    check(&run(&cfg(p, vec![(0, w), (1, w)], seed)));
                    check(&run(&cfg(p, vec![(0, When::Before), (1, w)], seed)));
                }
            }
        }
    }
}

#[test]
fn leaves_die() {
    // Odd indices are the leaves of the binomial tree.
    for p in [8u32, 32, 100] {
        for seed in 0..6 {
            let mut rng = Rng::new(seed);
            let mut failures = Vec::new();
            for r in (1..p).step_by(2) {
                if rng.below(3) == 0 {
                    failures.push((r, When::AtRound(rng.below(12))));
                }
            }
            check(&run(&cfg(p, failures, seed)));
        }
    }
}

#[test]
fn whole_subtrees_die() {
    // Index 32's subtree in a 64-tree is 32..64; 16's is 16..32; 8's is 8..16.
    for (lo, hi) in [(32u32, 64u32), (16, 32), (8, 16), (1, 64)] {
        for w in [
            When::Before,
            When::AtRound(0),
            When::AtRound(2),
            When::AtRound(5),
            When::OnFirst("propose"),
            When::OnFirst("commit"),
        ] {
            for seed in 0..3 {
                let failures = (lo..hi).map(|r| (r, w)).collect();
                check(&run(&cfg(64, failures, seed)));
            }
        }
    }
}

#[test]
fn failures_during_the_agreement() {
    for p in [16u32, 64, 200] {
        for seed in 0..10u64 {
            let mut rng = Rng::new(seed ^ 0xa9);
            let mut failures = Vec::new();
            for r in 0..p {
                if rng.below(8) == 0 {
                    let k = ["propose", "ack", "commit"][rng.below(3) as usize];
                    failures.push((r, When::OnFirst(k)));
                }
            }
            if failures.len() as u32 >= p {
                failures.pop();
            }
            check(&run(&cfg(p, failures, seed)));
        }
    }
}

#[test]
fn all_but_one_die() {
    for p in [2u32, 5, 40] {
        for survivor in [0, p / 2, p - 1] {
            for seed in 0..3 {
                let mut rng = Rng::new(seed);
                let failures = (0..p)
                    .filter(|&r| r != survivor)
                    .map(|r| (r, When::AtRound(rng.below(10))))
                    .collect();
                let r = run(&cfg(p, failures, seed));
                check(&r);
                // Deaths scheduled after the survivors decided do not happen in the fence.
                assert!(r.survivors >= 1);
                assert!(r.failed.iter().all(|&f| f != survivor));
            }
        }
    }
}

/// The tables of docs/PERFORMANCE.md ("Resilient fence"), and the bounds docs/RUNTIME.md and
/// that section claim for them, asserted on every row (counts only, no timings):
/// `cargo test --release --test sim_fence -- --ignored --nocapture measure`.
///
/// - every run agrees (uniformly: [`check`]);
/// - no failure: exactly `2 ceil(log2 p) + 2` rounds (L = ceil(log2 p)) and `4 (p - 1)`
///   messages;
/// - f = 1, 2 random failures: a failure away from the root is a local repair, a dead root
///   "a new gather and agreement (about 2 log2 p more rounds and up to 2p more messages)":
///   max rounds <= `2L + 2 + f (2L + 2 + D)` (D = the detection delay, at most 4 rounds
///   here), mean messages <= `4 (p - 1) + f 2p`;
/// - f = p/100, p/10: "about three times the failure-free rounds and messages, not f times":
///   mean rounds and messages at most 3 times the failure-free ones, max rounds at most 3.5
///   times (the first protocol, whose failure-free rounds were twice as many, stayed within
///   2.5 and 3 times; in absolute rounds this one is faster in every row);
/// - k roots dying in turn, each on its first ack: "each costs a detection delay plus one more
///   gather and agreement": rounds <= `2L + 2 + k (2L + 2 + D)`, messages <= `4 (p - 1) + k 4p`
///   (a gather and agreement is at most four messages per process; PERFORMANCE.md: one root
///   dying at its first ack costs 2.6p more at p = 256).
#[test]
#[ignore]
fn measure() {
    // Every row is printed; the bounds a row breaks are listed at the end.
    let mut broken: Vec<String> = Vec::new();
    let mut bound = |ok: bool, what: &str, row: &str| {
        if !ok {
            broken.push(format!("{what}: {row}"));
        }
    };
    // Detection takes 1 to 1 + max_detect_delay rounds.
    let d = SimConfig::random(2, 0, 0).max_detect_delay + 1;
    println!("| p | f | rounds (min / mean / max) | messages (mean) | messages / p | agreed |");
    println!("|---|---|---|---|---|---|");
    for p in [16u32, 64, 256, 1024, 4096] {
        let l = log2_ceil(p);
        let base_rounds = 2 * l + 2;
        let base_msgs = 4 * (u64::from(p) - 1);
        let mut fs = vec![0, 1, 2, p / 100, p / 10];
        fs.dedup();
        let mut seen = Vec::new();
        for f in fs {
            if seen.contains(&f) {
                continue;
            }
            seen.push(f);
            let seeds = 10u64;
            let (mut lo, mut hi, mut sum, mut msgs, mut ok) = (u64::MAX, 0, 0, 0, 0);
            for seed in 0..seeds {
                let r = run(&SimConfig::random(p, f, seed));
                check(&r);
                lo = lo.min(r.rounds);
                hi = hi.max(r.rounds);
                sum += r.rounds;
                msgs += r.messages;
                ok += r.agreed as u64;
            }
            println!(
                "| {p} | {f} | {lo} / {:.1} / {hi} | {:.0} | {:.2} | {ok}/{seeds} |",
                sum as f64 / seeds as f64,
                msgs as f64 / seeds as f64,
                msgs as f64 / seeds as f64 / p as f64
            );
            let row = format!("p={p} f={f}: rounds {lo}..{hi}, sum {sum}, messages sum {msgs}");
            bound(ok == seeds, "every run agrees", &row);
            let (f64_, p64) = (u64::from(f), u64::from(p));
            match f {
                0 => {
                    bound((lo, hi) == (base_rounds, base_rounds), "rounds", &row);
                    bound(msgs == seeds * base_msgs, "messages", &row);
                }
                1 | 2 => {
                    let max_rounds = base_rounds + f64_ * (2 * l + 2 + d);
                    bound(hi <= max_rounds, "max rounds", &row);
                    let mean_msgs = base_msgs + f64_ * 2 * p64;
                    bound(msgs <= seeds * mean_msgs, "mean messages", &row);
                }
                _ => {
                    // Mean <= 3x, max <= 3.5x.
                    bound(sum <= 3 * seeds * base_rounds, "mean rounds", &row);
                    bound(msgs <= 3 * seeds * base_msgs, "mean messages", &row);
                    bound(2 * hi <= 7 * base_rounds, "max rounds", &row);
                }
            }
        }
    }
    // Adversarial: the first k roots each die on the first ack they get (the end of the
    // agreement), so every one of them costs a new gather and a new agreement.
    println!();
    println!("| p | roots killed in turn | rounds | messages | messages / p | agreed |");
    println!("|---|---|---|---|---|---|");
    for p in [256u32, 4096] {
        let (l, p64) = (log2_ceil(p), u64::from(p));
        for k in [1u32, 2, 8, 32] {
            let failures = (0..k).map(|r| (r, When::OnFirst("ack"))).collect();
            let r = run(&cfg(p, failures, 1));
            println!(
                "| {p} | {k} | {} | {} | {:.2} | {} |",
                r.rounds,
                r.messages,
                r.messages as f64 / p as f64,
                r.agreed
            );
            check(&r);
            let k = u64::from(k);
            let row = format!("p={p} k={k}: {} rounds, {} messages", r.rounds, r.messages);
            bound(r.dead.len() as u64 == k, "every root in turn died", &row);
            bound(r.rounds <= 2 * l + 2 + k * (2 * l + 2 + d), "rounds", &row);
            bound(r.messages <= 4 * (p64 - 1) + k * 4 * p64, "messages", &row);
        }
    }
    assert!(broken.is_empty(), "bounds broken:\n{}", broken.join("\n"));
}

#[test]
fn the_cli_exits_0_when_agreed() {
    use openib::cli::sim::{run as cli, FenceArgs, SimCmd};
    let args = |procs, failures| {
        SimCmd::Fence(FenceArgs {
            procs,
            failures,
            seed: 3,
            seeds: 1,
            detect_delay: 3,
            json: true,
        })
    };
    assert_eq!(cli(args(100, 7)), 0);
    assert_eq!(cli(args(4, 4)), 2);
    assert_eq!(cli(args(0, 0)), 2);
}

/// A longer hunt for counterexamples (release build advised):
/// `SIM_STRESS=20000 cargo test --release --test sim_fence -- --ignored --nocapture stress`.
#[test]
#[ignore]
fn stress() {
    let n: u64 = std::env::var("SIM_STRESS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut rng = Rng::new(77);
    let mut worst = 0u64;
    for seed in 0..n {
        let p = 2 + rng.below(if seed % 10 == 0 { 600 } else { 80 }) as u32;
        let f = rng.below(p as u64) as u32;
        let mut c = SimConfig::random(p, f, seed);
        c.max_detect_delay = rng.below(10);
        if seed % 3 == 1 {
            after_deciding(&mut c, &mut rng);
        }
        if seed % 3 == 0 {
            // Kill the first roots during the agreement.
            let kinds = ["up", "propose", "ack", "commit"];
            for r in 0..p.min(4) {
                if let Some(x) = c.failures.iter_mut().find(|x| x.0 == r) {
                    x.1 = When::OnFirst(kinds[rng.below(4) as usize]);
                }
            }
        }
        let r = run(&c);
        check(&r);
        worst = worst.max(r.rounds);
    }
    println!("{n} runs agreed; worst {worst} rounds");
}
