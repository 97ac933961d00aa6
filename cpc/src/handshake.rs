//! The connection handshake of the message-based CPCs (udcm over UD datagrams, oob over the
//! side channel), as a sans-IO state machine.
//!
//! The protocol is symmetric: each side sends a [`Hello`] with its RC queue pair's address;
//! whoever receives a peer's Hello creates its own queue pair if it has none, connects it to the
//! peer (RTR, RTS) and answers with its Hello marked `ack` ("I have yours"). A side is
//! established once its queue pair is connected and the peer acknowledged. Either side may start
//! (the first send of a lazy connection starts it); when both start at once, each still creates
//! exactly one queue pair for the pair and both connect to each other, so a simultaneous start
//! ends in exactly one connection. Lost datagrams are covered by retransmitting the Hello until
//! it is acknowledged, a bounded number of times.

use std::time::{Duration, Instant};

/// The address of one side's RC queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAddress {
    pub qp_num: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active MTU of the sending side's port (verbs enum).
    pub mtu: u8,
}

/// The one handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender's job rank and the receiver's.
    pub from: u32,
    pub to: u32,
    /// Which port pair of the two processes this is for (index into the pair list).
    pub pair: u8,
    pub addr: QpAddress,
    /// The sender has the receiver's address and is connected to it.
    pub ack: bool,
    /// The sender is established and answers only so the receiver can finish: never answer a
    /// final Hello (this is what stops two established sides from echoing each other).
    pub fin: bool,
}

impl Hello {
    /// Wire size of [`Hello::encode`].
    pub const LEN: usize = 1 + 4 + 4 + 1 + 4 + 4 + 2 + 16 + 1 + 1;
    const MAGIC: u8 = 0xc9;

    /// Little-endian fields in declaration order after a magic byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Self::MAGIC;
        b[1..5].copy_from_slice(&self.from.to_le_bytes());
        b[5..9].copy_from_slice(&self.to.to_le_bytes());
        b[9] = self.pair;
        b[10..14].copy_from_slice(&self.addr.qp_num.to_le_bytes());
        b[14..18].copy_from_slice(&self.addr.psn.to_le_bytes());
        b[18..20].copy_from_slice(&self.addr.lid.to_le_bytes());
        b[20..36].copy_from_slice(&self.addr.gid);
        b[36] = self.addr.mtu;
        b[37] = self.ack as u8 | (self.fin as u8) << 1;
        b
    }

    /// Decodes exactly [`Hello::LEN`] bytes; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != Self::LEN || b[0] != Self::MAGIC || b[37] > 3 || !(1..=5).contains(&b[36]) {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Some(Hello {
            from: u32_at(1),
            to: u32_at(5),
            pair: b[9],
            addr: QpAddress {
                qp_num: u32_at(10),
                psn: u32_at(14),
                lid: u16::from_le_bytes([b[18], b[19]]),
                gid: b[20..36].try_into().expect("16 bytes"),
                mtu: b[36],
            },
            ack: b[37] & 1 != 0,
            fin: b[37] & 2 != 0,
        })
    }
}

/// Inputs to a [`Handshake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HsIn {
    /// This side wants the connection (first send).
    Start,
    /// The queue pair asked for by [`HsOut::CreateQp`] exists, with this address.
    QpCreated(QpAddress),
    /// [`HsOut::Connect`] finished (the queue pair is RTS).
    Connected,
    /// A Hello from the peer.
    Hello(Hello),
    Tick(Instant),
}

/// Outputs of a [`Handshake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HsOut {
    /// Create this side's RC queue pair for the pair (once).
    CreateQp,
    /// Move the queue pair to RTR then RTS toward this remote address.
    Connect(QpAddress),
    /// Send this Hello to the peer.
    Send(Hello),
    /// The connection is up on both sides.
    Established,
    /// The handshake failed.
    Failed(HsError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HsError {
    #[error("no answer from rank {peer} after {attempts} attempts over {elapsed:?}")]
    Timeout {
        peer: u32,
        attempts: u32,
        elapsed: Duration,
    },
    #[error("rank {peer} changed its queue pair during the handshake (it restarted?)")]
    PeerChanged { peer: u32 },
}

/// Retransmission schedule: the first retry after `initial`, doubling up to `max_interval`,
/// giving up after `attempts` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub initial: Duration,
    pub max_interval: Duration,
    pub attempts: u32,
}

