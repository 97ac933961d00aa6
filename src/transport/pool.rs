//! Sans-IO credit accounting of a shared receive queue: which peer may send how many messages
//! into the buffers of the port's SRQ.
//!
//! Every connected peer holds a fixed **base** grant (the same as it assumes at connection
//! time, [`super::flow::Credits::new`]) plus control credits; on top, the buffers of a
//! **reserve** are lent to the peers that are sending: one more each time one of their buffers
//! is reposted while the reserve has a free buffer, up to `max` data credits per peer. When the
//! reserve is empty and a sending peer holds less than its fair share (`base + reserve /
//! borrowers`), that demand is noted, and buffers of peers above the fair share are taken back
//! as they are reposted (not returned) until it is met. A credit reaches a sender (in a header
//! or a credit-only message) only when this pool says so.
//!
//! Contract: the credits granted (held by peers, in flight, or consumed and not yet reposted)
//! never exceed the buffers counted, `granted() <= capacity()`; the transport posts at least
//! `capacity()` buffers into the SRQ, so a sender that obeys its [`super::flow::Credits`] never
//! finds the SRQ empty (no receiver-not-ready), however many peers send at once. A peer's base
//! grant is never taken back, so every peer can always make progress (no credit deadlock).
//! Credits lent to a peer that stops sending come back only when it sends again.
//! Memory grows with `base + ctl` buffers per connected peer plus the fixed reserve, against
//! `recv_depth` per peer without an SRQ.

use std::collections::BTreeMap;

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct CreditPool {
    /// Buffers counted: the reserve plus every admitted peer's base and control buffers.
    capacity: u32,
    /// Buffers promised to nobody (the part of the reserve not lent).
    free: u32,
    reserve: u32,
    base: u32,
    ctl: u32,
    max: u32,
    /// Peers holding more than their base.
    borrowers: u32,
    /// Buffers a peer below its fair share lacked when nothing was free: as many are taken
    /// back from peers above `target`, the share it was measured against.
    demand: u32,
    target: u32,
    /// Data credits granted to each admitted peer (held, in flight, or not yet reposted).
    grants: BTreeMap<u32, u32>,
}

/// What to do with a reposted buffer's credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repost {
    /// Return this many data credits to the sender (1: its own back; 2: one more lent).
    Return(u32),
    /// Keep it in the reserve (taken back from a peer above its share, or the peer is gone).
    Keep,
}

impl Repost {
    /// Data credits to report to the sender.
    pub fn credits(self) -> u32 {
        match self {
            Repost::Return(n) => n,
            Repost::Keep => 0,
        }
    }
}

impl CreditPool {
    /// A pool lending `reserve` buffers; each admitted peer gets `base` data and `ctl`
    /// control credits and may borrow up to `max` data credits in all (`max >= base >= 1`).
    pub fn new(reserve: u32, base: u32, ctl: u32, max: u32) -> CreditPool {
        assert!(
            base >= 1 && max >= base,
            "credit pool: need max >= base >= 1"
        );
        CreditPool {
            capacity: reserve,
            free: reserve,
            reserve,
            base,
            ctl,
            max,
            borrowers: 0,
            demand: 0,
            target: 0,
            grants: BTreeMap::new(),
        }
    }

    /// Buffers a new peer needs posted before it may send: its base and control credits.
    pub fn per_peer(&self) -> u32 {
        self.base + self.ctl
    }

    /// `peer` is connected: [`CreditPool::per_peer`] more buffers were posted for it (before
    /// its QP could receive), and it holds its base grant. Admitting a peer twice is a no-op.
    pub fn admit(&mut self, peer: u32) {
        if self.grants.contains_key(&peer) {
            return;
        }
        self.capacity += self.per_peer();
        self.grants.insert(peer, self.base);
    }

    /// A data buffer that `peer` consumed was reposted: what to do with its credit.
    pub fn on_repost(&mut self, peer: u32) -> Repost {
        let Some(g) = self.grants.get_mut(&peer) else {
            // A removed peer's late message: `remove` already counted the buffer as free.
            return Repost::Keep;
        };
        let borrower = *g > self.base;
        if self.free > 0 && *g < self.max {
            *g += 1;
            self.free -= 1;
            self.borrowers += u32::from(!borrower);
            return Repost::Return(2);
        }
        let share = self.base + self.reserve / (self.borrowers + u32::from(!borrower)).max(1);
        let share = share.min(self.max);
        if *g < share {
            // Hungry: ask for what it lacks, from peers above this share.
            self.demand = self.demand.max(share - *g);
            self.target = share;
            Repost::Return(1)
        } else if self.demand > 0 && *g > self.target {
            *g -= 1;
            self.free += 1;
            self.demand -= 1;
            self.borrowers -= u32::from(*g == self.base);
            Repost::Keep
        } else {
            Repost::Return(1)
        }
    }

