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
mod device_events;
mod dropped;
mod endpoint;
mod error;
pub mod flow;
mod group_create;
mod handlers;
mod op;
pub mod peer;
mod peer_map;
#[cfg(any(test, feature = "wire-oracle"))]
pub mod peer_model;
pub mod pool;
mod progress;
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
pub use config::{derive_from_env, SrqMode, TransportConfig};
use dropped::DroppedQps;
use endpoint::{wr, Endpoint, SqBudget, ANY_PEER, KIND_RECV, KIND_SRQ};
pub use endpoint::{EndpointState, EndpointStats, SendBudget, SrqStats};
pub use error::{Completion, FailureCause, TransportError};
use flow::Credits;
pub use group_create::{GroupCreateFailure, ASIDE_MAX as GROUP_CREATE_ASIDE_MAX, GROUP_CREATE_TAG};
use handlers::Handlers;
pub use op::{AtomicOp, LocalRegion};
use openib_sys::clock::{self, TickRate};
use openib_sys::{Access, MemoryRegion, ProtectionDomain, Region, SharedRegion, WorkCompletion};
use peer_map::PeerMap;
use progress::SERVICE_POLL;
pub use progress::{BacklogWarning, IdleBackoff, Sleeper};
pub use rdma::{offset_of, RemoteRegion};
use regcache::{CacheStats, RegCache};
pub use rendezvous::{is_software_rdma, RndvProtocol};
use shared_regs::{SharedRegStats, SharedRegs};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::HDR;
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

/// The bit that marks a token the caller chose ([`Transport::rdma_as`],
/// [`Transport::atomic_as`]): the tokens the transport draws count up from 1 and never have it,
/// so a caller tells its own completions from the transport's by this bit alone (and may put
/// a pointer in the other 63 bits).
pub const CALLER_TOKEN: u64 = 1 << 63;

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

/// Callback for received messages of one tag: (source rank, payload). It runs inside
/// `progress` and cannot reach the transport (see [`TransportHandler`] for one that can). If it
/// panics, the panic is caught, the batch finished, and the panic re-raised by `progress`.
pub type Handler = Box<dyn FnMut(u32, &[u8]) + Send>;

/// Callback for received messages of one tag that gets the transport too: (transport, source
/// rank, payload). It may send, put, get, run atomics, register memory and remove peers from
/// inside (as ob1 does: it answers a rendezvous from its receive callback). Progress called
/// from inside returns `Ok(0)` at once (the messages behind this one wait for the progress
/// call that runs it, so they never overtake it), and [`Transport::flush`] and
/// [`Transport::connect_all`], which wait on progress, fail with
/// [`TransportError::InCallback`]. Panics are handled as for [`Handler`].
pub type TransportHandler = Box<dyn FnMut(&mut Transport, u32, &[u8]) + Send>;
/// A way of opening the wire-up ([`Wireup::open_with`], [`Wireup::open_host`]).
type OpenWireup = fn(&dyn Runtime, &PingConfig, u32, Option<u32>) -> Result<Wireup, PingError>;

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
    /// Group creation's state, once [`Transport::group_create`] ran (it owns
    /// [`GROUP_CREATE_TAG`] from then on).
    group_create: Option<Arc<Mutex<group_create::GcState>>>,
    /// Receive callbacks running now (a [`TransportHandler`] that calls the transport nests).
    callback_depth: u32,
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
    /// When the service poll next looks for endpoints to probe ([`Transport::probe_waiting`]).
    next_probe_scan: Instant,
    /// [`TransportConfig::yield_after`] in ticks.
    yield_after_ticks: u64,
    /// The tick at the start of the last `progress` call.
    progress_tick: u64,
    /// The tick counter's rate, measured while the transport opened.
    tick_rate: TickRate,
    progress_calls: u32,
    /// Whether the port's send and receive queues report to one CQ (as `Wireup` opens it):
    /// progress then polls once.
    one_cq: bool,
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
    /// When the service round next reads the device's events (device_events.rs).
    next_device_poll: Instant,
    /// The device events read since the transport opened.
    device_events: u64,
    /// Set while the device says this transport's port is down: its description.
    port_down: Option<String>,
    /// A failure waited for the port's event already (device_events.rs, `PORT_EVENT_WAIT`).
    port_waited: bool,
    /// Receive completions of QPs not attached yet (the peer's first message can arrive
    /// before the CPC hands the connection over).
    early: Vec<WorkCompletion>,
    /// QPs of connections dropped lately: their completions polled after the drop are
    /// discarded, not kept among `early`.
    dropped_qps: DroppedQps,
    /// Sleeps on the completion channel handed out by [`Transport::arm_sleep`].
    sleeps: u64,
    /// `del_procs` removed the endpoint to the own rank (not made again until `add_procs`).
    own_removed: bool,
}

