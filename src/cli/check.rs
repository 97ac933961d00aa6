//! `openib check A.json B.json`: can two nodes connect, through which port pairs, with which CPC
//! and why; and what to change when nothing matches. Inputs are `openib ports --json` documents.

use super::exit;
use crate::ping::transport_pair;
use openib_cpc::{pair_ports, ranked, select, Advert, CpcId, PortView};
use openib_ports::Mtu;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The first node's `openib ports --json` output.
    pub a: PathBuf,
    /// The second node's `openib ports --json` output.
    pub b: PathBuf,
    /// Pair ports on different subnets too (routed InfiniBand, routed RoCE v2), as the
    /// transport does with OPENIB_ALLOW_CROSS_SUBNET=true.
    #[arg(long)]
    pub allow_cross_subnet: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One port of a node document, as check needs it.
#[derive(Debug, Clone)]
struct NodePort {
    name: String,
    usable: bool,
    reason: Option<String>,
    link_layer: String,
    subnet_id: u64,
    mtu: Mtu,
    adverts: Vec<Advert>,
    refused: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {what} (expected the output of `openib ports --json`)")]
    Shape { path: String, what: String },
}

fn load(path: &PathBuf) -> Result<Vec<NodePort>, CheckError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CheckError::Io {
        path: shown.clone(),
        source,
    })?;
    let doc: Value = serde_json::from_str(&text).map_err(|source| CheckError::Json {
        path: shown.clone(),
        source,
    })?;
    let bad = |what: String| CheckError::Shape {
        path: shown.clone(),
        what,
    };
    let ports = doc
        .get("ports")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"ports\" array".into()))?;
    let mut out = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let field = |k: &str| {
            p.get(k)
                .ok_or_else(|| bad(format!("port {i} has no {k:?}")))
        };
        let name = field("name")?
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("port{i}"));
        let subnet = field("subnet_id")?
            .as_str()
            .ok_or_else(|| bad(format!("{name}: subnet_id is not a string")))?;
        let subnet_id = u64::from_str_radix(subnet.trim_start_matches("0x"), 16)
            .map_err(|_| bad(format!("{name}: bad subnet_id {subnet:?}")))?;
        let mtu_enum = field("mtu")?.as_u64().unwrap_or(0) as u8;
        let mut adverts = Vec::new();
        let mut refused = Vec::new();
        for c in p
            .get("cpcs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let cname = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            let Some(id) = CpcId::from_name(&cname) else {
                continue;
            };
            match (
                c.get("usable").and_then(Value::as_bool),
                c.get("priority").and_then(Value::as_u64),
            ) {
                (Some(true), Some(pr)) => adverts.push(Advert {
                    index: id.index(),
                    priority: pr.min(255) as u8,
                }),
                _ => refused.push((
                    cname,
                    c.get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("not usable")
                        .to_string(),
                )),
            }
        }
        out.push(NodePort {
            usable: field("usable")?.as_bool().unwrap_or(false),
            reason: p.get("reason").and_then(Value::as_str).map(str::to_string),
            link_layer: field("link_layer")?.as_str().unwrap_or("?").to_string(),
            subnet_id,
            mtu: Mtu::from_enum(mtu_enum).unwrap_or(Mtu::MTU_256),
            adverts,
            refused,
            name,
        });
    }
    Ok(out)
}

fn ll_wire(ll: &str) -> u8 {
    if ll.eq_ignore_ascii_case("ethernet") {
        2
    } else {
        1
    }
}

fn advert_list(a: &[Advert]) -> String {
    let mut v: Vec<String> = a
        .iter()
        .map(|x| {
            format!(
                "{} {}",
                CpcId::from_index(x.index).map(|c| c.name()).unwrap_or("?"),
                x.priority
            )
        })
        .collect();
    if v.is_empty() {
        v.push("none".into());
    }
    v.join(", ")
}

