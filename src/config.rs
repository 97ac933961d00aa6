//! Every setting of openib in one table ([`SETTINGS`]), and typed readers for them.
//!
//! A setting is an `OPENIB_*` environment variable. Before anything reads one, `main` fills in
//! from the settings file ([`crate::settings`]) what the environment leaves unset, so the
//! environment holds every value in effect. A reader returns the value from the environment,
//! else the setting's default; an empty (or blank) value counts as unset. A present value that
//! is malformed or out of range is a [`ConfigError`] naming the setting, the value, where it
//! came from and what is allowed: never silently the default.
//!
//! Asking for a name that is not in the table, or reading a setting as the wrong type (an
//! integer as a bool, say), is a programming error: the reader panics. The unit tests check
//! that every `OPENIB_` name in the sources and docs is in the table, and that every default
//! is valid for its own kind.
//!
//! ```no_run
//! let limit: usize = openib::config::usize("OPENIB_EAGER_LIMIT")?;
//! let pinned: u64 = openib::config::u64("OPENIB_PINNED_MAX")?;
//! # Ok::<(), openib::config::ConfigError>(())
//! ```

use std::fmt;
use std::path::PathBuf;

/// The part of openib a setting belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    Ports,
    Cpc,
    Modex,
    Runtime,
    Transport,
    Fault,
    Logging,
    /// The settings machinery itself (`OPENIB_CONFIG`).
    Settings,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Ports => "ports",
            Component::Cpc => "cpc",
            Component::Modex => "modex",
            Component::Runtime => "runtime",
            Component::Transport => "transport",
            Component::Fault => "fault",
            Component::Logging => "logging",
            Component::Settings => "settings",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer in `min..=max`.
    Int { min: u64, max: u64 },
    /// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off` (any case).
    Bool,
    /// One of these names (any case).
    Enum(&'static [&'static str]),
    /// Comma-separated entries, each one of these names (any case); any text when `None`.
    List(Option<&'static [&'static str]>),
    /// Comma-separated `NAME:N` entries: NAME one of these names (any case), N in `0..=max`;
    /// with `repeat`, an entry `N` alone means the previous entry's NAME (`in-fence:3,5`).
    Pairs {
        names: &'static [&'static str],
        max: u64,
        repeat: bool,
    },
    /// Any text.
    String,
    /// A file path (for a library: a file or a soname).
    Path,
}

impl Kind {
    /// A one-word name of the kind: integer, bool, enum, list, pairs, string, path.
    pub fn tag(&self) -> &'static str {
        match self {
            Kind::Int { .. } => "integer",
            Kind::Bool => "bool",
            Kind::Enum(_) => "enum",
            Kind::List(_) => "list",
            Kind::Pairs { .. } => "pairs",
            Kind::String => "string",
            Kind::Path => "path",
        }
    }

    /// What the kind allows, as a phrase ("an integer from 64 to 65535").
    pub fn allowed(&self) -> String {
        match self {
            Kind::Int { min, max } if *max == u64::MAX => format!("an integer >= {min}"),
            Kind::Int { min, max } => format!("an integer from {min} to {max}"),
            Kind::Bool => "true or false (or 1/0, yes/no, on/off)".into(),
            Kind::Enum(names) => format!("one of {}", names.join(", ")),
            Kind::List(Some(names)) => format!("a comma-separated list of {}", names.join(", ")),
            Kind::List(None) => "a comma-separated list".into(),
            Kind::Pairs { names, max, repeat } => format!(
                "comma-separated NAME:N entries, NAME one of {} and N from 0 to {max}{}",
                names.join(", "),
                if *repeat {
                    " (N alone repeats the previous NAME: NAME:N,N)"
                } else {
                    ""
                }
            ),
            Kind::String => "any text".into(),
            Kind::Path => "a file path".into(),
        }
    }
}

/// Validation beyond a kind: `Err` says why the value is refused.
type Check = fn(&str) -> Result<(), String>;

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable, `OPENIB_...`.
    pub name: &'static str,
    /// The default as text; `None`: unset by default (the description says what that means).
    pub default: Option<&'static str>,
    pub kind: Kind,
    pub component: Component,
    /// One line.
    pub description: &'static str,
    /// Set by `openib run` for the processes it starts, not by users.
    pub internal: bool,
    /// Never printed (`openib config` shows `<hidden>`).
    pub secret: bool,
    /// The other setting of an exclusive pair (include / exclude lists).
    pub exclusive_with: Option<&'static str>,
    /// What is allowed, when the kind alone does not say it well.
    allowed: Option<&'static str>,
    /// Validation beyond the kind: the reason a value is refused.
    check: Option<Check>,
}

impl Setting {
    const fn new(
        name: &'static str,
        component: Component,
        kind: Kind,
        default: Option<&'static str>,
        description: &'static str,
    ) -> Setting {
        Setting {
            name,
            default,
            kind,
            component,
            description,
            internal: false,
            secret: false,
            exclusive_with: None,
            allowed: None,
            check: None,
        }
    }
    const fn internal(self) -> Setting {
        Setting {
            internal: true,
            ..self
        }
    }
    const fn secret(self) -> Setting {
        Setting {
            secret: true,
            ..self
        }
    }
    const fn exclusive_with(self, other: &'static str) -> Setting {
        Setting {
            exclusive_with: Some(other),
            ..self
        }
    }
    const fn allowed_text(self, allowed: &'static str) -> Setting {
        Setting {
            allowed: Some(allowed),
            ..self
        }
    }
    const fn checked(self, check: Check) -> Setting {
        Setting {
            check: Some(check),
            ..self
        }
    }

    /// What values are allowed, as a phrase.
    pub fn allowed(&self) -> String {
        match self.allowed {
            Some(a) => a.to_string(),
            None => self.kind.allowed(),
        }
    }

