//! Drives handshakes over a Hello transport (udcm's UD QP, oob's side channel) and turns
//! their outputs into verbs calls on one [`LocalPort`]. Progress is explicit: call
//! [`Connector::progress`] (from the transport's progress loop); nothing here blocks.

use crate::handshake::{Handshake, Hello, HsError, HsIn, HsOut, QpAddress, Retry};
use crate::rc::LocalPort;
use openib_sys::QueuePair;
use std::collections::HashMap;
use std::time::Instant;

/// Moves Hellos between processes.
pub trait HelloTransport {
    /// Where a peer listens.
    type Addr: Clone;
    fn send(&mut self, to: &Self::Addr, hello: &Hello) -> Result<(), openib_sys::Error>;
    fn poll(&mut self) -> Result<Vec<Hello>, openib_sys::Error>;
}

impl HelloTransport for crate::udcm::UdcmService {
    type Addr = crate::udcm::UdAddress;
    fn send(&mut self, to: &Self::Addr, hello: &Hello) -> Result<(), openib_sys::Error> {
        crate::udcm::UdcmService::send(self, to, hello)
    }
    fn poll(&mut self) -> Result<Vec<Hello>, openib_sys::Error> {
        crate::udcm::UdcmService::poll(self)
    }
}

/// An RC connection to a peer, ready to send.
pub struct Connection {
    pub peer: u32,
    pub pair: u8,
    pub qp: QueuePair,
    pub local: QpAddress,
    pub remote: QpAddress,
    /// The rdmacm id that made the connection (kept for its lifetime), if rdmacm did.
    pub cm_id: Option<openib_sys::cm::CmId>,
}

/// Why a connection attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Handshake(#[from] HsError),
    #[error("verbs: {0}")]
    Verbs(#[from] openib_sys::Error),
    #[error("rank {peer} has no address for this CPC (not in the modex?)")]
    UnknownPeer { peer: u32 },
    #[error("rdmacm: {event} (status {status})")]
    Rdmacm { event: String, status: i32 },
    #[error("no connection to rank {peer} within {after:?}")]
    Timeout {
        peer: u32,
        after: std::time::Duration,
    },
}

struct Pending {
    hs: Handshake,
    qp: Option<(QueuePair, QpAddress)>,
    remote: Option<QpAddress>,
}

/// Connections of one process on one local port, over one transport.
pub struct Connector<T: HelloTransport> {
    me: u32,
    port: LocalPort,
    transport: T,
    retry: Retry,
    peers: HashMap<u32, T::Addr>,
    pending: HashMap<(u32, u8), Pending>,
    established: Vec<Connection>,
    failed: Vec<(u32, u8, ConnectError)>,
    /// Ranks whose hellos were dropped for want of their address, since the last
    /// [`Connector::take_unknown`].
    unknown: std::collections::BTreeSet<u32>,
}

