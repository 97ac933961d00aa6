//! The endpoint to one's own rank (issue 30): a loopback RC queue pair that takes a peer's
//! paths. Open MPI's `osc rdma` takes a BTL only if it reaches every rank of a window's
//! communicator, the caller's own included, and mixes atomics on its own memory with a peer's.
//!
//! The test binary is its own rank program: in the SoftRoCE guest it runs itself under
//! `openib run -n 1` and `-n 2` with [`RANK_ENV`] set (and once more with the shared receive
//! queue). Each rank:
//! - finds its own rank reachable, with an endpoint ([`Transport::peers`]);
//! - sends itself messages of every protocol (empty, eager, inline `sendi`, train, rendezvous
//!   up to 4 MiB, registered and shared sources), each delivered to its own callback with the
//!   own rank as source, in order, every byte checked, and never inside the send call (the
//!   callback count is unchanged when a send returns); a callback that gets the transport
//!   answers a message to the own rank from inside (as ob1 does);
//! - puts and gets its own registered memory (whole, and at odd offsets and lengths), every
//!   byte checked, and runs compare-and-swap on it (old values checked);
//! - with a peer: both ranks fetch-and-add on both ranks' counters at once (the own one
//!   through the loopback queue pair, the other's through the peer's); each counter ends at
//!   the sum and the old values seen by both ranks are each number below it exactly once
//!   (the NIC's atomics on the own memory are atomic with the peer's);
//! - every operation completes `Done` naming the own rank; `flush` empties it; after
//!   `del_procs` of the own rank a send to it is `BadPeer`, while the peer's endpoint works;
//!   `add_procs` of the own rank makes it reachable again, and a message to itself arrives.

#[path = "softroce/harness.rs"]
mod harness;

use openib::modex::exchange::ExchangeMode;
use openib::ping::PingConfig;
use openib::transport::{
    Completion, EndpointState, RemoteRegion, Transport, TransportConfig, TransportError,
};
use openib_sys::{Access, MemoryRegion};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RANK_ENV: &str = "OPENIB_TEST_SELF_RANK";
const TEST: &str = "the_own_rank_is_an_endpoint_for_sends_rdma_and_atomics";
/// Messages to oneself.
const DATA: u8 = 3;
/// A message to oneself whose callback answers it with [`ECHO`] from inside.
const PING: u8 = 4;
const ECHO: u8 = 5;
/// Between the ranks: a counter's region, then the old values one rank saw on the other's.
const KEY: u8 = 6;
const OLDS: u8 = 7;
const BYE: u8 = 8;
/// Rank 0's lock region, and rank 1's "done with the lock".
const LOCK_KEY: u8 = 9;
const LOCK_DONE: u8 = 10;
/// Lock rounds per rank.
const LOCKS: u64 = 40;
const EXCL: u64 = 1 << 63;
/// Fetch-and-adds per rank and counter.
const ADDS: u64 = 150;
const RDMA_LEN: usize = 1 << 20;

fn pattern(rank: u32, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| {
            (j as u32)
                .wrapping_mul(31)
                .wrapping_add(i as u32 * 7 + rank * 101) as u8
        })
        .collect()
}

