//! `openib stress`: a burn-in of the transport between every pair of ranks, every byte checked.
//!
//! Each rank sends `--messages` messages of random sizes (log-uniform from 0 B to `--max-size`,
//! so eager and rendezvous mix) to its peers round-robin, from `--threads` threads at once
//! (thread t uses tag 10+t; its messages to a peer must arrive in the order it sent them, with
//! the content derived from (source, thread, index)). Then random puts followed by gets of the
//! same range, compared byte by byte; then `--atomics` fetch-and-adds and compare-and-swap
//! increments of counters on rank 0 (with `--survive`, the lowest surviving rank) from every
//! other rank and thread, checked against the expected totals. With `--check-resources` each rank finally releases the transport and looks
//! for QPs and MRs of its own pid in `rdma resource show`.

use super::exit;
use crate::modex::exchange::ExchangeMode;
use crate::ping::PingConfig;
use crate::transport::{
    Completion, EndpointState, RemoteRegion, SharedTransport, Transport, TransportConfig,
    TransportError,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct StressArgs {
    /// Messages each rank sends (split over its threads and peers).
    #[arg(long, default_value_t = 1000)]
    pub messages: u64,
    /// Largest message in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
    /// Size distribution: `log` (log-uniform from 0 B to --max-size) or `mpi` (90% log-uniform
    /// up to 8 KiB, 9% up to 256 KiB, 1% up to --max-size: mostly small, as MPI traffic is).
    #[arg(long, default_value = "log", value_parser = ["log", "mpi"])]
    pub dist: String,
    /// Sending threads per rank.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Put-then-get checks per rank.
    #[arg(long, default_value_t = 50)]
    pub puts: u64,
    /// Fetch-and-adds and compare-and-swaps per thread of each rank other than 0.
    #[arg(long, default_value_t = 100)]
    pub atomics: u64,
    /// Messages in flight per thread.
    #[arg(long, default_value_t = 32)]
    pub window: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds before giving up.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// After finalize, fail if `rdma resource show` lists a QP or MR of this process.
    #[arg(long)]
    pub check_resources: bool,
    /// Print one JSON line per rank.
    #[arg(long)]
    pub json: bool,
    /// Keep going when peers die (fail-stop; `OPENIB_FAULT=in-transfer:R` kills rank R half way
    /// through its messages): traffic between the survivors is still checked in full, the dead
    /// are reported in "failed".
    #[arg(long)]
    pub survive: bool,
    /// Send every second message with `send_shared` from a fresh `Arc<[u8]>` (zero copy above
    /// the eager limit, registrations kept up to OPENIB_PINNED_MAX): the allocator hands freed
    /// addresses out again, so a registration that outlived its bytes would show as corrupted
    /// content.
    #[arg(long)]
    pub shared: bool,
    /// Send every second message up to the eager limit (of those `--shared` leaves to `send`)
    /// with `sendi` (no token, and mostly no signaled send request: OPENIB_SIGNAL_EVERY),
    /// checked like the others. While the endpoint is busy the thread progresses and tries
    /// again, for up to 20 ms; then that message goes by `send`.
    #[arg(long)]
    pub sendi: bool,
}

const TAG_REGION: u8 = 2;
const TAG_DONE: u8 = 3;
const TAG_STREAM: u8 = 10;
const PUT_SLICE: usize = 1 << 20;
/// How long a `--sendi` message waits (progressing) for the endpoint to take it before it goes
/// by `send` instead.
const SENDI_PATIENCE: Duration = Duration::from_millis(20);

pub fn run(a: &StressArgs) -> i32 {
    match stress(a) {
        Ok(v) => {
            if a.json {
                println!("{v}");
            } else {
                println!("openib stress: {v}");
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("openib stress: {e}");
            exit::ERROR
        }
    }
}

/// A well-mixed 64-bit value keyed by `x` (one step of fastrand's generator seeded with it): the
/// same key gives the same value on every rank, so sizes and bytes need no exchange.
fn mix(x: u64) -> u64 {
    fastrand::Rng::with_seed(x).u64(..)
}

/// Size of message `i` of stream (src, thread, dst): log-uniform in 0..=max (with `mpi`, max
/// is 8 KiB, 256 KiB or `max` with probabilities 0.9, 0.09, 0.01), some zero-length.
#[allow(clippy::too_many_arguments)]
fn size_of(seed: u64, src: u32, thread: usize, dst: u32, i: u64, max: usize, mpi: bool) -> usize {
    let r = mix(seed ^ mix((src as u64) << 40 ^ (thread as u64) << 32 ^ (dst as u64) << 20 ^ i));
    if r % 32 == 0 {
        return 0;
    }
    let max = if !mpi {
        max
    } else {
        match (r >> 5) % 100 {
            0 => max,
            1..=9 => max.min(256 << 10),
            _ => max.min(8 << 10),
        }
    };
    let bits = (max as f64 + 1.0).log2();
    let e = (r >> 11) as f64 / (1u64 << 53) as f64 * bits;
    ((e.exp2() - 1.0) as usize).min(max)
}

fn fill(buf: &mut [u8], key: u64) {
    fastrand::Rng::with_seed(key).fill(buf);
}

fn stream_key(src: u32, thread: usize, i: u64) -> u64 {
    (src as u64) << 48 ^ (thread as u64) << 40 ^ i
}

/// What a rank received and checked.
#[derive(Default)]
struct Received {
    /// (src, thread) -> next expected index.
    next: HashMap<(u32, usize), u64>,
    messages: u64,
    bytes: u64,
    errors: Vec<String>,
}

fn stress(a: &StressArgs) -> Result<serde_json::Value, String> {
    let timeout = Duration::from_secs(a.timeout);
    let rt = crate::runtime::connect().map_err(|e| e.to_string())?;
    let cfg = TransportConfig::from_env(PingConfig {
        derive: openib_ports::DeriveConfig::default(),
        cpc: None,
        timeout: Duration::from_secs(60),
        mode: ExchangeMode::default(),
    })
    .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let t = Transport::open(rt, cfg).map_err(|e| e.to_string())?;
    let (me, size) = (t.rank(), t.size());
    if size < 2 {
        return Err("needs at least 2 ranks: openib run -n 2 -- openib stress".into());
    }
    let peers: Vec<u32> = (0..size).filter(|&p| p != me).collect();
    let t = SharedTransport::new(t);
    let threads = a.threads.max(1);
    // Expected message counts from each peer (deterministic split).
    let per_thread = |th: usize| {
        a.messages / threads as u64 + u64::from((th as u64) < a.messages % threads as u64)
    };
    let expected_from = |src: u32| -> u64 {
        let src_peers: Vec<u32> = (0..size).filter(|&p| p != src).collect();
        let k = src_peers.iter().position(|&p| p == me).expect("a peer") as u64;
        (0..threads)
            .map(|th| {
                let n = per_thread(th);
                let np = src_peers.len() as u64;
                n / np + u64::from(k < n % np)
            })
            .sum()
    };
    let expected_total: u64 = peers.iter().map(|&p| expected_from(p)).sum();

    // On a terminal, rank 0 shows the messages it sent and received so far, then the phase.
    let progress = if me == 0 {
        super::progress::Progress::new(a.messages + expected_total, "openib stress", a.json)
    } else {
        super::progress::Progress::none()
    };
    progress.set_message("messages");

    // Receive side: check order and content of every stream.
    let recv = Arc::new(Mutex::new(Received::default()));
    let max = a.max_size;
    let seed = a.seed;
    let mpi = a.dist == "mpi";
    for th in 0..threads {
        let recv = recv.clone();
        let progress = progress.clone();
        t.on_tag(
            TAG_STREAM + th as u8,
            Box::new(move |src, data| {
                let mut r = recv.lock().expect("recv");
                let i = *r.next.get(&(src, th)).unwrap_or(&0);
                let want = size_of(seed, src, th, me, i, max, mpi);
                let mut exp = vec![0u8; want];
                fill(&mut exp, stream_key(src, th, i));
                if data.len() != want || data != exp.as_slice() {
                    let first_bad = data.iter().zip(&exp).position(|(x, y)| x != y);
                    r.errors.push(format!(
                        "message {i} of thread {th} from rank {src}: {} bytes (want {want}), first differing byte {first_bad:?}",
                        data.len()
                    ));
                }
                r.next.insert((src, th), i + 1);
                r.messages += 1;
                r.bytes += data.len() as u64;
                progress.inc(1);
            }),
        )
        .map_err(|e| e.to_string())?;
    }
    let regions: Arc<Mutex<HashMap<u32, (RemoteRegion, RemoteRegion)>>> = Default::default();
    {
        let regions = regions.clone();
        t.on_tag(
            TAG_REGION,
            Box::new(move |src, d| {
                if let (Some(a), Some(b)) = (
                    RemoteRegion::decode(&d[..20.min(d.len())]),
                    RemoteRegion::decode(d.get(20..40).unwrap_or(&[])),
                ) {
                    regions.lock().expect("regions").insert(src, (a, b));
                }
            }),
        )
        .map_err(|e| e.to_string())?;
    }
    let done_count = Arc::new(AtomicU64::new(0));
    {
        let d = done_count.clone();
        t.on_tag(
            TAG_DONE,
            Box::new(move |_, _| {
                d.fetch_add(1, Ordering::AcqRel);
            }),
        )
        .map_err(|e| e.to_string())?;
    }

    // Completion routing: a token belongs to the thread that got it.
    let owner: Arc<Mutex<HashMap<u64, usize>>> = Default::default();
    // Messages sent with `sendi` (--sendi), all threads.
    let sendi_count = Arc::new(AtomicU64::new(0));
    let eager = t.lock().eager_limit();
    let outstanding: Arc<Vec<AtomicUsize>> =
        Arc::new((0..threads).map(|_| AtomicUsize::new(0)).collect());
    let failed = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<String>>> = Default::default();
    // Peers found dead (with --survive), and when this rank first noticed one (Unix ms).
    let dead: Arc<Mutex<std::collections::BTreeSet<u32>>> = Default::default();
    let noticed_ms = Arc::new(AtomicU64::new(0));
    let survive = a.survive;
    let reap = {
        let (owner, outstanding, failures, failed, dead, noticed_ms) = (
            owner.clone(),
            outstanding.clone(),
            failures.clone(),
            failed.clone(),
            dead.clone(),
            noticed_ms.clone(),
        );
        move |t: &SharedTransport| -> Result<(), String> {
            let mut g = t.lock();
            g.progress().map_err(|e| e.to_string())?;
            let done = g.take_completions();
            let mut o = owner.lock().expect("owner");
            let mut d = dead.lock().expect("dead");
            for c in done {
                let (token, err) = match c {
                    Completion::Done { token, .. } => (token, None),
                    Completion::Failed {
                        token, error, peer, ..
                    } => (token, Some((peer, error))),
                };
                if let Some(th) = o.remove(&token) {
                    outstanding[th].fetch_sub(1, Ordering::AcqRel);
                }
                if let Some((peer, e)) = err {
                    if survive {
                        d.insert(peer);
                    } else {
                        failed.store(true, Ordering::Release);
                        failures.lock().expect("failures").push(e);
                    }
                }
            }
            if survive {
                for p in g.peers() {
                    if matches!(g.endpoint_state(p), Some(EndpointState::Failed(_))) {
                        d.insert(p);
                    }
                }
                d.extend(g.runtime().failed());
                if !d.is_empty() && noticed_ms.load(Ordering::Acquire) == 0 {
                    noticed_ms.store(unix_ms(), Ordering::Release);
                }
            }
            Ok(())
        }
    };

    // 1. Streams from every thread.
    let deadline = Instant::now() + timeout;
    let send_start = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let mut hs = Vec::new();
        for th in 0..threads {
            let (t, owner, outstanding, reap, failed, dead) = (
                t.clone(),
                owner.clone(),
                outstanding.clone(),
                reap.clone(),
                failed.clone(),
                dead.clone(),
            );
            let peers = peers.clone();
            let n = per_thread(th);
            let window = a.window.max(1);
            let (shared, use_sendi) = (a.shared, a.sendi);
            let sendi_count = sendi_count.clone();
            let progress = progress.clone();
            hs.push(s.spawn(move || -> Result<(), String> {
                let mut idx: HashMap<u32, u64> = HashMap::new();
                let mut buf = Vec::new();
                for k in 0..n {
                    #[cfg(feature = "fault-injection")]
                    if th == 0 && k == n / 2 {
                        crate::fault::point("in-transfer", me);
                    }
                    let dst = peers[(k % peers.len() as u64) as usize];
                    if dead.lock().expect("dead").contains(&dst) {
                        continue;
                    }
                    let i = idx.entry(dst).or_insert(0);
                    let len = size_of(seed, me, th, dst, *i, max, mpi);
                    // A fresh buffer each time: freed addresses get reused by the allocator.
                    buf.clear();
                    buf.resize(len, 0);
                    fill(&mut buf, stream_key(me, th, *i));
                    *i += 1;
                    while outstanding[th].load(Ordering::Acquire) >= window {
                        reap(&t)?;
                        if failed.load(Ordering::Acquire) || Instant::now() > deadline {
                            return Err("a send failed or timed out".into());
                        }
                    }
                    let mut g = t.lock();
                    let tag = TAG_STREAM + th as u8;
                    let sent = if shared && k % 2 == 1 {
                        let bytes: Arc<[u8]> = std::mem::take(&mut buf).into();
                        g.send_shared(dst, tag, &bytes).map(Some)
                    } else if use_sendi && (k / 2) % 2 == 0 && buf.len() <= eager {
                        // Busy (no credit, or queued sends ahead): progress and try again, as a
                        // caller that wants back-pressure does, for at most SENDI_PATIENCE;
                        // then `send`. Falling back at once starved `sendi` whenever `send`s
                        // kept the queue from emptying (a 16-buffer SRQ shared by two peers).
                        let patience = Instant::now() + SENDI_PATIENCE;
                        loop {
                            match g.sendi(dst, tag, &buf) {
                                Ok(()) => break Ok(None),
                                Err(TransportError::Busy { .. }) if Instant::now() < patience => {
                                    drop(g);
                                    reap(&t)?;
                                    g = t.lock();
                                }
                                Err(TransportError::Busy { .. }) => {
                                    break g.send(dst, tag, &buf).map(Some)
                                }
                                Err(e) => break Err(e),
                            }
                        }
                    } else {
                        g.send(dst, tag, &buf).map(Some)
                    };
                    if sent.is_ok() {
                        progress.inc(1);
                    }
                    let token = match sent {
                        Ok(Some(token)) => token,
                        Ok(None) => {
                            // sendi: no token to wait for; the receiver checks it like the rest.
                            sendi_count.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) if survive && is_peer_failure(&e) => {
                            dead.lock().expect("dead").insert(dst);
                            continue;
                        }
                        Err(e) => return Err(e.to_string()),
                    };
                    owner.lock().expect("owner").insert(token, th);
                    outstanding[th].fetch_add(1, Ordering::AcqRel);
                    drop(g);
                    buf = Vec::new();
                }
                while outstanding[th].load(Ordering::Acquire) > 0 {
                    reap(&t)?;
                    if failed.load(Ordering::Acquire) || Instant::now() > deadline {
                        return Err("a send failed or timed out".into());
                    }
                }
                Ok(())
            }));
        }
        for h in hs {
            h.join().map_err(|_| "a sender thread panicked")??;
        }
        Ok(())
    })
    .map_err(|e| {
        format!(
            "{e}: {:?}; {}",
            failures.lock().expect("failures"),
            peers
                .iter()
                .map(|&p| format!("rank {p}: {}", t.lock().debug_endpoint(p)))
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let recv_deadline = Instant::now() + timeout;
    // Everything from every live peer (a dead one's messages are checked as far as they came).
    let missing = |recv: &Received, dead: &std::collections::BTreeSet<u32>| -> Vec<u32> {
        peers
            .iter()
            .copied()
            .filter(|p| !dead.contains(p))
            .filter(|&p| {
                let got: u64 = (0..threads)
                    .map(|th| recv.next.get(&(p, th)).copied().unwrap_or(0))
                    .sum();
                got < expected_from(p)
            })
            .collect()
    };
    loop {
        let m = missing(&recv.lock().expect("recv"), &dead.lock().expect("dead"));
        if m.is_empty() {
            break;
        }
        reap(&t)?;
        if Instant::now() > recv_deadline {
            return Err(format!(
                "received {} of {expected_total} messages (missing some from {m:?})",
                recv.lock().expect("recv").messages
            ));
        }
    }
    if survive {
        // The survivors agree on who died before the one-sided phases, so that they agree on
        // the peers they exchange regions with and on the rank holding the counters (a rank
        // may have received everything from a victim and not noticed its death yet).
        let g = t.lock();
        let rt = g.runtime();
        if rt.fence_agrees_on_failures() {
            rt.fence(false, timeout).map_err(|e| e.to_string())?;
            dead.lock().expect("dead").extend(rt.agreed_failed());
        }
    }
    let live: Vec<u32> = {
        let d = dead.lock().expect("dead");
        peers.iter().copied().filter(|p| !d.contains(p)).collect()
    };
    let peers = live;
    // The rank whose counters the atomics hit and who checks them: rank 0, or with --survive
    // the lowest surviving rank.
    let holder = peers.iter().copied().chain([me]).min().expect("me");
    let stream_secs = send_start.elapsed().as_secs_f64();

    progress.set_message("puts");
    // 2. Put then get random ranges of this rank's slice of each peer's landing region.
    let landing = t
        .register(PUT_SLICE * size as usize)
        .map_err(|e| e.to_string())?;
    let counters = t.register(16).map_err(|e| e.to_string())?;
    let mut msg = RemoteRegion::of(&landing).encode().to_vec();
    msg.extend_from_slice(&RemoteRegion::of(&counters).encode());
    for &p in &peers {
        t.send(p, TAG_REGION, &msg).map_err(|e| e.to_string())?;
    }
    t.progress_until(timeout, "region exchange", || {
        regions.lock().expect("regions").len() == peers.len()
    })
    .map_err(|e| e.to_string())?;
    let regions = regions.lock().expect("regions").clone();
    let mut src = t.register(PUT_SLICE).map_err(|e| e.to_string())?;
    let dst = t.register(PUT_SLICE).map_err(|e| e.to_string())?;
    let mut put_bytes = 0u64;
    for k in 0..a.puts {
        let p = peers[(k % peers.len() as u64) as usize];
        let r = mix(seed ^ 0x5555 ^ (me as u64) << 32 ^ k);
        let len = 1 + (r % PUT_SLICE as u64) as usize;
        let off = ((r >> 24) % (PUT_SLICE - len + 1) as u64) as usize;
        {
            let s = Arc::get_mut(&mut src).ok_or("source region still in use")?;
            let mut bytes = vec![0u8; len];
            fill(&mut bytes, r);
            s.write_at(off, &bytes).map_err(|e| e.to_string())?;
        }
        let roff = (me as usize * PUT_SLICE + off) as u64;
        wait_token(&t, timeout, |g| {
            g.put(p, &src, off, regions[&p].0, roff, len)
        })?;
        wait_token(&t, timeout, |g| {
            g.get(p, &dst, off, regions[&p].0, roff, len)
        })?;
        let (got, sent) = (dst.to_vec(off, len), src.to_vec(off, len));
        if got.map_err(|e| e.to_string())? != sent.map_err(|e| e.to_string())? {
            return Err(format!(
                "put/get {k} to rank {p}: {len} bytes at {roff} differ after the round trip"
            ));
        }
        put_bytes += len as u64;
    }

    progress.set_message("atomics");
    // 3. Atomics on the holder's counters from every other rank and thread.
    let atomics_each = if me == holder { 0 } else { a.atomics };
    if atomics_each > 0 {
        let c0 = regions[&holder].1;
        std::thread::scope(|s| -> Result<(), String> {
            let mut hs = Vec::new();
            for _th in 0..threads {
                let t = t.clone();
                hs.push(s.spawn(move || -> Result<(), String> {
                    let res = t.register(8).map_err(|e| e.to_string())?;
                    let mut last = None;
                    for _ in 0..atomics_each {
                        wait_token(&t, timeout, |g| g.fetch_add(holder, &res, 0, c0, 0, 1))?;
                        let old = res.read_u64(0).map_err(|e| e.to_string())?;
                        if last.is_some_and(|l| old <= l) {
                            return Err(format!(
                                "fetch-and-add went backwards: {old} after {last:?}"
                            ));
                        }
                        last = Some(old);
                    }
                    // Compare-and-swap increments of the second counter.
                    let mut guess = 0u64;
                    let mut ok = 0;
                    while ok < atomics_each {
                        wait_token(&t, timeout, |g| {
                            g.compare_swap(holder, &res, 0, c0, 8, guess, guess + 1)
                        })?;
                        let old = res.read_u64(0).map_err(|e| e.to_string())?;
                        if old == guess {
                            ok += 1;
                            guess += 1;
                        } else {
                            guess = old;
                        }
                    }
                    Ok(())
                }));
            }
            for h in hs {
                h.join().map_err(|_| "an atomics thread panicked")??;
            }
            Ok(())
        })?;
    }
    // Everyone tells the holder it is done; the holder then checks the counters and answers.
    if me != holder {
        t.send(holder, TAG_DONE, &[1]).map_err(|e| e.to_string())?;
        t.progress_until(timeout, "the counter holder's final answer", || {
            done_count.load(Ordering::Acquire) >= 1
        })
        .map_err(|e| e.to_string())?;
    } else {
        t.progress_until(timeout, "every rank's done message", || {
            done_count.load(Ordering::Acquire) >= peers.len() as u64
        })
        .map_err(|e| e.to_string())?;
        let v = |o: usize| counters.read_u64(o).unwrap_or(u64::MAX);
        let want = peers.len() as u64 * threads as u64 * a.atomics;
        if v(0) != want || v(8) != want {
            return Err(format!(
                "atomic counters are {} (fetch-and-add) and {} (compare-and-swap), expected {want}",
                v(0),
                v(8)
            ));
        }
        for &p in &peers {
            t.send(p, TAG_DONE, &[2]).map_err(|e| e.to_string())?;
        }
    }
    let mut failed_ranks: Vec<u32> = dead.lock().expect("dead").iter().copied().collect();
    if survive {
        // Survivors agree on who failed: a fence that completes over the survivors (`openib
        // run`'s resilient fence) decides, whatever each rank noticed on its own.
        let g = t.lock();
        let rt = g.runtime();
        if rt.fence_agrees_on_failures() {
            rt.fence(false, timeout).map_err(|e| e.to_string())?;
            failed_ranks = rt.agreed_failed();
            crate::fault::say_agreed("stress", me, &failed_ranks);
        }
    }
    let r = recv.lock().expect("recv");
    if !r.errors.is_empty() {
        return Err(format!(
            "{} corrupted or misordered messages, first: {}",
            r.errors.len(),
            r.errors[0]
        ));
    }
    let (messages, bytes) = (r.messages, r.bytes);
    drop(r);
    let mut g = t.lock();
    let stats: Vec<_> = peers
        .iter()
        .map(|&p| json!({"peer": p, "stats": g.endpoint_stats(p)}))
        .collect();
    let cache = g.cache_stats();
    let shared_registrations = g.shared_reg_stats();
    let srq = g.srq_stats();
    let recv_buffer_bytes = g.recv_buffer_bytes();
    g.flush(timeout).map_err(|e| e.to_string())?;
    drop(g);
    drop((src, dst, landing, counters));
    // Proof that the check sees this process's resources while the transport is open.
    let open_resources = if a.check_resources {
        Some(leftover_resources()?.into_iter().collect::<HashMap<_, _>>())
    } else {
        None
    };
    let inner = Arc::try_unwrap(t.into_inner()).map_err(|_| "transport still shared")?;
    let inner = inner.into_inner().map_err(|_| "transport lock poisoned")?;
    inner.finalize(timeout).map_err(|e| e.to_string())?;
    let resources = if a.check_resources {
        let left = leftover_resources()?;
        if left.iter().any(|(_, n)| *n > 0) {
            return Err(format!("verbs resources left after finalize: {left:?}"));
        }
        Some(left)
    } else {
        None
    };
    progress.finish();
    Ok(json!({
        "rank": me,
        "ok": true,
        "failed": failed_ranks,
        "noticed_unix_ms": (noticed_ms.load(Ordering::Acquire) > 0).then(|| noticed_ms.load(Ordering::Acquire)),
        "threads": threads,
        "sent": a.messages,
        "received": messages,
        "received_bytes": bytes,
        "stream_secs": stream_secs,
        "puts_checked": a.puts,
        "put_bytes": put_bytes,
        "atomics": atomics_each * threads as u64 * 2,
        "cache": cache,
        "shared_registrations": shared_registrations,
        "sendi": sendi_count.load(Ordering::Relaxed),
        "srq": srq,
        "recv_buffer_bytes": recv_buffer_bytes,
        "endpoints": stats,
        "resources_open": open_resources,
        "resources_left": resources.map(|r| r.into_iter().collect::<HashMap<_, _>>()),
        "secs": t0.elapsed().as_secs_f64(),
    }))
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether an error means the peer (its endpoint) is gone rather than a bug here.
fn is_peer_failure(e: &crate::transport::TransportError) -> bool {
    use crate::transport::TransportError as E;
    matches!(e, E::EndpointFailed { .. } | E::NoPath { .. })
}

/// Runs `start` under the lock and progresses until its token completes.
fn wait_token(
    t: &SharedTransport,
    timeout: Duration,
    start: impl FnOnce(&mut Transport) -> Result<u64, crate::transport::TransportError>,
) -> Result<(), String> {
    let token = start(&mut t.lock()).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    loop {
        // Completions of this token are taken here; the stream's reaper owns none of them.
        let mut g = t.lock();
        g.progress().map_err(|e| e.to_string())?;
        let mut found = None;
        let mut rest = Vec::new();
        for c in g.take_completions() {
            match &c {
                Completion::Done { token: k, .. } if *k == token => found = Some(Ok(())),
                Completion::Failed {
                    token: k, error, ..
                } if *k == token => found = Some(Err(error.clone())),
                _ => rest.push(c),
            }
        }
        g.requeue_completions(rest);
        drop(g);
        if let Some(r) = found {
            return r;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "operation {token} did not complete within {timeout:?}"
            ));
        }
        std::thread::yield_now();
    }
}

/// PDs, QPs, MRs and CQs of this process in `rdma resource show`. The kernel names the thread
/// that created an object, not the process, so objects are matched through the protection
/// domains (`pdn`) and contexts (`ctxn`) this process's main thread opened (the transport opens
/// them there and drops them last), or by pid.
fn leftover_resources() -> Result<Vec<(&'static str, usize)>, String> {
    let show = |kind: &str| -> Result<String, String> {
        let o = std::process::Command::new("rdma")
            .args(["resource", "show", kind])
            .output()
            .map_err(|e| format!("rdma resource show {kind}: {e}"))?;
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let field = |line: &str, name: &str| -> Option<String> {
        let mut it = line.split_whitespace();
        while let Some(w) = it.next() {
            if w == name {
                return it.next().map(str::to_string);
            }
        }
        None
    };
    let pid = std::process::id().to_string();
    let pds = show("pd")?;
    let mine: Vec<&str> = pds
        .lines()
        .filter(|l| field(l, "pid").as_deref() == Some(pid.as_str()))
        .collect();
    let pdns: Vec<String> = mine.iter().filter_map(|l| field(l, "pdn")).collect();
    let ctxns: Vec<String> = mine.iter().filter_map(|l| field(l, "ctxn")).collect();
    let count = |text: &str, key: &str, set: &[String]| {
        text.lines()
            .filter(|l| {
                field(l, "pid").as_deref() == Some(pid.as_str())
                    || field(l, key).is_some_and(|v| set.contains(&v))
            })
            .count()
    };
    Ok(vec![
        ("pd", mine.len()),
        ("qp", count(&show("qp")?, "pdn", &pdns)),
        ("mr", count(&show("mr")?, "pdn", &pdns)),
        ("cq", count(&show("cq")?, "ctxn", &ctxns)),
    ])
}
