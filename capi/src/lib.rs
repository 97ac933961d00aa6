//! The C ABI of the openib transport: `libopenib.so`, declared by `include/openib.h`, which is
//! the contract (docs/CAPI.md explains building, loading, threads, ownership and errors).
//!
//! A thin layer over [`openib_rs::transport::Transport`]: each entry point checks its pointers,
//! locks the handle, calls one Rust method and turns the result into an error code. Adding a
//! transport method is one `extern "C"` function here plus its declaration in the header (the
//! `capi_abi` test checks that both agree).
//!
//! This crate is the top layer and the outward FFI boundary (`capi/`, beside the crates it
//! uses; with `sys/`, the only code allowed `unsafe`). The unsafe code is limited to: turning the caller's pointers into references (each
//! null-checked first, in the helpers below), writing through out-pointers, turning boxes into
//! pointers and back (open/close, mem_alloc/mem_free), and calling the caller's receive
//! callback. No panic crosses the boundary: every entry point runs inside [`call`], which
//! catches it and returns [`OPENIB_ERR_PANIC`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![allow(non_camel_case_types)]

use openib_ports::hw::HwError;
use openib_rs::modex::exchange::ExchangeMode;
use openib_rs::ping::{PingConfig, PingError};
use openib_rs::transport::{
    AtomicOp, BacklogWarning, Completion, RemoteRegion, Transport, TransportConfig, TransportError,
};
use openib_sys::Region;
use openib_sys::{ForeignRegion, MemoryRegion};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

// ---- error codes (include/openib.h, enum openib_error) ----------------------------------------

pub const OPENIB_OK: c_int = 0;
pub const OPENIB_ERR_INVALID: c_int = -1;
pub const OPENIB_ERR_NO_VERBS: c_int = -2;
pub const OPENIB_ERR_NO_DEVICE: c_int = -3;
pub const OPENIB_ERR_SETUP: c_int = -4;
pub const OPENIB_ERR_RUNTIME: c_int = -5;
pub const OPENIB_ERR_NO_PATH: c_int = -6;
pub const OPENIB_ERR_BAD_PEER: c_int = -7;
pub const OPENIB_ERR_ENDPOINT_FAILED: c_int = -8;
pub const OPENIB_ERR_TOO_LARGE: c_int = -9;
pub const OPENIB_ERR_RANGE: c_int = -10;
pub const OPENIB_ERR_TIMEOUT: c_int = -11;
pub const OPENIB_ERR_VERBS: c_int = -12;
pub const OPENIB_ERR_REENTRANT: c_int = -13;
pub const OPENIB_ERR_PANIC: c_int = -14;
pub const OPENIB_ERR_OTHER: c_int = -15;
pub const OPENIB_ERR_BUSY: c_int = -16;

/// Every code, its header name and what `openib_strerror` says.
const CODES: &[(c_int, &str, &CStr)] = &[
    (OPENIB_OK, "OPENIB_OK", c"success"),
    (
        OPENIB_ERR_INVALID,
        "OPENIB_ERR_INVALID",
        c"invalid argument",
    ),
    (
        OPENIB_ERR_NO_VERBS,
        "OPENIB_ERR_NO_VERBS",
        c"libibverbs cannot be loaded",
    ),
    (
        OPENIB_ERR_NO_DEVICE,
        "OPENIB_ERR_NO_DEVICE",
        c"no RDMA device",
    ),
    (
        OPENIB_ERR_SETUP,
        "OPENIB_ERR_SETUP",
        c"transport setup failed",
    ),
    (
        OPENIB_ERR_RUNTIME,
        "OPENIB_ERR_RUNTIME",
        c"runtime or modex exchange failed",
    ),
    (
        OPENIB_ERR_NO_PATH,
        "OPENIB_ERR_NO_PATH",
        c"peer not reachable",
    ),
    (
        OPENIB_ERR_BAD_PEER,
        "OPENIB_ERR_BAD_PEER",
        c"peer rank out of range",
    ),
    (
        OPENIB_ERR_ENDPOINT_FAILED,
        "OPENIB_ERR_ENDPOINT_FAILED",
        c"endpoint failed",
    ),
    (
        OPENIB_ERR_TOO_LARGE,
        "OPENIB_ERR_TOO_LARGE",
        c"message too large",
    ),
    (
        OPENIB_ERR_RANGE,
        "OPENIB_ERR_RANGE",
        c"range outside the region",
    ),
    (OPENIB_ERR_TIMEOUT, "OPENIB_ERR_TIMEOUT", c"timed out"),
    (OPENIB_ERR_VERBS, "OPENIB_ERR_VERBS", c"verbs call failed"),
    (
        OPENIB_ERR_REENTRANT,
        "OPENIB_ERR_REENTRANT",
        c"called from inside the handle's own callback",
    ),
    (OPENIB_ERR_PANIC, "OPENIB_ERR_PANIC", c"internal panic"),
    (
        OPENIB_ERR_OTHER,
        "OPENIB_ERR_OTHER",
        c"other transport error",
    ),
    (
        OPENIB_ERR_BUSY,
        "OPENIB_ERR_BUSY",
        c"cannot post now; retry after progress",
    ),
];

