//! `openib group-create`: every rank of the job creates a group from the group it passes
//! (issue 32; [`Transport::group_create`]) and prints its outcome, one line per rank.
//!
//! Run under a runtime: `openib run -n 8 -- openib group-create --group 0-7`, or mpirun and srun
//! (they only provide the runtime; the protocol goes over the transport). The group each rank
//! passes is `--group` (the same for every rank), or with `--random-groups SEED` one derived
//! from the seed and the rank ([`random_group`]: ranks pass differing groups, reproducibly).
//! The runtime's failure snapshot is added to it. After printing, a rank keeps answering the
//! protocol until a runtime fence over the survivors completes (so no rank leaves while
//! another still needs its answer), then finalizes. `--repeat N` measures instead: N
//! operations over the whole job against N whole-job runtime fences (rank 0 prints the
//! times).
//!
//! Exit: 0 when this rank's operation decided (member or left out), 1 when it timed out or
//! failed, 2 on bad usage. Fault points: `OPENIB_FAULT=gc-before:R`, `gc-tree:R`, `gc-agree:R`
//! (src/fault.rs).

use super::exit;
use crate::modex::exchange::ExchangeMode;
use crate::ping::PingConfig;
use crate::runtime::group_create::{Decision, GroupCreateError};
use crate::runtime::{Group, JobInfo, ProcSet, Runtime, RuntimeError, Scope};
use crate::transport::{GroupCreateFailure, IdleBackoff, Transport, TransportConfig};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct GroupCreateArgs {
    /// The group this rank passes: ranks and ranges, e.g. `0-7` or `0,2,4-6`; `all` (the
    /// default) is every rank of the job. Ranks outside the job are dropped.
    #[arg(long, default_value = "all", conflicts_with = "random_groups")]
    pub group: String,
    /// Each rank passes a group derived from SEED and its rank (differing groups: half the
    /// ranks pass the whole job, a quarter the job less one rank, a quarter less two; never
    /// less itself).
    #[arg(long, value_name = "SEED")]
    pub random_groups: Option<u64>,
    /// The operation's tag (operations with different tags never mix).
    #[arg(long, default_value = "openib-group-create")]
    pub tag: String,
    /// Seconds the operation may take (then it fails naming whom it waited for); the fence
    /// that follows gets as long again.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Print one JSON object per rank: {"rank", "tag", "passed", "outcome" ("member",
    /// "excluded", "not-participant", "agreed-dead", "timed-out", "error"), "group", "failed",
    /// "participants", "by", "waiting", "error", "ms"}.
    #[arg(long)]
    pub json: bool,
    /// Run K operations one after the other (tags TAG-0 to TAG-(K-1); with --random-groups,
    /// operation r's groups are derived from SEED + r), each followed by a runtime fence over
    /// the survivors; each rank prints one line per operation ("round" in the JSON). The fault
    /// points' N is `r * size + rank` (rank dies in operation r).
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub rounds: u32,
    /// Measure instead: N operations over the whole job (tags TAG-0, TAG-1, ...) and N
    /// whole-job runtime fences, each after a synchronising fence; rank 0 prints the times.
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
}