#[test]
fn the_own_rank_is_an_endpoint_for_sends_rdma_and_atomics() {
    if let Ok(mode) = std::env::var(RANK_ENV) {
        if let Err(e) = rank(&mode) {
            panic!("{mode}: {e}");
        }
        return;
    }
    if harness::skip_guest(TEST) {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    let me = std::env::current_exe().expect("the test binary's path");
    let me = me.display();
    let run = |name: &str, n: u32, env: &str| {
        format!(
            "echo '=== {name}'; {env} {b} run -n {n} --timeout 240 -- \
             env {RANK_ENV}={name} {me} --exact {TEST} --nocapture --test-threads 1 2>&1; \
             echo \"exit $?\"\n"
        )
    };
    let script = format!(
        "{}{}{}echo '=== end'\n",
        run("one", 1, ""),
        run("two", 2, ""),
        run("srq", 2, "OPENIB_SRQ=on")
    );
    let out = harness::guest_run_ok(&["--timeout", "900"], &["sh", "-c", &script]);
    for (name, n) in [("one", 1), ("two", 2), ("srq", 2)] {
        let text = harness::section(&out, name).unwrap_or_else(|| panic!("no {name}: {out}"));
        eprintln!("--- {name}:\n{text}");
        for r in 0..n {
            assert!(
                text.contains(&format!("rank {r} ({name}): own endpoint ok")),
                "{name}: rank {r}: {text}"
            );
        }
        assert!(text.contains("exit 0"), "{name}: {text}");
    }
}

type Got = Arc<Mutex<Vec<(u32, u8, Vec<u8>)>>>;

fn rank(mode: &str) -> Result<(), String> {
    let e = |e: TransportError| e.to_string();
    let rt = openib::runtime::connect().map_err(|e| e.to_string())?;
    let cfg = TransportConfig::from_env(PingConfig {
        derive: openib_ports::DeriveConfig::default(),
        cpc: None,
        timeout: Duration::from_secs(60),
        mode: ExchangeMode::default(),
    })
    .map_err(|e| e.to_string())?;
    let mut t = Transport::open(rt, cfg).map_err(e)?;
    let (me, size) = (t.rank(), t.size());
    let timeout = Duration::from_secs(
        std::env::var("OPENIB_TEST_SELF_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    );
    let got: Got = Arc::default();
    let in_send = Arc::new(AtomicBool::new(false));
    let nested = Arc::new(AtomicUsize::new(0));
    for tag in [DATA, ECHO, KEY, OLDS, BYE, LOCK_KEY, LOCK_DONE] {
        let (g, s, n) = (got.clone(), in_send.clone(), nested.clone());
        t.on_tag(
            tag,
            Box::new(move |peer, data| {
                if s.load(Ordering::SeqCst) {
                    n.fetch_add(1, Ordering::SeqCst);
                }
                g.lock().unwrap().push((peer, tag, data.to_vec()));
            }),
        )
        .map_err(e)?;
    }
    let echo_token = Arc::new(Mutex::new(None));
    let et = echo_token.clone();
    t.on_tag_with_transport(
        PING,
        Box::new(move |t, peer, data| {
            let mut answer = data.to_vec();
            answer.reverse();
            match t.send(peer, ECHO, &answer) {
                Ok(token) => *et.lock().unwrap() = Some(token),
                Err(err) => panic!("echo to rank {peer} from inside the callback: {err}"),
            }
        }),
    )
    .map_err(e)?;

    // Reachable, with an endpoint, connected on first use.
    t.reachable(me).map_err(e)?;
    if !t.peers().contains(&me) {
        return Err(format!("own rank {me} has no endpoint: {:?}", t.peers()));
    }

    // Messages of every protocol to oneself.
    let el = t.eager_limit();
    let sizes = [
        0,
        1,
        8,
        100,
        el - 1,
        el,
        el + 1,
        12 * 1024,
        16 * 1024 + 3,
        200_000,
        4 << 20,
    ];
    let mut want: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut tokens: HashMap<u64, &str> = HashMap::new();
    let send = |t: &mut Transport, tag: u8, data: &[u8]| -> Result<u64, String> {
        let before = got.lock().unwrap().len();
        in_send.store(true, Ordering::SeqCst);
        let r = t.send(me, tag, data);
        in_send.store(false, Ordering::SeqCst);
        if got.lock().unwrap().len() != before {
            return Err("a message to the own rank was delivered inside send".into());
        }
        r.map_err(|e| e.to_string())
    };
    for (i, &len) in sizes.iter().enumerate() {
        let p = pattern(me, i, len);
        tokens.insert(send(&mut t, DATA, &p)?, "send");
        want.push((DATA, p));
    }
    if t.endpoint_state(me) != Some(EndpointState::Connected) {
        return Err(format!("own endpoint: {:?}", t.endpoint_state(me)));
    }
    // sendi: posted now or Busy (then nothing was sent).
    for i in 0..8 {
        let p = pattern(me, 100 + i, 24);
        in_send.store(true, Ordering::SeqCst);
        let r = t.sendi(me, DATA, &p);
        in_send.store(false, Ordering::SeqCst);
        match r {
            Ok(()) => want.push((DATA, p)),
            Err(TransportError::Busy { .. }) => t.progress().map(|_| ()).map_err(e)?,
            Err(x) => return Err(format!("sendi to the own rank: {x}")),
        }
    }
    // Zero copy from registered and shared memory.
    let mut reg = MemoryRegion::alloc(t.protection_domain(), 300_000, Access::ALL)
        .map_err(|x| x.to_string())?;
    let p = pattern(me, 200, 300_000);
    reg.write_at(0, &p).map_err(|x| x.to_string())?;
    let reg = Arc::new(reg);
    tokens.insert(
        t.send_region(me, DATA, &reg, 0, 300_000).map_err(e)?,
        "send_region",
    );
    want.push((DATA, p));
    let shared: Arc<[u8]> = pattern(me, 201, 500_000).into();
    tokens.insert(t.send_shared(me, DATA, &shared).map_err(e)?, "send_shared");
    want.push((DATA, shared.to_vec()));
    // A message answered from inside its callback.
    let ping = pattern(me, 300, 5000);
    tokens.insert(send(&mut t, PING, &ping)?, "ping");
    let mut echo = ping.clone();
    echo.reverse();
    want.push((ECHO, echo));

    let deadline = Instant::now() + timeout;
    // The peer's first message (its counter's region) may come in meanwhile: it stays.
    let from_me = |g: &Got| g.lock().unwrap().iter().filter(|m| m.0 == me).count();
    while from_me(&got) < want.len() {
        t.progress().map_err(e)?;
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {} messages to the own rank in {timeout:?}: {}",
                from_me(&got),
                want.len(),
                t.debug_endpoint(me)
            ));
        }
    }
    {
        let g = got.lock().unwrap();
        let mine = g.iter().filter(|m| m.0 == me);
        for (k, ((peer, tag, data), (wtag, wdata))) in mine.zip(&want).enumerate() {
            if *peer != me || tag != wtag || data != wdata {
                return Err(format!(
                    "message {k} to the own rank: from {peer} tag {tag} {} bytes; want from \
                     {me} tag {wtag} {} bytes (or different bytes)",
                    data.len(),
                    wdata.len()
                ));
            }
        }
    }
    got.lock().unwrap().retain(|m| m.0 != me);
    let echo = echo_token.lock().unwrap().take();
    tokens.insert(echo.ok_or("the echo's send returned no token")?, "echo");
    if nested.load(Ordering::SeqCst) != 0 {
        return Err("a callback ran inside a send to the own rank".into());
    }

    // Put and get on the own memory.
    let mut src = MemoryRegion::alloc(t.protection_domain(), RDMA_LEN, Access::ALL)
        .map_err(|x| x.to_string())?;
    let sp = pattern(me, 400, RDMA_LEN);
    src.write_at(0, &sp).map_err(|x| x.to_string())?;
    let src = Arc::new(src);
    let dst = t.register(RDMA_LEN).map_err(e)?;
    let back = t.register(RDMA_LEN).map_err(e)?;
    let rdst = RemoteRegion::of(dst.as_ref());
    tokens.insert(t.put(me, &src, 0, rdst, 0, RDMA_LEN).map_err(e)?, "put");
    let done = t.flush(timeout).map_err(e)?;
    check_done(&done, me, &mut tokens)?;
    if dst.to_vec(0, RDMA_LEN).map_err(|x| x.to_string())? != sp {
        return Err("put to the own memory: bytes differ".into());
    }
    // Odd offsets and lengths, then the whole region back by get.
    tokens.insert(
        t.put(me, &src, 3, rdst, 1001, 77_777).map_err(e)?,
        "put odd",
    );
    tokens.insert(t.get(me, &back, 0, rdst, 0, RDMA_LEN).map_err(e)?, "get");
    let done = t.flush(timeout).map_err(e)?;
    check_done(&done, me, &mut tokens)?;
    let mut expect = sp.clone();
    expect[1001..1001 + 77_777].copy_from_slice(&sp[3..3 + 77_777]);
    if back.to_vec(0, RDMA_LEN).map_err(|x| x.to_string())? != expect {
        return Err("get of the own memory: bytes differ".into());
    }
    tokens.insert(t.get(me, &back, 5, rdst, 999, 4097).map_err(e)?, "get odd");
    let done = t.flush(timeout).map_err(e)?;
    check_done(&done, me, &mut tokens)?;
    if back.to_vec(5, 4097).map_err(|x| x.to_string())? != expect[999..999 + 4097] {
        return Err("get at an odd offset of the own memory: bytes differ".into());
    }
    // A put past the end of the own region is refused before anything is posted.
    if !matches!(
        t.put(me, &src, 0, rdst, RDMA_LEN as u64 - 8, 16),
        Err(TransportError::Range { .. })
    ) {
        return Err("a put past the end of the own region was not refused".into());
    }

    // Atomics: counter (8 bytes at 0) and old values (8 bytes each).
    let counter = t.register(64).map_err(e)?;
    let olds = t.register(8 * (2 * ADDS as usize + 4)).map_err(e)?;
    let rc = RemoteRegion::of(counter.as_ref());
    let peer = (size > 1).then_some(1 - me.min(1));
    let peer_counter = match peer {
        Some(p) => {
            tokens.insert(t.send(p, KEY, &rc.encode()).map_err(e)?, "key to the peer");
            let m = wait_for(&mut t, &got, p, KEY, timeout)?;
            Some(RemoteRegion::decode(&m).ok_or("a malformed region from the peer")?)
        }
        None => None,
    };
    // Both counters at once, alternating: own through loopback, the peer's through its QP.
    for i in 0..ADDS as usize {
        tokens.insert(
            t.fetch_add(me, &olds, 8 * i, rc, 0, 1).map_err(e)?,
            "fetch_add own",
        );
        if let (Some(p), Some(pc)) = (peer, peer_counter) {
            tokens.insert(
                t.fetch_add(p, &olds, 8 * (ADDS as usize + i), pc, 0, 1)
                    .map_err(e)?,
                "fetch_add peer",
            );
        }
    }
    let done = t.flush(timeout).map_err(e)?;
    check_done_peers(&done, me, peer, &mut tokens)?;
    let mine: Vec<u64> = (0..ADDS as usize)
        .map(|i| olds.read_u64(8 * i).map_err(|x| x.to_string()))
        .collect::<Result<_, _>>()?;
    let total = ADDS * size.min(2) as u64;
    let mut seen: Vec<u64> = mine.clone();
    if let Some(p) = peer {
        let theirs: Vec<u8> = (0..ADDS as usize)
            .flat_map(|i| {
                olds.read_u64(8 * (ADDS as usize + i))
                    .unwrap_or(u64::MAX)
                    .to_le_bytes()
            })
            .collect();
        tokens.insert(t.send(p, OLDS, &theirs).map_err(e)?, "olds to the peer");
        let m = wait_for(&mut t, &got, p, OLDS, timeout)?;
        seen.extend(
            m.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8"))),
        );
    }
    if mine.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "own fetch-and-add old values not increasing: {mine:?}"
        ));
    }
    let set: BTreeSet<u64> = seen.iter().copied().collect();
    if set.len() != seen.len() || set != (0..total).collect() {
        return Err(format!(
            "old values on the own counter are not 0..{total} once each: {seen:?}"
        ));
    }
    if counter.read_u64(0).map_err(|x| x.to_string())? != total {
        return Err(format!(
            "own counter {} after {total} adds",
            counter.read_u64(0).map_err(|x| x.to_string())?
        ));
    }
    // Compare-and-swap on the own memory: a match swaps, a mismatch leaves it.
    let at = 8 * 2 * ADDS as usize;
    tokens.insert(
        t.compare_swap(me, &olds, at, rc, 0, total, 0xfeed_f00d)
            .map_err(e)?,
        "cswap",
    );
    tokens.insert(
        t.compare_swap(me, &olds, at + 8, rc, 0, total, 1)
            .map_err(e)?,
        "cswap miss",
    );
    let done = t.flush(timeout).map_err(e)?;
    check_done_peers(&done, me, peer, &mut tokens)?;
    let (o1, o2, v) = (
        olds.read_u64(at).map_err(|x| x.to_string())?,
        olds.read_u64(at + 8).map_err(|x| x.to_string())?,
        counter.read_u64(0).map_err(|x| x.to_string())?,
    );
    if (o1, o2, v) != (total, 0xfeed_f00d, 0xfeed_f00d) {
        return Err(format!(
            "compare-and-swap on the own memory: old {o1:#x} and {o2:#x}, value {v:#x}"
        ));
    }
    if !tokens.is_empty() {
        return Err(format!("operations without a completion: {tokens:?}"));
    }

    if let Some(p) = peer {
        lock_at_rank_0(&mut t, &got, p, &mut tokens, timeout)?;
    }

    // Removed: the own rank is gone, the peer's endpoint is not.
    t.del_procs(&[me]);
    if !matches!(t.send(me, DATA, b"x"), Err(TransportError::BadPeer { .. }))
        || !matches!(t.reachable(me), Err(TransportError::BadPeer { .. }))
    {
        return Err("the own rank was still reachable after del_procs".into());
    }
    // Added again (an MPI layer's add_procs after its del_procs): a fresh loopback endpoint
    // takes a message to itself, every byte checked.
    t.add_procs(&[me]).map_err(e)?;
    t.reachable(me).map_err(e)?;
    t.send(me, DATA, b"back again").map_err(e)?;
    let back = wait_for(&mut t, &got, me, DATA, timeout).map_err(|e| {
        format!(
            "after add_procs: {e}; own endpoint: {}",
            t.debug_endpoint(me)
        )
    })?;
    if back != b"back again" {
        return Err(format!("after add_procs the own rank got {back:?}"));
    }
    if let Some(p) = peer {
        t.send(p, BYE, b"bye").map_err(e)?;
        wait_for(&mut t, &got, p, BYE, timeout)?;
    }
    t.finalize(timeout).map_err(e)?;
    println!("rank {me} ({mode}): own endpoint ok");
    Ok(())
}