impl Default for Retry {
    /// 20 ms, doubling to 1 s, 12 sends: gives up after about 8 s (rxe's UD path under qemu
    /// needs about 3.4 ms per round trip; real fabrics microseconds).
    fn default() -> Self {
        Retry {
            initial: Duration::from_millis(20),
            max_interval: Duration::from_secs(1),
            attempts: 12,
        }
    }
}

/// One side of one pair's handshake.
#[derive(Debug)]
pub struct Handshake {
    me: u32,
    peer: u32,
    pair: u8,
    retry: Retry,
    local: Option<QpAddress>,
    remote: Option<QpAddress>,
    qp_requested: bool,
    connect_requested: bool,
    connected: bool,
    peer_acked: bool,
    started: Option<Instant>,
    sends: u32,
    next_send: Option<Instant>,
    interval: Duration,
    done: bool,
    now: Instant,
}

impl Handshake {
    pub fn new(me: u32, peer: u32, pair: u8, retry: Retry, now: Instant) -> Handshake {
        Handshake {
            me,
            peer,
            pair,
            retry,
            local: None,
            remote: None,
            qp_requested: false,
            connect_requested: false,
            connected: false,
            peer_acked: false,
            started: None,
            sends: 0,
            next_send: None,
            interval: retry.initial,
            done: false,
            now,
        }
    }

