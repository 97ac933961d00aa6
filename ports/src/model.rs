//! Vocabulary shared by every layer above `sys/`: port state, link layer, MTU enum, GIDs.
//!
//! Every enum keeps the numeric value the verbs ABI gives it, so a value read from hardware, a
//! fixture or a peer's modex means the same thing everywhere. Unknown numbers are kept, never
//! mapped to a neighbour.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Other(u32),
}

impl PortState {
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Nop,
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            n => Self::Other(n),
        }
    }
    pub fn raw(self) -> u32 {
        match self {
            Self::Nop => 0,
            Self::Down => 1,
            Self::Init => 2,
            Self::Armed => 3,
            Self::Active => 4,
            Self::ActiveDefer => 5,
            Self::Other(n) => n,
        }
    }
    /// The name `ibv_devinfo` prints without its `PORT_` prefix.
    pub fn name(self) -> String {
        match self {
            Self::Nop => "NOP".into(),
            Self::Down => "DOWN".into(),
            Self::Init => "INIT".into(),
            Self::Armed => "ARMED".into(),
            Self::Active => "ACTIVE".into(),
            Self::ActiveDefer => "ACTIVE_DEFER".into(),
            Self::Other(n) => format!("UNKNOWN({n})"),
        }
    }
}

impl FromStr for PortState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_uppercase();
        let s = s.strip_prefix("PORT_").unwrap_or(&s);
        Ok(match s {
            "NOP" => Self::Nop,
            "DOWN" => Self::Down,
            "INIT" => Self::Init,
            "ARMED" => Self::Armed,
            "ACTIVE" => Self::Active,
            "ACTIVE_DEFER" => Self::ActiveDefer,
            other => return Err(format!("unknown port state {other:?} (expected DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER or NOP)")),
        })
    }
}

/// Physical port state (IBTA `PortPhysicalState`, as `ibv_port_attr.phys_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysState(pub u8);

impl PhysState {
    pub const SLEEP: Self = Self(1);
    pub const POLLING: Self = Self(2);
    pub const DISABLED: Self = Self(3);
    pub const LINK_UP: Self = Self(5);
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "SLEEP",
            2 => "POLLING",
            3 => "DISABLED",
            4 => "PORT_CONFIGURATION_TRAINING",
            5 => "LINK_UP",
            6 => "LINK_ERROR_RECOVERY",
            7 => "PHY_TEST",
            _ => "UNKNOWN",
        }
    }
}

impl FromStr for PhysState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let up = s.trim().to_ascii_uppercase();
        for v in 0..=7u8 {
            if PhysState(v).name() == up {
                return Ok(PhysState(v));
            }
        }
        up.parse::<u8>()
            .map(PhysState)
            .map_err(|_| format!("unknown physical state {s:?}"))
    }
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Reported as "unspecified" by old drivers; treated as InfiniBand, as libibverbs does.
    Unspecified,
    InfiniBand,
    Ethernet,
    Other(u8),
}

impl LinkLayer {
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => Self::Unspecified,
            1 => Self::InfiniBand,
            2 => Self::Ethernet,
            n => Self::Other(n),
        }
    }
    pub fn raw(self) -> u8 {
        match self {
            Self::Unspecified => 0,
            Self::InfiniBand => 1,
            Self::Ethernet => 2,
            Self::Other(n) => n,
        }
    }
    /// Whether the port addresses peers by LID (InfiniBand) rather than by GID/IP (RoCE).
    pub fn is_infiniband(self) -> bool {
        matches!(self, Self::InfiniBand | Self::Unspecified)
    }
    pub fn name(self) -> String {
        match self {
            Self::Unspecified | Self::InfiniBand => "InfiniBand".into(),
            Self::Ethernet => "Ethernet".into(),
            Self::Other(n) => format!("Unknown({n})"),
        }
    }
}

impl FromStr for LinkLayer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "infiniband" | "ib" => Ok(Self::InfiniBand),
            "ethernet" | "eth" | "roce" => Ok(Self::Ethernet),
            "unspecified" => Ok(Self::Unspecified),
            other => Err(format!(
                "unknown link layer {other:?} (expected InfiniBand or Ethernet)"
            )),
        }
    }
}

/// Path MTU as the verbs enum (`enum ibv_mtu`): 1 = 256 ... 5 = 4096.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mtu(u8);

impl Mtu {
    pub const MTU_256: Mtu = Mtu(1);
    pub const MTU_1024: Mtu = Mtu(3);
    pub const MTU_4096: Mtu = Mtu(5);

