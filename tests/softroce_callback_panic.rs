//! A receive callback that panics (issue 27): the transport catches the panic, finishes the
//! batch (receive buffers reposted, rendezvous buffers given back, credits returned) and
//! re-raises the panic from `progress`; the messages after it are still delivered, in order.
//!
//! The test binary is its own rank program: in the SoftRoCE guest it runs itself twice under
//! `openib run -n 2` with [`RANK_ENV`] set. Rank 1 sends [`N`] messages (eager ones and a
//! rendezvous one every [`RNDV_EVERY`]) to rank 0, whose callback panics on the messages of
//! [`PANIC_AT`] (more than the endpoint's receive buffers, and a rendezvous one among them). A
//! panic that dropped its buffer, or the rest of its batch, would stall the sender for
//! credits (rank 0 then fails on its timeout) or leave a cache buffer in use.

#[path = "softroce/harness.rs"]
mod harness;

use openib::modex::exchange::ExchangeMode;
use openib::ping::PingConfig;
use openib::transport::{SharedTransport, Transport, TransportConfig};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set in the ranks: `plain` (rank 0 uses `Transport`) or `shared` (`SharedTransport`).
const RANK_ENV: &str = "OPENIB_TEST_PANIC_RANK";
const TEST: &str = "a_panicking_receive_callback_leaves_the_transport_delivering";
const N: u32 = 300;
const RNDV_EVERY: u32 = 25;
const RNDV_LEN: usize = 200_000;
/// Messages whose callback panics: 12 in a row (the endpoint has 8 receive buffers), the
/// rendezvous message 49 and the last message.
fn panics_at(i: u32) -> bool {
    (20..32).contains(&i) || i == 2 * RNDV_EVERY - 1 || i == N - 1
}
const PANICS: u64 = 14;
const DATA: u8 = 9;
const ACK: u8 = 10;

