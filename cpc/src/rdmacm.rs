//! rdmacm: connections through librdmacm, addressed by IP and port (the per-process part of
//! rdmacm's modex data). Works on RoCE, and on InfiniBand with IPoIB.
//!
//! The queue pairs are openib's own (on its device context and PD); rdmacm gets their numbers
//! and computes the transition attributes. When two processes connect to each other at once,
//! the lower rank's attempt wins: the lower rank rejects the other's request with a "mine"
//! marker, and the higher rank drops its own attempt and accepts, so exactly one connection
//! results.

use crate::handshake::QpAddress;
use crate::manager::{ConnectError, Connection};
use crate::rc::LocalPort;
use openib_sys::cm::{CmChannel, CmEventKind, CmId};
use openib_sys::ffi::verbs as v;
use openib_sys::QueuePair;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MAGIC: u8 = 0xcd;
/// Reject payload meaning "I am the lower rank: my own request is the connection".
const MINE: &[u8] = &[0xce];
/// Reject payload meaning "openib saw your request and refuses it" (not to be retried).
const REFUSED: &[u8] = &[0xcf];
const RESOLVE_MS: i32 = 2000;
/// Attempts for one connection when the peer side refuses a request without the peer's
/// marker (a refusal its kernel's rdma_cm made, not the peer's rank rule): the first and two
/// more, the n-th retry `RETRY_STEP * n` after the refusal, all within the service's timeout.
const REJECT_TRIES: u8 = 3;
const RETRY_STEP: Duration = Duration::from_millis(50);

fn private(from: u32, to: u32, pair: u8) -> [u8; 10] {
    let mut b = [0u8; 10];
    b[0] = MAGIC;
    b[1..5].copy_from_slice(&from.to_le_bytes());
    b[5..9].copy_from_slice(&to.to_le_bytes());
    b[9] = pair;
    b
}

fn parse_private(b: &[u8]) -> Option<(u32, u32, u8)> {
    (b.len() >= 10 && b[0] == MAGIC).then(|| {
        (
            u32::from_le_bytes(b[1..5].try_into().expect("4")),
            u32::from_le_bytes(b[5..9].try_into().expect("4")),
            b[9],
        )
    })
}

struct Attempt {
    peer: u32,
    pair: u8,
    id: CmId,
    qp: Option<QueuePair>,
    started: Instant,
    /// The peer's QP number, from its connect request (passive side).
    remote_qp: u32,
    /// Requests this connection has sent so far, this one included (active side).
    tries: u8,
}

/// An active attempt to start again after an unmarked refusal.
struct PendingRetry {
    peer: u32,
    pair: u8,
    started: Instant,
    tries: u8,
    at: Instant,
}

/// One process's rdmacm endpoint on one port.
pub struct RdmacmService {
    me: u32,
    port: LocalPort,
    ch: CmChannel,
    _listener: CmId,
    listen_token: usize,
    addr: SocketAddr,
    peers: HashMap<u32, SocketAddr>,
    active: HashMap<usize, Attempt>,
    passive: HashMap<usize, Attempt>,
    /// (peer, pair) the peer promised to connect (after its "mine" reject), with a deadline.
    awaiting: HashMap<(u32, u8), Instant>,
    retries: Vec<PendingRetry>,
    /// Requests still to refuse without a marker, as a peer's rdma_cm may (for tests).
    refuse_unmarked: u32,
    established: Vec<Connection>,
    failed: Vec<(u32, u8, ConnectError)>,
    pub timeout: Duration,
}

