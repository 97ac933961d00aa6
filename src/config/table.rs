//! The table of every setting ([`SETTINGS`]), grouped by component, with the names it refers
//! to ([`CPC_NAMES`], [`FAULT_POINTS`]) and the checks beyond a kind.

use super::setting::{Component, Kind, Setting};

/// The CPC names, as `openib_cpc::CpcId::name` spells them (a unit test checks).
pub const CPC_NAMES: &[&str] = &["oob", "xoob", "ibcm", "rdmacm", "udcm"];
/// The fault points `crate::fault` knows (a unit test checks the sources).
pub const FAULT_POINTS: &[&str] = &[
    "before-put",
    "after-put",
    "in-fence",
    "in-connect",
    "in-transfer",
    "lie-seq",
    "udcm-deaf",
    "gc-before",
    "gc-tree",
    "gc-agree",
];

fn port_filter(v: &str) -> Result<(), String> {
    openib_ports::Filter::from_lists(Some(v), None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether this build injects faults (the cargo feature `fault-injection`; the points live in
/// `crate::fault`, which reads its settings from here).
pub const FAULT_INJECTION_BUILT: bool = cfg!(feature = "fault-injection");

/// Why `OPENIB_FAULT` is refused by a build without fault injection.
pub const FAULT_INJECTION_NOT_BUILT: &str = "this build of openib has no fault injection (built without the cargo feature `fault-injection`, which tests and scripts/test turn on): unset it, or build with `--features fault-injection`";

/// `OPENIB_FAULT` in a build without fault injection: refused.
fn fault_built(_: &str) -> Result<(), String> {
    if FAULT_INJECTION_BUILT {
        Ok(())
    } else {
        Err(FAULT_INJECTION_NOT_BUILT.into())
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
        "OPENIB_PORT_INDEX",
        C::Ports,
        Kind::Int { min: 0, max: 255 },
        Some("0"),
        "serve the N-th usable port (after OPENIB_IF_INCLUDE / OPENIB_IF_EXCLUDE, in discovery order; 0: the first); the oib BTL opens one transport per usable port this way",
    ),
    Setting::new(
        "OPENIB_HOST_SLOT",
        C::Ports,
        Kind::Int { min: 0, max: 63 },
        Some("0"),
        "on a host's runtime (the oib BTL): the modex slot this transport publishes under (0: key oibH, N: oibH<N>) when a process opens one transport per port; slots are contiguous from 0",
    ),
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
        Some("18"),
        "local ACK timeout of every RC queue pair, whichever CPC connects it, as the verbs exponent: 4.096 us x 2^N (18: about 1.07 s, as UCX's 1 s; 0, no timeout, is not offered); an unacknowledged request is retried OPENIB_RETRY_COUNT times (6), so one to a peer that vanished fails after about 7 timeouts (7.5 s at 18, 0.5 s at 14); lower it to notice vanished peers sooner on a quiet fabric, raise it on large or congested ones (Open MPI's openib uses 20, about 4.3 s); at 14 two loaded SoftRoCE hosts lost connections to spurious timeouts",
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
        "bounds the receive buffers and the send requests in flight of all endpoints together; the port's one completion queue has room for this many of each (2 x entries)",
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
