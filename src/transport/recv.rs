//! The receive side: a receive completion checked against the endpoint ([`EndpointBook`],
//! [`peer::receive`]) and dispatched by kind, messages delivered to their callbacks in order,
//! and receive buffers posted again.

use super::endpoint::release_outgoing;
use super::endpoint::{EndpointState, Ready, KIND_SRQ};
use super::error::{FailureCause, TransportError};
use super::flow::{Credits, Reorder};
use super::handlers::Callback;
use super::peer::{PeerError, PeerLimits, RecvBook, Step};
use super::rendezvous::{Incoming, Outgoing};
use super::wire::HDR;
use super::{peer, srq, IdMap, Transport};
use openib_sys::MemoryRegion;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The largest copy of a rendezvous payload kept for the next one (a larger one is freed once
/// delivered).
const LANDED_KEPT: usize = 4 << 20;

/// What the checks of a received message ([`peer::receive`]) need of an endpoint: borrowed
/// field by field, so the message's bytes can stay borrowed from its receive buffer.
pub(super) struct EndpointBook<'a> {
    pub(super) credits: &'a mut Credits,
    pub(super) reorder: &'a Reorder<Ready>,
    pub(super) outgoing: &'a IdMap<Outgoing>,
    pub(super) incoming: &'a IdMap<Incoming>,
}

impl RecvBook for EndpointBook<'_> {
    fn credits(&mut self) -> &mut Credits {
        self.credits
    }
    fn next_arrival(&self) -> u32 {
        self.reorder.next_arrival()
    }
    fn sending(&self, seq: u32) -> Option<peer::Sending> {
        self.outgoing.get(&seq).map(|o| {
            let p = o.progress();
            peer::Sending {
                len: p.len,
                cts: o.cts.is_some(),
                fin_seen: o.fin_seen,
                fin_due: p.fin_due(),
            }
        })
    }
    fn receiving(&self, seq: u32) -> Option<peer::Receiving> {
        self.incoming.get(&seq).map(|i| peer::Receiving {
            head: i.head,
            cts_sent: i.cts_sent,
            written: i.written,
        })
    }
}

/// A message to hand to its callback once the bookkeeping of its receive is done, so that the
/// callback may call the transport ([`super::TransportHandler`]).
pub(super) enum Delivery {
    Nothing,
    /// In order with nothing held: the callback reads the receive buffer itself (`len` bytes
    /// at `off` of `mr`), which is posted again only after the callback returned.
    InPlace {
        tag: u8,
        mr: Arc<MemoryRegion>,
        off: usize,
        len: usize,
    },
    /// A finished train, in order.
    Train {
        tag: u8,
        data: Vec<u8>,
    },
    /// A rendezvous completed: the messages that are next in order ([`Transport::deliver_ready`]).
    Ready,
}

impl Transport {
    /// Runs the callback of `tag` on a message of `peer`. A [`super::TransportHandler`] is
    /// taken out of the table and given the transport; nothing of the transport may be
    /// borrowed across this call, and whatever the callback did (sent, failed or removed
    /// endpoints) is looked up afresh afterwards.
    pub(super) fn call_handler(&mut self, peer: u32, tag: u8, data: &[u8]) {
        if !self.handlers.wants_transport(tag) {
            self.handlers.call(peer, tag, data);
            return;
        }
        let Some(cb) = self.handlers.take_callback(tag) else {
            return;
        };
        let Callback::WithTransport(mut h) = cb else {
            unreachable!("checked: a transport callback")
        };
        self.callback_depth += 1;
        // AssertUnwindSafe: as for plain callbacks (Handlers::call); a panic inside the
        // transport's own code called from the callback is a bug either way.
        let r = catch_unwind(AssertUnwindSafe(|| h(self, peer, data)));
        self.callback_depth -= 1;
        if let Err(payload) = r {
            self.handlers.caught(peer, tag, payload);
        }
        self.handlers.put_back(tag, Callback::WithTransport(h));
    }

