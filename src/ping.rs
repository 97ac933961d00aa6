//! `openib ping`: every rank connects to every other rank through the CPC path (the winner of
//! the two ports' CPC lists, or one CPC named), exchanges one message each way, and reports.
//!
//! The path is the real one: the CPC services are opened on the port first, their addresses
//! (UD QP number, side-channel port, rdma_cm port) travel as the per-process parts of the
//! modex, the exchange runs over the job's runtime, and each pair's lower rank initiates.

use crate::runtime::{Runtime, Scope};
use openib_cpc::{Connection, CpcId, LocalPort};
use openib_sys::Region;
use openib_sys::{Access, MemoryRegion, RecvRequest, SendOp, SendRequest, WorkCompletion};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

// The wire-up lives in the transport; its names stay reachable here.
pub use crate::transport::wireup::{
    after_failure, fallback_order, pair_adverts, source_gid_index, transport_pair, Next,
    PingConfig, PingError, Settled, Wireup,
};

/// Key under which each rank publishes its ping results for rank 0.
pub const KEY_RESULTS: &str = "oibK";

/// One pair's outcome, from the lower rank's side.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairResult {
    pub from: u32,
    pub to: u32,
    pub cpc: Option<String>,
    pub connect_us: Option<f64>,
    pub ok: bool,
    pub error: Option<String>,
}

/// What a ping run found, as this rank knows it.
#[derive(Debug, Clone)]
pub struct PingReport {
    /// On the reporter: every pair of the job (for a pair with a failed rank, the survivor's
    /// view). Elsewhere: this rank's failed pairs.
    pub pairs: Vec<PairResult>,
    /// The ranks the final fence agreed had failed (empty where the runtime's fence does not
    /// agree on failures: it fails instead).
    pub failed: Vec<u32>,
    /// Whether this rank gathered and reports the table: the lowest surviving rank.
    pub reporter: bool,
}

/// Runs ping on this rank; returns every pair's result on rank 0 (others: their own pairs).
pub fn run(rt: &dyn Runtime, cfg: &PingConfig) -> Result<PingReport, PingError> {
    let info = rt.info().clone();
    let mut w = Wireup::open(rt, cfg)?;
    let mut results: BTreeMap<u32, PairResult> = BTreeMap::new();
    let mut started: BTreeMap<u32, (CpcId, Instant)> = BTreeMap::new();
    let start = Instant::now();
    let peers: Vec<u32> = w.plans.keys().copied().collect();
    for peer in peers {
        let (from, to) = (info.rank.min(peer), info.rank.max(peer));
        let mut res = PairResult {
            from,
            to,
            cpc: None,
            connect_us: None,
            ok: false,
            error: None,
        };
        match &w.plans[&peer] {
            Err(e) => res.error = Some(e.clone()),
            Ok(cpc) => {
                res.cpc = Some(cpc.name().to_string());
                started.insert(peer, (*cpc, Instant::now()));
                w.connect(peer, start);
            }
        }
        results.insert(peer, res);
    }

    #[cfg(feature = "fault-injection")]
    crate::fault::point("in-connect", info.rank);
    // Progress until every planned pair is connected or failed (a peer known dead fails at once).
    let mut conns: BTreeMap<u32, Connection> = BTreeMap::new();
    let deadline = start + cfg.timeout;
    while conns.len() + results.values().filter(|r| r.error.is_some()).count() < results.len() {
        let now = Instant::now();
        let (ok, bad) = w.poll(now)?;
        for (cpc, c) in ok {
            if let Some(r) = results.get_mut(&c.peer) {
                r.connect_us = started
                    .get(&c.peer)
                    .map(|(_, t)| t.elapsed().as_secs_f64() * 1e6);
                r.cpc = Some(cpc.name().to_string());
            }
            conns.insert(c.peer, c);
        }
        for (cpc, peer, e) in bad {
            if let Some(r) = results.get_mut(&peer) {
                r.error = Some(format!("{cpc}: {e}"));
            }
        }
        for dead in rt.failed() {
            if let Some(r) = results.get_mut(&dead) {
                if r.error.is_none() && !conns.contains_key(&dead) {
                    r.error = Some(format!("rank {dead} died before the connection was up"));
                }
            }
        }
        if now > deadline {
            for (p, r) in results.iter_mut() {
                if r.error.is_none() && !conns.contains_key(p) {
                    r.error = Some(format!("not connected within {:?}", cfg.timeout));
                }
            }
            break;
        }
    }

    // One message each way over every connection.
    exchange_messages(w.port(), &conns, info.rank, &mut results, cfg.timeout)?;
    drop(conns);
    drop(w);

    for r in results.values().filter(|r| r.error.is_some()) {
        crate::fault::say(&format!(
            "openib ping: rank {}: pair {}-{}: {}",
            info.rank,
            r.from,
            r.to,
            r.error.as_deref().unwrap_or("?")
        ));
    }
    // Gather every rank's view at the lowest surviving rank: a pair is reported as its lower
    // rank saw it, or, when that rank failed, as the higher one did.
    let mine_json = serde_json::to_vec(&results.values().collect::<Vec<_>>()).expect("serialises");
    let my_errors: Vec<PairResult> = results.values().filter(|r| !r.ok).cloned().collect();
    rt.put(Scope::Global, KEY_RESULTS, &mine_json)?;
    rt.commit()?;
    rt.fence(true, cfg.timeout)?;
    let failed = rt.agreed_failed();
    if rt.fence_agrees_on_failures() && !failed.is_empty() {
        crate::fault::say_agreed("ping", info.rank, &failed);
    }
    let reporter = (0..info.size).find(|r| !failed.contains(r)).unwrap_or(0);
    if info.rank != reporter {
        return Ok(PingReport {
            pairs: my_errors,
            failed,
            reporter: false,
        });
    }
    let mut all: BTreeMap<(u32, u32), PairResult> = BTreeMap::new();
    for r in (0..info.size).filter(|r| !failed.contains(r)) {
        let b = rt.get(r, KEY_RESULTS, cfg.timeout)?;
        let v: Vec<serde_json::Value> = serde_json::from_slice(&b)
            .map_err(|e| PingError::Setup(format!("rank {r}'s results: {e}")))?;
        for x in v {
            let pair = PairResult {
                from: x["from"].as_u64().unwrap_or(0) as u32,
                to: x["to"].as_u64().unwrap_or(0) as u32,
                cpc: x["cpc"].as_str().map(str::to_string),
                connect_us: x["connect_us"].as_f64(),
                ok: x["ok"].as_bool().unwrap_or(false),
                error: x["error"].as_str().map(str::to_string),
            };
            let key = (pair.from, pair.to);
            if pair.from == r || !all.contains_key(&key) {
                all.insert(key, pair);
            }
        }
    }
    Ok(PingReport {
        pairs: all.into_values().collect(),
        failed,
        reporter: true,
    })
}

