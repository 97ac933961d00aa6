//! One peer's endpoint: its queue pair and buffers, credits, sequence numbers, the send-queue
//! requests in flight ([`InFlight`], [`Posted`]), the port-wide send budget ([`SqBudget`]), the
//! posting of work requests, and the endpoint's counters.

use super::error::{Completion, TransportError};
use super::flow::{Credits, Reorder, TrainAssembly};
use super::op::Op;
use super::regcache::RegCache;
use super::rendezvous::{Incoming, Outgoing, Source};
use super::wire::{Header, ImmHeader, Kind, HDR};
use super::{IdMap, Tag, CTL_RESERVE, MAX_QUEUE};
use openib_cpc::Connection;
use openib_sys::Region;
use openib_sys::{MemoryRegion, SendOp, RECV_CHAIN};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an endpoint waits on its peer with nothing of its own in flight before it probes
/// the peer with an empty RDMA write (see [`Endpoint::probe_if_waiting`]).
pub(super) const PROBE_AFTER: Duration = Duration::from_secs(1);

/// When to probe a peer that an endpoint waits on with nothing of its own in flight
/// (sans-IO: fed whether it waits so and the time).
#[derive(Debug, Default)]
pub(super) struct BlindWait {
    /// When such a wait was first seen; `None`: there is none.
    since: Option<Instant>,
}

impl BlindWait {
    /// Whether to probe now: the endpoint `waits` blind and has for [`PROBE_AFTER`] since a
    /// call first saw it so. A call that sees no such wait starts it over.
    pub(super) fn due(&mut self, waits: bool, now: Instant) -> bool {
        if !waits {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.saturating_duration_since(since) >= PROBE_AFTER
    }

    /// A probe went out: the next one after another [`PROBE_AFTER`] of waiting.
    pub(super) fn probed(&mut self) {
        self.since = None;
    }
}

/// Send-queue entries kept free for credit returns and FINs.
const SQ_RESERVE: usize = 4;

/// The piece [`copy_in_pieces`] copies at a time.
const COPY_PIECE: usize = 4096;

/// Copies `src` into `dst` (of the same length) 4 KiB at a time. glibc copies a buffer at or
/// above its `rep movsb` threshold (8 KiB in the TCG guest) with `rep movsb`, which TCG runs at
/// about 0.2 GB/s; 4 KiB pieces go through its vector loop at 1.9-2.2 GB/s there. Natively
/// both run at the same speed within the noise (docs/PERFORMANCE.md).
fn copy_in_pieces(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    for (d, s) in dst.chunks_mut(COPY_PIECE).zip(src.chunks(COPY_PIECE)) {
        d.copy_from_slice(s);
    }
}

pub(super) const KIND_RECV: u64 = 1;

pub(super) const KIND_SQ: u64 = 2;

/// A receive buffer of the shared receive queue (id: chunk and slot, [`srq::split`]).
pub(super) const KIND_SRQ: u64 = 3;

/// Peer field of receives posted before the connection is known (resolved by QP number).
pub(super) const ANY_PEER: u32 = u32::MAX;

/// Send requests in flight on every endpoint of the port, against the shared send completion
/// queue: user work (messages, reads, puts, atomics) is posted only while the total stays
/// below `limit`, which leaves each connected endpoint its control reserve and one full send
/// queue of flush completions, so the completion queue cannot overflow however many peers
/// are busy. Shared by the endpoints (one process; relaxed atomics only because the transport
/// must be `Send`).
#[derive(Debug)]
pub(super) struct SqBudget {
    /// Send requests posted and not yet retired, signaled or not: each may still come back as
    /// a completion (an unsignaled one as a flush when its QP fails).
    pub(super) in_flight: AtomicUsize,
    /// Those of them that were signaled: completions that will come (what makes polling the
    /// send queues worth it).
    pub(super) signaled: AtomicUsize,
    pub(super) limit: AtomicUsize,
    /// An endpoint found no room: every endpoint with work is drained on the next progress.
    pub(super) hit: AtomicBool,
    /// Times an endpoint found no room.
    pub(super) stalls: AtomicUsize,
}

impl SqBudget {
    pub(super) fn new(cq_depth: u32) -> SqBudget {
        let b = SqBudget {
            in_flight: AtomicUsize::new(0),
            signaled: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            hit: AtomicBool::new(false),
            stalls: AtomicUsize::new(0),
        };
        b.set_connected(cq_depth, 0);
        b
    }

