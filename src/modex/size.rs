//! What a modex costs, side by side: this format and Open MPI's, for the same ports and CPCs.
//!
//! The cost model of one published (key, value) pair is the one the runtimes pack: the key as a
//! 32-bit length, the string and its NUL, then the value as a 32-bit length and its bytes
//! ([`kv_bytes`]). Formats:
//! - `openib`: the default publication: each node leader publishes one node blob with the
//!   gathered section of its processes (flag G) under [`super::KEY_NODE`]; nothing else.
//! - `openib-per-proc`: the node leader publishes the node blob, every process its proc blob
//!   under [`super::KEY_PROC`]; a node with one process publishes the gathered form instead.
//! - `ompi-4.1`: every process publishes 1 byte of port count, then per port 25 bytes of common
//!   data, 1 byte of CPC count and per CPC 3 bytes plus its blob (udcm 24, rdmacm 14, oob and
//!   xoob 0, ibcm 24) under the key "btl.openib.4.1".
//! - `ompi-1.3`: the same with 13 bytes of common data, under "btl.openib.1.3".
//! - `floor`: only the distinct values, no keys and no framing: per node, each device's vendor
//!   id, part id and transport (9 B) and each port's subnet id, LID, APM LID and MTU (13 B) plus
//!   its CPC node parts; per process, its CPC per-process parts.
//!
//! `allgather_bytes` is what a full allgather moves: every process receives every byte the
//! others published, `job_bytes * (nprocs - 1)`.

use super::advert::ompi_blob_len;
use super::compress::Compression;
use super::error::EncodeError;
use super::node::NodeBlob;
use super::procs::{LocalProcs, ProcBlob};
use super::synth::SynthNode;
use super::{KEY_NODE, KEY_PROC};

pub const OMPI41_KEY: &str = "btl.openib.4.1";
pub const OMPI13_KEY: &str = "btl.openib.1.3";
pub const OMPI41_PORT_COMMON: usize = 25;
pub const OMPI13_PORT_COMMON: usize = 13;

/// Bytes one published pair costs: `u32 key length, key, NUL, u32 value length, value`.
pub fn kv_bytes(key: &str, value_len: usize) -> usize {
    4 + key.len() + 1 + 4 + value_len
}

/// One format's costs for one job.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FormatSize {
    pub name: &'static str,
    /// Job bytes / processes: what each process costs, its share of node data included.
    pub per_process_bytes: f64,
    /// Job bytes / nodes.
    pub per_node_bytes: f64,
    pub job_bytes: u64,
    pub allgather_bytes: u64,
}

/// The value Open MPI's openib BTL publishes for one process.
pub fn ompi_value_len(node: &NodeBlob, proc_: &ProcBlob, port_common: usize) -> usize {
    1 + node
        .ports
        .iter()
        .enumerate()
        .filter(|(i, _)| proc_.ports.contains(*i))
        .map(|(_, p)| {
            port_common
                + 1
                + p.cpcs
                    .iter()
                    .map(|c| 3 + ompi_blob_len(c.cpc))
                    .sum::<usize>()
        })
        .sum::<usize>()
}

/// The floor of one node: distinct values only.
pub fn floor_node_bytes(n: &SynthNode) -> usize {
    let node: usize = n.node.devices.len() * 9
        + n.node
            .ports
            .iter()
            .map(|p| 13 + p.cpcs.iter().map(|c| c.blob.len()).sum::<usize>())
            .sum::<usize>();
    let procs: usize = n
        .procs
        .iter()
        .map(|p| p.parts.iter().map(Vec::len).sum::<usize>())
        .sum();
    node + procs
}

/// Bytes each format publishes for one node.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeCost {
    pub openib: usize,
    pub openib_per_proc: usize,
    pub ompi41: usize,
    pub ompi13: usize,
    pub floor: usize,
}

