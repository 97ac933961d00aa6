//! The transport: endpoints per peer, lazy connection on first use, eager sends with tags and
//! receive callbacks, RDMA put/get on registered memory, credit-based flow control, explicit
//! progress. Shaped like Open MPI's BTL 3.1: one module (here: one port) per process, tags with
//! callbacks, registration handles, put/get, progress.
//!
//! Flow control: each endpoint posts `recv_depth` receive buffers. A sender holds one credit per
//! free buffer of the receiver (`recv_depth - CTL_RESERVE` for data); every message carries the
//! credits its sender returns (buffers it reposted) and the control credits it returns. When
//! credits pile up and no data goes the other way, a credit-only control message returns them,
//! using one of `CTL_RESERVE` reserved buffers (control credits come back in every header), so a
//! sender never overruns the receiver's posted buffers and receiver-not-ready never happens.
//!
//! Ordering: messages to one peer are delivered in the order `send` was called (one RC queue
//! pair per peer; queued sends drain in order). Puts and gets are unordered with sends.

use crate::ping::{PingConfig, PingError, Wireup};
use crate::runtime::Runtime;
use openib_cpc::Connection;
use openib_sys::{Access, MemoryRegion, RecvRequest, SendOp, SendRequest, WorkCompletion};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A message tag (1..=255; 0 is the transport's own control tag).
pub type Tag = u8;

/// Header of every eager message: tag, flags, returned credits, returned control credits, length.
const HDR: usize = 8;
const FLAG_CTL: u8 = 1;
/// Send and receive queue depth of every RC queue pair (`recv_depth` is capped to it).
pub const MAX_QUEUE: u32 = 256;
/// Receive buffers of each endpoint kept for credit-only control messages.
pub const CTL_RESERVE: u32 = 2;

const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;
const KIND_RDMA: u64 = 3;

fn wr(peer: u32, kind: u64, slot: usize) -> u64 {
    (peer as u64) << 32 | kind << 24 | slot as u64
}

fn unwr(id: u64) -> (u32, u64, usize) {
    (
        (id >> 32) as u32,
        (id >> 24) & 0xff,
        (id & 0xff_ffff) as usize,
    )
}

/// Transport settings (environment: `OPENIB_EAGER_LIMIT`, `OPENIB_RECV_DEPTH`).
#[derive(Clone)]
pub struct TransportConfig {
    pub wireup: PingConfig,
    /// Largest eager payload in bytes (the header comes on top); at most 65,535.
    pub eager_limit: usize,
    /// Receive buffers posted per endpoint.
    pub recv_depth: u32,
}

impl TransportConfig {
    pub fn new(wireup: PingConfig) -> TransportConfig {
        let env = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        TransportConfig {
            wireup,
            eager_limit: env("OPENIB_EAGER_LIMIT", 8192).clamp(64, 65_535),
            recv_depth: env("OPENIB_RECV_DEPTH", 64).clamp(8, MAX_QUEUE as usize) as u32,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Wireup(#[from] PingError),
    #[error("verbs: {0}")]
    Verbs(#[from] openib_sys::Error),
    #[error("rank {peer} is not reachable: {why}")]
    NoPath { peer: u32, why: String },
    #[error("the endpoint to rank {peer} failed: {why}")]
    EndpointFailed { peer: u32, why: String },
    #[error(
        "message of {len} bytes exceeds the eager limit of {limit} (use put/get for large data)"
    )]
    TooLarge { len: usize, limit: usize },
    #[error("tag 0 is reserved for the transport's control messages")]
    ReservedTag,
    #[error("rank {peer} is out of range (job size {size})")]
    BadPeer { peer: u32, size: u32 },
    #[error("{what} did not finish within {timeout:?}")]
    Timeout { what: String, timeout: Duration },
    #[error("range {offset}+{len} is outside the {size}-byte region")]
    Range { offset: u64, len: u64, size: u64 },
}

/// A registered region's remote handle, to give a peer (through any message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl RemoteRegion {
    pub fn of(mr: &MemoryRegion) -> RemoteRegion {
        RemoteRegion {
            addr: mr.addr(),
            rkey: mr.rkey(),
            len: mr.len() as u64,
        }
    }
    /// 20 bytes, little-endian.
    pub fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        b[12..].copy_from_slice(&self.len.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Option<RemoteRegion> {
        (b.len() == 20).then(|| RemoteRegion {
            addr: u64::from_le_bytes(b[..8].try_into().expect("8")),
            rkey: u32::from_le_bytes(b[8..12].try_into().expect("4")),
            len: u64::from_le_bytes(b[12..].try_into().expect("8")),
        })
    }
}

/// What finished, reported by [`Transport::progress`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A send, put or get (by its token) completed.
    Done { peer: u32, token: u64 },
    /// It failed, with the endpoint's error.
    Failed {
        peer: u32,
        token: u64,
        error: String,
    },
}

enum Op {
    Send {
        tag: Tag,
        data: Vec<u8>,
        token: u64,
    },
    Rdma {
        write: bool,
        local: Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
        token: u64,
    },
}

impl Op {
    fn token(&self) -> u64 {
        match self {
            Op::Send { token, .. } | Op::Rdma { token, .. } => *token,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointState {
    Idle,
    Connecting,
    Connected,
    Failed(String),
}

struct Endpoint {
    state: EndpointState,
    conn: Option<Connection>,
    recv_mr: Option<MemoryRegion>,
    send_mr: Option<MemoryRegion>,
    free_send: Vec<usize>,
    /// Send slot -> token of the message in it.
    in_send: HashMap<usize, u64>,
    rdma: HashMap<usize, (Arc<MemoryRegion>, u64)>,
    next_rdma: usize,
    credits: u32,
    ctl_credits: u32,
    to_return: u32,
    ctl_to_return: u32,
    pending: VecDeque<Op>,
}

/// Callback for received messages of one tag: (source rank, payload).
pub type Handler = Box<dyn FnMut(u32, &[u8]) + Send>;

/// The transport of one process.
pub struct Transport {
    rt: Box<dyn Runtime>,
    w: Wireup,
    cfg: TransportConfig,
    eps: BTreeMap<u32, Endpoint>,
    handlers: HashMap<Tag, Handler>,
    done: Vec<Completion>,
    next_token: u64,
    wcs: Vec<WorkCompletion>,
}

impl Transport {
    /// Wires up through `rt` (discovery, CPC services, modex exchange); connections stay lazy.
    pub fn open(rt: Box<dyn Runtime>, cfg: TransportConfig) -> Result<Transport, TransportError> {
        let w = Wireup::open(rt.as_ref(), &cfg.wireup)?;
        let eps = w
            .plans
            .keys()
            .map(|&p| {
                (
                    p,
                    Endpoint {
                        state: EndpointState::Idle,
                        conn: None,
                        recv_mr: None,
                        send_mr: None,
                        free_send: Vec::new(),
                        in_send: HashMap::new(),
                        rdma: HashMap::new(),
                        next_rdma: 0,
                        credits: 0,
                        ctl_credits: 0,
                        to_return: 0,
                        ctl_to_return: 0,
                        pending: VecDeque::new(),
                    },
                )
            })
            .collect();
        Ok(Transport {
            rt,
            w,
            cfg,
            eps,
            handlers: HashMap::new(),
            done: Vec::new(),
            next_token: 1,
            wcs: Vec::new(),
        })
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

    /// Registers the receive callback of `tag` (replacing any earlier one).
    pub fn on_tag(&mut self, tag: Tag, handler: Handler) -> Result<(), TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        self.handlers.insert(tag, handler);
        Ok(())
    }

    /// Registers `len` bytes of memory for put/get (remote read, write and atomics allowed).
    pub fn register(&self, len: usize) -> Result<Arc<MemoryRegion>, TransportError> {
        Ok(Arc::new(MemoryRegion::alloc(
            &self.w.port().pd,
            len,
            Access::ALL,
        )?))
    }

    /// The flow-control counters of an endpoint, for diagnostics.
    pub fn debug_endpoint(&self, peer: u32) -> String {
        match self.eps.get(&peer) {
            None => "none".into(),
            Some(e) => format!(
                "{:?} credits {} ctl {} to_return {} ctl_to_return {} pending {} in_send {} rdma {} free_send {}",
                e.state,
                e.credits,
                e.ctl_credits,
                e.to_return,
                e.ctl_to_return,
                e.pending.len(),
                e.in_send.len(),
                e.rdma.len(),
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

    fn enqueue(&mut self, peer: u32, op: Op) -> Result<u64, TransportError> {
        let size = self.size();
        let token = op.token();
        let plan_err = match self.w.plans.get(&peer) {
            None => return Err(TransportError::BadPeer { peer, size }),
            Some(Err(why)) => Some(why.clone()),
            Some(Ok(_)) => None,
        };
        if let Some(why) = plan_err {
            return Err(TransportError::NoPath { peer, why });
        }
        let ep = self
            .eps
            .get_mut(&peer)
            .expect("an endpoint per planned peer");
        if let EndpointState::Failed(why) = &ep.state {
            return Err(TransportError::EndpointFailed {
                peer,
                why: why.clone(),
            });
        }
        ep.pending.push_back(op);
        if ep.state == EndpointState::Idle {
            ep.state = EndpointState::Connecting;
            self.w.connect(peer, Instant::now());
        }
        self.drain(peer)?;
        Ok(token)
    }

    /// Sends `data` with `tag` to `peer` (eager; connects on first use). Returns a token that a
    /// later [`Completion`] names. The data is copied: the caller may reuse it at once.
    pub fn send(&mut self, peer: u32, tag: Tag, data: &[u8]) -> Result<u64, TransportError> {
        if tag == 0 {
            return Err(TransportError::ReservedTag);
        }
        if data.len() > self.cfg.eager_limit {
            return Err(TransportError::TooLarge {
                len: data.len(),
                limit: self.cfg.eager_limit,
            });
        }
        let token = self.token();
        self.enqueue(
            peer,
            Op::Send {
                tag,
                data: data.to_vec(),
                token,
            },
        )
    }

    /// RDMA write of `local[offset..offset+len]` to `remote` at `roffset`.
    pub fn put(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, true, local, offset, remote, roffset, len)
    }

    /// RDMA read of `remote` at `roffset` into `local[offset..offset+len]`.
    pub fn get(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, false, local, offset, remote, roffset, len)
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma(
        &mut self,
        peer: u32,
        write: bool,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        if offset.checked_add(len).is_none_or(|e| e > local.len()) {
            return Err(TransportError::Range {
                offset: offset as u64,
                len: len as u64,
                size: local.len() as u64,
            });
        }
        if roffset
            .checked_add(len as u64)
            .is_none_or(|e| e > remote.len)
        {
            return Err(TransportError::Range {
                offset: roffset,
                len: len as u64,
                size: remote.len,
            });
        }
        let token = self.token();
        self.enqueue(
            peer,
            Op::Rdma {
                write,
                local: local.clone(),
                offset,
                remote,
                roffset,
                len,
                token,
            },
        )
    }

    /// Connects to every peer now instead of on first use (for benchmarks and wire-up timing).
    pub fn connect_all(&mut self, timeout: Duration) -> Result<(), TransportError> {
        let peers: Vec<u32> = self.eps.keys().copied().collect();
        for &p in &peers {
            let ep = self.eps.get_mut(&p).expect("listed");
            if ep.state == EndpointState::Idle && matches!(self.w.plans.get(&p), Some(Ok(_))) {
                ep.state = EndpointState::Connecting;
                self.w.connect(p, Instant::now());
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.progress()?;
            let waiting: Vec<u32> = self
                .eps
                .iter()
                .filter(|(p, e)| {
                    e.state == EndpointState::Connecting
                        || (e.state == EndpointState::Idle
                            && matches!(self.w.plans.get(p), Some(Ok(_))))
                })
                .map(|(p, _)| *p)
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

    /// Progresses until nothing is queued or in flight, or `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<Vec<Completion>, TransportError> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            self.progress()?;
            out.append(&mut self.done);
            let busy = self
                .eps
                .values()
                .filter(|e| !matches!(e.state, EndpointState::Failed(_)))
                .any(|e| !e.pending.is_empty() || !e.in_send.is_empty() || !e.rdma.is_empty());
            if !busy {
                return Ok(out);
            }
            if Instant::now() > deadline {
                return Err(TransportError::Timeout {
                    what: "flush".into(),
                    timeout,
                });
            }
        }
    }

    /// Takes the completions gathered so far.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.done)
    }

    /// Makes progress: connections, completions, receive callbacks, queued operations and
    /// credit returns. Returns how many completions it handled.
    pub fn progress(&mut self) -> Result<usize, TransportError> {
        let (ok, bad) = self.w.poll(Instant::now())?;
        for (_, c) in ok {
            let peer = c.peer;
            self.attach(c)?;
            self.drain(peer)?;
        }
        for (cpc, peer, e) in bad {
            self.fail(peer, format!("{cpc}: {e}"));
        }
        for dead in self.rt.failed() {
            if self
                .eps
                .get(&dead)
                .is_some_and(|e| !matches!(e.state, EndpointState::Failed(_)))
            {
                self.fail(dead, format!("rank {dead} died"));
            }
        }
        let lp = self.w.port().clone();
        self.wcs.clear();
        lp.recv_cq.poll(&mut self.wcs, 32)?;
        lp.send_cq.poll(&mut self.wcs, 32)?;
        let n = self.wcs.len();
        let wcs = std::mem::take(&mut self.wcs);
        let mut touched = Vec::new();
        for wc in &wcs {
            let (peer, kind, slot) = unwr(wc.wr_id);
            touched.push(peer);
            if !wc.is_success() {
                self.fail(
                    peer,
                    format!(
                        "work completion error: {} (vendor error {:#x})",
                        wc.status_str(),
                        wc.vendor_err
                    ),
                );
                continue;
            }
            match kind {
                KIND_RECV => self.on_recv(peer, slot, wc.byte_len as usize)?,
                KIND_SEND => {
                    if let Some(ep) = self.eps.get_mut(&peer) {
                        ep.free_send.push(slot);
                        if let Some(token) = ep.in_send.remove(&slot) {
                            if token != 0 {
                                self.done.push(Completion::Done { peer, token });
                            }
                        }
                    }
                }
                KIND_RDMA => {
                    if let Some((_, token)) =
                        self.eps.get_mut(&peer).and_then(|ep| ep.rdma.remove(&slot))
                    {
                        self.done.push(Completion::Done { peer, token });
                    }
                }
                _ => {}
            }
        }
        self.wcs = wcs;
        touched.sort_unstable();
        touched.dedup();
        for p in touched {
            self.drain(p)?;
        }
        Ok(n)
    }

    fn attach(&mut self, c: Connection) -> Result<(), TransportError> {
        let (depth, slot) = (self.cfg.recv_depth as usize, HDR + self.cfg.eager_limit);
        let pd = self.w.port().pd.clone();
        let Some(ep) = self.eps.get_mut(&c.peer) else {
            return Ok(());
        };
        if ep.conn.is_some() {
            // Never replace a live connection (its QP carries messages in flight and the peer's
            // credits): a second connection to the same peer is dropped.
            tracing::warn!(
                peer = c.peer,
                "second connection to a connected peer dropped"
            );
            return Ok(());
        }
        let recv = MemoryRegion::alloc(&pd, depth * slot, Access::LOCAL_WRITE)?;
        for i in 0..depth {
            c.qp.post_recv(&RecvRequest {
                wr_id: wr(c.peer, KIND_RECV, i),
                sges: vec![recv.sge(i * slot, slot)?],
            })?;
        }
        let send_slots = depth.min(64);
        ep.send_mr = Some(MemoryRegion::alloc(
            &pd,
            send_slots * slot,
            Access::LOCAL_WRITE,
        )?);
        ep.free_send = (0..send_slots).rev().collect();
        ep.recv_mr = Some(recv);
        ep.credits = self.cfg.recv_depth - CTL_RESERVE;
        ep.ctl_credits = CTL_RESERVE;
        ep.conn = Some(c);
        ep.state = EndpointState::Connected;
        Ok(())
    }

    fn on_recv(&mut self, peer: u32, slot: usize, len: usize) -> Result<(), TransportError> {
        let slot_len = HDR + self.cfg.eager_limit;
        let Some(ep) = self.eps.get_mut(&peer) else {
            return Ok(());
        };
        let (Some(mr), Some(conn)) = (ep.recv_mr.as_ref(), ep.conn.as_ref()) else {
            return Ok(());
        };
        let b = &mr.as_slice()[slot * slot_len..slot * slot_len + len.min(slot_len)];
        if b.len() < HDR {
            return Err(TransportError::EndpointFailed {
                peer,
                why: format!("runt message of {} bytes", b.len()),
            });
        }
        let (tag, flags) = (b[0], b[1]);
        ep.credits += u16::from_le_bytes([b[2], b[3]]) as u32;
        ep.ctl_credits += b[4] as u32;
        let plen = u16::from_le_bytes([b[6], b[7]]) as usize;
        let payload = b[HDR..HDR + plen.min(b.len() - HDR)].to_vec();
        conn.qp.post_recv(&RecvRequest {
            wr_id: wr(peer, KIND_RECV, slot),
            sges: vec![mr.sge(slot * slot_len, slot_len)?],
        })?;
        if flags & FLAG_CTL != 0 {
            ep.ctl_to_return += 1;
        } else {
            ep.to_return += 1;
            match self.handlers.get_mut(&tag) {
                Some(h) => h(peer, &payload),
                None => tracing::warn!(peer, tag, "message for a tag with no handler dropped"),
            }
        }
        Ok(())
    }

    /// Posts what the endpoint's credits and send slots allow, then a credit return if due.
    fn drain(&mut self, peer: u32) -> Result<(), TransportError> {
        let slot_len = HDR + self.cfg.eager_limit;
        let threshold = (self.cfg.recv_depth / 2).max(1);
        let Some(ep) = self.eps.get_mut(&peer) else {
            return Ok(());
        };
        if ep.state != EndpointState::Connected {
            return Ok(());
        }
        let conn = ep.conn.as_ref().expect("connected");
        while let Some(op) = ep.pending.front() {
            // Keep a margin of the send queue for credit returns.
            if ep.in_send.len() + ep.rdma.len() + 2 >= MAX_QUEUE as usize {
                break;
            }
            match op {
                Op::Send { .. } if ep.credits == 0 || ep.free_send.is_empty() => break,
                Op::Send { .. } => {
                    let Some(Op::Send { tag, data, token }) = ep.pending.pop_front() else {
                        unreachable!()
                    };
                    let slot = ep.free_send.pop().expect("checked");
                    let mr = ep.send_mr.as_mut().expect("connected");
                    let b =
                        &mut mr.as_mut_slice()[slot * slot_len..slot * slot_len + HDR + data.len()];
                    let ret = ep.to_return.min(u16::MAX as u32);
                    let ctl = ep.ctl_to_return.min(u8::MAX as u32);
                    b[0] = tag;
                    b[1] = 0;
                    b[2..4].copy_from_slice(&(ret as u16).to_le_bytes());
                    b[4] = ctl as u8;
                    b[5] = 0;
                    b[6..8].copy_from_slice(&(data.len() as u16).to_le_bytes());
                    b[HDR..].copy_from_slice(&data);
                    let sge = mr.sge(slot * slot_len, HDR + data.len())?;
                    conn.qp.post_send(&SendRequest {
                        wr_id: wr(peer, KIND_SEND, slot),
                        op: SendOp::Send,
                        sges: vec![sge],
                        signaled: true,
                        inline: HDR + data.len() <= 64,
                    })?;
                    ep.to_return -= ret;
                    ep.ctl_to_return -= ctl;
                    ep.credits -= 1;
                    ep.in_send.insert(slot, token);
                }
                Op::Rdma { .. } => {
                    let Some(Op::Rdma {
                        write,
                        local,
                        offset,
                        remote,
                        roffset,
                        len,
                        token,
                    }) = ep.pending.pop_front()
                    else {
                        unreachable!()
                    };
                    let slot = ep.next_rdma;
                    ep.next_rdma = (ep.next_rdma + 1) % 0xff_ffff;
                    let op = if write {
                        SendOp::RdmaWrite {
                            remote_addr: remote.addr + roffset,
                            rkey: remote.rkey,
                        }
                    } else {
                        SendOp::RdmaRead {
                            remote_addr: remote.addr + roffset,
                            rkey: remote.rkey,
                        }
                    };
                    conn.qp.post_send(&SendRequest {
                        wr_id: wr(peer, KIND_RDMA, slot),
                        op,
                        sges: vec![local.sge(offset, len)?],
                        signaled: true,
                        inline: false,
                    })?;
                    ep.rdma.insert(slot, (local, token));
                }
            }
        }
        // Return credits with a control message when they pile up and nothing else carries them.
        if ep.pending.is_empty()
            && ep.to_return >= threshold
            && ep.ctl_credits > 0
            && !ep.free_send.is_empty()
        {
            let slot = ep.free_send.pop().expect("checked");
            let mr = ep.send_mr.as_mut().expect("connected");
            let ret = ep.to_return.min(u16::MAX as u32);
            let ctl = ep.ctl_to_return.min(u8::MAX as u32);
            let b = &mut mr.as_mut_slice()[slot * slot_len..slot * slot_len + HDR];
            b.copy_from_slice(&[0, FLAG_CTL, ret as u8, (ret >> 8) as u8, ctl as u8, 0, 0, 0]);
            let sge = mr.sge(slot * slot_len, HDR)?;
            conn.qp.post_send(&SendRequest {
                wr_id: wr(peer, KIND_SEND, slot),
                op: SendOp::Send,
                sges: vec![sge],
                signaled: true,
                inline: true,
            })?;
            ep.to_return -= ret;
            ep.ctl_to_return -= ctl;
            ep.ctl_credits -= 1;
            ep.in_send.insert(slot, 0);
        }
        Ok(())
    }

    fn fail(&mut self, peer: u32, why: String) {
        let Some(ep) = self.eps.get_mut(&peer) else {
            return;
        };
        if matches!(ep.state, EndpointState::Failed(_)) {
            return;
        }
        tracing::info!(peer, error = %why, "endpoint failed");
        ep.state = EndpointState::Failed(why.clone());
        let mut tokens: Vec<u64> = ep.pending.drain(..).map(|o| o.token()).collect();
        tokens.extend(ep.in_send.drain().map(|(_, t)| t).filter(|t| *t != 0));
        tokens.extend(ep.rdma.drain().map(|(_, (_, t))| t));
        if let Some(c) = &ep.conn {
            let _ = c.qp.to_error();
        }
        for token in tokens {
            self.done.push(Completion::Failed {
                peer,
                token,
                error: why.clone(),
            });
        }
    }
}
