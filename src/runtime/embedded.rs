//! The embedded runtime: the server `openib run` starts, and the client its processes use.
//!
//! The server listens on a UNIX socket in a fresh directory of mode 0700 (the socket itself is
//! 0600), checks each connecting process's credentials (`SO_PEERCRED`: same user) and the job's
//! secret token, and then only stores committed values, answers gets and routes fence
//! messages between ranks. The fence itself runs in the clients: by default the fault-tolerant
//! [`super::resilient`] fence ([`FenceKind::Resilient`]), or the star of [`super::fence`]
//! ([`FenceKind::Star`]); the server does not know which.

use super::fence::{FenceIn, FenceMachine, FenceMsg, FenceOut, FenceTopology, Star, PARENT_GRACE};
use super::resilient::{ResIn, ResMsg, ResOut, ResilientFence};
use super::wire::{read_frame, write_frame, Dec, Entry, GetStatus, Msg, WireError};
use super::{JobInfo, Result, Runtime, RuntimeError, Scope};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufReader;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The socket path of the job.
pub const SOCKET_ENV: &str = "OPENIB_RT_SOCKET";
/// This process's rank.
pub const RANK_ENV: &str = "OPENIB_RT_RANK";
/// The job's secret (hex), proving a connection comes from a process `openib run` started.
pub const TOKEN_ENV: &str = "OPENIB_RT_TOKEN";

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

// ---------------------------------------------------------------------------------------------
// Server

/// What the server needs to know about the job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The node name of every rank, by rank.
    pub nodes: Vec<String>,
}

struct Conn {
    writer: Mutex<UnixStream>,
}

#[derive(Default)]
struct ServerState {
    conns: HashMap<u32, Arc<Conn>>,
    /// Routed payloads for ranks not connected yet.
    undelivered: HashMap<u32, Vec<Msg>>,
    store: HashMap<u32, HashMap<String, Entry>>,
    dead: BTreeSet<u32>,
    finished: BTreeSet<u32>,
    waiters: Vec<Waiter>,
}

struct Waiter {
    requester: u32,
    req: u64,
    rank: u32,
    key: String,
    deadline: Instant,
}

struct Shared {
    spec: JobSpec,
    token: Vec<u8>,
    uid: u32,
    state: Mutex<ServerState>,
    changed: Condvar,
}

/// A running server. Dropping it removes the socket directory.
pub struct Server {
    dir: PathBuf,
    socket: PathBuf,
    token: Vec<u8>,
    shared: Arc<Shared>,
}

