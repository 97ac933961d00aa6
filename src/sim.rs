//! A deterministic simulator for the resilient fence ([`crate::runtime::resilient`]).
//!
//! Up to thousands of virtual processes run their state machines in one process. Time moves
//! in rounds: every message sent in round `t` is delivered in round `t + 1` (in an order
//! shuffled by the seeded RNG). Processes fail-stop: a process dies before the call, at a given
//! round, on its first message of a kind (`propose`: during the agreement; `commit`: while
//! the decision spreads), or a given number of rounds after it decided (0: in the very round,
//! mid-way through sending its commits). In the round it dies it handles its inputs and then
//! only a random prefix of what it sends leaves (it dies mid-broadcast); it never sends again.
//! Messages it sent before dying are still delivered. A decision is made when the machine emits
//! `Done`, so a process that decided and then died keeps its decision: the judge checks
//! *uniform* agreement, every decision of every process, dead or alive, the same. The failure detector is perfect: every live process
//! learns of a death 1 to `1 + max_detect_delay` rounds after it (random per observer), and
//! nobody is reported dead while alive. A death before the call is known at the start to the
//! observers whose delay came out 0.

use crate::runtime::resilient::{Gathered, ResIn, ResMsg, ResOut, ResilientFence};
pub use crate::runtime::sim_support::{contribution, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// When a process dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Before the call: it never starts.
    Before,
    /// After handling its inputs of this round (round 0 = its start).
    AtRound(u64),
    /// On its first received message of this kind ("up", "propose", "ack", "commit").
    OnFirst(&'static str),
    /// This many rounds after the round in which it decided (0: in that round, after a random
    /// prefix of its sends; a root then dies with its commits half sent). Never, if it does
    /// not decide.
    AfterDecide(u64),
}

/// A simulation to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub procs: u32,
    pub failures: Vec<(u32, When)>,
    pub seed: u64,
    /// Detection takes 1 to 1 + this many rounds.
    pub max_detect_delay: u64,
    /// Give up after this many rounds (the run then counts as not agreed).
    pub max_rounds: u64,
}

