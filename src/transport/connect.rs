//! Connections: lazy connection on first use, the CPC services polled for finished connections
//! (`attach`), completions of QPs not attached or dropped, and an endpoint's failure and
//! removal.

use super::endpoint::{
    unwr, wr, EndpointState, Posted, ANY_PEER, KIND_RECV, KIND_SRQ, PROBE_AFTER,
};
use super::error::{Completion, FailureCause, TransportError};
use super::rendezvous::Source;
use super::wire::HDR;
use super::Transport;
use openib_cpc::Connection;
use openib_sys::Region;
use openib_sys::{Access, MemoryRegion, RecvRequest, WorkCompletion};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Transport {
    /// Connects to every peer now instead of on first use (for benchmarks and wire-up timing).
    /// Not from inside a receive callback ([`TransportError::InCallback`]).
    pub fn connect_all(&mut self, timeout: Duration) -> Result<(), TransportError> {
        if self.callback_depth > 0 {
            return Err(TransportError::InCallback {
                call: "connect_all",
            });
        }
        // On a host's runtime every peer's modex is read now (the unreachable stay without
        // an endpoint).
        if self.w.on_demand() {
            let me = self.rank();
            for p in (0..self.size()).filter(|&p| p != me) {
                let _ = self.reachable(p);
            }
        }
        let peers: Vec<u32> = self.eps.keys().collect();
        for &p in &peers {
            let ep = self.eps.get_mut(&p).expect("listed");
            if ep.state == EndpointState::Idle && matches!(self.w.plans.get(&p), Some(Ok(_))) {
                ep.state = EndpointState::Connecting;
                self.connecting += 1;
                self.w.connect(p, Instant::now());
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.progress()?;
            let waiting: Vec<u32> = self
                .eps
                .iter()
                .filter(|(_, e)| e.state == EndpointState::Connecting)
                .map(|(p, _)| p)
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TransportError::Timeout {
                    what: format!("connecting to rank(s) {waiting:?}"),
                    timeout,
                });
            }
        }
    }

    /// Removes the endpoints of `peers`: their queued and in-flight operations fail with
    /// "removed", and their queue pairs and buffers are released. Later operations to them
    /// fail with [`TransportError::BadPeer`].
    pub fn del_procs(&mut self, peers: &[u32]) {
        for &p in peers {
            self.fail(p, FailureCause::Removed);
            // fail() released the endpoint's transfers; dropping it releases the QP, then
            // its buffers (field order). Its flushed requests still in the completion queues
            // are discarded when polled, also once `add_procs` made the peer a new endpoint
            // (progress checks each completion's QP against the endpoint's).
            self.eps.remove(&p);
            if p == self.rank() {
                self.own_removed = true;
            } else {
                self.w.forget(p);
            }
        }
    }

    /// Makes ranks removed by [`Transport::del_procs`] peers again (an MPI layer adding a
    /// process it removed): each gets a fresh endpoint, connected on first use; on a host's
    /// runtime its modex is read again (a rank that published none stays unreachable, as in
    /// [`Transport::reachable`]). Both sides must have removed each other (a peer still
    /// connected to the old endpoint keeps that connection and drops the new one). This
    /// process's own rank, removed, is reachable again (a fresh loopback queue pair, made on
    /// first use). Ranks not removed are ignored; a rank outside the job is
    /// [`TransportError::BadPeer`] and adds nothing.
    pub fn add_procs(&mut self, peers: &[u32]) -> Result<(), TransportError> {
        let size = self.size();
        if let Some(&peer) = peers.iter().find(|&&p| p >= size) {
            return Err(TransportError::BadPeer { peer, size });
        }
        for &p in peers {
            if p == self.rank() {
                if std::mem::take(&mut self.own_removed) {
                    tracing::debug!(peer = p, "own rank added again");
                }
                continue;
            }
            if self.eps.get(&p).is_some() {
                continue;
            }
            if self.w.on_demand() {
                if self.w.unforget(p) {
                    // NoPath leaves it without an endpoint, as a first reachable() would.
                    if let Err(e) = self.reachable(p) {
                        tracing::info!(peer = p, error = %e, "re-added peer unreachable");
                    }
                }
            } else if self.w.plans.contains_key(&p) {
                let ep = self.new_endpoint();
                self.eps.insert(p, ep);
            }
            tracing::debug!(peer = p, "peer added again");
        }
        Ok(())
    }

    /// The connection managers' round, every `SERVICE_POLL` (and every call while connecting).
    /// Never inlined: it stays out of the message path's code, and `scripts/profile-mpi` can
    /// leave it out of its counts by name.
    #[inline(never)]
    pub(super) fn poll_services(&mut self, now: Instant) -> Result<(), TransportError> {
        self.poll_device_events(now);
        let (ok, bad) = self.w.poll(now)?;
        if self.w.on_demand() {
            // Peers that started a connection before this process used them.
            for p in self.w.take_unknown() {
                self.know(p);
            }
        }
        for (_, c) in ok {
            let (peer, qpn) = (c.peer, c.qp.qp_num());
            self.know(peer);
            let attached = match self.attach(c) {
                Ok(attached) => attached,
                Err(e) => {
                    // The endpoint failed: its early receives are failed with it below.
                    self.fail(peer, FailureCause::local(e));
                    true
                }
            };
            // Messages that arrived before the connection was handed over.
            let early: Vec<WorkCompletion>;
            (early, self.early) = std::mem::take(&mut self.early)
                .into_iter()
                .partition(|wc| wc.qp_num == qpn);
            if !attached {
                self.discard_unattached(qpn, early);
                continue;
            }
            for wc in early {
                let (_, kind, id) = unwr(wc.wr_id);
                let r = if wc.is_success() {
                    self.on_recv(peer, kind, id, wc.byte_len as usize, wc.imm())
                } else {
                    if kind == KIND_SRQ {
                        self.srq.as_mut().expect("SRQ buffer").repost(id)?;
                    }
                    Err(TransportError::EndpointFailed {
                        peer,
                        why: format!("receive failed: {}", wc.status_str()),
                    })
                };
                if let Err(e) = r {
                    self.fail(peer, FailureCause::local(e));
                }
            }
            self.drain(peer)?;
        }
        for (cpc, peer, e) in bad {
            self.fail(peer, FailureCause::Connect(format!("{cpc}: {e}")));
        }
        self.connecting = self
            .eps
            .values()
            .filter(|e| e.state == EndpointState::Connecting)
            .count();
        for dead in self.rt.failed() {
            if self
                .eps
                .get(&dead)
                .is_some_and(|e| !matches!(e.state, EndpointState::Failed(_)))
            {
                self.fail(dead, FailureCause::PeerDied(dead));
            }
        }
        if now >= self.next_probe_scan {
            self.next_probe_scan = now + PROBE_AFTER / 4;
            self.probe_waiting(now);
        }
        Ok(())
    }

    /// Probes the peers that endpoints have waited on for [`PROBE_AFTER`] with nothing of
    /// their own in flight ([`Endpoint::probe_if_waiting`]): a peer that died while this
    /// process waited for its credits, its CTS or its FIN fails its endpoint (the queue pair's
    /// retries run out) instead of leaving the wait without an end.
    fn probe_waiting(&mut self, now: Instant) {
        let mut failed = Vec::new();
        for (peer, ep) in self.eps.iter_mut() {
            if let Err(e) = ep.probe_if_waiting(peer, now) {
                failed.push((peer, e));
            }
        }
        for (peer, e) in failed {
            self.fail(peer, FailureCause::local(e));
        }
    }

    /// The endpoint to this process's own rank, ready to take an operation: made on first use
    /// (an idle one, from [`Transport::reachable`], is connected now). Its connection is a
    /// loopback RC queue pair: created on the served port like a peer's (the prepare hook posts
    /// its receive buffers) and moved to RTR and RTS with its own QP number, GID and LID as
    /// the remote, so no CPC or modex takes part. Everything else is a peer's path: sequence
    /// numbers, credits, bounce slots, rendezvous, completions, and the NIC for RDMA and
    /// atomics (so they are atomic with a peer's atomics on the same word). After `del_procs`
    /// of the own rank, until `add_procs` names it again: [`TransportError::BadPeer`].
    pub(super) fn own_endpoint(&mut self) -> Result<(), TransportError> {
        let me = self.rank();
        if self.own_removed {
            return Err(TransportError::BadPeer {
                peer: me,
                size: self.size(),
            });
        }
        if self.eps.get(&me).is_none() {
            let ep = self.new_endpoint();
            self.eps.insert(me, ep);
        }
        let ep = self.eps.get(&me).expect("inserted");
        match &ep.state {
            EndpointState::Connected => return Ok(()),
            EndpointState::Failed(why) => {
                return Err(TransportError::EndpointFailed {
                    peer: me,
                    why: why.clone(),
                })
            }
            EndpointState::Idle | EndpointState::Connecting => {}
        }
        let made = (|| {
            let port = self.w.port();
            let (qp, local) = port.create_qp()?;
            port.connect(&qp, local.psn, &local)?;
            Ok::<_, openib_sys::Error>(Connection {
                peer: me,
                pair: 0,
                qp,
                local,
                remote: local,
                cm_id: None,
            })
        })();
        let r = match made {
            Ok(c) => {
                let qpn = c.qp.qp_num();
                match self.attach(c) {
                    Ok(true) => Ok(()),
                    Ok(false) => unreachable!("the own endpoint exists and has no connection"),
                    Err(e) => {
                        self.preposted
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&qpn);
                        Err(e)
                    }
                }
            }
            Err(e) => Err(TransportError::from(e)),
        };
        if let Err(e) = r {
            let why = format!("loopback queue pair to the own rank: {e}");
            tracing::warn!(rank = me, error = %e, "no endpoint to the own rank");
            self.fail(me, FailureCause::Connect(why.clone()));
            return Err(TransportError::EndpointFailed { peer: me, why });
        }
        tracing::debug!(
            rank = me,
            "endpoint to the own rank connected (loopback QP)"
        );
        Ok(())
    }

    /// Hands a connection to its endpoint; `false` when it was dropped instead (no endpoint,
    /// or one that is connected already).
    fn attach(&mut self, c: Connection) -> Result<bool, TransportError> {
        let (depth, slot) = (self.cfg.recv_depth as usize, HDR + self.cfg.eager_limit);
        let posted_recvs: usize = self.eps.values().filter(|e| e.recv_mr.is_some()).count() * depth;
        let pd = self.w.port().pd.clone();
        let Some(ep) = self.eps.get_mut(&c.peer) else {
            tracing::debug!(peer = c.peer, "connection to a removed peer dropped");
            return Ok(false);
        };
        if ep.conn.is_some() {
            // Never replace a live connection (its QP carries messages in flight and the peer's
            // credits): a second connection to the same peer is dropped.
            tracing::warn!(
                peer = c.peer,
                "second connection to a connected peer dropped"
            );
            return Ok(false);
        }
        let qpn = c.qp.qp_num();
        let pre = self
            .preposted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&qpn);
        // Buffers of an earlier connection never go to this one's queue.
        ep.unposted.clear();
        ep.recv_mr = match (&mut self.srq, pre) {
            (Some(srq), pre) => {
                if pre.is_none() {
                    // A CPC that did not run the prepare hook: the grant goes in now.
                    srq.bufs.add(srq.pool.per_peer())?;
                }
                srq.pool.admit(c.peer);
                None
            }
            (None, Some(Some(mr))) => Some(Arc::new(mr)),
            (None, _) => {
                let cq = self.cfg.cq_depth;
                if posted_recvs + depth > cq as usize {
                    return Err(TransportError::EndpointFailed {
                        peer: c.peer,
                        why: format!(
                            "{} connected endpoints x {depth} receive buffers would overflow \
                             the {cq}-entry completion queue: lower OPENIB_RECV_DEPTH, raise \
                             OPENIB_CQ_DEPTH or use the shared receive queue (OPENIB_SRQ=on)",
                            posted_recvs / depth + 1
                        ),
                    });
                }
                // A CPC that did not run the prepare hook: post now.
                let recv = MemoryRegion::alloc(&pd, depth * slot, Access::LOCAL_WRITE)?;
                for i in 0..depth {
                    c.qp.post_recv(&RecvRequest {
                        wr_id: wr(ANY_PEER, KIND_RECV, i as u32),
                        sges: vec![recv.sge(i * slot, slot)?],
                    })?;
                }
                Some(Arc::new(recv))
            }
        };
        self.qp_peer.insert(qpn, c.peer);
        self.dropped_qps.forget(qpn);
        // More slots than the peer grants credits (its receive buffers) could never be used.
        let send_slots = self.cfg.send_depth.min(self.cfg.recv_depth) as usize;
        ep.send_mr = Some(MemoryRegion::alloc(
            &pd,
            send_slots * slot,
            Access::LOCAL_WRITE,
        )?);
        ep.free_send = (0..send_slots).rev().collect();
        ep.credits = self.peer_credits.clone();
        ep.trains
            .set_limit(self.cfg.max_msg.try_into().unwrap_or(usize::MAX));
        ep.inline_max = c.qp.caps().max_inline_data as usize;
        ep.conn = Some(c);
        ep.state = EndpointState::Connected;
        self.update_sq_budget();
        Ok(true)
    }

    /// Forgets a dropped connection's QP: its pre-posted receive buffers are released, and
    /// what arrived on it before the drop is discarded (shared receive queue buffers go back
    /// to the queue). Delivering those messages on the peer's live connection would mix two
    /// QPs' buffers and credits.
    fn discard_unattached(&mut self, qpn: u32, early: Vec<WorkCompletion>) {
        self.preposted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&qpn);
        // Completions of it still in the completion queue are discarded when polled.
        self.dropped_qps.insert(qpn);
        self.discard_dropped(&early);
    }

    /// Discards completions of a dropped connection's QP; shared receive queue buffers among
    /// them go back to the queue (a failure to repost one is logged: the queue is one buffer
    /// short, nothing else breaks).
    pub(super) fn discard_dropped(&mut self, wcs: &[WorkCompletion]) {
        if let Some(wc) = wcs.first() {
            tracing::debug!(
                qpn = wc.qp_num,
                n = wcs.len(),
                "discarded completions of a dropped connection"
            );
        }
        for wc in wcs {
            let (_, kind, id) = unwr(wc.wr_id);
            if kind == KIND_SRQ {
                if let Err(e) = self.srq.as_mut().expect("SRQ buffer").repost(id) {
                    tracing::warn!(error = %e, "SRQ buffer of a dropped connection not reposted");
                }
            }
        }
    }

    /// Resizes the send budget to the endpoints connected now.
    fn update_sq_budget(&self) {
        let connected = self
            .eps
            .values()
            .filter(|e| e.state == EndpointState::Connected)
            .count();
        self.sq_budget.set_connected(self.cfg.cq_depth, connected);
    }

    pub(super) fn fail(&mut self, peer: u32, cause: FailureCause) {
        let why = cause.to_string();
        let Some(ep) = self.eps.get_mut(&peer) else {
            return;
        };
        if matches!(ep.state, EndpointState::Failed(_)) {
            return;
        }
        tracing::info!(peer, error = %why, "endpoint failed");
        ep.state = EndpointState::Failed(why.clone());
        let mut tokens: Vec<u64> = ep.pending.drain(..).map(|o| o.token()).collect();
        ep.sq_budget.done(ep.posted.len(), ep.posted.signaled());
        for (_, p) in ep.posted.drain() {
            match p {
                Posted::Msg { token, .. }
                | Posted::Inline { token }
                | Posted::Rdma { token, .. }
                | Posted::Atomic { token, .. } => tokens.push(token),
                Posted::Read { .. }
                | Posted::Write { .. }
                | Posted::Close
                | Posted::Probe
                | Posted::Unsignaled { .. } => {}
            }
        }
        // Stop the QP before releasing buffers its requests name; buffers of transfers that were
        // in flight are deregistered, never lent again.
        if let Some(c) = &ep.conn {
            let _ = c.qp.to_error();
        }
        for (_, o) in ep.outgoing.drain() {
            tokens.push(o.token);
            if let Source::Cached(m) = o.src {
                self.cache.discard(m);
            }
        }
        for (_, inc) in ep.incoming.drain() {
            if let Some(m) = inc.buf {
                self.cache.discard(m);
                self.receiving -= 1;
            }
        }
        ep.to_read.clear();
        self.reading_peers.remove(&peer);
        ep.fins.clear();
        ep.to_write.clear();
        ep.written.clear();
        self.update_sq_budget();
        if let Some(srq) = &mut self.srq {
            if srq.pool.grant(peer).is_some() {
                srq.retiring.push((peer, self.progress_calls));
            }
        }
        for token in tokens.into_iter().filter(|t| *t != 0) {
            self.done.push(Completion::Failed {
                peer,
                token,
                error: why.clone(),
                cause: cause.clone(),
            });
        }
    }
}