    /// The limit for `connected` endpoints on a completion queue of `cq_depth` entries: room
    /// for every endpoint's control reserve and for the flush completions of a failing
    /// endpoint (up to a send queue, at most a quarter of the queue), and never zero.
    pub(super) fn set_connected(&self, cq_depth: u32, connected: usize) {
        let cq = cq_depth as usize;
        let reserved = (connected + 1) * SQ_RESERVE + (MAX_QUEUE as usize).min(cq / 4);
        self.limit
            .store(cq.saturating_sub(reserved).max(1), Ordering::Relaxed);
    }

    fn room(&self) -> bool {
        let ok = self.in_flight.load(Ordering::Relaxed) < self.limit.load(Ordering::Relaxed);
        if !ok {
            self.hit.store(true, Ordering::Relaxed);
            self.stalls.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Whether an unsignaled request may be posted: those in flight hold at most half the
    /// limit, since one is retired only by a later signaled request of its own queue pair,
    /// which a peer that is no longer sent to may never see.
    fn unsignaled_room(&self) -> bool {
        let unsignaled = self
            .in_flight
            .load(Ordering::Relaxed)
            .saturating_sub(self.signaled.load(Ordering::Relaxed));
        unsignaled < self.limit.load(Ordering::Relaxed) / 2
    }

    pub(super) fn posted(&self, signaled: bool) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if signaled {
            self.signaled.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `n` requests retired, `signaled` of them signaled.
    pub(super) fn done(&self, n: usize, signaled: usize) {
        self.in_flight.fetch_sub(n, Ordering::Relaxed);
        self.signaled.fetch_sub(signaled, Ordering::Relaxed);
    }
}

pub(super) fn wr(peer: u32, kind: u64, id: u32) -> u64 {
    (peer as u64) << 32 | kind << 24 | (id & 0xff_ffff) as u64
}

pub(super) fn unwr(id: u64) -> (u32, u64, u32) {
    (
        (id >> 32) as u32,
        (id >> 24) & 0xff,
        (id & 0xff_ffff) as u32,
    )
}

/// A posted send-queue request, by its id.
pub(super) enum Posted {
    /// A message in bounce slot `slot` (token 0: the transport's own).
    Msg { slot: usize, token: u64 },
    /// An inline message posted from the caller's bytes, without a bounce slot, that asked
    /// for a completion (a token, or its turn to retire the unsignaled ones before it).
    Inline { token: u64 },
    /// An inline message without a token (`sendi`, a notice, a credit return; `ctl`: a
    /// credit return) posted without a completion of its own, its slot free again at once:
    /// retired by the next signaled request's completion, which an RC send queue reports only
    /// after every earlier one.
    Unsignaled { ctl: bool },
    /// An empty RDMA write (IBTA C9-88: no address or key needed) posted signaled to retire the
    /// unsignaled messages before it when no other request would.
    Close,
    /// The empty write of [`Endpoint::probe_if_waiting`]: its failure is the peer's.
    Probe,
    /// A put or get; holds the local region until it completes.
    Rdma {
        _local: super::op::LocalRegion,
        token: u64,
    },
    /// An atomic; likewise.
    Atomic {
        _local: super::op::LocalRegion,
        token: u64,
    },
    /// A fragment of the rendezvous read of message `seq`.
    Read { seq: u32 },
    /// A fragment of our rendezvous write of message `seq` (the peer sent a CTS).
    Write { seq: u32 },
}

/// The send-queue requests of one queue pair in flight, in posting order. An RC queue pair
/// completes its send queue in order, so a completion is nearly always the oldest entry
/// (found in a few instructions, where a hash map costs a hash and a probe on every message);
/// anything else is looked up from the front.
#[derive(Default)]
pub(super) struct InFlight {
    pub(super) queue: VecDeque<(u32, Posted)>,
    /// Entries that are [`Posted::Unsignaled`] credit returns: nothing waits for them.
    unsignaled_ctl: usize,
    /// Entries that are [`Posted::Unsignaled`] messages (`flush` waits for them).
    unsignaled_msg: usize,
}

impl InFlight {
    pub(super) fn insert(&mut self, id: u32, p: Posted) {
        match p {
            Posted::Unsignaled { ctl: true } => self.unsignaled_ctl += 1,
            Posted::Unsignaled { ctl: false } => self.unsignaled_msg += 1,
            _ => {}
        }
        self.queue.push_back((id, p));
    }

    pub(super) fn remove(&mut self, id: u32) -> Option<Posted> {
        let p = if self.queue.front().is_some_and(|(i, _)| *i == id) {
            self.queue.pop_front().map(|(_, p)| p)
        } else {
            let at = self.queue.iter().position(|(i, _)| *i == id)?;
            self.queue.remove(at).map(|(_, p)| p)
        };
        match p {
            Some(Posted::Unsignaled { ctl: true }) => self.unsignaled_ctl -= 1,
            Some(Posted::Unsignaled { ctl: false }) => self.unsignaled_msg -= 1,
            _ => {}
        }
        p
    }

    /// Retires the unsignaled messages posted before request `id`, whose completion (or first
    /// failure) came: they completed. Returns how many.
    pub(super) fn retire_unsignaled_before(&mut self, id: u32) -> usize {
        let mut n = 0;
        while let Some(&(i, Posted::Unsignaled { ctl })) = self.queue.front() {
            if i == id {
                break;
            }
            if ctl {
                self.unsignaled_ctl -= 1;
            } else {
                self.unsignaled_msg -= 1;
            }
            self.queue.pop_front();
            n += 1;
        }
        n
    }

    /// Whether `flush` must post a request to learn that unsignaled messages completed: one
    /// of them is the newest request, so nothing posted after it will say so.
    pub(super) fn open_tail(&self) -> bool {
        self.unsignaled_msg > 0 && matches!(self.queue.back(), Some((_, Posted::Unsignaled { .. })))
    }

    /// Requests whose completion someone waits for: all but unsignaled credit returns.
    fn awaited(&self) -> usize {
        self.queue.len() - self.unsignaled_ctl
    }

    /// How many requests are signaled (those whose completions will come).
    pub(super) fn signaled(&self) -> usize {
        self.queue.len() - self.unsignaled_ctl - self.unsignaled_msg
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn drain(&mut self) -> impl Iterator<Item = (u32, Posted)> + '_ {
        self.unsignaled_ctl = 0;
        self.unsignaled_msg = 0;
        self.queue.drain(..)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointState {
    Idle,
    Connecting,
    Connected,
    Failed(String),
}

pub(super) struct Endpoint {
    pub(super) state: EndpointState,
    // Field order is drop order: the queue pair goes before the memory its requests name.
    pub(super) conn: Option<Connection>,
    /// Shared with a message being delivered in place, so its bytes outlive the endpoint
    /// when the callback's own calls fail it (see `recv::Delivery`).
    pub(super) recv_mr: Option<Arc<MemoryRegion>>,
    pub(super) send_mr: Option<MemoryRegion>,
    pub(super) free_send: Vec<usize>,
    pub(super) credits: Credits,
    /// The sequence number of our next message to the peer; wraps (see [`Reorder`]).
    pub(super) next_seq: u32,
    pub(super) posted: InFlight,
    pub(super) next_id: u32,
    pub(super) pending: VecDeque<Op>,
    /// FINs to send (sequence numbers of finished incoming rendezvous).
    pub(super) fins: VecDeque<u32>,
    /// Our rendezvous sends in progress, by sequence (looked up by equality only: fewer than
    /// 2^32 are in flight, so a wrapped number names one).
    pub(super) outgoing: IdMap<Outgoing>,
    pub(super) incoming: IdMap<Incoming>,
    /// Incoming rendezvous with fragments left to post (or a CTS to send), in arrival order.
    pub(super) to_read: VecDeque<u32>,
    /// Our rendezvous sends with a CTS and writes left to post, in CTS order.
    pub(super) to_write: VecDeque<u32>,
    /// WRITTEN notices to send (sequences whose writes are all posted).
    pub(super) written: VecDeque<u32>,
    pub(super) reorder: Reorder<Ready>,
    /// The train being received, if one is.
    pub(super) trains: TrainAssembly,
    /// Receive buffers (id, whether a control message used it) whose messages were handled
    /// and which wait to be posted again: at the start of the next progress call, so a
    /// reply the callback's caller sends goes first. Their credits return once posted.
    pub(super) unposted: Vec<(u32, bool)>,
    pub(super) stats: EndpointStats,
    pub(super) sq_budget: Arc<SqBudget>,
    /// Largest message (header included) sent inline: what the QP granted.
    pub(super) inline_max: usize,
    /// The sequence number whose immediate header this endpoint misnumbers
    /// (`OPENIB_FAULT=lie-seq`); `None`: none (every `u32` is a valid sequence number). Only
    /// in a build with fault injection.
    #[cfg(feature = "fault-injection")]
    pub(super) lie_at_seq: Option<u32>,
    /// At least one send request in this many is signaled (`OPENIB_SIGNAL_EVERY`; 1: all).
    pub(super) signal_every: u32,
    /// Unsignaled messages posted since the last signaled request.
    pub(super) unsignaled_run: u32,
    /// When the endpoint probes the peer it waits on with nothing of its own in flight
    /// ([`Endpoint::probe_if_waiting`]).
    pub(super) blind: BlindWait,
}

/// The shared receive queue's state (see [`pool::CreditPool`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SrqStats {
    /// Buffers posted in the SRQ.
    pub buffers: u32,
    /// Buffers the credit pool counts (at most `buffers`).
    pub counted: u32,
    /// Buffers promised to peers.
    pub granted: u32,
    /// Reserve buffers not lent.
    pub free: u32,
    /// Connected peers holding a grant.
    pub peers: u32,
}

/// See [`Transport::send_budget`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SendBudget {
    pub in_flight: usize,
    pub limit: usize,
    pub stalls: u64,
}

/// Per-endpoint counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EndpointStats {
    pub eager_sent: u64,
    /// Messages sent as trains of eager pieces (not counted in `eager_sent`).
    pub trains_sent: u64,
    pub rndv_sent: u64,
    pub delivered: u64,
    pub credit_messages: u64,
    /// Times a message waited for credits.
    pub credit_stalls: u64,
    /// Send requests posted without a completion of their own (`OPENIB_SIGNAL_EVERY`).
    pub unsignaled: u64,
    /// Empty writes that `flush` posted to learn that unsignaled messages completed (nothing
    /// posted after them would have said so).
    pub tails_closed: u64,
    /// Empty writes posted to a peer this endpoint waited on with nothing in flight
    /// ([`Endpoint::probe_if_waiting`]).
    pub probes: u64,
    /// The sequence number our next message to the peer takes (it wraps from 2^32 - 1 to 0).
    pub next_seq: u32,
    /// The sequence number the peer's next message must carry.
    pub next_peer_seq: u32,
}

impl Endpoint {
    pub(super) fn new(sq_budget: Arc<SqBudget>, signal_every: u32, seq_start: u32) -> Endpoint {
        Endpoint {
            state: EndpointState::Idle,
            conn: None,
            recv_mr: None,
            send_mr: None,
            free_send: Vec::new(),
            credits: Credits::new(CTL_RESERVE + 1, CTL_RESERVE),
            next_seq: seq_start,
            posted: InFlight::default(),
            next_id: 0,
            pending: VecDeque::new(),
            fins: VecDeque::new(),
            outgoing: IdMap::default(),
            incoming: IdMap::default(),
            to_read: VecDeque::new(),
            to_write: VecDeque::new(),
            written: VecDeque::new(),
            reorder: Reorder::starting_at(seq_start),
            trains: TrainAssembly::default(),
            unposted: Vec::new(),
            stats: EndpointStats::default(),
            sq_budget,
            inline_max: 0,
            #[cfg(feature = "fault-injection")]
            lie_at_seq: None,
            signal_every,
            unsignaled_run: 0,
            blind: BlindWait::default(),
        }
    }

    pub(super) fn busy(&self) -> bool {
        self.posted.awaited() > 0 || self.busy_but_tail()
    }

    /// [`Endpoint::busy`], except for unsignaled messages after the last request that reports
    /// a completion (the open tail: nobody waits for their completion).
    pub(super) fn busy_but_tail(&self) -> bool {
        !self.pending.is_empty()
            || self.posted.signaled() > 0
            || !self.outgoing.is_empty()
            || !self.incoming.is_empty()
            || !self.fins.is_empty()
            || !self.written.is_empty()
    }

    /// The sequence number of the next message to this peer.
    pub(super) fn take_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        seq
    }

    /// Posts an eager message now, in order (the caller checked [`Endpoint::why_not_now`]).
    pub(super) fn post_eager_now(
        &mut self,
        peer: u32,
        slot_len: usize,
        tag: Tag,
        data: &[u8],
        token: u64,
    ) -> Result<(), TransportError> {
        let seq = self.take_seq();
        self.post_msg(peer, slot_len, Kind::Eager, tag, seq, data, token)?;
        self.stats.eager_sent += 1;
        Ok(())
    }

    /// Posts the pieces of train `seq` from `data[*off..]` (`piece` bytes each, the last one
    /// as `EAGER` with `token`) while a credit, a send slot and send-queue room allow; returns
    /// whether the whole train is posted. The caller keeps it first in line until it is.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_train(
        &mut self,
        peer: u32,
        (slot_len, piece): (usize, usize),
        tag: Tag,
        seq: u32,
        data: &[u8],
        off: &mut usize,
        token: u64,
    ) -> Result<bool, TransportError> {
        while *off < data.len() {
            if self.credits.data == 0 || self.free_send.is_empty() || !self.sq_room() {
                self.stats.credit_stalls += u64::from(self.credits.data == 0);
                return Ok(false);
            }
            let end = (*off + piece).min(data.len());
            let (kind, token) = if end == data.len() {
                (Kind::Eager, token)
            } else {
                (Kind::Frag, 0)
            };
            self.post_msg(peer, slot_len, kind, tag, seq, &data[*off..end], token)?;
            *off = end;
        }
        self.stats.trains_sent += 1;
        Ok(true)
    }

