//! The fault-tolerant fence and allgather (issue 7) as a sans-IO state machine.
//!
//! Same shape as [`super::fence`]: one [`ResilientFence`] per participant and fence call, fed
//! [`ResIn`] (a message, a death notice from the local failure detector, a tick) and answering
//! with [`ResOut`] (sends, completion with the data and the agreed failed set, a timeout). It
//! never does I/O or reads a clock, so the simulator (`crate::sim`) and the embedded client
//! drive it the same way (like quinn-proto's `handle_*`/`poll_*`, folded into one call).
//!
//! The algorithm (docs/RUNTIME.md, "Resilient fence"), in short:
//! - **Tree.** A binomial tree over the sorted members given at start (index `i`'s parent is
//!   `i & (i - 1)`). With a failed set `F`, each live member's *effective parent* is its
//!   nearest live ancestor; a member whose ancestors are all dead hangs below the lowest live
//!   member, which is the root. So a dead child's children are adopted by its parent, a dead
//!   parent is replaced by the grandparent (or the next live ancestor), and the tree is a
//!   deterministic function of `F`: two members with the same `F` agree on it.
//! - **Views.** Every message carries the sender's failed set and its hash; on a hash mismatch
//!   the receiver merges the difference into its detector (the detector is accurate, so this
//!   only spreads true deaths) and recomputes its place in the tree. Already-received reports
//!   are kept; only the members not yet heard from are waited for.
//! - **Gather** (`Up`): a member reports to its effective parent once every effective child
//!   reported, with the data of its subtree. The report also carries the highest proposal the
//!   member acknowledged (its Paxos "promise" for this root).
//! - **Agreement**: the root proposes `(failed set, data)` down the tree (`Propose`), every
//!   member acknowledges straight to the root (`Accepted`), and the root, once every member
//!   live in its view accepted, commits straight to every one of them (`Commit`): failure-free,
//!   `2 ceil(log2 p) + 2` steps (the gather up, the proposal down, the two star steps). If the
//!   acknowledgements reveal a failure not in the proposal, the root proposes again with it (a
//!   new sub-ballot). If the root dies, the next lowest live member becomes root and gathers
//!   again; if any survivor acknowledged a proposal, it re-proposes the highest one unchanged
//!   (it may already have been committed somewhere), otherwise it proposes afresh. Committed
//!   members keep answering every message with the decision, and once they know of a death the
//!   decision does not name (the deciding root's, perhaps, mid-way through its commits) they
//!   also send it to their tree neighbours.
//!
//! Assumptions: fail-stop processes, reliable channels between live processes (a message sent
//! before the sender died may still arrive), and an accurate, eventually complete failure
//! detector (every live process eventually learns of every death; nobody is reported dead
//! while alive). Under them every survivor ends with the same failed set and the same data.

use super::wire::{encode_entries, Dec, Entry, WireError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Each member's contribution, by rank.
pub type Gathered = BTreeMap<u32, Vec<Entry>>;

/// A proposal number: (root's rank, attempt of that root). Ordered lexicographically; the root
/// only ever moves to higher ranks, so later roots always have higher ballots.
pub type Ballot = (u32, u32);

/// What the members agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Members that failed, ascending.
    pub failed: Arc<Vec<u32>>,
    /// The data of every member not in `failed`.
    pub data: Arc<Gathered>,
}

/// The header every message carries: the sender's failed set and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub hash: u64,
    pub failed: Arc<Vec<u32>>,
}

/// Message bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Child -> parent: my subtree reported to `root`; its data; the highest proposal any of
    /// it acknowledged.
    Up {
        root: u32,
        data: Gathered,
        acked: Option<(Ballot, Decision)>,
    },
    /// Root -> down the tree.
    Propose { ballot: Ballot, value: Decision },
    /// Up the tree: my whole subtree acknowledged `ballot` (the first protocol, which took
    /// `4 ceil(log2 p)` steps). Still decoded, so its tag keeps its meaning; never sent, and
    /// ignored, by this machine: [`Body::Accepted`] replaced it (every rank of a job runs the
    /// same protocol, as it runs the same fence).
    Ack { ballot: Ballot },
    /// The final decision, down the tree (the first protocol). Decoded, never sent, ignored:
    /// [`Body::Decided`] replaced it.
    Commit { value: Decision },
    /// Only the view: the answer to a message of a dead root (so the sender learns faster).
    Nudge,
    /// Member -> root, straight: I (only I) accepted `ballot`.
    Accepted { ballot: Ballot },
    /// The final decision, made by the root `root`: from it straight to every live member, and
    /// from any decided member as the answer to anything (and to its tree neighbours once
    /// `root` is known dead).
    Decided { root: u32, value: Decision },
}