fn payload(i: u32) -> Vec<u8> {
    let len = if i % RNDV_EVERY == RNDV_EVERY - 1 {
        RNDV_LEN
    } else {
        16
    };
    let mut v = vec![i as u8; len];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
fn a_panicking_receive_callback_leaves_the_transport_delivering() {
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
    let run = |mode: &str, env: &str| {
        format!(
            "echo '=== {mode}'; {env} OPENIB_RECV_DEPTH=8 {b} run -n 2 --timeout 240 -- \
             env {RANK_ENV}={mode} {me} --exact {TEST} --nocapture --test-threads 1 2>&1; \
             echo \"exit $?\"\n"
        )
    };
    let script = format!(
        "{}{}echo '=== end'\n",
        run("plain", ""),
        run("shared", "OPENIB_SRQ=on")
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    for mode in ["plain", "shared"] {
        let text = harness::section(&out, mode).unwrap_or_else(|| panic!("no {mode}: {out}"));
        eprintln!("--- {mode}:\n{text}");
        assert!(
            text.contains(&format!(
                "rank 0 ({mode}): all {N} messages delivered in order"
            )) && text.contains("exit 0"),
            "{mode}: {text}"
        );
    }
}

/// One rank of the job (rank 0 receives, rank 1 sends).
fn rank(mode: &str) -> Result<(), String> {
    let rt = openib::runtime::connect().map_err(|e| e.to_string())?;
    let cfg = TransportConfig::from_env(PingConfig {
        derive: openib_ports::DeriveConfig::default(),
        cpc: None,
        timeout: Duration::from_secs(60),
        mode: ExchangeMode::default(),
    })
    .map_err(|e| e.to_string())?;
    let mut t = Transport::open(rt, cfg).map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(120);
    // Callbacks first: the peer may send as soon as its side is connected.
    let acked = Arc::new(AtomicBool::new(false));
    let a = acked.clone();
    t.on_tag(ACK, Box::new(move |_, _| a.store(true, Ordering::Relaxed)))
        .map_err(|e| e.to_string())?;
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    t.on_tag(
        DATA,
        Box::new(move |peer: u32, data: &[u8]| {
            let i = u32::from_le_bytes(data[..4].try_into().expect("4 bytes"));
            let ok = peer == 1 && data == payload(i).as_slice();
            g.lock().unwrap().push((i, ok));
            if panics_at(i) {
                panic!("test panic at message {i}");
            }
        }),
    )
    .map_err(|e| e.to_string())?;
    t.connect_all(timeout).map_err(|e| e.to_string())?;
    if t.rank() == 1 {
        for i in 0..N {
            t.send(0, DATA, &payload(i)).map_err(|e| e.to_string())?;
            t.progress().map_err(|e| e.to_string())?;
        }
        let deadline = Instant::now() + timeout;
        while !acked.load(Ordering::Relaxed) {
            t.progress().map_err(|e| e.to_string())?;
            if Instant::now() > deadline {
                return Err(format!(
                    "rank 1: no ACK from rank 0 in {timeout:?}: {}; SRQ {:?}; stats {:?}; send \
                     budget {:?}",
                    t.debug_endpoint(0),
                    t.srq_stats(),
                    t.endpoint_stats(0),
                    t.send_budget()
                ));
            }
        }
        t.finalize(timeout).map_err(|e| e.to_string())?;
        return Ok(());
    }
    // Keep the expected panics' reports short.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rank 0: panic: {info}");
    }));
    let (raised, stats) = if mode == "shared" {
        let s = SharedTransport::new(t);
        let raised = receive(
            &got,
            timeout,
            || s.progress(),
            || {
                let t = s.lock();
                format!(
                    "{}; SRQ {:?}; stats {:?}; send budget {:?}",
                    t.debug_endpoint(1),
                    t.srq_stats(),
                    t.endpoint_stats(1),
                    t.send_budget()
                )
            },
        )?;
        s.send(1, ACK, b"ack").map_err(|e| e.to_string())?;
        let t = Arc::try_unwrap(s.into_inner())
            .map_err(|_| "a second handle".to_string())?
            .into_inner()
            .map_err(|_| "the lock is still poisoned".to_string())?;
        let stats = (t.callback_panics(), t.cache_stats().in_use, t.interrupted());
        t.finalize(timeout).map_err(|e| e.to_string())?;
        (raised, stats)
    } else {
        let tc = std::cell::RefCell::new(t);
        let raised = receive(
            &got,
            timeout,
            || tc.borrow_mut().progress(),
            || tc.borrow().debug_endpoint(1),
        )?;
        let mut t = tc.into_inner();
        t.send(1, ACK, b"ack").map_err(|e| e.to_string())?;
        let stats = (t.callback_panics(), t.cache_stats().in_use, t.interrupted());
        t.finalize(timeout).map_err(|e| e.to_string())?;
        (raised, stats)
    };
    let got = got.lock().unwrap().clone();
    let order: Vec<u32> = got.iter().map(|g| g.0).collect();
    if order != (0..N).collect::<Vec<_>>() || got.iter().any(|g| !g.1) {
        return Err(format!(
            "rank 0: delivered out of order or corrupted: {got:?}"
        ));
    }
    let (panics, in_use, interrupted) = stats;
    if panics != PANICS || !(1..=PANICS).contains(&raised) || in_use != 0 || interrupted {
        return Err(format!(
            "rank 0: {panics} callback panics counted (want {PANICS}), {raised} raised by \
             progress, {in_use} cache bytes still in use, interrupted {interrupted}"
        ));
    }
    println!("rank 0 ({mode}): all {N} messages delivered in order");
    Ok(())
}

/// Progresses until every message arrived; returns how many panics progress re-raised (each
/// must be one of the callback's).
fn receive(
    got: &Mutex<Vec<(u32, bool)>>,
    timeout: Duration,
    mut progress: impl FnMut() -> Result<usize, openib::transport::TransportError>,
    debug: impl Fn() -> String,
) -> Result<u64, String> {
    let deadline = Instant::now() + timeout;
    let mut raised = 0;
    while got.lock().unwrap().len() < N as usize {
        match catch_unwind(AssertUnwindSafe(&mut progress)) {
            Ok(r) => {
                r.map_err(|e| e.to_string())?;
            }
            Err(p) => {
                let text = p
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "(not a String)".into());
                if !text.starts_with("test panic at message") {
                    return Err(format!(
                        "rank 0: progress raised an unexpected panic: {text}"
                    ));
                }
                raised += 1;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "rank 0: {} of {N} messages in {timeout:?} (stalled): {}",
                got.lock().unwrap().len(),
                debug()
            ));
        }
    }
    Ok(raised)
}
