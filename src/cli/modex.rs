//! `openib modex show | decode | size`: the packed modex this node would publish, a decoder for
//! blobs from anywhere, and what the format costs next to Open MPI's (docs/MODEX.md).

use super::exit;
use super::ports::PortSource;
use crate::modex::advert::cpc_name;
use crate::modex::build::{build_node, placeholder_proc, proc_ports, NodeBuild};
use crate::modex::size::{job_sizes_iter, kv_bytes, FormatSize};
use crate::modex::synth::{synth_node_with, Values};
use crate::modex::{
    frame, layout, Compression, DecodeError, LocalProcs, NodeBlob, PortSet, ProcBlob, KEY_NODE,
    KEY_PROC,
};
use openib_ports::hw::{self, HwError};
use openib_ports::{derive, Filter, Mtu, Topology};
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum ModexCmd {
    /// The node blob and proc blob this node would publish: hex, decoded fields, byte counts.
    Show {
        #[command(flatten)]
        source: PortSource,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Decode a blob (raw bytes, or hex text with --hex) from FILE or standard input.
    Decode {
        /// The blob is a proc blob (read against the node blob given with --node).
        #[arg(long = "proc")]
        proc_: bool,
        /// The node blob a proc blob is read against (raw, or hex with --hex).
        #[arg(long, value_name = "FILE")]
        node: Option<PathBuf>,
        /// The input is hex text (whitespace ignored) rather than raw bytes.
        #[arg(long)]
        hex: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// FILE, or - for standard input.
        #[arg(value_name = "FILE|-", default_value = "-")]
        input: String,
    },
    /// Bytes this format costs per process, per node and per job, next to Open MPI's.
    Size {
        /// Number of nodes in the job.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        nodes: u64,
        /// Processes per node.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
        ppn: u64,
        #[command(flatten)]
        source: PortSource,
        /// Per-process values (UD QP numbers): random (the incompressible worst case) or
        /// sequential (allocated in rank order, as processes started together get them).
        #[arg(long, default_value = "random")]
        values: Values,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also draw bytes per process against job size into this SVG file, for every format:
        /// NODES nodes with 1, 2, 4, ... PPN processes each, and PPN processes per node on 1,
        /// 2, 4, ... NODES nodes (log-scaled axes).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Run the node-leader exchange under the job's runtime (mpirun, srun, openib run, or
    /// alone) and have rank 0 print what it rebuilt of every peer.
    Exchange(super::exchange::ExchangeArgs),
}

/// What a subcommand printed and its exit code.
#[derive(Debug, Default)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    fn json(&mut self, v: &Value) {
        self.stdout += &serde_json::to_string_pretty(v).unwrap_or_else(|_| "{}".into());
        self.stdout.push('\n');
    }
}

macro_rules! outln {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o.stdout, $($t)*);
    }};
}
macro_rules! out {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = write!($o.stdout, $($t)*);
    }};
}
macro_rules! errln {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o.stderr, $($t)*);
    }};
}

/// Runs a `modex` subcommand, prints what it printed and returns the exit code. Never panics
/// on bad input.
pub fn run(cmd: ModexCmd) -> i32 {
    if let ModexCmd::Exchange(a) = cmd {
        return super::exchange::run(&a);
    }
    let o = exec(cmd);
    print!("{}", o.stdout);
    eprint!("{}", o.stderr);
    o.code
}

