//! Synthetic jobs for `modex size`, the benchmark and the layout measurements: one node's blob
//! as a template, repeated over `nodes` nodes with the values a real fabric would give them.
//! Production code (`openib modex size` builds its jobs with [`synth_node_with`]); the fixed
//! templates and whole jobs that only tests and benchmarks use are in `src/modex/fixtures.rs`
//! (cargo feature `test-support`).
//!
//! The value model (documented in docs/PERFORMANCE.md):
//! - LIDs: the subnet manager hands them out in order: node k's port i gets
//!   `template lid + k * nports` (0 stays 0, as on RoCE); APM LIDs likewise.
//! - IP addresses (rdmacm node parts): the template's, with the last byte(s) plus k.
//! - udcm UD QP numbers: [`Values::Sequential`]: a random 24-bit base per node, then each local
//!   rank's QP on each port allocated in rank order (`base + (rank * nports + i) * (1 + jitter)`
//!   with a jitter of 0..=2 extra QPs), as mlx5 allocates QP numbers to processes started
//!   together; [`Values::Random`]: random 24-bit values, the incompressible worst case.
//! - Every other per-process part (rdmacm ports, unknown CPCs): random bytes in both models.

use super::node::NodeBlob;
use super::procs::{PortSet, ProcBlob};
use openib_cpc::CpcId;

/// How per-process values are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    Random,
    Sequential,
}

impl Values {
    pub fn name(self) -> &'static str {
        match self {
            Values::Random => "random",
            Values::Sequential => "sequential",
        }
    }
}

impl std::str::FromStr for Values {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" => Ok(Values::Random),
            "sequential" => Ok(Values::Sequential),
            o => Err(format!("unknown value model {o:?} (random or sequential)")),
        }
    }
}

/// One node of a synthetic job: its node blob (without gathered section) and its processes.
#[derive(Debug, Clone)]
pub struct SynthNode {
    pub node: NodeBlob,
    pub procs: Vec<ProcBlob>,
}

/// Node `k` with `ports_of(local rank)` giving each process's ports.
pub fn synth_node_with(
    template: &NodeBlob,
    k: usize,
    ppn: usize,
    values: Values,
    seed: u64,
    ports_of: impl Fn(usize) -> PortSet,
) -> SynthNode {
    let mut rng = fastrand::Rng::with_seed(seed ^ (k as u64).wrapping_mul(0x5851_f42d_4c95_7f2d));
    let nports = template.ports.len();
    let mut node = template.clone();
    node.local_procs = None;
    for p in &mut node.ports {
        let shift = (k * nports) as u16;
        if p.lid != 0 {
            p.lid = p.lid.wrapping_add(shift);
        }
        if p.apm_lid != 0 {
            p.apm_lid = p.apm_lid.wrapping_add(shift);
        }
        for c in &mut p.cpcs {
            if let Some(last) = c.blob.last_mut() {
                *last = last.wrapping_add(k as u8);
                let n = c.blob.len();
                if n >= 2 {
                    c.blob[n - 2] = c.blob[n - 2].wrapping_add((k >> 8) as u8);
                }
            }
        }
    }
    let base = rng.u64(..) & 0xff_ffff;
    let mut next_qpn = base;
    // QP numbers in allocation order: rank by rank, port by port.
    let mut qpns = vec![0u64; ppn * nports];
    for q in qpns.iter_mut() {
        *q = match values {
            Values::Sequential => {
                let v = next_qpn & 0xff_ffff;
                next_qpn += 1 + rng.u64(..) % 3;
                v
            }
            Values::Random => rng.u64(..) & 0xff_ffff,
        };
    }
    let procs = (0..ppn)
        .map(|rank| {
            let ports = ports_of(rank);
            let parts = ProcBlob::slots(&node, ports)
                .map(|(i, j)| {
                    let c = &node.ports[i].cpcs[j];
                    let w = c.proc_len as usize;
                    if c.cpc == CpcId::Udcm.index() {
                        let v = qpns[rank * nports + i].to_le_bytes();
                        (0..w).map(|b| if b < 8 { v[b] } else { 0 }).collect()
                    } else {
                        (0..w).map(|_| rng.u64(..) as u8).collect()
                    }
                })
                .collect();
            ProcBlob { ports, parts }
        })
        .collect();
    SynthNode { node, procs }
}
