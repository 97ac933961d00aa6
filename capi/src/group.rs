//! Creating a group from a group, surviving failures (issue 32): `openib_group_create`.

use super::*;
use openib_rs::runtime::group_create::GroupCreateError;
use openib_rs::runtime::{Group, ProcSet};
use openib_rs::transport::GroupCreateFailure;

/// `v` into the caller's array `out` of capacity `*len` (its length written back); too small:
/// [`OPENIB_ERR_RANGE`] with the length needed in `*len`.
///
/// # Safety
/// `out` is NULL or writable for `*len` `u32`s; `len` is NULL or writable.
unsafe fn put_ranks(out: *mut u32, len: *mut usize, v: &[u32], name: &str) -> Result<(), Fail> {
    if len.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL and readable/writable (the caller's contract).
    let cap = unsafe { len.read() };
    // SAFETY: as above.
    unsafe { len.write(v.len()) };
    if v.len() > cap {
        return Err(Fail::new(
            OPENIB_ERR_RANGE,
            format!("{name} holds {cap} ranks, the result has {}", v.len()),
        ));
    }
    if v.is_empty() {
        return Ok(());
    }
    if out.is_null() || !out.is_aligned() {
        return Err(Fail::new(
            OPENIB_ERR_INVALID,
            format!("the array of {name} is NULL or misaligned"),
        ));
    }
    // SAFETY: non-NULL, aligned, room for `cap >= v.len()` u32s (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
    Ok(())
}

/// Creates a group from the group `ranks[0..n]` this process passes, with every process calling
/// with the same `tag` (a NUL-terminated string): see include/openib.h for the contract.
///
/// # Safety
/// `t` is NULL or a live handle; `ranks` readable for `n` ranks; `tag` NULL or a NUL-terminated
/// string; `group`/`failed` writable for `*group_len`/`*failed_len` ranks; `group_len`,
/// `failed_len` NULL or readable and writable; `who` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_group_create(
    t: *mut openib_t,
    ranks_in: *const u32,
    n: usize,
    tag: *const c_char,
    timeout_ms: u32,
    group: *mut u32,
    group_len: *mut usize,
    failed: *mut u32,
    failed_len: *mut usize,
    who: *mut u32,
) -> c_int {
    call("openib_group_create", || {
        // SAFETY: the caller's contract on `t` and `ranks_in`.
        let (h, members) = unsafe { (handle(t)?, ranks(ranks_in, n)?) };
        if tag.is_null() {
            return Err(null("tag"));
        }
        // SAFETY: non-NULL and NUL-terminated (the caller's contract).
        let tag = unsafe { CStr::from_ptr(tag) }
            .to_str()
            .map_err(|_| Fail::new(OPENIB_ERR_INVALID, "tag is not UTF-8"))?;
        if group_len.is_null() || failed_len.is_null() {
            return Err(null("group_len or failed_len"));
        }
        let mut l = h.lock()?;
        let g = Group::of_runtime(l.t().runtime(), ProcSet::Ranks(members));
        let r = l
            .t()
            .group_create(&g, tag, Duration::from_millis(u64::from(timeout_ms)));
        l.gather();
        drop(l);
        let (decision, code, by) = match r {
            Ok(d) => (d, OPENIB_OK, u32::MAX),
            Err(GroupCreateFailure::LeftOut {
                error, decision, ..
            }) => {
                let by = match error {
                    GroupCreateError::ExcludedBy { by, .. } => by,
                    GroupCreateError::NotAParticipant { root, .. } => root,
                    _ => u32::MAX,
                };
                // SAFETY: the caller's contract on the arrays and `who`.
                unsafe {
                    put_ranks(group, group_len, &decision.group, "group")?;
                    put_ranks(failed, failed_len, &decision.failed, "failed")?;
                    put_opt(who, by);
                }
                return Err(Fail::new(OPENIB_ERR_EXCLUDED, error.to_string()));
            }
            Err(e @ GroupCreateFailure::TimedOut { .. }) => {
                let first = match &e {
                    GroupCreateFailure::TimedOut { waiting, .. } => {
                        waiting.first().copied().unwrap_or(u32::MAX)
                    }
                    _ => u32::MAX,
                };
                // SAFETY: the caller's contract on `who`.
                unsafe { put_opt(who, first) };
                return Err(Fail::new(OPENIB_ERR_TIMEOUT, e.to_string()));
            }
            Err(e @ GroupCreateFailure::NotInOwnGroup { .. }) => {
                return Err(Fail::new(OPENIB_ERR_INVALID, e.to_string()))
            }
            Err(GroupCreateFailure::Transport { error, .. }) => return Err(error.into()),
        };
        // SAFETY: the caller's contract on the arrays and `who`.
        unsafe {
            put_ranks(group, group_len, &decision.group, "group")?;
            put_ranks(failed, failed_len, &decision.failed, "failed")?;
            put_opt(who, by);
        }
        Ok(code)
    })
}