/// How long `openib_close` flushes before it releases the handle anyway.
const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed call: its code and the message `openib_last_error` returns.
#[derive(Debug)]
struct Fail {
    code: c_int,
    msg: String,
}

impl Fail {
    fn new(code: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

fn null(arg: &str) -> Fail {
    Fail::new(OPENIB_ERR_INVALID, format!("{arg} is NULL"))
}

fn verbs_code(e: &openib_sys::Error) -> c_int {
    match e {
        openib_sys::Error::LibraryNotFound { .. } => OPENIB_ERR_NO_VERBS,
        _ => OPENIB_ERR_VERBS,
    }
}

/// The code of a transport error. New `TransportError` variants land in the last arm until
/// they get a code of their own.
fn code_of(e: &TransportError) -> c_int {
    #[allow(unreachable_patterns)]
    match e {
        TransportError::Wireup(PingError::Setup(_)) => OPENIB_ERR_SETUP,
        TransportError::Wireup(PingError::Runtime(_) | PingError::Exchange(_)) => {
            OPENIB_ERR_RUNTIME
        }
        TransportError::Wireup(PingError::Verbs(v)) | TransportError::Verbs(v) => verbs_code(v),
        TransportError::NoPath { .. } => OPENIB_ERR_NO_PATH,
        TransportError::EndpointFailed { .. } | TransportError::Peer { .. } => {
            OPENIB_ERR_ENDPOINT_FAILED
        }
        TransportError::TooLarge { .. } => OPENIB_ERR_TOO_LARGE,
        TransportError::ReservedTag => OPENIB_ERR_INVALID,
        TransportError::BadPeer { .. } => OPENIB_ERR_BAD_PEER,
        TransportError::Timeout { .. } => OPENIB_ERR_TIMEOUT,
        TransportError::Range { .. } => OPENIB_ERR_RANGE,
        TransportError::Misaligned { .. } => OPENIB_ERR_INVALID,
        TransportError::Setting(_) => OPENIB_ERR_SETUP,
        TransportError::Busy { .. } => OPENIB_ERR_BUSY,
        _ => OPENIB_ERR_OTHER,
    }
}

impl From<TransportError> for Fail {
    fn from(e: TransportError) -> Fail {
        Fail::new(code_of(&e), e.to_string())
    }
}

/// `Transport::open` failed: says "no device" or "no libibverbs" the way `openib ports` does
/// (exit codes 4 and 3) when that is why.
fn open_failure(e: TransportError) -> Fail {
    let f = Fail::from(e);
    if !matches!(
        f.code,
        OPENIB_ERR_SETUP | OPENIB_ERR_VERBS | OPENIB_ERR_NO_VERBS
    ) {
        return f;
    }
    let hint = openib_rs::cli::ports::NO_DEVICE_HINT;
    match openib_ports::hw::read_topology() {
        Err(HwError::NoVerbs(e)) => Fail::new(OPENIB_ERR_NO_VERBS, e.to_string()),
        Err(e @ HwError::DeviceList(_)) => Fail::new(OPENIB_ERR_NO_DEVICE, format!("{e}; {hint}")),
        Ok(scan) if scan.topology.devices.is_empty() => {
            let why = if scan.problems.is_empty() {
                String::new()
            } else {
                format!(" ({})", scan.problems.join("; "))
            };
            Fail::new(OPENIB_ERR_NO_DEVICE, format!("{hint}{why}"))
        }
        Ok(_) => f,
    }
}

// ---- last error and the entry-point wrapper ---------------------------------------------------

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Its address identifies this thread (see `openib_t::holder`).
    static THREAD_MARK: u8 = const { 0 };
}

fn set_last_error(msg: String) {
    // A NUL inside the message would cut it: replace it.
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

fn thread_mark() -> usize {
    THREAD_MARK.with(|m| m as *const u8 as usize)
}

/// Runs one entry point: a panic becomes [`OPENIB_ERR_PANIC`], an error its code; both set the
/// thread's last error, prefixed with the function's name.
fn call(func: &str, f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {}", e.msg));
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown payload".into());
            set_last_error(format!("{func}: internal panic: {what}"));
            OPENIB_ERR_PANIC
        }
    }
}

// ---- the handle -------------------------------------------------------------------------------

/// The opaque transport handle (`openib_t`).
pub struct openib_t {
    /// Tells this handle's regions from another's.
    id: u64,
    rank: u32,
    size: u32,
    eager_limit: usize,
    /// The thread holding `inner`'s lock (its `thread_mark`), or 0: a call from inside a
    /// callback is refused instead of deadlocking on the lock.
    holder: AtomicUsize,
    inner: Mutex<Inner>,
}

