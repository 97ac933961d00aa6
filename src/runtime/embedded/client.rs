//! A process's connection to the embedded runtime: puts, commits, gets, and the fence it runs
//! over messages the server routes.

use super::fence_payload::FencePayload;
use super::{io, RANK_ENV, SOCKET_ENV, TOKEN_ENV};
use crate::runtime::fence::{FenceIn, FenceMachine, FenceOut, FenceTopology, Star, PARENT_GRACE};
use crate::runtime::resilient::{ResIn, ResOut, ResilientFence};
use crate::runtime::wire::{read_frame, write_frame, Entry, GetStatus, Msg};
use crate::runtime::{JobInfo, Result, Runtime, RuntimeError, Scope};
use std::collections::{BTreeSet, HashMap};
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which fence the client runs (every process of a job must run the same one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceKind {
    /// The fault-tolerant fence of [`crate::runtime::resilient`]: a binomial tree that repairs itself
    /// around dead ranks and ends, on every survivor, with the same data and failed set.
    #[default]
    Resilient,
    /// The star of [`crate::runtime::fence`] rooted at rank 0: any death fails the fence.
    Star,
}

/// How long past the deadline the root of a timed-out resilient fence collects
/// [`FencePayload::Present`]s before it names the members it never heard from.
pub const VERDICT_GRACE: Duration = Duration::from_secs(1);

pub(super) enum Event {
    Fence {
        from: u32,
        msg: FencePayload,
    },
    PeerGone {
        rank: u32,
    },
    /// A fence message to `rank` was dropped: it left cleanly (after deciding its fences).
    PeerExited {
        rank: u32,
    },
}

pub(super) struct ClientShared {
    replies: Mutex<HashMap<u64, Sender<GetStatus>>>,
    /// The failure detector: ranks the server reported dead.
    failed: Mutex<BTreeSet<u32>>,
    /// Every failed set a resilient fence of this process agreed on, merged.
    agreed: Mutex<BTreeSet<u32>>,
    pub(super) writer: Mutex<UnixStream>,
    /// The last finished resilient fence: it keeps answering late messages of its epoch (a
    /// member repairing its tree after the decision) from the reader thread until the next
    /// fence. Events are queued under this lock, so none slips past a fence that just ended.
    pub(super) last: Mutex<Option<ResilientFence>>,
}

impl ClientShared {
    fn send(&self, m: &Msg) -> Result<()> {
        write_frame(&mut *self.writer.lock().expect("writer lock"), m)
            .map_err(io("writing to the runtime server"))
    }

    /// Routes the sends of a finished machine (its `Done` was already taken).
    fn route_late(&self, outs: Vec<ResOut>) {
        for o in outs {
            if let ResOut::Send { to, msg } = o {
                let payload = FencePayload::Res(msg).encode();
                if let Err(e) = self.send(&Msg::Route { to, payload }) {
                    tracing::debug!(error = %e, "late fence answer not sent");
                }
            }
        }
    }
}

/// A process's connection to the embedded runtime.
pub struct Client {
    info: JobInfo,
    nodes: Vec<String>,
    pub(super) shared: Arc<ClientShared>,
    pub(super) events: Mutex<Receiver<Event>>,
    /// Fence messages of later epochs that arrived early.
    early: Mutex<Vec<(u32, FencePayload)>>,
    pending: Mutex<Vec<Entry>>,
    committed: Mutex<Vec<Entry>>,
    /// Values delivered by collecting fences: (rank, key) -> value.
    cache: Mutex<HashMap<(u32, String), Vec<u8>>>,
    epoch: AtomicU64,
    next_req: AtomicU64,
    fence_lock: Mutex<()>,
    fence_kind: FenceKind,
    topology: TopologyFn,
}

/// Builds the star fence's topology over the members.
type TopologyFn = Box<dyn Fn(&[u32]) -> Box<dyn FenceTopology> + Send + Sync>;

/// How a resilient fence call ended.
enum ResEnd {
    Done {
        data: Arc<crate::runtime::resilient::Gathered>,
        failed: Arc<Vec<u32>>,
    },
    Failed(RuntimeError),
}

impl Client {
    /// Joins the job described by `OPENIB_RT_SOCKET`, `OPENIB_RT_RANK` and `OPENIB_RT_TOKEN`,
    /// with the fence `OPENIB_RT_FENCE` names (default resilient).
    pub fn connect_from_env() -> Result<Client> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| RuntimeError::Backend {
                backend: "embedded",
                what: format!("{k} is not set (start the job with `openib run`)"),
            })
        };
        let socket = var(SOCKET_ENV)?;
        let rank: u32 = var(RANK_ENV)?.parse().map_err(|_| RuntimeError::Backend {
            backend: "embedded",
            what: format!("{RANK_ENV} is not a number"),
        })?;
        let token = hex::decode(var(TOKEN_ENV)?)
            .ok()
            .ok_or_else(|| RuntimeError::Backend {
                backend: "embedded",
                what: format!("{TOKEN_ENV} is not hex"),
            })?;
        let fence = match crate::config::choice("OPENIB_RT_FENCE") {
            Ok(Some("star")) => FenceKind::Star,
            Ok(_) => FenceKind::Resilient,
            Err(e) => {
                return Err(RuntimeError::Backend {
                    backend: "embedded",
                    what: e.to_string(),
                })
            }
        };
        Ok(Self::connect(Path::new(&socket), rank, token)?.with_fence(fence))
    }

    /// Joins the job at `socket` as `rank`.
    pub fn connect(socket: &Path, rank: u32, token: Vec<u8>) -> Result<Client> {
        let stream = UnixStream::connect(socket)
            .map_err(io(format!("connecting to {}", socket.display())))?;
        let mut reader = BufReader::new(stream.try_clone().map_err(io("cloning the socket"))?);
        let mut writer = stream;
        write_frame(&mut writer, &Msg::Hello { rank, token }).map_err(io("sending hello"))?;
        let nodes = match read_frame(&mut reader).map_err(io("reading welcome"))? {
            Some(Msg::Welcome { nodes }) => nodes,
            _ => {
                return Err(RuntimeError::Protocol(
                    "the server refused this process (bad token or rank?)".into(),
                ))
            }
        };
        let size = nodes.len() as u32;
        if rank >= size {
            return Err(RuntimeError::BadRank { rank, size });
        }
        let node = nodes[rank as usize].clone();
        let local_peers: Vec<u32> = (0..size).filter(|&r| nodes[r as usize] == node).collect();
        let local_rank = local_peers
            .iter()
            .position(|&r| r == rank)
            .expect("self is local") as u32;
        let info = JobInfo {
            rank,
            size,
            node,
            local_rank,
            local_peers,
            backend: "embedded".into(),
        };
        let shared = Arc::new(ClientShared {
            replies: Mutex::new(HashMap::new()),
            failed: Mutex::new(BTreeSet::new()),
            agreed: Mutex::new(BTreeSet::new()),
            writer: Mutex::new(writer),
            last: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let s = shared.clone();
        std::thread::Builder::new()
            .name("openib-rt-client".into())
            .spawn(move || client_reader(reader, s, tx))
            .map_err(io("spawning the client reader"))?;
        Ok(Client {
            info,
            nodes,
            shared,
            events: Mutex::new(rx),
            early: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            committed: Mutex::new(Vec::new()),
            cache: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            next_req: AtomicU64::new(1),
            fence_lock: Mutex::new(()),
            fence_kind: FenceKind::default(),
            topology: Box::new(|members: &[u32]| Box::new(Star::new(members.to_vec()))),
        })
    }

    /// Chooses the fence this client runs (before the first fence; every process of the job
    /// must choose the same).
    pub fn with_fence(mut self, kind: FenceKind) -> Client {
        self.fence_kind = kind;
        self
    }

    pub(super) fn send(&self, m: &Msg) -> Result<()> {
        self.shared.send(m)
    }

    fn visible_to_me(&self, owner: u32, scope: Scope) -> bool {
        let same = self.nodes.get(owner as usize) == Some(&self.info.node);
        match scope {
            Scope::Global => true,
            Scope::Local => same,
            Scope::Remote => !same,
        }
    }

    fn contribution(&self, collect: bool) -> Vec<Entry> {
        if collect {
            self.committed.lock().expect("committed").clone()
        } else {
            Vec::new()
        }
    }

    /// Messages of `epoch` that arrived during an earlier fence (later ones stay aside).
    fn take_early(&self, epoch: u64) -> Vec<(u32, FencePayload)> {
        let mut backlog = Vec::new();
        self.early.lock().expect("early").retain(|(from, m)| {
            if m.epoch() == epoch {
                backlog.push((*from, m.clone()));
                false
            } else {
                m.epoch() > epoch
            }
        });
        backlog
    }

    fn store(&self, data: impl IntoIterator<Item = (u32, Vec<Entry>)>) {
        let mut cache = self.cache.lock().expect("cache");
        for (rank, entries) in data {
            for e in entries
                .into_iter()
                .filter(|e| self.visible_to_me(rank, e.scope))
            {
                cache.insert((rank, e.key), e.value);
            }
        }
    }

    fn run_fence(&self, collect: bool, timeout: Duration) -> Result<()> {
        let _one_at_a_time = self.fence_lock.lock().expect("fence lock");
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fence_kind {
            FenceKind::Star => self.run_star_fence(epoch, collect, timeout),
            FenceKind::Resilient => self.run_resilient_fence(epoch, collect, timeout),
        }
    }

    /// The resilient fence over the members not yet agreed dead, driven by events from the
    /// reader (messages, the server's death notices) and ticks of this loop. A fence that
    /// agrees on failures succeeds; [`Runtime::agreed_failed`] then names them. Only a live
    /// member that never arrives fails it: at the deadline, the root (lowest live member)
    /// collects `Present`s for [`VERDICT_GRACE`] and names everyone it did not hear from in a
    /// `Verdict`; the others wait up to [`PARENT_GRACE`] for it (else they name the root).
    fn run_resilient_fence(&self, epoch: u64, collect: bool, timeout: Duration) -> Result<()> {
        let me = self.info.rank;
        let agreed = self.shared.agreed.lock().expect("agreed").clone();
        if agreed.contains(&me) {
            // Only possible if a fence's view said this live process died (the server saw its
            // connection end): the others no longer wait for it.
            return Err(RuntimeError::PeerFailed { ranks: vec![me] });
        }
        let members: Vec<u32> = (0..self.info.size)
            .filter(|r| !agreed.contains(r))
            .collect();
        let known: Vec<u32> = self
            .shared
            .failed
            .lock()
            .expect("failed")
            .iter()
            .copied()
            .collect();
        // The previous decided fence (`last`) keeps answering from the reader thread while this
        // one runs: a member still repairing its tree in it may need an answer from us before
        // it can join this one (it cannot be two fences behind: this one needs it).
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let deadline_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let (mut machine, mut outs) = ResilientFence::start(
            me,
            epoch,
            &members,
            &known,
            self.contribution(collect),
            Some(deadline_ms),
        );
        let mut heard: BTreeSet<u32> = BTreeSet::new();
        #[cfg(feature = "fault-injection")]
        let mut sent_any = false;
        // After the deadline: (root, give up at).
        let mut timed_out: Option<(u32, Instant)> = None;
        let mut end: Option<ResEnd> = None;
        let mut pending: Vec<(u32, FencePayload)> = self.take_early(epoch);
        let events = self.events.lock().expect("events");
        loop {
            for (from, p) in pending.drain(..) {
                heard.insert(from);
                match p {
                    FencePayload::Res(msg) => {
                        outs.extend(machine.handle(ResIn::Msg { from, msg }));
                    }
                    FencePayload::Present { .. } => {}
                    FencePayload::Verdict { missing, .. } => {
                        end.get_or_insert(ResEnd::Failed(RuntimeError::FenceTimeout {
                            timeout,
                            missing,
                        }));
                    }
                    FencePayload::Star(m) => {
                        tracing::warn!(from, msg = ?m, "star fence message in a resilient fence (do all ranks run the same fence?)");
                    }
                }
            }
            for o in std::mem::take(&mut outs) {
                match o {
                    ResOut::Send { to, msg } => {
                        self.send(&Msg::Route {
                            to,
                            payload: FencePayload::Res(msg).encode(),
                        })?;
                        #[cfg(feature = "fault-injection")]
                        if !sent_any {
                            sent_any = true;
                            crate::fault::point("in-fence", me);
                        }
                    }
                    ResOut::Done { data, failed } => {
                        end.get_or_insert(ResEnd::Done { data, failed });
                    }
                    ResOut::TimedOut { .. } if end.is_none() && timed_out.is_none() => {
                        let root = members
                            .iter()
                            .copied()
                            .find(|r| !machine.known_failed().contains(r))
                            .unwrap_or(me);
                        let grace = if root == me {
                            VERDICT_GRACE
                        } else {
                            self.send(&Msg::Route {
                                to: root,
                                payload: FencePayload::Present { epoch }.encode(),
                            })?;
                            PARENT_GRACE
                        };
                        tracing::debug!(me, root, "resilient fence past its deadline");
                        timed_out = Some((root, Instant::now() + grace));
                    }
                    ResOut::TimedOut { .. } => {}
                }
            }
            if end.is_none() && timed_out.is_some() {
                // A decision that arrives while waiting for the verdict still counts.
                if let Some(d) = machine.decision() {
                    end = Some(ResEnd::Done {
                        data: d.data.clone(),
                        failed: d.failed.clone(),
                    });
                }
            }
            if let Some((root, give_up)) = timed_out {
                if end.is_none() && Instant::now() >= give_up {
                    let failed = machine.known_failed().to_vec();
                    let missing: Vec<u32> = if root == me {
                        members
                            .iter()
                            .copied()
                            .filter(|r| *r != me && !heard.contains(r) && !failed.contains(r))
                            .collect()
                    } else {
                        vec![root]
                    };
                    if root == me {
                        for &r in heard.iter().filter(|r| !failed.contains(r)) {
                            self.send(&Msg::Route {
                                to: r,
                                payload: FencePayload::Verdict {
                                    epoch,
                                    missing: missing.clone(),
                                }
                                .encode(),
                            })?;
                        }
                    }
                    end = Some(ResEnd::Failed(RuntimeError::FenceTimeout {
                        timeout,
                        missing,
                    }));
                }
            }
            if let Some(end) = end {
                drop(events);
                return self.finish_resilient(machine, end, collect);
            }
            let next = match timed_out {
                Some((_, give_up)) => give_up,
                None => deadline,
            };
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100))
                .max(Duration::from_millis(1));
            match events.recv_timeout(wait) {
                Ok(Event::Fence { from, msg }) if msg.epoch() == epoch => pending.push((from, msg)),
                Ok(Event::Fence { from, msg }) => {
                    if msg.epoch() > epoch {
                        self.early.lock().expect("early").push((from, msg));
                    }
                }
                Ok(Event::PeerGone { rank }) => {
                    outs.extend(machine.handle(ResIn::PeerGone { rank }))
                }
                // A member that left cleanly decided this fence before it went (it finished
                // every fence): routing around it as if dead reaches a live member holding
                // the same decision, and the decided value cannot change (everyone live acked
                // it), so it is never named failed.
                Ok(Event::PeerExited { rank }) => {
                    tracing::debug!(rank, "fence peer left; routing around it");
                    outs.extend(machine.handle(ResIn::PeerGone { rank }))
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RuntimeError::Backend {
                        backend: "embedded",
                        what: "the runtime server went away".into(),
                    })
                }
            }
            let now_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
            outs.extend(machine.handle(ResIn::Tick { now_ms }));
        }
    }

    /// Ends a resilient fence: keeps a decided machine answering late messages, records the
    /// agreed failed set and the delivered data.
    fn finish_resilient(&self, machine: ResilientFence, end: ResEnd, collect: bool) -> Result<()> {
        let epoch = machine.epoch();
        if machine.decision().is_some() {
            let mut last = self.shared.last.lock().expect("last");
            *last = Some(machine);
            // Messages of this epoch queued before `last` was set are answered now; the reader
            // answers later ones itself.
            let events = self.events.lock().expect("events");
            while let Ok(ev) = events.try_recv() {
                let m = last.as_mut().expect("just set");
                match ev {
                    Event::Fence {
                        from,
                        msg: FencePayload::Res(msg),
                    } if msg.epoch == epoch => {
                        let outs = m.handle(ResIn::Msg { from, msg });
                        self.shared.route_late(outs);
                    }
                    Event::Fence { from, msg } if msg.epoch() > epoch => {
                        self.early.lock().expect("early").push((from, msg));
                    }
                    Event::Fence { .. } => {}
                    Event::PeerGone { rank } | Event::PeerExited { rank } => {
                        let outs = m.handle(ResIn::PeerGone { rank });
                        self.shared.route_late(outs);
                    }
                }
            }
        }
        match end {
            ResEnd::Done { data, failed } => {
                if !failed.is_empty() {
                    tracing::debug!(epoch, failed = ?failed, "resilient fence agreed on failures");
                    let mut agreed = self.shared.agreed.lock().expect("agreed");
                    agreed.extend(failed.iter().copied());
                    // A rank learnt dead only through the agreement is dead for this detector too.
                    self.shared
                        .failed
                        .lock()
                        .expect("failed")
                        .extend(failed.iter().copied());
                }
                if collect {
                    let data = Arc::try_unwrap(data).unwrap_or_else(|a| (*a).clone());
                    self.store(data);
                }
                Ok(())
            }
            ResEnd::Failed(e) => Err(e),
        }
    }

    fn run_star_fence(&self, epoch: u64, collect: bool, timeout: Duration) -> Result<()> {
        let members: Vec<u32> = (0..self.info.size).collect();
        let topo = (self.topology)(&members);
        let deadline = Instant::now() + timeout;
        let (mut machine, mut outs) = FenceMachine::start(
            self.info.rank,
            epoch,
            topo.as_ref(),
            self.contribution(collect),
            deadline,
        );
        let backlog = self.take_early(epoch);
        for &r in self.shared.failed.lock().expect("failed").iter() {
            outs.extend(machine.handle(FenceIn::PeerGone { rank: r }));
        }
        for (from, msg) in backlog {
            if let FencePayload::Star(msg) = msg {
                outs.extend(machine.handle(FenceIn::Msg { from, msg }));
            }
        }
        #[cfg(feature = "fault-injection")]
        let mut sent_any = false;
        let events = self.events.lock().expect("events");
        loop {
            for o in std::mem::take(&mut outs) {
                match o {
                    FenceOut::Send { to, msg } => {
                        self.send(&Msg::Route {
                            to,
                            payload: msg.encode(),
                        })?;
                        #[cfg(feature = "fault-injection")]
                        if !sent_any {
                            sent_any = true;
                            crate::fault::point("in-fence", self.info.rank);
                        }
                    }
                    FenceOut::Done { data } => {
                        if collect {
                            self.store(data);
                        }
                        return Ok(());
                    }
                    FenceOut::Failed { missing } => {
                        let failed = self.shared.failed.lock().expect("failed");
                        return Err(
                            if !missing.is_empty() && missing.iter().all(|r| failed.contains(r)) {
                                RuntimeError::PeerFailed { ranks: missing }
                            } else {
                                RuntimeError::FenceTimeout { timeout, missing }
                            },
                        );
                    }
                }
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100))
                .max(Duration::from_millis(1));
            match events.recv_timeout(wait) {
                Ok(Event::Fence {
                    from,
                    msg: FencePayload::Star(msg),
                }) if msg.epoch() == epoch => {
                    outs.extend(machine.handle(FenceIn::Msg { from, msg }))
                }
                Ok(Event::Fence { from, msg }) => {
                    if msg.epoch() > epoch {
                        self.early.lock().expect("early").push((from, msg));
                    }
                }
                Ok(Event::PeerGone { rank }) => {
                    outs.extend(machine.handle(FenceIn::PeerGone { rank }))
                }
                Ok(Event::PeerExited { .. }) => {}
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RuntimeError::Backend {
                        backend: "embedded",
                        what: "the runtime server went away".into(),
                    })
                }
            }
            outs.extend(machine.handle(FenceIn::Tick {
                now: Instant::now(),
            }));
        }
    }
}