    /// Why an eager message cannot be posted at once (None: it can).
    pub(super) fn why_not_now(&self) -> Option<&'static str> {
        if self.state != EndpointState::Connected {
            Some("not connected yet")
        } else if !self.pending.is_empty() {
            Some("earlier operations are queued")
        } else if self.credits.data == 0 {
            Some("no credit")
        } else if self.free_send.is_empty() || !self.sq_room() {
            Some("send queue full")
        } else {
            None
        }
    }

    /// Room for user work on the send queue (and in the shared send completion queue).
    pub(super) fn sq_room(&self) -> bool {
        self.posted.len() + SQ_RESERVE < MAX_QUEUE as usize && self.sq_budget.room()
    }

    /// Posts receive buffer `id` (of the endpoint's own buffers, `slot_len` bytes each) again
    /// and counts the credit it returns (`ctl`: a control credit).
    pub(super) fn repost_recv(
        &mut self,
        id: u32,
        ctl: bool,
        slot_len: usize,
    ) -> Result<(), TransportError> {
        let conn = self.conn.as_ref().expect("connected");
        let mr = self.recv_mr.as_ref().expect("connected without an SRQ");
        let sge = mr.sge(id as usize * slot_len, slot_len)?;
        conn.qp.post_recv_sge(wr(ANY_PEER, KIND_RECV, id), &sge)?;
        self.credits.reposted(ctl);
        Ok(())
    }

