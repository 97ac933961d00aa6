//! Process-termination events: a PMIx event handler that records which peers died.
//!
//! [`register`] calls `PMIx_Register_event_handler` for [`TERMINATION_CODES`] with
//! `PMIX_EVENT_RETURN_OBJECT` pointing at this client's [`FailedSet`] (PMIx hands that pointer
//! back in the `info` of every notification: the handler has no other context). The handler
//! ([`on_termination`]) runs on PMIx's progress thread; it only takes a short, uncontended lock
//! to insert ranks, never panics across the FFI boundary (`catch_unwind`), and always calls the
//! completion callback PMIx passes, with `PMIX_SUCCESS` (the standard's "this handler is done,
//! go on with the chain": other handlers of the process, e.g. an MPI library's, still see it).
//!
//! The set is kept alive by a reference PMIx holds (through the return object) until
//! `PMIx_Deregister_event_handler` has completed; if PMIx never confirms, it is leaked, never
//! freed under a handler that might still run.

use super::ffi as p;
use super::op::Completion;
use super::value::InfoList;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The event codes registered for. What each launcher sends for a peer that died:
/// - Open MPI 4.1.x `mpirun` (ORTE) with `--enable-recovery`: `PMIX_ERR_PROC_ABORTED` (-7),
///   source = the dead rank (seen in its server's log; libpmix 4.2.2 then refuses to deliver it,
///   docs/RUNTIME.md);
/// - PRRTE / OpenPMIx 4+ (`prterun`, Open MPI 5's `mpirun`): `PMIX_EVENT_PROC_TERMINATED`
///   (-201) or `PMIX_ERR_PROC_ABORTED_BY_SIG`/`PMIX_ERR_EXIT_NONZERO_TERM` with
///   `PMIX_EVENT_AFFECTED_PROC`;
/// - Slurm's PMIx plugin: `PMIX_ERR_PROC_ABORTED` / `PMIX_PROC_TERMINATED` (by the standard;
///   not tried here).
///
/// `PMIX_ERR_LOST_CONNECTION` is not among them: in a client it means "lost my server", not a
/// peer, and mpirun's server raises it for a dead client in its own process only
/// (`PMIX_RANGE_PROC_LOCAL`).
pub const TERMINATION_CODES: [i32; 9] = [
    p::PMIX_ERR_PROC_ABORTED,
    p::PMIX_ERR_PROC_ABORTING,
    p::PMIX_ERR_PROC_REQUESTED_ABORT,
    p::PMIX_PROC_TERMINATED,
    p::PMIX_EVENT_PROC_TERMINATED,
    p::PMIX_ERR_PROC_TERM_WO_SYNC,
    p::PMIX_ERR_PROC_KILLED_BY_CMD,
    p::PMIX_ERR_PROC_ABORTED_BY_SIG,
    p::PMIX_ERR_EXIT_NONZERO_TERM,
];

/// How long [`register`] waits for PMIx to confirm the registration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// The ranks of this job that PMIx reported terminated (thread-safe).
pub(crate) struct FailedSet {
    nspace: p::pmix_nspace_t,
    me: u32,
    ranks: Mutex<BTreeSet<u32>>,
    events: AtomicU64,
}

impl FailedSet {
    pub(crate) fn new(nspace: p::pmix_nspace_t, me: u32) -> Self {
        FailedSet {
            nspace,
            me,
            ranks: Mutex::new(BTreeSet::new()),
            events: AtomicU64::new(0),
        }
    }
    /// The recorded ranks, ascending.
    pub(crate) fn ranks(&self) -> Vec<u32> {
        self.ranks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }
    /// Termination events received (including ones naming no rank of this job).
    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
    fn record(&self, proc_: &p::pmix_proc_t) -> bool {
        if proc_.nspace != self.nspace || proc_.rank >= p::PMIX_RANK_VALID || proc_.rank == self.me
        {
            return false;
        }
        self.ranks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(proc_.rank);
        true
    }
}

fn key_is(info: &p::pmix_info_t, key: &[u8]) -> bool {
    let key = key.strip_suffix(b"\0").unwrap_or(key);
    info.key.len() > key.len()
        && info.key[key.len()] == 0
        && info.key.iter().zip(key).all(|(&a, &b)| a as u8 == b)
}