/// A resilient-fence message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResMsg {
    pub epoch: u64,
    pub view: View,
    pub body: Body,
}

impl ResMsg {
    /// A short name of the kind, for statistics.
    pub fn kind(&self) -> &'static str {
        match self.body {
            Body::Up { .. } => "up",
            Body::Propose { .. } => "propose",
            Body::Ack { .. } => "ack-v1",
            Body::Commit { .. } => "commit-v1",
            Body::Nudge => "nudge",
            Body::Accepted { .. } => "ack",
            Body::Decided { .. } => "commit",
        }
    }
}

/// Wire tags of [`ResMsg`] bodies. They do not overlap [`super::fence::FenceMsg`]'s (1 to 3),
/// so one routed payload can carry either; never re-purpose one.
pub mod tag {
    pub const UP: u8 = 0x11;
    pub const PROPOSE: u8 = 0x12;
    pub const ACK: u8 = 0x13;
    pub const COMMIT: u8 = 0x14;
    pub const NUDGE: u8 = 0x15;
    pub const ACCEPTED: u8 = 0x16;
    pub const DECIDED: u8 = 0x17;
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_ranks(out: &mut Vec<u8>, ranks: &[u32]) {
    put_u32(out, ranks.len() as u32);
    for &r in ranks {
        put_u32(out, r);
    }
}

fn put_gathered(out: &mut Vec<u8>, data: &Gathered) {
    put_u32(out, data.len() as u32);
    for (rank, es) in data {
        put_u32(out, *rank);
        encode_entries(out, es);
    }
}

fn put_decision(out: &mut Vec<u8>, d: &Decision) {
    put_ranks(out, &d.failed);
    put_gathered(out, &d.data);
}

fn put_ballot(out: &mut Vec<u8>, b: Ballot) {
    put_u32(out, b.0);
    put_u32(out, b.1);
}

/// A strictly ascending rank list (a failed set).
fn get_ranks(d: &mut Dec<'_>, what: &'static str) -> Result<Vec<u32>, WireError> {
    let n = d.count(what, 4)?;
    let mut out: Vec<u32> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = d.pos();
        let r = d.u32(what)?;
        if out.last().is_some_and(|&last| last >= r) {
            return Err(WireError::Invalid { what, offset: at });
        }
        out.push(r);
    }
    Ok(out)
}

fn get_gathered(d: &mut Dec<'_>) -> Result<Gathered, WireError> {
    // A rank (4 bytes) and an entry count (4 bytes) at least.
    let n = d.count("rank count", 8)?;
    let mut g = Gathered::new();
    let mut last: Option<u32> = None;
    for _ in 0..n {
        let at = d.pos();
        let rank = d.u32("rank")?;
        if last.is_some_and(|l| l >= rank) {
            return Err(WireError::Invalid {
                what: "rank order",
                offset: at,
            });
        }
        last = Some(rank);
        g.insert(rank, d.entries()?);
    }
    Ok(g)
}

fn get_decision(d: &mut Dec<'_>) -> Result<Decision, WireError> {
    let failed = get_ranks(d, "failed rank")?;
    let data = get_gathered(d)?;
    Ok(Decision {
        failed: Arc::new(failed),
        data: Arc::new(data),
    })
}

fn get_ballot(d: &mut Dec<'_>) -> Result<Ballot, WireError> {
    Ok((d.u32("ballot root")?, d.u32("ballot attempt")?))
}

