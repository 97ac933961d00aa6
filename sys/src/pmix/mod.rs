//! A safe PMIx client: libpmix (PMIx 4, from Debian's libpmix-dev) loaded at run time.
//!
//! PMIx is the interface Open MPI's `mpirun` and Slurm's `srun --mpi=pmix` serve to the
//! processes they launch: rank, job size, node-local peers and hostnames, and a key-value store
//! with put, commit, fence and get. [`PmixClient`] wraps it:
//!
//! - **Loading.** Nothing links against libpmix: [`library()`] `dlopen`s `libpmix.so.2` (or the
//!   file named by `OPENIB_LIBPMIX`) on first use, and answers [`Error::LibraryNotFound`] with an
//!   install hint when it is absent. The library then stays loaded for the life of the process
//!   (PMIx runs a progress thread; unloading it would pull the code from under that thread).
//! - **Singletons.** Started without a launcher, `PMIx_Init` returns `PMIX_ERR_UNREACH` (-25) but
//!   fills in a process `singleton.<host>.<pid>`, rank 0, and job-level data (size 1, local peers
//!   "0", hostname). [`PmixClient::init`] accepts that as a job of size 1
//!   ([`PmixClient::is_singleton`]); put, commit, fence and get then work locally.
//! - **Timeouts.** PMIx timeouts (`PMIX_TIMEOUT`) are whole seconds: a [`Duration`] is rounded
//!   up (at least 1 s). fence and get are issued non-blocking (`PMIx_Fence_nb`, `PMIx_Get_nb`) and
//!   waited for with a backstop of the PMIx timeout plus [`BACKSTOP_GRACE`], so a server that
//!   ignores `PMIX_TIMEOUT` cannot hang the caller; either way the error says
//!   [`Error::is_timeout`].
//! - **Thread safety.** [`PmixClient`] is `Send + Sync`. The PMIx client library is thread-safe:
//!   every API call either works under its global lock or is "thread-shifted" into the PMIx
//!   progress thread, and completion callbacks run on that thread. The callbacks here only copy
//!   the result into a heap slot shared (by `Arc`) with the waiting caller; the slot, and every
//!   array handed to a non-blocking call, stay alive until the callback ran, even when the caller
//!   gave up on a backstop. `PMIx_Init`/`PMIx_Finalize` are reference-counted by libpmix, so
//!   several clients may coexist; each `Drop` calls `PMIx_Finalize` once.
//!
//! pmix.h's macros and static inlines (`PMIX_PROC_LOAD`, `PMIX_INFO_LOAD`, `PMIX_VALUE_RELEASE`,
//! ...) are not in the library; their equivalents are written here in Rust (see `value.rs`).
//!
//! - **Dead peers.** [`PmixClient::init`] registers an event handler for process-termination
//!   events ([`TERMINATION_CODES`], event.rs) that records the dead ranks in a set inside the
//!   client ([`PmixClient::failed_ranks`]); fences over the survivors use [`Procs::Ranks`].

// The bindings live in sys/src/ffi/pmix.rs beside the verbs ones; they are mounted here so that
// ffi/mod.rs (shared with other work) needs no change.
#[rustfmt::skip]
#[path = "../ffi/pmix.rs"]
pub mod ffi;

mod client;
mod error;
mod event;
mod library;
mod op;
mod value;

pub use client::{FenceOptions, GetMode, GetOptions, PmixClient, Procs, Scope, BACKSTOP_GRACE};
pub use error::{Error, Result};
pub use event::TERMINATION_CODES;
pub use library::{library, version, PMIX_ENV, PMIX_SONAME};
pub use value::{Value, MAX_KEY_LEN, RANK_WILDCARD};

use std::time::Duration;

/// PMIx's `PMIX_ERR_TIMEOUT`.
pub const STATUS_TIMEOUT: i32 = ffi::PMIX_ERR_TIMEOUT;
/// PMIx's `PMIX_ERR_NOT_FOUND`.
pub const STATUS_NOT_FOUND: i32 = ffi::PMIX_ERR_NOT_FOUND;
/// PMIx's `PMIX_ERR_UNREACH`: no server (a singleton start, or the server went away).
pub const STATUS_UNREACH: i32 = ffi::PMIX_ERR_UNREACH;

/// A [`Duration`] as PMIx's `PMIX_TIMEOUT` (whole seconds, rounded up, at least 1; PMIx reads 0
/// as "no timeout").
pub fn timeout_secs(d: Duration) -> i32 {
    let mut s = d.as_secs();
    if d.subsec_nanos() > 0 || s == 0 {
        s += 1;
    }
    s.min(i32::MAX as u64) as i32
}