struct Inner {
    t: Transport,
    /// Completions taken from the transport and not yet polled.
    done: VecDeque<Completion>,
    /// Warns when `done` keeps growing: the caller never polls completions.
    backlog: BacklogWarning,
}

impl Inner {
    fn gather(&mut self) {
        self.done.extend(self.t.drain_completions());
        self.backlog.check(self.done.len());
    }
}

/// The locked transport; clears `holder` before the lock is released.
struct Locked<'a> {
    h: &'a openib_t,
    g: MutexGuard<'a, Inner>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.h.holder.store(0, Ordering::Release);
    }
}

impl openib_t {
    fn lock(&self) -> Result<Locked<'_>, Fail> {
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

/// A registered region allocated by the transport (`openib_mem_t`).
pub struct openib_mem_t {
    owner: u64,
    mr: Arc<MemoryRegion>,
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
    fn shared<T: Send + Sync>() {}
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

// ---- pointer helpers: the only places that turn C pointers into references --------------------

/// # Safety
/// `t` is NULL or a handle from `openib_open` that is not closed.
unsafe fn handle<'a>(t: *const openib_t) -> Result<&'a openib_t, Fail> {
    // SAFETY: non-NULL `t` points to a live handle (the caller's contract).
    unsafe { t.as_ref() }.ok_or_else(|| null("t"))
}

/// # Safety
/// `m` is NULL or a region from `openib_mem_alloc` that is not freed.
unsafe fn region<'a>(m: *const openib_mem_t) -> Result<&'a openib_mem_t, Fail> {
    // SAFETY: non-NULL `m` points to a live region (the caller's contract).
    unsafe { m.as_ref() }.ok_or_else(|| null("mem"))
}

/// # Safety
/// `p` is NULL or valid for reading `len` bytes for the returned lifetime.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null("buf"));
    }
    if len > isize::MAX as usize {
        return Err(Fail::new(
            OPENIB_ERR_INVALID,
            format!("len {len} is too large"),
        ));
    }
    // SAFETY: non-NULL, `len` readable bytes (the caller's contract), len <= isize::MAX.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `n` ranks at `p` (NULL allowed when `n` is 0).
///
/// # Safety
/// `p` is NULL or valid for reading `n` `u32`s for the returned lifetime.
unsafe fn ranks<'a>(p: *const u32, n: usize) -> Result<&'a [u32], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null("peers"));
    }
    if !p.is_aligned() || n > isize::MAX as usize / std::mem::size_of::<u32>() {
        return Err(Fail::new(
            OPENIB_ERR_INVALID,
            format!("peers is misaligned or n {n} is too large"),
        ));
    }
    // SAFETY: non-NULL, aligned, `n` readable u32s (the caller's contract), size <= isize::MAX.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes `v` to `out`, which must not be NULL.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
unsafe fn put_out<T>(out: *mut T, v: T, name: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL and writable (the caller's contract); `write` needs no valid old value.
    unsafe { out.write(v) };
    Ok(())
}

/// Writes `v` to `out` unless it is NULL (optional out-parameters such as tokens).
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
unsafe fn put_opt<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-NULL and writable (the caller's contract).
        unsafe { out.write(v) };
    }
}

/// # Safety
/// `r` is NULL or points to a readable `openib_remote_t`.
unsafe fn remote_of(r: *const openib_remote_t) -> Result<RemoteRegion, Fail> {
    // SAFETY: non-NULL `r` is readable (the caller's contract); the struct is plain data.
    let r = unsafe { r.as_ref() }.ok_or_else(|| null("remote"))?;
    Ok(RemoteRegion {
        addr: r.addr,
        rkey: r.rkey,
        len: r.len,
    })
}

/// A region may only be used with the handle that allocated it.
fn owned_by(m: &openib_mem_t, h: &openib_t) -> Result<(), Fail> {
    if m.owner != h.id {
        return Err(Fail::new(
            OPENIB_ERR_INVALID,
            "mem was allocated by another handle",
        ));
    }
    Ok(())
}

