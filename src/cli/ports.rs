//! `openib ports`: every port of every device, as a table or as JSON (schema in docs/CLI.md).

use super::exit;
use openib_ports::hw::{self, HwError};
use openib_ports::{derive, DeriveConfig, Discovery, Filter, Port, Topology};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Where ports come from and how they are derived: shared by every subcommand that needs ports.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PortSource {
    /// Read this topology file (docs/FIXTURES.md) instead of the hardware [setting:
    /// OPENIB_FIXTURE].
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// Use only these devices or ports (comma-separated DEVICE or DEVICE:PORT).
    #[arg(long, value_name = "LIST", env = "OPENIB_IF_INCLUDE")]
    pub include: Option<String>,
    /// Use every port but these (comma-separated DEVICE or DEVICE:PORT).
    #[arg(long, value_name = "LIST", env = "OPENIB_IF_EXCLUDE")]
    pub exclude: Option<String>,
    /// GID index whose prefix is the InfiniBand subnet id [setting: OPENIB_GID_INDEX, default
    /// 0].
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
    /// Use another active port of the same device as the APM alternate path when lmc is 0
    /// [setting: OPENIB_APM_OVER_PORTS].
    #[arg(long)]
    pub apm_over_ports: bool,
}

#[derive(clap::Args, Debug)]
pub struct PortsArgs {
    #[command(flatten)]
    pub source: PortSource,
    /// Print JSON (schema in docs/CLI.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print the raw topology in the fixture format (docs/FIXTURES.md) instead: a fixture of
    /// this machine.
    #[arg(long, conflicts_with = "json")]
    pub dump_topology: bool,
}

/// Why ports could not be listed, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Filter(#[from] openib_ports::FilterError),
    #[error(transparent)]
    Fixture(#[from] openib_ports::FixtureError),
    #[error(transparent)]
    Setting(#[from] crate::config::ConfigError),
    #[error("{0}")]
    NoVerbs(String),
    #[error("{0}")]
    DeviceList(String),
}

impl LoadError {
    pub fn exit_code(&self) -> i32 {
        match self {
            LoadError::Filter(_) | LoadError::Setting(_) => exit::USAGE,
            LoadError::Fixture(_) => exit::ERROR,
            LoadError::DeviceList(_) => exit::NO_DEVICE,
            LoadError::NoVerbs(_) => exit::NO_VERBS,
        }
    }
    /// The `error.kind` of the JSON document.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::Filter(_) => "bad_filter",
            LoadError::Setting(_) => "bad_setting",
            LoadError::Fixture(_) => "bad_fixture",
            LoadError::NoVerbs(_) => "no_libibverbs",
            LoadError::DeviceList(_) => "no_device",
        }
    }
}

/// The derived ports and where they came from.
pub struct Loaded {
    pub discovery: Discovery,
    /// The raw topology the ports were derived from.
    pub topology: Topology,
    /// `"hardware"` or `"fixture:PATH"`.
    pub source: String,
    /// Devices or ports that could not be read.
    pub problems: Vec<String>,
    pub device_count: usize,
}

/// The hint shown when there is no RDMA device.
pub const NO_DEVICE_HINT: &str = "no RDMA device found. Load the driver for your HCA, or create a \
SoftRoCE device on an Ethernet interface: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0` \
(tests/softroce/guest runs one in a qemu guest); `ibv_devices` lists what libibverbs sees";

impl PortSource {
    /// `--fixture`, else `OPENIB_FIXTURE`; `None`: the hardware.
    pub fn fixture(&self) -> Result<Option<PathBuf>, crate::config::ConfigError> {
        match &self.fixture {
            Some(p) => Ok(Some(p.clone())),
            None => crate::config::path("OPENIB_FIXTURE"),
        }
    }

    /// `--gid-index`, else `OPENIB_GID_INDEX`.
    pub fn gid_index(&self) -> Result<u32, crate::config::ConfigError> {
        match self.gid_index {
            Some(n) => Ok(n),
            None => crate::config::u32("OPENIB_GID_INDEX"),
        }
    }

    pub fn derive_config(&self) -> Result<DeriveConfig, LoadError> {
        Ok(DeriveConfig {
            gid_index: self.gid_index()?,
            apm_over_ports: self.apm_over_ports || crate::config::bool("OPENIB_APM_OVER_PORTS")?,
            filter: Filter::from_lists(self.include.as_deref(), self.exclude.as_deref())?,
        })
    }