impl SimConfig {
    /// `f` distinct random victims with random timing: before the call, at a random early
    /// round, during the agreement, or while the decision spreads; rank 0 (the first root) is
    /// a victim with probability 1/4 when `f > 0`.
    pub fn random(procs: u32, f: u32, seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xfe);
        let f = f.min(procs.saturating_sub(1));
        let mut victims = BTreeSet::new();
        if f > 0 && rng.below(4) == 0 {
            victims.insert(0u32);
        }
        while (victims.len() as u32) < f {
            victims.insert(rng.below(procs as u64) as u32);
        }
        let depth = 64 - (procs as u64).leading_zeros() as u64;
        let failures = victims
            .into_iter()
            .map(|r| {
                let w = match rng.below(5) {
                    0 => When::Before,
                    1 | 2 => When::AtRound(rng.below(4 * depth + 4)),
                    3 => When::OnFirst("propose"),
                    _ => When::OnFirst("commit"),
                };
                (r, w)
            })
            .collect();
        SimConfig {
            procs,
            failures,
            seed,
            max_detect_delay: 3,
            max_rounds: 100_000,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimReport {
    pub p: u32,
    pub f: u32,
    pub seed: u64,
    /// Rounds until the last survivor had the decision.
    pub rounds: u64,
    /// Messages sent (by live processes, including those to dead ones).
    pub messages: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub survivors: u32,
    /// Every survivor decided, all decisions equal (uniform agreement: those of processes that
    /// decided and then died included), the failed set only names dead processes, and the
    /// data is exactly every non-failed member's contribution.
    pub agreed: bool,
    /// The agreed failed set (of the lowest survivor).
    pub failed: Vec<u32>,
    /// Who actually died.
    pub dead: Vec<u32>,
    /// The dead that had decided before they died (their decisions are judged too).
    pub decided_then_died: Vec<u32>,
    /// Why not agreed (empty when agreed).
    pub problems: Vec<String>,
}

struct Proc {
    machine: Option<ResilientFence>,
    alive: bool,
    die_at: Option<u64>,
    die_on: Option<&'static str>,
    /// [`When::AfterDecide`].
    die_after_decide: Option<u64>,
    /// Its decision (kept when it dies afterwards).
    done: Option<(Arc<Gathered>, Arc<Vec<u32>>)>,
}

/// Whether `pr` dies in round `t` because it has [`When::AfterDecide`] and `outs` (its outputs
/// of round `t`) hold its decision: at once for 0 rounds, else it is scheduled.
fn dies_on_deciding(pr: &mut Proc, outs: &[ResOut], t: u64) -> bool {
    let Some(k) = pr.die_after_decide else {
        return false;
    };
    if !outs.iter().any(|o| matches!(o, ResOut::Done { .. })) {
        return false;
    }
    pr.die_after_decide = None;
    if k == 0 {
        true
    } else {
        pr.die_at = Some(t + k);
        false
    }
}

/// Runs one simulated fence.
pub fn run(cfg: &SimConfig) -> SimReport {
    let p = cfg.procs;
    assert!(p > 0, "at least one process");
    let mut rng = Rng::new(cfg.seed);
    let members: Vec<u32> = (0..p).collect();
    let mut procs: Vec<Proc> = (0..p)
        .map(|_| Proc {
            machine: None,
            alive: true,
            die_at: None,
            die_on: None,
            die_after_decide: None,
            done: None,
        })
        .collect();
    // Detector notices by round: (observer, dead).
    let mut notices: BTreeMap<u64, Vec<(u32, u32)>> = BTreeMap::new();
    let mut known_at_start: Vec<Vec<u32>> = vec![Vec::new(); p as usize];
    let mut before = Vec::new();
    for &(r, w) in &cfg.failures {
        match w {
            When::Before => before.push(r),
            When::AtRound(t) => procs[r as usize].die_at = Some(t),
            When::OnFirst(k) => procs[r as usize].die_on = Some(k),
            When::AfterDecide(k) => procs[r as usize].die_after_decide = Some(k),
        }
    }
    let mut dead = BTreeSet::new();
    let schedule = |rng: &mut Rng,
                    notices: &mut BTreeMap<u64, Vec<(u32, u32)>>,
                    procs: &[Proc],
                    victim: u32,
                    at: u64| {
        for obs in 0..p {
            if obs != victim && procs[obs as usize].alive {
                let d = rng.below(cfg.max_detect_delay + 1);
                notices.entry(at + 1 + d).or_default().push((obs, victim));
            }
        }
    };
    for &r in &before {
        procs[r as usize].alive = false;
        dead.insert(r);
    }
    for &r in &before {
        for obs in 0..p {
            if procs[obs as usize].alive {
                let d = rng.below(cfg.max_detect_delay + 1);
                if d == 0 {
                    known_at_start[obs as usize].push(r);
                } else {
                    notices.entry(d).or_default().push((obs, r));
                }
            }
        }
    }
    let mut messages = 0u64;
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let mut queue: Vec<(u32, u32, ResMsg)> = Vec::new();
    let mut last_done = 0u64;
    // Handles outputs of `me` in round `t`: records a decision (also of a process dying in this
    // round: it decided before it died) and sends all, or if `dying` a random prefix, of its
    // messages.
    let mut emit = |me: u32,
                    outs: Vec<ResOut>,
                    dying: bool,
                    rng: &mut Rng,
                    queue: &mut Vec<(u32, u32, ResMsg)>,
                    procs: &mut [Proc],
                    t: u64| {
        let mut sends = Vec::new();
        for o in outs {
            match o {
                ResOut::Send { to, msg } => sends.push((to, msg)),
                ResOut::Done { data, failed } => {
                    procs[me as usize].done = Some((data, failed));
                    if !dying {
                        last_done = last_done.max(t);
                    }
                }
                ResOut::TimedOut { .. } => {}
            }
        }
        let keep = if dying {
            rng.below(sends.len() as u64 + 1) as usize
        } else {
            sends.len()
        };
        for (to, msg) in sends.into_iter().take(keep) {
            messages += 1;
            *by_kind.entry(msg.kind().to_string()).or_default() += 1;
            queue.push((me, to, msg));
        }
    };
    // Round 0: everyone alive starts.
    let mut dying_now = Vec::new();
    for r in 0..p {
        if !procs[r as usize].alive {
            continue;
        }
        let (m, outs) = ResilientFence::start(
            r,
            1,
            &members,
            &known_at_start[r as usize],
            contribution(r),
            None,
        );
        procs[r as usize].machine = Some(m);
        let dying = procs[r as usize].die_at == Some(0)
            || dies_on_deciding(&mut procs[r as usize], &outs, 0);
        emit(r, outs, dying, &mut rng, &mut queue, &mut procs, 0);
        if dying {
            dying_now.push(r);
        }
    }
    let kill = |r: u32,
                t: u64,
                procs: &mut [Proc],
                rng: &mut Rng,
                notices: &mut BTreeMap<u64, Vec<(u32, u32)>>,
                dead: &mut BTreeSet<u32>| {
        let pr = &mut procs[r as usize];
        pr.alive = false;
        pr.machine = None;
        dead.insert(r);
        schedule(rng, notices, procs, r, t);
    };
    for r in dying_now.drain(..) {
        kill(r, 0, &mut procs, &mut rng, &mut notices, &mut dead);
    }
    let mut t = 0u64;
    let all_done = |procs: &[Proc]| procs.iter().all(|q| !q.alive || q.done.is_some());
    let mut inbox: Vec<Vec<ResIn>> = (0..p).map(|_| Vec::new()).collect();
    let mut stuck = false;
    while !all_done(&procs) {
        t += 1;
        if t > cfg.max_rounds {
            stuck = true;
            break;
        }
        if queue.is_empty() && notices.range(t..).next().is_none() {
            let pending_deaths = procs
                .iter()
                .any(|q| q.alive && q.die_at.is_some_and(|d| d >= t));
            if !pending_deaths {
                stuck = true;
                break;
            }
        }
        rng.shuffle(&mut queue);
        for (from, to, msg) in queue.drain(..) {
            if procs[to as usize].alive {
                inbox[to as usize].push(ResIn::Msg { from, msg });
            }
        }
        if let Some(ns) = notices.remove(&t) {
            for (obs, victim) in ns {
                if procs[obs as usize].alive {
                    inbox[obs as usize].push(ResIn::PeerGone { rank: victim });
                }
            }
        }
        for r in 0..p {
            let ins = std::mem::take(&mut inbox[r as usize]);
            let pr = &mut procs[r as usize];
            if !pr.alive {
                continue;
            }
            let mut dying = pr.die_at == Some(t);
            if let Some(k) = pr.die_on {
                if ins
                    .iter()
                    .any(|i| matches!(i, ResIn::Msg { msg, .. } if msg.kind() == k))
                {
                    dying = true;
                }
            }
            if ins.is_empty() && !dying {
                continue;
            }
            let m = pr.machine.as_mut().expect("a live process has a machine");
            let mut outs = Vec::new();
            for i in ins {
                outs.extend(m.handle(i));
            }
            let dying = dying || dies_on_deciding(pr, &outs, t);
            emit(r, outs, dying, &mut rng, &mut queue, &mut procs, t);
            if dying {
                dying_now.push(r);
            }
        }
        for r in dying_now.drain(..) {
            kill(r, t, &mut procs, &mut rng, &mut notices, &mut dead);
        }
    }
    // Judge.
    let mut problems = Vec::new();
    if stuck {
        problems.push(format!("no progress (stopped at round {t})"));
    }
    let survivors: Vec<u32> = (0..p).filter(|&r| procs[r as usize].alive).collect();
    let decided_then_died: Vec<u32> = (0..p)
        .filter(|&r| !procs[r as usize].alive && procs[r as usize].done.is_some())
        .collect();
    for &r in &survivors {
        if procs[r as usize].done.is_none() {
            problems.push(format!("rank {r} did not decide"));
        }
    }
    // Uniform agreement: every decision made, by survivors (first) and by processes that
    // decided and then died, equals the first one.
    let mut reference: Option<(Arc<Gathered>, Arc<Vec<u32>>)> = None;
    for &r in survivors.iter().chain(&decided_then_died) {
        let Some(d) = &procs[r as usize].done else {
            continue;
        };
        let who = if procs[r as usize].alive {
            format!("rank {r}")
        } else {
            format!("rank {r} (decided, then died)")
        };
        match &reference {
            None => reference = Some(d.clone()),
            Some(refd) => {
                if refd.1 != d.1 {
                    problems.push(format!(
                        "{who}: failed set {:?} differs from {:?}",
                        d.1, refd.1
                    ));
                } else if refd.0 != d.0 {
                    problems.push(format!("{who}: data differs"));
                }
            }
        }
    }
    let failed = reference.as_ref().map(|d| d.1.to_vec()).unwrap_or_default();
    if let Some((data, failed)) = &reference {
        for r in failed.iter() {
            if !dead.contains(r) {
                problems.push(format!("live rank {r} in the failed set"));
            }
        }
        let expect: Vec<u32> = (0..p).filter(|r| !failed.contains(r)).collect();
        if data.keys().copied().collect::<Vec<_>>() != expect {
            problems.push("data is not exactly the non-failed members'".into());
        }
        for (r, es) in data.iter() {
            if *es != contribution(*r) {
                problems.push(format!("rank {r}'s data is wrong"));
            }
        }
    }
    problems.truncate(20);
    SimReport {
        p,
        f: cfg.failures.len() as u32,
        seed: cfg.seed,
        rounds: last_done,
        messages,
        by_kind,
        survivors: survivors.len() as u32,
        agreed: problems.is_empty(),
        failed,
        dead: dead.into_iter().collect(),
        decided_then_died,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(10)).collect();
        assert_eq!(xs, ys);
        assert!((0..10).all(|v| xs.contains(&v)));
    }

    #[test]
    fn same_seed_same_run() {
        let c = SimConfig::random(100, 5, 42);
        let a = run(&c);
        let b = run(&c);
        assert_eq!(
            (a.rounds, a.messages, a.failed),
            (b.rounds, b.messages, b.failed)
        );
    }

    #[test]
    fn a_root_that_decides_and_dies_keeps_its_decision() {
        for seed in 0..8 {
            let c = SimConfig {
                procs: 2,
                failures: vec![(0, When::AfterDecide(0))],
                seed,
                max_detect_delay: 2,
                max_rounds: 1000,
            };
            let r = run(&c);
            assert!(r.agreed, "{r:?}");
            assert_eq!(r.dead, vec![0]);
            assert_eq!(r.decided_then_died, vec![0], "{r:?}");
            // Rank 1 re-proposed rank 0's decision: 0 is not named failed by this fence.
            assert!(r.failed.is_empty(), "{r:?}");
        }
    }

    /// The root dies right after deciding, and every member that gets its commit dies on it
    /// (but the last): the decision lives only among the dead, and the survivors (new roots,
    /// one after another) must re-propose it unchanged, or uniform agreement breaks.
    #[test]
    fn a_decision_held_only_by_the_dead_is_re_proposed_unchanged() {
        let mut dead_deciders = 0;
        for p in [3u32, 4, 8, 16] {
            for seed in 0..8 {
                let mut failures = vec![(0, When::AfterDecide(seed % 2))];
                failures.extend((1..p - 1).map(|r| (r, When::OnFirst("commit"))));
                let c = SimConfig {
                    procs: p,
                    failures,
                    seed,
                    max_detect_delay: seed % 3,
                    max_rounds: 1000,
                };
                let r = run(&c);
                assert!(r.agreed, "{r:?}");
                assert!(r.decided_then_died.contains(&0), "{r:?}");
                dead_deciders += r.decided_then_died.len();
                // Everyone acknowledged the root's value before it decided: the dead that
                // decided are not named failed by this fence.
                assert!(
                    r.decided_then_died.iter().all(|d| !r.failed.contains(d)),
                    "{r:?}"
                );
            }
        }
        // Not only the root: members that got a commit decided and died too.
        assert!(dead_deciders > 32, "{dead_deciders}");
    }

    fn log2_ceil(p: u32) -> u64 {
        u64::from(32 - (p.max(1) - 1).leading_zeros())
    }

    /// Issue 32's bound for the job-wide fence: failure-free, at most `2 ceil(log2 p) + 2`
    /// steps (the gather up the tree, the proposal down, the acknowledgements straight to the
    /// root, its commits straight back; the first protocol took `4 ceil(log2 p)`, 48 here), in
    /// `4 (p - 1)` messages, one of each kind per member but the root.
    #[test]
    fn failure_free_steps_at_4096() {
        let p = 4096u32;
        let r = run(&SimConfig::random(p, 0, 3));
        assert!(r.agreed, "{:?}", r.problems);
        assert_eq!(r.rounds, 2 * log2_ceil(p) + 2, "{:?}", r.by_kind);
        assert_eq!(r.messages, 4 * u64::from(p - 1), "{:?}", r.by_kind);
        let each = u64::from(p - 1);
        let want: BTreeMap<String, u64> = ["ack", "commit", "propose", "up"]
            .into_iter()
            .map(|k| (k.to_string(), each))
            .collect();
        assert_eq!(r.by_kind, want);
        // Small jobs too, powers of two or not.
        for p in [2u32, 3, 5, 8, 33, 100] {
            let r = run(&SimConfig::random(p, 0, 1));
            assert!(r.agreed, "{:?}", r.problems);
            assert!(r.rounds <= 2 * log2_ceil(p) + 2, "p={p}: {}", r.rounds);
            assert_eq!(r.messages, 4 * u64::from(p - 1), "p={p}");
        }
    }

    /// With f random failures (before the call, early, inside the agreement, on the first
    /// commit; the root among the victims a quarter of the time), the messages stay below
    /// `p log2 p`, and every run agrees.
    #[test]
    fn messages_with_failures_stay_below_p_log_p() {
        let p = 1024u32;
        let bound = u64::from(p) * log2_ceil(p);
        let mut root_died = 0;
        for f in [1u32, 2, 4] {
            for seed in 0..6u64 {
                let r = run(&SimConfig::random(p, f, seed));
                assert!(r.agreed, "f={f} seed={seed}: {:?}", r.problems);
                assert!(
                    r.messages < bound,
                    "f={f} seed={seed}: {} messages {:?}",
                    r.messages,
                    r.by_kind
                );
                root_died += usize::from(r.dead.contains(&0));
            }
        }
        // The costly case (a new root's gather and agreement) is among them.
        assert!(root_died >= 2, "{root_died}");
    }

    #[test]
    fn a_lone_process_agrees_at_once() {
        let r = run(&SimConfig::random(1, 0, 1));
        assert!(r.agreed, "{r:?}");
        assert_eq!(r.messages, 0);
    }
}