/// The handler's work: find the set (return object), record the affected processes (or the
/// source when none are listed). Returns whether a rank was recorded.
///
/// # Safety
/// `source` is NULL or a valid process; `info` is NULL or `ninfo` valid, initialised
/// `pmix_info_t`s as PMIx passes them to a notification function.
unsafe fn handle(source: *const p::pmix_proc_t, info: *const p::pmix_info_t, ninfo: usize) {
    let infos: &[p::pmix_info_t] = if info.is_null() || ninfo == 0 {
        &[]
    } else {
        // SAFETY: per the contract, `ninfo` initialised entries live for this call.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
    };
    let set = infos
        .iter()
        .find(|i| {
            key_is(i, p::PMIX_EVENT_RETURN_OBJECT) && u32::from(i.value.type_) == p::PMIX_POINTER
        })
        // SAFETY: a PMIX_POINTER value holds `ptr`; it is the return object given at
        // registration: a `*const FailedSet` whose reference PMIx keeps until deregistration.
        .map(|i| unsafe { i.value.data.ptr } as *const FailedSet)
        .filter(|ptr| !ptr.is_null());
    let Some(set) = set else {
        return; // Not ours (no return object): nothing to record into.
    };
    // SAFETY: see above: alive until the deregistration completed, which PMIx serialises with
    // this handler on its progress thread.
    let set = unsafe { &*set };
    set.events.fetch_add(1, Ordering::Relaxed);
    let mut affected = false;
    for i in infos {
        let ty = u32::from(i.value.type_);
        if key_is(i, p::PMIX_EVENT_AFFECTED_PROC) && ty == p::PMIX_PROC {
            // SAFETY: a PMIX_PROC value holds `proc_`, NULL or one valid process.
            let pr = unsafe { i.value.data.proc_ };
            if !pr.is_null() {
                // SAFETY: non-null, valid for this call.
                set.record(unsafe { &*pr });
                affected = true;
            }
        } else if key_is(i, p::PMIX_EVENT_AFFECTED_PROCS) && ty == p::PMIX_DATA_ARRAY {
            // SAFETY: a PMIX_DATA_ARRAY value holds `darray`, NULL or a valid array.
            let da = unsafe { i.value.data.darray };
            if da.is_null() {
                continue;
            }
            // SAFETY: non-null, valid for this call.
            let da = unsafe { &*da };
            if u32::from(da.type_) == p::PMIX_PROC && !da.array.is_null() {
                // SAFETY: an array of `size` pmix_proc_t, as its type says.
                let procs = unsafe {
                    std::slice::from_raw_parts(da.array as *const p::pmix_proc_t, da.size)
                };
                for pr in procs {
                    set.record(pr);
                }
                affected = true;
            }
        }
    }
    if !affected && !source.is_null() {
        // SAFETY: non-null source, valid for this call.
        set.record(unsafe { &*source });
    }
}

/// `pmix_notification_fn_t` for [`TERMINATION_CODES`].
///
/// # Safety
/// Called by PMIx only, with the arguments of a notification (valid `source`, `ninfo`
/// initialised infos, `cbfunc` NULL or PMIx's completion function for `cbdata`).
pub(crate) unsafe extern "C" fn on_termination(
    _id: usize,
    _status: p::pmix_status_t,
    source: *const p::pmix_proc_t,
    info: *mut p::pmix_info_t,
    ninfo: usize,
    _results: *mut p::pmix_info_t,
    _nresults: usize,
    cbfunc: p::pmix_event_notification_cbfunc_fn_t,
    cbdata: *mut c_void,
) {
    // Never unwind into C: a panic is swallowed (the event is then just not recorded).
    // SAFETY: the arguments are PMIx's, valid for this call (contract above).
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { handle(source, info, ninfo) }));
    if let Some(done) = cbfunc {
        // SAFETY: the standard requires the handler to call cbfunc with cbdata once; no
        // results (NULL, 0) and no release callback.
        unsafe {
            done(
                p::PMIX_SUCCESS as i32,
                std::ptr::null_mut(),
                0,
                None,
                std::ptr::null_mut(),
                cbdata,
            )
        };
    }
}

/// A pending registration: the arrays PMIx reads until it calls back, and the result.
struct RegOp {
    codes: Vec<p::pmix_status_t>,
    info: InfoList,
    done: Completion<(i32, usize)>,
}

unsafe extern "C" fn registered(status: p::pmix_status_t, refid: usize, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the Arc<RegOp> reference handed to PMIx in `register`.
    let op = unsafe { Arc::from_raw(cbdata as *const RegOp) };
    op.done.complete((status, refid));
}

/// A pending deregistration: the set reference PMIx held, released by [`deregistered`], and
/// PMIx's confirmation, which [`deregister`] waits for.
struct DeregOp {
    held: *const FailedSet,
    done: Completion<i32>,
}

// SAFETY: `held` is an Arc<FailedSet> reference (FailedSet is Sync), only taken back once.
unsafe impl Send for DeregOp {}
// SAFETY: as above; `done` is a Mutex and a Condvar.
unsafe impl Sync for DeregOp {}

unsafe extern "C" fn deregistered(status: p::pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the Arc<DeregOp> reference handed to PMIx in `deregister`.
    let op = unsafe { Arc::from_raw(cbdata as *const DeregOp) };
    // SAFETY: `held` is the Arc<FailedSet> reference PMIx held as the return object; the
    // handler is gone now, so nothing reads it any more.
    drop(unsafe { Arc::from_raw(op.held) });
    op.done.complete(status);
}

/// A registered handler: its PMIx reference id and the set reference PMIx holds.
pub(crate) struct Registration {
    refid: usize,
    held: *const FailedSet,
}

