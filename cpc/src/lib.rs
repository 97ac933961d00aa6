//! Connection pseudo-components (CPCs): the ways to bring up an RC queue pair between two ports.
//!
//! This crate starts with the identity of each CPC: its stable index (part of the modex wire
//! format: never renumber, never re-purpose), its name and its default priority. The query,
//! blob packing, selection and connection state machines build on it (see docs/DESIGN.md).
#![forbid(unsafe_code)]

use serde::Serialize;

pub mod config;
pub mod handshake;
pub mod manager;
pub mod oob;
pub mod pack;
pub mod pairing;
pub mod query;
pub mod rc;
pub mod rdmacm;
pub mod select;
pub mod udcm;

pub use config::{adverts, evaluate, CpcConfig, CpcConfigError};
pub use handshake::{Handshake, Hello, HsError, HsIn, HsOut, QpAddress, Retry};
pub use manager::{ConnectError, Connection, Connector, HelloTransport};
pub use oob::OobService;
pub use pairing::{pair_ports, PortPair, PortView};
pub use query::{query, HostFacts, Unusable};
pub use rc::LocalPort;
pub use rdmacm::RdmacmService;
pub use select::{initiator, ranked, select, Advert, Side, Winner};
pub use udcm::{UdAddress, UdcmService};

/// A CPC's identity. The discriminant is the index carried in CPC records on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum CpcId {
    /// Queue pair numbers, PSNs and addresses exchanged out of band.
    Oob = 1,
    /// The XRC variant of oob.
    Xoob = 2,
    /// The InfiniBand connection manager (needs the kernel's ib_ucm, gone since Linux 5.3).
    Ibcm = 3,
    /// librdmacm (RoCE, IB with IPoIB).
    Rdmacm = 4,
    /// A handshake over unreliable-datagram queue pairs.
    Udcm = 5,
}

impl CpcId {
    /// Every CPC, in index order.
    pub const ALL: [CpcId; 5] = [
        CpcId::Oob,
        CpcId::Xoob,
        CpcId::Ibcm,
        CpcId::Rdmacm,
        CpcId::Udcm,
    ];

    /// The wire index.
    pub fn index(self) -> u8 {
        self as u8
    }

    /// The CPC with wire index `index`, if this build knows it.
    pub fn from_index(index: u8) -> Option<CpcId> {
        Self::ALL.into_iter().find(|c| c.index() == index)
    }

    pub fn name(self) -> &'static str {
        match self {
            CpcId::Oob => "oob",
            CpcId::Xoob => "xoob",
            CpcId::Ibcm => "ibcm",
            CpcId::Rdmacm => "rdmacm",
            CpcId::Udcm => "udcm",
        }
    }

    pub fn from_name(name: &str) -> Option<CpcId> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Default priority (higher wins); the values Open MPI 4.1 uses, so mixed settings behave
    /// as users of it expect.
    pub fn default_priority(self) -> u8 {
        match self {
            CpcId::Oob => 50,
            CpcId::Xoob => 60,
            CpcId::Ibcm => 40,
            CpcId::Rdmacm => 30,
            CpcId::Udcm => 63,
        }
    }
}

impl std::fmt::Display for CpcId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_stable_and_unique() {
        let idx: Vec<u8> = CpcId::ALL.iter().map(|c| c.index()).collect();
        assert_eq!(
            idx,
            vec![1, 2, 3, 4, 5],
            "CPC wire indices are part of the modex format"
        );
        for c in CpcId::ALL {
            assert_eq!(CpcId::from_index(c.index()), Some(c));
            assert_eq!(CpcId::from_name(c.name()), Some(c));
        }
        assert_eq!(CpcId::from_index(0), None);
        assert_eq!(CpcId::from_name("UDCM"), Some(CpcId::Udcm));
    }
}