/// The group rank `rank` of a job of `size` passes under `--random-groups seed`: the whole job
/// (half the ranks), the job less one rank (a quarter), or less two (a quarter), the dropped
/// ranks drawn from the seed and the rank; a rank never drops itself. Deterministic: tests
/// compute the expected outcome with it.
pub fn random_group(seed: u64, rank: u32, size: u32) -> Vec<u32> {
    let mut x = seed ^ u64::from(rank + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let drops = match next() % 4 {
        0 | 1 => 0,
        2 => 1,
        _ => 2,
    };
    let mut dropped = Vec::new();
    for _ in 0..drops {
        let d = (next() % u64::from(size.max(1))) as u32;
        if d != rank {
            dropped.push(d);
        }
    }
    (0..size).filter(|r| !dropped.contains(r)).collect()
}

/// Ranks from `0-7`, `0,2,4-6` or `all`.
pub fn parse_ranks(spec: &str, size: u32) -> Result<Vec<u32>, String> {
    if spec.trim() == "all" {
        return Ok((0..size).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("--group: {s:?} in {spec:?} is not a rank"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("--group: range {part:?} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    if out.is_empty() {
        return Err(format!("--group: {spec:?} names no rank"));
    }
    Ok(out)
}

/// The runtime shared between the transport and a thread that runs a fence while this one
/// keeps the transport progressing.
struct SharedRt(Arc<dyn Runtime>);

impl Runtime for SharedRt {
    fn info(&self) -> &JobInfo {
        self.0.info()
    }
    fn node_of(&self, rank: u32) -> Result<String, RuntimeError> {
        self.0.node_of(rank)
    }
    fn put(&self, scope: Scope, key: &str, value: &[u8]) -> Result<(), RuntimeError> {
        self.0.put(scope, key, value)
    }
    fn commit(&self) -> Result<(), RuntimeError> {
        self.0.commit()
    }
    fn fence(&self, collect: bool, timeout: Duration) -> Result<(), RuntimeError> {
        self.0.fence(collect, timeout)
    }
    fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<Vec<u8>, RuntimeError> {
        self.0.get(rank, key, timeout)
    }
    fn failed(&self) -> Vec<u32> {
        self.0.failed()
    }
    fn agreed_failed(&self) -> Vec<u32> {
        self.0.agreed_failed()
    }
    fn fence_agrees_on_failures(&self) -> bool {
        self.0.fence_agrees_on_failures()
    }
    fn fence_ranks(
        &self,
        ranks: &[u32],
        collect: bool,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        self.0.fence_ranks(ranks, collect, timeout)
    }
}

/// The ranks of the fence after an operation, when it cannot be the whole job's: a runtime
/// whose fence fails on a dead member (PMIx under mpirun 4.1.4, which reports no deaths)
/// fences over the job without the participants agreed dead, by this operation's decision
/// and the earlier ones (`agreed_dead`, ascending, which this one's are added to). Every
/// process holding a decision holds the same one (a left-out process too), so all pass the
/// same list; `None` (the whole job) without a decision, without agreed deaths, or when the
/// runtime's fence agrees on failures itself. A process that died after the root's proposal
/// (the decision counts it alive) makes this fence fail too (it is not in the agreed dead).
fn survivors_to_fence(
    r: &Result<Decision, GroupCreateFailure>,
    agreed_dead: &mut Vec<u32>,
    rt: &dyn Runtime,
) -> Option<Vec<u32>> {
    let decision = match r {
        Ok(d) => d,
        Err(GroupCreateFailure::LeftOut { decision, .. }) => decision,
        Err(_) => return None,
    };
    agreed_dead.extend(decision.failed.iter());
    agreed_dead.sort_unstable();
    agreed_dead.dedup();
    if agreed_dead.is_empty() || rt.fence_agrees_on_failures() {
        return None;
    }
    Some(
        (0..rt.info().size)
            .filter(|x| agreed_dead.binary_search(x).is_err())
            .collect(),
    )
}

/// Runs a runtime fence (over `ranks`, or the whole job) in a thread while this one keeps the
/// transport progressing (so the protocol's late messages are answered), until it returns.
/// A runtime without a fence over some ranks fences the whole job instead.
fn fence_progressing(
    t: &mut Transport,
    rt: &Arc<dyn Runtime>,
    timeout: Duration,
    ranks: Option<Vec<u32>>,
) -> Result<(), String> {
    let rt2 = rt.clone();
    let h = std::thread::spawn(move || match ranks {
        Some(r) => match rt2.fence_ranks(&r, false, timeout) {
            Err(RuntimeError::Unsupported(_)) => rt2.fence(false, timeout),
            other => other,
        },
        None => rt2.fence(false, timeout),
    });
    let mut backoff = IdleBackoff::default();
    while !h.is_finished() {
        t.progress_idle(&mut backoff).map_err(|e| e.to_string())?;
    }
    h.join()
        .map_err(|_| "the fence thread panicked".to_string())?
        .map_err(|e| e.to_string())
}

fn line(json_out: bool, text: String, v: Value) {
    let s = if json_out { v.to_string() } else { text };
    // One write per line: lines of ranks sharing the output do not interleave.
    let _ = std::io::stdout().write_all(format!("{s}\n").as_bytes());
    let _ = std::io::stdout().flush();
}

pub fn run(a: &GroupCreateArgs) -> i32 {
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        eprintln!("openib group-create: --timeout must be a positive number of seconds");
        return exit::USAGE;
    }
    let timeout = Duration::from_secs_f64(a.timeout);
    let rt: Arc<dyn Runtime> = match crate::runtime::connect() {
        Ok(rt) => Arc::from(rt),
        Err(e) => {
            eprintln!("openib group-create: cannot join the job: {e}");
            return exit::ERROR;
        }
    };
    let (me, size) = (rt.info().rank, rt.info().size);
    let passed = match a.random_groups {
        Some(seed) => random_group(seed, me, size),
        None => match parse_ranks(&a.group, size) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("openib group-create: {e}");
                return exit::USAGE;
            }
        },
    };
    let cfg = match TransportConfig::from_env(PingConfig {
        derive: openib_ports::DeriveConfig::default(),
        cpc: None,
        timeout,
        mode: ExchangeMode::default(),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("openib group-create: {e}");
            return exit::USAGE;
        }
    };
    let mut t = match Transport::open(Box::new(SharedRt(rt.clone())), cfg) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("openib group-create: rank {me}: {e}");
            return exit::ERROR;
        }
    };
    if let Some(n) = a.repeat {
        let code = measure(&mut t, &rt, a, n, timeout);
        if let Err(e) = t.finalize(timeout) {
            eprintln!("openib group-create: rank {me}: finalize: {e}");
        }
        return code;
    }
    let mut code = exit::OK;
    // The dead that this job's operations agreed so far (the same at every process that
    // decided them all): a later operation's fence leaves them out even when no group of it
    // names them.
    let mut agreed_dead = Vec::new();
    for round in 0..a.rounds.max(1) {
        let passed = match a.random_groups {
            Some(seed) => random_group(seed.wrapping_add(u64::from(round)), me, size),
            None => passed.clone(),
        };
        let tag = if a.rounds > 1 {
            format!("{}-{round}", a.tag)
        } else {
            a.tag.clone()
        };
        let group = Group::of_runtime(rt.as_ref(), ProcSet::Ranks(&passed));
        let t0 = Instant::now();
        let r = t.group_create(&group, &tag, timeout);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let c = report(me, a, &tag, round, &passed, &r, ms);
        if c != exit::OK {
            code = c;
        }
        // Let the others decide before leaving (or starting the next operation, which drops
        // this one's machine): answer the protocol until the survivors' fence.
        let over = survivors_to_fence(&r, &mut agreed_dead, rt.as_ref());
        if let Err(e) = fence_progressing(&mut t, &rt, timeout, over) {
            eprintln!("openib group-create: rank {me}: the fence after operation {tag:?}: {e}");
            code = exit::ERROR;
            break;
        }
    }
    if let Err(e) = t.finalize(timeout) {
        eprintln!("openib group-create: rank {me}: finalize: {e}");
    }
    code
}