    /// Posts receive buffers `bufs` (`(id, ctl)` as for [`Endpoint::repost_recv`]) again as
    /// chains, and counts the credits they return (those of the chains posted, on an error).
    pub(super) fn repost_recvs(
        &mut self,
        bufs: &[(u32, bool)],
        slot_len: usize,
    ) -> Result<(), TransportError> {
        let conn = self.conn.as_ref().expect("connected");
        let mr = self.recv_mr.as_ref().expect("connected without an SRQ");
        // Each chain's requests on the stack: this runs every few received messages, and a
        // collected vector cost an allocation, two regrowths and a free per batch.
        for chunk in bufs.chunks(RECV_CHAIN) {
            let sge = |id: u32| mr.sge(id as usize * slot_len, slot_len);
            let mut reqs = [(0, sge(chunk[0].0)?); RECV_CHAIN];
            for (slot, &(id, _)) in reqs.iter_mut().zip(chunk) {
                *slot = (wr(ANY_PEER, KIND_RECV, id), sge(id)?);
            }
            conn.qp.post_recv_sges(&reqs[..chunk.len()])?;
            for &(_, ctl) in chunk {
                self.credits.reposted(ctl);
            }
        }
        Ok(())
    }

    pub(super) fn id(&mut self) -> u32 {
        self.next_id = (self.next_id + 1) & 0xff_ffff;
        self.next_id
    }

