//! From a raw [`Topology`] to the ports openib can use: subnet ids, APM LIDs, usability, filters.
//!
//! The rules (documented in `docs/PORTS.md`):
//! - **subnet_id**, InfiniBand: the subnet prefix (upper 64 bits) of the GID at the configured
//!   GID index (default 0).
//! - **subnet_id**, Ethernet (RoCE): derived from the IP subnet of the port's network device,
//!   see [`roce_subnet_id`]. A port with no IP address on its network device falls back to the
//!   GID prefix rule and says so in `subnet_source`.
//! - **apm_lid**: with `lmc > 0`, the second LID of the port (`lid + 1`); else, when APM over
//!   ports is enabled, the LID of the next ACTIVE InfiniBand port of the same device (by port
//!   number, wrapping); else 0. RoCE ports have no LIDs: always 0.
//! - **usable**: the port is ACTIVE, its link layer is InfiniBand or Ethernet, it has a GID at
//!   the configured index, and no include/exclude filter removes it.

use crate::filter::{Filter, FilterOutcome};
use crate::model::{Gid, GidType, LinkLayer, Mtu, PortState};
use crate::topology::{IpNet, NetDev, RawDevice, RawGid, RawPort, Topology};
use std::net::IpAddr;

/// What the derivation may be told.
#[derive(Debug, Clone, Default)]
pub struct DeriveConfig {
    /// GID index whose prefix is the IB subnet id (and whose address RoCE prefers). Default 0.
    pub gid_index: u32,
    /// Use another active port of the same device as the APM alternate path when `lmc == 0`.
    pub apm_over_ports: bool,
    /// Include or exclude list; never both.
    pub filter: Filter,
}

/// Where a port's subnet id came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubnetSource {
    /// The subnet prefix of the GID at the configured index (InfiniBand).
    GidPrefix,
    /// The IP subnet of the port's network device (RoCE), e.g. "10.77.0.0/24 on veth0".
    IpSubnet(String),
    /// A RoCE port whose network device has no IP address: GID prefix used instead.
    GidPrefixFallback(String),
    /// No GID at the configured index: no subnet id.
    None,
}

/// A port after derivation: everything `openib ports` shows and the modex publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub device: String,
    pub node_guid: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub transport: u32,
    pub xrc: bool,
    pub raw: RawPort,
    pub subnet_id: u64,
    pub subnet_source: SubnetSource,
    pub apm_lid: u16,
    /// The active MTU, when it is a valid enum.
    pub mtu: Option<Mtu>,
    pub usable: bool,
    /// Why the port is not usable; `None` when it is.
    pub reason: Option<String>,
}

impl Port {
    /// `device:port`, the name filters and peers use.
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.raw.port)
    }
    pub fn link_layer(&self) -> LinkLayer {
        self.raw.link_layer
    }
    pub fn lid(&self) -> u16 {
        self.raw.lid
    }
    pub fn gid(&self, index: u32) -> Option<&RawGid> {
        self.raw.gids.iter().find(|g| g.index == index)
    }
}

/// The result of a derivation: all ports, in device then port order, and warnings for the user.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub ports: Vec<Port>,
    pub warnings: Vec<String>,
    /// Filter entries that matched no device or port.
    pub unmatched_filters: Vec<String>,
}

impl Discovery {
    pub fn usable(&self) -> impl Iterator<Item = &Port> {
        self.ports.iter().filter(|p| p.usable)
    }
}

/// Derives every port of `topo`. Never fails: a port that cannot be used says why.
pub fn derive(topo: &Topology, cfg: &DeriveConfig) -> Discovery {
    let mut ports = Vec::new();
    for dev in &topo.devices {
        let mut raw_ports: Vec<&RawPort> = dev.ports.iter().collect();
        raw_ports.sort_by_key(|p| p.port);
        for raw in &raw_ports {
            ports.push(derive_port(dev, raw, &raw_ports, topo, cfg));
        }
    }
    let FilterOutcome { unmatched } = cfg.filter.apply(&mut ports);
    for u in &unmatched {
        tracing::info!(filter = %u, "port filter entry matches no device or port");
    }
    for p in &ports {
        match &p.reason {
            Some(r) => tracing::info!(port = %p.name(), reason = %r, "port not used"),
            None => {
                tracing::debug!(port = %p.name(), subnet_id = format_args!("{:#018x}", p.subnet_id), "port usable")
            }
        }
    }
    let warnings = default_prefix_warning(&ports).into_iter().collect();
    Discovery {
        ports,
        warnings,
        unmatched_filters: unmatched,
    }
}

