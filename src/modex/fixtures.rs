//! Synthetic-job fixtures for the tests, the benchmark and the layout measurements (cargo
//! feature `test-support`, which every test and bench build has; not in a default build): a
//! fixed InfiniBand node template and whole jobs built from a template with
//! [`super::synth::synth_node_with`].

use super::node::NodeBlob;
use super::procs::PortSet;
use super::synth::{synth_node_with, SynthNode, Values};
use super::{CpcRecord, Device, NodePort, WireLinkLayer};
use openib_cpc::CpcId;

/// A node of `nports` InfiniBand ports on one ConnectX-5 (two ports per device), one subnet,
/// udcm on each port, plus rdmacm (IPoIB, IPv4) when `rdmacm`.
pub fn ib_template(nports: usize, rdmacm: bool) -> NodeBlob {
    let ndev = nports.div_ceil(2).max(1);
    let devices = vec![
        Device {
            vendor_id: 0x02c9,
            vendor_part_id: 4119,
            transport: 0
        };
        ndev
    ];
    let ports = (0..nports)
        .map(|i| {
            let mut cpcs = vec![CpcRecord {
                cpc: CpcId::Udcm.index(),
                priority: CpcId::Udcm.default_priority(),
                proc_len: 3,
                blob: vec![],
            }];
            if rdmacm {
                cpcs.push(CpcRecord {
                    cpc: CpcId::Rdmacm.index(),
                    priority: CpcId::Rdmacm.default_priority(),
                    proc_len: 2,
                    blob: vec![10, 20 + i as u8, 0, 1],
                });
            }
            NodePort {
                device: (i / 2) as u8,
                port_num: (i % 2) as u8 + 1,
                link_layer: WireLinkLayer::InfiniBand,
                mtu: 5,
                lid: 1 + i as u16,
                apm_lid: 0,
                subnet_id: 0xfe80_0000_0000_0000,
                cpcs,
            }
        })
        .collect();
    NodeBlob {
        devices,
        ports,
        local_procs: None,
        extensions: vec![],
    }
}

/// Node `k` of a job built on `template`: its node blob and `ppn` processes. With
/// `hetero`, every odd local rank excludes the node's first port (when there are two or more).
pub fn synth_node(
    template: &NodeBlob,
    k: usize,
    ppn: usize,
    values: Values,
    hetero: bool,
    seed: u64,
) -> SynthNode {
    let nports = template.ports.len();
    let all = PortSet::all(nports);
    synth_node_with(template, k, ppn, values, seed, |rank| {
        let mut ports = all;
        if hetero && nports >= 2 && rank % 2 == 1 {
            ports.remove(0);
        }
        ports
    })
}

/// Every node of a `nodes` x `ppn` job.
pub fn synth_job(
    template: &NodeBlob,
    nodes: usize,
    ppn: usize,
    values: Values,
    hetero: bool,
    seed: u64,
) -> Vec<SynthNode> {
    (0..nodes)
        .map(|k| synth_node(template, k, ppn, values, hetero, seed))
        .collect()
}
