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
    /// callback uses the transport lent to it instead of deadlocking on the lock.
    pub(crate) holder: AtomicUsize,
    /// The transport lent to the receive callback running on the `holder` thread, or null
    /// (see [`Lend`]). Shared with the callbacks' closures; read only by the holder.
    pub(crate) lent: Arc<AtomicPtr<Transport>>,
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
        // Most calls of a poll loop find none: no iterator, no check then.
        if self.t.has_completions() {
            self.done.extend(self.t.drain_completions());
            self.backlog.check(self.done.len());
        }
    }
}

/// The transport of a handle, for one call.
pub(crate) enum Locked<'a> {
    /// This thread took the handle's lock; `holder` is cleared before it is released.
    Held {
        h: &'a openib_t,
        g: MutexGuard<'a, Inner>,
    },
    /// A call from inside a receive callback of this handle on this thread: the transport
    /// that the progress call running the callback lent to it ([`Lend`]).
    Lent(&'a mut Transport),
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Locked::Held { h, .. } = self {
            h.holder.store(0, Ordering::Release);
        }
    }
}

impl Locked<'_> {
    pub(crate) fn t(&mut self) -> &mut Transport {
        match self {
            Locked::Held { g, .. } => &mut g.t,
            Locked::Lent(t) => t,
        }
    }

    /// The handle's own state (completions taken, backlog); not from inside a callback,
    /// where the running progress call holds it: `call` is refused with
    /// [`OPENIB_ERR_REENTRANT`].
    pub(crate) fn inner(&mut self, call: &str) -> Result<&mut Inner, Fail> {
        match self {
            Locked::Held { g, .. } => Ok(g),
            Locked::Lent(_) => Err(Fail::new(
                OPENIB_ERR_REENTRANT,
                format!(
                    "{call} cannot run inside a receive callback of the same handle; call it \
                     after openib_progress returns"
                ),
            )),
        }
    }

    /// Moves the transport's completions into the handle's queue (inside a callback they
    /// stay in the transport until the progress call running it gathers them).
    pub(crate) fn gather(&mut self) {
        if let Locked::Held { g, .. } = self {
            g.gather();
        }
    }
}

/// Lends a receive callback's transport to the calls the callback makes on the same handle,
/// for as long as it lives (the callback's duration), through the handle's `lent` slot;
/// restores the earlier value when dropped, also when the callback unwinds. Only the thread
/// holding the handle's lock runs its callbacks and reads the slot, so no other thread sees
/// it (a per-handle slot, not a `thread_local!`: callbacks of other handles nest on their
/// own slots, and no thread-local lookup is on the path of every message).
pub(crate) struct Lend<'a> {
    slot: &'a AtomicPtr<Transport>,
    before: *mut Transport,
}

impl<'a> Lend<'a> {
    /// `t` must not be used while the loan lives (the calls reach it through the loan).
    pub(crate) fn new(slot: &'a AtomicPtr<Transport>, t: &mut Transport) -> Lend<'a> {
        Lend {
            slot,
            before: slot.swap(t as *mut Transport, Ordering::Relaxed),
        }
    }
}

impl Drop for Lend<'_> {
    fn drop(&mut self) {
        self.slot.store(self.before, Ordering::Relaxed);
    }
}

impl openib_t {
    pub(crate) fn lock(&self) -> Result<Locked<'_>, Fail> {
        let me = thread_mark();
        if self.holder.load(Ordering::Acquire) == me {
            let t = self.lent.load(Ordering::Relaxed);
            if !t.is_null() {
                // SAFETY: `t` was lent by the receive callback of this handle that runs on
                // this thread now (`Lend`, in openib_set_handler's callback), from the
                // `&mut Transport` the transport gave that callback; the progress call behind
                // it does not touch the transport until the callback returns, and the loan
                // ends before. Calls on this thread run one after another and none of them
                // runs a callback (progress inside a callback returns at once), so no other
                // reference made from `t` is alive while this one is.
                return Ok(Locked::Lent(unsafe { &mut *t }));
            }
            return Err(Fail::new(
                OPENIB_ERR_REENTRANT,
                "called on a handle whose lock this thread holds, outside its receive \
                 callback",
            ));
        }
        let g = self.inner.lock().map_err(|_| {
            Fail::new(
                OPENIB_ERR_PANIC,
                "an earlier call panicked inside this handle; it can only be closed",
            )
        })?;
        self.holder.store(me, Ordering::Release);
        Ok(Locked::Held { h: self, g })
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
