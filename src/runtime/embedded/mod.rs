//! The embedded runtime: the server `openib run` starts, and the client its processes use.
//!
//! The server listens on a UNIX socket in a fresh directory of mode 0700 (the socket itself is
//! 0600), checks each connecting process's credentials (`SO_PEERCRED`: same user) and the job's
//! secret token, and then only stores committed values, answers gets and routes fence
//! messages between ranks. The fence itself runs in the clients: by default the fault-tolerant
//! [`super::resilient`] fence ([`FenceKind::Resilient`]), or the star of [`super::fence`]
//! ([`FenceKind::Star`]); the server does not know which.
//!
//! The files: `server.rs` (the server, [`Server`]), `client.rs` (a process's side, [`Client`],
//! and the fences it runs), `fence_payload.rs` (what the server routes between clients,
//! [`FencePayload`]); here, the environment the server gives its processes and the placement
//! of ranks on emulated nodes.

mod client;
mod fence_payload;
mod server;
#[cfg(test)]
mod tests;

pub use client::{Client, FenceKind, VERDICT_GRACE};
pub use fence_payload::FencePayload;
pub use server::{JobSpec, Server};

use super::RuntimeError;
use std::collections::BTreeMap;

/// The socket path of the job.
pub const SOCKET_ENV: &str = "OPENIB_RT_SOCKET";
/// This process's rank.
pub const RANK_ENV: &str = "OPENIB_RT_RANK";
/// The job's secret (hex), proving a connection comes from a process `openib run` started.
pub const TOKEN_ENV: &str = "OPENIB_RT_TOKEN";

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

/// Block distribution of `size` ranks over `nodes` emulated nodes: node i holds a contiguous
/// range, the first `size % nodes` nodes one rank more. Node names: the host name when there
/// is one node, else `HOST-nodeI`.
pub fn node_names(size: u32, nodes: u32, host: &str) -> Vec<String> {
    let nodes = nodes.clamp(1, size.max(1));
    let (base, extra) = (size / nodes, size % nodes);
    let mut out = Vec::with_capacity(size as usize);
    for n in 0..nodes {
        let count = base + u32::from(n < extra);
        let name = if nodes == 1 {
            host.to_string()
        } else {
            format!("{host}-node{n}")
        };
        out.extend(std::iter::repeat_n(name, count as usize));
    }
    out
}

/// Group ranks by node (for reports).
pub fn ranks_by_node(nodes: &[String]) -> BTreeMap<String, Vec<u32>> {
    let mut m: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, n) in nodes.iter().enumerate() {
        m.entry(n.clone()).or_default().push(r as u32);
    }
    m
}