/// Runs a `modex` subcommand into an [`Outcome`] (what `run` prints).
pub fn exec(cmd: ModexCmd) -> Outcome {
    let (json_mode, what) = match &cmd {
        ModexCmd::Show { json, .. } => (*json, "show"),
        ModexCmd::Decode { json, .. } => (*json, "decode"),
        ModexCmd::Size { json, .. } => (*json, "size"),
        ModexCmd::Exchange(a) => (a.json, "exchange"),
    };
    let mut o = Outcome::default();
    let r = match cmd {
        ModexCmd::Show { source, json } => show(&mut o, &source, json),
        ModexCmd::Decode {
            proc_,
            node,
            hex,
            json,
            input,
        } => decode(&mut o, proc_, node, hex, json, &input),
        ModexCmd::Size {
            nodes,
            ppn,
            source,
            values,
            json,
            svg,
        } => size(
            &mut o,
            (nodes as usize, ppn as usize),
            &source,
            values,
            json,
            svg.as_deref(),
        ),
        ModexCmd::Exchange(a) => {
            o.code = super::exchange::run(&a);
            return o;
        }
    };
    match r {
        Ok(()) => o.code = exit::OK,
        Err(e) => {
            let msg = format!("openib modex {what}: {}", e.message);
            if json_mode {
                o.stdout.clear();
                o.json(&json!({"error": e.json.unwrap_or_else(|| json!({"kind": e.kind, "message": msg}))}));
            }
            errln!(o, "{msg}");
            o.code = e.code;
        }
    }
    o
}

/// A failure with its exit code and, for decode errors, its JSON form.
struct Failure {
    code: i32,
    kind: &'static str,
    message: String,
    json: Option<Value>,
}

impl Failure {
    fn new(code: i32, kind: &'static str, message: impl Into<String>) -> Self {
        Failure {
            code,
            kind,
            message: message.into(),
            json: None,
        }
    }
    fn decode(what: &str, e: &DecodeError) -> Self {
        let message = format!("malformed {what}: {e}");
        let json = json!({"kind": e.kind(), "field": e.field(), "offset": e.offset(),
            "in_decompressed_body": matches!(e, DecodeError::InDecompressed { .. }), "message": message});
        Failure {
            code: exit::ERROR,
            kind: e.kind(),
            message,
            json: Some(json),
        }
    }
}

/// Hex dump, 16 bytes a line with offsets.
fn dump(b: &[u8]) -> String {
    b.chunks(16)
        .enumerate()
        .map(|(i, c)| {
            let bytes: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
            format!("    {:04x}  {}\n", i * 16, bytes.join(" "))
        })
        .collect()
}

/// The node blob (unfiltered ports), and the node-blob ports this process's filter keeps.
struct Local {
    build: NodeBuild,
    mine: PortSet,
    source: String,
    warnings: Vec<String>,
}

fn load(src: &PortSource) -> Result<Local, Failure> {
    let cfg = src
        .derive_config()
        .map_err(|e| Failure::new(e.exit_code(), e.kind(), e.to_string()))?;
    let fixture = src
        .fixture()
        .map_err(|e| Failure::new(exit::USAGE, "bad_setting", e.to_string()))?;
    let (topo, source): (Topology, String) = match &fixture {
        Some(p) => (
            Topology::from_fixture_file(p)
                .map_err(|e| Failure::new(exit::ERROR, "bad_fixture", e.to_string()))?,
            format!("fixture:{}", p.display()),
        ),
        None => match hw::read_topology() {
            Ok(scan) => (scan.topology, "hardware".into()),
            Err(HwError::NoVerbs(e)) => {
                return Err(Failure::new(
                    exit::NO_VERBS,
                    "no_libibverbs",
                    format!("{e} (or give --fixture FILE)"),
                ))
            }
            Err(e @ HwError::DeviceList(_)) => {
                return Err(Failure::new(
                    exit::NO_DEVICE,
                    "no_device",
                    format!("{e} (or give --fixture FILE)"),
                ))
            }
        },
    };
    if topo.devices.is_empty() {
        return Err(Failure::new(
            exit::NO_DEVICE,
            "no_device",
            format!("{}; or give --fixture FILE", super::ports::NO_DEVICE_HINT),
        ));
    }
    let mut all_cfg = cfg.clone();
    all_cfg.filter = Filter::All;
    let unfiltered = derive(&topo, &all_cfg);
    let filtered = derive(&topo, &cfg);
    let host = if fixture.is_some() {
        openib_cpc::HostFacts {
            rdmacm: Ok(()),
            ucm: false,
            kernel: "assumed >= 5.3 (fixture)".into(),
        }
    } else {
        openib_cpc::HostFacts::probe()
    };
    let cpc_cfg = openib_cpc::CpcConfig::from_env()
        .map_err(|e| Failure::new(exit::USAGE, "bad_cpc_setting", e.to_string()))?;
    let build = build_node(&unfiltered, &topo, cfg.gid_index, &host, &cpc_cfg)
        .map_err(|e| Failure::new(exit::ERROR, "nothing_to_publish", e.to_string()))?;
    let mine = proc_ports(&build, &filtered);
    let mut warnings = filtered.warnings.clone();
    warnings.extend(
        filtered
            .unmatched_filters
            .iter()
            .map(|u| format!("port filter entry {u:?} matches no device or port")),
    );
    Ok(Local {
        build,
        mine,
        source,
        warnings,
    })
}