fn to_int(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Logs go to stderr as for the CLI: warnings by default, `OPENIB_LOG` (an `EnvFilter`
/// directive) for more. Installed once per process; an existing subscriber is kept.
fn init_logging() {
    let filter = std::env::var("OPENIB_LOG")
        .ok()
        .and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

// ---- entry points -----------------------------------------------------------------------------

/// Opens the transport: connects to the runtime of the environment (`openib run`, PMIx, or a
/// singleton), reads the transport settings from the environment and wires up (port
/// discovery, CPC services, modex exchange; a collective over all ranks).
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn openib_open(out: *mut *mut openib_t) -> c_int {
    call("openib_open", || {
        // SAFETY: the caller's contract on `out`.
        unsafe { put_out(out, std::ptr::null_mut(), "out") }?;
        init_logging();
        let rt = openib_rs::runtime::connect()
            .map_err(|e| Fail::new(OPENIB_ERR_RUNTIME, e.to_string()))?;
        let cfg = TransportConfig::from_env(PingConfig {
            derive: openib_ports::DeriveConfig::default(),
            cpc: None,
            timeout: Duration::from_secs(60),
            mode: ExchangeMode::default(),
        })?;
        let t = Transport::open(rt, cfg).map_err(open_failure)?;
        let h = Box::new(openib_t {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rank: t.rank(),
            size: t.size(),
            eager_limit: t.eager_limit(),
            holder: AtomicUsize::new(0),
            inner: Mutex::new(Inner {
                t,
                done: VecDeque::new(),
                backlog: BacklogWarning::default(),
            }),
        });
        // SAFETY: as above.
        unsafe { put_out(out, Box::into_raw(h), "out") }?;
        Ok(OPENIB_OK)
    })
}

/// Closes the handle: [`Transport::finalize`] flushes (up to [`CLOSE_FLUSH_TIMEOUT`]), then
/// releases every connection, queue pair, cached registration and the port, and the handle is
/// freed whatever the flush returned; a flush error is the result. Completions not polled yet
/// are dropped. Regions still allocated stay valid until `openib_mem_free`. NULL is a no-op.
///
/// # Safety
/// `t` is NULL or a handle from `openib_open`, not closed before, that no other thread uses
/// during or after this call.
#[no_mangle]
pub unsafe extern "C" fn openib_close(t: *mut openib_t) -> c_int {
    call("openib_close", || {
        if t.is_null() {
            return Ok(OPENIB_OK);
        }
        {
            // SAFETY: `t` is a live handle (the caller's contract).
            let h = unsafe { handle(t) }?;
            if h.holder.load(Ordering::Acquire) == thread_mark() {
                return Err(Fail::new(
                    OPENIB_ERR_REENTRANT,
                    "cannot close a handle from inside its own receive callback",
                ));
            }
        }
        // SAFETY: `t` came from Box::into_raw in openib_open and is not used after this.
        let h = unsafe { Box::from_raw(t) };
        match h.inner.into_inner() {
            // finalize releases everything even when its flush fails (then that is the error).
            Ok(inner) => {
                inner.t.finalize(CLOSE_FLUSH_TIMEOUT)?;
            }
            // A poisoned lock (an earlier call panicked, OPENIB_ERR_PANIC): the transport's
            // state is not trusted to flush; release everything without it.
            Err(p) => drop(p.into_inner()),
        }
        Ok(OPENIB_OK)
    })
}

/// This process's rank, or a negative error.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_rank(t: *const openib_t) -> c_int {
    call("openib_rank", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        Ok(to_int(h.rank as usize))
    })
}

/// The number of ranks, or a negative error.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_size(t: *const openib_t) -> c_int {
    call("openib_size", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        Ok(to_int(h.size as usize))
    })
}

/// The largest payload of an eager send, or a negative error.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_eager_limit(t: *const openib_t) -> c_int {
    call("openib_eager_limit", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        Ok(to_int(h.eager_limit))
    })
}

/// Sets (or replaces) the receive callback of `tag` (1..=255).
///
/// # Safety
/// `t` is NULL or a live handle; `cb` may be called with `ctx` from any thread that calls
/// `openib_progress` (or flush/connect_all) on `t`, until the handle is closed or the tag's
/// callback replaced.
#[no_mangle]
pub unsafe extern "C" fn openib_set_handler(
    t: *mut openib_t,
    tag: u8,
    cb: openib_recv_cb,
    ctx: *mut c_void,
) -> c_int {
    call("openib_set_handler", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        let cb = cb.ok_or_else(|| null("cb"))?;
        // Kept as an address: the transport's handlers must be Send, and the caller promised
        // that `ctx` may be used from the threads that progress.
        let ctx = ctx as usize;
        let mut l = h.lock()?;
        l.g.t.on_tag(
            tag,
            Box::new(move |src, data: &[u8]| {
                // SAFETY: the caller of openib_set_handler promised that `cb` may be called
                // with `ctx`; `data` is valid for `data.len()` bytes during the call.
                unsafe {
                    cb(
                        ctx as *mut c_void,
                        src,
                        tag,
                        data.as_ptr().cast(),
                        data.len(),
                    )
                }
            }),
        )?;
        Ok(OPENIB_OK)
    })
}

