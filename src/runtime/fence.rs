//! The fence (barrier with optional allgather) as a sans-IO state machine.
//!
//! Each participant runs one [`FenceMachine`] per fence call. It is fed inputs ([`FenceIn`]:
//! a message from a peer, a peer's death, a clock tick) and answers with outputs
//! ([`FenceOut`]: messages to send, completion, failure); it never does I/O or reads a clock
//! itself, so tests and simulations drive it directly.
//!
//! The shape is a tree given by a [`FenceTopology`]: contributions flow up to the root, which
//! sends the full set (or the abort) down. The embedded runtime uses a [`Star`] (the lowest
//! rank is the root); the fault-tolerant fence replaces the topology, not this shape.

use super::wire::{encode_entries, Dec, Entry, WireError};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Who talks to whom in a fence.
pub trait FenceTopology: Send + Sync {
    /// Parent of `rank`; `None` for the root.
    fn parent(&self, rank: u32) -> Option<u32>;
    /// Children of `rank`, ascending.
    fn children(&self, rank: u32) -> Vec<u32>;
    /// Every rank below `rank` (excluding itself): whose data it forwards up.
    fn subtree(&self, rank: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack = self.children(rank);
        while let Some(r) = stack.pop() {
            out.push(r);
            stack.extend(self.children(r));
        }
        out.sort_unstable();
        out
    }
}

/// A one-level tree: the lowest member is the root, every other member its child.
#[derive(Debug, Clone)]
pub struct Star {
    members: Vec<u32>,
}

impl Star {
    /// `members` in any order; duplicates are ignored. Panics on an empty list.
    pub fn new(mut members: Vec<u32>) -> Star {
        members.sort_unstable();
        members.dedup();
        assert!(!members.is_empty(), "a fence needs at least one member");
        Star { members }
    }
}

impl FenceTopology for Star {
    fn parent(&self, rank: u32) -> Option<u32> {
        (rank != self.members[0]).then_some(self.members[0])
    }
    fn children(&self, rank: u32) -> Vec<u32> {
        if rank == self.members[0] {
            self.members[1..].to_vec()
        } else {
            Vec::new()
        }
    }
}

/// How long past the deadline a member that already sent up waits for its parent's verdict.
pub const PARENT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The data a fence gathers: each rank's committed entries (empty without collection).
pub type Gathered = BTreeMap<u32, Vec<Entry>>;

/// Fence messages between participants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceMsg {
    /// Child -> parent: the child's subtree has arrived, with its data.
    Up { epoch: u64, data: Gathered },
    /// Parent -> child: everyone arrived; the whole job's data.
    Down { epoch: u64, data: Gathered },
    /// Parent -> child (or anyone -> anyone): the fence failed; these ranks did not arrive.
    Abort { epoch: u64, missing: Vec<u32> },
}