/// Takes each completion's token off `tokens`, checking it is `Done` from the own rank.
fn check_done(done: &[Completion], me: u32, tokens: &mut HashMap<u64, &str>) -> Result<(), String> {
    check_done_peers(done, me, None, tokens)
}

fn check_done_peers(
    done: &[Completion],
    me: u32,
    peer: Option<u32>,
    tokens: &mut HashMap<u64, &str>,
) -> Result<(), String> {
    for c in done {
        match c {
            Completion::Done { peer: p, token } => {
                let Some(what) = tokens.remove(token) else {
                    return Err(format!("completion of an unknown token {token} (from {p})"));
                };
                let want = if what.ends_with("peer") || what.ends_with("to the peer") {
                    peer.unwrap_or(u32::MAX)
                } else {
                    me
                };
                if *p != want {
                    return Err(format!("{what}: completion names rank {p}, want {want}"));
                }
            }
            Completion::Failed { .. } => return Err(format!("failed: {c:?}")),
        }
    }
    Ok(())
}

/// Progresses until a message with `tag` from `from` arrived; returns its bytes.
fn wait_for(
    t: &mut Transport,
    got: &Got,
    from: u32,
    tag: u8,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let mut g = got.lock().unwrap();
            if let Some(k) = g.iter().position(|m| m.0 == from && m.1 == tag) {
                return Ok(g.remove(k).2);
            }
        }
        t.progress().map_err(|e| e.to_string())?;
        if Instant::now() > deadline {
            return Err(format!("no message {tag} from rank {from} in {timeout:?}"));
        }
    }
}