/// Sends `len` bytes of `buf` with `tag` to `peer`, any size: eager up to the eager limit,
/// rendezvous above it (copied either way: `buf` may be reused at once).
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed); `token_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        let token = h.lock()?.g.t.send(peer, tag, data)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Sends `mem[offset..offset+len]` with `tag` to `peer`; above the eager limit without a copy
/// (the bytes go from the region by RDMA), so they must not change until the completion.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `token_out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send_mem(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    mem: *mut openib_mem_t,
    offset: usize,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send_mem", || {
        // SAFETY: the caller's contract on `t` and `mem`.
        let (h, m) = unsafe { (handle(t)?, region(mem)?) };
        owned_by(m, h)?;
        let token = h.lock()?.g.t.send_region(peer, tag, &m.mr, offset, len)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Sends `len` bytes of `buf` with `tag` to `peer` like [`openib_send`], but above the eager
/// limit without a copy: `buf` is registered for this transfer (deregistered when it ends) and
/// the peer takes the bytes by RDMA, so they must stay allocated and unchanged until the
/// completion. Up to the eager limit the bytes are copied before the call returns.
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed) and, above the eager limit, stays allocated and unchanged until the completion of
/// the returned token; `token_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send_nocopy(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send_nocopy", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        let mut g = h.lock()?;
        let token = if len <= h.eager_limit {
            g.g.t.send(peer, tag, data)?
        } else {
            // SAFETY: the caller's contract: `buf` stays readable and unchanged until the
            // completion, and the transport drops the region when the transfer ends.
            let region =
                unsafe { ForeignRegion::register(g.g.t.protection_domain(), data.as_ptr(), len) }
                    .map_err(TransportError::from)?;
            g.g.t.send_foreign(peer, tag, region)?
        };
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Immediate send of at most the eager limit: posted now, or [`OPENIB_ERR_BUSY`] (not
/// connected yet, earlier operations queued, no credit or send slot). No token, no completion.
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed).
#[no_mangle]
pub unsafe extern "C" fn openib_sendi(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
) -> c_int {
    call("openib_sendi", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        h.lock()?.g.t.sendi(peer, tag, data)?;
        Ok(OPENIB_OK)
    })
}

/// Allocates and registers `len` zeroed bytes for put/get (8-byte aligned).
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_alloc(
    t: *mut openib_t,
    len: usize,
    out: *mut *mut openib_mem_t,
) -> c_int {
    call("openib_mem_alloc", || {
        // SAFETY: the caller's contract on `out` and `t`.
        unsafe { put_out(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: as above.
        let h = unsafe { handle(t) }?;
        if len == 0 {
            return Err(Fail::new(OPENIB_ERR_INVALID, "len is 0"));
        }
        let mr = h.lock()?.g.t.register(len)?;
        let m = Box::new(openib_mem_t { owner: h.id, mr });
        // SAFETY: as above.
        unsafe { put_out(out, Box::into_raw(m), "out") }?;
        Ok(OPENIB_OK)
    })
}

/// The region's memory (`openib_mem_len` bytes), or NULL for a NULL region.
///
/// # Safety
/// `mem` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_ptr(mem: *const openib_mem_t) -> *mut c_void {
    // SAFETY: the caller's contract on `mem`.
    match catch_unwind(|| unsafe { region(mem) }.map(|m| m.mr.addr())) {
        // The address of the region's buffer, which the HCA writes too; C owns its contents.
        Ok(Ok(addr)) => addr as usize as *mut c_void,
        _ => std::ptr::null_mut(),
    }
}

/// The region's length in bytes, or 0 for a NULL region.
///
/// # Safety
/// `mem` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_len(mem: *const openib_mem_t) -> usize {
    // SAFETY: the caller's contract on `mem`.
    match catch_unwind(|| unsafe { region(mem) }.map(|m| m.mr.len())) {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// Fills `out` with the region's remote handle, for a peer's put/get.
///
/// # Safety
/// `mem` is NULL or a live region; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_remote(
    mem: *const openib_mem_t,
    out: *mut openib_remote_t,
) -> c_int {
    call("openib_mem_remote", || {
        // SAFETY: the caller's contract on `mem` and `out`.
        let m = unsafe { region(mem) }?;
        let r = RemoteRegion::of(&m.mr);
        let v = openib_remote_t {
            addr: r.addr,
            rkey: r.rkey,
            reserved: 0,
            len: r.len,
        };
        // SAFETY: as above.
        unsafe { put_out(out, v, "out") }?;
        Ok(OPENIB_OK)
    })
}

/// Frees a region. Operations still in flight keep its registration until they complete (the
/// memory stays valid for the HCA), but their data is then unspecified. NULL is a no-op.
///
/// # Safety
/// `mem` is NULL or a region from `openib_mem_alloc`, not freed before and not used after.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_free(mem: *mut openib_mem_t) -> c_int {
    call("openib_mem_free", || {
        if !mem.is_null() {
            // SAFETY: `mem` came from Box::into_raw in openib_mem_alloc; not used after this.
            drop(unsafe { Box::from_raw(mem) });
        }
        Ok(OPENIB_OK)
    })
}