fn node_json(b: &NodeBlob, names: Option<&NodeBuild>) -> Value {
    let devices: Vec<Value> = b
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut v = json!({"index": i, "vendor_id": d.vendor_id, "vendor_part_id": d.vendor_part_id, "transport": d.transport});
            if let Some(n) = names {
                v["name"] = json!(n.device_names[i]);
            }
            v
        })
        .collect();
    let ports: Vec<Value> = b
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v = json!({
                "index": i,
                "device": p.device,
                "port": p.port_num,
                "link_layer": p.link_layer.name(),
                "subnet_id": format!("{:#018x}", p.subnet_id),
                "lid": p.lid,
                "apm_lid": p.apm_lid,
                "mtu": p.mtu,
                "mtu_bytes": Mtu::from_enum(p.mtu).map(|m| m.bytes()),
                "cpcs": p.cpcs.iter().map(|c| json!({
                    "name": cpc_name(c.cpc),
                    "index": c.cpc,
                    "priority": c.priority,
                    "blob_len": c.blob.len(),
                    "blob_hex": hex::encode(&c.blob),
                    "proc_len": c.proc_len,
                })).collect::<Vec<_>>(),
            });
            if let Some(n) = names {
                v["name"] = json!(n.port_names[i]);
            }
            v
        })
        .collect();
    let mut v = json!({"version": layout::VERSION, "devices": devices, "ports": ports,
        "extensions": b.extensions.iter().map(|e| json!({"kind": e.kind, "hex": hex::encode(&e.data)})).collect::<Vec<_>>()});
    if let Some(lp) = &b.local_procs {
        v["local_procs"] = json!({
            "count": lp.count,
            "all_ports": lp.ports.is_none(),
            "procs": lp.to_proc_blobs(b).iter().enumerate().map(|(r, p)| {
                let mut j = proc_json(b, p);
                j["local_rank"] = json!(r);
                j
            }).collect::<Vec<_>>(),
        });
    }
    v
}

fn proc_json(node: &NodeBlob, p: &ProcBlob) -> Value {
    json!({
        "ports": p.ports.iter().collect::<Vec<_>>(),
        "all_ports": p.ports == PortSet::all(node.ports.len()),
        "parts": ProcBlob::slots(node, p.ports).zip(&p.parts).map(|((i, j), part)| json!({
            "port": i, "cpc": cpc_name(node.ports[i].cpcs[j].cpc), "hex": hex::encode(part)
        })).collect::<Vec<_>>(),
    })
}

