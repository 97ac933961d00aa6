//! The raw topology: what the hardware (or a fixture file) says, before any derivation.
//!
//! A [`Topology`] is filled either by [`crate::hw::read_topology`] from libibverbs and the
//! kernel's network interfaces, or by [`Topology::from_fixture_json`] from a fixture file. Both
//! then go through the same [`crate::derive`] code, so a fixture exercises exactly the path real
//! hardware takes. The JSON form is the fixture format documented in `docs/FIXTURES.md`.

use crate::model::{Gid, GidType, LinkLayer, PhysState, PortState};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Devices with their ports, and the network interfaces RoCE ports sit on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    #[serde(default)]
    pub devices: Vec<RawDevice>,
    /// Network interfaces (by name) with their addresses; RoCE subnet ids derive from these.
    #[serde(default)]
    pub netdevs: Vec<NetDev>,
}

/// One RDMA device (`ibv_query_device`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDevice {
    pub name: String,
    /// Node GUID as printed by `ibv_devinfo` (`0002:c903:0001:0001`) or as `0x...` hex.
    #[serde(with = "guid_text")]
    pub node_guid: u64,
    #[serde(default)]
    pub vendor_id: u32,
    #[serde(default)]
    pub vendor_part_id: u32,
    #[serde(default)]
    pub hw_ver: u32,
    #[serde(default)]
    pub fw_ver: String,
    /// `IBV_TRANSPORT_*`: 0 = InfiniBand (also RoCE), 1 = iWARP, 2 = usNIC, ...
    #[serde(default)]
    pub transport: u32,
    /// `IBV_DEVICE_XRC` is set in the device capability flags.
    #[serde(default)]
    pub xrc: bool,
    #[serde(default)]
    pub max_qp: u32,
    #[serde(default)]
    pub max_qp_wr: u32,
    #[serde(default)]
    pub max_srq: u32,
    #[serde(default)]
    pub max_mr_size: u64,
    /// Atomic capability (`enum ibv_atomic_cap`: 0 none, 1 HCA, 2 global).
    #[serde(default)]
    pub atomic_cap: u32,
    pub ports: Vec<RawPort>,
}

/// One port of a device (`ibv_query_port` plus its GID table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPort {
    pub port: u8,
    pub state: PortState,
    #[serde(default = "default_phys_state")]
    pub phys_state: PhysState,
    pub link_layer: LinkLayer,
    #[serde(default)]
    pub lid: u16,
    #[serde(default)]
    pub lmc: u8,
    #[serde(default)]
    pub sm_lid: u16,
    /// Active MTU as the verbs enum (1 = 256 ... 5 = 4096).
    pub active_mtu: u8,
    /// Maximum MTU as the verbs enum; defaults to the active one.
    #[serde(default)]
    pub max_mtu: Option<u8>,
    /// `active_width` as the verbs bit value (1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x).
    #[serde(default)]
    pub active_width: u8,
    /// `active_speed` as the verbs value (1 = SDR 2.5 Gb/s ... 64 = HDR 50 Gb/s, 128 = NDR).
    #[serde(default)]
    pub active_speed: u16,
    #[serde(default)]
    pub port_cap_flags: u32,
    #[serde(default)]
    pub gids: Vec<RawGid>,
    /// The network interface the port is bound to (RoCE; IPoIB for IB), if any.
    #[serde(default)]
    pub netdev: Option<String>,
}

fn default_phys_state() -> PhysState {
    PhysState::LINK_UP
}

/// One valid entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGid {
    pub index: u32,
    pub gid: Gid,
    #[serde(rename = "type")]
    pub gid_type: GidType,
    /// The network interface this GID belongs to (RoCE), if the kernel names one.
    #[serde(default)]
    pub netdev: Option<String>,
}

/// A network interface and its addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetDev {
    pub name: String,
    #[serde(default = "yes")]
    pub up: bool,
    /// Addresses with prefix length, `"192.168.10.5/24"` or `"fd00::5/64"`.
    #[serde(default)]
    pub addrs: Vec<IpNet>,
}

fn yes() -> bool {
    true
}

/// An interface address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl IpNet {
    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                let mask = if self.prefix_len == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix_len.min(32))
                };
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let mask = if self.prefix_len == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix_len.min(128))
                };
                IpAddr::V6((bits & mask).into())
            }
        }
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("address {s:?} lacks a /prefix length"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("bad IP address {a:?} in {s:?}"))?;
        let prefix_len: u8 = p
            .parse()
            .map_err(|_| format!("bad prefix length {p:?} in {s:?}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix_len > max {
            return Err(format!("prefix length {prefix_len} exceeds {max} in {s:?}"));
        }
        Ok(IpNet { addr, prefix_len })
    }
}

impl Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A fixture file could not be read or does not describe a valid topology.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot read fixture {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("fixture {path} is not a valid topology: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("fixture {path}: {what}")]
    Invalid { path: String, what: String },
}

impl Topology {
    /// Parses and checks a fixture; `path` only names the source in errors.
    pub fn from_fixture_json(text: &str, path: &str) -> Result<Topology, FixtureError> {
        let topo: Topology = serde_json::from_str(text).map_err(|source| FixtureError::Json {
            path: path.into(),
            source,
        })?;
        topo.check().map_err(|what| FixtureError::Invalid {
            path: path.into(),
            what,
        })?;
        Ok(topo)
    }

    /// Reads a fixture file.
    pub fn from_fixture_file(path: &std::path::Path) -> Result<Topology, FixtureError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::from_fixture_json(&text, &shown)
    }

    /// Structural checks a fixture must pass (hardware always passes them).
    fn check(&self) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        for d in &self.devices {
            if d.name.is_empty() || d.name.contains(':') || d.name.contains(',') {
                return Err(format!(
                    "device name {:?} must be non-empty without ':' or ','",
                    d.name
                ));
            }
            if !names.insert(d.name.as_str()) {
                return Err(format!("device {:?} appears twice", d.name));
            }
            let mut ports = std::collections::HashSet::new();
            for p in &d.ports {
                if p.port == 0 {
                    return Err(format!("{}: port numbers start at 1", d.name));
                }
                if !ports.insert(p.port) {
                    return Err(format!("{}: port {} appears twice", d.name, p.port));
                }
                for (what, v) in [("active_mtu", Some(p.active_mtu)), ("max_mtu", p.max_mtu)] {
                    if let Some(v) = v {
                        if crate::model::Mtu::from_enum(v).is_none() {
                            return Err(format!(
                                "{}:{}: {what} {v} is not an MTU enum (1 = 256 ... 5 = 4096)",
                                d.name, p.port
                            ));
                        }
                    }
                }
                if p.lmc > 7 {
                    return Err(format!("{}:{}: lmc {} exceeds 7", d.name, p.port, p.lmc));
                }
            }
        }
        Ok(())
    }
}

mod guid_text {
    use serde::{Deserialize, Deserializer, Serializer};

    /// `ibv_devinfo` form: four groups of four hex digits.
    pub fn format(v: u64) -> String {
        let b = v.to_be_bytes();
        format!(
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    }

    pub fn parse(s: &str) -> Result<u64, String> {
        let t = s.trim();
        let hex: String = match t.strip_prefix("0x") {
            Some(h) => h.to_string(),
            None => t.chars().filter(|c| *c != ':').collect(),
        };
        if hex.is_empty() || hex.len() > 16 {
            return Err(format!("bad GUID {s:?}"));
        }
        u64::from_str_radix(&hex, 16).map_err(|_| format!("bad GUID {s:?}"))
    }

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

pub use guid_text::format as format_guid;