impl Transport {
    /// Wires up through `rt` (discovery, CPC services, modex exchange); connections stay lazy.
    pub fn open(rt: Box<dyn Runtime>, cfg: TransportConfig) -> Result<Transport, TransportError> {
        Self::open_via(rt, cfg, Wireup::open_with)
    }

    /// Opens on a host's runtime ([`crate::runtime::host::HostRuntime`], e.g. Open MPI's
    /// modex): publishes this process's modex with one put and a commit and returns without a
    /// fence (the host runs it). Peers are read from the host's modex on demand, by
    /// [`Transport::reachable`] or the first operation or connection attempt involving them;
    /// a peer that published nothing is unreachable ([`TransportError::NoPath`]), never
    /// waited for. Until then a peer has no endpoint ([`Transport::peers`]).
    pub fn open_host(
        rt: Box<dyn Runtime>,
        cfg: TransportConfig,
    ) -> Result<Transport, TransportError> {
        Self::open_via(rt, cfg, Wireup::open_host)
    }

    /// Whether `peer` can be reached: on a host's runtime this reads its modex the first time
    /// and makes its endpoint. `Ok` when a port pair and a CPC connect to it (the connection
    /// itself is made on first use, except over rdmacm, which the lower rank of the pair
    /// starts here at once, without waiting: [`Wireup::starts_at_once`]),
    /// [`TransportError::NoPath`] naming why not, and
    /// [`TransportError::BadPeer`] for a rank outside the job or a removed one. This process's
    /// own rank is reachable: its endpoint (a loopback queue pair, see
    /// [`Transport::peers`]) is made here and connected on first use.
    pub fn reachable(&mut self, peer: u32) -> Result<(), TransportError> {
        let size = self.size();
        if peer == self.rank() {
            if self.own_removed {
                return Err(TransportError::BadPeer { peer, size });
            }
            if self.eps.get(&peer).is_none() {
                let ep = self.new_endpoint();
                self.eps.insert(peer, ep);
            }
            return Ok(());
        }
        match self.w.resolve(self.rt.as_ref(), peer) {
            None => Err(TransportError::BadPeer { peer, size }),
            Some(Err(why)) => Err(TransportError::NoPath {
                peer,
                why: why.clone(),
            }),
            Some(Ok(_)) => {
                if self.eps.get(&peer).is_none() && self.w.on_demand() {
                    let ep = self.new_endpoint();
                    self.eps.insert(peer, ep);
                    if self.w.starts_at_once(peer) {
                        // rdmacm starts from the lower rank only: start it now, without
                        // waiting, so that the peer's first message finds it under way.
                        let ep = self.eps.get_mut(&peer).expect("inserted");
                        ep.state = EndpointState::Connecting;
                        self.connecting += 1;
                        self.w.connect(peer, Instant::now());
                    }
                }
                Ok(())
            }
        }
    }

    /// On a host's runtime, the endpoint of a peer that starts a connection before this
    /// process used it (its modex is read now); elsewhere nothing (every peer has one).
    pub(super) fn know(&mut self, peer: u32) {
        if self.w.on_demand() && self.eps.get(&peer).is_none() {
            let _ = self.reachable(peer);
        }
    }

    fn new_endpoint(&self) -> Endpoint {
        let ep = Endpoint::new(
            self.sq_budget.clone(),
            self.cfg.signal_every,
            self.cfg.seq_start,
        );
        #[cfg(feature = "fault-injection")]
        let ep = Endpoint {
            lie_at_seq: crate::fault::armed("lie-seq", self.rank())
                .then_some(crate::fault::LIE_SEQ),
            ..ep
        };
        ep
    }

