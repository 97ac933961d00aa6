//! The packed modex (issue 3): what each process publishes at start-up so that every peer can
//! reach it, published once per node instead of once per process.
//!
//! - The **node blob** ([`NodeBlob`], key [`KEY_NODE`]), published by the node leader (the lowest
//!   local rank): devices, every ACTIVE port (before per-process include/exclude) with its
//!   subnet id, LID, APM LID, MTU, link layer and CPC records.
//! - The **proc blob** ([`ProcBlob`], key [`KEY_PROC`]), published by every process: a bitmap of
//!   the node-blob ports it uses (omitted when it uses all of them) and the per-process part of
//!   each CPC's data. It is read against its node's node blob.
//! - Or, instead of the proc blobs, the node leader gathers its local processes' parts and
//!   publishes them in the node blob ([`LocalProcs`], flag G), column by column with
//!   delta-coded values: the default, and what a node with one process always does.
//!
//! The codec is sans-IO: bytes in, values out. Decoders take untrusted input through a bounded
//! [`reader::Reader`], never panic, never allocate more than a bound derived from the input
//! length and return a typed [`DecodeError`] naming field and byte offset. `docs/MODEX.md` is
//! the byte-level specification; `docs/PERFORMANCE.md` ("Modex") the measurements behind it.

pub mod compress;
pub mod error;
pub mod frame;
pub mod layout;
pub mod node;
/// The decoders' contracts on arbitrary input (property tests, fuzz targets, corpus replay).
#[cfg(any(test, feature = "wire-oracle"))]
pub mod oracle;
pub mod procs;
pub mod reader;

pub mod advert;
pub mod build;
pub mod exchange;
pub mod size;
pub mod synth;

// Test support (docs/DESIGN.md, "Fault injection and test support"): never in a default build.
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod vectors;

pub use compress::Compression;
pub use error::{DecodeError, EncodeError};
pub use frame::{FrameInfo, Kind};
pub use node::{CpcRecord, Device, Extension, NodeBlob, NodePort, WireLinkLayer};
pub use procs::{LocalProcs, PortSet, ProcBlob};

/// The key the node leader publishes its node blob under. Short and fixed: every key byte is
/// paid for every publication in the job.
pub const KEY_NODE: &str = "oibN";
/// The key each process publishes its proc blob under (not used when the node blob carries the
/// gathered section).
pub const KEY_PROC: &str = "oibP";
/// The key each process publishes its whole modex under when the transport opens on a host's
/// runtime (a node blob of that process alone, its parts gathered: no node leader, since
/// gathering needs a fence between puts).
pub const KEY_HOST: &str = "oibH";
