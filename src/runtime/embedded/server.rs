//! The server `openib run` starts: it checks who connects, stores committed values, answers
//! gets and routes fence messages between ranks (it does not run the fence).

use super::{io, RANK_ENV, SOCKET_ENV, TOKEN_ENV};
use crate::runtime::wire::{read_frame, write_frame, Entry, GetStatus, Msg};
use crate::runtime::{Result, RuntimeError, Scope};
use std::collections::{BTreeSet, HashMap};
use std::io::BufReader;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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
pub(super) struct ServerState {
    conns: HashMap<u32, Arc<Conn>>,
    /// Routed payloads for ranks not connected yet.
    undelivered: HashMap<u32, Vec<Msg>>,
    store: HashMap<u32, HashMap<String, Entry>>,
    dead: BTreeSet<u32>,
    pub(super) finished: BTreeSet<u32>,
    waiters: Vec<Waiter>,
}

struct Waiter {
    requester: u32,
    req: u64,
    rank: u32,
    key: String,
    deadline: Instant,
}

pub(super) struct Shared {
    spec: JobSpec,
    token: Vec<u8>,
    uid: u32,
    pub(super) state: Mutex<ServerState>,
    changed: Condvar,
}

/// A running server. Dropping it removes the socket directory.
pub struct Server {
    dir: PathBuf,
    socket: PathBuf,
    pub(super) token: Vec<u8>,
    pub(super) shared: Arc<Shared>,
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
