//! What each CPC publishes for a port, until the CPC issue gives the real contents: one table,
//! [`cpc_adverts`], which that issue replaces. Everything else in the modex only sees
//! (CPC index, priority, node part, per-process width).

use openib_cpc::CpcId;
use openib_ports::Port;
use std::net::IpAddr;

/// One CPC record a port would advertise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpcAdvert {
    pub cpc: CpcId,
    pub priority: u8,
    /// The node-wide part of the CPC's data on this port.
    pub node_part: Vec<u8>,
    /// Bytes each process adds on this port.
    pub proc_len: u8,
}

/// Width of a UD or RC queue pair number on the wire: QP numbers are 24 bits.
pub const QPN_LEN: u8 = openib_cpc::pack::QPN_LEN;
/// Width of a TCP or rdma_cm listening port number.
pub const PORT_LEN: u8 = openib_cpc::pack::PORT_LEN;
/// Former name of [`PORT_LEN`].
pub const RDMACM_PORT_LEN: u8 = PORT_LEN;

/// What each CPC publishes on `port`, for the CPCs whose verdict (`openib_cpc::evaluate`
/// with `host` facts and `cfg` settings) allows them, with the configured priority. `ip` is the
/// port's IP address, if it has one.
///
/// | CPC    | node part                                         | per process                 |
/// |--------|---------------------------------------------------|-----------------------------|
/// | udcm   | RoCE: the port's GID (16 B, the AH needs it); IB: nothing (LID is port data) | UD QP number, 3 B |
/// | oob    | the side channel's IP (4 or 16 B; none: loopback) | side channel TCP port, 2 B  |
/// | xoob   | as oob                                            | as oob                      |
/// | rdmacm | the IPv4 (4 B) or IPv6 (16 B) address             | rdma_cm listening port, 2 B |
/// | ibcm   | nothing                                           | nothing                     |
///
/// Records are in descending *default* priority (udcm, xoob, oob, ibcm, rdmacm), whatever
/// the configured priorities: the order fixes the per-process parts' layout, so processes of
/// one node whose OPENIB_CPC_PRIORITY differ still lay out their parts as their node blob
/// (published by the node leader) says. Integers inside parts are little-endian, like every
/// integer of the format, so the gathered section's delta coding sees them as numbers.
pub fn cpc_adverts(
    port: &Port,
    ip: Option<IpAddr>,
    host: &openib_cpc::HostFacts,
    cfg: &openib_cpc::CpcConfig,
) -> Vec<CpcAdvert> {
    let mut v: Vec<CpcAdvert> = openib_cpc::evaluate(port, ip.is_some(), host, cfg)
        .into_iter()
        .filter_map(|(cpc, verdict)| {
            let advert = verdict.ok()?;
            let (node_part, proc_len) = openib_cpc::pack::publication(cpc, port, ip)?;
            Some(CpcAdvert {
                cpc,
                priority: advert.priority,
                node_part,
                proc_len,
            })
        })
        .collect();
    v.sort_by_key(|a| (std::cmp::Reverse(a.cpc.default_priority()), a.cpc.index()));
    v
}

/// The size of a CPC's blob in Open MPI 4.1's openib modex (sent by every process), for the
/// `modex size` comparison: udcm 24, rdmacm 14, oob 0, xoob 0, ibcm 24.
pub fn ompi_blob_len(cpc: u8) -> usize {
    match CpcId::from_index(cpc) {
        Some(CpcId::Udcm) => 24,
        Some(CpcId::Rdmacm) => 14,
        Some(CpcId::Ibcm) => 24,
        Some(CpcId::Oob) | Some(CpcId::Xoob) => 0,
        None => 0,
    }
}

/// The CPC's name for display, or `cpc<N>` for an index this build does not know.
pub fn cpc_name(index: u8) -> String {
    CpcId::from_index(index)
        .map(|c| c.name().to_string())
        .unwrap_or_else(|| format!("cpc{index}"))
}