    /// Reads the fixture or the hardware, and derives every port.
    pub fn load(&self) -> Result<Loaded, LoadError> {
        let cfg = self.derive_config()?;
        let (topo, source, problems) = match &self.fixture()? {
            Some(path) => (
                Topology::from_fixture_file(path)?,
                format!("fixture:{}", path.display()),
                Vec::new(),
            ),
            None => match hw::read_topology() {
                Ok(scan) => (scan.topology, "hardware".to_string(), scan.problems),
                Err(HwError::NoVerbs(e)) => return Err(LoadError::NoVerbs(e.to_string())),
                Err(e @ HwError::DeviceList(_)) => {
                    return Err(LoadError::DeviceList(format!("{e}; {NO_DEVICE_HINT}")))
                }
            },
        };
        let discovery = derive(&topo, &cfg);
        Ok(Loaded {
            device_count: topo.devices.len(),
            discovery,
            topology: topo,
            source,
            problems,
        })
    }
}

/// Runs `openib ports`; returns the exit code.
pub fn run(args: &PortsArgs) -> i32 {
    match args.source.load() {
        Ok(loaded) if loaded.device_count == 0 => {
            let msg = format!("openib ports: {NO_DEVICE_HINT}");
            if args.json {
                print_json(
                    &json!({"ports": [], "source": loaded.source, "warnings": [], "problems": loaded.problems,
                    "error": {"kind": "no_device", "message": msg}}),
                );
            }
            eprintln!("{msg}");
            exit::NO_DEVICE
        }
        Ok(loaded) => {
            if args.dump_topology {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&loaded.topology).expect("topologies serialise")
                );
            } else if args.json {
                print_json(&to_json(&loaded));
            } else {
                print!("{}", table(&loaded));
                for w in loaded.discovery.warnings.iter() {
                    eprintln!("warning: {w}");
                }
            }
            for u in &loaded.discovery.unmatched_filters {
                eprintln!("warning: port filter entry {u:?} matches no device or port");
            }
            for p in &loaded.problems {
                eprintln!("warning: skipped {p}");
            }
            exit::OK
        }
        Err(e) => {
            let msg = format!("openib ports: {e}");
            if args.json {
                print_json(
                    &json!({"ports": [], "warnings": [], "error": {"kind": e.kind(), "message": msg}}),
                );
            }
            eprintln!("{msg}");
            e.exit_code()
        }
    }
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON values serialise")
    );
}

/// The `--json` document (schema version 1, docs/CLI.md).
pub fn to_json(l: &Loaded) -> Value {
    let host = l.host_facts();
    let cpc_cfg = openib_cpc::CpcConfig::from_env().unwrap_or_else(|e| {
        eprintln!("warning: ignoring CPC settings: {e}");
        openib_cpc::CpcConfig::default()
    });
    json!({
        "schema_version": 1,
        "source": l.source,
        "host": {"rdmacm": host.rdmacm.is_ok(), "ucm": host.ucm, "kernel": host.kernel},
        "ports": l.discovery.ports.iter().map(|p| {
            let mut v = port_json(p);
            v["cpcs"] = cpcs_json(&openib_cpc::evaluate(p, l.has_ip(p), &host, &cpc_cfg));
            v
        }).collect::<Vec<_>>(),
        "warnings": l.discovery.warnings,
        "unmatched_filters": l.discovery.unmatched_filters,
        "problems": l.problems,
    })
}

/// The CPC verdicts of a port: every CPC, with its priority when usable or its reason when not.
pub fn cpcs_json(
    verdicts: &[(
        openib_cpc::CpcId,
        Result<openib_cpc::Advert, openib_cpc::Unusable>,
    )],
) -> Value {
    Value::Array(
        verdicts
            .iter()
            .map(|(id, v)| match v {
                Ok(a) => json!({"name": id.name(), "index": id.index(), "usable": true, "priority": a.priority, "reason": null}),
                Err(why) => json!({"name": id.name(), "index": id.index(), "usable": false, "priority": null, "reason": why.to_string()}),
            })
            .collect(),
    )
}

impl Loaded {
    /// The host facts CPC verdicts depend on: probed on hardware; for a fixture, librdmacm
    /// present and no ib_ucm (as on every Linux since 5.3).
    pub fn host_facts(&self) -> openib_cpc::HostFacts {
        if self.source == "hardware" {
            openib_cpc::HostFacts::probe()
        } else {
            openib_cpc::HostFacts {
                rdmacm: Ok(()),
                ucm: false,
                kernel: "assumed >= 5.3 (fixture)".into(),
            }
        }
    }

