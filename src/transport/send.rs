//! The send paths: eager, inline (`sendi`), trains, and rendezvous from a cache copy, a registered
//! region, shared bytes or a C caller's bytes; queued as [`Op`]s in call order and posted by
//! [`Transport::drain`] as credits, bounce slots and the send budget allow.

use super::endpoint::{Endpoint, EndpointState, Posted};
use super::error::TransportError;
use super::flow::fragments;
use super::op::{AtomicOp, Op};
use super::rdma::check_range;
use super::rendezvous::{Outgoing, Source};
use super::wire::{train_piece, Kind, Rts, HDR, RTS_LEN};
use super::{Tag, Transport, MAX_QUEUE};
use openib_sys::Region;
use openib_sys::{Access, ForeignRegion, MemoryRegion, SendOp, SharedRegion};
use std::sync::Arc;

impl Transport {
    pub(super) fn enqueue(
        &mut self,
        peer: u32,
        make: impl FnOnce(&mut Endpoint) -> Op,
    ) -> Result<(), TransportError> {
        let ep = self.endpoint(peer)?;
        let op = make(ep);
        ep.pending.push_back(op);
        self.drain(peer)
    }

    /// Starts a put, get or atomic: posted at once when nothing waits before it on a connected
    /// endpoint with room on its send queue (it takes no credit, and skips the queue and the
    /// drain: one-sided latency is this path), else queued behind the others.
    pub(super) fn enqueue_one_sided(&mut self, peer: u32, op: Op) -> Result<(), TransportError> {
        let ep = self.endpoint(peer)?;
        if ep.state == EndpointState::Connected && ep.pending.is_empty() && ep.sq_room() {
            return ep.post_one_sided(peer, op);
        }
        ep.pending.push_back(op);
        self.drain(peer)
    }

    /// Queues the RTS of a rendezvous of `len` bytes from `src`.
    fn enqueue_rts(
        &mut self,
        peer: u32,
        tag: Tag,
        src: Source,
        len: usize,
        token: u64,
    ) -> Result<(), TransportError> {
        self.enqueue(peer, |ep| Op::Rts {
            tag,
            seq: ep.take_seq(),
            src,
            len,
            token,
        })
    }