/// Put (`write`) or get: the shared part of `openib_put` and `openib_get`.
///
/// # Safety
/// As for `openib_put`.
#[allow(clippy::too_many_arguments)]
unsafe fn rdma(
    func: &str,
    write: bool,
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        let mut l = h.lock()?;
        let token = if write {
            l.g.t.put(peer, &m.mr, offset, r, roffset, len)?
        } else {
            l.g.t.get(peer, &m.mr, offset, r, roffset, len)?
        };
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// RDMA write of `mem[offset..offset+len]` to `remote` at `roffset`.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_put(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma(
            "openib_put",
            true,
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            len,
            token_out,
        )
    }
}

/// RDMA read of `remote` at `roffset` into `mem[offset..offset+len]`.
///
/// # Safety
/// As for `openib_put`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_get(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma(
            "openib_get",
            false,
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            len,
            token_out,
        )
    }
}

/// A 64-bit atomic: the shared part of `openib_fetch_add` and `openib_compare_swap`.
///
/// # Safety
/// As for `openib_fetch_add`.
#[allow(clippy::too_many_arguments)]
unsafe fn atomic(
    func: &str,
    op: AtomicOp,
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        let token = h.lock()?.g.t.atomic(peer, op, &m.mr, offset, r, roffset)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Atomically adds `add` to the 8 bytes of `remote` at `roffset` (8-byte aligned); the old
/// value lands in `mem[offset..offset+8]` when the completion is reported.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_fetch_add(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    add: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic(
            "openib_fetch_add",
            AtomicOp::FetchAdd { add },
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            token_out,
        )
    }
}

/// Atomically replaces the 8 bytes of `remote` at `roffset` (8-byte aligned) by `swap` if they
/// equal `compare`; the old value lands in `mem[offset..offset+8]` when the completion is
/// reported (it equals `compare` if the swap happened).
///
/// # Safety
/// As for `openib_fetch_add`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_compare_swap(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    compare: u64,
    swap: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic(
            "openib_compare_swap",
            AtomicOp::CompareSwap { compare, swap },
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            token_out,
        )
    }
}

/// Makes progress (connections, completions, receive callbacks, queued operations); returns
/// the number of work completions handled, or a negative error.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_progress(t: *mut openib_t) -> c_int {
    call("openib_progress", || {
        // SAFETY: the caller's contract on `t`.
        let mut l = unsafe { handle(t) }?.lock()?;
        let n = l.g.t.progress()?;
        l.g.gather();
        Ok(to_int(n))
    })
}

/// Takes one completion: 1 when `*out` was filled, 0 when there is none, or a negative error.
/// A failed operation has a negative `status`, and `openib_last_error` then names why.
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_poll_completion(
    t: *mut openib_t,
    out: *mut openib_completion_t,
) -> c_int {
    call("openib_poll_completion", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let mut l = h.lock()?;
        l.g.gather();
        let Some(c) = l.g.done.pop_front() else {
            return Ok(0);
        };
        drop(l);
        let v = match c {
            Completion::Done { peer, token } => openib_completion_t {
                peer,
                token,
                status: OPENIB_OK,
            },
            Completion::Failed {
                peer, token, error, ..
            } => {
                set_last_error(format!(
                    "openib_poll_completion: operation {token} to rank {peer} failed: {error}"
                ));
                openib_completion_t {
                    peer,
                    token,
                    status: OPENIB_ERR_ENDPOINT_FAILED,
                }
            }
        };
        // SAFETY: as above.
        unsafe { put_out(out, v, "out") }?;
        Ok(1)
    })
}

/// Progresses until nothing is queued or in flight, or `timeout_ms` passed
/// ([`OPENIB_ERR_TIMEOUT`]). Completions are kept for `openib_poll_completion`.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_flush(t: *mut openib_t, timeout_ms: u32) -> c_int {
    call("openib_flush", || {
        // SAFETY: the caller's contract on `t`.
        let mut l = unsafe { handle(t) }?.lock()?;
        let done = l.g.t.flush(Duration::from_millis(timeout_ms.into()))?;
        l.g.done.extend(done);
        l.g.gather();
        Ok(OPENIB_OK)
    })
}

/// Connects to every reachable peer now instead of on first use.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_connect_all(t: *mut openib_t, timeout_ms: u32) -> c_int {
    call("openib_connect_all", || {
        // SAFETY: the caller's contract on `t`.
        let mut l = unsafe { handle(t) }?.lock()?;
        l.g.t
            .connect_all(Duration::from_millis(timeout_ms.into()))?;
        l.g.gather();
        Ok(OPENIB_OK)
    })
}

