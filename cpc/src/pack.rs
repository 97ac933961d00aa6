//! What each CPC publishes in the modex, and how a peer's address is rebuilt from it. The modex
//! carries a CPC record per port: a node-wide part (in the node blob) and a fixed-width
//! per-process part (in the proc blob or the node leader's gathered section).
//!
//! | CPC    | node part                                         | per process                 |
//! |--------|---------------------------------------------------|-----------------------------|
//! | udcm   | RoCE: the GID its address handles route to (16 B); IB: nothing (the LID is port data) | UD QP number, 3 B |
//! | oob    | the side channel's IP (4 or 16 B; none: loopback) | side channel TCP port, 2 B  |
//! | xoob   | as oob                                            | as oob                      |
//! | rdmacm | the port's IPv4 (4 B) or IPv6 (16 B) address      | rdma_cm listening port, 2 B |
//! | ibcm   | nothing                                           | nothing                     |
//!
//! Integers are little-endian, like every integer of the modex.

use crate::udcm::UdAddress;
use crate::CpcId;
use openib_ports::{LinkLayer, Port};
use std::net::{IpAddr, SocketAddr};

/// Width of a UD or RC queue pair number: QP numbers are 24 bits.
pub const QPN_LEN: u8 = 3;
/// Width of a TCP or rdma_cm listening port number.
pub const PORT_LEN: u8 = 2;

/// The node-wide part and the per-process width `cpc` publishes on `port` (IP `ip`).
/// `None` when the CPC cannot publish anything useful there (udcm on RoCE without a GID).
pub fn publication(cpc: CpcId, port: &Port, ip: Option<IpAddr>) -> Option<(Vec<u8>, u8)> {
    let ip_bytes = match ip {
        Some(IpAddr::V4(a)) => a.octets().to_vec(),
        Some(IpAddr::V6(a)) => a.octets().to_vec(),
        None => Vec::new(),
    };
    Some(match cpc {
        CpcId::Udcm if port.link_layer() == LinkLayer::Ethernet => {
            let g = port
                .raw
                .gids
                .iter()
                .find(|g| g.gid.ipv4_mapped().is_some())
                .or(port.raw.gids.first())?;
            (g.gid.0.to_vec(), QPN_LEN)
        }
        CpcId::Udcm => (Vec::new(), QPN_LEN),
        CpcId::Oob | CpcId::Xoob | CpcId::Rdmacm => (ip_bytes, PORT_LEN),
        CpcId::Ibcm => (Vec::new(), 0),
    })
}

/// A little-endian value cut to `width` bytes (a per-process part).
pub fn pack_value(v: u64, width: u8) -> Vec<u8> {
    v.to_le_bytes()[..width.min(8) as usize].to_vec()
}

/// The value of a per-process part.
pub fn unpack_value(b: &[u8]) -> u64 {
    b.iter()
        .take(8)
        .rev()
        .fold(0u64, |a, &x| (a << 8) | x as u64)
}

/// An IP address from a node part (4 or 16 bytes).
pub fn ip_of(node_part: &[u8]) -> Option<IpAddr> {
    match node_part.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(node_part).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(node_part).ok()?)),
        _ => None,
    }
}

/// Where a peer's CPC service listens, rebuilt from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAddress {
    Udcm(UdAddress),
    Oob(SocketAddr),
    Rdmacm(SocketAddr),
}

/// Rebuilds the address of `cpc`'s service from the peer port's `lid`, the record's node part
/// and the peer's per-process part; `Err` says what is missing.
pub fn peer_address(
    cpc: CpcId,
    lid: u16,
    node_part: &[u8],
    proc_part: &[u8],
) -> Result<PeerAddress, String> {
    match cpc {
        CpcId::Udcm => {
            let gid = match node_part.len() {
                0 => [0; 16],
                16 => node_part.try_into().expect("16 bytes"),
                n => {
                    return Err(format!(
                        "udcm node part of {n} bytes (expected 0 or a 16-byte GID)"
                    ))
                }
            };
            Ok(PeerAddress::Udcm(UdAddress {
                qpn: unpack_value(proc_part) as u32,
                lid,
                gid,
            }))
        }
        CpcId::Oob => {
            let ip = if node_part.is_empty() {
                IpAddr::from([127, 0, 0, 1])
            } else {
                ip_of(node_part).ok_or("oob node part is not an IP address")?
            };
            Ok(PeerAddress::Oob(SocketAddr::new(
                ip,
                unpack_value(proc_part) as u16,
            )))
        }
        CpcId::Rdmacm => {
            let ip = ip_of(node_part).ok_or("the rdmacm record has no IP address")?;
            Ok(PeerAddress::Rdmacm(SocketAddr::new(
                ip,
                unpack_value(proc_part) as u16,
            )))
        }
        CpcId::Xoob | CpcId::Ibcm => Err(format!("{cpc} has no connection path in this build")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_the_parts() {
        let qpn = 0x00ab_cdef;
        let part = pack_value(qpn, QPN_LEN);
        assert_eq!(part, [0xef, 0xcd, 0xab]);
        assert_eq!(
            peer_address(CpcId::Udcm, 7, &[], &part).unwrap(),
            PeerAddress::Udcm(UdAddress {
                qpn: qpn as u32,
                lid: 7,
                gid: [0; 16]
            })
        );
        let ip = [10, 77, 0, 1];
        assert_eq!(
            peer_address(CpcId::Rdmacm, 0, &ip, &pack_value(4791, PORT_LEN)).unwrap(),
            PeerAddress::Rdmacm("10.77.0.1:4791".parse().unwrap())
        );
        assert_eq!(
            peer_address(CpcId::Oob, 0, &[], &pack_value(9, 2)).unwrap(),
            PeerAddress::Oob("127.0.0.1:9".parse().unwrap())
        );
        assert!(peer_address(CpcId::Rdmacm, 0, &[], &[0, 0]).is_err());
        assert!(peer_address(CpcId::Udcm, 0, &[1, 2, 3], &[0, 0, 0]).is_err());
        assert!(peer_address(CpcId::Ibcm, 0, &[], &[])
            .unwrap_err()
            .contains("no connection path"));
    }
}