/// Prints this rank's outcome; its exit code.
fn report(
    me: u32,
    a: &GroupCreateArgs,
    tag: &str,
    round: u32,
    passed: &[u32],
    r: &Result<Decision, GroupCreateFailure>,
    ms: f64,
) -> i32 {
    let dec = |d: &Decision| json!({"group": *d.group, "failed": *d.failed, "participants": *d.participants});
    let mut v = json!({"rank": me, "tag": tag, "round": round, "passed": passed, "ms": (ms * 1e3).round() / 1e3,
        "group": null, "failed": null, "participants": null, "by": null, "waiting": null,
        "error": null});
    let merge = |v: &mut Value, d: Value| {
        for (k, x) in d.as_object().expect("object") {
            v[k] = x.clone();
        }
    };
    let (text, code) = match r {
        Ok(d) => {
            v["outcome"] = json!("member");
            merge(&mut v, dec(d));
            (
                format!(
                    "openib group-create: rank {me}: member; group {:?}; failed {:?}; participants {:?}",
                    d.group, d.failed, d.participants
                ),
                exit::OK,
            )
        }
        Err(GroupCreateFailure::LeftOut {
            error, decision, ..
        }) => {
            let (kind, by) = match error {
                GroupCreateError::ExcludedBy { by, .. } => ("excluded", Some(*by)),
                GroupCreateError::NotAParticipant { root, .. } => ("not-participant", Some(*root)),
                GroupCreateError::AgreedDead { .. } => ("agreed-dead", None),
                GroupCreateError::NotInOwnGroup { .. } => ("error", None),
            };
            v["outcome"] = json!(kind);
            v["by"] = json!(by);
            v["error"] = json!(error.to_string());
            merge(&mut v, dec(decision));
            (
                format!(
                    "openib group-create: rank {me}: left out ({error}); group {:?}; failed {:?}; participants {:?}",
                    decision.group, decision.failed, decision.participants
                ),
                exit::OK,
            )
        }
        Err(e @ GroupCreateFailure::TimedOut { waiting, .. }) => {
            v["outcome"] = json!("timed-out");
            v["waiting"] = json!(waiting);
            v["error"] = json!(e.to_string());
            (format!("openib group-create: rank {me}: {e}"), exit::ERROR)
        }
        Err(e) => {
            v["outcome"] = json!("error");
            v["error"] = json!(e.to_string());
            (format!("openib group-create: rank {me}: {e}"), exit::ERROR)
        }
    };
    line(a.json, text, v);
    code
}

