//! A deterministic simulator of group creation ([`super::GroupCreate`]) and its judge.
//!
//! Virtual processes run their machines in one process. Delivery is asynchronous: a message
//! sent at time `t` arrives at `t + 1 + d`, `d` uniform in `0..=max_delay`, but never before an
//! earlier message of the same link (per-link FIFO). Processes fail-stop: before the call, at
//! a given time, on their first received message of a kind (`"propose"`: inside the
//! agreement), or a given time after they decided (0: at once, with only a random prefix of
//! that batch's messages sent). A dying process sends only a random prefix of its last batch;
//! what it sent before is still delivered. The detector is perfect: each live process learns
//! of a death 1 to `1 + max_detect_delay` time units later (random per observer); a death
//! before the call is known at the start to the observers whose delay came out 0.
//!
//! Steps are counted causally: a message carries its sender's depth + 1, a process's depth is
//! the largest it received; a run's `steps` is the largest depth at which a survivor decided
//! (message hops on the critical path, whatever the delays).
//!
//! The judge checks termination, agreement and validity as docs/RUNTIME.md
//! ("Creating a group that survives failures") states them; see [`run`].

use super::{outcome_for, GcIn, GcMsg, GcOut, GroupCreate, GroupCreateError, Value};
use crate::runtime::sim_support::Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// When a process dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Before the call: it never starts.
    Before,
    /// After handling its inputs of this time (0 = its start).
    At(u64),
    /// On its first received message of this kind ("hello", "up", "full", "propose", "ack",
    /// "commit").
    OnFirst(&'static str),
    /// This long after it decided (0: at once, its last messages half sent).
    AfterDecide(u64),
}

/// A simulation to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The group each process passes (ascending, containing the process), by rank.
    pub groups: Vec<Arc<Vec<u32>>>,
    pub failures: Vec<(u32, When)>,
    pub seed: u64,
    /// Extra delivery delay per message: 0 to this many time units.
    pub max_delay: u64,
    /// Detection takes 1 + `min_detect_delay` to 1 + this many time units (a death before the
    /// call: `min_detect_delay` to this many, known at the start when 0).
    pub max_detect_delay: u64,
    pub min_detect_delay: u64,
    /// Give up after this time (the run then fails termination).
    pub max_time: u64,
}

impl SimConfig {
    /// `p` processes passing the same group (all of them), no failures, unit delays.
    pub fn same_groups(p: u32, seed: u64) -> SimConfig {
        let all = Arc::new((0..p).collect::<Vec<u32>>());
        SimConfig {
            groups: vec![all; p as usize],
            failures: Vec::new(),
            seed,
            max_delay: 0,
            max_detect_delay: 3,
            min_detect_delay: 0,
            max_time: 1_000_000,
        }
    }

    /// `p` processes passing `groups` (rank -> its group; a rank not listed passes every rank),
    /// with these failures, unit delays.
    pub fn with_groups(p: u32, groups: &[(u32, &[u32])], failures: Vec<(u32, When)>) -> SimConfig {
        let mut c = SimConfig::same_groups(p, 1);
        for &(r, g) in groups {
            let mut g = g.to_vec();
            g.sort_unstable();
            g.dedup();
            c.groups[r as usize] = Arc::new(g);
        }
        c.failures = failures;
        c
    }

    /// The random case of `seed`: 1 to `max_p` processes, up to 12 victims, groups that
    /// differ for none, 5 %, 20 % or 60 % of them, random delays and detection delays (the
    /// regression set and the stress runs).
    pub fn random_case(seed: u64, max_p: u64) -> SimConfig {
        let mut rng = Rng::new(seed);
        let p = 1 + rng.below(max_p) as u32;
        let f = rng.below(u64::from(p).min(12)) as u32;
        let differ = [0.0, 0.05, 0.2, 0.6][rng.below(4) as usize];
        SimConfig::random(p, f, differ, seed)
    }

