//! `openib modex exchange`: the node-leader exchange under the job's runtime; the lowest
//! surviving rank (rank 0 without failures) prints what it rebuilt of every peer and the
//! agreed failed ranks (JSON shape in docs/CLI.md).

use super::exit;
use super::ports::PortSource;
use crate::modex::build::{build_node, port_name, proc_ports};
use crate::modex::exchange::{exchange, ExchangeMode, PeerTable};
use crate::modex::procs::ProcBlob;
use crate::runtime::{Group, ProcSet};
use openib_ports::{derive, Filter};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ExchangeArgs {
    #[command(flatten)]
    pub source: PortSource,
    /// gathered, per-process or on-demand [setting: OPENIB_MODEX_MODE, default gathered].
    #[arg(long)]
    pub mode: Option<String>,
    /// Seconds a fence or get may take.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The per-process CPC parts `modex exchange` publishes: each part's bytes are the rank + 1,
/// little-endian, cut to the part's width, so every receiver can check every peer's parts (the
/// transport publishes its real QP numbers and listening ports instead).
pub fn synthetic_parts(
    rank: u32,
    node: &crate::modex::NodeBlob,
    ports: crate::modex::PortSet,
) -> ProcBlob {
    let v = (rank as u64 + 1).to_le_bytes();
    let parts = ProcBlob::slots(node, ports)
        .map(|(i, j)| v[..node.ports[i].cpcs[j].proc_len as usize].to_vec())
        .collect();
    ProcBlob { ports, parts }
}

pub fn run(a: &ExchangeArgs) -> i32 {
    let mode = match &a.mode {
        Some(m) => m.parse::<ExchangeMode>(),
        None => crate::config::choice("OPENIB_MODEX_MODE")
            .map_err(|e| e.to_string())
            .and_then(|m| m.unwrap_or("gathered").parse()),
    };
    let mode = match mode {
        Ok(m) => m,
        Err(e) => {
            eprintln!("openib modex exchange: {e}");
            return exit::USAGE;
        }
    };
    let rt = match crate::runtime::connect() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("openib modex exchange: cannot join the job: {e}");
            return exit::ERROR;
        }
    };
    let info = rt.info().clone();
    let fail = |what: String| {
        // One write per line: several ranks share the launcher's stderr.
        crate::fault::say(&format!(
            "openib modex exchange: rank {}: {what}",
            info.rank
        ));
        exit::ERROR
    };
    let loaded = match a.source.load() {
        Ok(l) => l,
        Err(e) => return fail(e.to_string()),
    };
    let mut all = match a.source.derive_config() {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    all.filter = Filter::All;
    let unfiltered = derive(&loaded.topology, &all);
    let host = loaded.host_facts();
    let cpc_cfg = match openib_cpc::CpcConfig::from_env() {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let node = match build_node(
        &unfiltered,
        &loaded.topology,
        all.gid_index,
        &host,
        &cpc_cfg,
    ) {
        Ok(n) => n,
        Err(e) => return fail(format!("nothing to publish: {e}")),
    };
    let mine_ports = proc_ports(&node, &loaded.discovery);
    if mine_ports.is_empty() {
        return fail(
            "this process uses none of its node's ports (check --include/--exclude)".into(),
        );
    }
    let mine = synthetic_parts(info.rank, &node.blob, mine_ports);
    let t0 = Instant::now();
    let table = match exchange(
        rt.as_ref(),
        &node,
        &mine,
        mode,
        Duration::from_secs_f64(a.timeout.max(0.001)),
    ) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let elapsed = t0.elapsed();
    // Every rank the fences did not agree is dead must be in the table, and no other.
    let listed: Vec<u32> = table.peers.iter().map(|p| p.rank).collect();
    let live = Group::new(info.size, ProcSet::All, &table.failed).survivors();
    if listed != live {
        return fail(format!(
            "rebuilt rank(s) {listed:?}, but the survivors are {live:?} (failed {:?})",
            table.failed
        ));
    }
    // Every peer's parts must be the ones it published.
    for p in &table.peers {
        let want = synthetic_parts(p.rank, &p.node_blob, p.proc_blob.ports);
        if want.parts != p.proc_blob.parts {
            return fail(format!(
                "rank {}'s per-process parts came back wrong: {:?}",
                p.rank, p.proc_blob.parts
            ));
        }
    }
    // What the reporter shows as this rank's put bytes is rebuilt from the blobs; it must equal
    // what this rank really put.
    let Some(me) = table.peers.iter().find(|p| p.rank == info.rank) else {
        return fail(format!(
            "the survivors agreed that this rank failed ({:?})",
            table.failed
        ));
    };
    if me.put_bytes != table.my_put_bytes {
        return fail(format!(
            "put {} bytes but the format accounts for {}",
            table.my_put_bytes, me.put_bytes
        ));
    }
    if !table.failed.is_empty() {
        // Every survivor says what it agreed on (only the reporter prints the table).
        crate::fault::say_agreed("modex exchange", info.rank, &table.failed);
    }
    // The lowest surviving rank reports.
    if table.peers.first().map(|p| p.rank) == Some(info.rank) {
        print(&table, &info, elapsed, a.json);
    }
    exit::OK
}

fn print(t: &PeerTable, info: &crate::runtime::JobInfo, elapsed: Duration, json_mode: bool) {
    let peers: Vec<serde_json::Value> = t
        .peers
        .iter()
        .map(|p| {
            let ports: Vec<String> = p.proc_blob.ports.iter().map(|i| port_name(&p.node_blob, i)).collect();
            let mut cpcs: Vec<String> = Vec::new();
            for i in p.proc_blob.ports.iter() {
                for r in &p.node_blob.ports[i].cpcs {
                    let n = crate::modex::advert::cpc_name(r.cpc);
                    if !cpcs.contains(&n) {
                        cpcs.push(n);
                    }
                }
            }
            json!({"rank": p.rank, "node": p.node, "leader": p.is_leader(), "ports": ports, "cpcs": cpcs, "put_bytes": p.put_bytes})
        })
        .collect();
    if json_mode {
        let doc = json!({
            "size": info.size, "backend": info.backend, "mode": t.mode.name(), "exchange_us": elapsed.as_secs_f64() * 1e6,
            "peers": peers, "failed": t.failed, "reporter": info.rank,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else {
        println!(
            "modex exchange: {} rank(s) under {}, mode {}, {:.1} ms",
            info.size,
            info.backend,
            t.mode.name(),
            elapsed.as_secs_f64() * 1e3
        );
        if !t.failed.is_empty() {
            println!("  failed rank(s) {:?} (agreed by every survivor)", t.failed);
        }
        for p in &peers {
            println!(
                "  rank {:>3} on {}{}: ports {}; CPCs {}; put {} B",
                p["rank"],
                p["node"].as_str().unwrap_or("?"),
                if p["leader"] == true { " (leader)" } else { "" },
                p["ports"]
                    .as_array()
                    .map(|v| v
                        .iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default(),
                p["cpcs"]
                    .as_array()
                    .map(|v| v
                        .iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default(),
                p["put_bytes"]
            );
        }
    }
}