    /// Hands a received message to its callback.
    pub(super) fn deliver(&mut self, peer: u32, d: Delivery) {
        match d {
            Delivery::Nothing => {}
            Delivery::InPlace { tag, mr, off, len } => match mr.local_slice(off, len) {
                Ok(data) => self.call_handler(peer, tag, data),
                Err(e) => tracing::error!(peer, tag, error = %e, "message not delivered"),
            },
            Delivery::Train { tag, data } => {
                self.call_handler(peer, tag, &data);
                if let Some(ep) = self.eps.get_mut(&peer) {
                    ep.trains.recycle(data);
                }
            }
            Delivery::Ready => self.deliver_ready(peer),
        }
    }

    /// Runs the callbacks of every message of `peer` that is next in order.
    pub(super) fn deliver_ready(&mut self, peer: u32) {
        // The endpoint is looked up for every message: a callback may fail or remove it.
        while let Some(ep) = self.eps.get_mut(&peer) {
            let Some(r) = ep.reorder.pop() else {
                return;
            };
            ep.stats.delivered += 1;
            match r {
                Ready::Eager { tag, data } => self.call_handler(peer, tag, &data),
                Ready::Rndv { seq } => {
                    let inc = ep.incoming.remove(&seq).expect("completed incoming");
                    let buf = inc.buf.expect("read into a buffer");
                    // Copied out of the landing buffer before the callback sees it: peers that
                    // held its rkey (this or an earlier transfer) may still write it, and a
                    // callback's `&[u8]` must not change under it (docs/DESIGN.md, soundness).
                    let len = inc.rts.len as usize;
                    let mut landed = std::mem::take(&mut self.landed);
                    landed.resize(len, 0);
                    let copied = buf.read_at(0, &mut landed[..len]);
                    self.cache.give_back(buf);
                    self.receiving -= 1;
                    if inc.head < inc.rts.len {
                        ep.fins.push_back(seq);
                    }
                    match copied {
                        Ok(()) => self.call_handler(peer, inc.tag, &landed[..len]),
                        Err(e) => {
                            tracing::error!(peer, seq, error = %e, "rendezvous not delivered")
                        }
                    }
                    if landed.capacity() <= LANDED_KEPT {
                        self.landed = landed;
                    }
                }
            }
        }
    }

    /// Handles a received message in buffer `id` (a slot of the endpoint's own buffers, or of
    /// the shared receive queue with `kind` [`KIND_SRQ`]): checks it, runs its callback, then
    /// reposts the buffer and counts the credit it returns. A buffer of the SRQ is reposted
    /// whatever became of its sender, and whatever the message was: the other peers' credits
    /// count on it.
    pub(super) fn on_recv(
        &mut self,
        peer: u32,
        kind: u64,
        id: u32,
        len: usize,
        imm: Option<u32>,
    ) -> Result<(), TransportError> {
        let mut reposted = false;
        let delivery = match self.handle_recv(peer, kind, id, len, imm, &mut reposted) {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(()),
            Err(e) => {
                if kind == KIND_SRQ && !reposted {
                    if let Some(Err(e)) = self.srq.as_mut().map(|s| s.repost(id)) {
                        tracing::warn!(error = %e, "SRQ buffer not reposted");
                    }
                }
                return Err(e);
            }
        };
        // The callback runs with nothing of the transport borrowed; the buffer it may read in
        // place goes back after it returned.
        self.deliver(peer, delivery);
        self.give_back_recv(peer, kind, id)
    }

    /// Gives back the receive buffer of a message handled by [`Transport::handle_recv`] (and
    /// delivered): an SRQ buffer is posted now and its credit counted; an endpoint's own
    /// buffers are posted in batches of [`super::flow::Credits::repost_batch`], at the start of
    /// the progress call after the one that filled a batch ([`Transport::repost_deferred`]). The endpoint is looked up afresh: the callback may
    /// have failed or removed it.
    fn give_back_recv(&mut self, peer: u32, kind: u64, id: u32) -> Result<(), TransportError> {
        let live = self
            .eps
            .get_mut(&peer)
            .filter(|ep| ep.state == EndpointState::Connected);
        if kind == KIND_SRQ {
            let s = self.srq.as_mut().expect("SRQ buffer");
            s.repost(id)?;
            if let Some(ep) = live {
                ep.credits.to_return += s.pool.on_repost(peer).credits();
            }
        } else if let Some(ep) = live {
            // Posted again in batches (one chain per batch), listed once per batch.
            ep.unposted.push((id, false));
            if ep.unposted.len() == ep.credits.repost_batch() {
                self.repost_peers.push(peer);
            }
        }
        Ok(())
    }