/// A lock in rank 0's memory taken by both ranks, as Open MPI's osc rdma takes its
/// accumulate lock: compare-and-swap 0 -> `EXCL` until the old value is 0, then a read and a
/// write of a count under the lock (not atomic: two holders at once would lose an increment),
/// then release by adding `EXCL` (wrapping to 0). Rank 0 goes through its loopback endpoint,
/// rank 1 through its connection; the count ends at both ranks' rounds and the lock free.
fn lock_at_rank_0(
    t: &mut Transport,
    got: &Got,
    peer: u32,
    tokens: &mut HashMap<u64, &str>,
    timeout: Duration,
) -> Result<(), String> {
    let e = |e: TransportError| e.to_string();
    let me = t.rank();
    let lock = t.register(16).map_err(e)?;
    let scratch = t.register(16).map_err(e)?;
    let target = if me == 0 {
        let r = RemoteRegion::of(lock.as_ref());
        tokens.insert(
            t.send(peer, LOCK_KEY, &r.encode()).map_err(e)?,
            "lock key to the peer",
        );
        r
    } else {
        let m = wait_for(t, got, peer, LOCK_KEY, timeout)?;
        RemoteRegion::decode(&m).ok_or("a malformed lock region")?
    };
    let (owner, label) = if me == 0 {
        (me, "lock")
    } else {
        (peer, "lock peer")
    };
    let deadline = Instant::now() + timeout;
    let mut spins = 0u64;
    for _ in 0..LOCKS {
        loop {
            tokens.insert(
                t.compare_swap(owner, &scratch, 0, target, 0, 0, EXCL)
                    .map_err(e)?,
                label,
            );
            let done = t.flush(timeout).map_err(e)?;
            check_done_peers(&done, me, Some(peer), tokens)?;
            if scratch.read_u64(0).map_err(|x| x.to_string())? == 0 {
                break;
            }
            spins += 1;
            if Instant::now() > deadline {
                return Err(format!(
                    "the lock at rank 0 never came free ({spins} tries)"
                ));
            }
        }
        tokens.insert(t.get(owner, &scratch, 8, target, 8, 8).map_err(e)?, label);
        let done = t.flush(timeout).map_err(e)?;
        check_done_peers(&done, me, Some(peer), tokens)?;
        let count = scratch.read_u64(8).map_err(|x| x.to_string())?;
        let mut next = MemoryRegion::alloc(t.protection_domain(), 8, Access::ALL)
            .map_err(|x| x.to_string())?;
        next.write_at(0, &(count + 1).to_ne_bytes())
            .map_err(|x| x.to_string())?;
        let next = Arc::new(next);
        tokens.insert(t.put(owner, &next, 0, target, 8, 8).map_err(e)?, label);
        let done = t.flush(timeout).map_err(e)?;
        check_done_peers(&done, me, Some(peer), tokens)?;
        tokens.insert(
            t.fetch_add(owner, &scratch, 0, target, 0, EXCL)
                .map_err(e)?,
            label,
        );
        let done = t.flush(timeout).map_err(e)?;
        check_done_peers(&done, me, Some(peer), tokens)?;
    }
    if me == 0 {
        wait_for(t, got, peer, LOCK_DONE, timeout)?;
        let (l, c) = (
            lock.read_u64(0).map_err(|x| x.to_string())?,
            lock.read_u64(8).map_err(|x| x.to_string())?,
        );
        if (l, c) != (0, 2 * LOCKS) {
            return Err(format!(
                "lock word {l:#x} and count {c} after {} rounds ({spins} tries here)",
                2 * LOCKS
            ));
        }
        println!("rank 0: lock ok ({spins} busy tries)");
    } else {
        tokens.insert(
            t.send(peer, LOCK_DONE, b"").map_err(e)?,
            "lock done to the peer",
        );
    }
    Ok(())
}