pub fn run(a: &CheckArgs) -> i32 {
    let (na, nb) = match (load(&a.a), load(&a.b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("openib check: {e}");
            return exit::ERROR;
        }
    };
    let views = |n: &[NodePort]| -> Vec<PortView> {
        n.iter()
            .enumerate()
            .filter(|(_, p)| p.usable)
            .map(|(index, p)| PortView {
                index,
                subnet_id: p.subnet_id,
                link_layer: ll_wire(&p.link_layer),
                mtu: p.mtu,
            })
            .collect()
    };
    let pairs = pair_ports(&views(&na), &views(&nb), a.allow_cross_subnet);
    let mut rows = Vec::new();
    let mut advice = Vec::new();
    let mut lines = Vec::new();
    let (an, bn) = (a.a.display().to_string(), a.b.display().to_string());
    for (label, file, n) in [("A", &an, &na), ("B", &bn, &nb)] {
        let usable: Vec<String> = n
            .iter()
            .filter(|p| p.usable)
            .map(|p| format!("{} [{}]", p.name, advert_list(&p.adverts)))
            .collect();
        lines.push(format!(
            "{label} ({file}): {} usable port(s): {}",
            usable.len(),
            if usable.is_empty() {
                "none".into()
            } else {
                usable.join("; ")
            }
        ));
        for p in n.iter().filter(|p| !p.usable) {
            lines.push(format!(
                "  {label} {} not used: {}",
                p.name,
                p.reason.as_deref().unwrap_or("?")
            ));
        }
    }
    if pairs.is_empty() {
        let subnets = |n: &[NodePort]| -> Vec<String> {
            n.iter()
                .filter(|p| p.usable)
                .map(|p| format!("{} {} {:#018x}", p.name, p.link_layer, p.subnet_id))
                .collect()
        };
        let msg = format!(
            "no port of A can reach a port of B: they share no (link layer, subnet id). A: {}; B: {}",
            subnets(&na).join(", "),
            subnets(&nb).join(", ")
        );
        advice.push(if a.allow_cross_subnet {
            format!("{msg}. Ports of different link layers (InfiniBand vs Ethernet) never connect.")
        } else {
            format!("{msg}. If the subnets are routed, pass --allow-cross-subnet; else cable both nodes to one subnet, or fix the subnet prefix (IB) / IP subnet (RoCE).")
        });
    }
    for pp in &pairs {
        let (pa, pb) = (&na[pp.local], &nb[pp.remote]);
        let ranked = ranked(&pa.adverts, &pb.adverts);
        let winner = ranked.first().copied();
        let why = match winner {
            Some(w) => {
                let name = CpcId::from_index(w.index).map(|c| c.name()).unwrap_or("?");
                let others: Vec<String> = ranked[1..]
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {}",
                            CpcId::from_index(r.index).map(|c| c.name()).unwrap_or("?"),
                            r.score
                        )
                    })
                    .collect();
                format!(
                    "{name} wins with priority {} (the higher of {} and {}){}",
                    w.score,
                    w.priorities.0,
                    w.priorities.1,
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!("; also common: {}", others.join(", "))
                    }
                )
            }
            None => {
                let mut w = format!(
                    "no common CPC: A offers {}; B offers {}",
                    advert_list(&pa.adverts),
                    advert_list(&pb.adverts)
                );
                for (side, p, other) in [("A", pa, pb), ("B", pb, pa)] {
                    for (c, r) in &p.refused {
                        let id = CpcId::from_name(c).map(|x| x.index());
                        if other.adverts.iter().any(|x| Some(x.index) == id) {
                            w.push_str(&format!("; {side} cannot use {c}: {r}"));
                            advice.push(format!(
                                "{side} {}: make {c} usable ({r}), which {} offers",
                                p.name,
                                if side == "A" { "B" } else { "A" }
                            ));
                        }
                    }
                }
                w
            }
        };
        lines.push(format!(
            "{} <-> {}: reachable (subnet {:#018x}, path MTU {}); {}",
            pa.name,
            pb.name,
            pa.subnet_id,
            pp.path_mtu.bytes(),
            why
        ));
        rows.push(json!({
            "a_port": pa.name, "b_port": pb.name, "reachable": true, "path_mtu": pp.path_mtu.bytes(),
            "cpc": winner.and_then(|w| CpcId::from_index(w.index)).map(|c| c.name()),
            "score": winner.map(|w| w.score), "why": why,
        }));
    }
    // What the transport does: each process serves its node's first usable port, and pairs
    // it with the peer's through the same function the transport plans with.
    let first = |n: &[NodePort]| views(n).into_iter().next();
    let transport = match (first(&na), first(&nb)) {
        (Some(va), Some(vb)) => {
            let (pa, pb) = (&na[va.index], &nb[vb.index]);
            match transport_pair(&[va], &[vb], a.allow_cross_subnet) {
                Some(pp) => {
                    let w = select(&pa.adverts, &pb.adverts);
                    let cpc = w.and_then(|w| CpcId::from_index(w.index)).map(|c| c.name());
                    let why = match cpc {
                        Some(c) => format!("{} <-> {} through {c}", pa.name, pb.name),
                        None => format!(
                            "{} <-> {} share no CPC: A offers {}; B offers {}",
                            pa.name,
                            pb.name,
                            advert_list(&pa.adverts),
                            advert_list(&pb.adverts)
                        ),
                    };
                    for r in rows.iter_mut() {
                        r["transport"] = json!(r["a_port"] == pa.name && r["b_port"] == pb.name);
                    }
                    json!({"a_port": pa.name, "b_port": pb.name, "reachable": true,
                        "path_mtu": pp.path_mtu.bytes(), "cpc": cpc, "why": why})
                }
                None => {
                    let why = format!(
                        "{} ({} {:#018x}) cannot reach {} ({} {:#018x}){}",
                        pa.name,
                        pa.link_layer,
                        pa.subnet_id,
                        pb.name,
                        pb.link_layer,
                        pb.subnet_id,
                        if a.allow_cross_subnet || pa.link_layer != pb.link_layer {
                            ""
                        } else {
                            " (the transport crosses subnets only with OPENIB_ALLOW_CROSS_SUBNET=true)"
                        }
                    );
                    json!({"a_port": pa.name, "b_port": pb.name, "reachable": false,
                        "path_mtu": null, "cpc": null, "why": why})
                }
            }
        }
        _ => json!({"a_port": null, "b_port": null, "reachable": false, "path_mtu": null,
            "cpc": null, "why": "a node has no usable port"}),
    };
    for r in rows.iter_mut() {
        if r.get("transport").is_none() {
            r["transport"] = json!(false);
        }
    }
    let some_pair = rows.iter().any(|r| !r["cpc"].is_null());
    let connectable = !transport["cpc"].is_null();
    lines.push(format!(
        "transport (each process serves its node's first usable port{}): {}",
        if a.allow_cross_subnet {
            "; crossing subnets, OPENIB_ALLOW_CROSS_SUBNET=true"
        } else {
            ""
        },
        transport["why"].as_str().unwrap_or("?")
    ));
    if some_pair && !connectable {
        advice.push(format!(
            "another port pair could connect, but the transport uses only each node's first usable port ({}); restrict each node to a connectable port with OPENIB_IF_INCLUDE",
            transport["why"].as_str().unwrap_or("?")
        ));
    }
    if !some_pair && !pairs.is_empty() && advice.is_empty() {
        advice.push(
            "no CPC is usable on both sides: see each port's cpcs in the two documents".into(),
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"a": an, "b": bn, "connectable": connectable, "transport": transport, "pairs": rows, "advice": advice})).expect("serialises")
        );
    } else {
        for l in &lines {
            println!("{l}");
        }
        println!(
            "{}",
            if connectable {
                "=> the two nodes can connect"
            } else {
                "=> the two nodes cannot connect"
            }
        );
        for adv in &advice {
            println!("to fix: {adv}");
        }
    }
    if connectable {
        exit::OK
    } else {
        exit::ERROR
    }
}
