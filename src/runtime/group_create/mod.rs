//! Creating a group from a group, surviving fail-stop failures and processes that pass
//! different groups (issue 32), as a sans-IO state machine.
//!
//! Each process passes its own group (a [`Group`]: its view, which may differ from the
//! others') and a tag; the processes come out with one decision ([`Value`]): the participants
//! U (every process of every group learned), the dead among them, and the new group N = the
//! intersection of the participants' groups minus the dead. A participant left out gets
//! [`GroupCreateError::ExcludedBy`] naming a process whose group lacks it.
//! docs/RUNTIME.md, "Creating a group that survives failures", states the semantics and the
//! algorithm; in short:
//! - **Tree.** A binomial tree over the sorted participants U, repaired around the dead as in
//!   the resilient fence (a dead child's children are adopted, a dead parent replaced by its
//!   nearest live ancestor, the root is the lowest live participant). A parent greets its
//!   children (`Hello`) and children report up (`Up`).
//! - **Views.** Every message carries the sender's view hash (U and I) and its dead. A
//!   different hash starts an exchange of whole views (`Full`); merging grows U, shrinks I and
//!   adds the dead, and the tree is rebuilt over the new U. A process waits for the exchanges
//!   it started before reporting up.
//! - **Agreement.** When every child reported, the root proposes (`Propose`, down the tree)
//!   the value of its view, or, if a report carried an accepted proposal, the highest one
//!   unchanged (Paxos); every participant acknowledges straight to the root (`Ack`); when
//!   every participant acknowledged or died and (for a value of its own) its view did not
//!   change, the root sends the decision to every live participant (`Commit`). A view that
//!   grew makes a new attempt, sent straight to every participant; one death does not (the
//!   value, fixed while the process lived, stands: it may be in the new group), two
//!   unacknowledged ones, one in the new group, do (that one may have taken a decision made
//!   without it). A decision made without a process that accepted a proposal naming it is
//!   taken only from that proposal's root (or from its root once that one died); a root
//!   takes a live participant's decision.
//!
//! Like [`super::resilient`] it never does I/O or reads a clock: fed [`GcIn`], it answers
//! [`GcOut`]. [`sim`] drives thousands of them.

pub mod sim;
mod tree;
pub mod wire;

pub use wire::{Ballot, Body, GcMsg, Value, View};

use super::Group;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// An input.
#[derive(Debug, Clone)]
pub enum GcIn {
    /// A message of this operation's tag (others are ignored).
    Msg { from: u32, msg: GcMsg },
    /// The local failure detector reports `rank` dead.
    PeerGone { rank: u32 },
    /// The clock, in milliseconds of the driver's choosing (only compared with the deadline).
    Tick { now_ms: u64 },
}

/// An output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcOut {
    Send {
        to: u32,
        msg: GcMsg,
    },
    /// The outcome for this process, emitted once. Keep the machine afterwards: it answers
    /// late messages with the decision.
    Decided(Result<Decision, GroupCreateError>),
    /// The deadline passed first (only with a detector that is not complete, e.g. a hung
    /// process, or a named process that never calls): still waiting for these.
    TimedOut {
        waiting: Vec<u32>,
    },
}

/// A member's outcome: the new group and what the decision says about the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The new group, ascending (this process is in it).
    pub group: Arc<Vec<u32>>,
    /// The participants agreed dead, ascending.
    pub failed: Arc<Vec<u32>>,
    /// Every participant (the union of the groups that took part), ascending.
    pub participants: Arc<Vec<u32>>,
}

/// Why this process has no place in the new group (or no outcome).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupCreateError {
    #[error("rank {rank} is not a member of the group it passed")]
    NotInOwnGroup { rank: u32 },
    #[error("rank {rank} is left out of the new group: rank {by}'s group does not include it")]
    ExcludedBy { rank: u32, by: u32 },
    #[error(
        "rank {rank} is left out of the new group: it is in no participant's group and reached \
         the operation after it was decided (rank {root}'s group does not include it)"
    )]
    NotAParticipant { rank: u32, root: u32 },
    #[error("rank {rank} is left out of the new group: the participants agreed it is dead")]
    AgreedDead { rank: u32 },
}