    /// A harsher random case: most groups differ, long delays and detection delays, up to
    /// all but one process dying.
    pub fn harsh_case(seed: u64, max_p: u64) -> SimConfig {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let p = 1 + rng.below(max_p) as u32;
        let f = rng.below(u64::from(p)) as u32;
        let differ = 0.5 + rng.below(50) as f64 / 100.0;
        let mut c = SimConfig::random(p, f, differ, seed);
        c.max_delay = rng.below(10);
        c.max_detect_delay = rng.below(10);
        c
    }

    /// A random case: `p` processes; most pass one base group (every rank, or all but a few),
    /// about one in `1 / differ` passes it with a few ranks removed or added; `f` victims dying
    /// before the call, at a random time, inside the agreement or right after deciding;
    /// random delays.
    pub fn random(p: u32, f: u32, differ: f64, seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x32);
        let mut base: Vec<u32> = (0..p).collect();
        if p > 2 && rng.below(3) == 0 {
            for _ in 0..1 + rng.below(2) {
                let i = rng.below(base.len() as u64) as usize;
                base.remove(i);
            }
        }
        let base = Arc::new(base);
        let mut groups = Vec::with_capacity(p as usize);
        for r in 0..p {
            let differs = (rng.below(1_000_000) as f64) < differ * 1e6;
            if !differs && base.binary_search(&r).is_ok() {
                groups.push(base.clone());
                continue;
            }
            let mut g: BTreeSet<u32> = base.iter().copied().collect();
            g.insert(r);
            if differs {
                for _ in 0..1 + rng.below(3) {
                    let x = rng.below(p as u64) as u32;
                    if rng.below(2) == 0 {
                        g.remove(&x);
                    } else {
                        g.insert(x);
                    }
                }
                g.insert(r);
            }
            groups.push(Arc::new(g.into_iter().collect()));
        }
        let f = f.min(p.saturating_sub(1));
        let mut victims = BTreeSet::new();
        if f > 0 && rng.below(4) == 0 {
            victims.insert(0u32);
        }
        while (victims.len() as u32) < f {
            victims.insert(rng.below(p as u64) as u32);
        }
        let depth = 64 - u64::from(p).leading_zeros() as u64;
        let failures = victims
            .into_iter()
            .map(|r| {
                let w = match rng.below(7) {
                    0 => When::Before,
                    1 | 2 => When::At(rng.below(4 * depth + 6)),
                    3 => When::OnFirst("propose"),
                    4 => When::OnFirst("ack"),
                    5 => When::OnFirst("commit"),
                    _ => When::AfterDecide(rng.below(3)),
                };
                (r, w)
            })
            .collect();
        SimConfig {
            groups,
            failures,
            seed,
            max_delay: rng.below(4),
            max_detect_delay: rng.below(6),
            min_detect_delay: 0,
            max_time: 1_000_000,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct SimReport {
    pub p: u32,
    pub seed: u64,
    /// Message hops on the critical path to the last survivor's decision.
    pub steps: u64,
    /// Time of the last survivor's decision.
    pub time: u64,
    /// Messages sent (by live processes, including those to dead ones).
    pub messages: u64,
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Each process's outcome (None: it did not decide), by rank.
    pub outcomes: Vec<Option<Result<super::Decision, GroupCreateError>>>,
    /// Each process's decided value, by rank (kept when it died afterwards).
    pub values: Vec<Option<Value>>,
    pub dead: Vec<u32>,
    pub decided_then_died: Vec<u32>,
    /// Why the run is wrong (empty: terminated, agreed, valid).
    pub problems: Vec<String>,
}

impl SimReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
    /// The outcome of `rank`.
    pub fn outcome(&self, rank: u32) -> Option<&Result<super::Decision, GroupCreateError>> {
        self.outcomes[rank as usize].as_ref()
    }
}

enum Ev {
    Deliver {
        from: u32,
        to: u32,
        msg: GcMsg,
        depth: u64,
    },
    Notice {
        obs: u32,
        victim: u32,
    },
}

struct Proc {
    machine: Option<GroupCreate>,
    alive: bool,
    die_at: Option<u64>,
    die_on: Option<&'static str>,
    die_after_decide: Option<u64>,
    depth: u64,
    decided: Option<(Value, u64)>,
    outcome: Option<Result<super::Decision, GroupCreateError>>,
}

/// Runs one simulated group creation and judges it.
pub fn run(cfg: &SimConfig) -> SimReport {
    let p = cfg.groups.len() as u32;
    assert!(p > 0, "at least one process");
    let tag = super::tag_of("sim");
    let mut rng = Rng::new(cfg.seed);
    let mut procs: Vec<Proc> = (0..p)
        .map(|_| Proc {
            machine: None,
            alive: true,
            die_at: None,
            die_on: None,
            die_after_decide: None,
            depth: 0,
            decided: None,
            outcome: None,
        })
        .collect();
    let mut events: BTreeMap<u64, Vec<Ev>> = BTreeMap::new();
    let mut link_last: HashMap<(u32, u32), u64> = HashMap::new();
    let mut before = Vec::new();
    for &(r, w) in &cfg.failures {
        let pr = &mut procs[r as usize];
        match w {
            When::Before => before.push(r),
            When::At(t) => pr.die_at = Some(t),
            When::OnFirst(k) => pr.die_on = Some(k),
            When::AfterDecide(k) => pr.die_after_decide = Some(k),
        }
    }
    let mut dead = BTreeSet::new();
    let mut known_at_start: Vec<Vec<u32>> = vec![Vec::new(); p as usize];
    for &r in &before {
        procs[r as usize].alive = false;
        dead.insert(r);
    }
    for &r in &before {
        for obs in 0..p {
            if procs[obs as usize].alive {
                let d = detect_delay(&mut rng, cfg);
                if d == 0 {
                    known_at_start[obs as usize].push(r);
                } else {
                    events
                        .entry(d)
                        .or_default()
                        .push(Ev::Notice { obs, victim: r });
                }
            }
        }
    }
    let mut messages = 0u64;
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut last_time = 0u64;
    let mut steps = 0u64;
    let mut t = 0u64;
    let mut stuck = false;
    let trace = std::env::var_os("SIM_TRACE").is_some();
    // One initial view per distinct group list (its hash computed once).
    let mut views: Vec<super::View> = Vec::new();
    if trace {
        for (r, g) in cfg.groups.iter().enumerate() {
            eprintln!("group of {r}: {g:?}");
        }
        eprintln!("failures {:?}", cfg.failures);
    }
    loop {
        // Inputs of this time, per process, in arrival order.
        let mut inbox: BTreeMap<u32, Vec<(GcIn, u64)>> = BTreeMap::new();
        if t == 0 {
            for r in 0..p {
                if procs[r as usize].alive {
                    inbox.entry(r).or_default();
                }
            }
        }
        for ev in events.remove(&t).unwrap_or_default() {
            match ev {
                Ev::Deliver {
                    from,
                    to,
                    msg,
                    depth,
                } => {
                    if trace {
                        eprintln!("t={t} {from}->{to} {:?} vh={:x}", msg.body, msg.view_hash);
                    }
                    if procs[to as usize].alive {
                        inbox
                            .entry(to)
                            .or_default()
                            .push((GcIn::Msg { from, msg }, depth));
                    }
                }
                Ev::Notice { obs, victim } => {
                    if trace {
                        eprintln!("t={t} {obs} learns {victim} died");
                    }
                    if procs[obs as usize].alive {
                        inbox
                            .entry(obs)
                            .or_default()
                            .push((GcIn::PeerGone { rank: victim }, 0));
                    }
                }
            }
        }
        for r in 0..p {
            let pr = &procs[r as usize];
            if pr.alive && pr.die_at == Some(t) {
                inbox.entry(r).or_default();
            }
        }
        let mut dying_now = Vec::new();
        for (r, ins) in inbox {
            let pr = &mut procs[r as usize];
            if !pr.alive {
                continue;
            }
            let mut dying = pr.die_at == Some(t);
            if let Some(k) = pr.die_on {
                if ins
                    .iter()
                    .any(|(i, _)| matches!(i, GcIn::Msg { msg, .. } if msg.kind() == k))
                {
                    dying = true;
                }
            }
            // (outputs, depth they leave with)
            let mut sends: Vec<(u32, GcMsg, u64)> = Vec::new();
            let mut decided_now = false;
            let mut handle_outs = |pr: &mut Proc, outs: Vec<GcOut>, problems: &mut Vec<String>| {
                for o in outs {
                    match o {
                        GcOut::Send { to, msg } => sends.push((to, msg, pr.depth + 1)),
                        GcOut::Decided(res) => {
                            let m = pr.machine.as_ref().expect("machine");
                            let v = m.decision().expect("decided").clone();
                            if trace {
                                eprintln!("t={t} {r} decided {res:?} (root {})", v.root);
                            }
                            pr.decided = Some((v, pr.depth));
                            pr.outcome = Some(res);
                            decided_now = true;
                        }
                        GcOut::TimedOut { waiting } => {
                            problems.push(format!("rank {r} timed out waiting for {waiting:?}"))
                        }
                    }
                }
            };
            if t == 0 && pr.machine.is_none() {
                let g = &cfg.groups[r as usize];
                let view = match views.iter().find(|v| Arc::ptr_eq(&v.members, g)) {
                    Some(v) => v.clone(),
                    None => {
                        let v = GroupCreate::initial_view(g.clone());
                        views.push(v.clone());
                        v
                    }
                };
                match GroupCreate::start_view(r, tag, view, &known_at_start[r as usize], None) {
                    Ok((m, outs)) => {
                        pr.machine = Some(m);
                        handle_outs(pr, outs, &mut problems);
                    }
                    Err(e) => problems.push(format!("rank {r}: {e}")),
                }
            }
            for (input, depth) in ins {
                pr.depth = pr.depth.max(depth);
                let Some(m) = pr.machine.as_mut() else {
                    break;
                };
                let outs = m.handle(input);
                handle_outs(pr, outs, &mut problems);
            }
            if decided_now {
                if let Some(k) = pr.die_after_decide.take() {
                    if k == 0 {
                        dying = true;
                    } else {
                        pr.die_at = Some(t + k);
                    }
                }
                if !dying {
                    last_time = last_time.max(t);
                    steps = steps.max(pr.depth);
                }
            }
            let keep = if dying {
                rng.below(sends.len() as u64 + 1) as usize
            } else {
                sends.len()
            };
            for (to, msg, depth) in sends.into_iter().take(keep) {
                messages += 1;
                *by_kind.entry(msg.kind()).or_default() += 1;
                let at = (t + 1 + rng.below(cfg.max_delay + 1))
                    .max(*link_last.get(&(r, to)).unwrap_or(&0));
                link_last.insert((r, to), at);
                events.entry(at).or_default().push(Ev::Deliver {
                    from: r,
                    to,
                    msg,
                    depth,
                });
            }
            if dying {
                if trace {
                    eprintln!("t={t} {r} dies ({keep} messages of its last batch sent)");
                }
                dying_now.push(r);
            }
        }
        for r in dying_now {
            let pr = &mut procs[r as usize];
            pr.alive = false;
            pr.machine = None;
            dead.insert(r);
            for obs in 0..p {
                if obs != r && procs[obs as usize].alive {
                    let d = detect_delay(&mut rng, cfg);
                    events
                        .entry(t + 1 + d)
                        .or_default()
                        .push(Ev::Notice { obs, victim: r });
                }
            }
        }
        let all_done = procs.iter().all(|q| !q.alive || q.decided.is_some());
        let deaths_pending = procs
            .iter()
            .any(|q| q.alive && q.die_at.is_some_and(|d| d > t));
        if all_done && !deaths_pending {
            break;
        }
        // Next time with something to do.
        let next_ev = events.keys().next().copied();
        let next_death = procs
            .iter()
            .filter(|q| q.alive)
            .filter_map(|q| q.die_at.filter(|d| *d > t))
            .min();
        let Some(next) = [next_ev, next_death].into_iter().flatten().min() else {
            stuck = !all_done;
            break;
        };
        if next > cfg.max_time {
            stuck = true;
            break;
        }
        t = next;
    }
    if stuck {
        problems.push(format!("no progress (stopped at time {t})"));
        for q in procs
            .iter()
            .filter(|q| q.alive && q.decided.is_none())
            .take(40)
        {
            if let Some(m) = &q.machine {
                problems.push(m.describe());
            }
        }
    }
    let values: Vec<Option<Value>> = procs
        .iter()
        .map(|q| q.decided.as_ref().map(|d| d.0.clone()))
        .collect();
    let outcomes = procs.iter_mut().map(|q| q.outcome.take()).collect();
    let survivors: Vec<u32> = (0..p).filter(|&r| procs[r as usize].alive).collect();
    let decided_then_died: Vec<u32> = (0..p)
        .filter(|&r| !procs[r as usize].alive && procs[r as usize].decided.is_some())
        .collect();
    let callers: BTreeSet<u32> = (0..p).filter(|r| !before.contains(r)).collect();
    judge(
        cfg,
        &values,
        &survivors,
        &decided_then_died,
        &dead,
        &callers,
        &mut problems,
    );
    problems.truncate(60);
    SimReport {
        p,
        seed: cfg.seed,
        steps,
        time: last_time,
        messages,
        by_kind,
        outcomes,
        values,
        dead: dead.into_iter().collect(),
        decided_then_died,
        problems,
    }
}

/// Judges decided `values` (by rank) of a run of `cfg` in which `dead` died (the dead that
/// hold a value decided and then died): the checks of [`run`]'s judge, for tests of the judge.
pub fn judge_values(cfg: &SimConfig, values: &[Option<Value>], dead: &[u32]) -> Vec<String> {
    let p = cfg.groups.len() as u32;
    let survivors: Vec<u32> = (0..p).filter(|r| !dead.contains(r)).collect();
    let decided_then_died: Vec<u32> = dead
        .iter()
        .copied()
        .filter(|r| values[*r as usize].is_some())
        .collect();
    let before: BTreeSet<u32> = cfg
        .failures
        .iter()
        .filter(|f| f.1 == When::Before)
        .map(|f| f.0)
        .collect();
    let callers: BTreeSet<u32> = (0..p).filter(|r| !before.contains(r)).collect();
    let mut problems = Vec::new();
    judge(
        cfg,
        values,
        &survivors,
        &decided_then_died,
        &dead.iter().copied().collect(),
        &callers,
        &mut problems,
    );
    problems
}

fn detect_delay(rng: &mut Rng, cfg: &SimConfig) -> u64 {
    let lo = cfg.min_detect_delay.min(cfg.max_detect_delay);
    lo + rng.below(cfg.max_detect_delay - lo + 1)
}

fn has(v: &[u32], r: u32) -> bool {
    v.binary_search(&r).is_ok()
}

/// The properties (docs/RUNTIME.md, "Creating a group that survives failures"):
/// - termination: every survivor decided;
/// - agreement (a): a decider (a survivor, or a process that decided and then died) in the
///   new group of a decided value holds that group;
/// - agreement (b): the new groups of two decided values are equal or disjoint;
/// - agreement (c): two survivors `x` and `y` hold the same value when `x` is a participant
///   of `y`'s value that it does not hold dead, or each is a participant of the other's;
/// - validity of every decided value (U, I, D): D holds only dead processes; every member of N
///   = I \ D called, and N is within its group and its group within U; N is within the group
///   of every surviving participant; every surviving participant that is in the group of
///   every caller among the participants is in N; and every survivor's error names a caller
///   whose group really lacks it.
fn judge(
    cfg: &SimConfig,
    values: &[Option<Value>],
    survivors: &[u32],
    decided_then_died: &[u32],
    dead: &BTreeSet<u32>,
    callers: &BTreeSet<u32>,
    problems: &mut Vec<String>,
) {
    let g = |r: u32| -> &[u32] { &cfg.groups[r as usize] };
    for &r in survivors {
        if values[r as usize].is_none() {
            problems.push(format!("rank {r} (alive) did not decide"));
        }
    }
    // Distinct values and who holds each.
    let mut distinct: Vec<(Value, Vec<u32>)> = Vec::new();
    for &r in survivors.iter().chain(decided_then_died) {
        let Some(v) = &values[r as usize] else {
            continue;
        };
        match distinct.iter_mut().find(|(w, _)| w == v) {
            Some((_, who)) => who.push(r),
            None => distinct.push((v.clone(), vec![r])),
        }
    }
    let alive = |r: u32| survivors.binary_search(&r).is_ok();
    // Agreement (a): a decider in a decided group holds that group; and (c): survivors that
    // are participants of each other's decisions (or one a participant of the other's not
    // held dead) hold the same value.
    for (a, (va, xs)) in distinct.iter().enumerate() {
        for (vb, ys) in distinct.iter().skip(a + 1) {
            let member = |vx: &Value, xs: &[u32], vy: &Value| {
                xs.iter()
                    .find(|&&x| has(vy.group(), x) && vx.group() != vy.group())
                    .copied()
            };
            let live = |xs: &[u32]| xs.iter().copied().filter(|&x| alive(x)).collect::<Vec<_>>();
            let (lxs, lys) = (live(xs), live(ys));
            let clash = |vx: &Value, xs: &[u32], vy: &Value, ys: &[u32]| {
                xs.iter()
                    .find(|&&x| {
                        has(&vy.view.members, x)
                            && !ys.is_empty()
                            && (!has(&vy.failed, x) || ys.iter().any(|&y| has(&vx.view.members, y)))
                    })
                    .copied()
            };
            let found = member(va, xs, vb)
                .or_else(|| member(vb, ys, va))
                .or_else(|| clash(va, &lxs, vb, &lys))
                .or_else(|| clash(vb, &lys, va, &lxs));
            if let Some(x) = found {
                problems.push(format!(
                    "disagreement: rank {x} holds {:?}, others {:?} (roots {} and {})",
                    if xs.contains(&x) {
                        va.group()
                    } else {
                        vb.group()
                    },
                    if xs.contains(&x) {
                        vb.group()
                    } else {
                        va.group()
                    },
                    va.root,
                    vb.root
                ));
            }
        }
    }
    // Agreement (b): two different decisions never share a member of their new groups (also
    // when no process holds both: a member that died undecided, or decisions of processes
    // that never heard of each other).
    for (a, (va, xs)) in distinct.iter().enumerate() {
        for (vb, ys) in distinct.iter().skip(a + 1) {
            let (na, nb) = (va.group(), vb.group());
            if na == nb {
                continue;
            }
            if let Some(x) = na.iter().find(|&&x| has(nb, x)) {
                problems.push(format!(
                    "overlapping groups: rank {x} is in {na:?} (held by {xs:?}, root {}) and in \
                     {nb:?} (held by {ys:?}, root {})",
                    va.root, vb.root
                ));
            }
        }
    }
    // Validity. Groups are checked once per distinct list (the simulator shares them).
    let same = |a: &Arc<Vec<u32>>, b: &Arc<Vec<u32>>| Arc::ptr_eq(a, b) || a == b;
    for (v, holders) in &distinct {
        let u = &v.view.members;
        let n: &[u32] = v.group();
        for &d in v.failed.iter() {
            if !dead.contains(&d) {
                problems.push(format!("live rank {d} agreed dead"));
            }
        }
        let mut checked: Vec<Arc<Vec<u32>>> = Vec::new();
        let mut check_group = |k: u32, what: &str, problems: &mut Vec<String>| {
            let gk = &cfg.groups[k as usize];
            if checked.iter().any(|c| same(c, gk)) {
                return;
            }
            let mut bad = false;
            if n.iter().any(|&x| !has(gk, x)) {
                problems.push(format!(
                    "new group {n:?} not within {what} {k}'s group {gk:?}"
                ));
                bad = true;
            }
            if gk.iter().any(|&x| !has(u, x)) {
                problems.push(format!("{what} {k}'s group not within the participants"));
                bad = true;
            }
            if !bad {
                checked.push(gk.clone());
            }
        };
        for &k in n {
            if !callers.contains(&k) {
                problems.push(format!("rank {k} in the new group never called"));
                continue;
            }
            check_group(k, "member", problems);
        }
        for &k in u.iter().filter(|&&k| alive(k)) {
            check_group(k, "surviving participant", problems);
        }
        // Every surviving participant in every calling participant's group is in N.
        let mut inter: Option<Vec<u32>> = None;
        let mut seen: Vec<Arc<Vec<u32>>> = Vec::new();
        for &c in u.iter().filter(|r| callers.contains(r)) {
            let gc = &cfg.groups[c as usize];
            if seen.iter().any(|x| same(x, gc)) {
                continue;
            }
            seen.push(gc.clone());
            inter = Some(match inter {
                None => gc.to_vec(),
                Some(i) => i.into_iter().filter(|x| has(gc, *x)).collect(),
            });
        }
        for &k in inter.unwrap_or_default().iter() {
            if alive(k) && has(u, k) && !has(n, k) {
                problems.push(format!(
                    "surviving participant {k} is in every participant's group but left out of {n:?}"
                ));
            }
        }
        for &x in holders.iter().filter(|&&x| alive(x) && !has(n, x)) {
            match outcome_for(x, v) {
                Ok(_) => {}
                Err(GroupCreateError::ExcludedBy { by, .. }) => {
                    if !callers.contains(&by) || has(g(by), x) {
                        problems.push(format!("rank {x} wrongly named excluded by {by}"));
                    }
                }
                Err(GroupCreateError::NotAParticipant { root, .. }) => {
                    if has(u, x) || has(g(root), x) {
                        problems.push(format!("rank {x} wrongly named not a participant"));
                    }
                }
                Err(e) => problems.push(format!("survivor {x}: {e}")),
            }
        }
    }
}

/// The failure counts of the measurement (issue 32: failure-free, and 1, 2 and 4 failures).
pub const MEASURED_FAILURES: [u32; 4] = [0, 1, 2, 4];

/// Seeds per point with failures (failure-free runs are one seed: they do not vary).
pub const MEASURED_SEEDS: u64 = 3;

/// One point of the measurement: `p` processes passing the same group, `failures` of them
/// dying at random times in the tree or the agreement, or on their first proposal.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measured {
    pub p: u32,
    pub failures: u32,
    /// Runs (seeds 0, 1, ...).
    pub runs: u64,
    /// The largest `steps` of the runs ([`SimReport::steps`]).
    pub steps_max: u64,
    /// The mean of the runs' messages (rounded down).
    pub messages_mean: u64,
    /// What the judge found wrong in any run, with its seed (empty: every run terminated,
    /// agreed and was valid).
    pub problems: Vec<String>,
}