fn client_reader(
    mut reader: BufReader<UnixStream>,
    shared: Arc<ClientShared>,
    events: Sender<Event>,
) {
    while let Ok(Some(m)) = read_frame(&mut reader) {
        match m {
            Msg::Routed { from, payload } => match FencePayload::decode(&payload) {
                Ok(msg) => {
                    let mut last = shared.last.lock().expect("last");
                    match (last.as_mut(), msg) {
                        (Some(done), FencePayload::Res(msg)) if done.epoch() == msg.epoch => {
                            let outs = done.handle(ResIn::Msg { from, msg });
                            shared.route_late(outs);
                        }
                        (_, msg) => {
                            let _ = events.send(Event::Fence { from, msg });
                        }
                    }
                }
                Err(e) => tracing::warn!(from, error = %e, "undecodable fence message dropped"),
            },
            Msg::GetReply { req, status } => {
                if let Some(tx) = shared.replies.lock().expect("replies").remove(&req) {
                    let _ = tx.send(status);
                }
            }
            Msg::PeerGone { rank } => {
                shared.failed.lock().expect("failed").insert(rank);
                let mut last = shared.last.lock().expect("last");
                if let Some(done) = last.as_mut() {
                    let outs = done.handle(ResIn::PeerGone { rank });
                    shared.route_late(outs);
                }
                let _ = events.send(Event::PeerGone { rank });
            }
            Msg::PeerExited { rank } => {
                let _ = events.send(Event::PeerExited { rank });
            }
            other => tracing::debug!(msg = ?other, "unexpected message from the server"),
        }
    }
}