    /// The default as shown to users: the value, or `unset`.
    pub fn default_text(&self) -> &'static str {
        self.default.unwrap_or("unset")
    }

    /// Parses `text` (a present, non-blank value) by this setting's kind; the error is what is
    /// wrong with it ("out of range", "unknown entry \"foo\"").
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let text = text.trim();
        let v = match self.kind {
            Kind::Int { min, max } => {
                let n: u64 = text.parse().map_err(|_| {
                    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                        "out of range".to_string()
                    } else {
                        "not an integer".to_string()
                    }
                })?;
                if !(min..=max).contains(&n) {
                    return Err("out of range".into());
                }
                Value::Int(n)
            }
            Kind::Bool => match text.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Value::Bool(true),
                "0" | "false" | "no" | "off" => Value::Bool(false),
                _ => return Err("not a boolean".into()),
            },
            Kind::Enum(names) => {
                Value::Name(name_in(names, text).ok_or_else(|| format!("unknown value {text:?}"))?)
            }
            Kind::List(names) => {
                let mut out = Vec::new();
                for entry in entries(text) {
                    out.push(match names {
                        Some(names) => name_in(names, entry)
                            .ok_or_else(|| format!("unknown entry {entry:?}"))?
                            .to_string(),
                        None => entry.to_string(),
                    });
                }
                Value::List(out)
            }
            Kind::Pairs { names, max, repeat } => {
                let mut out: Vec<(&'static str, u64)> = Vec::new();
                for entry in entries(text) {
                    let bad = || format!("bad entry {entry:?}");
                    let (name, n) = match entry.split_once(':') {
                        Some((name, n)) => (name_in(names, name.trim()).ok_or_else(bad)?, n),
                        None if repeat => (out.last().map(|p| p.0).ok_or_else(bad)?, entry),
                        None => return Err(bad()),
                    };
                    let n: u64 = n.trim().parse().map_err(|_| bad())?;
                    if n > max {
                        return Err(bad());
                    }
                    out.push((name, n));
                }
                Value::Pairs(out)
            }
            Kind::String | Kind::Path => Value::Text(text.to_string()),
        };
        if let Some(check) = self.check {
            check(text)?;
        }
        Ok(v)
    }
}

