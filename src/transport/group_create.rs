//! Creating a group from a group over the transport (issue 32): the driver of the sans-IO
//! machine [`crate::runtime::group_create::GroupCreate`].
//!
//! [`Transport::group_create`] runs one operation: this process passes its group (its view,
//! which may differ from the others') and a string tag; every surviving participant comes out
//! with the same decision (docs/RUNTIME.md, "Creating a group that survives failures", states
//! the semantics). Contracts:
//! - **Peer to peer.** Protocol messages ([`GcMsg`], encoded) travel as transport messages of
//!   the reserved tag [`GROUP_CREATE_TAG`] straight between the participants; connections are
//!   made on first use like any send. No central server is in the path.
//! - **The reserved tag.** [`GROUP_CREATE_TAG`] (0x3f, the last of the tags Open MPI keeps for
//!   a BTL's own use, 0x20 to 0x3f, which its PMLs and one-sided components never use) is
//!   claimed by the first `group_create`: from then on `on_tag` of it fails with
//!   [`TransportError::TagInUse`]; a `group_create` while a user callback holds it fails the
//!   same way. Until the first call the tag is a user's like any other.
//! - **Failure detection, all local:** the runtime's failure events ([`Runtime::failed`],
//!   which also fail the endpoints of the dead), endpoints found failed, sends and their
//!   completions that fail (also of the empty probes a waiting process sends every
//!   [`PROBE_EVERY`] to whom it waits for), and the deadline (`timeout`), which ends the call
//!   with [`GroupCreateFailure::TimedOut`] naming whom it still waited for.
//! - **Other operations' messages.** A message of another operation's tag (a peer that is
//!   already in the next operation, or one whose call comes later here) is kept aside and fed
//!   to that operation when it starts here; up to [`ASIDE_MAX`] messages are kept (beyond,
//!   the oldest operation's are dropped, with a warning).
//! - **After deciding** the machine stays and keeps answering late messages with the decision
//!   from the receive callback, whoever drives progress, until the next `group_create` or
//!   `finalize`. A caller that leaves the job right after deciding should first let the others
//!   decide (the `openib group-create` command keeps progressing until an agreeing runtime
//!   fence over the survivors completes).
//! - **Completions** of the protocol's own sends are taken out of the completion queue by the
//!   call (a failed one is a failure notice); every other completion stays for the caller.
//!
//! Fault points (`OPENIB_FAULT`, src/fault.rs): `gc-before` (at the call, before anything is
//! sent), `gc-tree` (right after this process's first protocol send of the operation),
//! `gc-agree` (right after its first `Ack` or `Propose` of the operation: inside the
//! agreement). Their `N` is `k * size + rank`: rank `rank` dies in its operation number `k`
//! on this transport (from 0; so in the first, `N` is the rank as for every other point).

use super::{Completion, EndpointState, Tag, Transport, TransportError};
use crate::runtime::group_create::{
    tag_of, Body, Decision, GcIn, GcMsg, GcOut, GroupCreate, GroupCreateError,
};
use crate::runtime::Group;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The transport tag of the protocol's messages (see the module's contract).
pub const GROUP_CREATE_TAG: Tag = 0x3f;

/// Messages of other operations kept aside, at most.
pub const ASIDE_MAX: usize = 65_536;

/// How often a waiting process probes the peers it waits for, and the lowest participant not
/// known dead (the root it may wait for), with an empty message of [`GROUP_CREATE_TAG`]: a dead
/// peer fails the probe (its connection attempt or the queue pair's retries), which finds
/// deaths that the runtime does not report (mpirun 4.1.4 and Slurm deliver no failure
/// events, docs/RUNTIME.md).
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Why [`Transport::group_create`] gave this process no place in a new group.
#[derive(Debug, thiserror::Error)]
pub enum GroupCreateFailure {
    /// The operation decided, and the decision leaves this process out (`error` says who left
    /// it out and why: [`GroupCreateError::ExcludedBy`] names a participant whose group lacks
    /// it, [`GroupCreateError::NotAParticipant`] a late process that nobody's group named,
    /// [`GroupCreateError::AgreedDead`] a process the others found dead). `decision` is the
    /// decision as the members hold it (its group, the failed set, the participants).
    #[error("group-create {tag:?}: {error}")]
    LeftOut {
        tag: String,
        error: GroupCreateError,
        decision: Decision,
    },
    /// No decision before the deadline (a named process that never calls, or one hung but
    /// not dead): still waiting for these ranks.
    #[error(
        "group-create {tag:?}: no decision within {timeout:?}; still waiting for rank(s) {waiting:?}"
    )]
    TimedOut {
        tag: String,
        timeout: Duration,
        waiting: Vec<u32>,
    },
    /// This process is not a member of the group it passed (checked before anything is sent).
    #[error("group-create {tag:?}: rank {rank} is not a member of the group it passed")]
    NotInOwnGroup { tag: String, rank: u32 },
    /// The transport failed the call (the reserved tag held by a user callback, a call from
    /// inside a receive callback, or a progress error).
    #[error("group-create {tag:?}: {error}")]
    Transport { tag: String, error: TransportError },
}