impl ResMsg {
    /// The wire form: a `u8` tag ([`tag`]), the epoch (`u64`), the view (hash `u64`, failed
    /// ranks as a `u32` count and ascending `u32`s), then the body's fields. Every integer is
    /// little-endian; data is a rank count and, per rank, the rank and its entries as in
    /// [`super::wire`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let t = match self.body {
            Body::Up { .. } => tag::UP,
            Body::Propose { .. } => tag::PROPOSE,
            Body::Ack { .. } => tag::ACK,
            Body::Commit { .. } => tag::COMMIT,
            Body::Nudge => tag::NUDGE,
            Body::Accepted { .. } => tag::ACCEPTED,
            Body::Decided { .. } => tag::DECIDED,
        };
        out.push(t);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.view.hash.to_le_bytes());
        put_ranks(&mut out, &self.view.failed);
        match &self.body {
            Body::Up { root, data, acked } => {
                put_u32(&mut out, *root);
                put_gathered(&mut out, data);
                match acked {
                    None => out.push(0),
                    Some((b, v)) => {
                        out.push(1);
                        put_ballot(&mut out, *b);
                        put_decision(&mut out, v);
                    }
                }
            }
            Body::Propose { ballot, value } => {
                put_ballot(&mut out, *ballot);
                put_decision(&mut out, value);
            }
            Body::Ack { ballot } | Body::Accepted { ballot } => put_ballot(&mut out, *ballot),
            Body::Commit { value } => put_decision(&mut out, value),
            Body::Decided { root, value } => {
                put_u32(&mut out, *root);
                put_decision(&mut out, value);
            }
            Body::Nudge => {}
        }
        out
    }

    /// Decodes one message, bounded by `buf`: truncation, an unknown tag, trailing bytes, a
    /// rank list out of order or a view whose hash does not match its failed set are errors,
    /// never a panic or an allocation larger than the input allows.
    pub fn decode(buf: &[u8]) -> Result<ResMsg, WireError> {
        let mut d = Dec::new(buf);
        let t = d.u8("resilient fence tag")?;
        if !(tag::UP..=tag::DECIDED).contains(&t) {
            return Err(WireError::UnknownTag { tag: t });
        }
        let epoch = d.u64("epoch")?;
        let at = d.pos();
        let hash = d.u64("view hash")?;
        let failed = get_ranks(&mut d, "failed rank")?;
        if view_hash(&failed) != hash {
            return Err(WireError::Invalid {
                what: "view hash",
                offset: at,
            });
        }
        let body = match t {
            tag::UP => {
                let root = d.u32("root")?;
                let data = get_gathered(&mut d)?;
                let at = d.pos();
                let acked = match d.u8("acked flag")? {
                    0 => None,
                    1 => Some((get_ballot(&mut d)?, get_decision(&mut d)?)),
                    value => {
                        return Err(WireError::BadValue {
                            what: "acked flag",
                            value,
                            offset: at,
                        })
                    }
                };
                Body::Up { root, data, acked }
            }
            tag::PROPOSE => Body::Propose {
                ballot: get_ballot(&mut d)?,
                value: get_decision(&mut d)?,
            },
            tag::ACK => Body::Ack {
                ballot: get_ballot(&mut d)?,
            },
            tag::COMMIT => Body::Commit {
                value: get_decision(&mut d)?,
            },
            tag::ACCEPTED => Body::Accepted {
                ballot: get_ballot(&mut d)?,
            },
            tag::DECIDED => Body::Decided {
                root: d.u32("deciding root")?,
                value: get_decision(&mut d)?,
            },
            _ => Body::Nudge,
        };
        d.finish()?;
        Ok(ResMsg {
            epoch,
            view: View {
                hash,
                failed: Arc::new(failed),
            },
            body,
        })
    }
}

/// An input.
#[derive(Debug, Clone)]
pub enum ResIn {
    /// A message of this machine's epoch (the driver keeps others aside).
    Msg { from: u32, msg: ResMsg },
    /// The failure detector reports `rank` dead.
    PeerGone { rank: u32 },
    /// The clock, in milliseconds of the driver's choosing (only compared with the deadline).
    Tick { now_ms: u64 },
}

/// An output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResOut {
    Send {
        to: u32,
        msg: ResMsg,
    },
    /// Agreed: the data of every member not in `failed`, and the agreed failed set. Emitted
    /// once; the machine keeps answering messages afterwards (keep it until the next fence).
    Done {
        data: Arc<Gathered>,
        failed: Arc<Vec<u32>>,
    },
    /// The deadline passed without agreement (only possible if the detector is not complete,
    /// e.g. a hung but live process); the caller may retry the fence. Still waiting for these.
    TimedOut {
        waiting: Vec<u32>,
    },
}

