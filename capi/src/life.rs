//! A handle's life: open, queries, the receive callback, progress and completions, flush,
//! connection and disconnection, close.

use super::*;

/// How long `openib_close` flushes before it releases the handle anyway.
const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Logs go to stderr as for the CLI: warnings by default, `OPENIB_LOG` (an `EnvFilter`
/// directive) for more. Installed once per process; an existing subscriber is kept.
pub(crate) fn init_logging() {
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
            derive: openib_rs::transport::derive_from_env()?,
            cpc: None,
            timeout: Duration::from_secs(60),
            mode: ExchangeMode::default(),
        })?;
        let t = Transport::open(rt, cfg).map_err(open_failure)?;
        // SAFETY: as above.
        unsafe { put_out(out, new_handle(t), "out") }?;
        Ok(OPENIB_OK)
    })
}

/// A handle for an open transport (freed by `openib_close`).
pub(crate) fn new_handle(t: Transport) -> *mut openib_t {
    let h = Box::new(openib_t {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        rank: t.rank(),
        size: t.size(),
        eager_limit: t.eager_limit(),
        holder: AtomicUsize::new(0),
        lent: Arc::new(AtomicPtr::new(std::ptr::null_mut())),
        inner: Mutex::new(Inner {
            t,
            done: VecDeque::new(),
            backlog: BacklogWarning::default(),
        }),
    });
    Box::into_raw(h)
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
        let lent = h.lent.clone();
        let mut l = h.lock()?;
        l.t().on_tag_with_transport(
            tag,
            Box::new(move |t: &mut Transport, src, data: &[u8]| {
                // The callback's calls on this handle reach `t` through the loan.
                let _loan = Lend::new(&lent, t);
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
        let n = l.t().progress()?;
        l.gather();
        Ok(to_int(n))
    })
}

/// Progress and completions in one call (one lock instead of two for a poll loop): makes
/// progress as [`openib_progress`], then takes up to `max` completions, oldest first, into
/// `out[0..*taken_out]` as [`openib_poll_completion`] would; a failed one ends the batch, so
/// that `openib_last_error` names its reason. Returns the progress count (>= 0)
/// or a negative error (then nothing was taken). Inside a receive callback of the handle it
/// returns 0 and takes nothing (the running progress call holds the completions).
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL (only with `max` 0) or writable for `max`
/// completions; `taken_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_progress_poll(
    t: *mut openib_t,
    out: *mut openib_completion_t,
    max: usize,
    taken_out: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract on `taken_out`.
    unsafe { put_opt(taken_out, 0) };
    call("openib_progress_poll", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        if out.is_null() && max > 0 {
            return Err(null("out"));
        }
        let mut l = h.lock()?;
        let n = l.t().progress()?;
        let Locked::Held { g, .. } = &mut l else {
            return Ok(to_int(n)); // inside a callback: progress did nothing
        };
        let mut taken = 0;
        // Takes completions oldest first into `out` until it is full or one failed (the last
        // one taken: openib_last_error is its reason); whether to go on.
        let mut put = |c: Completion| {
            let v = completion_out("openib_progress_poll", c);
            // SAFETY: `out` is writable for `max` completions (the caller's contract) and
            // `taken < max` (checked before each call).
            unsafe { out.add(taken).write(v) };
            taken += 1;
            v.status == OPENIB_OK && taken < max
        };
        let Inner { t, done, backlog } = &mut **g;
        if max == 0 {
            // Progress only.
        } else if !done.is_empty() {
            // Older ones first: those kept by earlier calls, then the transport's.
            if t.has_completions() {
                done.extend(t.drain_completions());
                backlog.check(done.len());
            }
            while let Some(c) = done.pop_front() {
                if !put(c) {
                    break;
                }
            }
        } else if t.has_completions() {
            // None kept: straight from the transport, the rest kept for the next call.
            let mut fresh = t.drain_completions();
            for c in fresh.by_ref() {
                if !put(c) {
                    break;
                }
            }
            // Usually all were taken: an empty rest costs the queue's extend nothing then
            // (about 50 instructions per completion-carrying call, callgrind).
            if !fresh.as_slice().is_empty() {
                done.extend(fresh);
                backlog.check(done.len());
            }
        }
        drop(l);
        // SAFETY: as above.
        unsafe { put_opt(taken_out, taken) };
        Ok(to_int(n))
    })
}

