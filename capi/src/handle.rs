//! The opaque handle (`openib_t`) and the plain types the header declares beside it.

use super::*;

/// The opaque transport handle (`openib_t`).
pub struct openib_t {
    /// Tells this handle's regions from another's.
    pub(crate) id: u64,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) eager_limit: usize,
    /// The thread holding `inner`'s lock (its `thread_mark`), or 0: a call from inside a
    /// callback is refused instead of deadlocking on the lock.
    pub(crate) holder: AtomicUsize,
    pub(crate) inner: Mutex<Inner>,
}

pub(crate) struct Inner {
    pub(crate) t: Transport,
    /// Completions taken from the transport and not yet polled.
    pub(crate) done: VecDeque<Completion>,
    /// Warns when `done` keeps growing: the caller never polls completions.
    pub(crate) backlog: BacklogWarning,
}

impl Inner {
    pub(crate) fn gather(&mut self) {
        self.done.extend(self.t.drain_completions());
        self.backlog.check(self.done.len());
    }
}

/// The locked transport; clears `holder` before the lock is released.
pub(crate) struct Locked<'a> {
    pub(crate) h: &'a openib_t,
    pub(crate) g: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.h.holder.store(0, Ordering::Release);
    }
}

impl openib_t {
    pub(crate) fn lock(&self) -> Result<Locked<'_>, Fail> {
        let me = thread_mark();
        if self.holder.load(Ordering::Acquire) == me {
            return Err(Fail::new(
                OPENIB_ERR_REENTRANT,
                "called from inside a receive callback of the same handle (its lock is held \
                 while openib_progress runs callbacks); copy the data and act after \
                 openib_progress returns",
            ));
        }
        let g = self.inner.lock().map_err(|_| {
            Fail::new(
                OPENIB_ERR_PANIC,
                "an earlier call panicked inside this handle; it can only be closed",
            )
        })?;
        self.holder.store(me, Ordering::Release);
        Ok(Locked { h: self, g })
    }
}

/// A registered region (`openib_mem_t`): allocated by the transport (`openib_mem_alloc`) or
/// the caller's memory registered where it is (`openib_mem_register`).
pub struct openib_mem_t {
    pub(crate) owner: u64,
    pub(crate) mr: Mr,
}

/// Whose bytes a region holds.
pub(crate) enum Mr {
    /// The transport's allocation (freed with the region).
    Alloc(Arc<MemoryRegion>),
    /// The caller's bytes (only deregistered with the region).
    Caller(Arc<ForeignRegion>),
}

impl Mr {
    /// The region as the transport's put/get/atomics take it.
    pub(crate) fn local(&self) -> LocalRegion {
        match self {
            Mr::Alloc(m) => m.clone(),
            Mr::Caller(m) => m.clone(),
        }
    }
    pub(crate) fn addr(&self) -> u64 {
        match self {
            Mr::Alloc(m) => m.addr(),
            Mr::Caller(m) => m.addr(),
        }
    }
    pub(crate) fn len(&self) -> usize {
        match self {
            Mr::Alloc(m) => m.len(),
            Mr::Caller(m) => m.len(),
        }
    }
    pub(crate) fn remote(&self) -> RemoteRegion {
        match self {
            Mr::Alloc(m) => RemoteRegion::of(m),
            Mr::Caller(m) => RemoteRegion::of(m),
        }
    }
}

/// A region's remote handle as plain bytes (`openib_remote_t`, 24 bytes, no padding).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct openib_remote_t {
    pub addr: u64,
    pub rkey: u32,
    /// Zero; keeps the layout free of padding so the struct can be sent as bytes.
    pub reserved: u32,
    pub len: u64,
}

/// A finished operation (`openib_completion_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct openib_completion_t {
    pub peer: u32,
    pub token: u64,
    pub status: c_int,
}

// The handle and regions are shared between C threads: the transport must stay `Send` (it is
// used under a mutex), and regions `Send + Sync`.
const _: fn() = || {
    pub(crate) fn shared<T: Send + Sync>() {}
    shared::<openib_t>();
    shared::<openib_mem_t>();
};

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<openib_remote_t>() == 24);
    assert!(offset_of!(openib_remote_t, rkey) == 8);
    assert!(offset_of!(openib_remote_t, len) == 16);
    assert!(size_of::<openib_completion_t>() == 24);
    assert!(offset_of!(openib_completion_t, token) == 8);
    assert!(offset_of!(openib_completion_t, status) == 16);
};

/// `void (*)(void *ctx, uint32_t src, uint8_t tag, const void *data, size_t len)`; NULL is
/// `None`.
pub type openib_recv_cb = Option<
    unsafe extern "C" fn(ctx: *mut c_void, src: u32, tag: u8, data: *const c_void, len: usize),
>;