impl Server {
    /// Starts a server for `spec` in a new private directory under `base` (default: the temp dir).
    pub fn start(spec: JobSpec, base: Option<&Path>) -> Result<Server> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let token = random_token().map_err(io(
            "reading the random token from the OS generator (getrandom)",
        ))?;
        let base = base
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "openib-run-{}-{}",
            std::process::id(),
            hex::encode(&token[..4])
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("creating {}", dir.display())))?;
        let socket = dir.join("sock");
        let listener =
            UnixListener::bind(&socket).map_err(io(format!("binding {}", socket.display())))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io("chmod 0600 socket"))?;
        let shared = Arc::new(Shared {
            spec,
            token: token.clone(),
            uid: nix::unistd::getuid().as_raw(),
            state: Mutex::new(ServerState::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("openib-rt-accept".into())
            .spawn(move || accept_loop(listener, s))
            .map_err(io("spawning the accept thread"))?;
        let s = shared.clone();
        std::thread::Builder::new()
            .name("openib-rt-timer".into())
            .spawn(move || timer_loop(s))
            .map_err(io("spawning the timer thread"))?;
        tracing::debug!(socket = %socket.display(), "embedded runtime server listening");
        Ok(Server {
            dir,
            socket,
            token,
            shared,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The environment a process of rank `rank` needs to join the job.
    pub fn env_for(&self, rank: u32) -> Vec<(String, String)> {
        vec![
            (SOCKET_ENV.into(), self.socket.display().to_string()),
            (RANK_ENV.into(), rank.to_string()),
            (TOKEN_ENV.into(), hex::encode(&self.token)),
            (
                "OPENIB_RT_SIZE".into(),
                self.shared.spec.nodes.len().to_string(),
            ),
            (
                "OPENIB_RT_NODE".into(),
                self.shared.spec.nodes[rank as usize].clone(),
            ),
        ]
    }

    /// Records that `rank`'s process exited, so peers waiting on it fail fast: an exit without
    /// a goodbye, or any unsuccessful exit (even after a goodbye), makes it a failed rank.
    ///
    /// A successful exit whose connection is still open is left to the connection: its last
    /// frames (fence messages, then the goodbye) may not have been read yet, and a death notice
    /// now would overtake them (a star fence's root that exits right after sending its verdict
    /// would fail its members). The connection marks it dead if it ends without a goodbye.
    pub fn process_exited(&self, rank: u32, success: bool) {
        let mut st = self.shared.state.lock().expect("server lock");
        let clean = success && st.finished.contains(&rank);
        let draining = success && st.conns.contains_key(&rank);
        if !clean && !draining && !st.dead.contains(&rank) {
            mark_dead(&self.shared, &mut st, rank);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("openib-rt-conn".into())
            .spawn(move || {
                if let Err(e) = serve(stream, &s) {
                    tracing::debug!(error = %e, "runtime connection ended");
                }
            });
    }
}

fn serve(stream: UnixStream, shared: &Arc<Shared>) -> Result<()> {
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| RuntimeError::Protocol(format!("cannot read peer credentials: {e}")))?;
    if cred.uid() != shared.uid {
        return Err(RuntimeError::Protocol(format!(
            "rejected a connection from uid {} (job owner is uid {})",
            cred.uid(),
            shared.uid
        )));
    }
    let mut reader = BufReader::new(stream.try_clone().map_err(io("cloning the socket"))?);
    let Some(Msg::Hello { rank, token }) = read_frame(&mut reader).map_err(io("reading hello"))?
    else {
        return Err(RuntimeError::Protocol(
            "first message was not a hello".into(),
        ));
    };
    let size = shared.spec.nodes.len() as u32;
    if token != shared.token || rank >= size {
        return Err(RuntimeError::Protocol(format!(
            "rejected hello from pid {} (rank {rank}, bad token or rank)",
            cred.pid()
        )));
    }
    let conn = Arc::new(Conn {
        writer: Mutex::new(stream),
    });
    {
        let mut st = shared.state.lock().expect("server lock");
        if st.conns.contains_key(&rank) {
            return Err(RuntimeError::Protocol(format!(
                "rank {rank} connected twice"
            )));
        }
        send(
            &conn,
            &Msg::Welcome {
                nodes: shared.spec.nodes.clone(),
            },
        );
        for m in st.undelivered.remove(&rank).unwrap_or_default() {
            send(&conn, &m);
        }
        for &d in &st.dead {
            send(&conn, &Msg::PeerGone { rank: d });
        }
        st.conns.insert(rank, conn.clone());
    }
    while let Ok(Some(msg)) = read_frame(&mut reader) {
        let mut st = shared.state.lock().expect("server lock");
        match msg {
            Msg::Commit { entries } => {
                let store = st.store.entry(rank).or_default();
                for e in entries {
                    store.insert(e.key.clone(), e);
                }
                answer_waiters(shared, &mut st, false);
            }
            Msg::Route { to, payload } => {
                let m = Msg::Routed {
                    from: rank,
                    payload,
                };
                match st.conns.get(&to) {
                    Some(c) => send(c, &m),
                    None if st.finished.contains(&to) && !st.dead.contains(&to) => {
                        // It left after its last fence; tell the sender, which routes around
                        // it (a member repairing a fence the leaver had already decided).
                        if let Some(c) = st.conns.get(&rank) {
                            send(c, &Msg::PeerExited { rank: to });
                        }
                    }
                    None if !st.dead.contains(&to) => st.undelivered.entry(to).or_default().push(m),
                    None => {}
                }
            }
            Msg::Get {
                req,
                rank: owner,
                key,
                timeout_ms,
            } => {
                let deadline = Instant::now() + Duration::from_millis(timeout_ms);
                st.waiters.push(Waiter {
                    requester: rank,
                    req,
                    rank: owner,
                    key,
                    deadline,
                });
                answer_waiters(shared, &mut st, false);
            }
            Msg::Bye => {
                st.finished.insert(rank);
                st.conns.remove(&rank);
                return Ok(());
            }
            other => tracing::debug!(rank, msg = ?other, "unexpected message from a client"),
        }
    }
    let mut st = shared.state.lock().expect("server lock");
    st.conns.remove(&rank);
    if !st.finished.contains(&rank) {
        mark_dead(shared, &mut st, rank);
    }
    Ok(())
}

fn mark_dead(shared: &Shared, st: &mut ServerState, rank: u32) {
    tracing::debug!(rank, "rank died (connection closed without goodbye)");
    st.dead.insert(rank);
    st.undelivered.remove(&rank);
    for c in st.conns.values() {
        send(c, &Msg::PeerGone { rank });
    }
    answer_waiters(shared, st, false);
}

/// Answers every waiter that can be answered now (found, owner dead, or, with `expire`, timed out).
fn answer_waiters(shared: &Shared, st: &mut ServerState, expire: bool) {
    let now = Instant::now();
    let nodes = &shared.spec.nodes;
    let mut keep = Vec::new();
    for w in std::mem::take(&mut st.waiters) {
        let visible = st
            .store
            .get(&w.rank)
            .and_then(|s| s.get(&w.key))
            .filter(|e| {
                let same_node = nodes.get(w.rank as usize) == nodes.get(w.requester as usize);
                match e.scope {
                    Scope::Global => true,
                    Scope::Local => same_node,
                    Scope::Remote => !same_node,
                }
            });
        let status = match visible {
            Some(e) => Some(GetStatus::Found(e.value.clone())),
            None if st.dead.contains(&w.rank) => Some(GetStatus::PeerFailed),
            None if expire && now >= w.deadline => Some(GetStatus::Timeout),
            None => None,
        };
        match status {
            Some(status) => {
                if let Some(c) = st.conns.get(&w.requester) {
                    send(c, &Msg::GetReply { req: w.req, status });
                }
            }
            None => keep.push(w),
        }
    }
    st.waiters = keep;
    shared.changed.notify_all();
}

/// Times out waiters: sleeps until the earliest deadline (woken when the waiters change), so
/// an idle server does not wake (a 20 ms tick here took CPU from polling ranks).
fn timer_loop(shared: Arc<Shared>) {
    let mut st = shared.state.lock().expect("server lock");
    loop {
        let strong = Arc::strong_count(&shared).saturating_sub(1);
        if strong == 0 && st.conns.is_empty() {
            return;
        }
        let now = Instant::now();
        if st.waiters.iter().any(|w| w.deadline <= now) {
            answer_waiters(&shared, &mut st, true);
        }
        // At most a second, to notice the server going away.
        let next = st.waiters.iter().map(|w| w.deadline).min();
        let nap = next
            .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now))
            .clamp(Duration::from_millis(1), Duration::from_secs(1));
        st = shared.changed.wait_timeout(st, nap).expect("server lock").0;
    }
}

fn send(conn: &Conn, m: &Msg) {
    let mut w = conn.writer.lock().expect("writer lock");
    if let Err(e) = write_frame(&mut *w, m) {
        tracing::debug!(error = %e, "write to a client failed");
    }
}

/// 16 bytes from the operating system's generator: the secret a client proves it was launched by
/// this server with.
fn random_token() -> std::io::Result<Vec<u8>> {
    let mut t = vec![0u8; 16];
    getrandom::fill(&mut t).map_err(std::io::Error::from)?;
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// Client

/// Which fence the client runs (every process of a job must run the same one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceKind {
    /// The fault-tolerant fence of [`super::resilient`]: a binomial tree that repairs itself
    /// around dead ranks and ends, on every survivor, with the same data and failed set.
    #[default]
    Resilient,
    /// The star of [`super::fence`] rooted at rank 0: any death fails the fence.
    Star,
}

/// How long past the deadline the root of a timed-out resilient fence collects
/// [`FencePayload::Present`]s before it names the members it never heard from.
pub const VERDICT_GRACE: Duration = Duration::from_secs(1);

/// What a routed payload carries: fence traffic of either kind, and the resilient fence's
/// timeout exchange. Tags: 1–3 [`FenceMsg`], 0x11–0x15 [`ResMsg`], 0x20 `Present`, 0x21
/// `Verdict`; integers little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencePayload {
    Star(FenceMsg),
    Res(ResMsg),
    /// Member -> root after its deadline: "I am in fence `epoch`" (so the root can tell who
    /// never arrived).
    Present {
        epoch: u64,
    },
    /// Root -> members after its deadline: fence `epoch` failed; these never arrived.
    Verdict {
        epoch: u64,
        missing: Vec<u32>,
    },
}

const TAG_PRESENT: u8 = 0x20;
const TAG_VERDICT: u8 = 0x21;

impl FencePayload {
    pub fn epoch(&self) -> u64 {
        match self {
            FencePayload::Star(m) => m.epoch(),
            FencePayload::Res(m) => m.epoch,
            FencePayload::Present { epoch } | FencePayload::Verdict { epoch, .. } => *epoch,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            FencePayload::Star(m) => m.encode(),
            FencePayload::Res(m) => m.encode(),
            FencePayload::Present { epoch } => {
                let mut out = vec![TAG_PRESENT];
                out.extend_from_slice(&epoch.to_le_bytes());
                out
            }
            FencePayload::Verdict { epoch, missing } => {
                let mut out = vec![TAG_VERDICT];
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&(missing.len() as u32).to_le_bytes());
                for r in missing {
                    out.extend_from_slice(&r.to_le_bytes());
                }
                out
            }
        }
    }

    /// Decodes by the first byte's tag; bounded, never panics.
    pub fn decode(buf: &[u8]) -> std::result::Result<FencePayload, WireError> {
        let Some(&tag) = buf.first() else {
            return Err(WireError::Truncated {
                what: "fence tag",
                offset: 0,
            });
        };
        match tag {
            1..=3 => FenceMsg::decode(buf).map(FencePayload::Star),
            0x11..=0x15 => ResMsg::decode(buf).map(FencePayload::Res),
            TAG_PRESENT | TAG_VERDICT => {
                let mut d = Dec::new(&buf[1..]);
                let epoch = d.u64("epoch")?;
                let p = if tag == TAG_PRESENT {
                    FencePayload::Present { epoch }
                } else {
                    let n = d.count("missing count", 4)?;
                    let mut missing = Vec::with_capacity(n);
                    for _ in 0..n {
                        missing.push(d.u32("rank")?);
                    }
                    FencePayload::Verdict { epoch, missing }
                };
                d.finish()?;
                Ok(p)
            }
            tag => Err(WireError::UnknownTag { tag }),
        }
    }
}