fn name_in(names: &'static [&'static str], text: &str) -> Option<&'static str> {
    names
        .iter()
        .copied()
        .find(|n| n.eq_ignore_ascii_case(text.trim()))
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(u64),
    Bool(bool),
    /// An enum's value, as the table spells it.
    Name(&'static str),
    /// A list's entries (names as the table spells them).
    List(Vec<String>),
    Pairs(Vec<(&'static str, u64)>),
    /// A string or a path.
    Text(String),
}

/// Where the value in effect comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The environment.
    Env,
    /// The settings file (put into the environment by `main`).
    File,
    /// Unset (or blank): the default.
    Default,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Env => "env",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A setting's value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} (from the {}): {problem}; allowed: {allowed}", match .origin { Source::File => "settings file", _ => "environment" })]
pub struct ConfigError {
    pub name: &'static str,
    /// The value as given.
    pub value: String,
    /// Where it came from (the environment or the settings file).
    pub origin: Source,
    /// What is wrong with it ("out of range", "unknown entry \"foo\"").
    pub problem: String,
    /// What is allowed ("an integer from 64 to 65535").
    pub allowed: String,
}

// --- the table ------------------------------------------------------------------------------

/// The CPC names, as `openib_cpc::CpcId::name` spells them (a unit test checks).
pub const CPC_NAMES: &[&str] = &["oob", "xoob", "ibcm", "rdmacm", "udcm"];
/// The points of [`crate::fault::point`] (a unit test checks the sources).
pub const FAULT_POINTS: &[&str] = &[
    "before-put",
    "after-put",
    "in-fence",
    "in-connect",
    "in-transfer",
    "lie-seq",
    "udcm-deaf",
];

fn port_filter(v: &str) -> Result<(), String> {
    openib_ports::Filter::from_lists(Some(v), None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `OPENIB_FAULT` in a build without fault injection: refused (see [`crate::fault`]).
fn fault_built(_: &str) -> Result<(), String> {
    if crate::fault::BUILT {
        Ok(())
    } else {
        Err(crate::fault::NOT_BUILT.into())
    }
}

fn log_filter(v: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::try_new(v)
        .map(|_| ())
        .map_err(|e| format!("not a log filter: {e}"))
}

use Component as C;

/// Every setting, in the order `openib config` shows them.
pub static SETTINGS: &[Setting] = &[
    // ports
    Setting::new(
        "OPENIB_FIXTURE",
        C::Ports,
        Kind::Path,
        None,
        "read this topology file (docs/FIXTURES.md) instead of the hardware (--fixture); unset: the hardware",
    ),
    Setting::new(
        "OPENIB_IF_INCLUDE",
        C::Ports,
        Kind::List(None),
        None,
        "use only these ports: DEVICE or DEVICE:PORT, comma-separated (--include); unset: every port",
    )
    .exclusive_with("OPENIB_IF_EXCLUDE")
    .allowed_text("a comma-separated list of DEVICE or DEVICE:PORT (e.g. mlx5_0,mlx5_1:2)")
    .checked(port_filter),
    Setting::new(
        "OPENIB_IF_EXCLUDE",
        C::Ports,
        Kind::List(None),
        None,
        "use every port but these (--exclude); exclusive with OPENIB_IF_INCLUDE; unset: none",
    )
    .exclusive_with("OPENIB_IF_INCLUDE")
    .allowed_text("a comma-separated list of DEVICE or DEVICE:PORT (e.g. mlx5_0,mlx5_1:2)")
    .checked(port_filter),
    Setting::new(
        "OPENIB_GID_INDEX",
        C::Ports,
        Kind::Int {
            min: 0,
            max: u32::MAX as u64,
        },
        Some("0"),
        "GID index whose prefix is the InfiniBand subnet id (--gid-index)",
    ),
    Setting::new(
        "OPENIB_APM_OVER_PORTS",
        C::Ports,
        Kind::Bool,
        Some("false"),
        "use another active port of the same device as the APM alternate path when lmc is 0 (--apm-over-ports)",
    ),
    Setting::new(
        "OPENIB_LIBIBVERBS",
        C::Ports,
        Kind::Path,
        Some("libibverbs.so.1"),
        "the verbs library to load (a file or a soname)",
    ),
    // cpc
    Setting::new(
        "OPENIB_CPC_INCLUDE",
        C::Cpc,
        Kind::List(Some(CPC_NAMES)),
        None,
        "offer only these CPCs, comma-separated; unset: every usable CPC",
    )
    .exclusive_with("OPENIB_CPC_EXCLUDE"),
    Setting::new(
        "OPENIB_CPC_EXCLUDE",
        C::Cpc,
        Kind::List(Some(CPC_NAMES)),
        None,
        "never offer these CPCs; exclusive with OPENIB_CPC_INCLUDE; unset: none",
    )
    .exclusive_with("OPENIB_CPC_INCLUDE"),
    Setting::new(
        "OPENIB_CPC_PRIORITY",
        C::Cpc,
        Kind::Pairs {
            names: CPC_NAMES,
            max: 255,
            repeat: false,
        },
        None,
        "CPC priority overrides, NAME:PRIORITY,... (higher wins); unset: oob 50, xoob 60, ibcm 40, rdmacm 30, udcm 63",
    ),
    Setting::new(
        "OPENIB_ALLOW_CROSS_SUBNET",
        C::Cpc,
        Kind::Bool,
        Some("false"),
        "pair ports on different subnets too (routed InfiniBand, routed RoCE v2; `openib check --allow-cross-subnet`); connections to such a peer are GID-routed; unset: only ports of the same subnet id pair",
    ),
    Setting::new(
        "OPENIB_ACK_TIMEOUT",
        C::Cpc,
        Kind::Int { min: 1, max: 31 },
        Some("14"),
        "local ACK timeout of every RC queue pair, whichever CPC connects it, as the verbs exponent: 4.096 us x 2^N (14: about 67 ms; 0, no timeout, is not offered); an unacknowledged request is retried OPENIB_RETRY_COUNT times (6), so one to a peer that vanished fails after about 7 timeouts (0.5 s at 14); raise it on large or congested fabrics (Open MPI's openib uses 20, about 4.3 s)",
    ),
    Setting::new(
        "OPENIB_RETRY_COUNT",
        C::Cpc,
        Kind::Int { min: 0, max: 6 },
        Some("6"),
        "transport retries of every RC queue pair before a request fails (each after OPENIB_ACK_TIMEOUT); 7 is not offered: SoftRoCE never counts it down, so a request to a vanished peer would be retried forever",
    ),
    Setting::new(
        "OPENIB_LIBRDMACM",
        C::Cpc,
        Kind::Path,
        Some("librdmacm.so.1"),
        "the librdmacm library to load (a file or a soname)",
    ),
    // modex
    Setting::new(
        "OPENIB_MODEX_MODE",
        C::Modex,
        Kind::Enum(&["gathered", "per-process", "on-demand"]),
        Some("gathered"),
        "how `openib modex exchange` exchanges the modex (--mode; docs/MODEX.md)",
    ),
    // runtime
    Setting::new(
        "OPENIB_RUNTIME",
        C::Runtime,
        Kind::Enum(&["pmix", "embedded", "singleton"]),
        None,
        "force a runtime; unset: embedded under `openib run`, PMIx under mpirun/srun, else a singleton",
    ),
    Setting::new(
        "OPENIB_PMIX_FENCE_MARKS",
        C::Runtime,
        Kind::Bool,
        Some("true"),
        "put an arrival mark before each PMIx fence, so a fence timeout names the missing ranks (about +0.5 ms a fence)",
    ),
    Setting::new(
        "OPENIB_RT_FENCE",
        C::Runtime,
        Kind::Enum(&["resilient", "star"]),
        Some("resilient"),
        "the fence of `openib run`: resilient (survivors agree on the dead and go on) or star (rank 0 is the root; any death fails the fence); the same for every rank",
    ),
    Setting::new(
        "OPENIB_LIBPMIX",
        C::Runtime,
        Kind::Path,
        Some("libpmix.so.2"),
        "the PMIx client library to load (a file or a soname)",
    ),
    Setting::new(
        "OPENIB_RT_SOCKET",
        C::Runtime,
        Kind::Path,
        None,
        "set by `openib run`: the embedded runtime's socket",
    )
    .internal(),
    Setting::new(
        "OPENIB_RT_RANK",
        C::Runtime,
        Kind::String,
        None,
        "set by `openib run`: this process's rank",
    )
    .internal(),
    Setting::new(
        "OPENIB_RT_TOKEN",
        C::Runtime,
        Kind::String,
        None,
        "set by `openib run`: the job's secret (never shown)",
    )
    .internal()
    .secret(),
    Setting::new(
        "OPENIB_RT_SIZE",
        C::Runtime,
        Kind::String,
        None,
        "set by `openib run`: the job size",
    )
    .internal(),
    Setting::new(
        "OPENIB_RT_NODE",
        C::Runtime,
        Kind::String,
        None,
        "set by `openib run`: this process's node name",
    )
    .internal(),
    // transport
    Setting::new(
        "OPENIB_EAGER_LIMIT",
        C::Transport,
        Kind::Int { min: 64, max: 65_535 },
        Some("8192"),
        "largest payload sent eagerly, in bytes; larger messages use the rendezvous protocol",
    ),
    Setting::new(
        "OPENIB_EAGER_TRAIN_LIMIT",
        C::Transport,
        Kind::Int {
            min: 0,
            max: 1_048_576,
        },
        Some("16384"),
        "largest message a copying send cuts into eager pieces (no rendezvous handshake); larger ones use the rendezvous protocol; at or below OPENIB_EAGER_LIMIT: none",
    ),
    Setting::new(
        "OPENIB_RECV_DEPTH",
        C::Transport,
        Kind::Int { min: 8, max: 256 },
        Some("64"),
        "receive buffers posted per endpoint",
    ),
    Setting::new(
        "OPENIB_SEND_DEPTH",
        C::Transport,
        Kind::Int { min: 16, max: 256 },
        Some("128"),
        "send bounce slots per endpoint (messages in flight to one peer)",
    ),
    Setting::new(
        "OPENIB_RNDV_FRAGMENT",
        C::Transport,
        Kind::Int {
            min: 4096,
            max: 1 << 30,
        },
        Some("1048576"),
        "largest single RDMA read of a rendezvous transfer, in bytes",
    ),
    Setting::new(
        "OPENIB_MAX_MSG_SIZE",
        C::Transport,
        Kind::Int {
            min: 4096,
            max: 1 << 40,
        },
        Some("1073741824"),
        "largest message, in bytes: a send above it is refused; a peer announcing more (a rendezvous or a train) fails its endpoint before anything is allocated for it",
    ),
    Setting::new(
        "OPENIB_RNDV_PROTOCOL",
        C::Transport,
        Kind::Enum(&["auto", "write", "read", "split"]),
        Some("auto"),
        "how a receiver takes rendezvous messages: auto (split on software RDMA, rxe and siw; write on hardware), write (it names its landing buffer, the sender RDMA-writes into it), read (it RDMA-reads the sender's buffer) or split (the sender writes the first OPENIB_RNDV_SPLIT percent while the receiver reads the rest: on software RDMA both CPUs move bytes); processes of a job may differ",
    ),
    Setting::new(
        "OPENIB_RNDV_SPLIT",
        C::Transport,
        Kind::Int { min: 1, max: 99 },
        Some("50"),
        "with the split rendezvous (OPENIB_RNDV_PROTOCOL=split, or auto on software RDMA): percent of a rendezvous message the sender writes (rounded down to whole 4 KiB pages); the receiver reads the rest",
    ),
    Setting::new(
        "OPENIB_PINNED_MAX",
        C::Transport,
        Kind::Int {
            min: 0,
            max: u64::MAX,
        },
        Some("268435456"),
        "bound on the bytes the registration cache keeps pinned; 0 disables the cache",
    ),
    Setting::new(
        "OPENIB_CQ_DEPTH",
        C::Transport,
        Kind::Int {
            min: 64,
            max: 4_194_304,
        },
        Some("8192"),
        "entries of the port's send and receive completion queues (bounds the receive buffers and the send requests in flight of all endpoints together)",
    ),
    Setting::new(
        "OPENIB_SRQ",
        C::Transport,
        Kind::Enum(&["auto", "on", "off"]),
        Some("auto"),
        "shared receive queue for eager messages: on, off, or auto (on when the job has more than OPENIB_SRQ_PEERS peers); every process of a job must agree",
    ),
    Setting::new(
        "OPENIB_SRQ_PEERS",
        C::Transport,
        Kind::Int {
            min: 0,
            max: u32::MAX as u64,
        },
        Some("16"),
        "with OPENIB_SRQ=auto: the SRQ is used when the job has more peers than this",
    ),
    Setting::new(
        "OPENIB_SRQ_CREDITS",
        C::Transport,
        Kind::Int { min: 3, max: 256 },
        Some("8"),
        "SRQ buffers granted to each connected peer for good (2 of them for credit-only messages); at most OPENIB_RECV_DEPTH",
    ),
    Setting::new(
        "OPENIB_SRQ_RESERVE",
        C::Transport,
        Kind::Int { min: 0, max: 4096 },
        Some("256"),
        "SRQ buffers lent to the peers that are sending, beyond their grants (up to OPENIB_RECV_DEPTH credits each)",
    ),
    Setting::new(
        "OPENIB_SIGNAL_EVERY",
        C::Transport,
        Kind::Int { min: 1, max: 64 },
        Some("16"),
        "at least one send request in this many asks for a completion; inline messages (up to the QP's inline size) go without one in between and are reported done with the next; 1: every request signaled",
    ),
    Setting::new(
        "OPENIB_YIELD_AFTER_US",
        C::Transport,
        Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        Some("50"),
        "microseconds a waiting loop spins without finding work before it yields the CPU between polls (sched_yield); 0: yield after every idle poll (for nodes with more processes than cores)",
    ),
    Setting::new(
        "OPENIB_WAIT_POLLS",
        C::Transport,
        Kind::Int {
            min: 0,
            max: u32::MAX as u64,
        },
        Some("16384"),
        "idle progress calls in a row after which a waiting loop (flush, openib_flush, bench, stress) sleeps on the completion channel instead of polling; 0: always poll",
    ),
    Setting::new(
        "OPENIB_SEQ_START",
        C::Transport,
        Kind::Int {
            min: 0,
            max: u32::MAX as u64,
        },
        Some("0"),
        "for tests: the first sequence number of every endpoint, both ways (sequence numbers wrap from 4294967295 to 0; 4294967040 crosses the wrap after 256 messages); every process of a job must agree",
    ),
    // fault
    Setting::new(
        "OPENIB_FAULT",
        C::Fault,
        Kind::Pairs {
            names: FAULT_POINTS,
            max: u32::MAX as u64,
            repeat: true,
        },
        None,
        "fault injection, POINT:RANK,... (POINT:R1,R2 for several ranks): that rank SIGKILLs itself at the point (lie-seq: it misnumbers its eager message 100 to every peer instead, for the peers' check to catch; udcm-deaf: its udcm never answers, so a peer's udcm attempt times out and falls back); unset: none; only in a build with the cargo feature fault-injection (tests have it), a default build refuses it",
    )
    .checked(fault_built),
    // logging
    Setting::new(
        "OPENIB_LOG",
        C::Logging,
        Kind::String,
        None,
        "log filter (EnvFilter directives: debug, openib_cpc=trace,warn); unset: warn, or info/debug/trace with -v/-vv/-vvv",
    )
    .allowed_text("an EnvFilter directive list, e.g. debug or openib_ports=trace,warn")
    .checked(log_filter),
    // settings
    Setting::new(
        "OPENIB_CONFIG",
        C::Settings,
        Kind::Path,
        None,
        "the settings file; unset: $XDG_CONFIG_HOME/openib/openib.conf (~/.config/...), else /etc/openib/openib.conf",
    ),
];

// --- lookup and reading ---------------------------------------------------------------------

/// The setting `name` (`OPENIB_...`), if the table has it.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The setting `name`. Panics when the table does not have it: a programming error.
pub fn setting(name: &str) -> &'static Setting {
    find(name).unwrap_or_else(|| {
        panic!("openib::config: {name} is not in the settings table (src/config.rs, SETTINGS)")
    })
}

/// A name as a user may write it (`eager_limit`, `eager-limit`, `OPENIB_EAGER_LIMIT`) in the
/// `OPENIB_` spelling, as the settings file does.
pub fn normalize(name: &str) -> String {
    let k = name.trim().to_ascii_uppercase().replace('-', "_");
    if k.starts_with("OPENIB_") {
        k
    } else {
        format!("OPENIB_{k}")
    }
}

/// The value of `name` in the environment, when it is set and not blank.
fn present(s: &'static Setting) -> Result<Option<String>, ConfigError> {
    match std::env::var_os(s.name) {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(v) if v.trim().is_empty() => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(v) => Err(ConfigError {
                name: s.name,
                value: v.to_string_lossy().into_owned(),
                origin: Source::Env,
                problem: "not valid UTF-8".into(),
                allowed: s.allowed(),
            }),
        },
    }
}

/// The text of `name` in effect, as given (the environment's, else the default); `None` when
/// unset without a default. Not validated.
pub fn text(name: &str) -> Option<String> {
    let s = setting(name);
    match std::env::var_os(s.name) {
        Some(v) if !v.to_string_lossy().trim().is_empty() => Some(v.to_string_lossy().into_owned()),
        _ => s.default.map(str::to_string),
    }
}

/// Where the value of `name` in effect comes from.
pub fn source(name: &str) -> Source {
    let s = setting(name);
    match std::env::var_os(s.name) {
        None => Source::Default,
        Some(v) if v.to_string_lossy().trim().is_empty() => Source::Default,
        Some(v) => match crate::settings::filled_from_file(s.name) {
            Some(f) if v.to_str() == Some(f.as_str()) => Source::File,
            _ => Source::Env,
        },
    }
}

/// The parsed value of `name` in effect; `None` when unset without a default.
pub fn value(name: &str) -> Result<Option<Value>, ConfigError> {
    let s = setting(name);
    match present(s)? {
        Some(text) => s.parse(&text).map(Some).map_err(|problem| ConfigError {
            name: s.name,
            value: text,
            origin: source(s.name),
            problem,
            allowed: s.allowed(),
        }),
        None => Ok(s.default.map(|d| {
            s.parse(d)
                .unwrap_or_else(|e| panic!("the default of {} is invalid: {e}", s.name))
        })),
    }
}

/// Checks `name`: its value, and that the other setting of an exclusive pair is not set too.
pub fn check(name: &str) -> Result<(), ConfigError> {
    let s = setting(name);
    value(name)?;
    if let Some(other) = s.exclusive_with {
        if let (Some(mine), Some(_)) = (present(s)?, present(setting(other)).ok().flatten()) {
            return Err(ConfigError {
                name: s.name,
                value: mine,
                origin: source(s.name),
                problem: format!("set together with {other}"),
                allowed: format!("unset when {other} is set (the two are exclusive)"),
            });
        }
    }
    Ok(())
}

/// Every setting's problem ([`check`]), in table order.
pub fn problems() -> Vec<ConfigError> {
    SETTINGS
        .iter()
        .filter_map(|s| check(s.name).err())
        .collect()
}

fn wrong_kind(name: &str, want: &str) -> ! {
    panic!(
        "openib::config: {name} is {} setting, not {want}",
        setting(name).kind.tag()
    )
}

fn int(name: &str) -> Result<u64, ConfigError> {
    match value(name)? {
        Some(Value::Int(n)) => Ok(n),
        None => panic!("openib::config: the integer setting {name} has no default"),
        Some(_) => wrong_kind(name, "an integer"),
    }
}

/// An integer setting that fits a `u64`.
pub fn u64(name: &str) -> Result<u64, ConfigError> {
    int(name)
}

/// An integer setting whose range fits a `usize`.
pub fn usize(name: &str) -> Result<usize, ConfigError> {
    if let Kind::Int { max, .. } = setting(name).kind {
        assert!(
            usize::try_from(max).is_ok(),
            "openib::config: {name}'s range does not fit a usize"
        );
    }
    int(name).map(|n| n as usize)
}

/// An integer setting whose range fits a `u32`.
pub fn u32(name: &str) -> Result<u32, ConfigError> {
    if let Kind::Int { max, .. } = setting(name).kind {
        assert!(
            max <= u32::MAX as u64,
            "openib::config: {name}'s range does not fit a u32"
        );
    }
    int(name).map(|n| n as u32)
}

/// A bool setting.
pub fn bool(name: &str) -> Result<bool, ConfigError> {
    match value(name)? {
        Some(Value::Bool(b)) => Ok(b),
        None => panic!("openib::config: the bool setting {name} has no default"),
        Some(_) => wrong_kind(name, "a bool"),
    }
}

/// An enum setting: its value as the table spells it; `None` when unset without a default.
pub fn choice(name: &str) -> Result<Option<&'static str>, ConfigError> {
    match value(name)? {
        Some(Value::Name(n)) => Ok(Some(n)),
        None => Ok(None),
        Some(_) => wrong_kind(name, "an enum"),
    }
}

/// The text in effect of any setting but an integer or a bool, validated by its kind and
/// trimmed; `None` when unset without a default.
pub fn string(name: &str) -> Result<Option<String>, ConfigError> {
    if matches!(setting(name).kind, Kind::Int { .. } | Kind::Bool) {
        wrong_kind(name, "text");
    }
    value(name)?;
    Ok(text(name).map(|t| t.trim().to_string()))
}

/// A path setting; `None` when unset without a default.
pub fn path(name: &str) -> Result<Option<PathBuf>, ConfigError> {
    match value(name)? {
        Some(Value::Text(t)) if setting(name).kind == Kind::Path => Ok(Some(PathBuf::from(t))),
        None if setting(name).kind == Kind::Path => Ok(None),
        _ => wrong_kind(name, "a path"),
    }
}

/// A list setting's entries (names as the table spells them); empty when unset.
pub fn list(name: &str) -> Result<Vec<String>, ConfigError> {
    match value(name)? {
        Some(Value::List(l)) => Ok(l),
        None if matches!(setting(name).kind, Kind::List(_)) => Ok(Vec::new()),
        _ => wrong_kind(name, "a list"),
    }
}

/// A `NAME:N` list setting's entries; empty when unset.
pub fn pairs(name: &str) -> Result<Vec<(&'static str, u64)>, ConfigError> {
    match value(name)? {
        Some(Value::Pairs(p)) => Ok(p),
        None if matches!(setting(name).kind, Kind::Pairs { .. }) => Ok(Vec::new()),
        _ => wrong_kind(name, "a NAME:N list"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests that change the environment hold this.
    static ENV: Mutex<()> = Mutex::new(());

    fn with_env<T>(vars: &[(&str, Option<&str>)], f: impl FnOnce() -> T) -> T {
        let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let saved: Vec<_> = vars
            .iter()
            .map(|(k, _)| (k.to_string(), std::env::var_os(k)))
            .collect();
        for (k, v) in vars {
            match v {
                Some(v) => std::env::set_var(k, v),
                None => std::env::remove_var(k),
            }
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        for (k, v) in saved {
            match v {
                Some(v) => std::env::set_var(&k, v),
                None => std::env::remove_var(&k),
            }
        }
        out.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    #[test]
    fn the_table_is_consistent() {
        let mut names = std::collections::BTreeSet::new();
        for s in SETTINGS {
            assert!(names.insert(s.name), "{} twice", s.name);
            assert!(s.name.starts_with("OPENIB_"), "{}", s.name);
            assert!(
                s.name[7..]
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                s.name
            );
            assert!(!s.description.is_empty() && !s.description.contains('\n'));
            if let Some(d) = s.default {
                s.parse(d)
                    .unwrap_or_else(|e| panic!("default of {}: {e}", s.name));
                assert!(!d.trim().is_empty());
            }
            if matches!(s.kind, Kind::Int { .. } | Kind::Bool) {
                assert!(s.default.is_some(), "{} needs a default", s.name);
            }
            if let Kind::Int { min, max } = s.kind {
                assert!(min <= max, "{}", s.name);
            }
            if let Some(o) = s.exclusive_with {
                assert_eq!(
                    setting(o).exclusive_with,
                    Some(s.name),
                    "{} <-> {o}",
                    s.name
                );
            }
        }
        // Grouped by component, in the order of the enum.
        assert!(SETTINGS
            .windows(2)
            .all(|w| w[0].component <= w[1].component));
    }

    #[test]
    fn names_mirror_the_code() {
        let cpcs: Vec<&str> = openib_cpc::CpcId::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(cpcs, CPC_NAMES);
        let prio = setting("OPENIB_CPC_PRIORITY").description;
        for c in openib_cpc::CpcId::ALL {
            let want = format!("{} {}", c.name(), c.default_priority());
            assert!(prio.contains(&want), "{prio:?} lacks {want:?}");
        }
        let Kind::Enum(modes) = setting("OPENIB_MODEX_MODE").kind else {
            panic!()
        };
        for m in modes {
            let parsed: crate::modex::exchange::ExchangeMode = m.parse().unwrap();
            assert_eq!(parsed.name(), *m);
        }
        assert_eq!(
            crate::modex::exchange::ExchangeMode::default().name(),
            setting("OPENIB_MODEX_MODE").default.unwrap()
        );
        assert_eq!(
            setting("OPENIB_LIBIBVERBS").default,
            Some(openib_sys::VERBS_SONAME)
        );
        assert_eq!(
            setting("OPENIB_LIBRDMACM").default,
            Some(openib_sys::RDMACM_SONAME)
        );
    }

    #[test]
    fn kinds_parse_and_refuse() {
        let eager = setting("OPENIB_EAGER_LIMIT");
        assert_eq!(eager.parse(" 4096 "), Ok(Value::Int(4096)));
        assert_eq!(eager.parse("64"), Ok(Value::Int(64)));
        assert_eq!(eager.parse("65535"), Ok(Value::Int(65535)));
        assert_eq!(eager.parse("63").unwrap_err(), "out of range");
        assert_eq!(eager.parse("65536").unwrap_err(), "out of range");
        assert_eq!(
            eager.parse("99999999999999999999999").unwrap_err(),
            "out of range"
        );
        assert_eq!(eager.parse("8k").unwrap_err(), "not an integer");
        assert_eq!(eager.parse("-1").unwrap_err(), "not an integer");
        let pinned = setting("OPENIB_PINNED_MAX");
        assert_eq!(
            pinned.parse("18446744073709551615"),
            Ok(Value::Int(u64::MAX))
        );
        assert_eq!(pinned.kind.allowed(), "an integer >= 0");

        let b = setting("OPENIB_APM_OVER_PORTS");
        for t in ["1", "true", "YES", "On"] {
            assert_eq!(b.parse(t), Ok(Value::Bool(true)), "{t}");
        }
        for t in ["0", "false", "no", "OFF"] {
            assert_eq!(b.parse(t), Ok(Value::Bool(false)), "{t}");
        }
        assert!(b.parse("maybe").is_err());

        let rt = setting("OPENIB_RUNTIME");
        assert_eq!(rt.parse("PMIx"), Ok(Value::Name("pmix")));
        assert_eq!(rt.parse("mpi").unwrap_err(), "unknown value \"mpi\"");

        let inc = setting("OPENIB_CPC_INCLUDE");
        assert_eq!(
            inc.parse("udcm, RDMACM,"),
            Ok(Value::List(vec!["udcm".into(), "rdmacm".into()]))
        );
        assert_eq!(inc.parse("udcm,foo").unwrap_err(), "unknown entry \"foo\"");

        let prio = setting("OPENIB_CPC_PRIORITY");
        assert_eq!(
            prio.parse("rdmacm:70, oob : 1"),
            Ok(Value::Pairs(vec![("rdmacm", 70), ("oob", 1)]))
        );
        for bad in ["rdmacm", "rdmacm:256", "foo:1", "rdmacm:x"] {
            assert!(prio.parse(bad).is_err(), "{bad}");
        }
        let fault = setting("OPENIB_FAULT");
        assert_eq!(
            fault.parse("in-connect:1,before-put:0"),
            Ok(Value::Pairs(vec![("in-connect", 1), ("before-put", 0)]))
        );
        assert!(fault.parse("in-conect:1").is_err());
        assert_eq!(
            fault.parse("in-fence:3,5, after-put:0,1"),
            Ok(Value::Pairs(vec![
                ("in-fence", 3),
                ("in-fence", 5),
                ("after-put", 0),
                ("after-put", 1)
            ]))
        );
        assert!(fault.parse("3,in-fence:5").is_err());

        let ifs = setting("OPENIB_IF_INCLUDE");
        assert_eq!(
            ifs.parse("mlx5_0,mlx5_1:2"),
            Ok(Value::List(vec!["mlx5_0".into(), "mlx5_1:2".into()]))
        );
        assert!(ifs.parse("mlx5_0:x").unwrap_err().contains("mlx5_0:x"));

        let log = setting("OPENIB_LOG");
        assert!(log.parse("openib_ports=trace,warn").is_ok());
        assert!(log.parse("debug").is_ok());
        assert!(log
            .parse("foo=bar=baz")
            .unwrap_err()
            .contains("not a log filter"));
    }

    #[test]
    fn readers_take_the_environment_else_the_default_and_refuse_bad_values() {
        with_env(
            &[
                ("OPENIB_EAGER_LIMIT", Some("4096")),
                ("OPENIB_RECV_DEPTH", None),
                ("OPENIB_SEND_DEPTH", Some("  ")),
                ("OPENIB_RNDV_FRAGMENT", Some("2048")),
                ("OPENIB_PINNED_MAX", Some("0")),
                ("OPENIB_PMIX_FENCE_MARKS", Some("off")),
                ("OPENIB_RUNTIME", None),
                ("OPENIB_CPC_PRIORITY", Some("udcm:1")),
            ],
            || {
                assert_eq!(usize("OPENIB_EAGER_LIMIT"), Ok(4096));
                assert_eq!(source("OPENIB_EAGER_LIMIT"), Source::Env);
                assert_eq!(u32("OPENIB_RECV_DEPTH"), Ok(64));
                assert_eq!(source("OPENIB_RECV_DEPTH"), Source::Default);
                // Blank counts as unset.
                assert_eq!(u32("OPENIB_SEND_DEPTH"), Ok(128));
                assert_eq!(source("OPENIB_SEND_DEPTH"), Source::Default);
                assert_eq!(u64("OPENIB_PINNED_MAX"), Ok(0));
                assert!(!bool("OPENIB_PMIX_FENCE_MARKS").unwrap());
                assert_eq!(choice("OPENIB_RUNTIME"), Ok(None));
                assert_eq!(choice("OPENIB_MODEX_MODE"), Ok(Some("gathered")));
                assert_eq!(pairs("OPENIB_CPC_PRIORITY"), Ok(vec![("udcm", 1)]));
                assert_eq!(pairs("OPENIB_FAULT"), Ok(vec![]));
                assert_eq!(list("OPENIB_CPC_EXCLUDE"), Ok(vec![]));
                assert_eq!(path("OPENIB_FIXTURE"), Ok(None));
                assert_eq!(
                    path("OPENIB_LIBPMIX"),
                    Ok(Some(PathBuf::from("libpmix.so.2")))
                );
                assert_eq!(string("OPENIB_MODEX_MODE"), Ok(Some("gathered".into())));

                let e = u64("OPENIB_RNDV_FRAGMENT").unwrap_err();
                assert_eq!(e.name, "OPENIB_RNDV_FRAGMENT");
                assert_eq!(e.value, "2048");
                assert_eq!(e.origin, Source::Env);
                assert_eq!(
                    e.to_string(),
                    "OPENIB_RNDV_FRAGMENT=\"2048\" (from the environment): out of range; \
                     allowed: an integer from 4096 to 1073741824"
                );
                assert_eq!(problems(), vec![e]);
            },
        );
    }

    #[test]
    fn source_names_the_settings_file_for_what_it_filled() {
        with_env(
            &[
                ("OPENIB_RECV_DEPTH", Some("7")),
                ("OPENIB_SEND_DEPTH", Some("32")),
            ],
            || {
                crate::settings::record_filled("OPENIB_RECV_DEPTH", "7");
                // Filled from the file with another value, then changed: the environment's.
                crate::settings::record_filled("OPENIB_SEND_DEPTH", "64");
                assert_eq!(source("OPENIB_RECV_DEPTH"), Source::File);
                assert_eq!(source("OPENIB_SEND_DEPTH"), Source::Env);
                let e = u32("OPENIB_RECV_DEPTH").unwrap_err();
                assert_eq!(e.origin, Source::File);
                assert!(e.to_string().contains("(from the settings file)"), "{e}");
            },
        );
    }

    #[test]
    fn exclusive_pairs_are_refused_together() {
        with_env(
            &[
                ("OPENIB_CPC_INCLUDE", Some("udcm")),
                ("OPENIB_CPC_EXCLUDE", Some("oob")),
            ],
            || {
                let e = check("OPENIB_CPC_EXCLUDE").unwrap_err();
                assert!(e.problem.contains("OPENIB_CPC_INCLUDE"), "{e}");
                assert!(check("OPENIB_CPC_INCLUDE").is_err());
                // Each value is fine on its own.
                assert_eq!(list("OPENIB_CPC_EXCLUDE"), Ok(vec!["oob".to_string()]));
            },
        );
    }

    #[test]
    #[should_panic(expected = "not in the settings table")]
    fn an_unknown_name_is_a_programming_error() {
        let _ = usize("OPENIB_NO_SUCH_SETTING");
    }

    #[test]
    #[should_panic(expected = "is bool setting, not an integer")]
    fn the_wrong_type_is_a_programming_error() {
        let _ = usize("OPENIB_APM_OVER_PORTS");
    }

    #[test]
    fn normalize_spells_names_like_the_settings_file() {
        assert_eq!(normalize("eager-limit"), "OPENIB_EAGER_LIMIT");
        assert_eq!(normalize("cpc_include"), "OPENIB_CPC_INCLUDE");
        assert_eq!(normalize("OPENIB_LOG"), "OPENIB_LOG");
    }

    /// Names that look like settings but are not: the test harness's knobs (docs/SOFTROCE.md)
    /// and a placeholder in a doc comment.
    fn not_a_setting(name: &str) -> bool {
        name == "OPENIB_SKIP_GUEST"
            || name == "OPENIB_FUZZ_SECONDS"
            || name == "OPENIB_NAME"
            || name.starts_with("OPENIB_GUEST")
            // scripts/compare's binary (for the whole run, or per variant).
            || name == "OPENIB_BIN"
            // scripts/test's default (no fault injection) build, for tests/fault_feature.rs.
            || name == "OPENIB_TEST_DEFAULT_BIN"
            // The C ABI's return codes (include/openib.h, docs/CAPI.md).
            || name == "OPENIB_OK"
            || name.starts_with("OPENIB_ERR_")
    }

    /// Every `OPENIB_X` token of `text` (a bare `OPENIB_` prefix is not one).
    fn tokens(text: &str) -> Vec<String> {
        let b = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(off) = text[i..].find("OPENIB_") {
            let start = i + off;
            let mut end = start + 7;
            while end < b.len()
                && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
            {
                end += 1;
            }
            let before_ok =
                start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
            let name = text[start..end].trim_end_matches('_');
            if before_ok && name.len() > 7 {
                out.push(name.to_string());
            }
            i = end;
        }
        out
    }

    fn files(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }

    #[test]
    fn every_openib_name_in_the_sources_and_docs_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = Vec::new();
        for d in ["src", "cpc/src", "ports/src", "sys/src", "examples"] {
            files(&root.join(d), "rs", &mut paths);
        }
        files(&root.join("docs"), "md", &mut paths);
        paths.push(root.join("README.md"));
        assert!(paths.len() > 20, "{paths:?}");
        // This file is the table (and its tests use names that are not in it on purpose).
        paths.retain(|p| !p.ends_with("src/config.rs"));
        let mut missing = Vec::new();
        for p in &paths {
            let text = std::fs::read_to_string(p).unwrap();
            for name in tokens(&text) {
                if find(&name).is_none() && !not_a_setting(&name) {
                    missing.push(format!("{}: {name}", p.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "OPENIB_ names not in src/config.rs SETTINGS: {missing:#?}"
        );
    }

    #[test]
    fn fault_points_in_the_sources_are_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = Vec::new();
        files(&root.join("src"), "rs", &mut paths);
        let mut seen = 0;
        for p in &paths {
            let text = std::fs::read_to_string(p).unwrap();
            let uses = text
                .match_indices("fault::point(\"")
                .chain(text.match_indices("fault::armed(\""));
            for (i, _) in uses {
                let rest = &text[i + 14..];
                let point = &rest[..rest.find('"').unwrap()];
                assert!(FAULT_POINTS.contains(&point), "{}: {point}", p.display());
                seen += 1;
            }
        }
        assert!(seen >= 3);
    }

    /// docs/CLI.md's settings table has one row per setting, `| `NAME` | DEFAULT | ...`, with the
    /// table's default (or `unset`).
    #[test]
    fn the_cli_doc_lists_every_setting_with_its_default() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
        let mut wrong = Vec::new();
        for s in SETTINGS {
            let row = format!("| `{}` | ", s.name);
            let Some(line) = doc.lines().find(|l| l.starts_with(&row)) else {
                wrong.push(format!("no row for {}", s.name));
                continue;
            };
            let cell = line[row.len()..].split(" | ").next().unwrap_or("");
            let want = match s.default {
                Some(d) => format!("`{d}`"),
                None => "unset".to_string(),
            };
            if !cell.starts_with(&want) {
                wrong.push(format!("{}: default cell {cell:?}, want {want:?}", s.name));
            }
        }
        assert!(wrong.is_empty(), "docs/CLI.md settings table: {wrong:#?}");
    }
}