    /// [`Transport::on_recv`] up to the callback: checks the message and does its bookkeeping.
    /// `Some`: a message to deliver (or nothing) and a buffer still to give back; `None`: the
    /// buffer went back already (a credit-only message, or an endpoint no longer connected).
    /// `reposted`: an SRQ buffer was (or was tried to be) reposted.
    fn handle_recv(
        &mut self,
        peer: u32,
        kind: u64,
        id: u32,
        len: usize,
        imm: Option<u32>,
        reposted: &mut bool,
    ) -> Result<Option<Delivery>, TransportError> {
        let slot_len = HDR + self.cfg.eager_limit;
        let rndv = self.cfg.rndv;
        let limits = PeerLimits {
            max_msg: self.cfg.max_msg,
        };
        let mut delivery = Delivery::Nothing;
        let Transport {
            eps,
            srq,
            done,
            cache,
            ..
        } = self;
        let live = eps
            .get_mut(&peer)
            .filter(|ep| ep.state == EndpointState::Connected);
        let Some(ep) = live else {
            if kind == KIND_SRQ {
                *reposted = true;
                srq.as_mut().expect("SRQ buffer").repost(id)?;
            }
            return Ok(None);
        };
        let bad = |e: String| TransportError::EndpointFailed { peer, why: e };
        let (mr, off): (&Arc<MemoryRegion>, usize) = if kind == KIND_SRQ {
            let s = srq.as_mut().expect("SRQ buffer");
            let (_, slot) = srq::split(id);
            let chunk = s
                .chunk_of(id)
                .ok_or_else(|| bad(format!("receive buffer {id:#x} is not in the SRQ")))?;
            (chunk, slot as usize * slot_len)
        } else {
            let mr = ep.recv_mr.as_ref().expect("connected without an SRQ");
            (mr, id as usize * slot_len)
        };
        // A receive slot (local access only) whose receive completed: not written until it is
        // posted again, after this message is handled and delivered.
        let b = mr.local_slice(off, len.min(slot_len))?;
        // Every number the peer sent is checked here, before anything below uses it.
        let mut book = EndpointBook {
            credits: &mut ep.credits,
            reorder: &ep.reorder,
            outgoing: &ep.outgoing,
            incoming: &ep.incoming,
        };
        let step = peer::receive(&mut book, &limits, b, imm)
            .map_err(|error| TransportError::Peer { peer, error })?;
        let bad = |e: PeerError| TransportError::Peer { peer, error: e };
        let ctl = matches!(step, Step::Credit);
        match step {
            Step::Credit => {}
            Step::Fin { seq } => {
                let o = ep.outgoing.get_mut(&seq).expect("checked");
                o.fin_seen = true;
                if o.finished() {
                    release_outgoing(ep, peer, seq, cache, done);
                }
            }
            Step::Cts { seq, region } => {
                let o = ep.outgoing.get_mut(&seq).expect("checked");
                o.cts = Some(region);
                ep.to_write.push_back(seq);
                tracing::trace!(peer, seq, head = region.len, "rendezvous CTS received");
            }
            Step::Written { seq } => {
                let inc = ep.incoming.get_mut(&seq).expect("checked");
                inc.written = true;
                tracing::trace!(peer, seq, "rendezvous WRITTEN received");
                if inc.complete() {
                    ep.reorder
                        .complete(seq, Ready::Rndv { seq })
                        .map_err(|e| bad(e.into()))?;
                    delivery = Delivery::Ready;
                }
            }
            Step::Frag { seq, tag, piece } => {
                ep.trains
                    .fragment(seq, tag, piece)
                    .map_err(|e| bad(e.into()))?;
            }
            Step::Eager {
                seq,
                tag,
                data: payload,
            } if ep.trains.is_open() => {
                let data = ep
                    .trains
                    .finish(seq, tag, payload)
                    .map_err(|e| bad(e.into()))?
                    .expect("a train is open");
                if ep.reorder.pass(seq) {
                    ep.stats.delivered += 1;
                    delivery = Delivery::Train { tag, data };
                } else {
                    ep.reorder
                        .arrive(seq, Some(Ready::Eager { tag, data }))
                        .map_err(|e| bad(e.into()))?;
                }
            }
            Step::Eager {
                seq,
                tag,
                data: payload,
            } => {
                if ep.reorder.pass(seq) {
                    // In order with nothing held: the callback reads the receive buffer itself,
                    // which is reposted after it returns.
                    ep.stats.delivered += 1;
                    delivery = Delivery::InPlace {
                        tag,
                        mr: mr.clone(),
                        // The payload's place in the buffer (it follows the header).
                        off: off + (payload.as_ptr() as usize - b.as_ptr() as usize),
                        len: payload.len(),
                    };
                } else {
                    let data = payload.to_vec();
                    ep.reorder
                        .arrive(seq, Some(Ready::Eager { tag, data }))
                        .map_err(|e| bad(e.into()))?;
                }
            }
            Step::Rts { seq, tag, rts } => {
                ep.reorder.arrive(seq, None).map_err(|e| bad(e.into()))?;
                ep.incoming
                    .insert(seq, Incoming::new(tag, rts, rndv.head(rts.len)));
                ep.to_read.push_back(seq);
                tracing::trace!(peer, seq, len = rts.len, "rendezvous RTS received");
            }
        }
        if !ctl {
            return Ok(Some(delivery));
        }
        // A credit-only message: its buffer goes back now, so the control credit rides on the
        // very next header. Deferred like the others, the drain of this same progress call
        // could spend every data credit the message brought before the repost, and then
        // nothing would carry the control credit back: the peer, out of control credits, could
        // not return data credits, and both would wait forever (a one-way stream of small
        // messages with thousands queued did).
        if kind == KIND_SRQ {
            *reposted = true;
            srq.as_mut().expect("SRQ buffer").repost(id)?;
            ep.credits.reposted(true);
        } else {
            ep.repost_recv(id, true, slot_len)?;
        }
        Ok(None)
    }