/// A completion as the C ABI reports it; a failed one also sets this thread's last error.
fn completion_out(func: &str, c: Completion) -> openib_completion_t {
    match c {
        Completion::Done { peer, token } => openib_completion_t {
            peer,
            token,
            status: OPENIB_OK,
        },
        Completion::Failed {
            peer, token, error, ..
        } => {
            set_last_error(format!(
                "{func}: operation {token} to rank {peer} failed: {error}"
            ));
            openib_completion_t {
                peer,
                token,
                status: OPENIB_ERR_ENDPOINT_FAILED,
            }
        }
    }
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
        l.gather();
        let Some(c) = l.inner("openib_poll_completion")?.done.pop_front() else {
            return Ok(0);
        };
        drop(l);
        let v = completion_out("openib_poll_completion", c);
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
    // SAFETY: the caller's contract on `t`.
    unsafe { wait_quiet(t, timeout_ms, "openib_flush", Transport::flush) }
}

/// The body of `openib_flush` and `openib_quiesce`: `wait` (the transport's flush or quiesce),
/// its completions kept for `openib_poll_completion`.
///
/// # Safety
/// `t` is NULL or a live handle.
unsafe fn wait_quiet(
    t: *mut openib_t,
    timeout_ms: u32,
    func: &str,
    wait: fn(&mut Transport, Duration) -> Result<Vec<Completion>, TransportError>,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`.
        let mut l = unsafe { handle(t) }?.lock()?;
        // Inside a callback the transport refuses (InCallback: OPENIB_ERR_REENTRANT).
        let done = wait(l.t(), Duration::from_millis(timeout_ms.into()))?;
        l.inner(func)?.done.extend(done);
        l.gather();
        Ok(OPENIB_OK)
    })
}

/// [`openib_flush`] without waiting for the immediate sends after each connection's last
/// operation that reports a completion ([`Transport::quiesce`]).
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_quiesce(t: *mut openib_t, timeout_ms: u32) -> c_int {
    // SAFETY: the caller's contract on `t`.
    unsafe { wait_quiet(t, timeout_ms, "openib_quiesce", Transport::quiesce) }
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
        l.t()
            .connect_all(Duration::from_millis(timeout_ms.into()))?;
        l.gather();
        Ok(OPENIB_OK)
    })
}

/// Makes ranks removed by [`openib_del_procs`] peers again ([`Transport::add_procs`]): a
/// fresh endpoint each, connected on first use. A rank outside the job is
/// [`OPENIB_ERR_BAD_PEER`] (nothing added); ranks not removed and the own rank are ignored.
///
/// # Safety
/// `t` is NULL or a live handle; `peers` is readable for `n` ranks (NULL when `n` is 0 is
/// allowed).
#[no_mangle]
pub unsafe extern "C" fn openib_add_procs(t: *mut openib_t, peers: *const u32, n: usize) -> c_int {
    call("openib_add_procs", || {
        // SAFETY: the caller's contract on `t` and `peers`.
        let (h, peers) = unsafe { (handle(t)?, ranks(peers, n)?) };
        let mut l = h.lock()?;
        l.t().add_procs(peers)?;
        l.gather();
        Ok(OPENIB_OK)
    })
}

/// Removes the endpoints of `peers[0..n]` ([`Transport::del_procs`]): their queued and
/// in-flight operations complete with [`OPENIB_ERR_ENDPOINT_FAILED`], their connections are
/// released, and later operations to them give [`OPENIB_ERR_BAD_PEER`]. A rank outside the job
/// is [`OPENIB_ERR_BAD_PEER`] (nothing removed); ranks removed before are ignored. The own
/// rank is removed like any other (its loopback endpoint; later calls naming it give
/// [`OPENIB_ERR_BAD_PEER`]).
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
        l.t().del_procs(peers);
        l.gather();
        Ok(OPENIB_OK)
    })
}