// SAFETY: `held` is an Arc<FailedSet> reference (FailedSet is Sync); it is only handed back.
unsafe impl Send for Registration {}
// SAFETY: as above; never dereferenced through `&Registration`.
unsafe impl Sync for Registration {}

/// Registers [`on_termination`] for [`TERMINATION_CODES`] with `set` as return object.
/// `Err(status)` when PMIx refused or did not confirm (then a reference to `set` may be leaked).
pub(crate) fn register(lib: &p::PmixLib, set: &Arc<FailedSet>) -> Result<Registration, i32> {
    let held = Arc::into_raw(Arc::clone(set));
    let mut info = InfoList::default();
    info.push_pointer(p::PMIX_EVENT_RETURN_OBJECT, held as *mut c_void);
    let op = Arc::new(RegOp {
        codes: TERMINATION_CODES.to_vec(),
        info,
        done: Completion::new(),
    });
    let cbdata = Arc::into_raw(Arc::clone(&op)) as *mut c_void;
    // SAFETY: the code and info arrays live in `op`, kept alive by the reference in `cbdata`
    // until `registered` runs; PMIx only reads them (the pointer casts are for bindgen's
    // non-const signature). `on_termination` and `registered` match their typedefs.
    let rc = unsafe {
        lib.PMIx_Register_event_handler(
            op.codes.as_ptr() as *mut p::pmix_status_t,
            op.codes.len(),
            op.info.as_ptr() as *mut p::pmix_info_t,
            op.info.len(),
            Some(on_termination),
            Some(registered),
            cbdata,
        )
    };
    if rc != p::PMIX_SUCCESS as i32 {
        // SAFETY: refused, PMIx will not call back and holds no return object.
        drop(unsafe { Arc::from_raw(cbdata as *const RegOp) });
        // SAFETY: the reference made above, not handed to PMIx after all.
        drop(unsafe { Arc::from_raw(held) });
        return Err(rc);
    }
    match op.done.wait(Some(Instant::now() + REGISTER_TIMEOUT)) {
        Some((0, refid)) => Ok(Registration { refid, held }),
        // Refused late: PMIx holds no handler; the reference is released.
        // SAFETY: as above, PMIx keeps no copy of the return object of a failed registration.
        Some((status, _)) => {
            drop(unsafe { Arc::from_raw(held) });
            Err(status)
        }
        // No answer: it may still register later, so `held` stays (leaked).
        None => Err(p::PMIX_ERR_TIMEOUT),
    }
}

/// `PMIx_Deregister_event_handler`, and waits (up to [`REGISTER_TIMEOUT`]) until PMIx has
/// confirmed it; the set reference PMIx held is released then.
///
/// The wait is the contract: PMIx confirms on its own progress thread, by calling
/// [`deregistered`], code of this library. Returning before that let the process unload the
/// library (Open MPI dlcloses the `oib` BTL component in `MPI_Finalize`) while PMIx was still
/// to call it: PMIx's thread then jumped into unmapped memory (SIGSEGV at the end of about
/// one job in two of tests/softroce_ompi_oib.rs's
/// `matrix_thread_multiple_4_threads_per_rank_with_2_and_4_ranks`).
pub(crate) fn deregister(lib: &p::PmixLib, reg: Registration) {
    let op = Arc::new(DeregOp {
        held: reg.held,
        done: Completion::new(),
    });
    let cbdata = Arc::into_raw(Arc::clone(&op)) as *mut c_void;
    // SAFETY: `refid` came from a successful registration; `deregistered` matches
    // pmix_op_cbfunc_t and takes back both references in `cbdata` once PMIx is done (or they
    // leak if it never calls).
    let rc = unsafe { lib.PMIx_Deregister_event_handler(reg.refid, Some(deregistered), cbdata) };
    if rc == p::PMIX_OPERATION_SUCCEEDED {
        // Done at once, no callback will come: release both references here.
        // SAFETY: PMIx keeps no copy of `cbdata`; the handler is gone, and `held` is the
        // reference PMIx held.
        unsafe {
            drop(Arc::from_raw(cbdata as *const DeregOp));
            drop(Arc::from_raw(reg.held));
        }
    } else if rc != p::PMIX_SUCCESS as i32 {
        // SAFETY: refused, PMIx will not call back; `held` stays leaked (the handler may
        // still be registered).
        drop(unsafe { Arc::from_raw(cbdata as *const DeregOp) });
        tracing::debug!(
            rc,
            "PMIx_Deregister_event_handler refused; the failed set is leaked"
        );
    } else if op
        .done
        .wait(Some(Instant::now() + REGISTER_TIMEOUT))
        .is_none()
    {
        tracing::warn!(
            "PMIx did not confirm the termination handler's deregistration within {:?}; \
             unloading this library now could crash PMIx's thread",
            REGISTER_TIMEOUT
        );
    }
}

/// Signature check of the handler against bindgen's typedef.
const _: p::pmix_notification_fn_t = Some(on_termination);