/// Removes the endpoints of `peers[0..n]` ([`Transport::del_procs`]): their queued and
/// in-flight operations complete with [`OPENIB_ERR_ENDPOINT_FAILED`], their connections are
/// released, and later operations to them give [`OPENIB_ERR_BAD_PEER`]. A rank outside the job
/// is [`OPENIB_ERR_BAD_PEER`] (nothing removed); the own rank and removed ranks are ignored.
///
/// # Safety
/// `t` is NULL or a live handle; `peers` is readable for `n` ranks (NULL when `n` is 0 is
/// allowed).
#[no_mangle]
pub unsafe extern "C" fn openib_del_procs(t: *mut openib_t, peers: *const u32, n: usize) -> c_int {
    call("openib_del_procs", || {
        // SAFETY: the caller's contract on `t` and `peers`.
        let (h, peers) = unsafe { (handle(t)?, ranks(peers, n)?) };
        if let Some(&peer) = peers.iter().find(|&&p| p >= h.size) {
            return Err(TransportError::BadPeer { peer, size: h.size }.into());
        }
        let mut l = h.lock()?;
        l.g.t.del_procs(peers);
        l.g.gather();
        Ok(OPENIB_OK)
    })
}

/// The message of this thread's last failed call ("" if none failed yet); valid until the
/// next failing call on this thread.
#[no_mangle]
pub extern "C" fn openib_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(EMPTY.as_ptr())
}