/// What the receive callback and the caller share.
pub(super) struct GcState {
    /// The machine of the current operation, or of the last one (decided or timed out).
    current: Option<GroupCreate>,
    /// Messages of other operations (by their 64-bit tag), in arrival order.
    aside: BTreeMap<u64, Vec<(u32, GcMsg)>>,
    aside_len: usize,
    /// Tokens of the protocol's sends whose completions are not taken yet.
    tokens: HashSet<u64>,
    /// Fault points passed in the current operation (each fires once per operation).
    sent_any: bool,
    sent_agree: bool,
    /// Messages that did not decode (dropped, logged).
    bad: u64,
    /// Whom the current operation still waited for when its deadline passed.
    waiting: Option<Vec<u32>>,
    /// Operations started before the current one (the fault points' `k`).
    ops: u32,
    /// The clock the machine's milliseconds count from.
    epoch: Instant,
}

impl GcState {
    fn new() -> GcState {
        GcState {
            current: None,
            aside: BTreeMap::new(),
            aside_len: 0,
            tokens: HashSet::new(),
            sent_any: false,
            sent_agree: false,
            bad: 0,
            waiting: None,
            ops: 0,
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A message arrived: the current operation's go to its machine, others aside.
    fn on_message(&mut self, from: u32, data: &[u8]) -> Vec<GcOut> {
        if data.is_empty() {
            // A liveness probe (see `PROBE_EVERY`): nothing to answer.
            return Vec::new();
        }
        let msg = match GcMsg::decode(data) {
            Ok(m) => m,
            Err(e) => {
                self.bad += 1;
                tracing::warn!(from, error = %e, "group-create: a protocol message that does not decode, dropped");
                return Vec::new();
            }
        };
        match self.current.as_mut() {
            Some(m) if m.tag() == msg.tag => m.handle(GcIn::Msg { from, msg }),
            _ => {
                self.keep_aside(from, msg);
                Vec::new()
            }
        }
    }

    fn keep_aside(&mut self, from: u32, msg: GcMsg) {
        while self.aside_len >= ASIDE_MAX {
            let Some((&tag, _)) = self.aside.iter().next() else {
                break;
            };
            let dropped = self.aside.remove(&tag).map_or(0, |v| v.len());
            self.aside_len -= dropped;
            tracing::warn!(
                tag,
                dropped,
                "group-create: too many messages of other operations kept aside; dropped one operation's"
            );
        }
        self.aside.entry(msg.tag).or_default().push((from, msg));
        self.aside_len += 1;
    }
}

impl Transport {
    /// Creates a group from `group` with the other processes calling with the same `tag`
    /// (module docs: the contract; docs/RUNTIME.md: the semantics). `group` is this process's
    /// view (a [`Group`]: its members and the dead it knows of; the runtime's current failure
    /// snapshot is added). Returns this process's place: the new group, the agreed failed set
    /// and the participants, or why it has none ([`GroupCreateFailure`]). Waits at most
    /// `timeout`. The protocol's messages use [`GROUP_CREATE_TAG`].
    pub fn group_create(
        &mut self,
        group: &Group,
        tag: &str,
        timeout: Duration,
    ) -> Result<Decision, GroupCreateFailure> {
        let me = self.rank();
        let fail = |error| GroupCreateFailure::Transport {
            tag: tag.to_string(),
            error,
        };
        if self.in_callback() {
            return Err(fail(TransportError::InCallback {
                call: "group_create",
            }));
        }
        let st = self.group_create_state().map_err(fail)?;
        #[cfg(feature = "fault-injection")]
        {
            let s = st.lock().unwrap_or_else(|p| p.into_inner());
            let k = s.ops + u32::from(s.current.is_some());
            drop(s);
            crate::fault::point("gc-before", k * self.size() + me);
        }
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let group = group.with_failed(&self.rt.failed());
        let op = tag_of(tag);
        let out = {
            let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
            let deadline_ms = s.now_ms() + timeout.as_millis() as u64;
            let (mut m, mut out) = match GroupCreate::start(me, op, &group, Some(deadline_ms)) {
                Ok(x) => x,
                Err(_) => {
                    return Err(GroupCreateFailure::NotInOwnGroup {
                        tag: tag.to_string(),
                        rank: me,
                    })
                }
            };
            s.sent_any = false;
            s.sent_agree = false;
            s.waiting = None;
            if let Some(early) = s.aside.remove(&op) {
                s.aside_len -= early.len();
                for (from, msg) in early {
                    out.extend(m.handle(GcIn::Msg { from, msg }));
                }
            }
            if s.current.is_some() {
                s.ops += 1;
            }
            s.current = Some(m);
            out
        };
        tracing::debug!(tag, members = ?group.members(), failed = ?group.failed(), "group-create: started");
        self.gc_act(&st, out);
        let mut told: BTreeSet<u32> = group.failed().iter().copied().collect();
        let mut backoff = super::IdleBackoff::default();
        let mut next_probe = t0 + PROBE_EVERY;
        loop {
            if Instant::now() >= next_probe {
                next_probe = Instant::now() + PROBE_EVERY;
                self.gc_probe(&st);
            }
            if let Some(outcome) = Self::gc_finished(&st) {
                self.gc_take_completions(&st);
                return self.gc_outcome(tag, timeout, outcome);
            }
            self.progress_idle(&mut backoff).map_err(fail)?;
            // The local failure detector: the runtime's events, failed endpoints, failed
            // sends of the protocol, the clock.
            let mut gone: BTreeSet<u32> = self.rt.failed().into_iter().collect();
            for p in self.eps.keys() {
                if let Some(EndpointState::Failed(_)) = self.endpoint_state(p) {
                    gone.insert(p);
                }
            }
            gone.extend(self.gc_take_completions(&st));
            gone.remove(&me);
            let mut out = Vec::new();
            {
                let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                let now_ms = if Instant::now() >= deadline {
                    u64::MAX
                } else {
                    s.now_ms()
                };
                if let Some(m) = s.current.as_mut() {
                    for &r in gone.difference(&told) {
                        tracing::debug!(rank = r, "group-create: peer gone");
                        out.extend(m.handle(GcIn::PeerGone { rank: r }));
                    }
                    out.extend(m.handle(GcIn::Tick { now_ms }));
                }
            }
            told.extend(gone);
            self.gc_act(&st, out);
        }
    }

    /// The shared state, made (and the reserved tag's callback set) on first use.
    fn group_create_state(&mut self) -> Result<Arc<Mutex<GcState>>, TransportError> {
        if let Some(s) = &self.group_create {
            return Ok(s.clone());
        }
        if self.handlers.is_set(GROUP_CREATE_TAG) {
            return Err(TransportError::TagInUse {
                tag: GROUP_CREATE_TAG,
                by: "a user callback (group_create needs it)",
            });
        }
        let st = Arc::new(Mutex::new(GcState::new()));
        let cb = st.clone();
        self.handlers.set_with_transport(
            GROUP_CREATE_TAG,
            Box::new(move |t: &mut Transport, from, data: &[u8]| {
                let out = cb
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .on_message(from, data);
                t.gc_act(&cb, out);
            }),
        );
        self.group_create = Some(st.clone());
        Ok(st)
    }

    /// Sends what the machine asked for; a send that fails is a failure notice, fed back
    /// (and what the machine answers to it sent in turn).
    fn gc_act(&mut self, st: &Arc<Mutex<GcState>>, mut out: Vec<GcOut>) {
        while !out.is_empty() {
            let mut gone = Vec::new();
            for o in out.drain(..) {
                let (to, msg) = match o {
                    GcOut::Send { to, msg } => (to, msg),
                    GcOut::TimedOut { waiting } => {
                        st.lock().unwrap_or_else(|p| p.into_inner()).waiting = Some(waiting);
                        continue;
                    }
                    GcOut::Decided(_) => continue,
                };
                let agree = matches!(msg.body, Body::Ack { .. } | Body::Propose { .. });
                match self.send(to, GROUP_CREATE_TAG, &msg.encode()) {
                    Ok(token) => {
                        let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                        s.tokens.insert(token);
                        let k = s.ops;
                        let first = !s.sent_any;
                        let first_agree = agree && !s.sent_agree;
                        s.sent_any = true;
                        s.sent_agree |= agree;
                        drop(s);
                        #[cfg(feature = "fault-injection")]
                        {
                            let me = k * self.size() + self.rank();
                            if first {
                                crate::fault::point("gc-tree", me);
                            }
                            if first_agree {
                                crate::fault::point("gc-agree", me);
                            }
                        }
                        let _ = (k, first, first_agree);
                    }
                    Err(e) => {
                        tracing::debug!(to, error = %e, "group-create: send failed; the peer counts as gone");
                        gone.push(to);
                    }
                }
            }
            let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(m) = s.current.as_mut() {
                for r in gone {
                    out.extend(m.handle(GcIn::PeerGone { rank: r }));
                }
            }
        }
    }

    /// Sends an empty probe to the peers the current operation waits for and to the lowest
    /// participant not known dead; a send that fails is a failure notice.
    fn gc_probe(&mut self, st: &Arc<Mutex<GcState>>) {
        let me = self.rank();
        let targets: BTreeSet<u32> = {
            let s = st.lock().unwrap_or_else(|p| p.into_inner());
            let Some(m) = s.current.as_ref() else {
                return;
            };
            let dead = m.known_failed();
            m.waiting_for()
                .into_iter()
                .chain(
                    m.view()
                        .members
                        .iter()
                        .copied()
                        .find(|r| dead.binary_search(r).is_err()),
                )
                .filter(|&r| r != me)
                .collect()
        };
        let mut gone = Vec::new();
        for p in targets {
            match self.send(p, GROUP_CREATE_TAG, &[]) {
                Ok(token) => {
                    st.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .tokens
                        .insert(token);
                }
                Err(_) => gone.push(p),
            }
        }
        if gone.is_empty() {
            return;
        }
        let out = {
            let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
            let Some(m) = s.current.as_mut() else {
                return;
            };
            gone.into_iter()
                .flat_map(|r| m.handle(GcIn::PeerGone { rank: r }))
                .collect()
        };
        self.gc_act(st, out);
    }

    /// Takes the completions of the protocol's sends out of the queue (every other stays);
    /// returns the peers whose sends failed.
    fn gc_take_completions(&mut self, st: &Arc<Mutex<GcState>>) -> Vec<u32> {
        let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
        if s.tokens.is_empty() || self.done.is_empty() {
            return Vec::new();
        }
        let mut failed = Vec::new();
        self.done.retain(|c| match c {
            Completion::Done { token, .. } => !s.tokens.remove(token),
            Completion::Failed { peer, token, .. } => {
                if s.tokens.remove(token) {
                    failed.push(*peer);
                    false
                } else {
                    true
                }
            }
        });
        failed
    }

    /// The outcome, once the current machine decided or timed out.
    fn gc_finished(st: &Arc<Mutex<GcState>>) -> Option<Result<Decision, Vec<u32>>> {
        let s = st.lock().unwrap_or_else(|p| p.into_inner());
        let m = s.current.as_ref()?;
        if !m.is_finished() {
            return None;
        }
        match m.outcome() {
            Some(Ok(d)) => Some(Ok(d)),
            Some(Err(_)) => Some(Err(Vec::new())),
            None => Some(Err(m.view().members.to_vec())),
        }
    }

    fn gc_outcome(
        &self,
        tag: &str,
        timeout: Duration,
        outcome: Result<Decision, Vec<u32>>,
    ) -> Result<Decision, GroupCreateFailure> {
        let st = self.group_create.as_ref().expect("made by group_create");
        let s = st.lock().unwrap_or_else(|p| p.into_inner());
        let m = s.current.as_ref().expect("finished");
        match (outcome, m.decision()) {
            (Ok(d), _) => {
                tracing::debug!(tag, group = ?d.group, failed = ?d.failed, "group-create: member");
                Ok(d)
            }
            (Err(_), Some(v)) => {
                let error = m
                    .outcome()
                    .and_then(Result::err)
                    .expect("left out of a decision");
                Err(GroupCreateFailure::LeftOut {
                    tag: tag.to_string(),
                    error,
                    decision: Decision {
                        group: v.group().clone(),
                        failed: v.failed.clone(),
                        participants: v.view.members.clone(),
                    },
                })
            }
            (Err(_), None) => Err(GroupCreateFailure::TimedOut {
                tag: tag.to_string(),
                timeout,
                waiting: s.waiting.clone().unwrap_or_default(),
            }),
        }
    }
}
