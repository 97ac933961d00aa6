//! openib: an RDMA (InfiniBand / RoCE) byte transfer layer with a packed CPC modex.
//!
//! Layers, lowest first (no layer reaches up): `openib-sys` (the only unsafe code: verbs FFI),
//! `openib-ports` (port discovery), `openib-cpc` (connection pseudo-components), then this
//! crate: the modex, runtimes, the transport and the `openib` command line.
#![forbid(unsafe_code)]

pub use openib_cpc as cpc;
pub use openib_ports as ports;

pub mod cli;
pub mod config;
pub mod fault;
pub mod modex;
pub mod ping;
pub mod runtime;
pub mod selftest;
pub mod settings;
pub mod sim;
pub mod transport;
#[cfg(feature = "wire-oracle")]
pub mod wire_oracle;