enum Event {
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

struct ClientShared {
    replies: Mutex<HashMap<u64, Sender<GetStatus>>>,
    /// The failure detector: ranks the server reported dead.
    failed: Mutex<BTreeSet<u32>>,
    /// Every failed set a resilient fence of this process agreed on, merged.
    agreed: Mutex<BTreeSet<u32>>,
    writer: Mutex<UnixStream>,
    /// The last finished resilient fence: it keeps answering late messages of its epoch (a
    /// member repairing its tree after the decision) from the reader thread until the next
    /// fence. Events are queued under this lock, so none slips past a fence that just ended.
    last: Mutex<Option<ResilientFence>>,
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
    shared: Arc<ClientShared>,
    events: Mutex<Receiver<Event>>,
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
        data: Arc<super::resilient::Gathered>,
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

    fn send(&self, m: &Msg) -> Result<()> {
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

/// Block distribution of `size` ranks over `nodes` emulated nodes: node i holds a contiguous
/// range, the first `size % nodes` nodes one rank more. Node names: the host name when there
/// is one node, else `HOST-nodeI`.
pub fn node_names(size: u32, nodes: u32, host: &str) -> Vec<String> {
    let nodes = nodes.clamp(1, size.max(1));
    let (base, extra) = (size / nodes, size % nodes);
    let mut out = Vec::with_capacity(size as usize);
    for n in 0..nodes {
        let count = base + u32::from(n < extra);
        let name = if nodes == 1 {
            host.to_string()
        } else {
            format!("{host}-node{n}")
        };
        out.extend(std::iter::repeat_n(name, count as usize));
    }
    out
}

/// Group ranks by node (for reports).
pub fn ranks_by_node(nodes: &[String]) -> BTreeMap<String, Vec<u32>> {
    let mut m: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, n) in nodes.iter().enumerate() {
        m.entry(n.clone()).or_default().push(r as u32);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(size: u32, nodes: u32) -> (Server, Vec<Client>) {
        let server = Server::start(
            JobSpec {
                nodes: node_names(size, nodes, "h"),
            },
            None,
        )
        .unwrap();
        let clients = (0..size)
            .map(|r| Client::connect(server.socket(), r, server.token.clone()).unwrap())
            .collect();
        (server, clients)
    }

    fn in_threads<T: Send>(clients: &[Client], f: impl Fn(&Client) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let hs: Vec<_> = clients.iter().map(|c| s.spawn(|| f(c))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn node_names_split_ranks_in_blocks() {
        assert_eq!(
            node_names(5, 2, "h"),
            ["h-node0", "h-node0", "h-node0", "h-node1", "h-node1"]
        );
        assert_eq!(node_names(2, 1, "h"), ["h", "h"]);
        assert_eq!(node_names(2, 4, "h"), ["h-node0", "h-node1"]);
    }

    #[test]
    fn collecting_fence_delivers_every_value_respecting_scope() {
        let (_s, clients) = job(6, 2);
        let ok = in_threads(&clients, |c| {
            let r = c.info().rank;
            c.put(Scope::Global, "g", &[r as u8]).unwrap();
            c.put(Scope::Local, "l", &[r as u8 + 100]).unwrap();
            c.commit().unwrap();
            c.fence(true, Duration::from_secs(20)).unwrap();
            for peer in 0..6u32 {
                assert_eq!(
                    c.get(peer, "g", Duration::from_millis(1)).unwrap(),
                    vec![peer as u8]
                );
                let local = c.node_of(peer).unwrap() == c.info().node;
                let got = c.get(peer, "l", Duration::from_millis(50));
                if local {
                    assert_eq!(got.unwrap(), vec![peer as u8 + 100]);
                } else {
                    assert!(
                        got.is_err(),
                        "local-scope value of rank {peer} leaked to rank {r}"
                    );
                }
            }
            true
        });
        assert!(ok.iter().all(|&b| b));
        assert_eq!(clients[4].info().local_peers, vec![3, 4, 5]);
        assert_eq!(clients[4].info().local_rank, 1);
    }

    #[test]
    fn on_demand_get_after_a_plain_fence() {
        let (_s, clients) = job(3, 1);
        in_threads(&clients, |c| {
            c.put(Scope::Global, "k", format!("v{}", c.info().rank).as_bytes())
                .unwrap();
            c.commit().unwrap();
            c.fence(false, Duration::from_secs(20)).unwrap();
            for peer in 0..3 {
                assert_eq!(
                    c.get(peer, "k", Duration::from_secs(5)).unwrap(),
                    format!("v{peer}").into_bytes()
                );
            }
        });
    }

    #[test]
    fn a_peer_that_never_arrives_fails_the_fence_naming_it() {
        let server = Server::start(
            JobSpec {
                nodes: node_names(3, 1, "h"),
            },
            None,
        )
        .unwrap();
        let a = Client::connect(server.socket(), 0, server.token.clone()).unwrap();
        let b = Client::connect(server.socket(), 1, server.token.clone()).unwrap();
        let res = in_threads(&[a, b], |c| c.fence(true, Duration::from_millis(500)));
        for r in res {
            match r {
                Err(RuntimeError::FenceTimeout { missing, .. }) => assert_eq!(missing, vec![2]),
                other => panic!("expected a fence timeout naming rank 2, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_live_member_that_never_enters_is_named_alone_by_everyone() {
        // Rank 2 is connected but never enters the fence; rank 3 is its child in the tree.
        let (_s, clients) = job(8, 1);
        let res = in_threads(&clients, |c| {
            if c.info().rank == 2 {
                return None;
            }
            Some(c.fence(true, Duration::from_millis(500)))
        });
        for (r, res) in res.into_iter().enumerate() {
            match res {
                None => assert_eq!(r, 2),
                Some(Err(RuntimeError::FenceTimeout { missing, .. })) => {
                    assert_eq!(missing, vec![2], "rank {r}")
                }
                Some(other) => panic!("rank {r}: expected a timeout naming rank 2, got {other:?}"),
            }
        }
    }

    #[test]
    fn get_of_a_missing_key_times_out() {
        let (_s, clients) = job(2, 1);
        let t = Instant::now();
        let e = clients[0]
            .get(1, "nothing", Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(e, RuntimeError::GetTimeout { rank: 1, .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    /// Closes a client's socket without a goodbye: the server reports it dead.
    fn kill(dead: Client) {
        dead.shared
            .writer
            .lock()
            .unwrap()
            .shutdown(std::net::Shutdown::Both)
            .unwrap();
        std::mem::forget(dead);
    }

    #[test]
    fn a_dead_peer_is_reported_to_waiters_and_the_fence_agrees_on_it() {
        let (_s, mut clients) = job(2, 1);
        kill(clients.pop().unwrap());
        let e = clients[0].get(1, "k", Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, RuntimeError::PeerFailed { .. }), "{e}");
        clients[0].fence(false, Duration::from_secs(10)).unwrap();
        assert_eq!(clients[0].failed(), vec![1]);
        assert_eq!(clients[0].agreed_failed(), vec![1]);
    }

    #[test]
    fn the_star_fence_fails_on_a_dead_peer() {
        let (_s, clients) = job(2, 1);
        let mut clients: Vec<Client> = clients
            .into_iter()
            .map(|c| c.with_fence(FenceKind::Star))
            .collect();
        kill(clients.pop().unwrap());
        let e = clients[0]
            .fence(false, Duration::from_secs(10))
            .unwrap_err();
        assert!(
            matches!(e, RuntimeError::PeerFailed { ref ranks } if ranks == &vec![1]),
            "{e}"
        );
        assert_eq!(clients[0].failed(), vec![1]);
    }

    #[test]
    fn the_star_fence_still_collects() {
        let (_s, clients) = job(4, 2);
        let clients: Vec<Client> = clients
            .into_iter()
            .map(|c| c.with_fence(FenceKind::Star))
            .collect();
        in_threads(&clients, |c| {
            c.put(Scope::Global, "g", &[c.info().rank as u8]).unwrap();
            c.commit().unwrap();
            c.fence(true, Duration::from_secs(20)).unwrap();
            for peer in 0..4u32 {
                assert_eq!(
                    c.get(peer, "g", Duration::from_millis(1)).unwrap(),
                    vec![peer as u8]
                );
            }
        });
    }

    #[test]
    fn survivors_agree_when_peers_die_mid_job_and_go_on_without_them() {
        let (_s, mut clients) = job(8, 2);
        // Ranks 0 (the first root) and 5 die before the fence.
        let five = clients.remove(5);
        let zero = clients.remove(0);
        kill(zero);
        kill(five);
        let res = in_threads(&clients, |c| {
            let r = c.info().rank;
            c.put(Scope::Global, "g", &[r as u8]).unwrap();
            c.commit().unwrap();
            c.fence(true, Duration::from_secs(20)).unwrap();
            for peer in 0..8u32 {
                let got = c.get(peer, "g", Duration::from_secs(5));
                if peer == 0 || peer == 5 {
                    assert!(
                        matches!(got, Err(RuntimeError::PeerFailed { .. })),
                        "{got:?}"
                    );
                } else {
                    assert_eq!(got.unwrap(), vec![peer as u8]);
                }
            }
            // A later fence runs over the survivors only.
            c.fence(false, Duration::from_secs(20)).unwrap();
            c.agreed_failed()
        });
        for agreed in res {
            assert_eq!(agreed, vec![0, 5]);
        }
    }

    #[test]
    fn a_decided_fence_keeps_answering_after_fence_returned() {
        use crate::runtime::resilient::{view_hash, Body, View};
        let (_s, clients) = job(3, 1);
        in_threads(&clients, |c| {
            c.fence(true, Duration::from_secs(20)).unwrap()
        });
        // Rank 2 forgets its own finished fence, so answers to it reach its event queue.
        *clients[2].shared.last.lock().unwrap() = None;
        // A late report of fence 1 (as after a repair), to rank 0, which is back in the
        // application: its reader thread answers with the decision.
        let late = ResMsg {
            epoch: 1,
            view: View {
                hash: view_hash(&[]),
                failed: Arc::new(vec![]),
            },
            body: Body::Up {
                root: 0,
                data: Default::default(),
                acked: None,
            },
        };
        clients[2]
            .send(&Msg::Route {
                to: 0,
                payload: FencePayload::Res(late).encode(),
            })
            .unwrap();
        let events = clients[2].events.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(Event::Fence {
                    from: 0,
                    msg: FencePayload::Res(m),
                }) if m.kind() == "commit" => break,
                Ok(_) => continue,
                Err(e) => panic!("no answer from rank 0's finished fence: {e}"),
            }
        }
    }

    #[test]
    fn a_message_to_a_rank_that_left_is_answered_with_peer_exited() {
        let (server, mut clients) = job(2, 1);
        drop(clients.pop().unwrap());
        let t = Instant::now();
        while !server.shared.state.lock().unwrap().finished.contains(&1) {
            assert!(t.elapsed() < Duration::from_secs(10), "goodbye not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        clients[0]
            .send(&Msg::Route {
                to: 1,
                payload: FencePayload::Present { epoch: 1 }.encode(),
            })
            .unwrap();
        let ev = clients[0]
            .events
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10));
        assert!(matches!(ev, Ok(Event::PeerExited { rank: 1 })));
        // Leaving is not failing.
        assert!(clients[0].failed().is_empty());
    }

    #[test]
    fn fence_payloads_round_trip_and_reject_bad_input() {
        let ps = [
            FencePayload::Star(FenceMsg::Abort {
                epoch: 3,
                missing: vec![1],
            }),
            FencePayload::Present { epoch: 9 },
            FencePayload::Verdict {
                epoch: 9,
                missing: vec![2, 4],
            },
        ];
        for p in ps {
            let b = p.encode();
            assert_eq!(FencePayload::decode(&b), Ok(p.clone()));
            for n in 0..b.len() {
                assert!(
                    matches!(
                        FencePayload::decode(&b[..n]),
                        Err(WireError::Truncated { .. })
                    ),
                    "{p:?} cut at {n}"
                );
            }
        }
        assert_eq!(
            FencePayload::decode(&[0x30, 0]),
            Err(WireError::UnknownTag { tag: 0x30 })
        );
        let mut b = FencePayload::Present { epoch: 1 }.encode();
        b.push(0);
        assert_eq!(
            FencePayload::decode(&b),
            Err(WireError::Trailing { len: 1 })
        );
    }

    #[test]
    fn bad_token_is_refused() {
        let server = Server::start(
            JobSpec {
                nodes: node_names(1, 1, "h"),
            },
            None,
        )
        .unwrap();
        assert!(Client::connect(server.socket(), 0, vec![0; 16]).is_err());
        let mode = std::fs::metadata(server.socket()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
}
