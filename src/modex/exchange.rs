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
use std::collections::{BTreeMap, BTreeSet};
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
    #[error("rank {rank} offers CPCs {own} on port {port} (its OPENIB_CPC_INCLUDE / OPENIB_CPC_EXCLUDE), but its node leader, rank {leader}, published {published}: the processes of one node must offer the same CPCs (priorities may differ: the published ones apply)")]
    CpcLists {
        rank: u32,
        leader: u32,
        port: String,
        own: String,
        published: String,
    },
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

/// Every rank of the job that survived the exchange, by rank.
#[derive(Debug, Clone)]
pub struct PeerTable {
    /// Every rank not in `failed`, ascending.
    pub peers: Vec<Peer>,
    pub mode: ExchangeMode,
    /// What this process itself put (keys plus values).
    pub my_put_bytes: usize,
    /// The ranks the runtime's fences agreed are dead ([`Runtime::agreed_failed`]), ascending:
    /// the same on every survivor; empty without failures or on a runtime that cannot agree.
    pub failed: Vec<u32>,
}

fn bytes_of(key: &str, v: &[u8]) -> usize {
    key.len() + v.len()
}

/// The lowest rank of `ranks` not in `failed`.
fn leader_of(ranks: &[u32], failed: &BTreeSet<u32>) -> Option<u32> {
    ranks.iter().copied().find(|r| !failed.contains(r))
}

fn agreed(rt: &dyn Runtime) -> BTreeSet<u32> {
    rt.agreed_failed().into_iter().collect()
}

