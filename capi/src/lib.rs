//! The C ABI of the openib transport: `libopenib.so`, declared by `include/openib.h`, which is
//! the contract (docs/CAPI.md explains building, loading, threads, ownership and errors).
//!
//! A thin layer over [`openib_rs::transport::Transport`]: each entry point checks its pointers,
//! locks the handle, calls one Rust method and turns the result into an error code. Adding a
//! transport method is one `extern "C"` function in the file of its concern plus its declaration
//! in the header (the `capi_abi` test checks that both agree).
//!
//! One file per concern: [`error`] (codes, the last error, the `call` wrapper), [`handle`] (the
//! handle and the header's plain types), `ptr` (pointer helpers), [`life`] (open to close,
//! progress and completions), [`send`], [`mem`] (registered regions), [`rdma`] (put, get,
//! atomics).
//!
//! This crate is the top layer and the outward FFI boundary (`capi/`, beside the crates it
//! uses; with `sys/`, the only code allowed `unsafe`). The unsafe code is limited to: turning the caller's pointers into references (each
//! null-checked first, in the helpers of `ptr`), writing through out-pointers, turning boxes into
//! pointers and back (open/close, mem_alloc/mem_free), and calling the caller's receive
//! callback. No panic crosses the boundary: every entry point runs inside `error::call`, which
//! catches it and returns [`OPENIB_ERR_PANIC`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![allow(non_camel_case_types)]

use openib_ports::hw::HwError;
use openib_rs::modex::exchange::ExchangeMode;
use openib_rs::ping::{PingConfig, PingError};
use openib_rs::transport::{
    AtomicOp, BacklogWarning, Completion, LocalRegion, RemoteRegion, Transport, TransportConfig,
    TransportError,
};
use openib_sys::Region;
use openib_sys::{ForeignRegion, MemoryRegion};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub mod error;
pub mod group;
pub mod handle;
pub mod host;
pub mod life;
pub mod mem;
mod ptr;
pub mod rdma;
pub mod send;
#[cfg(test)]
mod tests;

pub use error::*;
pub use group::*;
pub use handle::*;
pub use host::*;
pub use life::*;
pub use mem::*;
use ptr::*;
pub use rdma::*;
pub use send::*;