    /// Posts one message through a bounce slot. The caller checked the credit and the slot.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_msg(
        &mut self,
        peer: u32,
        slot_len: usize,
        kind: Kind,
        tag: Tag,
        seq: u32,
        payload: &[u8],
        token: u64,
    ) -> Result<(), TransportError> {
        // An eager message carries its header in the immediate data when the returns fit.
        let imm = match kind {
            Kind::Eager if !payload.is_empty() => {
                // OPENIB_FAULT=lie-seq: one wrong sequence byte, for the peer's check to catch.
                #[cfg(feature = "fault-injection")]
                let seq = seq ^ u32::from(Some(seq) == self.lie_at_seq);
                ImmHeader::fitting(tag, self.credits.to_return, self.credits.ctl_to_return, seq)
            }
            _ => None,
        };
        let (credits, ctl) = self.credits.take_returns();
        if let Some(h) = imm.filter(|_| payload.len() <= self.inline_max) {
            // Header in the immediate data, payload inline: posted from the caller's bytes,
            // no bounce slot and no copy of our own.
            return self.post_inline(peer, h, payload, token);
        }
        let slot = self.free_send.pop().expect("caller checked a free slot");
        let mr = self.send_mr.as_mut().expect("connected");
        // A send slot: local access only, and no send of it is in flight (the slot was free).
        let b = mr.local_slice_mut(slot * slot_len, HDR + payload.len())?;
        copy_in_pieces(&mut b[HDR..], payload);
        let (op, start) = match imm {
            Some(h) => (SendOp::SendWithImm { imm: h.encode() }, HDR),
            None => {
                Header {
                    tag,
                    kind,
                    credits,
                    ctl,
                    length: payload.len() as u16,
                    seq,
                }
                .write(b);
                (SendOp::Send, 0)
            }
        };
        let len = HDR + payload.len() - start;
        let sge = mr.sge(slot * slot_len + start, len)?;
        let id = self.id();
        let inline = len <= self.inline_max;
        let signaled = self.signal_due(inline, token);
        self.conn.as_ref().expect("connected").qp.post_send_sge(
            wr(peer, KIND_SQ, id),
            op,
            &sge,
            signaled,
            inline,
        )?;
        if kind == Kind::Credit {
            self.credits.ctl -= 1;
            self.stats.credit_messages += 1;
        } else {
            self.credits.data -= 1;
        }
        if signaled {
            self.unsignaled_run = 0;
            self.posted.insert(id, Posted::Msg { slot, token });
        } else {
            // The payload is in the work request: the slot is free again.
            self.free_send.push(slot);
            self.unsignaled_run += 1;
            self.stats.unsignaled += 1;
            let ctl = kind == Kind::Credit;
            self.posted.insert(id, Posted::Unsignaled { ctl });
        }
        self.sq_budget.posted(signaled);
        Ok(())
    }

    /// Whether a message posted now asks for a completion. An inline message needs none to
    /// free a slot, and one without a token reports none: only one in `signal_every` asks,
    /// and retires those before it (or one beyond the send budget's unsignaled share).
    fn signal_due(&self, inline: bool, token: u64) -> bool {
        !inline
            || token != 0
            || self.unsignaled_run + 1 >= self.signal_every
            || !self.sq_budget.unsignaled_room()
    }

    /// [`Endpoint::post_msg`] of an eager message whose header is `imm` and whose payload
    /// fits the QP's inline size.
    fn post_inline(
        &mut self,
        peer: u32,
        imm: ImmHeader,
        payload: &[u8],
        token: u64,
    ) -> Result<(), TransportError> {
        let id = self.id();
        let signaled = self.signal_due(true, token);
        self.conn.as_ref().expect("connected").qp.post_send_inline(
            wr(peer, KIND_SQ, id),
            SendOp::SendWithImm { imm: imm.encode() },
            payload,
            signaled,
        )?;
        self.credits.data -= 1;
        if signaled {
            self.unsignaled_run = 0;
            self.posted.insert(id, Posted::Inline { token });
        } else {
            self.unsignaled_run += 1;
            self.stats.unsignaled += 1;
            self.posted.insert(id, Posted::Unsignaled { ctl: false });
        }
        self.sq_budget.posted(signaled);
        Ok(())
    }

    /// Posts the queued FINs (`kind` Fin) or WRITTEN notices (`kind` Written), oldest first,
    /// while a credit, a send slot and send-queue room allow.
    pub(super) fn post_notices(
        &mut self,
        peer: u32,
        slot_len: usize,
        kind: Kind,
    ) -> Result<(), TransportError> {
        loop {
            let queue = match kind {
                Kind::Fin => &self.fins,
                _ => &self.written,
            };
            // The queue first: an empty one must not count as a send-budget stall.
            if queue.is_empty()
                || self.credits.data == 0
                || self.free_send.is_empty()
                || !self.sq_room()
            {
                return Ok(());
            }
            let queue = match kind {
                Kind::Fin => &mut self.fins,
                _ => &mut self.written,
            };
            let seq = queue.pop_front().expect("checked");
            self.post_msg(peer, slot_len, kind, 0, seq, &[], 0)?;
            tracing::trace!(peer, seq, ?kind, "rendezvous notice posted");
        }
    }

    pub(super) fn post_rdma(
        &mut self,
        peer: u32,
        op: SendOp,
        sge: openib_sys::Sge,
        p: Posted,
    ) -> Result<(), TransportError> {
        let id = self.id();
        self.conn.as_ref().expect("connected").qp.post_send_sge(
            wr(peer, KIND_SQ, id),
            op,
            &sge,
            true,
            false,
        )?;
        self.unsignaled_run = 0;
        self.posted.insert(id, p);
        self.sq_budget.posted(true);
        Ok(())
    }

    /// Retires the unsignaled requests posted before request `id` (see
    /// [`InFlight::retire_unsignaled_before`]) and gives their room in the send budget back.
    pub(super) fn retire_unsignaled_before(&mut self, id: u32) {
        let retired = self.posted.retire_unsignaled_before(id);
        self.sq_budget.done(retired, 0);
    }

    /// Posts an empty signaled RDMA write when the newest request is an unsignaled message
    /// (not a credit return), so that its completion is reported; a no-op otherwise or when
    /// the endpoint is not connected or its send queue is full (the next call tries again).
    pub(super) fn close_tail(&mut self, peer: u32) -> Result<(), TransportError> {
        if self.state != EndpointState::Connected
            || !self.posted.open_tail()
            || self.posted.len() >= MAX_QUEUE as usize
        {
            return Ok(());
        }
        self.post_empty_write(peer, Posted::Close)?;
        self.stats.tails_closed += 1;
        Ok(())
    }

    /// Whether the endpoint waits on its peer (work queued, a rendezvous open, a notice to
    /// send) with no signaled request of its own posted: no completion will come, so nothing
    /// would say that the peer is gone (unsignaled messages at the tail may well have been
    /// acknowledged long ago). A peer that died then would never be noticed: its credits, CTS
    /// or FIN just never come.
    pub(super) fn waits_blind(&self) -> bool {
        self.state == EndpointState::Connected
            && self.posted.signaled() == 0
            && self.busy_but_tail()
    }

    /// Probes the peer with an empty signaled RDMA write once the endpoint has waited blind
    /// ([`Endpoint::waits_blind`]) for [`PROBE_AFTER`] since `now` first saw it so: a live
    /// peer's queue pair acknowledges it (a stopped process's too: the device answers), a dead
    /// one's retries run out and the failed completion fails the endpoint like any other.
    /// Called every [`PROBE_AFTER`] / 4 or so; returns whether it posted a probe.
    pub(super) fn probe_if_waiting(
        &mut self,
        peer: u32,
        now: Instant,
    ) -> Result<bool, TransportError> {
        if !self.blind.due(self.waits_blind(), now) || !self.sq_budget.room() {
            return Ok(false);
        }
        self.post_empty_write(peer, Posted::Probe)?;
        self.blind.probed();
        self.stats.probes += 1;
        tracing::debug!(peer, "waited on the peer with nothing in flight: probed it");
        Ok(true)
    }

    /// Posts a signaled RDMA write of no bytes (no address or key is checked for it) as
    /// `posted`.
    fn post_empty_write(&mut self, peer: u32, posted: Posted) -> Result<(), TransportError> {
        let id = self.id();
        self.conn
            .as_ref()
            .expect("connected")
            .qp
            .post_send(&openib_sys::SendRequest {
                wr_id: wr(peer, KIND_SQ, id),
                op: SendOp::RdmaWrite {
                    remote_addr: 0,
                    rkey: 0,
                },
                sges: Vec::new(),
                signaled: true,
                inline: false,
            })?;
        self.unsignaled_run = 0;
        self.posted.insert(id, posted);
        self.sq_budget.posted(true);
        Ok(())
    }
}

