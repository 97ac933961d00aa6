//! The node-leader modex exchange over a [`Runtime`].
//!
//! Three modes (setting `OPENIB_MODEX_MODE`, default `gathered`):
//! - **gathered**: every process puts its proc blob with local scope; fence; the node leader
//!   gathers them into its node blob's gathered section and puts that node blob; fence. Peers
//!   read one key per node. The smallest job-wide footprint (docs/PERFORMANCE.md, "Modex").
//! - **per-process**: the leader puts the node blob, every process of a node with more than one
//!   process puts its proc blob; one collecting fence.
//! - **on-demand**: the same puts, a fence without collection; every blob is fetched from the
//!   runtime on first use (Open MPI's "async modex").
//!
//! The result is, for every rank, the node it is on, whether it leads it, the node blob of that
//! node and the rank's own ports and CPC parts: a [`PeerTable`].

use super::build::NodeBuild;
use super::node::NodeBlob;
use super::procs::{LocalProcs, ProcBlob};
use super::{Compression, DecodeError, EncodeError, KEY_NODE, KEY_PROC};
use crate::runtime::{Runtime, RuntimeError, Scope};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How the blobs travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExchangeMode {
    #[default]
    Gathered,
    PerProcess,
    OnDemand,
}

impl std::str::FromStr for ExchangeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "gathered" => Ok(Self::Gathered),
            "per-process" => Ok(Self::PerProcess),
            "on-demand" => Ok(Self::OnDemand),
            other => Err(format!(
                "unknown modex mode {other:?} (expected gathered, per-process or on-demand)"
            )),
        }
    }
}

impl ExchangeMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Gathered => "gathered",
            Self::PerProcess => "per-process",
            Self::OnDemand => "on-demand",
        }
    }
}

/// Why the exchange failed. Each error names the rank and the blob.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot encode this process's modex: {0}")]
    Encode(#[from] EncodeError),
    #[error("rank {rank}'s {what} is malformed: {source}")]
    Decode {
        rank: u32,
        what: &'static str,
        source: DecodeError,
    },
    #[error("rank {rank}: {what}")]
    Inconsistent { rank: u32, what: String },
    #[error("rank {rank}'s proc blob does not fit its node's node blob ({source}): the processes of one node must see the same ports and use the same CPC settings (OPENIB_CPC_INCLUDE, OPENIB_CPC_EXCLUDE, OPENIB_CPC_PRIORITY)")]
    Mismatch { rank: u32, source: DecodeError },
}

/// One rank as rebuilt from the modex.
#[derive(Debug, Clone)]
pub struct Peer {
    pub rank: u32,
    pub node: String,
    pub leader: u32,
    pub node_blob: Arc<NodeBlob>,
    pub proc_blob: ProcBlob,
    /// Bytes this rank put into the runtime (keys plus values), rebuilt from its blobs.
    pub put_bytes: usize,
}

impl Peer {
    pub fn is_leader(&self) -> bool {
        self.rank == self.leader
    }
}

/// Every rank of the job, by rank.
#[derive(Debug, Clone)]
pub struct PeerTable {
    pub peers: Vec<Peer>,
    pub mode: ExchangeMode,
    /// What this process itself put (keys plus values).
    pub my_put_bytes: usize,
}

fn bytes_of(key: &str, v: &[u8]) -> usize {
    key.len() + v.len()
}