fn node_text(b: &NodeBlob, names: Option<&NodeBuild>) -> String {
    let mut s = String::new();
    for (i, d) in b.devices.iter().enumerate() {
        let name = names
            .map(|n| format!(" {}", n.device_names[i]))
            .unwrap_or_default();
        s += &format!(
            "  device {i}{name}: vendor {:#06x}, part {}, transport {}\n",
            d.vendor_id, d.vendor_part_id, d.transport
        );
    }
    for (i, p) in b.ports.iter().enumerate() {
        let name = names
            .map(|n| format!(" {}", n.port_names[i]))
            .unwrap_or_default();
        let mtu = Mtu::from_enum(p.mtu).map(|m| m.bytes()).unwrap_or(0);
        s += &format!(
            "  port {i}{name} (device {} port {}): {}, subnet {:#018x}, lid {}, apm_lid {}, mtu {} ({mtu})\n",
            p.device, p.port_num, p.link_layer.name(), p.subnet_id, p.lid, p.apm_lid, p.mtu
        );
        for c in &p.cpcs {
            s += &format!(
                "    cpc {} (index {}), priority {}, node part {} B{}, per-process part {} B\n",
                cpc_name(c.cpc),
                c.cpc,
                c.priority,
                c.blob.len(),
                if c.blob.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", hex::encode(&c.blob))
                },
                c.proc_len
            );
        }
    }
    for e in &b.extensions {
        s += &format!(
            "  extension {}: {} B ({})\n",
            e.kind,
            e.data.len(),
            hex::encode(&e.data)
        );
    }
    if let Some(lp) = &b.local_procs {
        s += &format!(
            "  gathered section: {} local process(es), {}\n",
            lp.count,
            if lp.ports.is_none() {
                "all using every port"
            } else {
                "with per-process port bitmaps"
            }
        );
        for (r, p) in lp.to_proc_blobs(b).iter().enumerate().take(16) {
            s += &format!("    rank {r}: {}\n", proc_text(b, p));
        }
        if lp.count > 16 {
            s += &format!("    ... ({} more)\n", lp.count - 16);
        }
    }
    s
}

fn proc_text(node: &NodeBlob, p: &ProcBlob) -> String {
    let ports: Vec<String> = p.ports.iter().map(|i| i.to_string()).collect();
    let parts: Vec<String> = ProcBlob::slots(node, p.ports)
        .zip(&p.parts)
        .filter(|(_, part)| !part.is_empty())
        .map(|((i, j), part)| {
            format!(
                "port {i} {} {}",
                cpc_name(node.ports[i].cpcs[j].cpc),
                hex::encode(part)
            )
        })
        .collect();
    format!(
        "ports [{}]{}; parts: {}",
        ports.join(", "),
        if p.ports == PortSet::all(node.ports.len()) {
            " (all)"
        } else {
            ""
        },
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    )
}

fn show(o: &mut Outcome, src: &PortSource, json_out: bool) -> Result<(), Failure> {
    let l = load(src)?;
    let enc = |e: crate::modex::EncodeError| Failure::new(exit::ERROR, "encode", e.to_string());
    let node = &l.build.blob;
    let node_bytes = node.encode(Compression::DEFAULT).map_err(enc)?;
    let proc_ = placeholder_proc(node, l.mine);
    let proc_bytes = proc_.encode(node, Compression::DEFAULT).map_err(enc)?;
    let mut gathered = node.clone();
    gathered.local_procs =
        Some(LocalProcs::gather(node, std::slice::from_ref(&proc_)).map_err(enc)?);
    let gathered_bytes = gathered.encode(Compression::DEFAULT).map_err(enc)?;
    if json_out {
        let mut nj = node_json(node, Some(&l.build));
        nj["key"] = json!(KEY_NODE);
        nj["bytes"] = json!(node_bytes.len());
        nj["hex"] = json!(hex::encode(&node_bytes));
        nj["published_bytes"] = json!(kv_bytes(KEY_NODE, node_bytes.len()));
        let mut pj = proc_json(node, &proc_);
        pj["key"] = json!(KEY_PROC);
        pj["bytes"] = json!(proc_bytes.len());
        pj["hex"] = json!(hex::encode(&proc_bytes));
        pj["published_bytes"] = json!(kv_bytes(KEY_PROC, proc_bytes.len()));
        pj["placeholder_parts"] = json!(true);
        o.json(&json!({
            "source": l.source,
            "node_blob": nj,
            "proc_blob": pj,
            "gathered_node_blob": {"key": KEY_NODE, "local_procs": 1, "bytes": gathered_bytes.len(),
                "hex": hex::encode(&gathered_bytes), "published_bytes": kv_bytes(KEY_NODE, gathered_bytes.len())},
            "warnings": l.warnings,
        }));
    } else {
        outln!(o, "source: {}", l.source);
        outln!(
            o,
            "node blob: key {KEY_NODE:?}, {} bytes ({} published with key and lengths), once per node by the node leader",
            node_bytes.len(),
            kv_bytes(KEY_NODE, node_bytes.len())
        );
        out!(o, "{}", dump(&node_bytes));
        out!(o, "{}", node_text(node, Some(&l.build)));
        outln!(
            o,
            "proc blob: key {KEY_PROC:?}, {} bytes ({} published), by each process (CPC parts are zero placeholders until the CPCs run)",
            proc_bytes.len(),
            kv_bytes(KEY_PROC, proc_bytes.len())
        );
        out!(o, "{}", dump(&proc_bytes));
        outln!(o, "  {}", proc_text(node, &proc_));
        outln!(
            o,
            "gathered node blob for one local process (what a node with one process publishes instead of both): {} bytes ({} published)",
            gathered_bytes.len(),
            kv_bytes(KEY_NODE, gathered_bytes.len())
        );
        out!(o, "{}", dump(&gathered_bytes));
        for w in &l.warnings {
            errln!(o, "warning: {w}");
        }
    }
    Ok(())
}