/// A message ready for (or held back from) its callback.
pub(super) enum Ready {
    Eager { tag: Tag, data: Vec<u8> },
    Rndv { seq: u32 },
}

/// Ends our rendezvous send `seq` to `peer` (see [`Outgoing::finished`]): its source goes back
/// and its completion is reported.
pub(super) fn release_outgoing(
    ep: &mut Endpoint,
    peer: u32,
    seq: u32,
    cache: &mut RegCache<MemoryRegion>,
    done: &mut Vec<Completion>,
) {
    let o = ep.outgoing.remove(&seq).expect("a finished outgoing");
    if let Source::Cached(m) = o.src {
        cache.give_back(m);
    }
    done.push(Completion::Done {
        peer,
        token: o.token,
    });
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn the_send_budget_leaves_every_endpoint_its_reserve_and_counts_stalls() {
        let b = SqBudget::new(8192);
        // No endpoint yet: one reserve and a send queue of flushes.
        assert_eq!(b.limit.load(Ordering::Relaxed), 8192 - SQ_RESERVE - 256);
        b.set_connected(8192, 100);
        assert_eq!(
            b.limit.load(Ordering::Relaxed),
            8192 - 101 * SQ_RESERVE - 256
        );
        b.set_connected(64, 1);
        assert_eq!(b.limit.load(Ordering::Relaxed), 64 - 2 * SQ_RESERVE - 16);
        b.set_connected(64, 1000);
        assert_eq!(
            b.limit.load(Ordering::Relaxed),
            1,
            "never zero: no deadlock"
        );
        b.set_connected(64, 1);
        for _ in 0..40 {
            assert!(b.room());
            b.posted(true);
        }
        assert!(!b.room(), "full at the limit");
        assert!(b.hit.swap(false, Ordering::Relaxed));
        assert_eq!(b.stalls.load(Ordering::Relaxed), 1);
        b.done(1, 1);
        assert!(b.room());
        assert!(!b.hit.load(Ordering::Relaxed));
        // Unsignaled requests hold at most half the limit (40), whatever is signaled.
        for _ in 0..19 {
            assert!(b.unsignaled_room());
            b.posted(false);
        }
        assert!(b.unsignaled_room(), "19 of 20");
        b.posted(false);
        assert!(!b.unsignaled_room(), "half the limit");
        b.done(1, 0);
        assert!(b.unsignaled_room());
    }
}