/// The outcome of `value` for `rank`.
pub fn outcome_for(rank: u32, value: &Value) -> Result<Decision, GroupCreateError> {
    let v = &value.view;
    if v.members.binary_search(&rank).is_err() {
        return Err(GroupCreateError::NotAParticipant {
            rank,
            root: value.root,
        });
    }
    if value.failed.binary_search(&rank).is_ok() {
        return Err(GroupCreateError::AgreedDead { rank });
    }
    if v.common.binary_search(&rank).is_err() {
        let by = v
            .excluded_by
            .binary_search_by_key(&rank, |e| e.0)
            .map(|i| v.excluded_by[i].1)
            .unwrap_or(value.root);
        return Err(GroupCreateError::ExcludedBy { rank, by });
    }
    Ok(Decision {
        group: value.group().clone(),
        failed: value.failed.clone(),
        participants: v.members.clone(),
    })
}

/// The 64-bit tag of a string tag (FNV-1a over its bytes), as MPI's string tags.
pub fn tag_of(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// One process's state for one group creation.
pub struct GroupCreate {
    me: u32,
    tag: u64,
    view: View,
    vhash: u64,
    /// Every death known (also outside U: U may grow to include it).
    dead: BTreeSet<u32>,
    failed_msg: Arc<Vec<u32>>,
    deadline_ms: Option<u64>,
    root: u32,
    /// The root and the view hash of each child's last report: it counts while both are mine
    /// (the same view is the same tree, and the child's group was merged).
    reported: BTreeMap<u32, (u32, u64)>,
    best_acked: Option<(Ballot, Value)>,
    max_term: u32,
    /// (parent, view hash, reports) of the last Up sent.
    up_sent: Option<(u32, u64, usize)>,
    hello_sent: BTreeMap<u32, u64>,
    /// Peers asked for their whole view, not answered yet.
    pending: BTreeSet<u32>,
    /// The view hash each peer had when it was asked.
    asked: BTreeMap<u32, u64>,
    accepted: Option<Ballot>,
    /// The current root's proposal (for forwarding; the root's own while it proposes).
    prop: Option<(Ballot, Value)>,
    /// `prop` is its root's own view (`Body::Propose::fresh`).
    prop_fresh: bool,
    prop_sent: BTreeSet<u32>,
    /// Root: the value is its own (may change), and (view hash, dead) when the attempt began.
    fresh: bool,
    prop_key: (u64, Arc<Vec<u32>>),
    acks: BTreeSet<u32>,
    decided: Option<Value>,
    /// The root whose commit decided it (this process, if it was that root).
    decided_by: u32,
    commit_sent: BTreeSet<u32>,
    /// Every process that sent me something (late joiners among them get the decision).
    contacts: BTreeSet<u32>,
    emitted: bool,
    timed_out: bool,
}

impl GroupCreate {
    /// Starts `me`'s part of operation `tag` over `group` (its members; its failed ranks are
    /// the local detector's snapshot). Fails only if `me` is not a member.
    pub fn start(
        me: u32,
        tag: u64,
        group: &Group,
        deadline_ms: Option<u64>,
    ) -> Result<(GroupCreate, Vec<GcOut>), GroupCreateError> {
        Self::start_shared(
            me,
            tag,
            Arc::new(group.members().to_vec()),
            group.failed(),
            deadline_ms,
        )
    }

    /// As [`Self::start`], with the members ascending and without duplicates, shared (the
    /// simulator passes one list to thousands of processes).
    pub fn start_shared(
        me: u32,
        tag: u64,
        members: Arc<Vec<u32>>,
        known_failed: &[u32],
        deadline_ms: Option<u64>,
    ) -> Result<(GroupCreate, Vec<GcOut>), GroupCreateError> {
        Self::start_view(
            me,
            tag,
            Self::initial_view(members),
            known_failed,
            deadline_ms,
        )
    }

    /// The view a process starts with: U = I = its group (ascending, no duplicates).
    pub fn initial_view(members: Arc<Vec<u32>>) -> View {
        View::new(members.clone(), members, Arc::new(Vec::new()))
    }

    /// As [`Self::start_shared`], from [`Self::initial_view`] of the group (built once for
    /// many processes passing the same group).
    pub fn start_view(
        me: u32,
        tag: u64,
        view: View,
        known_failed: &[u32],
        deadline_ms: Option<u64>,
    ) -> Result<(GroupCreate, Vec<GcOut>), GroupCreateError> {
        if view.members.binary_search(&me).is_err() || view.common != view.members {
            return Err(GroupCreateError::NotInOwnGroup { rank: me });
        }
        let vhash = view.hash();
        let mut m = GroupCreate {
            me,
            tag,
            view,
            vhash,
            dead: BTreeSet::new(),
            failed_msg: Arc::new(Vec::new()),
            deadline_ms,
            root: u32::MAX,
            reported: BTreeMap::new(),
            best_acked: None,
            max_term: 0,
            up_sent: None,
            hello_sent: BTreeMap::new(),
            pending: BTreeSet::new(),
            asked: BTreeMap::new(),
            accepted: None,
            prop: None,
            prop_fresh: false,
            prop_sent: BTreeSet::new(),
            fresh: false,
            prop_key: (0, Arc::new(Vec::new())),
            acks: BTreeSet::new(),
            decided: None,
            decided_by: u32::MAX,
            commit_sent: BTreeSet::new(),
            contacts: BTreeSet::new(),
            emitted: false,
            timed_out: false,
        };
        m.merge_dead(known_failed.iter().copied());
        let mut out = Vec::new();
        m.progress(&mut out);
        Ok((m, out))
    }

    /// This process's rank.
    pub fn me(&self) -> u32 {
        self.me
    }
    /// The operation's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }
    /// Decided (or timed out).
    pub fn is_finished(&self) -> bool {
        self.decided.is_some() || self.timed_out
    }
    /// The decided value, once decided.
    pub fn decision(&self) -> Option<&Value> {
        self.decided.as_ref()
    }
    /// This process's outcome, once decided.
    pub fn outcome(&self) -> Option<Result<Decision, GroupCreateError>> {
        self.decided.as_ref().map(|v| outcome_for(self.me, v))
    }
    /// What this process knows now.
    pub fn view(&self) -> &View {
        &self.view
    }
    /// The deaths known now (local detector and messages), ascending.
    pub fn known_failed(&self) -> &[u32] {
        &self.failed_msg
    }
    /// Whom this process waits for now (its unreported children, its parent, the peers whose
    /// views it asked for; the root: the participants that did not acknowledge), ascending. A
    /// driver without a complete failure detector probes these (a dead one fails the probe).
    pub fn waiting_for(&self) -> Vec<u32> {
        if self.is_finished() {
            return Vec::new();
        }
        self.waiting()
    }

    /// Feeds one input; returns what to do.
    pub fn handle(&mut self, input: GcIn) -> Vec<GcOut> {
        let mut out = Vec::new();
        if self.timed_out {
            return out;
        }
        match input {
            GcIn::PeerGone { rank } => self.merge_dead(std::iter::once(rank)),
            GcIn::Tick { now_ms } => {
                if self.decided.is_none() && self.deadline_ms.is_some_and(|d| now_ms >= d) {
                    self.timed_out = true;
                    out.push(GcOut::TimedOut {
                        waiting: self.waiting(),
                    });
                    return out;
                }
            }
            GcIn::Msg { from, msg } => {
                if msg.tag != self.tag || from == self.me {
                    return out;
                }
                self.merge_dead(msg.failed.iter().copied());
                if self.decided.is_none() {
                    self.contacts.insert(from);
                }
                self.on_msg(from, msg.view_hash, msg.body, &mut out);
            }
        }
        self.progress(&mut out);
        out
    }

    /// A one-line summary of the state (for the simulator's reports of a stuck run).
    pub fn describe(&self) -> String {
        format!(
            "rank {} root {} U {} I {} dead {:?} waiting {:?} pending {:?} prop {:?} accepted {:?} \
             acks {}",
            self.me,
            self.root,
            self.view.members.len(),
            self.view.common.len(),
            self.failed_msg,
            self.waiting(),
            self.pending,
            self.prop.as_ref().map(|p| p.0),
            self.accepted,
            self.acks.len()
        )
    }

    /// Who this process waits for now (for a timeout report).
    fn waiting(&self) -> Vec<u32> {
        if self.root == self.me && self.prop.is_some() {
            return self
                .live_members()
                .filter(|r| *r != self.me && !self.acks.contains(r))
                .collect();
        }
        let t = self.tree();
        let mut w: Vec<u32> = t
            .children()
            .into_iter()
            .filter(|c| !self.has_report(*c))
            .chain(self.pending.iter().copied())
            .chain(t.parent())
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    }

    /// `c` reported to my root with my view.
    fn has_report(&self, c: u32) -> bool {
        self.reported.get(&c) == Some(&(self.root, self.vhash))
    }

    fn is_dead(&self, r: u32) -> bool {
        r != self.me && self.dead.contains(&r)
    }

    fn live_members(&self) -> impl Iterator<Item = u32> + '_ {
        self.view
            .members
            .iter()
            .copied()
            .filter(|r| !self.is_dead(*r))
    }

    fn tree(&self) -> tree::Tree<'_, impl Fn(usize) -> bool + '_> {
        let members: &[u32] = &self.view.members;
        let me = members
            .binary_search(&self.me)
            .expect("me is a participant");
        tree::Tree {
            n: members.len(),
            me,
            dead: move |i: usize| self.dead.contains(&members[i]),
            members,
        }
    }

    /// The dead among the participants, ascending.
    fn failed_in_view(&self) -> Arc<Vec<u32>> {
        let v: Vec<u32> = self
            .dead
            .iter()
            .copied()
            .filter(|r| *r != self.me && self.view.members.binary_search(r).is_ok())
            .collect();
        if v == *self.prop_key.1 {
            self.prop_key.1.clone()
        } else {
            Arc::new(v)
        }
    }

    fn current_value(&self) -> Value {
        Value::new(self.view.clone(), self.failed_in_view(), self.me)
    }

    fn merge_dead(&mut self, ranks: impl Iterator<Item = u32>) {
        let mut changed = false;
        for r in ranks {
            if r != self.me && self.dead.insert(r) {
                changed = true;
            }
        }
        if changed {
            self.failed_msg = Arc::new(self.dead.iter().copied().collect());
        }
    }

    /// Merges `other`, the view of `owner` (a process whose group is within `other.members`).
    fn merge_view(&mut self, owner: u32, other: &View) {
        if other.hash() == self.vhash {
            return;
        }
        let mine = &self.view;
        let members = union(&mine.members, &other.members);
        let common = intersection(&mine.common, &other.common);
        let reason = |v: &View, x: u32| -> Option<u32> {
            v.excluded_by
                .binary_search_by_key(&x, |e| e.0)
                .ok()
                .map(|i| v.excluded_by[i].1)
        };
        let mut excluded_by = Vec::new();
        for &x in &members {
            if common.binary_search(&x).is_ok() {
                continue;
            }
            let in_mine = mine.members.binary_search(&x).is_ok();
            let in_other = other.members.binary_search(&x).is_ok();
            let cands = [
                if in_mine {
                    reason(mine, x)
                } else {
                    Some(self.me)
                },
                if in_other {
                    reason(other, x)
                } else {
                    Some(owner)
                },
            ];
            let by = cands.into_iter().flatten().min().unwrap_or(owner);
            excluded_by.push((x, by));
        }
        let view = View::new(
            if members.len() == mine.members.len() {
                mine.members.clone()
            } else {
                Arc::new(members)
            },
            if common.len() == mine.common.len() {
                mine.common.clone()
            } else {
                Arc::new(common)
            },
            Arc::new(excluded_by),
        );
        self.vhash = view.hash();
        self.view = view;
    }

    fn send(&self, to: u32, body: Body, out: &mut Vec<GcOut>) {
        out.push(GcOut::Send {
            to,
            msg: GcMsg {
                tag: self.tag,
                view_hash: self.vhash,
                failed: self.failed_msg.clone(),
                body,
            },
        });
    }

    fn full(&self, reply: bool) -> Body {
        Body::Full {
            view: self.view.clone(),
            reply,
        }
    }

    // An ack of a process outside my view must not fall through to the other arms.
    #[allow(clippy::collapsible_match)]
    fn on_msg(&mut self, from: u32, their_hash: u64, body: Body, out: &mut Vec<GcOut>) {
        if let Some(v) = &self.decided {
            // Always answer: with the decision.
            if !matches!(body, Body::Commit { .. } | Body::Nudge) {
                let value = v.clone();
                let by = self.decided_by;
                self.send(from, Body::Commit { by, value }, out);
            }
            return;
        }
        let is_full = matches!(body, Body::Full { .. });
        match body {
            Body::Commit { by, value } => {
                let foreign = value.view.members.binary_search(&self.me).is_err();
                let engaged = self
                    .best_acked
                    .as_ref()
                    .is_some_and(|(_, v)| v.view.members.binary_search(&self.me).is_ok());
                // The root of the proposal I accepted, once it holds another decision, will
                // never decide that proposal; nor will my root when that one died (any later
                // root needs my acknowledgement). And a participant of mine that holds a
                // decision never acknowledges, so while it lives no value of mine can be
                // decided: as the root I take its decision.
                let ballot_root = self
                    .accepted
                    .or_else(|| self.best_acked.as_ref().map(|(b, _)| *b))
                    .map(|b| b.1);
                let from_its_root = ballot_root == Some(from)
                    || (from == self.root && ballot_root.is_some_and(|r| self.is_dead(r)));
                let to_me_as_root = self.root == self.me
                    && !self.is_dead(from)
                    && self.view.members.binary_search(&from).is_ok();
                if foreign && engaged && !from_its_root && !to_me_as_root {
                    // A decision made without me, while I accepted a proposal that names me:
                    // that proposal's root may still decide it with me in its group. Not mine
                    // to adopt.
                    return;
                }
                self.commit_sent.insert(from);
                self.decided = Some(value);
                self.decided_by = by;
                return;
            }
            Body::Full { view, reply } => {
                self.merge_view(from, &view);
                self.pending.remove(&from);
                if reply {
                    self.send(from, self.full(false), out);
                }
            }
            Body::Hello => {
                // A process greets its children only while it gathers: if it greets me after
                // I got the root's proposal, its root started a new gather (it stepped down
                // and back): report again (and greet my children again).
                self.update_root();
                if self.prop.is_some() && self.root != self.me {
                    self.prop = None;
                    self.prop_sent.clear();
                    self.up_sent = None;
                    self.hello_sent.clear();
                }
            }
            Body::Nudge => {}
            Body::Up {
                root,
                max_term,
                acked,
            } => {
                self.update_root();
                self.max_term = self.max_term.max(max_term);
                self.note_acked(acked);
                self.reported.insert(from, (root, their_hash));
                if root == self.root {
                    if let Some(body) = self.prop_msg() {
                        // Past the gather: answer with the proposal.
                        self.prop_sent.insert(from);
                        self.send(from, body, out);
                    }
                } else if self.is_dead(root) {
                    self.send(from, Body::Nudge, out);
                }
            }
            Body::Propose {
                ballot,
                fresh,
                value,
            } => {
                self.merge_dead(value.failed.iter().copied());
                self.merge_view(value.root, &value.view);
                self.update_root();
                self.max_term = self.max_term.max(ballot.0);
                if ballot.1 != self.root {
                    if self.is_dead(ballot.1) {
                        self.send(from, Body::Nudge, out);
                    }
                } else if self.accepted.is_none_or(|a| ballot > a)
                    && fresh
                    && *value.view.members != *self.view.members
                {
                    // The root's own view, lacking participants I know (the merge above made
                    // mine a superset of it): accepting it (and passing it on) would let
                    // processes its root never heard of hold a value it may replace. Answer
                    // with my view instead; the root grows its view and proposes again.
                    self.send(self.root, self.full(false), out);
                } else if self.accepted.is_none_or(|a| ballot > a) {
                    self.accepted = Some(ballot);
                    self.note_acked(Some((ballot, value.clone())));
                    self.hold(ballot, value, fresh, from);
                    self.send(self.root, Body::Ack { ballot }, out);
                } else if self.accepted == Some(ballot) {
                    if self.prop.is_none() {
                        // Gathering again (a greeting came after the proposal): pass it on.
                        self.hold(ballot, value, fresh, from);
                    }
                    self.send(self.root, Body::Ack { ballot }, out);
                } else {
                    // Older than what I accepted (from an earlier root with a higher term):
                    // tell the root, which starts again above it.
                    let body = Body::Up {
                        root: self.root,
                        max_term: self.max_term,
                        acked: self.best_acked.clone(),
                    };
                    self.send(self.root, body, out);
                }
            }
            Body::Ack { ballot } => {
                self.update_root();
                match &self.prop {
                    Some((b, _)) if self.root == self.me && *b == ballot => {
                        if self.view.members.binary_search(&from).is_ok() {
                            self.acks.insert(from);
                        }
                    }
                    Some(_) if self.root == self.me && ballot.1 == self.me => {
                        // An older attempt of mine: send the current one.
                        let body = self.prop_msg().expect("a proposal");
                        self.send(from, body, out);
                    }
                    _ if self.is_dead(ballot.1) => self.send(from, Body::Nudge, out),
                    _ => {}
                }
            }
        }
        // A different view: ask for it (once per view of theirs), and wait for the answer.
        if !is_full && their_hash != self.vhash && self.asked.get(&from) != Some(&their_hash) {
            self.asked.insert(from, their_hash);
            self.pending.insert(from);
            self.send(from, self.full(true), out);
        }
    }

    fn note_acked(&mut self, acked: Option<(Ballot, Value)>) {
        if let Some((b, v)) = acked {
            self.max_term = self.max_term.max(b.0);
            if self.best_acked.as_ref().is_none_or(|(mine, _)| b > *mine) {
                self.best_acked = Some((b, v));
            }
        }
    }

    /// Moves to a new root when the view says so: a new gather, a new promise.
    fn update_root(&mut self) {
        let low = self.tree().lowest_live();
        let root = self.view.members[low];
        if root != self.root {
            self.root = root;
            self.up_sent = None;
            self.hello_sent.clear();
            self.prop = None;
            self.prop_sent.clear();
            self.acks.clear();
            self.fresh = false;
        }
    }

    /// Does whatever the state now allows (idempotent).
    fn progress(&mut self, out: &mut Vec<GcOut>) {
        if self.timed_out {
            return;
        }
        let dead = &self.dead;
        self.pending.retain(|r| !dead.contains(r));
        if let Some(value) = self.decided.clone() {
            if !self.emitted {
                self.emitted = true;
                out.push(GcOut::Decided(outcome_for(self.me, &value)));
                // Processes outside the decision's participants that I know of may be
                // waiting for me: they get the decision.
                let same_members = Arc::ptr_eq(&self.view.members, &value.view.members)
                    || *self.view.members == *value.view.members;
                let mine: &[u32] = if same_members {
                    &[]
                } else {
                    &self.view.members
                };
                let outside: Vec<u32> = self
                    .contacts
                    .iter()
                    .chain(mine.iter())
                    .copied()
                    .filter(|r| {
                        *r != self.me
                            && !self.is_dead(*r)
                            && value.view.members.binary_search(r).is_err()
                            && !self.commit_sent.contains(r)
                    })
                    .collect::<BTreeSet<u32>>()
                    .into_iter()
                    .collect();
                for x in outside {
                    self.commit_sent.insert(x);
                    let body = Body::Commit {
                        by: self.decided_by,
                        value: value.clone(),
                    };
                    self.send(x, body, out);
                }
            }
            if self.is_dead(self.decided_by) {
                // The deciding root may have died half way through its commits: pass it on.
                let near: Vec<u32> = {
                    let t = self.tree();
                    t.children().into_iter().chain(t.parent()).collect()
                };
                let targets: Vec<u32> = near
                    .into_iter()
                    .filter(|x| !self.commit_sent.contains(x))
                    .collect();
                for x in targets {
                    self.commit_sent.insert(x);
                    self.send(
                        x,
                        Body::Commit {
                            by: self.decided_by,
                            value: value.clone(),
                        },
                        out,
                    );
                }
            }
            return;
        }
        self.update_root();
        let t = self.tree();
        let children = t.children();
        let parent = t.parent();
        drop(t);
        if self.prop.is_none() {
            for &c in &children {
                if !self.has_report(c) && self.hello_sent.get(&c) != Some(&self.vhash) {
                    self.hello_sent.insert(c, self.vhash);
                    self.send(c, Body::Hello, out);
                }
            }
            let gathered = self.pending.is_empty() && children.iter().all(|c| self.has_report(*c));
            if !gathered {
                return;
            }
            match parent {
                Some(p) => {
                    let key = (p, self.vhash, self.reported.len());
                    if self.up_sent != Some(key) {
                        self.up_sent = Some(key);
                        let body = Body::Up {
                            root: self.root,
                            max_term: self.max_term,
                            acked: self.best_acked.clone(),
                        };
                        self.send(p, body, out);
                    }
                    return;
                }
                None => self.propose(),
            }
        }
        let (ballot, value) = self.prop.clone().expect("a proposal");
        if ballot.2 == 0 {
            for &c in &children {
                if self.prop_sent.insert(c) {
                    let body = self.prop_msg().expect("a proposal");
                    self.send(c, body, out);
                }
            }
        }
        if self.root != self.me {
            return;
        }
        if self.best_acked.as_ref().is_some_and(|(b, _)| *b > ballot) {
            // A participant accepted a higher ballot than mine: start again above it.
            self.propose();
            self.star_propose(out);
            return self.progress(out);
        }
        let failed = self.failed_in_view();
        // A view that grew makes a new attempt; a death mostly does not: the value stands, and
        // the acknowledgements of the participants still alive decide it (the orphans of a
        // dead process report to their new parent in the tree, which answers with the
        // proposal). Except the death of a member of my own value's new group that never
        // acknowledged it, when another participant died unacknowledged too: that member may
        // have taken, before it died, a decision made without it, and the group must not
        // name it then. (Such a decision reaches it only from a process of its view that
        // decided and so never acknowledges: alive, it keeps me from deciding until I take its
        // decision; so it died.)
        let unacked: Vec<u32> = failed
            .iter()
            .copied()
            .filter(|d| !self.acks.contains(d))
            .collect();
        let unacked_member_died = self.fresh
            && unacked.len() >= 2
            && unacked
                .iter()
                .any(|d| value.group().binary_search(d).is_ok());
        let changed = self.prop_key.0 != self.vhash || unacked_member_died;
        if changed {
            // A view that grew: a new attempt, straight to everyone.
            let value = if self.fresh {
                self.current_value()
            } else {
                value
            };
            let ballot = (ballot.0, ballot.1, ballot.2 + 1);
            self.prop_key = (self.vhash, failed.clone());
            self.accepted = Some(ballot);
            self.note_acked(Some((ballot, value.clone())));
            self.prop = Some((ballot, value));
            self.acks.clear();
            self.star_propose(out);
        }
        let (_, value) = self.prop.clone().expect("a proposal");
        let dead_unacked = failed.iter().filter(|d| !self.acks.contains(d)).count();
        if self.pending.is_empty() && self.acks.len() + dead_unacked + 1 >= self.view.members.len()
        {
            self.decided = Some(value.clone());
            self.decided_by = self.me;
            let targets: Vec<u32> = self.live_members().filter(|r| *r != self.me).collect();
            for to in targets {
                self.commit_sent.insert(to);
                let body = Body::Commit {
                    by: self.decided_by,
                    value: value.clone(),
                };
                self.send(to, body, out);
            }
            self.progress(out);
        }
    }

    /// Sends the current proposal straight to every live participant.
    fn star_propose(&mut self, out: &mut Vec<GcOut>) {
        let body = self.prop_msg().expect("a proposal");
        let targets: Vec<u32> = self.live_members().filter(|r| *r != self.me).collect();
        self.prop_sent = targets.iter().copied().collect();
        for to in targets {
            self.send(to, body.clone(), out);
        }
    }

    /// The held proposal as a message (`prop` with `prop_fresh`).
    fn prop_msg(&self) -> Option<Body> {
        let (ballot, value) = self.prop.clone()?;
        Some(Body::Propose {
            ballot,
            fresh: self.prop_fresh,
            value,
        })
    }

    /// Holds the current root's proposal (got from `from`) to pass on.
    fn hold(&mut self, ballot: Ballot, value: Value, fresh: bool, from: u32) {
        self.prop = Some((ballot, value));
        self.prop_fresh = fresh;
        self.prop_sent.clear();
        self.prop_sent.insert(from);
    }

    /// The root starts the agreement: the highest accepted proposal reported, else its view.
    fn propose(&mut self) {
        let (value, fresh) = match self.best_acked.clone() {
            Some((_, v)) => {
                // Its participants are participants: wait for their acks too.
                self.merge_dead(v.failed.iter().copied());
                self.merge_view(v.root, &v.view);
                (v, false)
            }
            None => (self.current_value(), true),
        };
        let ballot = (self.max_term + 1, self.me, 0);
        self.max_term = ballot.0;
        self.fresh = fresh;
        self.prop_fresh = fresh;
        self.prop_key = (self.vhash, self.failed_in_view());
        self.accepted = Some(ballot);
        self.note_acked(Some((ballot, value.clone())));
        self.prop = Some((ballot, value));
        self.prop_sent.clear();
        self.acks.clear();
    }
}

/// Sorted union of two ascending lists.
fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    use std::cmp::Ordering;
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) => match x.cmp(&y) {
                Ordering::Equal => {
                    out.push(x);
                    i += 1;
                    j += 1;
                }
                Ordering::Less => {
                    out.push(x);
                    i += 1;
                }
                Ordering::Greater => {
                    out.push(y);
                    j += 1;
                }
            },
            (Some(&x), None) => {
                out.push(x);
                i += 1;
            }
            (None, Some(&y)) => {
                out.push(y);
                j += 1;
            }
            (None, None) => return out,
        }
    }
}

/// Sorted intersection of two ascending lists.
fn intersection(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter()
        .copied()
        .filter(|x| b.binary_search(x).is_ok())
        .collect()
}

#[cfg(test)]
mod tests;
