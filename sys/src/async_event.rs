//! Asynchronous events of a device (`ibv_get_async_event`): port up/down, QP and CQ errors.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEventKind {
    PortActive {
        port: u8,
    },
    PortError {
        port: u8,
    },
    LidChange {
        port: u8,
    },
    GidChange {
        port: u8,
    },
    /// A QP event (fatal error, path migrated, last WQE reached, ...); `qp_num` identifies it.
    Qp {
        event_type: u32,
        qp_num: u32,
    },
    /// A CQ error.
    Cq {
        event_type: u32,
    },
    /// An SRQ event (limit reached, error).
    Srq {
        event_type: u32,
    },
    DeviceFatal,
    Other {
        event_type: u32,
    },
}

impl AsyncEventKind {
    /// Whether the event leaves its queue pair unusable: a fatal error of the QP, a request or
    /// access error it took, or a failed path migration. (Communication established, SQ
    /// drained, a migrated path and the last WQE reached are notices.)
    pub fn breaks_qp(&self) -> bool {
        matches!(
            self,
            AsyncEventKind::Qp { event_type, .. } if matches!(
                *event_type,
                v::IBV_EVENT_QP_FATAL
                    | v::IBV_EVENT_QP_REQ_ERR
                    | v::IBV_EVENT_QP_ACCESS_ERR
                    | v::IBV_EVENT_PATH_MIG_ERR
            )
        )
    }

    /// Whether the event leaves every queue pair of the context unusable: the device's fatal
    /// error, a completion queue's error or a shared receive queue's error (the SRQ limit
    /// reached is a notice).
    pub fn breaks_device(&self) -> bool {
        match self {
            AsyncEventKind::DeviceFatal | AsyncEventKind::Cq { .. } => true,
            AsyncEventKind::Srq { event_type } => *event_type == v::IBV_EVENT_SRQ_ERR,
            _ => false,
        }
    }

    /// A QP event of each kind, for tests of the code that acts on events: `fatal` gives
    /// `IBV_EVENT_QP_FATAL`, otherwise `IBV_EVENT_COMM_EST`.
    pub fn qp_for_tests(fatal: bool, qp_num: u32) -> AsyncEventKind {
        AsyncEventKind::Qp {
            event_type: if fatal {
                v::IBV_EVENT_QP_FATAL
            } else {
                v::IBV_EVENT_COMM_EST
            },
            qp_num,
        }
    }

    /// An SRQ event for tests: `error` gives `IBV_EVENT_SRQ_ERR`, otherwise the limit reached.
    pub fn srq_for_tests(error: bool) -> AsyncEventKind {
        AsyncEventKind::Srq {
            event_type: if error {
                v::IBV_EVENT_SRQ_ERR
            } else {
                v::IBV_EVENT_SRQ_LIMIT_REACHED
            },
        }
    }
}

/// One async event, already acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncEvent {
    pub kind: AsyncEventKind,
    /// libibverbs' description ("port active", "local work queue catastrophic error", ...).
    pub description: String,
}

pub(crate) fn get(ctx: &Context) -> Result<AsyncEvent> {
    let lib = verbs()?;
    let mut ev = v::ibv_async_event::default();
    // SAFETY: valid context and out struct; blocks until an event arrives.
    let rc = unsafe { lib.ibv_get_async_event(ctx.raw(), &mut ev) };
    if rc != 0 {
        return Err(Error::last_os("ibv_get_async_event", ctx.name()));
    }
    let t = ev.event_type;
    // SAFETY: the union member read is the one `event_type` says is valid.
    let kind = unsafe {
        match t {
            v::IBV_EVENT_PORT_ACTIVE => AsyncEventKind::PortActive {
                port: ev.element.port_num as u8,
            },
            v::IBV_EVENT_PORT_ERR => AsyncEventKind::PortError {
                port: ev.element.port_num as u8,
            },
            v::IBV_EVENT_LID_CHANGE => AsyncEventKind::LidChange {
                port: ev.element.port_num as u8,
            },
            v::IBV_EVENT_GID_CHANGE => AsyncEventKind::GidChange {
                port: ev.element.port_num as u8,
            },
            v::IBV_EVENT_QP_FATAL
            | v::IBV_EVENT_QP_REQ_ERR
            | v::IBV_EVENT_QP_ACCESS_ERR
            | v::IBV_EVENT_COMM_EST
            | v::IBV_EVENT_SQ_DRAINED
            | v::IBV_EVENT_PATH_MIG
            | v::IBV_EVENT_PATH_MIG_ERR
            | v::IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEventKind::Qp {
                event_type: t,
                qp_num: (*ev.element.qp).qp_num,
            },
            v::IBV_EVENT_CQ_ERR => AsyncEventKind::Cq { event_type: t },
            v::IBV_EVENT_SRQ_ERR | v::IBV_EVENT_SRQ_LIMIT_REACHED => {
                AsyncEventKind::Srq { event_type: t }
            }
            v::IBV_EVENT_DEVICE_FATAL => AsyncEventKind::DeviceFatal,
            _ => AsyncEventKind::Other { event_type: t },
        }
    };
    // SAFETY: static string for any value.
    let description = unsafe { std::ffi::CStr::from_ptr(lib.ibv_event_type_str(t)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: acknowledges the event we got, once.
    unsafe { lib.ibv_ack_async_event(&mut ev) };
    Ok(AsyncEvent { kind, description })
}

/// Waits up to `timeout` for the next async event; `Ok(None)` when none arrived in time.
pub(crate) fn poll(ctx: &Context, timeout: std::time::Duration) -> Result<Option<AsyncEvent>> {
    // SAFETY: `raw` is a live context, and its async_fd stays open while `ctx` lives.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw((*ctx.raw()).async_fd) };
    let ready = crate::readiness::readable(&[fd], Some(timeout))
        .map_err(|e| Error::io("poll(async_fd)", ctx.name(), e))?;
    if ready == 0 {
        return Ok(None);
    }
    get(ctx).map(Some)
}