#[cfg(test)]
mod copy_tests {
    #[test]
    fn copy_in_pieces_copies_every_byte() {
        for len in [0, 1, 4095, 4096, 4097, 3 * 4096 + 17] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0u8; len];
            super::copy_in_pieces(&mut dst, &src);
            assert_eq!(dst, src, "length {len}");
        }
    }
}

#[cfg(test)]
mod inflight_tests {
    use super::{BlindWait, Endpoint, EndpointState, InFlight, Posted, SqBudget, PROBE_AFTER};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn msg(token: u64) -> Posted {
        Posted::Msg { slot: 0, token }
    }

    #[test]
    fn a_signaled_completion_retires_the_unsignaled_before_it() {
        let mut f = InFlight::default();
        f.insert(1, Posted::Unsignaled { ctl: false });
        f.insert(2, Posted::Unsignaled { ctl: true });
        f.insert(3, msg(7));
        f.insert(4, Posted::Unsignaled { ctl: false });
        assert_eq!((f.len(), f.signaled(), f.awaited()), (4, 1, 3));
        assert!(f.open_tail(), "request 4 is unsignaled and newest");
        assert_eq!(f.retire_unsignaled_before(3), 2);
        assert!(matches!(f.remove(3), Some(Posted::Msg { token: 7, .. })));
        assert_eq!((f.len(), f.signaled(), f.awaited()), (1, 0, 1));
        // Nothing signaled before the tail: retiring stops at the request named.
        assert_eq!(f.retire_unsignaled_before(4), 0);
        f.insert(5, Posted::Close);
        assert!(!f.open_tail(), "the close is newest");
        assert_eq!(f.retire_unsignaled_before(5), 1);
        assert!(matches!(f.remove(5), Some(Posted::Close)));
        assert_eq!((f.len(), f.signaled(), f.awaited()), (0, 0, 0));
    }

