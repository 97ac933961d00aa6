//! `openib ping [--cpc NAME] [--json]`: every rank connects to every other rank and exchanges
//! one message each way; rank 0 prints each pair's CPC and connect time.

use super::exit;
use crate::modex::exchange::ExchangeMode;
use crate::ping::{run as ping, PingConfig};
use openib_cpc::CpcId;
use serde_json::json;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct PingArgs {
    /// Use this CPC for every pair instead of the winner (it must be usable on both sides).
    #[arg(long)]
    pub cpc: Option<String>,
    /// Use only these devices or ports (DEVICE or DEVICE:PORT, comma-separated).
    #[arg(long, env = "OPENIB_IF_INCLUDE")]
    pub include: Option<String>,
    /// Use every port but these.
    #[arg(long, env = "OPENIB_IF_EXCLUDE")]
    pub exclude: Option<String>,
    /// GID index for InfiniBand subnet ids [setting: OPENIB_GID_INDEX, default 0].
    #[arg(long)]
    pub gid_index: Option<u32>,
    /// Seconds the exchange, the connections and the messages may each take.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Print JSON: {"size", "pairs": [{"from", "to", "cpc", "connect_us", "ok", "error"}],
    /// "failed": [ranks], "reporter"}.
    #[arg(long)]
    pub json: bool,
    /// Keep going when ranks die (fail-stop): under `openib run`, whose fence agrees on the
    /// failed ranks, the survivors report the agreed set, and a pair with a failed rank does
    /// not fail the run; exit 0 when every pair of survivors connected and exchanged.
    #[arg(long)]
    pub survive: bool,
}

pub fn run(a: &PingArgs) -> i32 {
    let cpc = match a.cpc.as_deref().map(|n| CpcId::from_name(n).ok_or(n)) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(n)) => {
            eprintln!("openib ping: unknown CPC {n:?} (known: oob, xoob, ibcm, rdmacm, udcm)");
            return exit::USAGE;
        }
    };
    let filter = match openib_ports::Filter::from_lists(a.include.as_deref(), a.exclude.as_deref())
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("openib ping: {e}");
            return exit::USAGE;
        }
    };
    let gid_index = match a
        .gid_index
        .map_or_else(|| crate::config::u32("OPENIB_GID_INDEX"), Ok)
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("openib ping: {e}");
            return exit::USAGE;
        }
    };
    let rt = match crate::runtime::connect() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("openib ping: cannot join the job: {e}");
            return exit::ERROR;
        }
    };
    let rank = rt.info().rank;
    let cfg = PingConfig {
        derive: openib_ports::DeriveConfig {
            gid_index,
            apm_over_ports: false,
            filter,
        },
        cpc,
        timeout: Duration::from_secs_f64(a.timeout.max(0.1)),
        mode: ExchangeMode::default(),
    };
    match ping(rt.as_ref(), &cfg) {
        Ok(report) => {
            let results = &report.pairs;
            let counts = |r: &&crate::ping::PairResult| {
                !(a.survive && (report.failed.contains(&r.from) || report.failed.contains(&r.to)))
            };
            let all_ok = results.iter().filter(counts).all(|r| r.ok);
            if report.reporter {
                if a.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json!({"size": rt.info().size,
                            "pairs": results, "failed": report.failed, "reporter": rank}))
                        .expect("serialises")
                    );
                } else {
                    println!(
                        "openib ping: {} rank(s), {} pair(s)",
                        rt.info().size,
                        results.len()
                    );
                    if !report.failed.is_empty() {
                        println!("  failed ranks (agreed): {:?}", report.failed);
                    }
                    for r in results {
                        println!(
                            "  {:>3} -> {:<3} {:<7} {}",
                            r.from,
                            r.to,
                            r.cpc.as_deref().unwrap_or("-"),
                            match (r.ok, r.connect_us) {
                                (true, Some(us)) =>
                                    format!("connected in {:.0} us, message each way ok", us),
                                _ => format!("FAILED: {}", r.error.as_deref().unwrap_or("?")),
                            }
                        );
                    }
                }
            }
            if all_ok {
                exit::OK
            } else {
                exit::ERROR
            }
        }
        Err(e) => {
            eprintln!("openib ping: rank {rank}: {e}");
            exit::ERROR
        }
    }
}