impl<T: HelloTransport> Connector<T> {
    pub fn new(me: u32, port: LocalPort, transport: T, retry: Retry) -> Self {
        Connector {
            me,
            port,
            transport,
            retry,
            peers: HashMap::new(),
            pending: HashMap::new(),
            established: Vec::new(),
            failed: Vec::new(),
            unknown: Default::default(),
        }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Records where `peer` listens (from the modex).
    pub fn add_peer(&mut self, peer: u32, addr: T::Addr) {
        self.peers.insert(peer, addr);
    }

    /// Forgets every handshake with `peer` (its endpoint was removed): a later
    /// [`Connector::connect`] or hello from it starts a fresh one. Without this the finished
    /// handshake stays, and a second connection to the same peer never starts.
    pub fn forget(&mut self, peer: u32) {
        self.pending.retain(|&(p, _), _| p != peer);
    }

    /// Starts connecting to `peer` for port pair `pair` (no-op if already under way).
    pub fn connect(&mut self, peer: u32, pair: u8, now: Instant) {
        if !self.peers.contains_key(&peer) {
            self.failed
                .push((peer, pair, ConnectError::UnknownPeer { peer }));
            return;
        }
        let retry = self.retry;
        let me = self.me;
        let p = self.pending.entry((peer, pair)).or_insert_with(|| Pending {
            hs: Handshake::new(me, peer, pair, retry, now),
            qp: None,
            remote: None,
        });
        let outs = p.hs.handle(HsIn::Start);
        self.run(peer, pair, outs);
    }

    /// Polls the transport, feeds every handshake, and performs what they ask for.
    pub fn progress(&mut self, now: Instant) -> Result<(), openib_sys::Error> {
        for h in self.transport.poll()? {
            if h.to != self.me {
                continue;
            }
            if !self.peers.contains_key(&h.from) {
                tracing::debug!(
                    from = h.from,
                    "hello from a rank with no known address dropped"
                );
                self.unknown.insert(h.from);
                continue;
            }
            let (retry, me) = (self.retry, self.me);
            let p = self
                .pending
                .entry((h.from, h.pair))
                .or_insert_with(|| Pending {
                    hs: Handshake::new(me, h.from, h.pair, retry, now),
                    qp: None,
                    remote: None,
                });
            let outs = p.hs.handle(HsIn::Hello(h));
            self.run(h.from, h.pair, outs);
        }
        let keys: Vec<(u32, u8)> = self.pending.keys().copied().collect();
        for (peer, pair) in keys {
            let Some(p) = self.pending.get_mut(&(peer, pair)) else {
                continue;
            };
            if p.hs.next_deadline().is_some_and(|d| d <= now) {
                let outs = p.hs.handle(HsIn::Tick(now));
                self.run(peer, pair, outs);
            }
        }
        Ok(())
    }

    /// The connections established since the last call.
    pub fn take_established(&mut self) -> Vec<Connection> {
        std::mem::take(&mut self.established)
    }

    /// The ranks whose hellos were dropped because their address is not known (a caller that
    /// reads peers' addresses on demand adds them; the peer's next retry then gets through).
    pub fn take_unknown(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.unknown).into_iter().collect()
    }

    /// The attempts that failed since the last call.
    pub fn take_failed(&mut self) -> Vec<(u32, u8, ConnectError)> {
        std::mem::take(&mut self.failed)
    }

    /// Whether any handshake is still under way.
    pub fn busy(&self) -> bool {
        self.pending.values().any(|p| !p.hs.is_done())
    }

    fn run(&mut self, peer: u32, pair: u8, outs: Vec<HsOut>) {
        let mut queue: std::collections::VecDeque<HsOut> = outs.into();
        while let Some(o) = queue.pop_front() {
            let Some(p) = self.pending.get_mut(&(peer, pair)) else {
                return;
            };
            let next = match o {
                HsOut::CreateQp => match self.port.create_qp() {
                    Ok((qp, addr)) => {
                        p.qp = Some((qp, addr));
                        p.hs.handle(HsIn::QpCreated(addr))
                    }
                    Err(e) => {
                        self.fail(peer, pair, e.into());
                        return;
                    }
                },
                HsOut::Connect(remote) => {
                    let (qp, local) =
                        p.qp.as_ref()
                            .expect("the handshake connects only after CreateQp");
                    match self.port.connect(qp, local.psn, &remote) {
                        Ok(()) => {
                            p.remote = Some(remote);
                            p.hs.handle(HsIn::Connected)
                        }
                        Err(e) => {
                            self.fail(peer, pair, e.into());
                            return;
                        }
                    }
                }
                HsOut::Send(h) => {
                    let addr = self.peers[&peer].clone();
                    if let Err(e) = self.transport.send(&addr, &h) {
                        tracing::debug!(peer, error = %e, "hello send failed (will retry)");
                    }
                    Vec::new()
                }
                HsOut::Established => {
                    if let (Some((qp, local)), Some(remote)) = (p.qp.take(), p.remote) {
                        self.established.push(Connection {
                            peer,
                            pair,
                            qp,
                            local,
                            remote,
                            cm_id: None,
                        });
                    }
                    Vec::new()
                }
                HsOut::Failed(e) => {
                    self.fail(peer, pair, e.into());
                    return;
                }
            };
            queue.extend(next);
        }
    }

    fn fail(&mut self, peer: u32, pair: u8, e: ConnectError) {
        if let Some(p) = self.pending.get_mut(&(peer, pair)) {
            p.qp = None;
        }
        tracing::info!(peer, pair, error = %e, "connection attempt failed");
        self.failed.push((peer, pair, e));
    }
}