    /// Sends `data` with `tag` to `peer` (connects on first use): eager up to the eager limit,
    /// rendezvous above it. The data is copied: the caller may reuse it at once. Returns a
    /// token that a later [`Completion`] names. Above `OPENIB_MAX_MSG_SIZE`:
    /// [`TransportError::TooLarge`] (as for every send).
    pub fn send(&mut self, peer: u32, tag: Tag, data: &[u8]) -> Result<u64, TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.cfg.check_msg_len(data.len())?;
        let token = self.token();
        if data.len() <= self.cfg.eager_limit {
            // Fast path: straight into a bounce slot when nothing waits before it.
            let slot_len = HDR + self.cfg.eager_limit;
            let ep = self.endpoint(peer)?;
            if ep.why_not_now().is_none() {
                ep.post_eager_now(peer, slot_len, tag, data, token)?;
                return Ok(token);
            }
            let data = data.to_vec();
            self.enqueue(peer, |ep| Op::Eager {
                tag,
                seq: ep.take_seq(),
                data,
                token,
            })?;
        } else if data.len() <= self.cfg.train_limit {
            let sizes = (
                HDR + self.cfg.eager_limit,
                train_piece(self.cfg.eager_limit),
            );
            let ep = self.endpoint(peer)?;
            let seq = ep.take_seq();
            let mut off = 0;
            if ep.why_not_now().is_none()
                && ep.post_train(peer, sizes, tag, seq, data, &mut off, token)?
            {
                return Ok(token);
            }
            let data = data[off..].to_vec();
            self.enqueue(peer, |_| Op::Train {
                tag,
                seq,
                data,
                off: 0,
                token,
            })?;
        } else {
            self.endpoint(peer)?;
            let pd = self.w.port().pd.clone();
            let mut buf = self
                .cache
                .take(data.len(), |n| MemoryRegion::alloc(&pd, n, Access::ALL))?;
            buf.write_at(0, data)?;
            let len = data.len();
            self.enqueue_rts(peer, tag, Source::Cached(buf), len, token)?;
        }
        Ok(token)
    }

    /// Sends `data` with `tag` to `peer` like [`Transport::send`], but above the eager limit
    /// without copying: the bytes are registered where they are and the peer takes them by
    /// RDMA. The transport holds a reference to `data` until the transfer completes, and keeps
    /// the registration (with its reference: the bytes stay allocated) for the next send of the
    /// same `Arc`, up to `OPENIB_PINNED_MAX` bytes of such registrations, least recently used
    /// evicted first. An `Arc<[u8]>` cannot change while shared, so a kept registration never
    /// goes stale. At or below the eager limit the bytes are copied as by `send`.
    pub fn send_shared(
        &mut self,
        peer: u32,
        tag: Tag,
        data: &Arc<[u8]>,
    ) -> Result<u64, TransportError> {
        if data.len() <= self.cfg.eager_limit {
            return self.send(peer, tag, data);
        }
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.cfg.check_msg_len(data.len())?;
        let token = self.token();
        self.endpoint(peer)?;
        let pd = self.w.port().pd.clone();
        let region = self
            .shared_regs
            .get(data, |d| SharedRegion::register(&pd, d))?;
        let len = data.len();
        self.enqueue_rts(peer, tag, Source::Shared(region), len, token)?;
        Ok(token)
    }

    /// Sends the whole of `region` (registered on [`Transport::protection_domain`] by a caller
    /// outside safe Rust, e.g. the C ABI) with `tag` to `peer` by rendezvous, without copying:
    /// the peer takes the bytes by RDMA. The transport drops (deregisters) the region when the
    /// transfer completes or fails; the bytes must not change until then.
    pub fn send_foreign(
        &mut self,
        peer: u32,
        tag: Tag,
        region: ForeignRegion,
    ) -> Result<u64, TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        let len = region.len();
        self.cfg.check_msg_len(len)?;
        if len == 0 {
            // A rendezvous of nothing is a protocol error at the peer: an empty message.
            return self.send(peer, tag, &[]);
        }
        let token = self.token();
        self.endpoint(peer)?;
        self.enqueue_rts(peer, tag, Source::Foreign(region), len, token)?;
        Ok(token)
    }

    /// Sends `len` bytes of registered `region` from `offset`, without copying above the eager
    /// limit: the peer takes the bytes from the region by RDMA, so they must not change until the
    /// completion.
    pub fn send_region(
        &mut self,
        peer: u32,
        tag: Tag,
        region: &Arc<MemoryRegion>,
        offset: usize,
        len: usize,
    ) -> Result<u64, TransportError> {
        check_range(region, offset, len)?;
        self.cfg.check_msg_len(len)?;
        if len <= self.cfg.eager_limit {
            // Copied out: peers may write the region (docs/DESIGN.md, soundness).
            let data = region.to_vec(offset, len)?;
            return self.send(peer, tag, &data);
        }
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        let token = self.token();
        let src = Source::User(region.clone(), offset);
        self.enqueue_rts(peer, tag, src, len, token)?;
        Ok(token)
    }

    /// Immediate send of a small message: posted now or not at all ([`TransportError::Busy`]
    /// when the endpoint is not connected, has queued work, or lacks a credit or a slot). No
    /// completion is reported for it.
    pub fn sendi(&mut self, peer: u32, tag: Tag, data: &[u8]) -> Result<(), TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        if data.len() > self.cfg.eager_limit {
            return Err(TransportError::TooLarge {
                len: data.len(),
                limit: self.cfg.eager_limit,
            });
        }
        self.cfg.check_msg_len(data.len())?;
        let slot_len = HDR + self.cfg.eager_limit;
        let ep = self.endpoint(peer)?;
        if let Some(why) = ep.why_not_now() {
            return Err(TransportError::Busy { why });
        }
        ep.post_eager_now(peer, slot_len, tag, data, 0)
    }

    /// Posts what the endpoint's credits, slots and send queue allow: FINs, rendezvous reads,
    /// queued user operations in order, then a credit return if one is due.
    pub(super) fn drain(&mut self, peer: u32) -> Result<(), TransportError> {
        let slot_len = HDR + self.cfg.eager_limit;
        let fragment = self.cfg.rndv_fragment;
        let Transport {
            eps,
            cache,
            w,
            reading_peers,
            receiving,
            ..
        } = self;
        let Some(ep) = eps.get_mut(&peer) else {
            return Ok(());
        };
        if ep.state != EndpointState::Connected {
            return Ok(());
        }
        // Nothing queued (the common case after a received eager message): no lookups below.
        if ep.pending.is_empty()
            && ep.fins.is_empty()
            && ep.written.is_empty()
            && ep.to_read.is_empty()
            && ep.to_write.is_empty()
            && !ep.credits.credit_message_due()
        {
            if !reading_peers.is_empty() {
                reading_peers.remove(&peer);
            }
            return Ok(());
        }
        // FINs release the peer's source buffers; WRITTEN notices follow their writes.
        ep.post_notices(peer, slot_len, Kind::Fin)?;
        ep.post_notices(peer, slot_len, Kind::Written)?;
        // Rendezvous reads, oldest first, each admitted by the registration cache's bound.
        while let Some(&seq) = ep.to_read.front() {
            let inc = ep.incoming.get_mut(&seq).expect("queued incoming");
            if inc.buf.is_none() {
                if *receiving > 0 && !cache.admits(inc.rts.len as usize) {
                    break;
                }
                let pd = w.port().pd.clone();
                inc.buf = Some(cache.take(inc.rts.len as usize, |n| {
                    MemoryRegion::alloc(&pd, n, Access::ALL)
                })?);
                *receiving += 1;
            }
            if inc.head > 0 && !inc.cts_sent {
                // Write or split protocol: name the landing region of the head; the sender
                // writes it (first, so that it starts while we read the rest).
                let buf = inc.buf.as_ref().expect("taken");
                let mut p = [0u8; RTS_LEN];
                Rts {
                    addr: buf.addr(),
                    rkey: buf.rkey(),
                    len: inc.head,
                }
                .write(&mut p);
                let kind = if inc.head == inc.rts.len {
                    Kind::Cts
                } else {
                    Kind::CtsHead
                };
                if ep.credits.data == 0 || ep.free_send.is_empty() || !ep.sq_room() {
                    break;
                }
                ep.post_msg(peer, slot_len, kind, 0, seq, &p, 0)?;
                tracing::trace!(peer, seq, ?kind, "rendezvous CTS posted");
                let inc = ep.incoming.get_mut(&seq).expect("queued incoming");
                inc.cts_sent = true;
                if inc.head == inc.rts.len {
                    ep.to_read.pop_front();
                    continue;
                }
            }
            while ep.sq_room() {
                let inc = ep.incoming.get_mut(&seq).expect("queued incoming");
                if inc.next >= inc.rts.len {
                    break;
                }
                let (off, len) = fragments(inc.rts.len - inc.next, fragment)
                    .next()
                    .map(|(o, l)| (o + inc.next, l))
                    .expect("bytes left");
                let sge = inc
                    .buf
                    .as_ref()
                    .expect("taken")
                    .sge(off as usize, len as usize)?;
                inc.next = off + len;
                inc.reading += 1;
                let op = SendOp::RdmaRead {
                    remote_addr: inc.rts.addr + off,
                    rkey: inc.rts.rkey,
                };
                ep.post_rdma(peer, op, sge, Posted::Read { seq })?;
                tracing::trace!(peer, seq, off, len, "rendezvous read posted");
            }
            let inc = ep.incoming.get(&seq).expect("queued incoming");
            if inc.next < inc.rts.len {
                break; // the send queue is full: continue on the next completion
            }
            ep.to_read.pop_front();
        }
        if ep.to_read.is_empty() {
            if !reading_peers.is_empty() {
                reading_peers.remove(&peer);
            }
        } else {
            reading_peers.insert(peer);
        }
        // Rendezvous writes into the landing regions the peer named, oldest first; once all of
        // one are posted, its WRITTEN notice.
        while let Some(&seq) = ep.to_write.front() {
            while ep.sq_room() {
                let o = ep.outgoing.get_mut(&seq).expect("a CTS'd rendezvous");
                let cts = o.cts.expect("CTS received");
                if o.next >= cts.len {
                    break;
                }
                let (off, len) = fragments(cts.len - o.next, fragment)
                    .next()
                    .map(|(f, l)| (f + o.next, l))
                    .expect("bytes left");
                let sge = o.src.sge(off as usize, len as usize)?;
                o.next = off + len;
                o.writing += 1;
                let op = SendOp::RdmaWrite {
                    remote_addr: cts.addr + off,
                    rkey: cts.rkey,
                };
                ep.post_rdma(peer, op, sge, Posted::Write { seq })?;
                // On rxe with a user QP the post runs the whole transfer before it returns.
                tracing::trace!(peer, seq, off, len, "rendezvous write posted");
            }
            let o = &ep.outgoing[&seq];
            if o.cts.is_some_and(|c| o.next < c.len) {
                break; // the send queue is full: continue on the next completion
            }
            ep.to_write.pop_front();
            ep.written.push_back(seq);
        }
        ep.post_notices(peer, slot_len, Kind::Written)?;
        // User operations in call order.
        let sizes = (slot_len, train_piece(self.cfg.eager_limit));
        while let Some(op) = ep.pending.front() {
            if !ep.sq_room() {
                break;
            }
            let needs_msg = matches!(op, Op::Eager { .. } | Op::Train { .. } | Op::Rts { .. });
            if needs_msg && (ep.credits.data == 0 || ep.free_send.is_empty()) {
                ep.stats.credit_stalls += u64::from(ep.credits.data == 0);
                break;
            }
            match ep.pending.pop_front().expect("checked") {
                Op::Eager {
                    tag,
                    seq,
                    data,
                    token,
                } => {
                    ep.post_msg(peer, slot_len, Kind::Eager, tag, seq, &data, token)?;
                    ep.stats.eager_sent += 1;
                }
                Op::Train {
                    tag,
                    seq,
                    data,
                    mut off,
                    token,
                } => {
                    // Posted piece by piece; the rest stays first in line.
                    if !ep.post_train(peer, sizes, tag, seq, &data, &mut off, token)? {
                        ep.pending.push_front(Op::Train {
                            tag,
                            seq,
                            data,
                            off,
                            token,
                        });
                        break;
                    }
                }
                Op::Rts {
                    tag,
                    seq,
                    src,
                    len,
                    token,
                } => {
                    let mut p = [0u8; RTS_LEN];
                    src.rts(len).write(&mut p);
                    ep.post_msg(peer, slot_len, Kind::Rts, tag, seq, &p, 0)?;
                    tracing::trace!(peer, seq, len, "rendezvous RTS posted");
                    ep.outgoing.insert(
                        seq,
                        Outgoing {
                            src,
                            len,
                            token,
                            cts: None,
                            next: 0,
                            writing: 0,
                            fin_seen: false,
                        },
                    );
                    ep.stats.rndv_sent += 1;
                }
                op @ (Op::Rdma { .. } | Op::Atomic { .. }) => ep.post_one_sided(peer, op)?,
            }
        }
        // Return credits with a control message when they pile up and nothing else carries them.
        let carrier = ep.pending.front().is_some_and(|op| {
            matches!(op, Op::Eager { .. } | Op::Train { .. } | Op::Rts { .. })
                && ep.credits.data > 0
        });
        if !carrier
            && ep.credits.credit_message_due()
            && !ep.free_send.is_empty()
            && ep.posted.len() < MAX_QUEUE as usize
        {
            ep.post_msg(peer, slot_len, Kind::Credit, 0, 0, &[], 0)?;
        }
        Ok(())
    }
}

