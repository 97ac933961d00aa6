//! Completion channels (`ibv_create_comp_channel`): a file descriptor that wakes on CQ events.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use std::sync::Arc;

pub(crate) struct ChannelInner {
    pub(crate) raw: *mut v::ibv_comp_channel,
    _ctx: Context,
}

// SAFETY: channels are thread-safe verbs objects.
unsafe impl Send for ChannelInner {}
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: CQs using this channel hold an Arc to it, so none is left.
            unsafe { lib.ibv_destroy_comp_channel(self.raw) };
        }
    }
}

/// A completion channel. Cheap to clone (shared).
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompletionChannel {
    pub fn new(ctx: &Context) -> Result<CompletionChannel> {
        let lib = verbs()?;
        // SAFETY: valid context.
        let raw = unsafe { lib.ibv_create_comp_channel(ctx.raw()) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_create_comp_channel", ctx.name()));
        }
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                raw,
                _ctx: ctx.clone(),
            }),
        })
    }

    /// The file descriptor to poll for readability.
    pub fn fd(&self) -> i32 {
        // SAFETY: live channel.
        unsafe { (*self.inner.raw).fd }
    }

    /// Blocks until a CQ armed with [`crate::CompletionQueue::req_notify`] has an event, acks
    /// it, and returns the CQ's handle (its `cq_context` is not used by openib).
    pub fn wait(&self) -> Result<()> {
        let lib = verbs()?;
        let mut cq: *mut v::ibv_cq = std::ptr::null_mut();
        let mut cq_ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: valid channel and out pointers.
        let rc = unsafe { lib.ibv_get_cq_event(self.inner.raw, &mut cq, &mut cq_ctx) };
        if rc != 0 {
            return Err(Error::last_os("ibv_get_cq_event", ""));
        }
        // SAFETY: `cq` came from ibv_get_cq_event; one event is acked.
        unsafe { lib.ibv_ack_cq_events(cq, 1) };
        Ok(())
    }
}