    /// Whether the port's network device has a non-link-local IP address (rdmacm needs one).
    pub fn has_ip(&self, p: &Port) -> bool {
        let names: Vec<&str> = p
            .raw
            .netdev
            .iter()
            .map(String::as_str)
            .chain(p.raw.gids.iter().filter_map(|g| g.netdev.as_deref()))
            .collect();
        self.topology
            .netdevs
            .iter()
            .filter(|n| names.contains(&n.name.as_str()))
            .any(|n| {
                n.addrs.iter().any(|a| match a.addr {
                    std::net::IpAddr::V4(_) => true,
                    std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
                })
            })
    }
}

/// One port's JSON object.
pub fn port_json(p: &Port) -> Value {
    let r = &p.raw;
    json!({
        "device": p.device,
        "port": r.port,
        "name": p.name(),
        "node_guid": openib_ports::topology::format_guid(p.node_guid),
        "vendor_id": p.vendor_id,
        "vendor_part_id": p.vendor_part_id,
        "state": r.state.name(),
        "phys_state": r.phys_state.name(),
        "link_layer": r.link_layer.name(),
        "lid": r.lid,
        "lmc": r.lmc,
        "sm_lid": r.sm_lid,
        "subnet_id": format!("{:#018x}", p.subnet_id),
        "subnet_source": subnet_source_text(p),
        "apm_lid": p.apm_lid,
        "mtu": r.active_mtu,
        "mtu_bytes": p.mtu.map(|m| m.bytes()),
        "max_mtu": r.max_mtu,
        "width": width_name(r.active_width),
        "speed": speed_name(r.active_speed),
        "xrc": p.xrc,
        "netdev": r.netdev,
        "gids": r.gids.iter().map(|g| json!({
            "index": g.index, "gid": g.gid.to_string(), "type": g.gid_type.name(), "netdev": g.netdev,
        })).collect::<Vec<_>>(),
        "usable": p.usable,
        "reason": p.reason,
    })
}

fn subnet_source_text(p: &Port) -> String {
    use openib_ports::SubnetSource::*;
    match &p.subnet_source {
        GidPrefix => "GID prefix".into(),
        IpSubnet(s) => format!("IP subnet {s}"),
        GidPrefixFallback(why) => format!("GID prefix ({why})"),
        None => "none".into(),
    }
}

/// `active_width` bit to the name `ibv_devinfo` prints.
pub fn width_name(w: u8) -> String {
    match w {
        1 => "1X".into(),
        2 => "4X".into(),
        4 => "8X".into(),
        8 => "12X".into(),
        16 => "2X".into(),
        0 => "unknown".into(),
        n => format!("invalid({n})"),
    }
}

/// `active_speed` value to its lane rate.
pub fn speed_name(s: u16) -> String {
    match s {
        1 => "2.5 Gbps".into(),
        2 => "5.0 Gbps".into(),
        4 | 8 => "10.0 Gbps".into(),
        16 => "14.0 Gbps".into(),
        32 => "25.0 Gbps".into(),
        64 => "50.0 Gbps".into(),
        128 => "100.0 Gbps".into(),
        0 => "unknown".into(),
        n => format!("invalid({n})"),
    }
}

/// The human table: one block per port, like `ibv_devinfo`, plus the derived fields.
pub fn table(l: &Loaded) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for p in &l.discovery.ports {
        let r = &p.raw;
        let status = match &p.reason {
            None => "usable".to_string(),
            Some(why) => format!("not used: {why}"),
        };
        let _ = writeln!(
            s,
            "{} port {}: {} ({}), {}: {}",
            p.device,
            r.port,
            r.state.name(),
            r.phys_state.name(),
            r.link_layer.name(),
            status
        );
        let _ = writeln!(
            s,
            "    node_guid {}  lid {}  lmc {}  sm_lid {}  apm_lid {}",
            openib_ports::topology::format_guid(p.node_guid),
            r.lid,
            r.lmc,
            r.sm_lid,
            p.apm_lid
        );
        let mtu = p
            .mtu
            .map(|m| m.bytes().to_string())
            .unwrap_or_else(|| "invalid".into());
        let _ = writeln!(
            s,
            "    subnet_id {:#018x} ({})  mtu {} (enum {})  width {}  speed {}{}",
            p.subnet_id,
            subnet_source_text(p),
            mtu,
            r.active_mtu,
            width_name(r.active_width),
            speed_name(r.active_speed),
            r.netdev
                .as_ref()
                .map(|n| format!("  netdev {n}"))
                .unwrap_or_default()
        );
        for g in &r.gids {
            let _ = writeln!(
                s,
                "    GID[{:>3}] {}, {}",
                g.index,
                g.gid,
                g.gid_type.name()
            );
        }
    }
    let usable = l.discovery.usable().count();
    let _ = writeln!(
        s,
        "{} port(s) on {} device(s), {} usable ({})",
        l.discovery.ports.len(),
        l.device_count,
        usable,
        l.source
    );
    s
}