impl Endpoint {
    /// Posts a put, get or atomic ([`Op::Rdma`], [`Op::Atomic`]; no credit needed) on the send
    /// queue now; the caller checked [`Endpoint::sq_room`]. Other operations: a bug.
    pub(super) fn post_one_sided(&mut self, peer: u32, op: Op) -> Result<(), TransportError> {
        match op {
            Op::Rdma {
                write,
                local,
                offset,
                remote_addr,
                rkey,
                len,
                token,
            } => {
                let op = if write {
                    SendOp::RdmaWrite { remote_addr, rkey }
                } else {
                    SendOp::RdmaRead { remote_addr, rkey }
                };
                let sge = local.sge(offset, len)?;
                self.post_rdma(
                    peer,
                    op,
                    sge,
                    Posted::Rdma {
                        _local: local,
                        token,
                    },
                )?;
            }
            Op::Atomic {
                op,
                local,
                offset,
                remote_addr,
                rkey,
                token,
            } => {
                let op = match op {
                    AtomicOp::FetchAdd { add } => SendOp::FetchAdd {
                        remote_addr,
                        rkey,
                        add,
                    },
                    AtomicOp::CompareSwap { compare, swap } => SendOp::CompareSwap {
                        remote_addr,
                        rkey,
                        compare,
                        swap,
                    },
                };
                let sge = local.sge(offset, 8)?;
                self.post_rdma(
                    peer,
                    op,
                    sge,
                    Posted::Atomic {
                        _local: local,
                        token,
                    },
                )?;
            }
            _ => unreachable!("post_one_sided of a message"),
        }
        Ok(())
    }
}