/// A static description of an error code ("unknown error code" for others).
#[no_mangle]
pub extern "C" fn openib_strerror(code: c_int) -> *const c_char {
    CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(c"unknown error code", |(_, _, s)| s)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::{null, null_mut};

    fn last() -> String {
        // SAFETY: openib_last_error returns a NUL-terminated string.
        unsafe { CStr::from_ptr(openib_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn null_pointers_are_invalid_with_a_message() {
        // SAFETY: every pointer is NULL or points to a local; NULL is what is tested.
        unsafe {
            assert_eq!(openib_open(null_mut()), OPENIB_ERR_INVALID);
            assert_eq!(last(), "openib_open: out is NULL");
            assert_eq!(openib_rank(null()), OPENIB_ERR_INVALID);
            assert_eq!(last(), "openib_rank: t is NULL");
            assert_eq!(openib_size(null()), OPENIB_ERR_INVALID);
            assert_eq!(openib_eager_limit(null()), OPENIB_ERR_INVALID);
            assert_eq!(
                openib_send(null_mut(), 1, 1, null(), 0, null_mut()),
                OPENIB_ERR_INVALID
            );
            assert_eq!(openib_progress(null_mut()), OPENIB_ERR_INVALID);
            assert_eq!(openib_flush(null_mut(), 0), OPENIB_ERR_INVALID);
            assert_eq!(openib_connect_all(null_mut(), 0), OPENIB_ERR_INVALID);
            let mut c = openib_completion_t {
                peer: 0,
                token: 0,
                status: 0,
            };
            assert_eq!(
                openib_poll_completion(null_mut(), &mut c),
                OPENIB_ERR_INVALID
            );
            assert_eq!(
                openib_set_handler(null_mut(), 1, None, null_mut()),
                OPENIB_ERR_INVALID
            );
            let mut m = null_mut();
            assert_eq!(openib_mem_alloc(null_mut(), 8, &mut m), OPENIB_ERR_INVALID);
            assert!(m.is_null());
            assert_eq!(
                openib_mem_alloc(null_mut(), 8, null_mut()),
                OPENIB_ERR_INVALID
            );
            assert_eq!(last(), "openib_mem_alloc: out is NULL");
            assert!(openib_mem_ptr(null()).is_null());
            assert_eq!(openib_mem_len(null()), 0);
            let mut r = openib_remote_t {
                addr: 0,
                rkey: 0,
                reserved: 0,
                len: 0,
            };
            assert_eq!(openib_mem_remote(null(), &mut r), OPENIB_ERR_INVALID);
            for f in [openib_put, openib_get] {
                assert_eq!(
                    f(null_mut(), 0, null_mut(), 0, &r, 0, 0, null_mut()),
                    OPENIB_ERR_INVALID
                );
            }
            assert_eq!(
                openib_send_mem(null_mut(), 1, 1, null_mut(), 0, 0, null_mut()),
                OPENIB_ERR_INVALID
            );
            assert_eq!(last(), "openib_send_mem: t is NULL");
            assert_eq!(
                openib_sendi(null_mut(), 1, 1, null(), 0),
                OPENIB_ERR_INVALID
            );
            assert_eq!(last(), "openib_sendi: t is NULL");
            assert_eq!(
                openib_fetch_add(null_mut(), 1, null_mut(), 0, &r, 0, 1, null_mut()),
                OPENIB_ERR_INVALID
            );
            assert_eq!(last(), "openib_fetch_add: t is NULL");
            assert_eq!(
                openib_compare_swap(null_mut(), 1, null_mut(), 0, &r, 0, 0, 1, null_mut()),
                OPENIB_ERR_INVALID
            );
            assert_eq!(last(), "openib_compare_swap: t is NULL");
            assert_eq!(openib_del_procs(null_mut(), null(), 0), OPENIB_ERR_INVALID);
            assert_eq!(last(), "openib_del_procs: t is NULL");
            assert_eq!(openib_close(null_mut()), OPENIB_OK);
            assert_eq!(openib_mem_free(null_mut()), OPENIB_OK);
        }
    }

    #[test]
    fn rank_lists_are_checked() {
        // SAFETY: every pointer is NULL or points to a local array of the length given.
        unsafe {
            assert_eq!(ranks(null(), 0).unwrap(), &[] as &[u32]);
            assert_eq!(ranks(null(), 1).unwrap_err().code, OPENIB_ERR_INVALID);
            let a = [3u32, 1, 2];
            assert_eq!(ranks(a.as_ptr(), 3).unwrap(), &a);
            // A pointer into the middle of a u32 is misaligned.
            let p = a.as_ptr().cast::<u8>().wrapping_add(1).cast::<u32>();
            assert_eq!(ranks(p, 1).unwrap_err().code, OPENIB_ERR_INVALID);
        }
    }

    #[test]
    fn a_panic_becomes_an_error_code() {
        let code = call("openib_test", || panic!("boom"));
        assert_eq!(code, OPENIB_ERR_PANIC);
        assert_eq!(last(), "openib_test: internal panic: boom");
        let code = call("openib_test", || Err(Fail::new(OPENIB_ERR_RANGE, "a\0b")));
        assert_eq!(code, OPENIB_ERR_RANGE);
        assert_eq!(last(), "openib_test: a b");
    }

    #[test]
    fn last_error_is_per_thread() {
        call("openib_here", || Err(Fail::new(OPENIB_ERR_INVALID, "here")));
        std::thread::spawn(|| {
            assert_eq!(last(), "");
            call("openib_there", || {
                Err(Fail::new(OPENIB_ERR_INVALID, "there"))
            });
            assert_eq!(last(), "openib_there: there");
        })
        .join()
        .unwrap();
        assert_eq!(last(), "openib_here: here");
    }

    #[test]
    fn every_code_has_a_distinct_description() {
        let mut seen = std::collections::HashSet::new();
        for (code, _, s) in CODES {
            assert!(seen.insert(s.to_bytes()), "{code}");
            // SAFETY: openib_strerror returns a static NUL-terminated string.
            assert_eq!(unsafe { CStr::from_ptr(openib_strerror(*code)) }, *s);
        }
        assert_eq!(
            // SAFETY: as above.
            unsafe { CStr::from_ptr(openib_strerror(12345)) },
            c"unknown error code"
        );
    }

    /// The header's `enum openib_error` lists exactly the codes of this crate.
    #[test]
    fn header_error_codes_match() {
        let header =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/openib.h"))
                .expect("include/openib.h");
        let mut found = Vec::new();
        for line in header.lines() {
            let l = line.trim();
            if let Some((name, rest)) = l.split_once('=') {
                let name = name.trim();
                if name.starts_with("OPENIB_") && !name.contains(' ') {
                    let v: c_int = rest
                        .split([',', '/'])
                        .next()
                        .unwrap_or("")
                        .trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("bad enum line {l:?}"));
                    found.push((name.to_string(), v));
                }
            }
        }
        let want: Vec<(String, c_int)> =
            CODES.iter().map(|(c, n, _)| (n.to_string(), *c)).collect();
        assert_eq!(found, want);
    }

    #[test]
    fn code_of_maps_transport_errors() {
        let cases = [
            (TransportError::ReservedTag, OPENIB_ERR_INVALID),
            (
                TransportError::TooLarge { len: 9, limit: 8 },
                OPENIB_ERR_TOO_LARGE,
            ),
            (
                TransportError::BadPeer { peer: 9, size: 2 },
                OPENIB_ERR_BAD_PEER,
            ),
            (
                TransportError::Range {
                    offset: 1,
                    len: 2,
                    size: 2,
                },
                OPENIB_ERR_RANGE,
            ),
            (
                TransportError::Timeout {
                    what: "x".into(),
                    timeout: Duration::from_secs(1),
                },
                OPENIB_ERR_TIMEOUT,
            ),
            (
                TransportError::NoPath {
                    peer: 1,
                    why: "x".into(),
                },
                OPENIB_ERR_NO_PATH,
            ),
            (
                TransportError::EndpointFailed {
                    peer: 1,
                    why: "x".into(),
                },
                OPENIB_ERR_ENDPOINT_FAILED,
            ),
            (
                TransportError::Wireup(PingError::Setup("x".into())),
                OPENIB_ERR_SETUP,
            ),
            (TransportError::Busy { why: "no credit" }, OPENIB_ERR_BUSY),
            (
                TransportError::Misaligned { addr: 0x1004 },
                OPENIB_ERR_INVALID,
            ),
            (
                TransportError::Setting(openib_rs::config::ConfigError {
                    name: "OPENIB_EAGER_LIMIT",
                    value: "1".into(),
                    origin: openib_rs::config::Source::Env,
                    problem: "out of range".into(),
                    allowed: "an integer from 64 to 65535".into(),
                }),
                OPENIB_ERR_SETUP,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(code_of(&e), code, "{e}");
        }
    }
}