impl Runtime for Client {
    fn info(&self) -> &JobInfo {
        &self.info
    }

    fn node_of(&self, rank: u32) -> Result<String> {
        self.nodes
            .get(rank as usize)
            .cloned()
            .ok_or(RuntimeError::BadRank {
                rank,
                size: self.info.size,
            })
    }

    fn put(&self, scope: Scope, key: &str, value: &[u8]) -> Result<()> {
        self.pending.lock().expect("pending").push(Entry {
            scope,
            key: key.to_string(),
            value: value.to_vec(),
        });
        Ok(())
    }

    fn commit(&self) -> Result<()> {
        let entries = std::mem::take(&mut *self.pending.lock().expect("pending"));
        self.send(&Msg::Commit {
            entries: entries.clone(),
        })?;
        let mut c = self.committed.lock().expect("committed");
        for e in entries {
            c.retain(|x| x.key != e.key);
            c.push(e);
        }
        Ok(())
    }

    fn fence(&self, collect: bool, timeout: Duration) -> Result<()> {
        self.run_fence(collect, timeout)
    }

    fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        if rank >= self.info.size {
            return Err(RuntimeError::BadRank {
                rank,
                size: self.info.size,
            });
        }
        if rank == self.info.rank {
            let own = |v: &Vec<Entry>| {
                v.iter()
                    .rev()
                    .find(|e| e.key == key)
                    .map(|e| e.value.clone())
            };
            return own(&self.pending.lock().expect("pending"))
                .or_else(|| own(&self.committed.lock().expect("committed")))
                .ok_or_else(|| RuntimeError::NotFound {
                    rank,
                    key: key.into(),
                });
        }
        // A rank agreed dead is asked of the server too: what it committed before dying is
        // still served (from the cache first), anything else fails at once as PeerFailed.
        if let Some(v) = self
            .cache
            .lock()
            .expect("cache")
            .get(&(rank, key.to_string()))
        {
            return Ok(v.clone());
        }
        let req = self.next_req.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.shared.replies.lock().expect("replies").insert(req, tx);
        self.send(&Msg::Get {
            req,
            rank,
            key: key.into(),
            timeout_ms: timeout.as_millis() as u64,
        })?;
        let status = rx
            .recv_timeout(timeout + Duration::from_secs(5))
            .unwrap_or(GetStatus::Timeout);
        self.shared.replies.lock().expect("replies").remove(&req);
        match status {
            GetStatus::Found(v) => {
                self.cache
                    .lock()
                    .expect("cache")
                    .insert((rank, key.into()), v.clone());
                Ok(v)
            }
            GetStatus::Timeout => Err(RuntimeError::GetTimeout {
                rank,
                key: key.into(),
                timeout,
            }),
            GetStatus::PeerFailed => Err(RuntimeError::PeerFailed { ranks: vec![rank] }),
        }
    }

    fn failed(&self) -> Vec<u32> {
        let mut all = self.shared.failed.lock().expect("failed").clone();
        all.extend(self.shared.agreed.lock().expect("agreed").iter().copied());
        all.into_iter().collect()
    }

    fn fence_agrees_on_failures(&self) -> bool {
        self.fence_kind == FenceKind::Resilient
    }

    fn agreed_failed(&self) -> Vec<u32> {
        self.shared
            .agreed
            .lock()
            .expect("agreed")
            .iter()
            .copied()
            .collect()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.send(&Msg::Bye);
    }
}
