//! Reads the raw [`Topology`] from the hardware: libibverbs for devices and ports, the kernel's
//! interface list for the addresses of RoCE network devices.

use crate::model::{Gid, GidType, LinkLayer, PhysState, PortState};
use crate::topology::{IpNet, NetDev, RawDevice, RawGid, RawPort, Topology};

/// Why the hardware could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum HwError {
    /// libibverbs is not installed (or not loadable).
    #[error(transparent)]
    NoVerbs(openib_sys::Error),
    /// libibverbs loaded but could not list devices.
    #[error("cannot list RDMA devices: {0}")]
    DeviceList(openib_sys::Error),
}

/// The topology read, plus what could not be read (a device that failed to open, say).
#[derive(Debug, Default)]
pub struct Scan {
    pub topology: Topology,
    /// One line per device or port that was skipped, with the reason.
    pub problems: Vec<String>,
}

/// Reads every device and port. A device that cannot be opened or queried is skipped and
/// named in [`Scan::problems`]; only a missing library or device list is an error.
pub fn read_topology() -> Result<Scan, HwError> {
    openib_sys::verbs().map_err(HwError::NoVerbs)?;
    let list = openib_sys::devices().map_err(HwError::DeviceList)?;
    let mut scan = Scan::default();
    let mut wanted_netdevs: Vec<String> = Vec::new();
    for info in list.iter() {
        let name = info.name();
        match read_device(&info, &mut wanted_netdevs, &mut scan.problems) {
            Ok(dev) => scan.topology.devices.push(dev),
            Err(e) => {
                tracing::warn!(device = %name, error = %e, "device skipped");
                scan.problems.push(format!("{name}: {e}"));
            }
        }
    }
    match openib_sys::netdev::interfaces() {
        Ok(ifs) => {
            for i in ifs.into_iter().filter(|i| wanted_netdevs.contains(&i.name)) {
                scan.topology.netdevs.push(NetDev {
                    name: i.name,
                    up: i.up,
                    addrs: i
                        .addrs
                        .into_iter()
                        .map(|(addr, prefix_len)| IpNet { addr, prefix_len })
                        .collect(),
                });
            }
        }
        Err(e) => scan
            .problems
            .push(format!("cannot list network interfaces (getifaddrs): {e}")),
    }
    Ok(scan)
}

fn read_device(
    info: &openib_sys::DeviceInfo<'_>,
    wanted_netdevs: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> Result<RawDevice, openib_sys::Error> {
    let name = info.name();
    let ctx = info.open()?;
    let attr = ctx.query_device()?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        match read_port(&ctx, port) {
            Ok(p) => {
                for nd in p
                    .netdev
                    .iter()
                    .chain(p.gids.iter().filter_map(|g| g.netdev.as_ref()))
                {
                    if !wanted_netdevs.contains(nd) {
                        wanted_netdevs.push(nd.clone());
                    }
                }
                ports.push(p);
            }
            Err(e) => {
                tracing::warn!(device = %name, port, error = %e, "port skipped");
                problems.push(format!("{name}:{port}: {e}"));
            }
        }
    }
    Ok(RawDevice {
        name,
        node_guid: attr.node_guid,
        vendor_id: attr.vendor_id,
        vendor_part_id: attr.vendor_part_id,
        hw_ver: attr.hw_ver,
        fw_ver: attr.fw_ver.clone(),
        transport: info.transport_type().max(0) as u32,
        xrc: attr.has_xrc(),
        max_qp: attr.max_qp.max(0) as u32,
        max_qp_wr: attr.max_qp_wr.max(0) as u32,
        max_srq: attr.max_srq.max(0) as u32,
        max_mr_size: attr.max_mr_size,
        atomic_cap: attr.atomic_cap,
        ports,
    })
}

fn read_port(ctx: &openib_sys::Context, port: u8) -> Result<RawPort, openib_sys::Error> {
    let a = ctx.query_port(port)?;
    let mut gids = Vec::new();
    for e in ctx.gid_table(port, a.gid_tbl_len)? {
        let Some(gid_type) = GidType::from_raw(e.gid_type) else {
            tracing::warn!(
                device = ctx.name(),
                port,
                index = e.index,
                gid_type = e.gid_type,
                "GID of unknown type skipped"
            );
            continue;
        };
        let netdev = (e.ndev_ifindex != 0)
            .then(|| openib_sys::netdev::name_of(e.ndev_ifindex))
            .flatten();
        gids.push(RawGid {
            index: e.index,
            gid: Gid(e.gid),
            gid_type,
            netdev,
        });
    }
    let link_layer = LinkLayer::from_raw(a.link_layer);
    let netdev =
        port_netdev(ctx.name(), port).or_else(|| gids.iter().find_map(|g| g.netdev.clone()));
    Ok(RawPort {
        port,
        state: PortState::from_raw(a.state),
        phys_state: PhysState(a.phys_state),
        link_layer,
        lid: a.lid,
        lmc: a.lmc,
        sm_lid: a.sm_lid,
        active_mtu: a.active_mtu as u8,
        max_mtu: Some(a.max_mtu as u8),
        active_width: a.active_width,
        active_speed: a.active_speed as u16,
        port_cap_flags: a.port_cap_flags,
        gids,
        netdev,
    })
}

/// The network device of a port as sysfs names it (`/sys/class/infiniband/DEV/ports/N/gid_attrs/ndevs/0`).
fn port_netdev(device: &str, port: u8) -> Option<String> {
    let path = format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs/ndevs/0");
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