impl RdmacmService {
    /// Listens on `ip` (the port's IP address) on a free rdmacm port.
    pub fn bind(
        me: u32,
        port: &LocalPort,
        ip: std::net::IpAddr,
    ) -> Result<RdmacmService, openib_sys::Error> {
        let ch = CmChannel::new()?;
        let listener = ch.create_id()?;
        listener.bind(&SocketAddr::new(ip, 0))?;
        listener.listen(64)?;
        let addr = SocketAddr::new(ip, listener.local_port()?);
        Ok(RdmacmService {
            me,
            port: port.clone(),
            listen_token: listener.token(),
            ch,
            _listener: listener,
            addr,
            peers: HashMap::new(),
            active: HashMap::new(),
            passive: HashMap::new(),
            awaiting: HashMap::new(),
            retries: Vec::new(),
            refuse_unmarked: 0,
            established: Vec::new(),
            failed: Vec::new(),
            timeout: Duration::from_secs(10),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    pub fn add_peer(&mut self, peer: u32, addr: SocketAddr) {
        self.peers.insert(peer, addr);
    }

    /// Starts connecting to `peer` for port pair `pair`.
    pub fn connect(&mut self, peer: u32, pair: u8, now: Instant) {
        self.start(peer, pair, now, 1);
    }

    /// Sends request number `tries` of the connection to (`peer`, `pair`) first asked for at
    /// `started` (address resolution first).
    fn start(&mut self, peer: u32, pair: u8, started: Instant, tries: u8) {
        let Some(dst) = self.peers.get(&peer).copied() else {
            self.failed
                .push((peer, pair, ConnectError::UnknownPeer { peer }));
            return;
        };
        let r = (|| {
            let id = self.ch.create_id()?;
            id.resolve_addr(Some(&SocketAddr::new(self.addr.ip(), 0)), &dst, RESOLVE_MS)?;
            Ok::<CmId, openib_sys::Error>(id)
        })();
        match r {
            Ok(id) => {
                self.active.insert(
                    id.token(),
                    Attempt {
                        peer,
                        pair,
                        id,
                        qp: None,
                        started,
                        remote_qp: 0,
                        tries,
                    },
                );
            }
            Err(e) => self.failed.push((peer, pair, e.into())),
        }
    }

    /// Refuses the next `n` connect requests with an empty reject, as the rdma_cm of a peer's
    /// kernel does when it fails a request before openib sees it: for tests of the retry.
    #[doc(hidden)]
    pub fn refuse_next_requests_unmarked(&mut self, n: u32) {
        self.refuse_unmarked = n;
    }

    pub fn take_established(&mut self) -> Vec<Connection> {
        std::mem::take(&mut self.established)
    }

    pub fn take_failed(&mut self) -> Vec<(u32, u8, ConnectError)> {
        std::mem::take(&mut self.failed)
    }

    /// Handles every waiting rdmacm event and expires stuck attempts.
    pub fn progress(&mut self, now: Instant) -> Result<(), openib_sys::Error> {
        while let Some(ev) = self.ch.poll_event()? {
            tracing::debug!(event = %ev.name, status = ev.status, "rdmacm event");
            if ev.kind == CmEventKind::ConnectRequest && ev.token == self.listen_token {
                let id = ev.new_id.expect("connect requests carry a new id");
                self.on_request(id, &ev.private_data, ev.peer_qp_num, now);
                continue;
            }
            if let Some(a) = self.active.remove(&ev.token) {
                let (peer, pair) = (a.peer, a.pair);
                match self.on_active_event(
                    a,
                    ev.kind,
                    ev.status,
                    &ev.private_data,
                    ev.peer_qp_num,
                    now,
                ) {
                    Ok(Some(a)) => {
                        self.active.insert(ev.token, a);
                    }
                    Ok(None) => {}
                    Err(e) => self.failed.push((peer, pair, e)),
                }
                continue;
            }
            if let Some(a) = self.passive.remove(&ev.token) {
                match ev.kind {
                    CmEventKind::Established => self.finish(a, ev.peer_qp_num),
                    CmEventKind::ConnectError
                    | CmEventKind::Unreachable
                    | CmEventKind::Rejected => self.failed.push((
                        a.peer,
                        a.pair,
                        ConnectError::Rdmacm {
                            event: ev.name.clone(),
                            status: ev.status,
                        },
                    )),
                    _ => {
                        self.passive.insert(ev.token, a);
                    }
                }
            }
        }
        let due: Vec<PendingRetry>;
        (due, self.retries) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|r| now >= r.at);
        for r in due {
            self.start(r.peer, r.pair, r.started, r.tries);
        }
        let timeout = self.timeout;
        let expired: Vec<usize> = self
            .active
            .iter()
            .filter(|(_, a)| now.duration_since(a.started) > timeout)
            .map(|(t, _)| *t)
            .collect();
        for t in expired {
            let a = self.active.remove(&t).expect("listed");
            self.failed.push((
                a.peer,
                a.pair,
                ConnectError::Timeout {
                    peer: a.peer,
                    after: timeout,
                },
            ));
        }
        let waited: Vec<(u32, u8)> = self
            .awaiting
            .iter()
            .filter(|(_, d)| now > **d)
            .map(|(k, _)| *k)
            .collect();
        for (peer, pair) in waited {
            self.awaiting.remove(&(peer, pair));
            self.failed.push((
                peer,
                pair,
                ConnectError::Timeout {
                    peer,
                    after: timeout,
                },
            ));
        }
        Ok(())
    }

    /// `Ok(Some(a))`: keep waiting; `Ok(None)`: finished (established, or handed over to the
    /// peer's own attempt).
    fn on_active_event(
        &mut self,
        mut a: Attempt,
        kind: CmEventKind,
        status: i32,
        data: &[u8],
        peer_qp: u32,
        now: Instant,
    ) -> Result<Option<Attempt>, ConnectError> {
        match kind {
            CmEventKind::AddrResolved => {
                a.id.resolve_route(RESOLVE_MS)?;
                Ok(Some(a))
            }
            CmEventKind::RouteResolved => {
                let qp = self.port.create_qp_reset()?;
                a.id.transition(&qp, &[v::IBV_QPS_INIT], &self.port.params)?;
                // rdmacm grants remote read and atomics in INIT only when it already knows
                // responder resources, which the active side sets later, in rdma_connect.
                qp.set_access(openib_sys::Access::ALL)?;
                self.port.prepare_qp(&qp)?;
                a.id.connect(
                    qp.qp_num(),
                    self.port.srq.is_some(),
                    &private(self.me, a.peer, a.pair),
                )?;
                a.qp = Some(qp);
                Ok(Some(a))
            }
            CmEventKind::ConnectResponse => {
                let qp = a.qp.as_ref().expect("connect responses follow our connect");
                a.id.transition(qp, &[v::IBV_QPS_RTR, v::IBV_QPS_RTS], &self.port.params)?;
                a.id.establish()?;
                self.finish(a, peer_qp);
                Ok(None)
            }
            CmEventKind::Rejected if data.starts_with(MINE) => {
                // The peer (a lower rank) connects to us instead.
                self.awaiting
                    .insert((a.peer, a.pair), a.started + self.timeout);
                Ok(None)
            }
            CmEventKind::Rejected
                if a.tries < REJECT_TRIES
                    && data.iter().all(|b| *b == 0)
                    && now + RETRY_STEP * u32::from(a.tries) < a.started + self.timeout =>
            {
                // Neither the peer's rank rule (MINE) nor a refusal of its openib (REFUSED):
                // the rdma_cm on its side refused before the peer saw the request.
                tracing::info!(
                    peer = a.peer,
                    pair = a.pair,
                    status,
                    "rdmacm: the peer side refused our request without its marker; \
                     retrying (request {} of {REJECT_TRIES})",
                    a.tries + 1
                );
                self.retries.push(PendingRetry {
                    peer: a.peer,
                    pair: a.pair,
                    started: a.started,
                    tries: a.tries + 1,
                    at: now + RETRY_STEP * u32::from(a.tries),
                });
                Ok(None)
            }
            CmEventKind::Established => Ok(Some(a)),
            CmEventKind::AddrError
            | CmEventKind::RouteError
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable
            | CmEventKind::Rejected => Err(ConnectError::Rdmacm {
                event: format!("{kind:?}"),
                status,
            }),
            _ => Ok(Some(a)),
        }
    }

    fn on_request(&mut self, id: CmId, data: &[u8], peer_qp: u32, now: Instant) {
        if self.refuse_unmarked > 0 {
            self.refuse_unmarked -= 1;
            let _ = id.reject(&[]);
            return;
        }
        let Some((from, to, pair)) = parse_private(data) else {
            tracing::info!("rdmacm connect request without openib private data rejected");
            let _ = id.reject(REFUSED);
            return;
        };
        if to != self.me {
            let _ = id.reject(REFUSED);
            return;
        }
        let mine = self
            .active
            .iter()
            .find(|(_, a)| a.peer == from && a.pair == pair)
            .map(|(t, _)| *t);
        if let Some(token) = mine {
            if self.me < from {
                // Our own attempt is the connection; tell the peer to wait for it.
                let _ = id.reject(MINE);
                return;
            }
            // The peer's attempt wins: drop ours.
            self.active.remove(&token);
        }
        self.awaiting.remove(&(from, pair));
        // A retry of ours still waiting is this connection now.
        self.retries.retain(|r| (r.peer, r.pair) != (from, pair));
        let r = (|| {
            let qp = self.port.create_qp_reset()?;
            id.transition(&qp, &[v::IBV_QPS_INIT], &self.port.params)?;
            qp.set_access(openib_sys::Access::ALL)?;
            self.port.prepare_qp(&qp)?;
            id.transition(&qp, &[v::IBV_QPS_RTR, v::IBV_QPS_RTS], &self.port.params)?;
            id.accept(
                qp.qp_num(),
                self.port.srq.is_some(),
                &private(self.me, from, pair),
            )?;
            Ok::<QueuePair, openib_sys::Error>(qp)
        })();
        match r {
            Ok(qp) => {
                self.passive.insert(
                    id.token(),
                    Attempt {
                        peer: from,
                        pair,
                        id,
                        qp: Some(qp),
                        started: now,
                        remote_qp: peer_qp,
                        tries: 0,
                    },
                );
            }
            Err(e) => {
                let _ = id.reject(REFUSED);
                self.failed.push((from, pair, e.into()));
            }
        }
    }

    fn finish(&mut self, a: Attempt, peer_qp: u32) {
        let Some(qp) = a.qp else { return };
        let local = QpAddress {
            qp_num: qp.qp_num(),
            psn: 0,
            lid: self.port.lid,
            gid: self.port.gid,
            mtu: self.port.mtu,
        };
        let peer_qp = if peer_qp != 0 { peer_qp } else { a.remote_qp };
        let remote = QpAddress {
            qp_num: peer_qp,
            psn: 0,
            lid: 0,
            gid: [0; 16],
            mtu: self.port.mtu,
        };
        self.established.push(Connection {
            peer: a.peer,
            pair: a.pair,
            qp,
            local,
            remote,
            cm_id: Some(a.id),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_round_trips_and_rejects_strangers() {
        assert_eq!(parse_private(&private(3, 9, 1)), Some((3, 9, 1)));
        assert_eq!(parse_private(&[0; 10]), None);
        assert_eq!(parse_private(&private(3, 9, 1)[..9]), None);
    }
}
