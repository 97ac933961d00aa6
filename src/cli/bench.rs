//! `openib bench`: ping-pong latency and streaming bandwidth between ranks 0 and 1 over the
//! transport's `send` (eager up to the eager limit, rendezvous above it), and above the eager
//! limit also the same with `send_region` (zero copy from a registered region), with
//! `send_shared` (zero copy from the caller's `Arc<[u8]>`) and the one-sided bandwidth of a
//! stream of puts (RDMA writes). Every checked payload is compared with the pattern its sender wrote.

use super::exit;
use crate::modex::exchange::ExchangeMode;
use crate::ping::PingConfig;
use crate::transport::{
    Completion, EndpointState, IdleBackoff, RemoteRegion, Transport, TransportConfig,
    TransportError,
};
use openib_sys::clock::{self, TickRate};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Message sizes in bytes (comma-separated).
    #[arg(
        long,
        default_value = "8,64,512,4096,8192,65536,262144,1048576",
        value_delimiter = ','
    )]
    pub sizes: Vec<usize>,
    /// Round trips per size for latency (and messages for bandwidth).
    #[arg(long, default_value_t = 200)]
    pub iters: u32,
    /// Use this CPC.
    #[arg(long)]
    pub cpc: Option<String>,
    /// Print JSON: {"results": [{"size", "latency_us", "bandwidth_mb_s"}]}.
    #[arg(long)]
    pub json: bool,
    /// Write every timed round trip of rank 0's copying ping-pongs to this file, in the order
    /// they ran: one line each, the size and half the round trip in microseconds (as
    /// ib_send_lat -U prints its own).
    #[arg(long, value_name = "FILE")]
    pub laps: Option<std::path::PathBuf>,
    /// Send every message of the copying ping-pongs and streams with `send`. By default a
    /// message up to the eager limit goes through `sendi` when the endpoint takes it at once
    /// (as Open MPI's ob1 tries its BTL's sendi first), and through `send` otherwise.
    #[arg(long)]
    pub no_sendi: bool,
    /// Also draw latency and bandwidth against message size into this SVG file (rank 0;
    /// log-scaled axes; `send`, and `send_region` where it ran). Same data as --json.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
}

/// Round trips left out of `latency_trimmed_us`: the slowest two, as ib_send_lat leaves them
/// out of its t_avg (perftest_parameters.c, LAT_MEASURE_TAIL).
const TRIMMED_ROUND_TRIPS: usize = 2;

const TAG_DATA: u8 = 1;
const TAG_REGION: u8 = 2;
const TAG_NOTE: u8 = 3;

struct Inbox {
    name: &'static str,
    count: AtomicU64,
    /// The numbers (from 0, in arrival order) of the messages whose payload the handler keeps
    /// (only the checked ones: copying every message would be timed). Known before the run:
    /// a message may arrive before its phase starts on this rank.
    capture: Vec<u64>,
    captured: Mutex<BTreeMap<u64, Vec<u8>>>,
}

impl Inbox {
    fn new(name: &'static str, capture: Vec<u64>) -> Arc<Inbox> {
        Arc::new(Inbox {
            name,
            count: AtomicU64::new(0),
            capture,
            captured: Mutex::new(BTreeMap::new()),
        })
    }

    /// The payload of message `n` (one of `capture`), once it arrived.
    fn payload(&self, n: u64) -> Option<Vec<u8>> {
        self.captured.lock().expect("inbox").get(&n).cloned()
    }
}

/// Round trips (and streamed messages) for `size`: fewer above 64 KiB.
fn iters_for(a: &BenchArgs, size: usize) -> u64 {
    if size > 65536 {
        a.iters.div_ceil(4).max(10) as u64
    } else {
        a.iters as u64
    }
}

fn pattern(size: usize, salt: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// Where `got` differs from `want`, for the error message.
fn mismatch(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        _ if got.len() != want.len() => format!("{} bytes, expected {}", got.len(), want.len()),
        Some(i) => {
            let end = (i + 16).min(got.len());
            let bad = got[i..]
                .iter()
                .zip(&want[i..])
                .filter(|(a, b)| a != b)
                .count();
            format!(
                "{bad} bytes differ from offset {i}: got {:02x?}, expected {:02x?}",
                &got[i..end],
                &want[i..end]
            )
        }
        None => "no difference".into(),
    }
}

pub fn run(a: &BenchArgs) -> i32 {
    match bench(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("openib bench: {e}");
            exit::ERROR
        }
    }
}