/// `--repeat N`: N operations over the whole job and N whole-job runtime fences, each timed
/// after a synchronising fence; rank 0 prints the medians, minima and maxima in microseconds.
fn measure(
    t: &mut Transport,
    rt: &Arc<dyn Runtime>,
    a: &GroupCreateArgs,
    n: u32,
    timeout: Duration,
) -> i32 {
    let (me, size) = (t.rank(), t.size());
    let all: Vec<u32> = (0..size).collect();
    let mut gc = Vec::new();
    let mut fence = Vec::new();
    let sync = |t: &mut Transport| fence_progressing(t, rt, timeout, None);
    let fail = |what: &str, e: String| {
        eprintln!("openib group-create: rank {me}: {what}: {e}");
        exit::ERROR
    };
    // Connections are lazy: one untimed operation first makes them, as a job's first
    // collective would.
    for i in 0..=n {
        if let Err(e) = sync(t) {
            return fail("synchronising fence", e);
        }
        let group = Group::of_runtime(rt.as_ref(), ProcSet::Ranks(&all));
        let t0 = Instant::now();
        if let Err(e) = t.group_create(&group, &format!("{}-{i}", a.tag), timeout) {
            return fail("group-create", e.to_string());
        }
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if let Err(e) = sync(t) {
            return fail("synchronising fence", e);
        }
        let t0 = Instant::now();
        if let Err(e) = rt.fence(false, timeout) {
            return fail("fence", e.to_string());
        }
        if i > 0 {
            gc.push(us);
            fence.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        json!({"median": v[v.len() / 2].round(), "min": v[0].round(), "max": v[v.len() - 1].round()})
    };
    if me == 0 && n > 0 {
        let v = json!({"ranks": size, "repeat": n, "group_create_us": stats(&mut gc),
            "fence_us": stats(&mut fence), "port": t.port_name()});
        let text = format!(
            "openib group-create: {size} ranks, {n} runs: group-create median {} us, whole-job fence median {} us",
            v["group_create_us"]["median"], v["fence_us"]["median"]
        );
        line(a.json, text, v);
    }
    let _ = sync(t);
    exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_parse_from_lists_and_ranges_and_bad_ones_are_named() {
        assert_eq!(parse_ranks("all", 4).unwrap(), [0, 1, 2, 3]);
        assert_eq!(parse_ranks("0-2,5, 7", 8).unwrap(), [0, 1, 2, 5, 7]);
        assert!(parse_ranks("3-1", 8).unwrap_err().contains("backwards"));
        assert!(parse_ranks("x", 8).unwrap_err().contains("\"x\""));
        assert!(parse_ranks(",", 8).unwrap_err().contains("names no rank"));
    }

    #[test]
    fn random_groups_keep_the_rank_differ_and_repeat() {
        let mut differ = 0;
        for seed in 0..50u64 {
            for rank in 0..8 {
                let g = random_group(seed, rank, 8);
                assert!(g.contains(&rank), "seed {seed} rank {rank}: {g:?}");
                assert!(g.len() >= 6, "at most two dropped: {g:?}");
                assert_eq!(g, random_group(seed, rank, 8));
                differ += usize::from(g.len() < 8);
            }
        }
        // About half the groups drop someone (a drawn rank equal to its own is not dropped).
        assert!((120..=280).contains(&differ), "{differ} of 400 differ");
    }

    /// A job of 5 ranks whose fence agrees on failures or not.
    struct Job(JobInfo, bool);

    impl Runtime for Job {
        fn info(&self) -> &JobInfo {
            &self.0
        }
        fn node_of(&self, _: u32) -> Result<String, RuntimeError> {
            Ok("n".into())
        }
        fn put(&self, _: Scope, _: &str, _: &[u8]) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn commit(&self) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn fence(&self, _: bool, _: Duration) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn get(&self, rank: u32, key: &str, _: Duration) -> Result<Vec<u8>, RuntimeError> {
            Err(RuntimeError::NotFound {
                rank,
                key: key.into(),
            })
        }
        fn fence_agrees_on_failures(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn the_fence_after_an_operation_that_agreed_deaths_names_everyone_else() {
        let job = |agrees| {
            Job(
                JobInfo {
                    rank: 0,
                    size: 5,
                    node: "n".into(),
                    local_rank: 0,
                    local_peers: vec![0],
                    backend: "test".into(),
                },
                agrees,
            )
        };
        let decision = |failed: Vec<u32>| Decision {
            group: Arc::new(vec![0, 2]),
            failed: Arc::new(failed),
            participants: Arc::new(vec![0, 1, 2, 3]),
        };
        let fence = |r: &Result<Decision, GroupCreateFailure>, agrees| {
            survivors_to_fence(r, &mut Vec::new(), &job(agrees))
        };
        // Members and left-out processes alike: the job's ranks less the agreed dead (rank 4,
        // in no one's group, is alive and fences too).
        let member: Result<Decision, GroupCreateFailure> = Ok(decision(vec![1, 3]));
        assert_eq!(fence(&member, false), Some(vec![0, 2, 4]));
        let left_out = Err(GroupCreateFailure::LeftOut {
            tag: "t".into(),
            error: GroupCreateError::ExcludedBy { rank: 4, by: 0 },
            decision: decision(vec![1, 3]),
        });
        assert_eq!(fence(&left_out, false), Some(vec![0, 2, 4]));
        // No agreed death, a fence that agrees on failures itself, or no decision: the job's.
        assert_eq!(fence(&Ok(decision(vec![])), false), None);
        assert_eq!(fence(&member, true), None);
        let timed_out = Err(GroupCreateFailure::TimedOut {
            tag: "t".into(),
            timeout: Duration::from_secs(1),
            waiting: vec![3],
        });
        assert_eq!(fence(&timed_out, false), None);
        // The dead agreed by earlier operations stay out of later fences, also when the later
        // operation's groups no longer name them.
        let mut dead = Vec::new();
        let mut after =
            |failed: Vec<u32>| survivors_to_fence(&Ok(decision(failed)), &mut dead, &job(false));
        assert_eq!(after(vec![3]), Some(vec![0, 1, 2, 4]));
        assert_eq!(after(vec![]), Some(vec![0, 1, 2, 4]));
        assert_eq!(after(vec![1]), Some(vec![0, 2, 4]));
        assert_eq!(dead, [1, 3]);
    }
}