    pub fn is_established(&self) -> bool {
        self.done && self.connected && self.peer_acked
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// When the machine next needs a [`HsIn::Tick`].
    pub fn next_deadline(&self) -> Option<Instant> {
        (!self.done).then_some(self.next_send).flatten()
    }

    pub fn handle(&mut self, input: HsIn) -> Vec<HsOut> {
        let mut out = Vec::new();
        if self.done {
            // Keep answering a peer that still retransmits (it missed our ack), so it can finish.
            if let (HsIn::Hello(h), Some(local)) = (input, self.local) {
                if h.from == self.peer && h.pair == self.pair && !h.fin && self.connected {
                    out.push(HsOut::Send(self.hello(local, true, true)));
                }
            }
            return out;
        }
        match input {
            HsIn::Start => {
                self.started.get_or_insert(self.now);
                self.ensure_qp(&mut out);
            }
            HsIn::QpCreated(addr) => {
                self.local = Some(addr);
                if let Some(r) = self.remote {
                    self.request_connect(r, &mut out);
                } else {
                    self.send_hello(&mut out);
                }
            }
            HsIn::Connected => {
                self.connected = true;
                self.send_hello(&mut out);
                self.check_done(&mut out);
            }
            HsIn::Hello(h) if h.from == self.peer && h.to == self.me && h.pair == self.pair => {
                self.started.get_or_insert(self.now);
                match self.remote {
                    Some(r) if r != h.addr => {
                        self.done = true;
                        out.push(HsOut::Failed(HsError::PeerChanged { peer: self.peer }));
                        return out;
                    }
                    _ => self.remote = Some(h.addr),
                }
                if h.ack {
                    self.peer_acked = true;
                }
                match self.local {
                    None => self.ensure_qp(&mut out),
                    Some(_) if !self.connect_requested => self.request_connect(h.addr, &mut out),
                    Some(_) => {}
                }
                self.check_done(&mut out);
                // Connected already: tell the peer (again) that we have its address.
                if let (true, false, Some(l)) = (self.connected, h.fin, self.local) {
                    out.push(HsOut::Send(self.hello(l, true, self.done)));
                }
            }
            HsIn::Hello(h) => tracing::debug!(
                ?h,
                me = self.me,
                peer = self.peer,
                "hello for another pair ignored"
            ),
            HsIn::Tick(now) => {
                self.now = now;
                if let Some(t) = self.next_send {
                    if now >= t {
                        if self.sends >= self.retry.attempts {
                            self.done = true;
                            let elapsed =
                                now.saturating_duration_since(self.started.unwrap_or(now));
                            out.push(HsOut::Failed(HsError::Timeout {
                                peer: self.peer,
                                attempts: self.sends,
                                elapsed,
                            }));
                        } else {
                            self.interval = (self.interval * 2).min(self.retry.max_interval);
                            self.send_hello(&mut out);
                        }
                    }
                }
            }
        }
        out
    }

    fn ensure_qp(&mut self, out: &mut Vec<HsOut>) {
        if !self.qp_requested {
            self.qp_requested = true;
            out.push(HsOut::CreateQp);
        }
    }

    fn request_connect(&mut self, remote: QpAddress, out: &mut Vec<HsOut>) {
        if !self.connect_requested {
            self.connect_requested = true;
            out.push(HsOut::Connect(remote));
        }
    }

    fn hello(&self, local: QpAddress, ack: bool, fin: bool) -> Hello {
        Hello {
            from: self.me,
            to: self.peer,
            pair: self.pair,
            addr: local,
            ack,
            fin,
        }
    }

    /// Sends (or re-sends) our Hello, acknowledging when we are connected.
    fn send_hello(&mut self, out: &mut Vec<HsOut>) {
        let Some(local) = self.local else { return };
        self.sends += 1;
        out.push(HsOut::Send(self.hello(local, self.connected, false)));
        // Keep retransmitting until the peer has acknowledged us.
        self.next_send = (!self.peer_acked).then(|| self.now + self.interval);
    }

    fn check_done(&mut self, out: &mut Vec<HsOut>) {
        if self.connected && self.peer_acked && !self.done {
            self.done = true;
            self.next_send = None;
            out.push(HsOut::Established);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn addr(qp: u32) -> QpAddress {
        QpAddress {
            qp_num: qp,
            psn: qp * 3,
            lid: 0,
            gid: [qp as u8; 16],
            mtu: 3,
        }
    }

    /// Two sides, a lossy in-order network that drops the messages `drop` selects, and the QP
    /// actions done at once. Returns (established a, established b, QPs created a, b, connects).
    fn run(
        start_a: bool,
        start_b: bool,
        drop: impl Fn(usize) -> bool,
    ) -> (bool, bool, u32, u32, Vec<(u32, QpAddress)>) {
        let t0 = Instant::now();
        let mut sides = [
            Handshake::new(0, 1, 0, Retry::default(), t0),
            Handshake::new(1, 0, 0, Retry::default(), t0),
        ];
        let mut created = [0u32; 2];
        let mut connects = Vec::new();
        let mut wire: VecDeque<(usize, Hello)> = VecDeque::new();
        let mut inputs: VecDeque<(usize, HsIn)> = VecDeque::new();
        if start_a {
            inputs.push_back((0, HsIn::Start));
        }
        if start_b {
            inputs.push_back((1, HsIn::Start));
        }
        let mut sent = 0usize;
        let mut now = t0;
        for _round in 0..10_000 {
            while let Some((i, inp)) = inputs.pop_front() {
                for o in sides[i].handle(inp) {
                    match o {
                        HsOut::CreateQp => {
                            created[i] += 1;
                            inputs.push_back((i, HsIn::QpCreated(addr(100 + i as u32))));
                        }
                        HsOut::Connect(r) => {
                            connects.push((i as u32, r));
                            inputs.push_back((i, HsIn::Connected));
                        }
                        HsOut::Send(h) => {
                            // Round-trip through the wire format.
                            let h = Hello::decode(&h.encode()).unwrap();
                            if !drop(sent) {
                                wire.push_back((1 - i, h));
                            }
                            sent += 1;
                        }
                        HsOut::Established | HsOut::Failed(_) => {}
                    }
                }
            }
            if let Some((to, h)) = wire.pop_front() {
                inputs.push_back((to, HsIn::Hello(h)));
                continue;
            }
            if sides.iter().all(|s| s.is_done()) {
                break;
            }
            now += Duration::from_millis(10);
            inputs.push_back((0, HsIn::Tick(now)));
            inputs.push_back((1, HsIn::Tick(now)));
        }
        assert!(
            wire.is_empty() && sent < 64,
            "the handshake must go quiet: {sent} messages, {} in flight",
            wire.len()
        );
        (
            sides[0].is_established(),
            sides[1].is_established(),
            created[0],
            created[1],
            connects,
        )
    }

    #[test]
    fn one_side_starts() {
        let (a, b, ca, cb, conns) = run(true, false, |_| false);
        assert!(a && b);
        assert_eq!((ca, cb), (1, 1));
        assert_eq!(conns, vec![(1, addr(100)), (0, addr(101))]);
    }

    #[test]
    fn simultaneous_start_is_one_connection() {
        let (a, b, ca, cb, conns) = run(true, true, |_| false);
        assert!(a && b);
        assert_eq!((ca, cb), (1, 1), "exactly one QP per side");
        assert_eq!(conns.len(), 2, "each side connects once: {conns:?}");
    }

    #[test]
    fn every_single_loss_is_recovered() {
        for lost in 0..8 {
            let (a, b, ca, cb, _) = run(true, false, |i| i == lost);
            assert!(a && b, "message {lost} lost");
            assert_eq!((ca, cb), (1, 1));
        }
    }

    #[test]
    fn a_silent_peer_times_out() {
        let t0 = Instant::now();
        let mut h = Handshake::new(
            0,
            1,
            0,
            Retry {
                initial: Duration::from_millis(10),
                max_interval: Duration::from_millis(40),
                attempts: 4,
            },
            t0,
        );
        assert_eq!(h.handle(HsIn::Start), vec![HsOut::CreateQp]);
        assert!(matches!(
            h.handle(HsIn::QpCreated(addr(1)))[..],
            [HsOut::Send(_)]
        ));
        let mut t = t0;
        let mut failed = None;
        for _ in 0..100 {
            t += Duration::from_millis(10);
            for o in h.handle(HsIn::Tick(t)) {
                if let HsOut::Failed(e) = o {
                    failed = Some(e);
                }
            }
        }
        assert!(
            matches!(
                failed,
                Some(HsError::Timeout {
                    peer: 1,
                    attempts: 4,
                    ..
                })
            ),
            "{failed:?}"
        );
        assert!(h.is_done() && !h.is_established());
    }

    #[test]
    fn malformed_hellos_are_rejected() {
        let h = Hello {
            from: 1,
            to: 2,
            pair: 0,
            addr: addr(7),
            ack: true,
            fin: true,
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b), Some(h));
        assert_eq!(Hello::decode(&b[..b.len() - 1]), None);
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), None);
        let mut bad = b;
        bad[36] = 9;
        assert_eq!(Hello::decode(&bad), None);
    }

