//! A runtime the host supplies (an MPI library's modex): `put`, `commit` and `get` are the
//! host's, and so is the one fence, which the host runs itself after every component has put
//! its data (Open MPI: `OPAL_MODEX_SEND` in each BTL's `btl_init`, one fence in `MPI_Init`,
//! `OPAL_MODEX_RECV` in `add_procs`). So [`Runtime::fence`] here is an error: nothing of ours
//! may wait for a collective that the host runs after we return.
//!
//! The transport opens on it with [`crate::transport::Transport::open_host`]: it publishes
//! this process's modex with one put and reads each peer's on demand (docs/RUNTIME.md,
//! "Host runtime").

use super::{JobInfo, Result, Runtime, RuntimeError, Scope};
use std::time::Duration;

/// What the host does for the runtime: the operations of [`Runtime`] less the fence.
pub trait HostOps: Send + Sync {
    /// Publishes `value` under `key` for every process of the job (visible to peers after the
    /// host's fence).
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Hands the puts to the host's runtime (may be a no-op where the host commits itself).
    fn commit(&self) -> Result<()>;
    /// The value `rank` published under `key`; `Ok(None)` when it published none (a process
    /// that does not use the transport): the caller treats that peer as unreachable.
    fn get(&self, rank: u32, key: &str) -> Result<Option<Vec<u8>>>;
}

/// The runtime over a host's [`HostOps`].
pub struct HostRuntime {
    info: JobInfo,
    ops: Box<dyn HostOps>,
}

impl HostRuntime {
    /// This process is `rank` of `size` on node `node`. The host does not say which ranks share
    /// the node (the transport does not need it here: every process publishes for itself), so
    /// [`JobInfo::local_peers`] is this rank alone. `BadRank` when `rank >= size`.
    pub fn new(rank: u32, size: u32, node: String, ops: Box<dyn HostOps>) -> Result<HostRuntime> {
        if rank >= size {
            return Err(RuntimeError::BadRank { rank, size });
        }
        Ok(HostRuntime {
            info: JobInfo {
                rank,
                size,
                node,
                local_rank: 0,
                local_peers: vec![rank],
                backend: "host".into(),
            },
            ops,
        })
    }
}

impl Runtime for HostRuntime {
    fn info(&self) -> &JobInfo {
        &self.info
    }
    /// Known for this process only; other ranks' nodes are not asked of the host.
    fn node_of(&self, rank: u32) -> Result<String> {
        if rank == self.info.rank {
            return Ok(self.info.node.clone());
        }
        Err(RuntimeError::Backend {
            backend: "host",
            what: format!("the node of rank {rank} is not known to a host runtime"),
        })
    }
    fn put(&self, _scope: Scope, key: &str, value: &[u8]) -> Result<()> {
        self.ops.put(key, value)
    }
    fn commit(&self) -> Result<()> {
        self.ops.commit()
    }
    /// Always an error: the host runs the fence.
    fn fence(&self, _collect: bool, _timeout: Duration) -> Result<()> {
        Err(RuntimeError::Backend {
            backend: "host",
            what: "the host runs the fence, not the transport".into(),
        })
    }
    /// The host's value; [`RuntimeError::NotFound`] when `rank` published none.
    fn get(&self, rank: u32, key: &str, _timeout: Duration) -> Result<Vec<u8>> {
        if rank >= self.info.size {
            return Err(RuntimeError::BadRank {
                rank,
                size: self.info.size,
            });
        }
        self.ops
            .get(rank, key)?
            .ok_or_else(|| RuntimeError::NotFound {
                rank,
                key: key.to_string(),
            })
    }
}
