//! The `openib` command line: one module per subcommand, each returning the process exit code.

pub mod bench;
pub mod check;
pub mod config;
pub mod events;
pub mod exchange;
pub mod group_create;
pub mod manual;
pub mod modex;
pub mod ompi;
pub mod ping;
pub mod plot;
pub mod ports;
pub mod progress;
pub mod run;
pub mod selftest;
pub mod sim;
pub mod stress;

/// Exit codes shared by every subcommand (documented in README.md and docs/CLI.md).
pub mod exit {
    /// The command ran (for `ports`: even if no port is usable).
    pub const OK: i32 = 0;
    /// A runtime error other than the ones below (unreadable fixture, I/O error, ...).
    pub const ERROR: i32 = 1;
    /// Bad usage: unknown flag, bad value, include and exclude given together.
    pub const USAGE: i32 = 2;
    /// libibverbs could not be loaded.
    pub const NO_VERBS: i32 = 3;
    /// libibverbs loaded but there is no RDMA device.
    pub const NO_DEVICE: i32 = 4;
    /// `openib ompi`: Open MPI's commands (ompi_info) or, to build the component,
    /// libopenmpi-dev (mpicc, Open MPI's internal headers) are missing.
    pub const NO_OMPI: i32 = 5;
    /// `openib ompi`: the component `mca_btl_oib.so` is not built (nor installed).
    pub const NOT_BUILT: i32 = 6;
    /// `openib ompi`: `ompi_info` does not list the component with the enabling line set.
    pub const NOT_LISTED: i32 = 7;
}
