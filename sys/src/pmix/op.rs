//! Non-blocking PMIx calls (`PMIx_Fence_nb`, `PMIx_Get_nb`) and their completion callbacks.
//!
//! Each call gets a heap object ([`FenceOp`], [`GetOp`]) holding every array and string the call
//! was given plus a completion slot. One `Arc` reference goes to PMIx as `cbdata` and is taken
//! back by the callback, so the object lives until PMIx is done with it, even when the caller
//! gave up waiting (backstop). If PMIx never calls back (finalized with the call pending), the
//! object is leaked, never freed early.

use super::ffi as p;
use super::value::{InfoList, Value};
use std::ffi::{c_void, CString};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// A one-shot result slot a PMIx callback fills and a caller waits on.
pub(crate) struct Completion<T> {
    slot: Mutex<Option<T>>,
    cv: Condvar,
}

impl<T> Completion<T> {
    pub(crate) fn new() -> Self {
        Completion {
            slot: Mutex::new(None),
            cv: Condvar::new(),
        }
    }
    /// Called from the PMIx progress thread; never panics (a poisoned lock is still used).
    pub(crate) fn complete(&self, value: T) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(value);
        self.cv.notify_all();
    }
    /// The result, or `None` when `deadline` passed first (`None` deadline: wait forever).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<T> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = slot.take() {
                return Some(v);
            }
            match deadline {
                None => slot = self.cv.wait(slot).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    slot = self
                        .cv
                        .wait_timeout(slot, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

/// A pending `PMIx_Fence_nb`: its process list, directives and completion status.
pub(crate) struct FenceOp {
    pub(crate) procs: Vec<p::pmix_proc_t>,
    pub(crate) info: InfoList,
    pub(crate) done: Completion<i32>,
}

/// `pmix_op_cbfunc_t` of `PMIx_Fence_nb`.
///
/// # Safety
/// `cbdata` must come from `Arc::into_raw` of an `Arc<FenceOp>` whose reference was handed to
/// PMIx for this call; PMIx calls this exactly once per accepted call.
pub(crate) unsafe extern "C" fn fence_done(status: p::pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: per the contract above, this takes back the reference given to PMIx.
    let op = unsafe { Arc::from_raw(cbdata as *const FenceOp) };
    op.done.complete(status);
}

/// Who frees the `pmix_value_t` a `PMIx_Get_nb` callback receives. PMIx 3.x and 4.x hand it
/// over to the callback (their own blocking `PMIx_Get` keeps the pointer: `_value_cbfunc` in
/// src/client/pmix_client_get.c, v3.2 to v4.2.9); PMIx 5 copies it and frees its own. With an
/// unknown version we copy and leak rather than risk a double free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueOwnership {
    Callback,
    Library,
    Unknown,
}

/// A pending `PMIx_Get_nb`: its process, key, directives and result.
pub(crate) struct GetOp {
    pub(crate) proc_: p::pmix_proc_t,
    pub(crate) key: CString,
    pub(crate) info: InfoList,
    pub(crate) lib: &'static p::PmixLib,
    pub(crate) ownership: ValueOwnership,
    pub(crate) done: Completion<Result<Value, i32>>,
}

/// `pmix_value_cbfunc_t` of `PMIx_Get_nb`.
///
/// # Safety
/// `cbdata` must come from `Arc::into_raw` of an `Arc<GetOp>` whose reference was handed to PMIx
/// for this call; PMIx calls this exactly once per accepted call, with `kv` NULL or a valid
/// value.
pub(crate) unsafe extern "C" fn get_done(
    status: p::pmix_status_t,
    kv: *mut p::pmix_value_t,
    cbdata: *mut c_void,
) {
    // SAFETY: per the contract above, this takes back the reference given to PMIx.
    let op = unsafe { Arc::from_raw(cbdata as *const GetOp) };
    let result = if kv.is_null() {
        Err(if status == p::PMIX_SUCCESS as i32 {
            p::PMIX_ERR_NOT_FOUND
        } else {
            status
        })
    } else {
        // SAFETY: PMIx passes a valid, initialised value (strings NUL-terminated, byte objects
        // with `size` bytes), alive at least for the duration of this callback.
        let value = unsafe { Value::copy_from(&*kv) };
        if op.ownership == ValueOwnership::Callback {
            // SAFETY: with PMIx 3/4 the value was handed to us (see ValueOwnership): it was
            // allocated with malloc by libpmix, nobody else frees it; this is PMIX_VALUE_RELEASE.
            unsafe {
                op.lib.PMIx_Value_destruct(kv);
                libc::free(kv as *mut c_void);
            }
        }
        if status == p::PMIX_SUCCESS as i32 {
            Ok(value)
        } else {
            Err(status)
        }
    };
    op.done.complete(result);
}