/// `ceil(log2 p)`, 0 for p <= 1.
pub fn log2_ceil(p: u32) -> u64 {
    u64::from(32 - (p.max(1) - 1).leading_zeros())
}

/// Runs the point (`p`, `failures`) of the measurement: one run without failures, else
/// [`MEASURED_SEEDS`] runs, each with `failures` distinct victims (`failures` < `p`), each
/// dying on its first proposal (a third of them) or at a random time below the failure-free
/// run's `2 ceil(log2 p) + 2` steps. Deterministic: the same point gives the same numbers.
pub fn measure(p: u32, failures: u32) -> Measured {
    assert!(failures < p, "someone must survive");
    let (mut steps_max, mut msgs, mut runs) = (0u64, 0u64, 0u64);
    let mut problems = Vec::new();
    for seed in 0..if failures == 0 { 1 } else { MEASURED_SEEDS } {
        let mut c = SimConfig::same_groups(p, seed);
        let mut rng = Rng::new(seed ^ (u64::from(p) << 8) ^ u64::from(failures));
        let depth = log2_ceil(p);
        let mut victims = BTreeSet::new();
        while (victims.len() as u32) < failures {
            victims.insert(rng.below(u64::from(p)) as u32);
        }
        c.failures = victims
            .into_iter()
            .map(|v| {
                let w = match rng.below(3) {
                    0 => When::OnFirst("propose"),
                    _ => When::At(rng.below(2 * depth + 2)),
                };
                (v, w)
            })
            .collect();
        let r = run(&c);
        problems.extend(
            r.problems
                .iter()
                .map(|e| format!("p={p} failures={failures} seed={seed}: {e}")),
        );
        steps_max = steps_max.max(r.steps);
        msgs += r.messages;
        runs += 1;
    }
    Measured {
        p,
        failures,
        runs,
        steps_max,
        messages_mean: msgs / runs,
        problems,
    }
}
