//! The transport: endpoints per peer, lazy connection on first use, eager and rendezvous sends
//! with tags and receive callbacks, RDMA put/get and 64-bit atomics on registered memory,
//! credit-based flow control, explicit progress. Shaped like Open MPI's BTL 3.1: one module
//! (here: one port) per process, tags with callbacks, registration handles, put/get, atomics,
//! progress, flush, del_procs, finalize.
//!
//! # Protocols
//! - Eager (payload <= eager limit): copied into a registered bounce slot, one RC send; the
//!   receiver's callback sees the receive buffer itself (no copy) when the message is in order.
//! - Rendezvous (larger): the payload is copied into a buffer of the registration cache by
//!   [`Transport::send`], taken as is from a registered region by [`Transport::send_region`],
//!   or registered where it is by [`Transport::send_shared`] (an `Arc<[u8]>`; see
//!   [`shared_regs`]); an `RTS` names it and the receiver takes a cache buffer. Write protocol
//!   (the default): the receiver answers `CTS` naming that buffer, the sender RDMA-writes the
//!   payload and sends `WRITTEN`. Read protocol (`OPENIB_RNDV_PROTOCOL=read`): the receiver
//!   RDMA-reads the payload in fragments of at most `OPENIB_RNDV_FRAGMENT` bytes and answers
//!   `FIN`, which releases the source. Split protocol (`OPENIB_RNDV_PROTOCOL=split`): the
//!   receiver answers `CTS_HEAD` for the first `OPENIB_RNDV_SPLIT` percent, which the sender
//!   writes, and reads the rest at the same time (on software RDMA each side's CPU then moves
//!   its share). Wire format: [`wire`].
//!
//! # Flow control
//! Each endpoint posts `recv_depth` receive buffers, [`CTL_RESERVE`] of them for credit-only
//! messages; see [`flow::Credits`] for the contract: a sender never overruns the receiver's
//! posted buffers, so receiver-not-ready never happens.
//!
//! # Ordering (per endpoint)
//! - Messages (eager and rendezvous, any mix of sizes) sent to one peer are delivered to the
//!   peer's callbacks in the order `send`/`send_region`/`send_shared` was called.
//! - Puts, gets and atomics to one peer are started in the order they were called, after every
//!   earlier message to that peer was started; a put is complete at the target when its
//!   completion is reported, and a message sent after that completion arrives after the data.
//!   Without waiting for the completion, RC still places a put's data before a message posted
//!   after it on the same endpoint, but gets and atomics are unordered with later messages.
//! - Nothing is ordered between different peers.
//!
//! # Threads
//! [`Transport`] is `Send` and needs `&mut self`; [`SharedTransport`] wraps it in a mutex so
//! several threads may send, put, get and progress at once.

mod config;
mod connect;
mod dropped;
mod endpoint;
mod error;
pub mod flow;
mod handlers;
pub mod peer;
mod peer_map;
#[cfg(any(test, feature = "wire-oracle"))]
pub mod peer_model;
pub mod pool;
mod rdma;
mod recv;
pub mod regcache;
mod rendezvous;
mod send;
mod shared;
pub mod shared_regs;
pub mod srq;
pub mod wire;
pub mod wireup;

pub use shared::SharedTransport;

use crate::runtime::Runtime;
pub use config::{SrqMode, TransportConfig};
use dropped::DroppedQps;
use endpoint::{unwr, wr, Endpoint, Posted, SqBudget, ANY_PEER, KIND_RECV, KIND_SQ, KIND_SRQ};
pub use endpoint::{EndpointState, EndpointStats, SendBudget, SrqStats};
pub use error::{Completion, FailureCause, TransportError};
use flow::{fragments, Credits, Reorder, TrainAssembly};
use handlers::Handlers;
use openib_cpc::Connection;
use openib_sys::clock::{self, TickRate};
use openib_sys::{
    Access, ForeignRegion, MemoryRegion, ProtectionDomain, RecvRequest, SendOp, SharedRegion,
    WorkCompletion,
};
use peer::{PeerError, PeerLimits, RecvBook, Step};
use peer_map::PeerMap;
pub use rdma::{AtomicOp, RemoteRegion};
use recv::Ready;
use regcache::{CacheStats, RegCache};
use rendezvous::release_outgoing;
pub use rendezvous::{is_software_rdma, RndvProtocol};
use shared_regs::{SharedRegStats, SharedRegs};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::{train_piece, Header, ImmHeader, Kind, Rts, HDR, RTS_LEN};
use wireup::{PingConfig, PingError, Wireup};

/// Maps keyed by small integers (request ids, sequence numbers, QP numbers) on the hot path:
/// a multiplicative hash instead of SipHash (the keys come from this process, not from peers).
type IdMap<V> = HashMap<u32, V, std::hash::BuildHasherDefault<IdHash>>;

#[derive(Default)]
struct IdHash(u64);