fn exchange_messages(
    lp: &LocalPort,
    conns: &BTreeMap<u32, Connection>,
    me: u32,
    results: &mut BTreeMap<u32, PairResult>,
    timeout: Duration,
) -> Result<(), PingError> {
    if conns.is_empty() {
        return Ok(());
    }
    const SLOT: usize = 64;
    let n = conns.len();
    let mut send = MemoryRegion::alloc(&lp.pd, SLOT * n, Access::LOCAL_WRITE)?;
    let recv = MemoryRegion::alloc(&lp.pd, SLOT * n, Access::LOCAL_WRITE)?;
    let peers: Vec<u32> = conns.keys().copied().collect();
    for (i, p) in peers.iter().enumerate() {
        conns[p].qp.post_recv(&RecvRequest {
            wr_id: i as u64,
            sges: vec![recv.sge(i * SLOT, SLOT)?],
        })?;
        let msg = format!("openib ping {me}->{p}");
        send.write_at(i * SLOT, msg.as_bytes())?;
    }
    for (i, p) in peers.iter().enumerate() {
        let len = format!("openib ping {me}->{p}").len();
        conns[p].qp.post_send(&SendRequest {
            wr_id: 1000 + i as u64,
            op: SendOp::Send,
            sges: vec![send.sge(i * SLOT, len)?],
            signaled: true,
            inline: false,
        })?;
    }
    let deadline = Instant::now() + timeout;
    let (mut got, mut sent) = (vec![false; n], vec![false; n]);
    let mut wcs: Vec<WorkCompletion> = Vec::new();
    while (!got.iter().all(|x| *x) || !sent.iter().all(|x| *x)) && Instant::now() < deadline {
        wcs.clear();
        lp.recv_cq.poll(&mut wcs, 32)?;
        lp.send_cq.poll(&mut wcs, 32)?;
        for wc in &wcs {
            let (i, is_send) = if wc.wr_id >= 1000 {
                ((wc.wr_id - 1000) as usize, true)
            } else {
                (wc.wr_id as usize, false)
            };
            let Some(p) = peers.get(i) else { continue };
            if !wc.is_success() {
                if let Some(r) = results.get_mut(p) {
                    r.error = Some(format!(
                        "{} completion: {}",
                        if is_send { "send" } else { "receive" },
                        wc.status_str()
                    ));
                }
                got[i] = true;
                sent[i] = true;
                continue;
            }
            if is_send {
                sent[i] = true;
            } else {
                let want = format!("openib ping {p}->{me}");
                // A completed receive of a local-only region.
                let ok = recv.local_slice(i * SLOT, want.len())? == want.as_bytes();
                got[i] = true;
                if !ok {
                    if let Some(r) = results.get_mut(p) {
                        r.error = Some("the message arrived corrupted".into());
                    }
                }
            }
        }
    }
    for (i, p) in peers.iter().enumerate() {
        if let Some(r) = results.get_mut(p) {
            if r.error.is_none() {
                if got[i] && sent[i] {
                    r.ok = true;
                } else {
                    r.error = Some(format!("no message exchanged within {timeout:?}"));
                }
            }
        }
    }
    Ok(())
}