impl FenceMsg {
    pub fn epoch(&self) -> u64 {
        match self {
            FenceMsg::Up { epoch, .. }
            | FenceMsg::Down { epoch, .. }
            | FenceMsg::Abort { epoch, .. } => *epoch,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let put_data = |out: &mut Vec<u8>, data: &Gathered| {
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            for (rank, es) in data {
                out.extend_from_slice(&rank.to_le_bytes());
                encode_entries(out, es);
            }
        };
        match self {
            FenceMsg::Up { epoch, data } => {
                out.push(1);
                out.extend_from_slice(&epoch.to_le_bytes());
                put_data(&mut out, data);
            }
            FenceMsg::Down { epoch, data } => {
                out.push(2);
                out.extend_from_slice(&epoch.to_le_bytes());
                put_data(&mut out, data);
            }
            FenceMsg::Abort { epoch, missing } => {
                out.push(3);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&(missing.len() as u32).to_le_bytes());
                for r in missing {
                    out.extend_from_slice(&r.to_le_bytes());
                }
            }
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<FenceMsg, WireError> {
        let mut d = Dec::new(buf);
        let tag = d.u8("fence tag")?;
        let epoch = d.u64("epoch")?;
        let data = |d: &mut Dec<'_>| -> Result<Gathered, WireError> {
            let n = d.count("rank count", 8)?;
            let mut g = Gathered::new();
            for _ in 0..n {
                let rank = d.u32("rank")?;
                g.insert(rank, d.entries()?);
            }
            Ok(g)
        };
        let m = match tag {
            1 => FenceMsg::Up {
                epoch,
                data: data(&mut d)?,
            },
            2 => FenceMsg::Down {
                epoch,
                data: data(&mut d)?,
            },
            3 => {
                let n = d.count("missing count", 4)?;
                let mut missing = Vec::with_capacity(n);
                for _ in 0..n {
                    missing.push(d.u32("rank")?);
                }
                FenceMsg::Abort { epoch, missing }
            }
            tag => return Err(WireError::UnknownTag { tag }),
        };
        d.finish()?;
        Ok(m)
    }
}

/// An input to the machine.
#[derive(Debug, Clone)]
pub enum FenceIn {
    /// A fence message from `from` (of this machine's epoch; the driver keeps others aside).
    Msg { from: u32, msg: FenceMsg },
    /// `rank` is known to have died.
    PeerGone { rank: u32 },
    /// The clock.
    Tick { now: Instant },
}

/// An output of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceOut {
    Send {
        to: u32,
        msg: FenceMsg,
    },
    /// The fence completed; with collection, every member's data.
    Done {
        data: Gathered,
    },
    /// The fence failed; these ranks never arrived (or died).
    Failed {
        missing: Vec<u32>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for children (`waiting` not empty) before sending up or completing.
    Gathering,
    /// Sent up; waiting for the parent's Down or Abort.
    WaitingForParent,
    Finished,
}

/// One participant's state for one fence.
pub struct FenceMachine {
    me: u32,
    epoch: u64,
    parent: Option<u32>,
    children: Vec<u32>,
    subtree: Vec<u32>,
    waiting: BTreeSet<u32>,
    data: Gathered,
    deadline: Instant,
    state: State,
}

impl FenceMachine {
    /// Starts `me`'s part of fence `epoch` with its own `contribution`; returns the machine and
    /// its first outputs (a leaf sends up at once; a lone root completes at once).
    pub fn start(
        me: u32,
        epoch: u64,
        topo: &dyn FenceTopology,
        contribution: Vec<Entry>,
        deadline: Instant,
    ) -> (FenceMachine, Vec<FenceOut>) {
        let children = topo.children(me);
        let mut data = Gathered::new();
        data.insert(me, contribution);
        let mut m = FenceMachine {
            me,
            epoch,
            parent: topo.parent(me),
            waiting: children.iter().copied().collect(),
            subtree: topo.subtree(me),
            children,
            data,
            deadline,
            state: State::Gathering,
        };
        let out = m.advance();
        (m, out)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn is_finished(&self) -> bool {
        self.state == State::Finished
    }

    /// Feeds one input; returns what to do.
    pub fn handle(&mut self, input: FenceIn) -> Vec<FenceOut> {
        if self.state == State::Finished {
            return Vec::new();
        }
        match input {
            FenceIn::Msg { from, msg } if msg.epoch() == self.epoch => match msg {
                FenceMsg::Up { data, .. } if self.waiting.remove(&from) => {
                    self.data.extend(data);
                    self.advance()
                }
                FenceMsg::Down { data, .. }
                    if Some(from) == self.parent && self.state == State::WaitingForParent =>
                {
                    self.data = data;
                    self.finish_ok()
                }
                FenceMsg::Abort { missing, .. } if Some(from) == self.parent => self.fail(missing),
                other => {
                    tracing::debug!(me = self.me, from, msg = ?other, "unexpected fence message ignored");
                    Vec::new()
                }
            },
            FenceIn::Msg { from, msg } => {
                tracing::debug!(
                    me = self.me,
                    from,
                    epoch = msg.epoch(),
                    mine = self.epoch,
                    "fence message of another epoch ignored"
                );
                Vec::new()
            }
            FenceIn::PeerGone { rank } => {
                if self.waiting.contains(&rank) {
                    // Everyone not yet heard from is missing, the dead rank among them.
                    self.fail(self.missing_below())
                } else if Some(rank) == self.parent && self.state != State::Finished {
                    self.fail(vec![rank])
                } else {
                    Vec::new()
                }
            }
            FenceIn::Tick { now } if self.state == State::Gathering && now >= self.deadline => {
                let missing = self.missing_below();
                self.fail(missing)
            }
            // A member that sent up waits a little longer than the deadline, so the root's
            // verdict (which names who is missing) reaches it before it gives up on the root.
            FenceIn::Tick { now } if now >= self.deadline + PARENT_GRACE => {
                let missing = self.parent.into_iter().collect();
                self.fail(missing)
            }
            FenceIn::Tick { .. } => Vec::new(),
        }
    }

    /// The ranks of this subtree whose data has not arrived.
    fn missing_below(&self) -> Vec<u32> {
        self.subtree
            .iter()
            .copied()
            .filter(|r| !self.data.contains_key(r))
            .collect()
    }

    fn advance(&mut self) -> Vec<FenceOut> {
        if self.state != State::Gathering || !self.waiting.is_empty() {
            return Vec::new();
        }
        match self.parent {
            Some(p) => {
                self.state = State::WaitingForParent;
                vec![FenceOut::Send {
                    to: p,
                    msg: FenceMsg::Up {
                        epoch: self.epoch,
                        data: std::mem::take(&mut self.data),
                    },
                }]
            }
            None => self.finish_ok(),
        }
    }

    fn finish_ok(&mut self) -> Vec<FenceOut> {
        self.state = State::Finished;
        let mut out: Vec<FenceOut> = self
            .children
            .iter()
            .map(|&c| FenceOut::Send {
                to: c,
                msg: FenceMsg::Down {
                    epoch: self.epoch,
                    data: self.data.clone(),
                },
            })
            .collect();
        out.push(FenceOut::Done {
            data: std::mem::take(&mut self.data),
        });
        out
    }

    fn fail(&mut self, missing: Vec<u32>) -> Vec<FenceOut> {
        self.state = State::Finished;
        let mut out: Vec<FenceOut> = self
            .children
            .iter()
            .filter(|c| !missing.contains(c))
            .map(|&c| FenceOut::Send {
                to: c,
                msg: FenceMsg::Abort {
                    epoch: self.epoch,
                    missing: missing.clone(),
                },
            })
            .collect();
        out.push(FenceOut::Failed { missing });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Scope;
    use std::collections::VecDeque;
    use std::time::Duration;

    fn entry(r: u32) -> Vec<Entry> {
        vec![Entry {
            scope: Scope::Global,
            key: "k".into(),
            value: r.to_le_bytes().to_vec(),
        }]
    }

    /// Runs one fence over `members` with a message queue; `absent` never start.
    fn simulate(members: &[u32], absent: &[u32]) -> BTreeMap<u32, FenceOut> {
        let topo = Star::new(members.to_vec());
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(1);
        let mut machines = BTreeMap::new();
        let mut queue: VecDeque<(u32, u32, FenceMsg)> = VecDeque::new();
        let mut results = BTreeMap::new();
        let route = |from: u32,
                     outs: Vec<FenceOut>,
                     queue: &mut VecDeque<_>,
                     results: &mut BTreeMap<u32, FenceOut>| {
            for o in outs {
                match o {
                    FenceOut::Send { to, msg } => queue.push_back((from, to, msg)),
                    done => {
                        results.insert(from, done);
                    }
                }
            }
        };
        for &r in members.iter().filter(|r| !absent.contains(r)) {
            let (m, outs) = FenceMachine::start(r, 7, &topo, entry(r), deadline);
            machines.insert(r, m);
            route(r, outs, &mut queue, &mut results);
        }
        while let Some((from, to, msg)) = queue.pop_front() {
            // Messages survive an encode/decode round trip.
            let msg = FenceMsg::decode(&msg.encode()).unwrap();
            if let Some(m) = machines.get_mut(&to) {
                let outs = m.handle(FenceIn::Msg { from, msg });
                route(to, outs, &mut queue, &mut results);
            }
        }
        // Time passes: just past the deadline, then long past it.
        for late in [Duration::from_millis(1), Duration::from_secs(3600)] {
            for (&r, m) in machines.iter_mut() {
                let outs = m.handle(FenceIn::Tick {
                    now: deadline + late,
                });
                route(r, outs, &mut queue, &mut results);
            }
            while let Some((from, to, msg)) = queue.pop_front() {
                if let Some(m) = machines.get_mut(&to) {
                    let outs = m.handle(FenceIn::Msg { from, msg });
                    route(to, outs, &mut queue, &mut results);
                }
            }
        }
        results
    }

    #[test]
    fn everyone_gets_everyones_data() {
        let members: Vec<u32> = (0..9).collect();
        let res = simulate(&members, &[]);
        assert_eq!(res.len(), 9);
        for (_, out) in res {
            let FenceOut::Done { data } = out else {
                panic!("{out:?}")
            };
            assert_eq!(data.keys().copied().collect::<Vec<_>>(), members);
            for (r, es) in data {
                assert_eq!(es, entry(r));
            }
        }
    }

    #[test]
    fn a_lone_member_completes_at_once() {
        let topo = Star::new(vec![4]);
        let (m, outs) = FenceMachine::start(4, 0, &topo, entry(4), Instant::now());
        assert!(m.is_finished());
        assert!(matches!(&outs[..], [FenceOut::Done { .. }]));
    }

    #[test]
    fn missing_members_are_named_by_every_survivor() {
        let members: Vec<u32> = (0..6).collect();
        let res = simulate(&members, &[2, 5]);
        assert_eq!(res.len(), 4);
        for (r, out) in res {
            assert_eq!(
                out,
                FenceOut::Failed {
                    missing: vec![2, 5]
                },
                "rank {r}"
            );
        }
    }

    #[test]
    fn a_missing_root_is_named_by_the_leaves() {
        let res = simulate(&[0, 1, 2], &[0]);
        for (_, out) in res {
            assert_eq!(out, FenceOut::Failed { missing: vec![0] });
        }
    }

    #[test]
    fn a_dead_child_fails_the_fence_before_the_timeout() {
        let topo = Star::new(vec![0, 1, 2]);
        let (mut root, _) = FenceMachine::start(
            0,
            1,
            &topo,
            entry(0),
            Instant::now() + Duration::from_secs(60),
        );
        root.handle(FenceIn::Msg {
            from: 1,
            msg: FenceMsg::Up {
                epoch: 1,
                data: [(1, entry(1))].into(),
            },
        });
        let outs = root.handle(FenceIn::PeerGone { rank: 2 });
        assert!(
            outs.contains(&FenceOut::Failed { missing: vec![2] }),
            "{outs:?}"
        );
        assert!(outs.contains(&FenceOut::Send {
            to: 1,
            msg: FenceMsg::Abort {
                epoch: 1,
                missing: vec![2]
            }
        }));
    }

    #[test]
    fn stale_and_duplicate_messages_are_ignored() {
        let topo = Star::new(vec![0, 1]);
        let (mut root, _) = FenceMachine::start(
            0,
            3,
            &topo,
            entry(0),
            Instant::now() + Duration::from_secs(60),
        );
        assert!(root
            .handle(FenceIn::Msg {
                from: 1,
                msg: FenceMsg::Up {
                    epoch: 2,
                    data: Gathered::new()
                }
            })
            .is_empty());
        let outs = root.handle(FenceIn::Msg {
            from: 1,
            msg: FenceMsg::Up {
                epoch: 3,
                data: [(1, entry(1))].into(),
            },
        });
        assert!(outs.iter().any(|o| matches!(o, FenceOut::Done { .. })));
        assert!(root
            .handle(FenceIn::Msg {
                from: 1,
                msg: FenceMsg::Up {
                    epoch: 3,
                    data: Gathered::new()
                }
            })
            .is_empty());
    }
}