    /// Posts the receive buffers whose messages the last progress call handled, returns
    /// their credits, and sends a credit-only message where one is due (a one-way stream
    /// returns credits this way).
    pub(super) fn repost_deferred(&mut self) {
        let slot_len = HDR + self.cfg.eager_limit;
        // Both lists keep their allocations: this runs after nearly every received message.
        let mut peers = std::mem::take(&mut self.repost_peers);
        for &peer in &peers {
            let Some(ep) = self.eps.get_mut(&peer) else {
                continue;
            };
            let mut bufs = std::mem::take(&mut ep.unposted);
            let posted = if ep.state != EndpointState::Connected {
                Ok(()) // its queue pair is gone or going: nothing to post to
            } else {
                ep.repost_recvs(&bufs, slot_len)
            };
            bufs.clear();
            ep.unposted = bufs;
            // Our reposts only matter to the peer: a credit-only message may be due now.
            let due = ep.state == EndpointState::Connected && ep.credits.credit_message_due();
            if let Err(e) = posted.and_then(|()| if due { self.drain(peer) } else { Ok(()) }) {
                self.fail(peer, FailureCause::local(e));
            }
        }
        peers.clear();
        // Nothing above receives, so nothing was added meanwhile.
        debug_assert!(self.repost_peers.is_empty());
        self.repost_peers = peers;
    }

    /// Gives the SRQ grants of stopped peers back to the pool once the receive completion
    /// queue was seen empty after they stopped: none of their messages is left to handle.
    pub(super) fn retire_srq_grants(&mut self) {
        let now = self.progress_calls;
        if let Some(srq) = &mut self.srq {
            let pool = &mut srq.pool;
            srq.retiring.retain(|&(peer, stopped)| {
                let done = stopped != now;
                if done {
                    pool.remove(peer);
                }
                !done
            });
        }
    }
}