fn read_input(path: &str, hex_text: bool) -> Result<Vec<u8>, Failure> {
    let mut raw = Vec::new();
    let io =
        |e: std::io::Error| Failure::new(exit::ERROR, "io", format!("cannot read {path}: {e}"));
    if path == "-" {
        std::io::stdin().read_to_end(&mut raw).map_err(io)?;
    } else {
        raw = std::fs::read(path).map_err(io)?;
    }
    if !hex_text {
        return Ok(raw);
    }
    let text = String::from_utf8_lossy(&raw);
    let digits: String = text.split_whitespace().collect::<String>();
    let digits = digits.strip_prefix("0x").unwrap_or(&digits);
    if digits.len() % 2 != 0 {
        return Err(Failure::new(
            exit::USAGE,
            "bad_hex",
            format!("{path}: odd number of hex digits ({})", digits.len()),
        ));
    }
    hex::decode(digits).map_err(|e| {
        let at = match e {
            hex::FromHexError::InvalidHexCharacter { index, .. } => index,
            _ => 0,
        };
        Failure::new(
            exit::USAGE,
            "bad_hex",
            format!("{path}: not hex at digit {at}"),
        )
    })
}

fn decode(
    o: &mut Outcome,
    proc_: bool,
    node_file: Option<PathBuf>,
    hex_text: bool,
    json_out: bool,
    input: &str,
) -> Result<(), Failure> {
    let bytes = read_input(input, hex_text)?;
    if !proc_ {
        if node_file.is_some() {
            return Err(Failure::new(
                exit::USAGE,
                "usage",
                "--node is for --proc (the node blob a proc blob is read against)",
            ));
        }
        let b = NodeBlob::decode(&bytes).map_err(|e| Failure::decode("node blob", &e))?;
        let info = frame::info(&bytes).map_err(|e| Failure::decode("node blob", &e))?;
        if json_out {
            let mut v = node_json(&b, None);
            v["bytes"] = json!(bytes.len());
            v["compressed"] = json!(info.compressed);
            v["body_bytes"] = json!(info.body_len);
            o.json(&json!({"node_blob": v}));
        } else {
            outln!(
                o,
                "node blob: {} bytes, version {}{}",
                bytes.len(),
                info.version,
                if info.compressed {
                    format!(
                        ", deflate-compressed ({} bytes decompressed)",
                        info.body_len
                    )
                } else {
                    String::new()
                }
            );
            out!(o, "{}", node_text(&b, None));
        }
        return Ok(());
    }
    let Some(node_file) = node_file else {
        // Without its node blob only the frame can be read: widths and port count live there.
        let info = frame::info(&bytes).map_err(|e| Failure::decode("proc blob", &e))?;
        if info.kind != frame::Kind::Proc {
            return Err(Failure::decode(
                "proc blob",
                &DecodeError::WrongKind {
                    field: "header",
                    offset: 0,
                    found: "node",
                    expected: "proc",
                },
            ));
        }
        let all = info.flags & layout::header::ALL_PORTS != 0;
        if json_out {
            o.json(&json!({"proc_blob": {"bytes": bytes.len(), "version": info.version, "all_ports": all,
                "compressed": info.compressed, "body_bytes": info.body_len,
                "note": "give --node FILE (the node blob of its node) to decode the bitmap and parts"}}));
        } else {
            outln!(
                o,
                "proc blob: {} bytes, version {}, {}; body {} bytes: {}",
                bytes.len(),
                info.version,
                if all {
                    "all ports (no bitmap)"
                } else {
                    "with a port bitmap"
                },
                info.body_len,
                hex::encode(bytes.get(1..).unwrap_or_default())
            );
            outln!(o, "  (give --node FILE, the node blob of its node, to decode the bitmap and the CPC parts)");
        }
        return Ok(());
    };
    let node_bytes = read_input(&node_file.display().to_string(), hex_text)?;
    let node =
        NodeBlob::decode(&node_bytes).map_err(|e| Failure::decode("node blob (--node)", &e))?;
    let p = ProcBlob::decode(&bytes, &node).map_err(|e| Failure::decode("proc blob", &e))?;
    if json_out {
        let mut v = proc_json(&node, &p);
        v["bytes"] = json!(bytes.len());
        o.json(&json!({"proc_blob": v}));
    } else {
        outln!(o, "proc blob: {} bytes", bytes.len());
        outln!(o, "  {}", proc_text(&node, &p));
    }
    Ok(())
}

