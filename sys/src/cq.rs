//! Completion queues (`ibv_create_cq`, `ibv_poll_cq`).

use crate::channel::CompletionChannel;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use std::sync::Arc;

pub(crate) struct CqInner {
    pub(crate) raw: *mut v::ibv_cq,
    _ctx: Context,
    _channel: Option<CompletionChannel>,
}

// SAFETY: CQs are thread-safe verbs objects (providers lock poll_cq).
unsafe impl Send for CqInner {}
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: QPs using this CQ hold an Arc to it, so none is left.
            let rc = unsafe { lib.ibv_destroy_cq(self.raw) };
            if rc != 0 {
                tracing::warn!(rc, "ibv_destroy_cq failed");
            }
        }
    }
}

/// A completion queue. Cheap to clone (shared).
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

/// One work completion, copied out of the CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    /// `IBV_WC_SUCCESS` is 0; see [`WorkCompletion::status_str`].
    pub status: u32,
    /// `IBV_WC_SEND`, `IBV_WC_RDMA_WRITE`, ..., `IBV_WC_RECV` (128), ...
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data in host order, when `wc_flags` has `IBV_WC_WITH_IMM`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub slid: u16,
}

impl WorkCompletion {
    pub fn is_success(&self) -> bool {
        self.status == v::IBV_WC_SUCCESS
    }
    /// Whether this request was flushed because its QP was already in error (the error that
    /// caused it is reported by another completion).
    pub fn is_flush(&self) -> bool {
        self.status == v::IBV_WC_WR_FLUSH_ERR
    }

    /// The immediate data (host order) of a received send or write with immediate; `None`
    /// when the request carried none.
    pub fn imm(&self) -> Option<u32> {
        (self.wc_flags & v::IBV_WC_WITH_IMM != 0).then_some(self.imm_data)
    }

    /// The libibverbs text for the status ("success", "transport retry counter exceeded", ...).
    pub fn status_str(&self) -> String {
        match verbs() {
            // SAFETY: ibv_wc_status_str returns a static string for any value.
            Ok(lib) => unsafe { std::ffi::CStr::from_ptr(lib.ibv_wc_status_str(self.status)) }
                .to_string_lossy()
                .into_owned(),
            Err(_) => format!("status {}", self.status),
        }
    }
}

impl CompletionQueue {
    /// A CQ of at least `cqe` entries, optionally tied to a completion channel.
    pub fn new(
        ctx: &Context,
        cqe: i32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        let lib = verbs()?;
        let ch = channel.map(|c| c.inner.raw).unwrap_or(std::ptr::null_mut());
        // SAFETY: valid context; channel is NULL or live (kept alive by the Arc we store).
        let raw = unsafe { lib.ibv_create_cq(ctx.raw(), cqe, std::ptr::null_mut(), ch, 0) };
        if raw.is_null() {
            return Err(Error::last_os(
                "ibv_create_cq",
                format!("{cqe} entries on {}", ctx.name()),
            ));
        }
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                raw,
                _ctx: ctx.clone(),
                _channel: channel.cloned(),
            }),
        })
    }

    /// Polls up to `max` (at most 32 per call) completions, appending them to `out`; returns
    /// how many were appended.
    #[inline]
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        const BATCH: usize = 32;
        // Not zeroed: this runs on every progress call of a busy-polling transport, and the
        // provider writes the entries it returns.
        let mut wcs: [std::mem::MaybeUninit<v::ibv_wc>; BATCH] =
            [std::mem::MaybeUninit::uninit(); BATCH];
        let want = max.min(BATCH) as i32;
        // SAFETY: `poll_cq` is the provider's op (the body of the inline ibv_poll_cq); `wcs` has
        // room for `want` entries (`MaybeUninit<T>` has `T`'s layout).
        let n = unsafe {
            let ctx = (*self.inner.raw).context;
            let poll = (*ctx).ops.poll_cq.ok_or_else(|| Error::InvalidArgument {
                verb: "ibv_poll_cq",
                what: "provider has no poll_cq".into(),
            })?;
            poll(self.inner.raw, want, wcs.as_mut_ptr().cast())
        };
        if n < 0 {
            return Err(Error::from_rc("ibv_poll_cq", n, ""));
        }
        for wc in &wcs[..n as usize] {
            // SAFETY: the provider initialised the first `n` entries.
            let wc = unsafe { wc.assume_init_ref() };
            out.push(WorkCompletion {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                vendor_err: wc.vendor_err,
                byte_len: wc.byte_len,
                // SAFETY: plain integer union.
                imm_data: u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data }),
                qp_num: wc.qp_num,
                src_qp: wc.src_qp,
                wc_flags: wc.wc_flags,
                slid: wc.slid,
            });
        }
        Ok(n as usize)
    }

    /// Whether `other` is this same queue (a clone of it).
    pub fn same_as(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Arms the CQ so its channel fires on the next completion.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the provider's op, as the inline ibv_req_notify_cq calls it.
        let rc = unsafe {
            let ctx = (*self.inner.raw).context;
            let f = (*ctx)
                .ops
                .req_notify_cq
                .ok_or_else(|| Error::InvalidArgument {
                    verb: "ibv_req_notify_cq",
                    what: "provider has no req_notify_cq".into(),
                })?;
            f(self.inner.raw, solicited_only as i32)
        };
        if rc != 0 {
            return Err(Error::from_rc("ibv_req_notify_cq", rc, ""));
        }
        Ok(())
    }

    pub(crate) fn raw(&self) -> *mut v::ibv_cq {
        self.inner.raw
    }
}
