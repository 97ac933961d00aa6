//! Shared receive queues (`ibv_create_srq`).

use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use crate::pd::ProtectionDomain;
use crate::wr::{raw_sges, RecvRequest, Sge};
use std::sync::Arc;

pub(crate) struct SrqInner {
    raw: *mut v::ibv_srq,
    _pd: ProtectionDomain,
}

// SAFETY: SRQs are thread-safe verbs objects.
unsafe impl Send for SrqInner {}
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: QPs using this SRQ hold an Arc to it, so none is left.
            let rc = unsafe { lib.ibv_destroy_srq(self.raw) };
            if rc != 0 {
                tracing::warn!(rc, "ibv_destroy_srq failed");
            }
        }
    }
}

/// A shared receive queue. Cheap to clone (shared).
#[derive(Clone)]
pub struct SharedReceiveQueue {
    inner: Arc<SrqInner>,
}

impl SharedReceiveQueue {
    /// An SRQ of `max_wr` requests of `max_sge` entries each.
    pub fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let lib = verbs()?;
        let mut init = v::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: v::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: valid PD and attributes.
        let raw = unsafe { lib.ibv_create_srq(pd.raw(), &mut init) };
        if raw.is_null() {
            return Err(Error::last_os(
                "ibv_create_srq",
                format!("{max_wr} requests on {}", pd.context().name()),
            ));
        }
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                raw,
                _pd: pd.clone(),
            }),
        })
    }

    pub(crate) fn raw(&self) -> *mut v::ibv_srq {
        self.inner.raw
    }

    /// Posts one receive request (the body of the inline `ibv_post_srq_recv`).
    pub fn post_recv(&self, req: &RecvRequest) -> Result<()> {
        let mut sges = raw_sges(&req.sges);
        self.post_recv_list(req.wr_id, &mut sges)
    }

    /// [`SharedReceiveQueue::post_recv`] of one entry, without allocating.
    pub fn post_recv_sge(&self, wr_id: u64, sge: &Sge) -> Result<()> {
        self.post_recv_list(wr_id, &mut [sge.raw()])
    }

    fn post_recv_list(&self, wr_id: u64, sges: &mut [v::ibv_sge]) -> Result<()> {
        let mut wr = v::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
        };
        let mut bad: *mut v::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: every SGE lies inside a live MR (the caller's `Sge` came from one); the
        // provider copies the request before returning.
        let rc = unsafe {
            let ctx = (*self.inner.raw).context;
            let f = (*ctx)
                .ops
                .post_srq_recv
                .ok_or_else(|| Error::InvalidArgument {
                    verb: "ibv_post_srq_recv",
                    what: "provider has no post_srq_recv".into(),
                })?;
            f(self.inner.raw, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(Error::from_rc("ibv_post_srq_recv", rc, ""));
        }
        Ok(())
    }
}
