//! `openib selftest`: RC loopback on one port (send, RDMA write/read, atomics), checked.

use super::exit;
use crate::selftest::{run as run_selftest, SelftestConfig, SelftestError};

#[derive(clap::Args, Debug)]
pub struct SelftestArgs {
    /// Device to test (default: the first with an ACTIVE port).
    #[arg(long, short = 'd')]
    pub device: Option<String>,
    /// Port to test (default: the first ACTIVE one).
    #[arg(long, short = 'p')]
    pub port: Option<u8>,
    /// GID index for the GRH (default: 0 on InfiniBand, the IPv4-mapped RoCE v2 GID on Ethernet).
    #[arg(long)]
    pub gid_index: Option<u32>,
    /// Ping-pong round trips for the latency figure.
    #[arg(long, default_value_t = 100)]
    pub iters: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &SelftestArgs) -> i32 {
    let cfg = SelftestConfig {
        device: a.device.clone(),
        port: a.port,
        gid_index: a.gid_index,
        iterations: a.iters,
        ..Default::default()
    };
    match run_selftest(&cfg) {
        Ok(r) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({"ok": r.ok(), "report": r}))
                        .expect("serialises")
                );
            } else {
                println!(
                    "{} port {} (GID index {}, path MTU {}):",
                    r.device, r.port, r.gid_index, r.path_mtu_bytes
                );
                for s in &r.steps {
                    println!(
                        "  {:<14} {}  {}",
                        s.name,
                        if s.ok { "ok  " } else { "FAIL" },
                        s.detail
                    );
                }
                if let Some(l) = r.latency_us {
                    println!("  8-byte send half round trip: {l:.1} us (loopback, one process)");
                }
            }
            if r.ok() {
                exit::OK
            } else {
                eprintln!(
                    "openib selftest: {} step(s) failed",
                    r.steps.iter().filter(|s| !s.ok).count()
                );
                exit::ERROR
            }
        }
        Err(e) => {
            eprintln!("openib selftest: {e}");
            match e {
                SelftestError::Verbs(openib_sys::Error::LibraryNotFound { .. }) => exit::NO_VERBS,
                _ => exit::ERROR,
            }
        }
    }
}