fn derive_port(
    dev: &RawDevice,
    raw: &RawPort,
    siblings: &[&RawPort],
    topo: &Topology,
    cfg: &DeriveConfig,
) -> Port {
    let gid = raw.gids.iter().find(|g| g.index == cfg.gid_index);
    let (subnet_id, subnet_source) = subnet_id(raw, gid, &topo.netdevs, cfg.gid_index);
    let mtu = Mtu::from_enum(raw.active_mtu);
    let netdev_up = raw
        .netdev
        .as_ref()
        .and_then(|n| topo.netdevs.iter().find(|d| &d.name == n))
        .map(|d| d.up);
    let reason = unusable_reason(raw, gid, mtu, cfg.gid_index, netdev_up);
    Port {
        device: dev.name.clone(),
        node_guid: dev.node_guid,
        vendor_id: dev.vendor_id,
        vendor_part_id: dev.vendor_part_id,
        transport: dev.transport,
        xrc: dev.xrc,
        raw: raw.clone(),
        subnet_id,
        subnet_source,
        apm_lid: apm_lid(raw, siblings, cfg.apm_over_ports),
        mtu,
        usable: reason.is_none(),
        reason,
    }
}

fn unusable_reason(
    raw: &RawPort,
    gid: Option<&RawGid>,
    mtu: Option<Mtu>,
    gid_index: u32,
    netdev_up: Option<bool>,
) -> Option<String> {
    if raw.state != PortState::Active {
        let mut r = format!(
            "port state is {} (only ACTIVE ports are used)",
            raw.state.name()
        );
        if raw.link_layer == LinkLayer::Ethernet {
            let nd = raw.netdev.as_deref().unwrap_or("?");
            r.push_str(&match netdev_up {
                Some(false) => format!("; its network device {nd} is down (ip link set {nd} up)"),
                _ => format!(
                    "; physical state {}: does network device {nd} have a carrier?",
                    raw.phys_state.name()
                ),
            });
        } else if raw.state == PortState::Init {
            r.push_str("; is a subnet manager running on the fabric?");
        }
        return Some(r);
    }
    if let LinkLayer::Other(n) = raw.link_layer {
        return Some(format!("unsupported link layer {n}"));
    }
    if mtu.is_none() {
        return Some(format!(
            "active MTU enum {} is not valid (1 = 256 ... 5 = 4096)",
            raw.active_mtu
        ));
    }
    if gid.is_none() {
        return Some(format!(
            "no GID at index {gid_index} (the configured GID index)"
        ));
    }
    None
}

fn subnet_id(
    raw: &RawPort,
    gid: Option<&RawGid>,
    netdevs: &[NetDev],
    gid_index: u32,
) -> (u64, SubnetSource) {
    let Some(gid) = gid else {
        return (0, SubnetSource::None);
    };
    if raw.link_layer.is_infiniband() {
        return (gid.gid.subnet_prefix(), SubnetSource::GidPrefix);
    }
    let ifname = gid.netdev.as_deref().or(raw.netdev.as_deref());
    let Some(ifname) = ifname else {
        return (
            gid.gid.subnet_prefix(),
            SubnetSource::GidPrefixFallback(format!("GID {gid_index} names no network device")),
        );
    };
    let Some(nd) = netdevs.iter().find(|n| n.name == ifname) else {
        return (
            gid.gid.subnet_prefix(),
            SubnetSource::GidPrefixFallback(format!("network device {ifname} not found")),
        );
    };
    match pick_address(&nd.addrs, &gid.gid) {
        Some(net) => (
            roce_subnet_id(&net),
            SubnetSource::IpSubnet(format!("{}/{} on {ifname}", net.network(), net.prefix_len)),
        ),
        None => (
            gid.gid.subnet_prefix(),
            SubnetSource::GidPrefixFallback(format!("network device {ifname} has no IP address")),
        ),
    }
}