fn size(
    o: &mut Outcome,
    (nodes, ppn): (usize, usize),
    src: &PortSource,
    values: Values,
    json_out: bool,
    svg: Option<&std::path::Path>,
) -> Result<(), Failure> {
    let l = load(src)?;
    let template = l.build.blob.clone();
    let mine = l.mine;
    let sizes = |nodes: usize, ppn: usize| -> Result<Vec<FormatSize>, Failure> {
        job_sizes_iter(
            (0..nodes).map(|k| synth_node_with(&template, k, ppn, values, 42, |_| mine)),
            Compression::DEFAULT,
        )
        .map_err(|e| Failure::new(exit::ERROR, "encode", e.to_string()))
    };
    let formats: Vec<FormatSize> = sizes(nodes, ppn)?;
    if let Some(path) = svg {
        let fig = size_figure((nodes, ppn), values, &l.source, &sizes)?;
        super::plot::write_svg(&fig, path)
            .map_err(|e| Failure::new(exit::ERROR, "svg", format!("--svg: {e}")))?;
    }
    let cpcs: Vec<String> = {
        let mut v: Vec<String> = template
            .ports
            .iter()
            .flat_map(|p| p.cpcs.iter().map(|c| cpc_name(c.cpc)))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let ompi = formats
        .iter()
        .find(|f| f.name == "ompi-4.1")
        .map(|f| f.per_process_bytes)
        .unwrap_or(0.0);
    if json_out {
        o.json(&json!({
            "nodes": nodes, "ppn": ppn, "nprocs": nodes * ppn,
            "ports": template.ports.len(), "ports_used": mine.len(), "cpcs": cpcs,
            "values": values.name(), "source": l.source,
            "keys": {"openib_node": KEY_NODE, "openib_proc": KEY_PROC,
                     "ompi-4.1": crate::modex::size::OMPI41_KEY, "ompi-1.3": crate::modex::size::OMPI13_KEY},
            "formats": formats.iter().map(|f| {
                let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
                v["ratio_to_ompi_4_1"] = json!(if f.per_process_bytes > 0.0 { ompi / f.per_process_bytes } else { 0.0 });
                v
            }).collect::<Vec<_>>(),
        }));
    } else {
        outln!(
            o,
            "{nodes} node(s) x {ppn} process(es) = {} processes; {} port(s) per node ({} used), CPCs {}; {} per-process values; {}",
            nodes * ppn,
            template.ports.len(),
            mine.len(),
            cpcs.join("+"),
            values.name(),
            l.source
        );
        outln!(
            o,
            "{:<16} {:>12} {:>14} {:>14} {:>18} {:>9}",
            "format",
            "B/process",
            "B/node",
            "B/job",
            "allgather B",
            "vs 4.1"
        );
        for f in &formats {
            outln!(
                o,
                "{:<16} {:>12.2} {:>14.1} {:>14} {:>18} {:>8.1}x",
                f.name,
                f.per_process_bytes,
                f.per_node_bytes,
                f.job_bytes,
                f.allgather_bytes,
                if f.per_process_bytes > 0.0 {
                    ompi / f.per_process_bytes
                } else {
                    0.0
                }
            );
        }
        outln!(
            o,
            "(keys and lengths counted: each published pair costs 4 + key + 1 + 4 + value bytes; openib = node leaders publish {KEY_NODE:?} with the gathered section; openib-per-proc = {KEY_NODE:?} per node plus {KEY_PROC:?} per process)"
        );
    }
    Ok(())
}

/// 1, 2, 4, ... up to and with `n`.
fn doublings(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&k| k.checked_mul(2))
        .take_while(|&k| k < n)
        .collect();
    v.push(n);
    v
}