    proptest! {
        #[test]
        fn up_to_six_losses_end_in_agreement(lost in prop::collection::btree_set(0u32..16, 0..=6), starts in 0u8..3) {
            let (a, b) = [(true, false), (false, true), (true, true)][starts as usize];
            let mask: u32 = lost.iter().map(|i| 1u32 << i).sum();
            // Drop the messages whose bit is set among the first 16; later ones get through.
            // With at most 6 losses each side keeps at least 6 of its 12 sends.
            let (ea, eb, ca, cb, _) = run(a, b, |i| i < 16 && mask & (1 << i) != 0);
            prop_assert!(ea && eb, "both sides established");
            prop_assert_eq!((ca, cb), (1, 1));
        }

        #[test]
        fn any_loss_pattern_terminates_with_one_qp_per_side(mask in any::<u32>(), starts in 0u8..3) {
            let (a, b) = [(true, false), (false, true), (true, true)][starts as usize];
            // Heavy loss may exhaust the retries (a timeout is then the right answer), but the
            // exchange always goes quiet and never makes a second queue pair.
            let (_, _, ca, cb, conns) = run(a, b, |i| i < 32 && mask & (1 << i) != 0);
            prop_assert!(ca <= 1 && cb <= 1);
            prop_assert!(conns.len() <= 2);
        }
    }
}