/// The address a RoCE port's subnet derives from. Link-local IPv6 addresses never count (every
/// host has fe80::/64). In order: the address the GID maps (RoCE v2 IPv4-mapped, or a global
/// IPv6 GID), else the first IPv4 address, else the first global IPv6 address.
fn pick_address(addrs: &[IpNet], gid: &Gid) -> Option<IpNet> {
    let gid_ip: IpAddr = match gid.ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(std::net::Ipv6Addr::from(gid.0)),
    };
    let is_link_local6 =
        |a: &IpNet| matches!(a.addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
    let candidates = || addrs.iter().filter(|a| !is_link_local6(a));
    candidates()
        .find(|a| a.addr == gid_ip)
        .or_else(|| candidates().find(|a| a.addr.is_ipv4()))
        .or_else(|| candidates().find(|a| a.addr.is_ipv6()))
        .copied()
}

/// The subnet id of a RoCE port on IP subnet `net`: ports on one IP subnet get the same id and
/// ports on different subnets (including the same address with another prefix length) do not.
///
/// IPv4: `0x0004_PP00_NNNN_NNNN` with PP the prefix length and N the network address.
/// IPv6: `0x06` in the top byte, the rest a 56-bit FNV-1a hash of the prefix length and network.
/// Neither form can be an IB subnet prefix in practice: those start 0xfe80 (link-local) or are
/// site-assigned prefixes, and the top byte 0x00/0x06 marks the value as IP-derived.
pub fn roce_subnet_id(net: &IpNet) -> u64 {
    match net.network() {
        IpAddr::V4(a) => (0x04u64 << 48) | ((net.prefix_len as u64) << 40) | u32::from(a) as u64,
        IpAddr::V6(a) => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in std::iter::once(net.prefix_len).chain(a.octets()) {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            (0x06u64 << 56) | (h & 0x00ff_ffff_ffff_ffff)
        }
    }
}

fn apm_lid(raw: &RawPort, siblings: &[&RawPort], apm_over_ports: bool) -> u16 {
    if !raw.link_layer.is_infiniband() || raw.lid == 0 {
        return 0;
    }
    if raw.lmc > 0 {
        return raw.lid.wrapping_add(1);
    }
    if apm_over_ports {
        let after = siblings.iter().filter(|p| p.port > raw.port);
        let before = siblings.iter().filter(|p| p.port < raw.port);
        if let Some(alt) = after
            .chain(before)
            .find(|p| p.state == PortState::Active && p.link_layer.is_infiniband() && p.lid != 0)
        {
            return alt.lid;
        }
    }
    0
}

/// The warning for usable IB ports on two or more devices that all carry the IBTA default
/// subnet prefix: if they are cabled to different fabrics, peers cannot tell those fabrics apart.
fn default_prefix_warning(ports: &[Port]) -> Option<String> {
    let default: Vec<&Port> = ports
        .iter()
        .filter(|p| {
            p.usable
                && p.subnet_source == SubnetSource::GidPrefix
                && p.subnet_id == Gid::DEFAULT_SUBNET_PREFIX
        })
        .collect();
    let mut devices: Vec<&str> = default.iter().map(|p| p.device.as_str()).collect();
    devices.dedup();
    if devices.len() < 2 {
        return None;
    }
    let names: Vec<String> = default.iter().map(|p| p.name()).collect();
    let msg = format!(
        "usable InfiniBand ports on different devices ({}) all carry the default subnet prefix \
         fe80:0000:0000:0000; if they are cabled to different physical fabrics, peers cannot tell \
         those fabrics apart and connections between them will fail. Give each fabric its own subnet \
         prefix in its subnet manager (OpenSM: subnet_prefix), or use --include/--exclude.",
        names.join(", ")
    );
    tracing::info!("{msg}");
    Some(msg)
}

/// Whether a GID entry is a RoCE one (for display).
pub fn is_roce(t: GidType) -> bool {
    matches!(t, GidType::RoceV1 | GidType::RoceV2)
}