    fn open_via(
        rt: Box<dyn Runtime>,
        mut cfg: TransportConfig,
        wireup: OpenWireup,
    ) -> Result<Transport, TransportError> {
        // The tick rate is measured across the wire-up (which takes long enough), or apart.
        let calibration = (Instant::now(), clock::ticks());
        let size = rt.info().size;
        let want_srq = cfg.srq_for(size);
        let w = wireup(
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
        let one_cq = w.port().one_cq();
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
            group_create: None,
            callback_depth: 0,
            landed: Vec::new(),
            in_batch: false,
            done: Vec::new(),
            done_backlog: BacklogWarning::default(),
            next_token: 1,
            wcs: Vec::with_capacity(64),
            last_service_tick: clock::ticks(),
            service_ticks: tick_rate.ticks_in(SERVICE_POLL),
            next_probe_scan: Instant::now(),
            yield_after_ticks,
            progress_tick: 0,
            tick_rate,
            progress_calls: 0,
            one_cq,
            reading_peers: Default::default(),
            touched: Vec::new(),
            repost_peers: Vec::new(),
            connecting: 0,
            preposted,
            qp_peer: IdMap::default(),
            next_device_poll: Instant::now(),
            device_events: 0,
            port_down: None,
            port_waited: false,
            early: Vec::new(),
            dropped_qps: DroppedQps::default(),
            sleeps: 0,
            own_removed: false,
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

    /// The port this transport serves, `device:port` (e.g. `rxe0:1`).
    pub fn port_name(&self) -> String {
        let p = self.w.port();
        format!("{}:{}", p.ctx.name(), p.port)
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

    /// The peers this transport has endpoints for (every other rank until `del_procs`, and
    /// this process's own rank once [`Transport::reachable`] or an operation named it: its
    /// endpoint is a loopback queue pair, made on first use, that takes every path a peer's
    /// endpoint takes).
    pub fn peers(&self) -> Vec<u32> {
        self.eps.keys().collect()
    }

    /// Registers the receive callback of `tag` (replacing any earlier one).
    pub fn on_tag(&mut self, tag: Tag, handler: Handler) -> Result<(), TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.check_tag_free(tag)?;
        self.handlers.set(tag, handler);
        Ok(())
    }

    /// Registers the receive callback of `tag` (replacing any earlier one) as one that gets
    /// the transport and may call it (see [`TransportHandler`]).
    pub fn on_tag_with_transport(
        &mut self,
        tag: Tag,
        handler: TransportHandler,
    ) -> Result<(), TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.check_tag_free(tag)?;
        self.handlers.set_with_transport(tag, handler);
        Ok(())
    }

    /// Whether a receive callback is running (this is a call from inside one).
    /// `Err(TagInUse)` for [`GROUP_CREATE_TAG`] once [`Transport::group_create`] claimed it.
    fn check_tag_free(&self, tag: Tag) -> Result<(), TransportError> {
        if tag == GROUP_CREATE_TAG && self.group_create.is_some() {
            return Err(TransportError::TagInUse {
                tag,
                by: "group_create (it claimed the tag at its first call)",
            });
        }
        Ok(())
    }

    pub fn in_callback(&self) -> bool {
        self.callback_depth > 0
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
    #[inline]
    fn endpoint(&mut self, peer: u32) -> Result<&mut Endpoint, TransportError> {
        // A connected endpoint had a path (one lookup on the send path, not three); the rest
        // out of line, so that the send path saves no registers for it.
        if self
            .eps
            .get(&peer)
            .is_some_and(|e| e.state == EndpointState::Connected)
        {
            return Ok(self.eps.get_mut(&peer).expect("checked"));
        }
        self.endpoint_not_connected(peer)
    }

    /// [`Transport::endpoint`] of a peer not connected yet (or failed, or unknown).
    #[cold]
    #[inline(never)]
    fn endpoint_not_connected(&mut self, peer: u32) -> Result<&mut Endpoint, TransportError> {
        let size = self.size();
        if peer == self.rank() {
            self.own_endpoint()?;
            return Ok(self.eps.get_mut(&peer).expect("made"));
        }
        self.know(peer);
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
            self.w.connect_to_send(peer, Instant::now());
        }
        Ok(self.eps.get_mut(&peer).expect("checked"))
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
}