thread_local! {
    /// The longest time, in ticks, between two progress calls of one wait (a process that
    /// was not running, or a call that stalled): diagnoses latency outliers.
    static MAX_POLL_GAP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn wait_for(t: &mut Transport, inbox: &Inbox, n: u64, timeout: Duration) -> Result<(), String> {
    // Timed by the tick counter: this runs once per message, and a clock read can be a
    // system call (TCG guests), which showed in the latency.
    let start = clock::ticks();
    let limit = t.tick_rate().ticks_in(timeout);
    let mut spins = 0u32;
    let mut backoff = IdleBackoff::default();
    let mut last = start;
    while inbox.count.load(Ordering::Acquire) < n {
        t.progress_idle(&mut backoff).map_err(|e| e.to_string())?;
        let now = t.progress_tick();
        MAX_POLL_GAP.with(|g| g.set(g.get().max(now.saturating_sub(last))));
        last = now;
        spins = spins.wrapping_add(1);
        if spins % 256 == 0 {
            // A failed endpoint sends nothing more: say why now rather than time out.
            let peer = 1 - t.rank();
            if let Some(EndpointState::Failed(why)) = t.endpoint_state(peer) {
                return Err(format!(
                    "the endpoint to rank {peer} failed while waiting for {} message {n}: {why}",
                    inbox.name
                ));
            }
        }
        if spins % 256 == 0 && now.saturating_sub(start) > limit {
            return Err(format!(
                "timed out waiting for {} message {n} (have {}); endpoint: {}",
                inbox.name,
                inbox.count.load(Ordering::Acquire),
                t.debug_endpoint(1 - t.rank())
            ));
        }
    }
    Ok(())
}

/// Takes the completions of this rank's sends, as a runtime would (untaken ones pile up in
/// memory); fails on the first that failed.
fn reap(t: &mut Transport) -> Result<(), String> {
    match t
        .drain_completions()
        .find(|c| matches!(c, Completion::Failed { .. }))
    {
        Some(Completion::Failed { peer, error, .. }) => {
            Err(format!("a send to rank {peer} failed: {error}"))
        }
        _ => Ok(()),
    }
}

/// Half round trips of one ping-pong phase, in microseconds.
struct Latency {
    /// Over the whole phase (wall clock).
    mean_us: f64,
    median_us: f64,
    /// perftest's t_avg: the mean without the slowest [`TRIMMED_ROUND_TRIPS`].
    trimmed_us: f64,
    p99_us: f64,
    max_us: f64,
    /// The longest time between two progress calls of this rank's waits.
    max_poll_gap_us: f64,
    /// Every timed round trip, halved, in microseconds, in the order they ran.
    laps_us: Vec<f64>,
}

/// A ping-pong of `send` between the two ranks: one warm-up round trip, then `iters` timed
/// ones (rank 0 sends first). `want_data` counts the data messages this rank expects.
fn ping_pong(
    t: &mut Transport,
    inbox: &Inbox,
    want_data: &mut u64,
    (iters, timeout): (u64, Duration),
    mut send: impl FnMut(&mut Transport) -> Result<u64, TransportError>,
) -> Result<Latency, String> {
    let me = t.rank();
    MAX_POLL_GAP.with(|g| g.set(0));
    let mut start = (Instant::now(), clock::ticks());
    // Each round trip in ticks (the time-stamp counter: a clock read per iteration would be a
    // system call in TCG guests), for the median (perftest's t_typical).
    // Written before the run: a page touched for the first time inside it would be timed.
    let mut laps: Vec<u64> = Vec::with_capacity(iters as usize + 1);
    laps.resize(iters as usize + 1, u64::MAX);
    std::hint::black_box(&mut laps);
    laps.clear();
    let mut lap = clock::ticks();
    for i in 0..=iters {
        if i == 1 {
            start = (Instant::now(), clock::ticks()); // the first round trip warms up
            lap = start.1;
        } else if i >= 2 {
            let now = clock::ticks();
            laps.push(now.saturating_sub(lap));
            lap = now;
        }
        // Count what we expect rather than sampling the inbox: a message may already be there
        // (it can arrive while we still wait for something else).
        *want_data += 1;
        // Completions are reaped after the send: while its message is on the wire, not
        // between a message and the reply.
        if me == 0 {
            send(t).map_err(|e| e.to_string())?;
            reap(t)?;
            wait_for(t, inbox, *want_data, timeout)?;
        } else {
            wait_for(t, inbox, *want_data, timeout)?;
            send(t).map_err(|e| e.to_string())?;
            reap(t)?;
        }
    }
    let end = (Instant::now(), clock::ticks());
    laps.push(end.1.saturating_sub(lap));
    let rate = TickRate::between(start, end)
        .unwrap_or_else(|| TickRate::measure(Duration::from_millis(5)));
    let laps_us = laps.iter().map(|&l| rate.micros(l) / 2.0).collect();
    laps.sort_unstable();
    let half = |q: f64| {
        let i = ((laps.len() as f64 * q) as usize).min(laps.len() - 1);
        rate.micros(laps[i]) / 2.0
    };
    // perftest's t_avg: the mean without the slowest round trips (LAT_MEASURE_TAIL).
    let kept = &laps[..laps.len().saturating_sub(TRIMMED_ROUND_TRIPS).max(1)];
    Ok(Latency {
        mean_us: end.0.duration_since(start.0).as_secs_f64() * 1e6 / iters as f64 / 2.0,
        median_us: half(0.5),
        trimmed_us: rate.micros(kept.iter().sum::<u64>()) / kept.len() as f64 / 2.0,
        p99_us: half(0.99),
        max_us: half(1.0),
        max_poll_gap_us: rate.micros(MAX_POLL_GAP.with(|g| g.get())),
        laps_us,
    })
}

/// A stream of `iters` messages from rank 0, which rank 1 acknowledges after the last one;
/// returns MB/s (1e6 B/s) on this rank.
fn stream(
    t: &mut Transport,
    (inbox, notes): (&Inbox, &Inbox),
    (want_data, want_notes): (&mut u64, &mut u64),
    (iters, size, timeout): (u64, usize, Duration),
    mut send: impl FnMut(&mut Transport) -> Result<u64, TransportError>,
) -> Result<f64, String> {
    let t0 = Instant::now();
    if t.rank() == 0 {
        *want_notes += 1;
        for _ in 0..iters {
            send(t).map_err(|e| e.to_string())?;
            t.progress().map_err(|e| e.to_string())?;
            reap(t)?;
        }
        wait_for(t, notes, *want_notes, timeout)?;
    } else {
        *want_data += iters;
        wait_for(t, inbox, *want_data, timeout)?;
        t.send(1 - t.rank(), TAG_NOTE, &[2])
            .map_err(|e| e.to_string())?;
    }
    let secs = t0.elapsed().as_secs_f64();
    t.flush(timeout).map_err(|e| e.to_string())?;
    Ok((size as f64 * iters as f64) / secs / 1e6)
}

/// One way of sending, measured: a ping-pong through `send` (its first message checked against
/// the pattern; `what` names the way in the error), then a stream through it. Returns the
/// latency and the bandwidth in MB/s.
fn ping_pong_and_stream(
    t: &mut Transport,
    counts: (&Inbox, &Inbox),
    wants: (&mut u64, &mut u64),
    (iters, size, timeout): (u64, usize, Duration),
    (first, what): (u64, &str),
    mut send: impl FnMut(&mut Transport) -> Result<u64, TransportError>,
) -> Result<(Latency, f64), String> {
    let peer = 1 - t.rank();
    let lat = ping_pong(t, counts.0, wants.0, (iters, timeout), &mut send)?;
    check_payload(counts.0, first, size, peer, what)?;
    let bw = stream(t, counts, wants, (iters, size, timeout), send)?;
    Ok((lat, bw))
}

/// Fails unless message `n` of `inbox` is the pattern the peer sends at `size`.
fn check_payload(inbox: &Inbox, n: u64, size: usize, peer: u32, what: &str) -> Result<(), String> {
    let got = inbox.payload(n).unwrap_or_default();
    let want = pattern(size, peer as u8);
    if got != want {
        return Err(format!(
            "size {size}: the {what}payload arrived corrupted ({})",
            mismatch(&got, &want)
        ));
    }
    Ok(())
}

fn bench(a: &BenchArgs) -> Result<i32, String> {
    let cpc = match a.cpc.as_deref() {
        None => None,
        Some(n) => {
            Some(openib_cpc::CpcId::from_name(n).ok_or_else(|| format!("unknown CPC {n:?}"))?)
        }
    };
    let rt = crate::runtime::connect().map_err(|e| e.to_string())?;
    if rt.info().size != 2 {
        return Err(format!(
            "needs exactly 2 ranks (got {}): openib run -n 2 -- openib bench",
            rt.info().size
        ));
    }
    let timeout = Duration::from_secs(120);
    let wire_t0 = Instant::now();
    let cfg = TransportConfig::from_env(PingConfig {
        derive: openib_ports::DeriveConfig::default(),
        cpc,
        timeout: Duration::from_secs(60),
        mode: ExchangeMode::default(),
    })
    .map_err(|e| e.to_string())?;
    let mut t = Transport::open(rt, cfg).map_err(|e| e.to_string())?;
    let me = t.rank();
    // Created before the run, so a path that cannot be written fails at once.
    let mut laps_file = match &a.laps {
        Some(path) if me == 0 => Some(
            std::fs::File::create(path)
                .map(std::io::BufWriter::new)
                .map_err(|e| format!("--laps {}: {e}", path.display()))?,
        ),
        _ => None,
    };
    // The same for the plot: the file is written at the end, from the results.
    let svg_file = match &a.svg {
        Some(path) if me == 0 => Some(
            std::fs::File::create(path).map_err(|e| format!("--svg {}: {e}", path.display()))?,
        ),
        _ => None,
    };
    let peer = 1 - me;
    // The first data message of each size is checked: its number on this rank is the count
    // of data messages of the sizes before (rank 0 receives the pongs, rank 1 the pings and
    // the bandwidth stream).
    // Above the eager limit each size has a second ping-pong and stream, zero copy (both
    // ranks must run the same phases: the bench assumes one eager limit, as for the puts).
    let eager = t.eager_limit();
    let mut first = Vec::with_capacity(a.sizes.len());
    let mut first_zero_copy = Vec::with_capacity(a.sizes.len());
    let mut first_shared = Vec::with_capacity(a.sizes.len());
    let mut n = 0u64;
    for &size in &a.sizes {
        let iters = iters_for(a, size);
        let stream = if me == 1 { iters } else { 0 };
        first.push(n);
        n += iters + 1 + stream;
        first_zero_copy.push(n);
        if size > eager {
            n += iters + 1 + stream;
        }
        first_shared.push(n);
        if size > eager {
            n += iters + 1 + stream;
        }
    }
    let mut capture: Vec<u64> = first
        .iter()
        .chain(&first_zero_copy)
        .chain(&first_shared)
        .copied()
        .collect();
    capture.sort_unstable();
    capture.dedup();
    let inbox = Inbox::new("inbox", capture);
    let notes = Inbox::new("notes", Vec::new());
    let regions = Inbox::new("regions", vec![0]);
    for (tag, ib) in [
        (TAG_DATA, inbox.clone()),
        (TAG_NOTE, notes.clone()),
        (TAG_REGION, regions.clone()),
    ] {
        t.on_tag(
            tag,
            Box::new(move |_, data| {
                let n = ib.count.load(Ordering::Acquire);
                if ib.capture.binary_search(&n).is_ok() {
                    ib.captured.lock().expect("inbox").insert(n, data.to_vec());
                }
                ib.count.fetch_add(1, Ordering::Release);
            }),
        )
        .map_err(|e| e.to_string())?;
    }
    t.connect_all(timeout).map_err(|e| e.to_string())?;
    let wireup_us = wire_t0.elapsed().as_secs_f64() * 1e6;

    // Large messages: each side registers a buffer and tells the other where it is.
    let max = a.sizes.iter().copied().max().unwrap_or(8);
    // `local` holds what this rank sends; peers write into `landing`.
    let mut local = t.register(max.max(8)).map_err(|e| e.to_string())?;
    Arc::get_mut(&mut local)
        .expect("not shared yet")
        .write_at(0, &pattern(max.max(8), me as u8))
        .map_err(|e| e.to_string())?;
    let landing = t.register(max.max(8)).map_err(|e| e.to_string())?;
    t.send(peer, TAG_REGION, &RemoteRegion::of(&landing).encode())
        .map_err(|e| e.to_string())?;
    wait_for(&mut t, &regions, 1, timeout)?;
    let remote = RemoteRegion::decode(&regions.payload(0).unwrap_or_default())
        .ok_or("bad region message")?;

    // Messages of each inbox this rank expects to have received so far.
    let (mut want_data, mut want_notes) = (0u64, 0u64);
    let mut results = Vec::new();
    // On a terminal, rank 0 shows the sizes done and the one at hand.
    let progress = if me == 0 {
        super::progress::Progress::new(a.sizes.len() as u64, "openib bench", a.json)
    } else {
        super::progress::Progress::none()
    };
    for (k, &size) in a.sizes.iter().enumerate() {
        progress.set_message(format!("{} B", size));
        let iters = iters_for(a, size);
        let sleeps_before = t.idle_sleeps();
        // Latency: ping-pong of `send` (eager up to the limit, rendezvous above it).
        let msg = pattern(size, me as u8);
        let counts: (&Inbox, &Inbox) = (&inbox, &notes);
        let (copied, bandwidth) = ping_pong_and_stream(
            &mut t,
            counts,
            (&mut want_data, &mut want_notes),
            (iters, size, timeout),
            (first[k], ""),
            |t| {
                if size <= eager && !a.no_sendi {
                    match t.sendi(peer, TAG_DATA, &msg) {
                        Ok(()) => return Ok(0),
                        Err(TransportError::Busy { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                t.send(peer, TAG_DATA, &msg)
            },
        )?;
        let max_poll_gap_us = copied.max_poll_gap_us;
        if let (Some(f), Some(path)) = (laps_file.as_mut(), &a.laps) {
            use std::io::Write;
            copied
                .laps_us
                .iter()
                .try_for_each(|l| writeln!(f, "{size} {l:.3}"))
                .map_err(|e| format!("--laps {}: {e}", path.display()))?;
        }
        // The same without the copy: `send_region` from `local`, which holds the same pattern
        // (the peer takes the bytes by RDMA, as perftest's registered buffers and the MPI
        // libraries' zero-copy rendezvous do).
        let zero_copy = if size > eager {
            Some(ping_pong_and_stream(
                &mut t,
                counts,
                (&mut want_data, &mut want_notes),
                (iters, size, timeout),
                (first_zero_copy[k], "zero-copy "),
                |t| t.send_region(peer, TAG_DATA, &local, 0, size),
            )?)
        } else {
            None
        };
        // Zero copy from the caller's own memory: `send_shared` of an `Arc<[u8]>` (registered
        // where it is on first use, the registration kept for the next send of it).
        let shared = if size > eager {
            let bytes: Arc<[u8]> = msg.clone().into();
            Some(ping_pong_and_stream(
                &mut t,
                counts,
                (&mut want_data, &mut want_notes),
                (iters, size, timeout),
                (first_shared[k], "shared "),
                |t| t.send_shared(peer, TAG_DATA, &bytes),
            )?)
        } else {
            None
        };
        // One-sided bandwidth: a stream of RDMA writes, then a note once they completed.
        // put_local: from the first put to the last completion at the initiator, the interval
        // ib_write_bw's "BW average" measures; put_bandwidth also waits for the target's
        // check of the data and its note.
        let mut put_local = None;
        let put_bandwidth = if size > eager {
            let t0 = Instant::now();
            want_notes += 1;
            if me == 0 {
                for _ in 0..iters {
                    t.put(peer, &local, 0, remote, 0, size)
                        .map_err(|e| e.to_string())?;
                    t.progress().map_err(|e| e.to_string())?;
                    reap(&mut t)?;
                }
                t.flush(timeout).map_err(|e| e.to_string())?;
                put_local = Some((size as f64 * iters as f64) / t0.elapsed().as_secs_f64() / 1e6);
                t.send(peer, TAG_NOTE, &[1]).map_err(|e| e.to_string())?;
                wait_for(&mut t, &notes, want_notes, timeout)?;
            } else {
                wait_for(&mut t, &notes, want_notes, timeout)?;
                // Copied out: the peer holds the landing region's rkey.
                let got = landing.to_vec(0, size).map_err(|e| e.to_string())?;
                if got[..] != pattern(max.max(8), peer as u8)[..size] {
                    return Err(format!(
                        "size {size}: the RDMA-written data arrived corrupted"
                    ));
                }
                t.send(peer, TAG_NOTE, &[2]).map_err(|e| e.to_string())?;
            }
            let secs = t0.elapsed().as_secs_f64();
            t.flush(timeout).map_err(|e| e.to_string())?;
            Some((size as f64 * iters as f64) / secs / 1e6)
        } else {
            None
        };
        let zc = zero_copy.as_ref();
        let sh = shared.as_ref();
        results.push(json!({"size": size, "latency_us": copied.mean_us,
            "latency_median_us": copied.median_us, "bandwidth_mb_s": bandwidth,
            "latency_trimmed_us": copied.trimmed_us,
            "put_bandwidth_mb_s": put_bandwidth, "put_local_mb_s": put_local,
            "iterations": iters,
            // The copying send's path; the zero-copy runs above the eager limit rendezvous.
            "path": if size <= eager {
                "eager"
            } else if size <= t.config().train_limit {
                "train"
            } else {
                "rendezvous"
            },
            "idle_sleeps": t.idle_sleeps() - sleeps_before,
            "latency_p99_us": copied.p99_us, "latency_max_us": copied.max_us,
            "max_poll_gap_us": max_poll_gap_us,
            "latency_zero_copy_us": zc.map(|(l, _)| l.mean_us),
            "latency_zero_copy_median_us": zc.map(|(l, _)| l.median_us),
            "latency_zero_copy_trimmed_us": zc.map(|(l, _)| l.trimmed_us),
            "bandwidth_zero_copy_mb_s": zc.map(|(_, b)| *b),
            "latency_shared_us": sh.map(|(l, _)| l.mean_us),
            "latency_shared_median_us": sh.map(|(l, _)| l.median_us),
            "latency_shared_trimmed_us": sh.map(|(l, _)| l.trimmed_us),
            "bandwidth_shared_mb_s": sh.map(|(_, b)| *b)}));
        progress.inc(1);
    }
    progress.finish();
    t.flush(timeout).map_err(|e| e.to_string())?;
    if let (Some(mut f), Some(path)) = (laps_file, &a.laps) {
        use std::io::Write;
        f.flush()
            .map_err(|e| format!("--laps {}: {e}", path.display()))?;
    }
    if me == 0 {
        let doc = json!({"results": results, "wireup_us": wireup_us, "eager_limit": eager,
            "rndv_protocol": t.config().rndv.to_string(),
            "srq": t.uses_srq(), "send_budget": t.send_budget(),
            "idle_sleeps": t.idle_sleeps(), "cache": t.cache_stats(),
            "shared_registrations": t.shared_reg_stats(),
            "endpoint": t.endpoint_stats(peer)});
        if let (Some(mut f), Some(path)) = (svg_file, &a.svg) {
            use std::io::Write;
            let title = format!(
                "openib bench: 2 ranks, {} rendezvous, {}",
                t.config().rndv,
                if t.uses_srq() {
                    "shared receive queue"
                } else {
                    "per-peer receive buffers"
                }
            );
            let svg = super::plot::bench_figure(&doc, Some(&title))
                .and_then(|fig| super::plot::render_svg(&fig))
                .map_err(|e| format!("--svg {}: {e}", path.display()))?;
            f.write_all(svg.as_bytes())
                .and_then(|()| f.flush())
                .map_err(|e| format!("--svg {}: {e}", path.display()))?;
        }
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).expect("serialises")
            );
        } else {
            println!(
                "openib bench: 2 ranks, wire-up {:.0} us, eager limit {eager} B, rendezvous {}, {}",
                wireup_us,
                t.config().rndv,
                if t.uses_srq() {
                    "shared receive queue"
                } else {
                    "per-peer receive buffers"
                }
            );
            println!(
                "{:>9} {:>12} {:>12} {:>14} {:>14} {:>14} {:>12} {:>12} {:>12}  path",
                "size",
                "latency us",
                "median us",
                "bandwidth MB/s",
                "put MB/s",
                "zero-copy us",
                "z-c MB/s",
                "shared us",
                "shared MB/s"
            );
            let opt =
                |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |b| format!("{b:.1}"));
            for r in &results {
                println!(
                    "{:>9} {:>12.2} {:>12.2} {:>14.1} {:>14} {:>14} {:>12} {:>12} {:>12}  {}",
                    r["size"].as_u64().unwrap_or(0),
                    r["latency_us"].as_f64().unwrap_or(0.0),
                    r["latency_median_us"].as_f64().unwrap_or(0.0),
                    r["bandwidth_mb_s"].as_f64().unwrap_or(0.0),
                    opt(&r["put_bandwidth_mb_s"]),
                    opt(&r["latency_zero_copy_us"]),
                    opt(&r["bandwidth_zero_copy_mb_s"]),
                    opt(&r["latency_shared_us"]),
                    opt(&r["bandwidth_shared_mb_s"]),
                    r["path"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(exit::OK)
}
