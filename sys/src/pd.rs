//! Protection domains (`ibv_alloc_pd`).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use std::sync::Arc;

pub(crate) struct PdInner {
    pub(crate) raw: *mut v::ibv_pd,
    pub(crate) ctx: Context,
}

// SAFETY: PDs are thread-safe verbs objects.
unsafe impl Send for PdInner {}
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: MRs, QPs and SRQs hold an Arc to this PD, so none is left.
            let rc = unsafe { lib.ibv_dealloc_pd(self.raw) };
            if rc != 0 {
                tracing::warn!(device = %self.ctx.name(), rc, "ibv_dealloc_pd failed");
            }
        }
    }
}

/// A protection domain. Cheap to clone (shared).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl ProtectionDomain {
    pub fn new(ctx: &Context) -> Result<ProtectionDomain> {
        let lib = verbs()?;
        // SAFETY: valid context.
        let raw = unsafe { lib.ibv_alloc_pd(ctx.raw()) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_alloc_pd", ctx.name()));
        }
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                raw,
                ctx: ctx.clone(),
            }),
        })
    }
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
    pub(crate) fn raw(&self) -> *mut v::ibv_pd {
        self.inner.raw
    }
}