    /// `peer` is gone and none of its messages can still arrive or wait to be handled (its
    /// queue pair is stopped and the receive completion queue was polled empty since): its
    /// grant and control buffers go back to the reserve.
    pub fn remove(&mut self, peer: u32) {
        if let Some(g) = self.grants.remove(&peer) {
            self.borrowers -= u32::from(g > self.base);
            self.free += g + self.ctl;
        }
    }

    /// Data credits currently granted to `peer`.
    pub fn grant(&self, peer: u32) -> Option<u32> {
        self.grants.get(&peer).copied()
    }

    /// Buffers promised: every peer's data grant and control credits.
    pub fn granted(&self) -> u32 {
        self.capacity - self.free
    }

    /// Buffers counted (the transport posts at least these).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Buffers promised to nobody.
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Peers admitted.
    pub fn peers(&self) -> usize {
        self.grants.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::flow::Credits;
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn lends_the_reserve_to_senders_up_to_max() {
        let mut p = CreditPool::new(8, 2, 2, 6);
        p.admit(1);
        assert_eq!((p.capacity(), p.free(), p.granted()), (12, 8, 4));
        for _ in 0..4 {
            assert_eq!(p.on_repost(1), Repost::Return(2));
        }
        assert_eq!((p.free(), p.grant(1)), (4, Some(6)));
        assert_eq!(p.on_repost(1), Repost::Return(1), "at max");
        p.remove(1);
        assert_eq!((p.free(), p.granted()), (12, 0));
        assert_eq!(
            p.on_repost(1),
            Repost::Keep,
            "late buffer of a removed peer"
        );
        assert_eq!(p.free(), 12);
    }

    #[test]
    fn a_hungry_peer_gets_buffers_back_from_a_borrower_above_its_share() {
        let mut p = CreditPool::new(8, 2, 0, 20);
        p.admit(1);
        p.admit(2);
        for _ in 0..8 {
            assert_eq!(p.on_repost(1), Repost::Return(2));
        }
        assert_eq!((p.free(), p.grant(1)), (0, Some(10)));
        // Peer 2 sends at its base: below the share 2 + 8/2 = 6, so it is hungry.
        assert_eq!(p.on_repost(2), Repost::Return(1));
        // Peer 1 is above the share: its buffer is kept, and peer 2 borrows it.
        assert_eq!(p.on_repost(1), Repost::Keep);
        assert_eq!(p.on_repost(2), Repost::Return(2));
        // Keep going until both hold the share.
        for _ in 0..40 {
            p.on_repost(2);
            p.on_repost(1);
        }
        assert_eq!((p.grant(1), p.grant(2)), (Some(6), Some(6)));
        assert_eq!(p.granted(), p.capacity());
    }

    #[test]
    fn no_reserve_never_lends() {
        let mut q = CreditPool::new(0, 2, 1, 4);
        q.admit(1);
        assert_eq!(q.on_repost(1), Repost::Return(1));
        assert_eq!(q.grant(1), Some(2));
    }

    /// One simulated sender, and the receiver's state for it.
    struct Sender {
        /// The sender's credits towards the receiver.
        send: Credits,
        /// The receiver's returns towards the sender.
        recv: Credits,
        backlog: u32,
        delivered: u32,
        live: bool,
    }

    /// Senders that obey their credits, one receiver with an SRQ of `capacity()` buffers that
    /// reposts late and in random order, peers joining and leaving: the SRQ never runs dry,
    /// `granted <= capacity`, and every message of a live peer is delivered.
    fn simulate(peers: u32, reserve: u32, base: u32, max: u32, msgs: u32, seed: u64) {
        const CTL: u32 = 2;
        let mut pool = CreditPool::new(reserve, base, CTL, max);
        let mut posted = reserve as i64;
        let mut s: Vec<Sender> = Vec::new();
        // Messages in flight to the receiver: (peer, data?, returns); back to senders: returns.
        let mut to_rx: VecDeque<(usize, bool, u16, u8)> = VecDeque::new();
        let mut to_tx: VecDeque<(usize, u16, u8)> = VecDeque::new();
        let mut consumed: Vec<(usize, bool)> = Vec::new();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut next = || rng.u64(..);
        // A peer connects: its grant is posted before it may send.
        let join = |pool: &mut CreditPool, posted: &mut i64, s: &mut Vec<Sender>| {
            *posted += pool.per_peer() as i64;
            pool.admit(s.len() as u32);
            s.push(Sender {
                send: Credits::new(base + CTL, CTL).lending_up_to(max),
                recv: Credits::new(base + CTL, CTL),
                backlog: msgs,
                delivered: 0,
                live: true,
            });
        };
        for _ in 0..peers.min(2) {
            join(&mut pool, &mut posted, &mut s);
        }
        let mut removed_pending: Vec<usize> = Vec::new();
        for _step in 0..2_000_000 {
            let n = s.len();
            let done = n as u32 == peers
                && s.iter().all(|x| !x.live || x.backlog == 0)
                && to_rx.is_empty()
                && consumed.is_empty();
            if done {
                break;
            }
            assert!(pool.granted() <= pool.capacity());
            match next() % 8 {
                0 if (n as u32) < peers => join(&mut pool, &mut posted, &mut s),
                // a live peer with credit sends a data message
                1 | 2 => {
                    let p = (next() as usize) % n;
                    let x = &mut s[p];
                    if x.live && x.backlog > 0 && x.send.data > 0 {
                        x.send.data -= 1;
                        x.backlog -= 1;
                        let (d, c) = x.send.take_returns();
                        to_rx.push_back((p, true, d, c));
                    }
                }
                // the receiver takes the next message off the wire into an SRQ buffer
                3 | 4 if !to_rx.is_empty() => {
                    let (p, data, d, c) = to_rx.pop_front().unwrap();
                    s[p].recv
                        .on_arrival(!data)
                        .expect("a sender that obeys its credits");
                    posted -= 1;
                    assert!(posted >= 0, "SRQ ran dry: receiver-not-ready");
                    s[p].recv.on_returns(d, c).expect("honest returns");
                    s[p].delivered += u32::from(data);
                    consumed.push((p, data));
                }
                // the receiver reposts a consumed buffer, late and in any order
                5 if !consumed.is_empty() => {
                    let k = (next() as usize) % consumed.len();
                    let (p, data) = consumed.swap_remove(k);
                    posted += 1;
                    if data {
                        s[p].recv.to_return += pool.on_repost(p as u32).credits();
                    } else {
                        s[p].recv.reposted(true);
                    }
                }
                // returns travel back: on a credit-only message when due (the sender side
                // handles it at once and returns its control buffer on its next header)
                6 => {
                    let p = (next() as usize) % n;
                    let x = &mut s[p];
                    if x.live && x.recv.credit_message_due() {
                        x.recv.ctl -= 1;
                        let (d, c) = x.recv.take_returns();
                        to_tx.push_back((p, d, c));
                    }
                    if let Some((q, d, c)) = to_tx.pop_front() {
                        let y = &mut s[q];
                        y.send.on_returns(d, c).expect("the pool lends at most max");
                        y.send.reposted(true);
                        // the sender's next message carries the control return; if it has
                        // nothing to send, a control credit comes back to the receiver now
                        if y.backlog == 0 {
                            let (d2, c2) = y.send.take_returns();
                            y.recv.on_returns(d2, c2).expect("honest returns");
                        }
                    }
                }
                // a peer leaves (rarely): stop it, and release its grant once nothing of it
                // is on the wire or waiting to be reposted
                7 if next() % 64 == 0 => {
                    let p = (next() as usize) % n;
                    if s[p].live && n as u32 == peers {
                        s[p].live = false;
                        removed_pending.push(p);
                    }
                }
                _ => {}
            }
            removed_pending.retain(|&p| {
                let quiet = !to_rx.iter().any(|m| m.0 == p) && !consumed.iter().any(|m| m.0 == p);
                if quiet {
                    pool.remove(p as u32);
                }
                !quiet
            });
        }
        for (p, x) in s.iter().enumerate() {
            if x.live {
                assert_eq!(x.delivered, msgs, "peer {p} stalled");
            }
        }
    }

    #[test]
    fn a_pool_never_runs_dry_and_never_deadlocks() {
        for seed in 1..30 {
            simulate(5, 16, 2, 12, 300, seed);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn pool_never_overruns(peers in 1u32..12, reserve in 0u32..64, base in 1u32..6,
                               extra in 0u32..40, msgs in 0u32..200, seed in any::<u64>()) {
            simulate(peers, reserve, base, base + extra, msgs, seed);
        }
    }
}