/// The legend name of a [`FormatSize`] name.
fn format_label(name: &str) -> String {
    match name {
        "openib" => "openib (node leaders, gathered)".into(),
        "openib-per-proc" => "openib, a blob per process".into(),
        "ompi-4.1" => "Open MPI 4.1 openib BTL".into(),
        "ompi-1.3" => "Open MPI 1.3 openib BTL".into(),
        "floor" => "floor (distinct values, no keys)".into(),
        other => other.into(),
    }
}

/// `modex size --svg`: bytes per process against job size, one series per format, as the
/// job grows by processes per node (left) and by nodes (right).
fn size_figure(
    (nodes, ppn): (usize, usize),
    values: Values,
    source: &str,
    sizes: &dyn Fn(usize, usize) -> Result<Vec<FormatSize>, Failure>,
) -> Result<super::plot::Figure, Failure> {
    use super::plot::{Axis, Figure, Panel, Series};
    let panel = |title: String, jobs: Vec<(usize, usize)>| -> Result<Panel, Failure> {
        let mut series: Vec<Series> = Vec::new();
        for (n, p) in jobs {
            for f in sizes(n, p)? {
                let name = format_label(f.name);
                let x = (n * p) as f64;
                match series.iter_mut().find(|s| s.name == name) {
                    Some(s) => s.points.push((x, f.per_process_bytes)),
                    None => series.push(Series {
                        name,
                        points: vec![(x, f.per_process_bytes)],
                    }),
                }
            }
        }
        Ok(Panel {
            title,
            x_desc: "job size (processes)".into(),
            y_desc: "modex bytes per process".into(),
            x_axis: Axis::Count,
            y_axis: Axis::Value,
            series,
        })
    };
    let by_ppn = panel(
        format!("{nodes} node(s), 1 to {ppn} processes each"),
        doublings(ppn).into_iter().map(|p| (nodes, p)).collect(),
    )?;
    let by_nodes = panel(
        format!("{ppn} processes per node, 1 to {nodes} node(s)"),
        doublings(nodes).into_iter().map(|n| (n, ppn)).collect(),
    )?;
    Ok(Figure {
        title: "Modex bytes per process against job size".into(),
        note: Some(format!(
            "amortized: job bytes / processes, keys and lengths counted; {} per-process values; {source}",
            values.name()
        )),
        panels: vec![by_ppn, by_nodes],
    })
}