impl std::hash::Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A message tag (1..=255; 0 is the transport's own).
pub type Tag = u8;

/// Send and receive queue depth of every RC queue pair (`recv_depth` is capped to it).
pub const MAX_QUEUE: u32 = 256;

/// Entries of the port's send and receive completion queues (shared by all endpoints), by
/// default (`OPENIB_CQ_DEPTH`).
pub const CQ_DEPTH: u32 = 8192;

/// Receive buffers of each endpoint kept for credit-only control messages.
pub const CTL_RESERVE: u32 = 2;

/// Bytes every RC queue pair is asked to take inline in its send requests (the device may
/// grant less, see `LocalPort::open`): a message whose header and payload fit what it granted
/// goes inside the work request, as perftest sends its small messages (up to 236 bytes).
pub const INLINE_WANTED: u32 = 256;

/// How often `progress` polls the connection services and the failure detector when no
/// connection is being made (incoming connection requests are answered within this, or
/// within [`MAX_NAP`] by a process asleep in a waiting loop).
const SERVICE_POLL: Duration = Duration::from_millis(2);

/// Untaken completions at which [`BacklogWarning`] first warns (then at each doubling).
const UNTAKEN_COMPLETIONS_WARNING: usize = 1 << 20;

/// Logs a warning when completions pile up untaken: every send, put, get and atomic reports
/// one, and a caller that never takes them grows memory without bound (and the growing queue
/// touches a new page every few dozen operations, a page fault in the hot path). Warns at
/// [`UNTAKEN_COMPLETIONS_WARNING`] completions, then each time the count doubles.
#[derive(Debug)]
pub struct BacklogWarning {
    next: usize,
}

impl Default for BacklogWarning {
    fn default() -> Self {
        BacklogWarning {
            next: UNTAKEN_COMPLETIONS_WARNING,
        }
    }
}

impl BacklogWarning {
    /// Call with the number of completions waiting to be taken.
    #[inline]
    pub fn check(&mut self, untaken: usize) {
        if untaken >= self.next {
            self.warn(untaken);
        }
    }

    #[cold]
    fn warn(&mut self, untaken: usize) {
        tracing::warn!(
            untaken,
            bytes = untaken * std::mem::size_of::<Completion>(),
            "completions are piling up untaken: every send, put, get and atomic reports one; \
             take them (take_completions or drain_completions; C: openib_poll_completion)"
        );
        self.next = untaken.saturating_mul(2);
    }

    /// The count at which the next warning is due.
    pub fn next_warning_at(&self) -> usize {
        self.next
    }
}

/// Every this many progress calls the send queues' completions are polled whatever else holds;
/// in between, only by a call that found no receives while send requests are in flight.
const SEND_POLL_EVERY: u32 = 4;

/// The longest sleep of a waiting loop: its first sleep lasts at most [`SERVICE_POLL`], and
/// each one in a row that woke to nothing twice as long, up to this.
const MAX_NAP: Duration = Duration::from_millis(16);

/// The waiting policy of loops that progress until something happens
/// ([`Transport::progress_idle`]): spin while there is work and for
/// [`TransportConfig::yield_after`] of idle polls (timed by the tick counter, so the policy
/// does not depend on how fast a machine polls); then yield the CPU between polls; after
/// [`TransportConfig::wait_polls`] idle polls, sleep on the port's completion channel until
/// a completion arrives (at most 2 ms, so connection services and failure notices are still
/// polled; each further sleep that woke to nothing lasts twice as long, up to 16 ms, so a
/// long-idle process wakes rarely). A long wait otherwise takes the CPU that other processes
/// and software devices such as rxe need.
#[derive(Debug, Default)]
pub struct IdleBackoff {
    idle: u32,
    /// The tick of the first idle poll of the current idle stretch.
    idle_since: u64,
    /// Sleeps in a row that woke to nothing.
    naps: u32,
}

impl IdleBackoff {
    /// Counts an idle poll (or resets on work); the idle polls in a row. The first idle poll
    /// of a stretch reads the tick counter.
    fn count(&mut self, handled: usize) -> u32 {
        if handled == 0 {
            if self.idle == 0 {
                self.idle_since = clock::ticks();
            }
            self.idle = self.idle.saturating_add(1);
        } else {
            self.idle = 0;
            self.naps = 0;
        }
        self.idle
    }

    /// Whether an idle loop has spun for `spin_ticks` or more by the tick `now` (0: from its
    /// first idle poll).
    fn should_yield(&self, spin_ticks: u64, now: u64) -> bool {
        self.idle > 0 && (spin_ticks == 0 || now.saturating_sub(self.idle_since) >= spin_ticks)
    }

    /// The limit of the next sleep (call once per sleep): [`SERVICE_POLL`] after work, then
    /// doubling while sleeps wake to nothing, up to [`MAX_NAP`].
    fn nap(&mut self) -> Duration {
        let d = SERVICE_POLL
            .saturating_mul(1 << self.naps.min(8))
            .min(MAX_NAP);
        self.naps = self.naps.saturating_add(1);
        d
    }

    /// Whether a loop idle this long should sleep rather than poll (`wait_polls` 0: never).
    fn should_sleep(&self, wait_polls: u32) -> bool {
        wait_polls > 0 && self.idle >= wait_polls
    }
}

/// A sleep on the port's completion channel, armed by [`Transport::arm_sleep`]. Sleeping
/// needs no access to the transport, so a shared transport's lock is released meanwhile.
pub struct Sleeper(openib_sys::CompletionChannel);

impl Sleeper {
    /// Sleeps until a completion arrives or `max` passes (signals end it early too).
    pub fn sleep(&self, max: Duration) -> Result<(), TransportError> {
        self.0.wait_timeout(Some(max))?;
        Ok(())
    }
}

/// Callback for received messages of one tag: (source rank, payload). It runs inside
/// `progress` and must not call the transport (it may copy the data and return). If it
/// panics, the panic is caught, the batch finished, and the panic re-raised by `progress`.
pub type Handler = Box<dyn FnMut(u32, &[u8]) + Send>;

/// The transport of one process.
pub struct Transport {
    // Field order is drop order: endpoints (queue pairs, their buffers), the cache, then the
    // port (protection domain, completion queues) and the runtime.
    eps: PeerMap<Endpoint>,
    sq_budget: Arc<SqBudget>,
    /// The shared receive queue (its buffers outlive the QPs above, and go before the port).
    srq: Option<srq::SrqState>,
    cache: RegCache<MemoryRegion>,
    /// Registrations of callers' shared bytes (`send_shared`).
    shared_regs: SharedRegs<SharedRegion>,
    /// Incoming rendezvous holding a cache buffer now. One is always admitted whatever the
    /// cache's bound: it completes without anything from this process, so the peer's source
    /// buffer is freed even when this process's own outgoing copies fill the bound (otherwise
    /// two processes sending to each other could each wait for the other's buffers forever).
    receiving: usize,
    w: Wireup,
    rt: Box<dyn Runtime>,
    cfg: TransportConfig,
    /// Credits a sender starts with towards every peer, and what it may lend.
    peer_credits: Credits,
    handlers: Handlers,
    /// The bytes of the last rendezvous delivered, copied out of its landing buffer (kept to
    /// reuse the allocation).
    landed: Vec<u8>,
    /// Set while a progress call handles its batch: still set afterwards only when the
    /// transport's own code panicked in it (callback panics are caught), see
    /// [`Transport::interrupted`].
    in_batch: bool,
    /// Completions not yet taken; they stay until the caller takes them.
    done: Vec<Completion>,
    /// Warns when `done` keeps growing because the caller does not take them.
    done_backlog: BacklogWarning,
    next_token: u64,
    wcs: Vec<WorkCompletion>,
    /// Tick count (see [`openib_sys::clock`]) of the last service poll, and the ticks between
    /// two: the hot loop reads the time-stamp counter, not the clock.
    last_service_tick: u64,
    service_ticks: u64,
    /// [`TransportConfig::yield_after`] in ticks.
    yield_after_ticks: u64,
    /// The tick at the start of the last `progress` call.
    progress_tick: u64,
    /// The tick counter's rate, measured while the transport opened.
    tick_rate: TickRate,
    progress_calls: u32,
    /// Peers whose rendezvous reads wait (for the cache's bound or the send queue), kept by
    /// `drain` and `fail`; they are retried on every progress call.
    reading_peers: std::collections::BTreeSet<u32>,
    /// Peers touched by one progress call (kept to reuse its allocation).
    touched: Vec<u32>,
    /// Peers with receive buffers waiting to be posted again (see `Endpoint::unposted`).
    repost_peers: Vec<u32>,
    /// Endpoints in `Connecting` (services are polled on every progress while any is).
    connecting: usize,
    /// Receive buffers posted by the CPCs' prepare hook, by QP number, until `attach` (None:
    /// the peer's grant went into the shared receive queue).
    preposted: Arc<Mutex<HashMap<u32, Option<MemoryRegion>>>>,
    /// QP number -> peer of attached connections (receive completions name the QP).
    qp_peer: IdMap<u32>,
    /// Receive completions of QPs not attached yet (the peer's first message can arrive
    /// before the CPC hands the connection over).
    early: Vec<WorkCompletion>,
    /// QPs of connections dropped lately: their completions polled after the drop are
    /// discarded, not kept among `early`.
    dropped_qps: DroppedQps,
    /// Sleeps on the completion channel handed out by [`Transport::arm_sleep`].
    sleeps: u64,
}

impl Transport {
    /// Wires up through `rt` (discovery, CPC services, modex exchange); connections stay lazy.
    pub fn open(
        rt: Box<dyn Runtime>,
        mut cfg: TransportConfig,
    ) -> Result<Transport, TransportError> {
        // The tick rate is measured across the wire-up (which takes long enough), or apart.
        let calibration = (Instant::now(), clock::ticks());
        let size = rt.info().size;
        let want_srq = cfg.srq_for(size);
        let w = Wireup::open_with(
            rt.as_ref(),
            &cfg.wireup,
            cfg.cq_depth,
            want_srq.then_some(cfg.cq_depth),
        )?;
        let vendor_id = w.port().ctx.query_device()?.vendor_id;
        let rndv = cfg.rndv.resolve(vendor_id);
        tracing::debug!(
            vendor_id = format_args!("{vendor_id:#x}"),
            software = is_software_rdma(vendor_id),
            "incoming rendezvous taken by {rndv:?} (OPENIB_RNDV_PROTOCOL {:?})",
            cfg.rndv
        );
        cfg.rndv = rndv;
        let sq_budget = Arc::new(SqBudget::new(cfg.cq_depth));
        #[cfg(feature = "fault-injection")]
        let lie_at_seq =
            crate::fault::armed("lie-seq", rt.info().rank).then_some(crate::fault::LIE_SEQ);
        let eps = w
            .plans
            .keys()
            .map(|&p| {
                let ep = Endpoint::new(sq_budget.clone(), cfg.signal_every, cfg.seq_start);
                #[cfg(feature = "fault-injection")]
                let ep = Endpoint { lie_at_seq, ..ep };
                (p, ep)
            })
            .collect();
        let preposted: Arc<Mutex<HashMap<u32, Option<MemoryRegion>>>> = Default::default();
        let slot = HDR + cfg.eager_limit;
        let srq = match &w.port().srq {
            Some(q) => {
                let bufs = Arc::new(srq::SrqBuffers::new(
                    q.clone(),
                    w.port().pd.clone(),
                    slot,
                    cfg.cq_depth,
                ));
                bufs.add(cfg.srq_reserve)?;
                let base = cfg.initial_credits(size) - CTL_RESERVE;
                let max = (cfg.recv_depth - CTL_RESERVE).max(base);
                let pool = pool::CreditPool::new(cfg.srq_reserve, base, CTL_RESERVE, max);
                tracing::debug!(
                    reserve = cfg.srq_reserve,
                    per_peer = pool.per_peer(),
                    "eager messages land in a shared receive queue"
                );
                Some(srq::SrqState::new(bufs, pool))
            }
            None => None,
        };
        let hook: openib_cpc::rc::PrepareHook = {
            let pd = w.port().pd.clone();
            let depth = cfg.recv_depth as usize;
            let per_peer = srq.as_ref().map(|s| (s.bufs.clone(), s.pool.per_peer()));
            let preposted = preposted.clone();
            Arc::new(move |qp: &openib_sys::QueuePair| {
                let mine = match &per_peer {
                    // The peer's grant goes into the SRQ before its QP can receive.
                    Some((bufs, n)) => {
                        bufs.add(*n)?;
                        None
                    }
                    None => {
                        let mr = MemoryRegion::alloc(&pd, depth * slot, Access::LOCAL_WRITE)?;
                        for i in 0..depth {
                            qp.post_recv_sge(
                                wr(ANY_PEER, KIND_RECV, i as u32),
                                &mr.sge(i * slot, slot)?,
                            )?;
                        }
                        Some(mr)
                    }
                };
                preposted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(qp.qp_num(), mine);
                Ok(())
            })
        };
        if w.port().prepare.set(hook).is_err() {
            tracing::debug!("the port's prepare hook was already set");
        }
        // Opening took more than a millisecond: long enough to measure the tick rate over.
        let tick_rate = TickRate::between(calibration, (Instant::now(), clock::ticks()))
            .unwrap_or_else(|| TickRate::measure(Duration::from_millis(5)));
        let yield_after_ticks = tick_rate.ticks_in(cfg.yield_after);
        Ok(Transport {
            eps,
            sq_budget,
            srq,
            cache: RegCache::new(cfg.pinned_max),
            shared_regs: SharedRegs::new(cfg.pinned_max),
            receiving: 0,
            w,
            rt,
            peer_credits: cfg.peer_credits(size),
            cfg,
            handlers: Handlers::default(),
            landed: Vec::new(),
            in_batch: false,
            done: Vec::new(),
            done_backlog: BacklogWarning::default(),
            next_token: 1,
            wcs: Vec::with_capacity(64),
            last_service_tick: clock::ticks(),
            service_ticks: tick_rate.ticks_in(SERVICE_POLL),
            yield_after_ticks,
            progress_tick: 0,
            tick_rate,
            progress_calls: 0,
            reading_peers: Default::default(),
            touched: Vec::new(),
            repost_peers: Vec::new(),
            connecting: 0,
            preposted,
            qp_peer: IdMap::default(),
            early: Vec::new(),
            dropped_qps: DroppedQps::default(),
            sleeps: 0,
        })
    }

    /// The shared send budget: requests in flight on every endpoint, the limit user work may
    /// reach (the send completion queue's depth less every endpoint's reserve), and how often
    /// an endpoint waited for it.
    pub fn send_budget(&self) -> SendBudget {
        SendBudget {
            in_flight: self.sq_budget.in_flight.load(Ordering::Relaxed),
            limit: self.sq_budget.limit.load(Ordering::Relaxed),
            stalls: self.sq_budget.stalls.load(Ordering::Relaxed) as u64,
        }
    }

    /// How often a waiting loop went to sleep on the completion channel (see
    /// [`IdleBackoff`]).
    pub fn idle_sleeps(&self) -> u64 {
        self.sleeps
    }

    /// Whether eager messages land in the port's shared receive queue.
    pub fn uses_srq(&self) -> bool {
        self.srq.is_some()
    }

    /// Bytes of registered receive buffers for eager messages: the SRQ's, or every connected
    /// endpoint's own.
    pub fn recv_buffer_bytes(&self) -> u64 {
        let slot = (HDR + self.cfg.eager_limit) as u64;
        match &self.srq {
            Some(s) => s.bufs.total() as u64 * slot,
            None => self
                .eps
                .values()
                .filter_map(|e| e.recv_mr.as_ref())
                .map(|m| m.len() as u64)
                .sum(),
        }
    }

    /// The shared receive queue's buffers and credits, when it is used.
    pub fn srq_stats(&self) -> Option<SrqStats> {
        self.srq.as_ref().map(|s| SrqStats {
            buffers: s.bufs.total(),
            counted: s.pool.capacity(),
            granted: s.pool.granted(),
            free: s.pool.free(),
            peers: s.pool.peers() as u32,
        })
    }

    /// The rate of [`openib_sys::clock::ticks`], measured when the transport opened: waiting
    /// loops time themselves by the tick counter rather than the clock (see
    /// [`openib_sys::clock`]).
    pub fn tick_rate(&self) -> TickRate {
        self.tick_rate
    }

    /// The tick counter ([`clock::ticks`]) as the last [`Transport::progress`] call read it
    /// when it started: a waiting loop's clock without a read of its own.
    pub fn progress_tick(&self) -> u64 {
        self.progress_tick
    }

    pub fn rank(&self) -> u32 {
        self.rt.info().rank
    }

    pub fn size(&self) -> u32 {
        self.rt.info().size
    }

    pub fn runtime(&self) -> &dyn Runtime {
        self.rt.as_ref()
    }

    pub fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }

    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// The peers this transport has endpoints for (every other rank until `del_procs`).
    pub fn peers(&self) -> Vec<u32> {
        self.eps.keys().collect()
    }

    /// Registers the receive callback of `tag` (replacing any earlier one).
    pub fn on_tag(&mut self, tag: Tag, handler: Handler) -> Result<(), TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.handlers.set(tag, handler);
        Ok(())
    }

    /// Registers `len` bytes of memory for put/get/atomics and zero-copy sends (remote read,
    /// write and atomics allowed). Deregistered when the last handle is dropped. Peers that get
    /// its [`RemoteRegion`] may write it at any time, so its bytes are reached by copying
    /// (`read_at`, `to_vec`, `read_u64`, `write_at`; docs/DESIGN.md, "Soundness of registered
    /// memory").
    pub fn register(&self, len: usize) -> Result<Arc<MemoryRegion>, TransportError> {
        Ok(Arc::new(MemoryRegion::alloc(
            &self.w.port().pd,
            len,
            Access::ALL,
        )?))
    }

    /// The protection domain of the transport's port: what a registration must be made on to
    /// be sent from (see [`Transport::send_foreign`]).
    pub fn protection_domain(&self) -> &ProtectionDomain {
        &self.w.port().pd
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Counters of the registrations kept for [`Transport::send_shared`].
    pub fn shared_reg_stats(&self) -> SharedRegStats {
        self.shared_regs.stats()
    }

    pub fn endpoint_stats(&self, peer: u32) -> Option<EndpointStats> {
        self.eps.get(&peer).map(|e| EndpointStats {
            next_seq: e.next_seq,
            next_peer_seq: e.reorder.next_arrival(),
            ..e.stats
        })
    }

    /// The flow-control counters of an endpoint, for diagnostics.
    pub fn debug_endpoint(&self, peer: u32) -> String {
        match self.eps.get(&peer) {
            None => "none".into(),
            Some(e) => format!(
                "{:?} credits {:?} pending {} posted {} outgoing {} incoming {} fins {} held {} free_send {}",
                e.state,
                e.credits,
                e.pending.len(),
                e.posted.len(),
                e.outgoing.len(),
                e.incoming.len(),
                e.fins.len(),
                e.reorder.held(),
                e.free_send.len()
            ),
        }
    }

    pub fn endpoint_state(&self, peer: u32) -> Option<EndpointState> {
        self.eps.get(&peer).map(|e| e.state.clone())
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// The endpoint of `peer`, ready to take an operation (connection started if idle).
    fn endpoint(&mut self, peer: u32) -> Result<&mut Endpoint, TransportError> {
        // A connected endpoint had a path (one lookup on the send path, not three).
        if self
            .eps
            .get(&peer)
            .is_some_and(|e| e.state == EndpointState::Connected)
        {
            return Ok(self.eps.get_mut(&peer).expect("checked"));
        }
        let size = self.size();
        match self.w.plans.get(&peer) {
            None => return Err(TransportError::BadPeer { peer, size }),
            Some(Err(why)) => {
                return Err(TransportError::NoPath {
                    peer,
                    why: why.clone(),
                })
            }
            Some(Ok(_)) => {}
        }
        let Some(ep) = self.eps.get_mut(&peer) else {
            return Err(TransportError::BadPeer { peer, size });
        };
        if let EndpointState::Failed(why) = &ep.state {
            return Err(TransportError::EndpointFailed {
                peer,
                why: why.clone(),
            });
        }
        if ep.state == EndpointState::Idle {
            ep.state = EndpointState::Connecting;
            self.connecting += 1;
            self.w.connect(peer, Instant::now());
        }
        Ok(self.eps.get_mut(&peer).expect("checked"))
    }

    /// Progresses until nothing is queued or in flight on any live endpoint (every send read
    /// by its peer, every put, get and atomic complete), or `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<Vec<Completion>, TransportError> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut backoff = IdleBackoff::default();
        let mut rounds = 0u32;
        loop {
            // A callback may send during the flush: its tail is closed within 64 rounds.
            if rounds % 64 == 0 {
                self.close_tails();
            }
            self.progress_idle(&mut backoff)?;
            rounds = rounds.wrapping_add(1);
            out.append(&mut self.done);
            let live_busy = |e: &Endpoint| !matches!(e.state, EndpointState::Failed(_)) && e.busy();
            if !self.eps.values().any(live_busy) {
                return Ok(out);
            }
            // The clock only now and then (a system call in TCG guests).
            if rounds % 64 == 0 && Instant::now() > deadline {
                let busy: Vec<u32> = self
                    .eps
                    .iter()
                    .filter(|(_, e)| live_busy(e))
                    .map(|(p, _)| p)
                    .collect();
                return Err(TransportError::Timeout {
                    what: format!("flush (busy endpoints: {busy:?})"),
                    timeout,
                });
            }
        }
    }

    /// Takes the completions gathered so far.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.done)
    }

    /// Takes the completions gathered so far, oldest first, without allocating: the queue
    /// keeps its memory for the next ones (call this once per round of a hot loop). Those the
    /// iterator does not reach are dropped with it.
    pub fn drain_completions(&mut self) -> std::vec::Drain<'_, Completion> {
        self.done.drain(..)
    }

    /// Gives back completions taken by [`Transport::take_completions`] that belong to someone
    /// else (for callers that share the transport between threads).
    pub fn requeue_completions(&mut self, mut c: Vec<Completion>) {
        self.done.append(&mut c);
    }

    /// Flushes (up to `timeout`), then releases every endpoint, cached registration, the port
    /// and the runtime connection. Verbs resources are gone when this returns.
    pub fn finalize(mut self, timeout: Duration) -> Result<Vec<Completion>, TransportError> {
        let flushed = self.flush(timeout);
        let peers = self.peers();
        self.del_procs(&peers);
        self.cache.clear();
        self.shared_regs.clear();
        let mut done = std::mem::take(&mut self.done);
        drop(self);
        let mut out = flushed?;
        out.append(&mut done);
        Ok(out)
    }

    /// Makes progress: connections, completions, receive callbacks, queued operations and
    /// credit returns. Returns how many work completions it handled.
    ///
    /// A receive callback that panics does not cut the batch short: its panic is caught, the
    /// rest of the batch is handled (messages delivered, receive buffers reposted, completions
    /// recorded), and then the first such panic is re-raised from here. The transport stays
    /// consistent and usable; the message whose callback panicked counts as delivered.
    pub fn progress(&mut self) -> Result<usize, TransportError> {
        self.in_batch = true;
        let r = self.progress_batch();
        self.in_batch = false;
        self.handlers.raise();
        r
    }

    /// Receive callbacks that panicked since the transport opened (each was caught, its batch
    /// finished, and the first panic of each batch re-raised by [`Transport::progress`]).
    pub fn callback_panics(&self) -> u64 {
        self.handlers.panics()
    }

    /// Whether a progress call was cut short by a panic in the transport's own code (a bug;
    /// callback panics never do this): its state is then not consistent, and it must only
    /// be dropped. [`SharedTransport`] refuses the lock of such a transport.
    pub fn interrupted(&self) -> bool {
        self.in_batch
    }

    fn progress_batch(&mut self) -> Result<usize, TransportError> {
        // Services every SERVICE_POLL by the tick counter: where the clock source has no vDSO
        // path (TCG guests) every clock read is a system call.
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let tick = clock::ticks();
        self.progress_tick = tick;
        // Before the services: a connection they attach never sees an earlier one's buffers.
        if !self.repost_peers.is_empty() {
            self.repost_deferred();
        }
        if self.connecting > 0 || tick.saturating_sub(self.last_service_tick) >= self.service_ticks
        {
            self.last_service_tick = tick;
            self.poll_services(Instant::now())?;
        }
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let recv_drained = {
            let lp = self.w.port();
            lp.recv_cq.poll(&mut wcs, 32)?;
            let received = wcs.len();
            // Send completions free slots and credits, nothing waits on them at once: when
            // messages came in, the send queue waits for the next call (at most three calls),
            // so no second poll stands between a message and its callback. With nothing in
            // flight there is nothing to poll for but the flushes of a dropped connection,
            // which the periodic poll collects: a waiting loop polls one queue, not two. A
            // failed receive brings them in at once: the cause of a flush may be there.
            if (received == 0 && self.sq_budget.signaled.load(Ordering::Relaxed) > 0)
                || self.progress_calls % SEND_POLL_EVERY == 0
                || wcs.iter().any(|wc| !wc.is_success())
            {
                lp.send_cq.poll(&mut wcs, 32)?;
            }
            received < 32
        };
        let n = wcs.len();
        if n == 0 && self.reading_peers.is_empty() {
            self.wcs = wcs;
            if recv_drained {
                self.retire_srq_grants();
            }
            return Ok(0);
        }
        // A QP in error flushes its other requests: report the error that caused it, which
        // may sit behind the flushes in this batch (or on the other queue).
        if wcs.iter().any(|wc| wc.is_flush()) {
            wcs.sort_by_key(|wc| wc.is_flush());
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        for wc in &wcs {
            let (mut peer, kind, id) = unwr(wc.wr_id);
            if peer == ANY_PEER {
                match self.qp_peer.get(&wc.qp_num) {
                    Some(&p) => peer = p,
                    None if self.dropped_qps.contains(wc.qp_num) => {
                        // Queued before its connection was dropped: nobody's message.
                        self.discard_dropped(std::slice::from_ref(wc));
                        continue;
                    }
                    None => {
                        self.early.push(*wc);
                        continue;
                    }
                }
            }
            if touched.last() != Some(&peer) {
                touched.push(peer);
            }
            if !wc.is_success() {
                if kind == KIND_SRQ {
                    // The buffer belongs to the SRQ, not to the failed connection.
                    if let Err(e) = self.srq.as_mut().expect("SRQ buffer").repost(id) {
                        tracing::warn!(error = %e, "SRQ buffer not reposted");
                    }
                }
                if kind == KIND_SQ {
                    // Unsignaled messages before the first failed request completed (a failed
                    // or flushed one reports itself, signaled or not).
                    if let Some(ep) = self.eps.get_mut(&peer) {
                        ep.retire_unsignaled_before(id);
                    }
                }
                self.fail(
                    peer,
                    FailureCause::WorkCompletion {
                        status: wc.status,
                        vendor: wc.vendor_err,
                        text: wc.status_str(),
                    },
                );
                continue;
            }
            let r = match kind {
                KIND_RECV | KIND_SRQ => {
                    self.on_recv(peer, kind, id, wc.byte_len as usize, wc.imm())
                }
                KIND_SQ => self.on_send_done(peer, id),
                _ => Ok(()),
            };
            if let Err(e) = r {
                self.fail(peer, FailureCause::local(e));
            }
        }
        self.wcs = wcs;
        self.done_backlog.check(self.done.len());
        touched.sort_unstable();
        touched.dedup();
        // Reads waiting for the cache's bound may start after another endpoint freed memory.
        let sorted = touched.len();
        for &p in &self.reading_peers {
            if touched[..sorted].binary_search(&p).is_err() {
                touched.push(p);
            }
        }
        if self.sq_budget.hit.swap(false, Ordering::Relaxed) {
            // Endpoints held back by the shared send budget may go on now.
            touched.extend(self.eps.iter().filter(|(_, e)| e.busy()).map(|(p, _)| p));
            touched.sort_unstable();
            touched.dedup();
        }
        for &p in &touched {
            if let Err(e) = self.drain(p) {
                self.fail(p, FailureCause::local(e));
            }
        }
        self.touched = touched;
        if recv_drained {
            // After the batch: its buffers of stopped peers are reposted by now.
            self.retire_srq_grants();
        }
        Ok(n)
    }

    /// One round of a waiting loop: [`Transport::progress`], then by `backoff`'s policy a
    /// yield or a sleep of at most 2 ms until a completion arrives. Returns the
    /// completions handled.
    pub fn progress_idle(&mut self, backoff: &mut IdleBackoff) -> Result<usize, TransportError> {
        let n = self.progress()?;
        if backoff.count(n) == 0 {
            return Ok(n);
        }
        if backoff.should_sleep(self.cfg.wait_polls) {
            let (n, sleeper) = self.arm_sleep()?;
            if let Some(s) = sleeper {
                s.sleep(backoff.nap())?;
                let n = self.progress()?;
                backoff.count(n);
                return Ok(n);
            }
            backoff.count(n);
            return Ok(n);
        }
        // The tick the progress call read: no second read per idle poll.
        if backoff.should_yield(self.yield_after_ticks, self.progress_tick) {
            std::thread::yield_now();
        }
        Ok(n)
    }

    /// Arms the completion queues to wake the port's channel, then progresses once (a
    /// completion that came before the arming is handled here, not slept through). Returns
    /// the completions handled and, when there were none and no connection is being set up
    /// (those are polled, not signalled), the [`Sleeper`] to wait on.
    pub fn arm_sleep(&mut self) -> Result<(usize, Option<Sleeper>), TransportError> {
        if self.connecting > 0 {
            return Ok((self.progress()?, None));
        }
        let lp = self.w.port();
        lp.recv_cq.req_notify(false)?;
        lp.send_cq.req_notify(false)?;
        let channel = lp.channel.clone();
        let n = self.progress()?;
        if n > 0 || !self.reading_peers.is_empty() {
            return Ok((n, None));
        }
        self.sleeps += 1;
        Ok((0, Some(Sleeper(channel))))
    }

    /// Closes every open tail of unsignaled messages (see [`Endpoint::close_tail`]), for
    /// `flush`.
    fn close_tails(&mut self) {
        let mut failed = Vec::new();
        for (peer, ep) in self.eps.iter_mut() {
            if !ep.posted.open_tail() {
                continue;
            }
            if let Err(e) = ep.close_tail(peer) {
                failed.push((peer, e));
            }
        }
        for (peer, e) in failed {
            self.fail(peer, FailureCause::local(e));
        }
    }

    fn on_send_done(&mut self, peer: u32, id: u32) -> Result<(), TransportError> {
        let Some(ep) = self.eps.get_mut(&peer) else {
            return Ok(());
        };
        ep.retire_unsignaled_before(id);
        let posted = ep.posted.remove(id);
        match posted {
            // A provider that reports every request (it may): retired like the others.
            Some(Posted::Unsignaled { .. }) => ep.sq_budget.done(1, 0),
            Some(_) => ep.sq_budget.done(1, 1),
            None => {}
        }
        match posted {
            Some(Posted::Msg { slot, token }) => {
                ep.free_send.push(slot);
                if token != 0 {
                    self.done.push(Completion::Done { peer, token });
                }
            }
            Some(Posted::Inline { token }) => {
                if token != 0 {
                    self.done.push(Completion::Done { peer, token });
                }
            }
            Some(Posted::Rdma { token, .. }) | Some(Posted::Atomic { token, .. }) => {
                self.done.push(Completion::Done { peer, token })
            }
            Some(Posted::Read { seq }) => {
                let inc = ep
                    .incoming
                    .get_mut(&seq)
                    .expect("a read belongs to an incoming");
                inc.reading -= 1;
                tracing::trace!(peer, seq, "rendezvous read completed");
                if inc.complete() {
                    ep.reorder.complete(seq, Ready::Rndv { seq }).map_err(|e| {
                        TransportError::EndpointFailed {
                            peer,
                            why: e.to_string(),
                        }
                    })?;
                    self.deliver_ready(peer);
                }
            }
            Some(Posted::Write { seq }) => {
                let o = ep
                    .outgoing
                    .get_mut(&seq)
                    .expect("a write belongs to an outgoing");
                o.writing -= 1;
                tracing::trace!(peer, seq, "rendezvous write completed");
                if o.finished() {
                    // Every byte we write is in the peer's memory (its WRITTEN notice is posted
                    // or queued; it carries no data) and the peer read the rest, if any.
                    release_outgoing(ep, peer, seq, &mut self.cache, &mut self.done);
                }
            }
            Some(Posted::Close) | Some(Posted::Unsignaled { .. }) | None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::IdleBackoff;

    #[test]
    fn a_waiting_loop_sleeps_only_after_the_configured_idle_polls_in_a_row() {
        let mut b = IdleBackoff::default();
        for i in 1..=99 {
            assert_eq!(b.count(0), i);
            assert!(!b.should_sleep(100), "slept after {i} idle polls");
        }
        b.count(0);
        assert!(b.should_sleep(100));
        // Work resets the count: the next idle stretch starts over.
        assert_eq!(b.count(3), 0);
        assert!(!b.should_sleep(100));
        assert_eq!(b.count(0), 1);
    }

    #[test]
    fn backlog_warning_waits_for_each_doubling() {
        let mut w = super::BacklogWarning::default();
        let first = super::UNTAKEN_COMPLETIONS_WARNING;
        w.check(first - 1);
        assert_eq!(w.next_warning_at(), first);
        w.check(first);
        assert_eq!(w.next_warning_at(), 2 * first);
        w.check(2 * first - 1);
        assert_eq!(w.next_warning_at(), 2 * first);
        w.check(5 * first);
        assert_eq!(w.next_warning_at(), 10 * first);
    }

    #[test]
    fn an_idle_loop_yields_once_it_has_spun_its_time_and_work_starts_it_over() {
        let mut b = IdleBackoff::default();
        // Yielding at once (0) still needs an idle poll: a loop that found work goes on.
        assert!(!b.should_yield(0, super::clock::ticks()));
        b.count(0);
        assert!(b.should_yield(0, super::clock::ticks()));
        assert!(
            !b.should_yield(u64::MAX, super::clock::ticks()),
            "yielded before its spin time"
        );
        let since = b.idle_since;
        std::thread::sleep(std::time::Duration::from_millis(1));
        b.count(0);
        assert_eq!(
            b.idle_since, since,
            "a later idle poll restarted the stretch"
        );
        assert!(b.should_yield(1, super::clock::ticks()));
        b.count(2);
        assert!(!b.should_yield(0, super::clock::ticks()));
        // A new idle stretch is timed from its own first idle poll.
        b.count(0);
        assert!(b.idle_since > since);
        assert!(!b.should_yield(u64::MAX, super::clock::ticks()));
    }

    #[test]
    fn wait_polls_zero_never_sleeps() {
        let mut b = IdleBackoff::default();
        for _ in 0..10_000 {
            b.count(0);
        }
        assert!(!b.should_sleep(0));
        assert!(b.should_sleep(10_000));
    }

    #[test]
    fn sleeps_that_wake_to_nothing_grow_to_the_cap_and_work_resets_them() {
        use super::{MAX_NAP, SERVICE_POLL};
        let mut b = IdleBackoff::default();
        let naps: Vec<_> = (0..8).map(|_| b.nap()).collect();
        assert_eq!(naps[0], SERVICE_POLL);
        assert_eq!(naps[1], SERVICE_POLL * 2);
        assert!(naps.windows(2).all(|w| w[0] <= w[1]), "{naps:?}");
        assert_eq!(*naps.last().unwrap(), MAX_NAP);
        // Idle polls do not reset the growth; work does.
        b.count(0);
        assert_eq!(b.nap(), MAX_NAP);
        b.count(1);
        assert_eq!(b.nap(), SERVICE_POLL);
    }
}