/// Runs the exchange: `node` is this node's blob (every process of a node computes the same
/// one; only the leader's is published), `mine` the ports and CPC parts of this process.
///
/// Failures: on a runtime whose fence agrees on failed ranks (the embedded one), the dead are
/// left out of the table (and named in [`PeerTable::failed`]); a node's leader is its lowest
/// rank not agreed dead, and if a leader dies before its node blob got through a fence, the
/// next live rank of its node publishes it in one more round (one more fence per such death).
/// There, the per-process and on-demand modes end with a second, non-collecting fence, so a
/// rank that dies inside the first one is named too.
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
    let local: Vec<u32> = by_node[&info.node].clone();
    let cfg = Compression::default();
    let proc_bytes = mine.encode(&node.blob, cfg)?;
    let mut proc_put = 0usize;
    let mut node_put = 0usize;
    #[cfg(feature = "fault-injection")]
    crate::fault::point("before-put", info.rank);

    // This process's node blob for a round whose live ranks are those not in `failed`.
    let node_blob = |failed: &BTreeSet<u32>| -> Result<Vec<u8>, ExchangeError> {
        let mut nb = node.blob.clone();
        match mode {
            ExchangeMode::Gathered if local.len() > 1 => {
                let mut procs = Vec::with_capacity(local.len());
                for &r in local.iter().filter(|r| !failed.contains(r)) {
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
                nb.local_procs = Some(LocalProcs::gather(&node.blob, &procs)?);
            }
            // A node with one process publishes its parts in the node blob (no proc blob).
            _ if local.len() == 1 => {
                nb.local_procs = Some(LocalProcs::gather(&node.blob, std::slice::from_ref(mine))?);
            }
            _ => {}
        }
        Ok(nb.encode(cfg)?)
    };

    // The failed set the node blobs of the last round were built with.
    let mut round = agreed(rt);
    match mode {
        ExchangeMode::Gathered => {
            if local.len() > 1 {
                rt.put(Scope::Local, KEY_PROC, &proc_bytes)?;
                proc_put = bytes_of(KEY_PROC, &proc_bytes);
            }
            rt.commit()?;
            #[cfg(feature = "fault-injection")]
            crate::fault::point("after-put", info.rank);
            rt.fence(true, timeout)?;
            round = agreed(rt);
        }
        ExchangeMode::PerProcess | ExchangeMode::OnDemand => {
            if local.len() > 1 {
                rt.put(Scope::Global, KEY_PROC, &proc_bytes)?;
                proc_put = bytes_of(KEY_PROC, &proc_bytes);
            }
        }
    }
    let collect = mode != ExchangeMode::OnDemand;
    #[cfg(feature = "fault-injection")]
    let mut first = true;
    loop {
        if leader_of(&local, &round) == Some(info.rank) {
            let bytes = node_blob(&round)?;
            rt.put(Scope::Global, KEY_NODE, &bytes)?;
            node_put = bytes_of(KEY_NODE, &bytes);
        }
        rt.commit()?;
        #[cfg(feature = "fault-injection")]
        if first && mode != ExchangeMode::Gathered {
            crate::fault::point("after-put", info.rank);
        }
        #[cfg(feature = "fault-injection")]
        {
            first = false;
        }
        rt.fence(collect, timeout)?;
        let now = agreed(rt);
        // Done unless a node's leader of this round died before its blob got through.
        let lost: Vec<u32> = by_node
            .values()
            .filter_map(|ranks| leader_of(ranks, &round))
            .filter(|l| now.contains(l))
            .collect();
        if lost.is_empty() {
            break;
        }
        tracing::debug!(?lost, failed = ?now, "node leaders died; their nodes publish again");
        round = now;
    }
    if mode != ExchangeMode::Gathered && rt.fence_agrees_on_failures() {
        // A rank that died inside the only fence may be left out of its agreement (its data
        // had been accepted); a second, non-collecting fence names it, as the gathered
        // mode's second fence does. Its blobs got through, so nothing is published again.
        rt.fence(false, timeout)?;
    }
    let failed = agreed(rt);

    // Rebuild every surviving rank.
    let mut peers = Vec::with_capacity(info.size as usize);
    for (name, ranks) in &by_node {
        let Some(leader) = leader_of(ranks, &round) else {
            continue;
        };
        if ranks.iter().all(|r| failed.contains(r)) {
            continue;
        }
        // The ranks the leader's blob was built for, in order.
        let in_blob: Vec<u32> = ranks
            .iter()
            .copied()
            .filter(|r| !round.contains(r))
            .collect();
        let b = rt.get(leader, KEY_NODE, timeout)?;
        let nb = Arc::new(
            NodeBlob::decode(&b).map_err(|source| ExchangeError::Decode {
                rank: leader,
                what: "node blob",
                source,
            })?,
        );
        if *name == info.node {
            same_cpcs(info.rank, leader, node, &nb)?;
        }
        let gathered: Option<Vec<ProcBlob>> =
            nb.local_procs.as_ref().map(|lp| lp.to_proc_blobs(&nb));
        if let Some(g) = &gathered {
            if g.len() != in_blob.len() {
                return Err(ExchangeError::Inconsistent {
                    rank: leader,
                    what: format!(
                        "node {name}'s gathered section holds {} processes, the runtime says {} ({} failed)",
                        g.len(),
                        in_blob.len(),
                        ranks.len() - in_blob.len()
                    ),
                });
            }
        }
        let node_len = b.len();
        for (i, &r) in in_blob.iter().enumerate() {
            if failed.contains(&r) {
                continue;
            }
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
            }) + if r == leader {
                KEY_NODE.len() + node_len
            } else {
                0
            };
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
        my_put_bytes: proc_put + node_put,
        failed: failed.into_iter().collect(),
    })
}

/// This process offers, on every port, the CPCs its node's published blob `nb` lists (its own
/// settings build `node`); else its parts cannot fit that blob, and its peers would misread
/// them: a [`ExchangeError::CpcLists`] naming both lists.
fn same_cpcs(rank: u32, leader: u32, node: &NodeBuild, nb: &NodeBlob) -> Result<(), ExchangeError> {
    let text = |p: &super::node::NodePort| {
        p.cpcs
            .iter()
            .map(|r| format!("{}:{}", super::advert::cpc_name(r.cpc), r.priority))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, (own, published)) in node.blob.ports.iter().zip(&nb.ports).enumerate() {
        let set =
            |p: &super::node::NodePort| p.cpcs.iter().map(|r| r.cpc).collect::<BTreeSet<u8>>();
        if set(own) != set(published) {
            return Err(ExchangeError::CpcLists {
                rank,
                leader,
                port: node
                    .port_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("{i}")),
                own: text(own),
                published: text(published),
            });
        }
    }
    Ok(())
}

/// What every rebuilt peer must satisfy: it uses at least one port, every used port exists and
/// has a CPC record, and its parts match the records' widths.
pub(crate) fn check(rank: u32, nb: &NodeBlob, p: &ProcBlob) -> Result<(), ExchangeError> {
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