/// What one node publishes in each format.
pub fn node_cost(n: &SynthNode, cfg: Compression) -> Result<NodeCost, EncodeError> {
    let mut gathered = n.node.clone();
    gathered.local_procs = Some(LocalProcs::gather(&n.node, &n.procs)?);
    let openib = kv_bytes(KEY_NODE, gathered.encode(cfg)?.len());
    let openib_per_proc = if n.procs.len() <= 1 {
        openib
    } else {
        let mut sum = kv_bytes(KEY_NODE, n.node.encode(cfg)?.len());
        for p in &n.procs {
            sum += kv_bytes(KEY_PROC, p.encode(&n.node, cfg)?.len());
        }
        sum
    };
    let ompi = |key: &str, common| {
        n.procs
            .iter()
            .map(|p| kv_bytes(key, ompi_value_len(&n.node, p, common)))
            .sum()
    };
    Ok(NodeCost {
        openib,
        openib_per_proc,
        ompi41: ompi(OMPI41_KEY, OMPI41_PORT_COMMON),
        ompi13: ompi(OMPI13_KEY, OMPI13_PORT_COMMON),
        floor: floor_node_bytes(n),
    })
}

/// The five formats for a whole job.
pub fn job_sizes(job: &[SynthNode], cfg: Compression) -> Result<Vec<FormatSize>, EncodeError> {
    job_sizes_iter(job.iter().cloned(), cfg)
}

/// The five formats for a job given node by node (a large job never needs memory at once).
pub fn job_sizes_iter(
    job: impl IntoIterator<Item = SynthNode>,
    cfg: Compression,
) -> Result<Vec<FormatSize>, EncodeError> {
    let mut t = [0u64; 5];
    let mut nodes = 0usize;
    let mut nprocs = 0u64;
    for n in job {
        nodes += 1;
        nprocs += n.procs.len() as u64;
        let c = node_cost(&n, cfg)?;
        for (acc, v) in t
            .iter_mut()
            .zip([c.openib, c.openib_per_proc, c.ompi41, c.ompi13, c.floor])
        {
            *acc += v as u64;
        }
    }
    let nodes = nodes.max(1) as f64;
    let names = ["openib", "openib-per-proc", "ompi-4.1", "ompi-1.3", "floor"];
    Ok(names
        .iter()
        .zip(t)
        .map(|(&name, job_bytes)| FormatSize {
            name,
            per_process_bytes: job_bytes as f64 / nprocs.max(1) as f64,
            per_node_bytes: job_bytes as f64 / nodes,
            job_bytes,
            allgather_bytes: job_bytes.saturating_mul(nprocs.saturating_sub(1)),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modex::fixtures::{ib_template, synth_job};
    use crate::modex::synth::Values;

    #[test]
    fn ompi_counts_follow_the_issue() {
        // Two IB ports with udcm: 1 + 2 * (25 + 1 + 3 + 24) = 107 bytes, key 4 + 14 + 1, length 4.
        let job = synth_job(&ib_template(2, false), 1, 1, Values::Random, false, 1);
        assert_eq!(
            ompi_value_len(&job[0].node, &job[0].procs[0], OMPI41_PORT_COMMON),
            107
        );
        let s = job_sizes(&job, Compression::DEFAULT).unwrap();
        let f = |n: &str| s.iter().find(|f| f.name == n).unwrap().clone();
        assert_eq!(f("ompi-4.1").job_bytes, 107 + 23);
        assert_eq!(f("ompi-1.3").job_bytes, 1 + 2 * (13 + 1 + 3 + 24) + 23);
        assert_eq!(f("floor").job_bytes, 9 + 2 * 13 + 2 * 3);
        assert_eq!(f("ompi-4.1").allgather_bytes, 0);
    }

    #[test]
    fn at_64_ppn_openib_is_under_a_tenth_of_ompi_41() {
        for values in [Values::Random, Values::Sequential] {
            let job = synth_job(&ib_template(2, false), 4, 64, values, false, 1);
            let s = job_sizes(&job, Compression::DEFAULT).unwrap();
            let f = |n: &str| s.iter().find(|f| f.name == n).unwrap().per_process_bytes;
            assert!(f("openib") * 10.0 <= f("ompi-4.1"), "{s:?}");
            assert!(f("openib") <= f("floor") * 1.2, "{s:?}");
        }
    }
}
