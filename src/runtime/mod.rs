//! The job runtime: who am I, who are my peers, and a key-value exchange with fences.
//!
//! The rest of openib sees only [`Runtime`]. Backends:
//! - [`pmix`]: a PMIx client, under Open MPI's `mpirun` or Slurm's `srun --mpi=pmix`;
//! - [`embedded`]: the server `openib run` starts, over a private UNIX socket;
//! - [`singleton`]: a process started with no launcher at all is a job of size 1.
//!
//! [`connect`] picks the backend from the environment (see its doc).
//!
//! Failures (issue 7): [`Runtime::failed`] reads this process's failure detector (a local call
//! that never fails), and [`Group`] builds a group of processes from a process set and such a
//! snapshot (never fails either: ranks outside the job are dropped and listed). A runtime whose
//! fence agrees on failures ([`Runtime::fence_agrees_on_failures`]: the embedded one, and PMIx
//! when its server delivers termination events) names the agreed dead in
//! [`Runtime::agreed_failed`].

use std::time::Duration;

pub mod embedded;
pub mod fence;
pub mod group;
pub mod group_create;
pub mod host;
pub mod pmix;
pub mod resilient;
pub mod sim_support;
pub mod singleton;
pub mod wire;

pub use group::{Group, ProcSet};

/// Where a put value is visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scope {
    /// Only processes on the same node.
    Local,
    /// Only processes on other nodes.
    Remote,
    /// Every process.
    Global,
}

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobInfo {
    pub rank: u32,
    pub size: u32,
    /// The identity of this node (its hostname, or the emulated node's name).
    pub node: String,
    /// Rank among the processes of this node (0 = the node leader).
    pub local_rank: u32,
    /// The ranks on this node, ascending (including this one).
    pub local_peers: Vec<u32>,
    /// The backend's name: "pmix", "embedded" or "singleton".
    pub backend: String,
}

impl JobInfo {
    /// The node leader is the lowest local rank.
    pub fn is_node_leader(&self) -> bool {
        self.local_rank == 0
    }
}

/// Runtime errors. Each names the operation and the peers involved.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("fence timed out after {timeout:?}: still waiting for rank(s) {missing:?}")]
    FenceTimeout {
        timeout: Duration,
        missing: Vec<u32>,
    },
    #[error("get of key {key:?} from rank {rank} timed out after {timeout:?}")]
    GetTimeout {
        rank: u32,
        key: String,
        timeout: Duration,
    },
    #[error("rank {rank} has no key {key:?}")]
    NotFound { rank: u32, key: String },
    #[error("rank {rank} is out of range (job size {size})")]
    BadRank { rank: u32, size: u32 },
    #[error("rank(s) {ranks:?} failed")]
    PeerFailed { ranks: Vec<u32> },
    #[error("{backend} runtime: {what}")]
    Backend { backend: &'static str, what: String },
    #[error("runtime I/O ({what}): {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("runtime protocol error: {0}")]
    Protocol(String),
    /// This runtime has no such operation (the caller may fall back to another).
    #[error("this runtime has no {0}")]
    Unsupported(&'static str),
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// A runtime: put/commit/fence/get over the processes of a job.
///
/// Contracts: `put` values become visible to peers only after `commit` and a `fence` (or, for
/// an on-demand `get`, after `commit` alone); `fence` is collective over the whole job; `get`
/// of this process's own key works after `put`. Values are opaque bytes.
pub trait Runtime: Send + Sync {
    fn info(&self) -> &JobInfo;
    /// The node identity of `rank` (hostname or emulated node name).
    fn node_of(&self, rank: u32) -> Result<String>;
    fn put(&self, scope: Scope, key: &str, value: &[u8]) -> Result<()>;
    fn commit(&self) -> Result<()>;
    /// Collective barrier; with `collect`, every committed value of every process is delivered
    /// to every process during the fence, so later gets are local. A runtime with an agreeing
    /// fence (the embedded one; PMIx once its detector names the dead) completes it over the
    /// survivors when members die, and [`Runtime::agreed_failed`] then names the dead; later
    /// fences and gets skip them.
    fn fence(&self, collect: bool, timeout: Duration) -> Result<()>;
    /// The value `key` of `rank`; after a non-collecting fence it is fetched on demand.
    fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// Ranks known to have died (never fails; empty when none are known).
    fn failed(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The failed ranks this process's fences agreed on, ascending: every survivor of the same
    /// fences reports the same set (a subset of `failed()`). Empty for a runtime whose fence
    /// does not agree on failures (a singleton), and on PMIx until a fence completed over the
    /// survivors.
    fn agreed_failed(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Whether `fence` agrees on failures (completes over the survivors and fills
    /// `agreed_failed`) rather than failing when a member dies.
    fn fence_agrees_on_failures(&self) -> bool {
        false
    }
    /// A barrier (with `collect`, an exchange as [`Runtime::fence`]'s) over exactly `ranks`,
    /// which must include this process; every listed process calls it with the same list
    /// (for example the survivors that an agreement named). A runtime without one says so
    /// ([`RuntimeError::Unsupported`]).
    fn fence_ranks(&self, ranks: &[u32], collect: bool, timeout: Duration) -> Result<()> {
        let _ = (ranks, collect, timeout);
        Err(RuntimeError::Unsupported(
            "fence over some of the job's ranks",
        ))
    }
}

/// Picks the backend from the environment:
/// 1. `OPENIB_RUNTIME=pmix|embedded|singleton` forces one;
/// 2. `OPENIB_RT_SOCKET` set: the embedded runtime of `openib run`;
/// 3. `PMIX_NAMESPACE` (or `PMIX_RANK`) set: PMIx (mpirun, srun --mpi=pmix);
/// 4. otherwise a singleton.
pub fn connect() -> Result<Box<dyn Runtime>> {
    let forced = crate::config::choice("OPENIB_RUNTIME").map_err(|e| RuntimeError::Backend {
        backend: "selection",
        what: e.to_string(),
    })?;
    let which = match forced {
        Some(w) => w.to_string(),
        None if std::env::var_os(embedded::SOCKET_ENV).is_some() => "embedded".into(),
        None if std::env::var_os("PMIX_NAMESPACE").is_some()
            || std::env::var_os("PMIX_RANK").is_some() =>
        {
            "pmix".into()
        }
        None => "singleton".into(),
    };
    tracing::debug!(backend = %which, "runtime selected");
    match which.as_str() {
        "embedded" => Ok(Box::new(embedded::Client::connect_from_env()?)),
        "pmix" => Ok(Box::new(pmix::PmixRuntime::init()?)),
        "singleton" => Ok(Box::new(singleton::Singleton::new())),
        other => Err(RuntimeError::Backend {
            backend: "selection",
            what: format!("OPENIB_RUNTIME={other:?} is not one of pmix, embedded, singleton"),
        }),
    }
}