/// FNV-1a over the ascending failed ranks.
pub fn view_hash(failed: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in failed {
        for b in r.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Binomial-tree parent of index `i` (> 0).
fn tree_parent(i: usize) -> usize {
    i & (i - 1)
}

/// Binomial-tree children of index `i` among `n`.
fn tree_children(i: usize, n: usize) -> impl Iterator<Item = usize> {
    let limit = if i == 0 {
        usize::MAX
    } else {
        i & i.wrapping_neg()
    };
    (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(move |&b| b < limit && i + b < n)
        .map(move |b| i + b)
}

/// One participant's state for one resilient fence.
pub struct ResilientFence {
    me: u32,
    epoch: u64,
    /// Members, ascending; tree positions are indices into this.
    members: Vec<u32>,
    my_idx: usize,
    /// Dead by index.
    dead: Vec<bool>,
    failed: BTreeSet<u32>,
    view: View,
    deadline_ms: Option<u64>,
    /// All data known (own contribution first).
    data: Gathered,
    /// The current root's rank and who reported to me for it.
    root: u32,
    reported: BTreeSet<u32>,
    /// Highest proposal acknowledged, from me or my reporters.
    best_acked: Option<(Ballot, Decision)>,
    /// The Up for `root` has been sent to this parent (a Paxos promise to `root`).
    up_sent_to: Option<u32>,
    /// The current proposal of `root` and its propagation.
    proposal: Option<(Ballot, Decision)>,
    /// Root only: whether the value may still change (chosen afresh by this root).
    fresh: bool,
    prop_sent: BTreeSet<u32>,
    /// Root only: the live members that accepted the current proposal (straight to me).
    acks: BTreeSet<u32>,
    /// The ballot I sent my `Accepted` for (to the root of that ballot).
    ack_sent: Option<Ballot>,
    /// The decision and the root that made it.
    decided: Option<(u32, Decision)>,
    commit_sent: BTreeSet<u32>,
    done_emitted: bool,
    timed_out: bool,
}

impl ResilientFence {
    /// Starts `me`'s part of fence `epoch` over `members` (any order, `me` among them) with
    /// `known_failed` from the local detector and `contribution`; returns the first outputs.
    pub fn start(
        me: u32,
        epoch: u64,
        members: &[u32],
        known_failed: &[u32],
        contribution: Vec<Entry>,
        deadline_ms: Option<u64>,
    ) -> (ResilientFence, Vec<ResOut>) {
        let mut members = members.to_vec();
        members.sort_unstable();
        members.dedup();
        let my_idx = members
            .binary_search(&me)
            .expect("a fence member must be among the members");
        let n = members.len();
        let mut data = Gathered::new();
        data.insert(me, contribution);
        let mut m = ResilientFence {
            me,
            epoch,
            members,
            my_idx,
            dead: vec![false; n],
            failed: BTreeSet::new(),
            view: View {
                hash: view_hash(&[]),
                failed: Arc::new(Vec::new()),
            },
            deadline_ms,
            data,
            root: u32::MAX,
            reported: BTreeSet::new(),
            best_acked: None,
            up_sent_to: None,
            proposal: None,
            fresh: false,
            prop_sent: BTreeSet::new(),
            acks: BTreeSet::new(),
            ack_sent: None,
            decided: None,
            commit_sent: BTreeSet::new(),
            done_emitted: false,
            timed_out: false,
        };
        m.merge_failed(known_failed.iter().copied());
        let mut out = Vec::new();
        m.progress(&mut out);
        (m, out)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This participant's rank.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// Agreed (or timed out).
    pub fn is_finished(&self) -> bool {
        self.decided.is_some() || self.timed_out
    }

    /// The agreed outcome, once decided.
    pub fn decision(&self) -> Option<&Decision> {
        self.decided.as_ref().map(|(_, d)| d)
    }

    /// This member's failed set now (the local detector merged with what messages told).
    pub fn known_failed(&self) -> &[u32] {
        &self.view.failed
    }

    /// Feeds one input; returns what to do.
    pub fn handle(&mut self, input: ResIn) -> Vec<ResOut> {
        let mut out = Vec::new();
        match input {
            ResIn::PeerGone { rank } => {
                self.merge_failed(std::iter::once(rank));
            }
            ResIn::Tick { now_ms } => {
                if self.decided.is_none()
                    && !self.timed_out
                    && self.deadline_ms.is_some_and(|d| now_ms >= d)
                {
                    self.timed_out = true;
                    let waiting = self.waiting_for();
                    out.push(ResOut::TimedOut { waiting });
                    return out;
                }
            }
            ResIn::Msg { from, msg } => {
                if msg.epoch != self.epoch {
                    return out;
                }
                if msg.view.hash != self.view.hash {
                    self.merge_failed(msg.view.failed.iter().copied());
                }
                self.on_msg(from, msg.body, &mut out);
            }
        }
        self.progress(&mut out);
        out
    }

    /// Whom this member waits for: the root with a proposal, the live members that did not
    /// accept it; another member with a proposal, the root (for its commit); before that, the
    /// effective children that did not report, then the effective parent.
    fn waiting_for(&self) -> Vec<u32> {
        match (&self.proposal, self.eff_parent()) {
            (Some(_), None) => self
                .members
                .iter()
                .enumerate()
                .filter(|&(i, r)| i != self.my_idx && !self.dead[i] && !self.acks.contains(r))
                .map(|(_, r)| *r)
                .collect(),
            (Some(_), Some(_)) => vec![self.root],
            (None, parent) => self
                .eff_children()
                .into_iter()
                .filter(|c| !self.reported.contains(c))
                .chain(parent)
                .collect(),
        }
    }

    fn idx(&self, rank: u32) -> Option<usize> {
        self.members.binary_search(&rank).ok()
    }

    fn merge_failed(&mut self, ranks: impl Iterator<Item = u32>) {
        let mut changed = false;
        for r in ranks {
            if let Some(i) = self.idx(r) {
                if i != self.my_idx && !self.dead[i] {
                    self.dead[i] = true;
                    self.failed.insert(r);
                    self.acks.remove(&r);
                    changed = true;
                }
            }
        }
        if changed {
            let failed: Vec<u32> = self.failed.iter().copied().collect();
            self.view = View {
                hash: view_hash(&failed),
                failed: Arc::new(failed),
            };
        }
    }

    fn lowest_live(&self) -> usize {
        self.dead.iter().position(|d| !d).expect("I am live")
    }

    fn eff_parent_of(&self, i: usize) -> Option<usize> {
        let mut j = i;
        while j != 0 {
            j = tree_parent(j);
            if !self.dead[j] {
                return Some(j);
            }
        }
        let low = self.lowest_live();
        (low != i).then_some(low)
    }

    fn eff_parent(&self) -> Option<u32> {
        self.eff_parent_of(self.my_idx).map(|i| self.members[i])
    }

    /// Live members whose effective parent is me.
    fn eff_children(&self) -> Vec<u32> {
        let n = self.members.len();
        let mut out = Vec::new();
        let mut stack: Vec<usize> = tree_children(self.my_idx, n).collect();
        if self.my_idx == self.lowest_live() && self.my_idx != 0 {
            // Orphans: live members all of whose ancestors are dead.
            stack.push(0);
        }
        while let Some(i) = stack.pop() {
            if i == self.my_idx {
                continue;
            }
            if self.dead[i] {
                stack.extend(tree_children(i, n));
            } else {
                out.push(self.members[i]);
            }
        }
        out.sort_unstable();
        out
    }

    fn send(&self, to: u32, body: Body, out: &mut Vec<ResOut>) {
        out.push(ResOut::Send {
            to,
            msg: ResMsg {
                epoch: self.epoch,
                view: self.view.clone(),
                body,
            },
        });
    }

    fn on_msg(&mut self, from: u32, body: Body, out: &mut Vec<ResOut>) {
        if let Some((root, value)) = &self.decided {
            if !matches!(body, Body::Decided { .. } | Body::Nudge) {
                let (root, value) = (*root, value.clone());
                self.send(from, Body::Decided { root, value }, out);
            }
            return;
        }
        // The root as of the merged view.
        self.update_root();
        match body {
            Body::Decided { root, value } => {
                // No echo back to whoever told me.
                self.commit_sent.insert(from);
                self.decide(root, value)
            }
            // The first protocol's messages: not this protocol's.
            Body::Commit { .. } | Body::Ack { .. } => {}
            Body::Nudge => {}
            Body::Up { root, data, acked } => {
                if root != self.root {
                    // The sender's root is dead (it is lower than mine) or it will learn
                    // mine from this answer.
                    if root < self.root {
                        self.send(from, Body::Nudge, out);
                    }
                    self.data.extend(data);
                    return;
                }
                self.data.extend(data);
                self.note_acked(acked);
                self.reported.insert(from);
                if let Some((ballot, value)) = self.proposal.clone() {
                    // Past the gather: answer with the proposal.
                    self.prop_sent.insert(from);
                    self.send(from, Body::Propose { ballot, value }, out);
                }
            }
            Body::Propose { ballot, value } => {
                if ballot.0 != self.root {
                    if ballot.0 < self.root {
                        self.send(from, Body::Nudge, out);
                    }
                    return;
                }
                // A repeat (from an adopting grandparent, say) changes nothing: my acceptance
                // went straight to the root.
                if self.proposal.as_ref().is_none_or(|(b, _)| ballot > *b) {
                    self.proposal = Some((ballot, value));
                    self.prop_sent.clear();
                }
            }
            Body::Accepted { ballot } => {
                match &self.proposal {
                    // Only a live member's acceptance counts (a dead one is not waited for).
                    Some((b, _))
                        if *b == ballot && self.idx(from).is_some_and(|i| !self.dead[i]) =>
                    {
                        self.acks.insert(from);
                    }
                    Some((b, value)) if ballot.0 == self.root && ballot < *b => {
                        // An acceptance of an older attempt: send the current one.
                        let (b, value) = (*b, value.clone());
                        self.send(from, Body::Propose { ballot: b, value }, out);
                    }
                    _ if ballot.0 < self.root => self.send(from, Body::Nudge, out),
                    _ => {}
                }
            }
        }
    }

    fn note_acked(&mut self, acked: Option<(Ballot, Decision)>) {
        if let Some((b, v)) = acked {
            if self.best_acked.as_ref().is_none_or(|(mine, _)| b > *mine) {
                self.best_acked = Some((b, v));
            }
        }
    }

    /// Moves to a new root when the view says the old one is dead: a new gather, a new promise.
    fn update_root(&mut self) {
        let root = self.members[self.lowest_live()];
        if root != self.root {
            self.root = root;
            self.reported.clear();
            self.up_sent_to = None;
            if let Some(p) = self.proposal.take() {
                self.note_acked_own(p);
            }
            self.fresh = false;
            self.prop_sent.clear();
            self.acks.clear();
            self.ack_sent = None;
        }
    }

    fn note_acked_own(&mut self, p: (Ballot, Decision)) {
        // A proposal counts as acknowledged by me once I accepted it, which I do as soon as I
        // hold it: every proposal I held counts.
        self.note_acked(Some(p));
    }

    fn decide(&mut self, root: u32, value: Decision) {
        if self.decided.is_none() {
            self.decided = Some((root, value));
        }
    }

    /// Does whatever the state now allows (idempotent).
    fn progress(&mut self, out: &mut Vec<ResOut>) {
        if self.timed_out {
            return;
        }
        if self.decided.is_none() {
            self.update_root();
        }
        let children = self.eff_children();
        let parent = self.eff_parent();
        if let Some((decider, d)) = self.decided.clone() {
            if !self.done_emitted {
                self.done_emitted = true;
                out.push(ResOut::Done {
                    data: d.data.clone(),
                    failed: d.failed.clone(),
                });
            }
            let mut targets: Vec<u32> = Vec::new();
            if decider == self.me {
                // The deciding root: straight to every live member.
                targets.extend(
                    self.members
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != self.my_idx && !self.dead[i])
                        .map(|(_, r)| *r),
                );
            } else if self.idx(decider).is_some_and(|i| self.dead[i]) {
                // The deciding root died, perhaps with its commits half sent: members that
                // missed them gather for a new root and wait for their tree neighbours, so
                // tell those (and new ones after repairs).
                targets.extend(children.iter().copied().chain(parent));
            }
            for t in targets {
                if self.commit_sent.insert(t) {
                    let value = d.clone();
                    self.send(
                        t,
                        Body::Decided {
                            root: decider,
                            value,
                        },
                        out,
                    );
                }
            }
            return;
        }
        // Gather.
        let gathered = children.iter().all(|c| self.reported.contains(c));
        if self.proposal.is_none() {
            if !gathered {
                return;
            }
            match parent {
                Some(p) => {
                    if self.up_sent_to != Some(p) {
                        self.up_sent_to = Some(p);
                        let body = Body::Up {
                            root: self.root,
                            data: self.data.clone(),
                            acked: self.best_acked.clone(),
                        };
                        self.send(p, body, out);
                    }
                    return;
                }
                None => {
                    // I am the root: propose.
                    let value = match self.best_acked.clone() {
                        Some((_, v)) => {
                            self.fresh = false;
                            v
                        }
                        None => {
                            self.fresh = true;
                            self.fresh_value()
                        }
                    };
                    self.proposal = Some(((self.root, 0), value));
                }
            }
        }
        // Propagate the proposal to children not yet sent it.
        let (ballot, value) = self.proposal.clone().expect("a proposal");
        for &c in &children {
            if !self.prop_sent.contains(&c) {
                self.prop_sent.insert(c);
                self.send(
                    c,
                    Body::Propose {
                        ballot,
                        value: value.clone(),
                    },
                    out,
                );
            }
        }
        match parent {
            Some(_) => {
                // Accepted: straight to the root of the ballot.
                if self.ack_sent != Some(ballot) {
                    self.ack_sent = Some(ballot);
                    self.send(ballot.0, Body::Accepted { ballot }, out);
                }
            }
            None => {
                let live_others = self.members.len() - 1 - self.failed.len();
                if self.acks.len() < live_others {
                    return;
                }
                if self.fresh && *value.failed != *self.view.failed {
                    // The agreement found a failure: run it again with it.
                    let value = self.fresh_value();
                    self.proposal = Some(((ballot.0, ballot.1 + 1), value));
                    self.prop_sent.clear();
                    self.acks.clear();
                    self.progress(out);
                } else {
                    self.decide(self.me, value);
                    self.progress(out);
                }
            }
        }
    }

    /// A value from this root's knowledge: its failed set and the data of everyone else.
    fn fresh_value(&self) -> Decision {
        let data: Gathered = self
            .data
            .iter()
            .filter(|(r, _)| !self.failed.contains(r))
            .map(|(r, e)| (*r, e.clone()))
            .collect();
        Decision {
            failed: self.view.failed.clone(),
            data: Arc::new(data),
        }
    }
}

/// One message of every body kind, with and without failures in the view (unit tests, and the
/// fuzzers' seeds in `crate::wire_oracle`; cargo feature `wire-oracle`).
#[cfg(any(test, feature = "wire-oracle"))]
pub fn example_messages() -> Vec<ResMsg> {
    use crate::runtime::Scope;
    let failed = Arc::new(vec![2, 9]);
    let view = View {
        hash: view_hash(&failed),
        failed: failed.clone(),
    };
    let data: Gathered = [
        (
            1,
            vec![Entry {
                scope: Scope::Local,
                key: "k".into(),
                value: vec![1, 2, 3],
            }],
        ),
        (4, vec![]),
    ]
    .into();
    let value = Decision {
        failed,
        data: Arc::new(data.clone()),
    };
    let empty = View {
        hash: view_hash(&[]),
        failed: Arc::new(vec![]),
    };
    let bodies = vec![
        Body::Up {
            root: 1,
            data: data.clone(),
            acked: None,
        },
        Body::Up {
            root: 1,
            data,
            acked: Some(((0, 3), value.clone())),
        },
        Body::Propose {
            ballot: (1, 2),
            value: value.clone(),
        },
        Body::Ack { ballot: (7, 0) },
        Body::Commit {
            value: value.clone(),
        },
        Body::Nudge,
        Body::Accepted { ballot: (7, 1) },
        Body::Decided { root: 5, value },
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| ResMsg {
            epoch: u64::MAX - i as u64,
            view: if i % 2 == 0 {
                view.clone()
            } else {
                empty.clone()
            },
            body,
        })
        .collect()
}

#[cfg(test)]
mod tests;