    /// The enum value, if it is one of the five defined ones.
    pub fn from_enum(v: u8) -> Option<Mtu> {
        (1..=5).contains(&v).then_some(Mtu(v))
    }
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu(1)),
            512 => Some(Mtu(2)),
            1024 => Some(Mtu(3)),
            2048 => Some(Mtu(4)),
            4096 => Some(Mtu(5)),
            _ => None,
        }
    }
    pub fn as_enum(self) -> u8 {
        self.0
    }
    pub fn bytes(self) -> u32 {
        128u32 << self.0
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// A 128-bit GID in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IBTA default subnet prefix, fe80:0000:0000:0000.
    pub const DEFAULT_SUBNET_PREFIX: u64 = 0xfe80_0000_0000_0000;

    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCE v2 uses.
    pub fn ipv4_mapped(&self) -> Option<std::net::Ipv4Addr> {
        (self.0[..10] == [0; 10] && self.0[10..12] == [0xff, 0xff])
            .then(|| std::net::Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }
}

impl fmt::Display for Gid {
    /// Eight groups of four hex digits, as `ibv_devinfo` prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl FromStr for Gid {
    type Err = String;
    /// Accepts the `ibv_devinfo` form and any IPv6 text form (`fe80::1`, `::ffff:10.0.0.1`).
    fn from_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse::<std::net::Ipv6Addr>()
            .map(|a| Gid(a.octets()))
            .map_err(|_| {
                format!("bad GID {s:?} (expected e.g. fe80:0000:0000:0000:0002:c903:0001:0001)")
            })
    }
}

/// Type of a GID table entry (`enum ibv_gid_type` of `ibv_query_gid_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
}

impl GidType {
    pub fn from_raw(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Ib),
            1 => Some(Self::RoceV1),
            2 => Some(Self::RoceV2),
            _ => None,
        }
    }
    /// The name `ibv_devinfo -v` prints: "IB", "RoCE v1", "RoCE v2".
    pub fn name(self) -> &'static str {
        match self {
            Self::Ib => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
        }
    }
}

impl FromStr for GidType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let norm: String = s
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '_')
            .collect::<String>()
            .to_ascii_lowercase();
        match norm.as_str() {
            "ib" => Ok(Self::Ib),
            "rocev1" | "roce" => Ok(Self::RoceV1),
            "rocev2" => Ok(Self::RoceV2),
            _ => Err(format!(
                "unknown GID type {s:?} (expected \"IB\", \"RoCE v1\" or \"RoCE v2\")"
            )),
        }
    }
}

macro_rules! serde_via_str {
    ($t:ty, $to:expr) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let f: fn(&$t) -> String = $to;
                s.serialize_str(&f(self))
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_via_str!(PortState, |v| v.name());
serde_via_str!(PhysState, |v| v.name().to_string());
serde_via_str!(LinkLayer, |v| v.name());
serde_via_str!(Gid, |v| v.to_string());
serde_via_str!(GidType, |v| v.name().to_string());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_enum_and_bytes_agree() {
        for (e, b) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let m = Mtu::from_enum(e).unwrap();
            assert_eq!(m.bytes(), b);
            assert_eq!(Mtu::from_bytes(b), Some(m));
        }
        assert_eq!(Mtu::from_enum(0), None);
        assert_eq!(Mtu::from_enum(6), None);
        assert_eq!(Mtu::from_bytes(9000), None);
    }

    #[test]
    fn gid_text_round_trips_in_devinfo_form() {
        let text = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
        let g: Gid = text.parse().unwrap();
        assert_eq!(g.to_string(), text);
        assert_eq!(g.subnet_prefix(), Gid::DEFAULT_SUBNET_PREFIX);
        let v4: Gid = "::ffff:10.77.0.1".parse().unwrap();
        assert_eq!(v4.to_string(), "0000:0000:0000:0000:0000:ffff:0a4d:0001");
        assert_eq!(
            v4.ipv4_mapped(),
            Some(std::net::Ipv4Addr::new(10, 77, 0, 1))
        );
        assert!("zz".parse::<Gid>().is_err());
    }

    #[test]
    fn names_parse_back() {
        for t in [GidType::Ib, GidType::RoceV1, GidType::RoceV2] {
            assert_eq!(t.name().parse::<GidType>().unwrap(), t);
        }
        for s in 0..=5 {
            let st = PortState::from_raw(s);
            assert_eq!(st.name().parse::<PortState>().unwrap(), st);
        }
        assert_eq!(
            "PORT_ACTIVE".parse::<PortState>().unwrap(),
            PortState::Active
        );
        assert_eq!("LINK_UP".parse::<PhysState>().unwrap(), PhysState::LINK_UP);
    }
}
