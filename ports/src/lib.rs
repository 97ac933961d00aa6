//! Port discovery: every port of every RDMA device, with the fields openib derives from it.
//!
//! Data flows one way: [`hw::read_topology`] (or a fixture) gives a raw [`Topology`];
//! [`derive::derive`] turns it into [`Port`]s with subnet ids, APM LIDs, usability and the
//! reason a port is not used. Nothing here touches the network or connects anything.
#![forbid(unsafe_code)]

pub mod derive;
pub mod filter;
pub mod hw;
pub mod model;
pub mod topology;

pub use derive::{derive, roce_subnet_id, DeriveConfig, Discovery, Port, SubnetSource};
pub use filter::{Filter, FilterEntry, FilterError};
pub use model::{Gid, GidType, LinkLayer, Mtu, PhysState, PortState};
pub use topology::{FixtureError, IpNet, NetDev, RawDevice, RawGid, RawPort, Topology};
