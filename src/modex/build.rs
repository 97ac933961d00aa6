//! From derived ports to the blobs a node publishes.
//!
//! The node blob holds every ACTIVE, usable port *before* per-process include/exclude (derive
//! the ports with `Filter::All` for it); each process's bitmap then says which of those its own
//! filter keeps (derive with the process's filter for it).

use super::advert::{cpc_adverts, CpcAdvert};
use super::error::EncodeError;
use super::layout;
use super::node::{CpcRecord, Device, NodeBlob, NodePort, WireLinkLayer};
use super::procs::{PortSet, ProcBlob};
use openib_ports::{Discovery, LinkLayer, Port, Topology};
use std::net::IpAddr;

/// Extension kind carrying the node's device names, NUL-separated, in device-table order.
pub const EXT_DEVICE_NAMES: u32 = 1;

/// The device names of a node blob's [`EXT_DEVICE_NAMES`] extension, if it has a valid one.
pub fn device_names(blob: &NodeBlob) -> Option<Vec<String>> {
    let e = blob
        .extensions
        .iter()
        .find(|e| e.kind == EXT_DEVICE_NAMES)?;
    let names: Vec<String> = std::str::from_utf8(&e.data)
        .ok()?
        .split('\0')
        .map(str::to_string)
        .collect();
    (names.len() == blob.devices.len()).then_some(names)
}

/// `device:port` of node-blob port `i`, from the names extension (`devN:port` without it).
pub fn port_name(blob: &NodeBlob, i: usize) -> String {
    let p = &blob.ports[i];
    match device_names(blob) {
        Some(n) => format!("{}:{}", n[p.device as usize], p.port_num),
        None => format!("dev{}:{}", p.device, p.port_num),
    }
}

/// A node blob with the names of what its indices refer to.
#[derive(Debug, Clone)]
pub struct NodeBuild {
    pub blob: NodeBlob,
    /// Device names, by device index.
    pub device_names: Vec<String>,
    /// `device:port` of each node-blob port, by port index.
    pub port_names: Vec<String>,
    /// The CPC adverts of each port (the records' source), by port index.
    pub adverts: Vec<Vec<CpcAdvert>>,
}

/// The IP address rdmacm would use on `port`: for RoCE the IPv4 address its GID at
/// `gid_index` maps, else the first IPv4 then the first global IPv6 address of its network
/// device; for InfiniBand the IPoIB interface's address by the same order.
pub fn port_ip(port: &Port, topo: &Topology, gid_index: u32) -> Option<IpAddr> {
    if port.link_layer() == LinkLayer::Ethernet {
        if let Some(v4) = port.gid(gid_index).and_then(|g| g.gid.ipv4_mapped()) {
            return Some(IpAddr::V4(v4));
        }
    }
    let name = port.raw.netdev.as_deref()?;
    let nd = topo.netdevs.iter().find(|n| n.name == name && n.up)?;
    let global6 = |a: &IpAddr| matches!(a, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) != 0xfe80);
    nd.addrs
        .iter()
        .map(|n| n.addr)
        .find(|a| a.is_ipv4())
        .or_else(|| nd.addrs.iter().map(|n| n.addr).find(global6))
}

/// The node blob of the usable ports of `unfiltered` (derived without include/exclude).
pub fn build_node(
    unfiltered: &Discovery,
    topo: &Topology,
    gid_index: u32,
    host: &openib_cpc::HostFacts,
    cpc_cfg: &openib_cpc::CpcConfig,
) -> Result<NodeBuild, EncodeError> {
    let mut b = NodeBuild {
        blob: NodeBlob::default(),
        device_names: vec![],
        port_names: vec![],
        adverts: vec![],
    };
    for p in unfiltered.usable() {
        let dev = match b.device_names.iter().position(|d| *d == p.device) {
            Some(i) => i,
            None => {
                if b.device_names.len() == layout::MAX_DEVICES {
                    return Err(EncodeError::TooMany {
                        what: "devices",
                        count: 256,
                        max: layout::MAX_DEVICES,
                    });
                }
                let transport = u8::try_from(p.transport).map_err(|_| {
                    EncodeError::Invalid(format!(
                        "{}: transport type {} does not fit a byte",
                        p.device, p.transport
                    ))
                })?;
                b.blob.devices.push(Device {
                    vendor_id: p.vendor_id,
                    vendor_part_id: p.vendor_part_id,
                    transport,
                });
                b.device_names.push(p.device.clone());
                b.device_names.len() - 1
            }
        };
        let mtu = p
            .mtu
            .map(|m| m.as_enum())
            .ok_or_else(|| EncodeError::Invalid(format!("{}: no valid MTU", p.name())))?;
        let adverts = cpc_adverts(p, port_ip(p, topo, gid_index), host, cpc_cfg);
        b.blob.ports.push(NodePort {
            device: dev as u8,
            port_num: p.raw.port,
            link_layer: if p.link_layer().is_infiniband() {
                WireLinkLayer::InfiniBand
            } else {
                WireLinkLayer::Ethernet
            },
            mtu,
            lid: p.lid(),
            apm_lid: p.apm_lid,
            subnet_id: p.subnet_id,
            cpcs: adverts
                .iter()
                .map(|a| CpcRecord {
                    cpc: a.cpc.index(),
                    priority: a.priority,
                    proc_len: a.proc_len,
                    blob: a.node_part.clone(),
                })
                .collect(),
        });
        b.port_names.push(p.name());
        b.adverts.push(adverts);
    }
    // Extension 1: the device names, so peers can name ports as `device:port`.
    b.blob.extensions.push(super::node::Extension {
        kind: EXT_DEVICE_NAMES,
        data: b.device_names.join("\0").into_bytes(),
    });
    if b.blob.ports.is_empty() {
        return Err(EncodeError::Invalid(
            "no usable port: there is nothing to publish".into(),
        ));
    }
    b.blob.validate()?;
    Ok(b)
}

/// The node-blob ports a process whose own ports are `filtered` uses.
pub fn proc_ports(node: &NodeBuild, filtered: &Discovery) -> PortSet {
    let mut s = PortSet::EMPTY;
    for (i, name) in node.port_names.iter().enumerate() {
        if filtered.usable().any(|p| p.name() == *name) {
            s.insert(i);
        }
    }
    s
}

/// A proc blob whose per-process parts are zeros: what `modex show` prints until the CPCs
/// exist and have real QP numbers and ports to publish.
pub fn placeholder_proc(node: &NodeBlob, ports: PortSet) -> ProcBlob {
    let parts = ProcBlob::slots(node, ports)
        .map(|(i, j)| vec![0u8; node.ports[i].cpcs[j].proc_len as usize])
        .collect();
    ProcBlob { ports, parts }
}
