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
    /// A new channel; its descriptor is non-blocking, so draining events never blocks.
    pub fn new(ctx: &Context) -> Result<CompletionChannel> {
        let lib = verbs()?;
        // SAFETY: valid context.
        let raw = unsafe { lib.ibv_create_comp_channel(ctx.raw()) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_create_comp_channel", ctx.name()));
        }
        let ch = CompletionChannel {
            inner: Arc::new(ChannelInner {
                raw,
                _ctx: ctx.clone(),
            }),
        };
        let fd = ch.fd();
        // SAFETY: fcntl on the channel's own open descriptor.
        let rc = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                flags
            } else {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(Error::last_os("fcntl(O_NONBLOCK)", ctx.name()));
        }
        Ok(ch)
    }

    /// The file descriptor to poll for readability.
    pub fn fd(&self) -> i32 {
        // SAFETY: live channel.
        unsafe { (*self.inner.raw).fd }
    }

    /// Blocks until a CQ armed with [`crate::CompletionQueue::req_notify`] has an event, then
    /// acks every pending event.
    pub fn wait(&self) -> Result<()> {
        while self.wait_timeout(None)? == 0 {}
        Ok(())
    }

    /// Waits up to `timeout` (`None`: for ever) for events of CQs armed with
    /// [`crate::CompletionQueue::req_notify`], acks every pending one and returns how many
    /// there were (0: timed out, or interrupted by a signal). A CQ must be armed again after
    /// its event to fire again.
    pub fn wait_timeout(&self, timeout: Option<std::time::Duration>) -> Result<usize> {
        // SAFETY: the channel (and so its descriptor) lives as long as `self`.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        let ready = crate::readiness::readable(&[fd], timeout)
            .map_err(|e| Error::io("poll(completion channel)", "", e))?;
        if ready == 0 {
            return Ok(0);
        }
        self.ack_pending()
    }

    /// Acks every event queued on the channel without blocking; returns how many.
    pub fn ack_pending(&self) -> Result<usize> {
        let lib = verbs()?;
        let mut n = 0;
        loop {
            let mut cq: *mut v::ibv_cq = std::ptr::null_mut();
            let mut cq_ctx: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: valid channel and out pointers; the descriptor is non-blocking.
            let rc = unsafe { lib.ibv_get_cq_event(self.inner.raw, &mut cq, &mut cq_ctx) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                return match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(n),
                    _ => Err(Error::last_os("ibv_get_cq_event", "")),
                };
            }
            // SAFETY: `cq` came from ibv_get_cq_event; one event is acked.
            unsafe { lib.ibv_ack_cq_events(cq, 1) };
            n += 1;
        }
    }
}
