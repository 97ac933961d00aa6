//! The only crate of openib with `unsafe` code: libibverbs and librdmacm, loaded at run time,
//! behind RAII wrappers.
//!
//! Contracts:
//! - Nothing links against libibverbs or librdmacm: [`verbs()`] `dlopen`s `libibverbs.so.1` on
//!   first use and returns [`Error::LibraryNotFound`] (with a hint) when it is absent, so a
//!   binary built on this crate starts, and explains, on any machine.
//! - Every wrapper keeps its parent alive through an `Arc` (a QP holds its PD and CQs, a PD its
//!   device context), so Drop always releases children before parents.
//! - Wrappers are `Send + Sync`: libibverbs makes its verbs thread-safe (rdma-core documents
//!   every verb as callable from several threads; posting to one QP from several threads is
//!   serialised by the provider's own locks).
//!
//! One file per verbs object, as in libfabric's verbs provider.

pub mod ffi;

pub mod affinity;
mod ah;
mod async_event;
mod channel;
pub mod clock;
pub mod cm;
mod context;
mod cq;
mod device;
mod error;
mod library;
mod mr;
pub mod netdev;
mod pd;
pub mod pmix;
mod qp;
pub mod readiness;
mod srq;
pub mod thread;
mod wr;

pub use ah::{AddressHandle, Destination};
pub use async_event::{AsyncEvent, AsyncEventKind};
pub use channel::CompletionChannel;
pub use context::{Context, DeviceAttr, GidEntry, PortAttr};
pub use cq::{CompletionQueue, WorkCompletion};
pub use device::{devices, DeviceInfo, DeviceList};
pub use error::{Error, Result};
pub use library::{rdmacm, verbs, RDMACM_SONAME, VERBS_SONAME};
pub use mr::{Access, ForeignRegion, MemoryRegion, Region, Registration, SharedRegion};
pub use pd::ProtectionDomain;
pub use qp::{
    AhAttr, QpAttr, QpCaps, QpInitAttrs, QpState, QpType, QueuePair, RcParams, RemoteAddress,
    RECV_CHAIN,
};
pub use srq::SharedReceiveQueue;
pub use wr::{RecvRequest, SendOp, SendRequest, Sge};