    #[test]
    fn an_endpoint_waits_blind_when_nothing_signaled_is_in_flight_to_its_peer() {
        let mut ep = Endpoint::new(Arc::new(SqBudget::new(1024)), 1, 0);
        ep.fins.push_back(7);
        assert!(!ep.waits_blind(), "not connected");
        ep.state = EndpointState::Connected;
        assert!(
            ep.waits_blind(),
            "a notice waits for a credit, nothing in flight"
        );
        ep.posted.insert(0, Posted::Unsignaled { ctl: false });
        assert!(
            ep.waits_blind(),
            "an unsignaled message reports no completion"
        );
        ep.posted.insert(1, Posted::Close);
        assert!(
            !ep.waits_blind(),
            "a signaled request will report the peer's death"
        );
        ep.posted.remove(1);
        ep.fins.clear();
        assert!(!ep.waits_blind(), "nothing waits on the peer");
    }

    #[test]
    fn a_blind_wait_is_probed_after_probe_after_and_starts_over() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let after = PROBE_AFTER.as_millis() as u64;
        let mut b = BlindWait::default();
        assert!(!b.due(false, at(0)));
        assert!(!b.due(true, at(10)), "first seen");
        assert!(!b.due(true, at(10 + after - 1)));
        assert!(b.due(true, at(10 + after)));
        assert!(b.due(true, at(20 + after)), "due until a probe goes out");
        b.probed();
        assert!(!b.due(true, at(30 + after)), "seen again after the probe");
        assert!(b.due(true, at(30 + 2 * after)));
        assert!(!b.due(false, at(31 + 2 * after)), "the wait ended");
        assert!(!b.due(true, at(40 + 2 * after)), "a new wait starts over");
        assert!(b.due(true, at(40 + 3 * after)));
    }

    #[test]
    fn credit_returns_alone_are_not_waited_for() {
        let mut f = InFlight::default();
        f.insert(1, Posted::Unsignaled { ctl: true });
        f.insert(2, Posted::Unsignaled { ctl: true });
        assert_eq!(f.awaited(), 0, "flush does not wait for credit returns");
        assert!(!f.open_tail(), "and does not close a tail of them");
        // A provider that reports an unsignaled request anyway: its counters follow.
        assert!(matches!(
            f.remove(2),
            Some(Posted::Unsignaled { ctl: true })
        ));
        assert_eq!((f.len(), f.awaited()), (1, 0));
        assert_eq!(f.drain().count(), 1);
        f.insert(3, Posted::Unsignaled { ctl: false });
        assert_eq!((f.len(), f.awaited(), f.signaled()), (1, 1, 0));
    }
}
