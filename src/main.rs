//! `openib`: ports, modex, check and bench for the openib RDMA transport.
#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser, Subcommand};
use openib::cli;

#[derive(Parser)]
#[command(
    name = "openib",
    version,
    about = "RDMA (InfiniBand / RoCE) transport: port discovery, modex, connection checks, benchmarks"
)]
struct Cli {
    /// More log output (-v: info, -vv: debug, -vvv: trace). OPENIB_LOG (e.g. "debug" or
    /// "openib_ports=trace") overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List every port of every RDMA device, with derived fields and why a port is not used.
    Ports(cli::ports::PortsArgs),
    /// Loopback test of one port: two RC queue pairs exchange a send, RDMA write/read and atomics.
    Selftest(cli::selftest::SelftestArgs),
    /// Print a device's asynchronous events (port active/error, QP and CQ errors) as they come.
    Events(cli::events::EventsArgs),
    /// Start N local processes under the embedded runtime (put/commit/fence/get over a private socket).
    Run(cli::run::RunArgs),
    /// Can two nodes connect? Takes two `openib ports --json` documents; names the port pairs,
    /// the winning CPC and why, or what to change.
    Check(cli::check::CheckArgs),
    /// Connect every rank to every other rank through the CPC path and exchange a message each way.
    Ping(cli::ping::PingArgs),
    /// Latency and bandwidth between ranks 0 and 1 over the transport (run under 2 ranks).
    Bench(cli::bench::BenchArgs),
    /// Burn-in of the transport: random-size messages from several threads, puts, gets and
    /// atomics between every pair of ranks, every byte checked (run under 2 or more ranks).
    Stress(cli::stress::StressArgs),
    /// Create a group from a group across the job, surviving failures and differing groups
    /// (issue 32): run under a runtime (`openib run -n N -- openib group-create`); each rank
    /// prints its outcome.
    GroupCreate(cli::group_create::GroupCreateArgs),
    /// Every setting: its value in effect, where it comes from (environment, settings file or
    /// default), its default and what it does; flags malformed values.
    Config(cli::config::ConfigArgs),
    /// Deterministic simulations of the runtime's algorithms (the resilient fence).
    Sim {
        #[command(subcommand)]
        cmd: cli::sim::SimCmd,
    },
    /// The packed modex: show what this node publishes, decode a blob, compare sizes at scale.
    Modex {
        #[command(subcommand)]
        cmd: cli::modex::ModexCmd,
    },
    /// Draw a saved `openib bench --json` or `scripts/anchors --save` document as an SVG:
    /// latency and bandwidth against message size, one curve per system.
    Plot(cli::plot::PlotArgs),
    /// Open MPI's BTL component `oib`: where mca_btl_oib.so is, the line that enables it,
    /// and whether ompi_info lists it (--build builds it, --install copies it to
    /// $HOME/.openmpi/components).
    Ompi(cli::ompi::OmpiArgs),
    /// Print the completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions(cli::manual::CompletionsArgs),
    /// Print the manual page (roff) of openib or of one subcommand, or write them all (--dir).
    Man(cli::manual::ManArgs),
}

fn main() {
    // A settings file fills in what the environment leaves unset (docs/CLI.md, "Settings"),
    // before clap reads its environment-backed flags.
    if let Err(e) = openib::settings::apply_file_defaults() {
        eprintln!("openib: settings file: {e}");
        std::process::exit(cli::exit::USAGE);
    }
    let args = Cli::parse();
    init_logging(args.verbose);
    // OPENIB_FAULT in a build without fault injection is refused, not ignored; `openib config`
    // still shows (and flags) it.
    if !matches!(args.cmd, Cmd::Config(_)) {
        if let Err(e) = openib::fault::check_available() {
            eprintln!("openib: {e}");
            std::process::exit(cli::exit::USAGE);
        }
    }
    let code = match args.cmd {
        Cmd::Ports(a) => cli::ports::run(&a),
        Cmd::Selftest(a) => cli::selftest::run(&a),
        Cmd::Events(a) => cli::events::run(&a),
        Cmd::Run(a) => cli::run::run(&a),
        Cmd::Check(a) => cli::check::run(&a),
        Cmd::Modex { cmd } => cli::modex::run(cmd),
        Cmd::Ping(a) => cli::ping::run(&a),
        Cmd::Bench(a) => cli::bench::run(&a),
        Cmd::Stress(a) => cli::stress::run(&a),
        Cmd::Config(a) => cli::config::run(&a),
        Cmd::GroupCreate(a) => cli::group_create::run(&a),
        Cmd::Sim { cmd } => cli::sim::run(cmd),
        Cmd::Plot(a) => cli::plot::run(&a),
        Cmd::Ompi(a) => cli::ompi::run(&a),
        Cmd::Completions(a) => cli::manual::completions(Cli::command(), &a),
        Cmd::Man(a) => cli::manual::man(Cli::command(), &a),
    };
    std::process::exit(code);
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = match openib::config::string("OPENIB_LOG") {
        Ok(Some(s)) => EnvFilter::try_new(s).unwrap_or_else(|_| EnvFilter::new(default)),
        Ok(None) => EnvFilter::new(default),
        Err(e) => {
            eprintln!("openib: {e}; logging at {default}");
            EnvFilter::new(default)
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