/// Runs the exchange: `node` is this node's blob (every process of a node computes the same
/// one; only the leader's is published), `mine` the ports and CPC parts of this process.
pub fn exchange(
    rt: &dyn Runtime,
    node: &NodeBuild,
    mine: &ProcBlob,
    mode: ExchangeMode,
    timeout: Duration,
) -> Result<PeerTable, ExchangeError> {
    let info = rt.info().clone();
    let nodes: Vec<String> = (0..info.size)
        .map(|r| rt.node_of(r))
        .collect::<Result<_, _>>()?;
    let mut by_node: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, n) in nodes.iter().enumerate() {
        by_node.entry(n.clone()).or_default().push(r as u32);
    }
    let leader_of = |n: &str| by_node[n][0];
    let me_leader = leader_of(&info.node) == info.rank;
    let local: Vec<u32> = by_node[&info.node].clone();
    let cfg = Compression::default();
    let proc_bytes = mine.encode(&node.blob, cfg)?;
    let mut put = 0usize;
    crate::fault::point("before-put", info.rank);

    match mode {
        ExchangeMode::Gathered => {
            if local.len() > 1 {
                rt.put(Scope::Local, KEY_PROC, &proc_bytes)?;
                put += bytes_of(KEY_PROC, &proc_bytes);
            }
            rt.commit()?;
            crate::fault::point("after-put", info.rank);
            rt.fence(true, timeout)?;
            if me_leader {
                let mut procs = Vec::with_capacity(local.len());
                for &r in &local {
                    if r == info.rank {
                        procs.push(mine.clone());
                        continue;
                    }
                    let b = rt.get(r, KEY_PROC, timeout)?;
                    procs.push(
                        ProcBlob::decode(&b, &node.blob)
                            .map_err(|source| ExchangeError::Mismatch { rank: r, source })?,
                    );
                }
                let mut nb = node.blob.clone();
                nb.local_procs = Some(LocalProcs::gather(&node.blob, &procs)?);
                let bytes = nb.encode(cfg)?;
                rt.put(Scope::Global, KEY_NODE, &bytes)?;
                put += bytes_of(KEY_NODE, &bytes);
            }
            rt.commit()?;
            rt.fence(true, timeout)?;
        }
        ExchangeMode::PerProcess | ExchangeMode::OnDemand => {
            if me_leader {
                // A node with one process publishes its parts in the node blob (no proc blob).
                let mut nb = node.blob.clone();
                if local.len() == 1 {
                    nb.local_procs =
                        Some(LocalProcs::gather(&node.blob, std::slice::from_ref(mine))?);
                }
                let bytes = nb.encode(cfg)?;
                rt.put(Scope::Global, KEY_NODE, &bytes)?;
                put += bytes_of(KEY_NODE, &bytes);
            }
            if local.len() > 1 {
                rt.put(Scope::Global, KEY_PROC, &proc_bytes)?;
                put += bytes_of(KEY_PROC, &proc_bytes);
            }
            rt.commit()?;
            crate::fault::point("after-put", info.rank);
            rt.fence(mode == ExchangeMode::PerProcess, timeout)?;
        }
    }

    // Rebuild every rank.
    let mut peers = Vec::with_capacity(info.size as usize);
    for (name, ranks) in &by_node {
        let leader = ranks[0];
        let b = rt.get(leader, KEY_NODE, timeout)?;
        let nb = Arc::new(
            NodeBlob::decode(&b).map_err(|source| ExchangeError::Decode {
                rank: leader,
                what: "node blob",
                source,
            })?,
        );
        let gathered: Option<Vec<ProcBlob>> =
            nb.local_procs.as_ref().map(|lp| lp.to_proc_blobs(&nb));
        if let Some(g) = &gathered {
            if g.len() != ranks.len() {
                return Err(ExchangeError::Inconsistent {
                    rank: leader,
                    what: format!(
                        "node {name}'s gathered section holds {} processes, the runtime says {}",
                        g.len(),
                        ranks.len()
                    ),
                });
            }
        }
        let node_len = b.len();
        for (i, &r) in ranks.iter().enumerate() {
            let proc_blob = match &gathered {
                Some(g) => g[i].clone(),
                None if r == info.rank => mine.clone(),
                None => {
                    let b = rt.get(r, KEY_PROC, timeout)?;
                    ProcBlob::decode(&b, &nb)
                        .map_err(|source| ExchangeError::Mismatch { rank: r, source })?
                }
            };
            check(r, &nb, &proc_blob)?;
            let own_proc_len = proc_blob.encode(&nb, cfg).map(|b| b.len()).unwrap_or(0);
            // Every process of a multi-process node put its proc blob; the leader the node blob.
            let put_bytes = (if ranks.len() > 1 {
                KEY_PROC.len() + own_proc_len
            } else {
                0
            }) + if i == 0 { KEY_NODE.len() + node_len } else { 0 };
            peers.push(Peer {
                rank: r,
                node: name.clone(),
                leader,
                node_blob: nb.clone(),
                proc_blob,
                put_bytes,
            });
        }
    }
    peers.sort_by_key(|p| p.rank);
    Ok(PeerTable {
        peers,
        mode,
        my_put_bytes: put,
    })
}

/// What every rebuilt peer must satisfy: it uses at least one port, every used port exists and
/// has a CPC record, and its parts match the records' widths.
fn check(rank: u32, nb: &NodeBlob, p: &ProcBlob) -> Result<(), ExchangeError> {
    if p.ports.is_empty() {
        return Err(ExchangeError::Inconsistent {
            rank,
            what: "uses no port".into(),
        });
    }
    p.validate(nb).map_err(|e| ExchangeError::Inconsistent {
        rank,
        what: e.to_string(),
    })?;
    for i in p.ports.iter() {
        if nb.ports[i].cpcs.is_empty() {
            return Err(ExchangeError::Inconsistent {
                rank,
                what: format!("port {i} has no CPC record"),
            });
        }
    }
    Ok(())
}
