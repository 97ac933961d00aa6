//! Pointer helpers: the only places that turn C pointers into references.

use super::*;

/// # Safety
/// `t` is NULL or a handle from `openib_open` that is not closed.
pub(crate) unsafe fn handle<'a>(t: *const openib_t) -> Result<&'a openib_t, Fail> {
    // SAFETY: non-NULL `t` points to a live handle (the caller's contract).
    unsafe { t.as_ref() }.ok_or_else(|| null("t"))
}

/// # Safety
/// `m` is NULL or a region from `openib_mem_alloc` that is not freed.
pub(crate) unsafe fn region<'a>(m: *const openib_mem_t) -> Result<&'a openib_mem_t, Fail> {
    // SAFETY: non-NULL `m` points to a live region (the caller's contract).
    unsafe { m.as_ref() }.ok_or_else(|| null("mem"))
}

/// # Safety
/// `p` is NULL or valid for reading `len` bytes for the returned lifetime.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
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
pub(crate) unsafe fn ranks<'a>(p: *const u32, n: usize) -> Result<&'a [u32], Fail> {
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
pub(crate) unsafe fn put_out<T>(out: *mut T, v: T, name: &str) -> Result<(), Fail> {
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
pub(crate) unsafe fn put_opt<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-NULL and writable (the caller's contract).
        unsafe { out.write(v) };
    }
}

/// # Safety
/// `r` is NULL or points to a readable `openib_remote_t`.
pub(crate) unsafe fn remote_of(r: *const openib_remote_t) -> Result<RemoteRegion, Fail> {
    // SAFETY: non-NULL `r` is readable (the caller's contract); the struct is plain data.
    let r = unsafe { r.as_ref() }.ok_or_else(|| null("remote"))?;
    Ok(RemoteRegion {
        addr: r.addr,
        rkey: r.rkey,
        len: r.len,
    })
}

/// A region may only be used with the handle that allocated it.
pub(crate) fn owned_by(m: &openib_mem_t, h: &openib_t) -> Result<(), Fail> {
    if m.owner != h.id {
        return Err(Fail::new(
            OPENIB_ERR_INVALID,
            "mem was allocated by another handle",
        ));
    }
    Ok(())
}

pub(crate) fn to_int(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// `offset..offset+len` must lie inside a region of `size` bytes ([`OPENIB_ERR_RANGE`]).
pub(crate) fn check_range_of(size: usize, offset: usize, len: usize) -> Result<(), Fail> {
    if offset.checked_add(len).is_none_or(|e| e > size) {
        return Err(Fail::new(
            OPENIB_ERR_RANGE,
            format!("range {offset}+{len} is outside the {size}-byte region"),
        ));
    }
    Ok(())
}
