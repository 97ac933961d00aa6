//! Memory regions (`ibv_reg_mr`): buffers they own, and shared bytes they keep alive.

use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use crate::pd::ProtectionDomain;

/// Access rights of a memory region (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(v::IBV_ACCESS_LOCAL_WRITE);
    pub const REMOTE_WRITE: Access = Access(v::IBV_ACCESS_REMOTE_WRITE);
    pub const REMOTE_READ: Access = Access(v::IBV_ACCESS_REMOTE_READ);
    pub const REMOTE_ATOMIC: Access = Access(v::IBV_ACCESS_REMOTE_ATOMIC);
    /// Everything a BTL buffer needs: local write plus remote read, write and atomics.
    pub const ALL: Access = Access(
        v::IBV_ACCESS_LOCAL_WRITE
            | v::IBV_ACCESS_REMOTE_WRITE
            | v::IBV_ACCESS_REMOTE_READ
            | v::IBV_ACCESS_REMOTE_ATOMIC,
    );
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// One `ibv_mr` handle: the protection domain it lives in and the bytes it covers. It does not
/// deregister itself: the region that owns it calls [`Registration::deregister`] in its Drop,
/// before it releases the memory, and decides what to do when that fails. Opaque outside this
/// module: only the region types here create one, and [`Region`] reads it.
pub struct Registration {
    raw: *mut v::ibv_mr,
    pd: ProtectionDomain,
    /// The registered bytes: `addr..addr+len` of this process.
    addr: u64,
    len: usize,
}

// SAFETY: an MR handle may be used and deregistered from any thread (libibverbs); the regions
// that hold one own or borrow their memory under their own rules.
unsafe impl Send for Registration {}
unsafe impl Sync for Registration {}

impl Registration {
    /// Registers `len` bytes at `addr` on `pd` with `access`; `what` describes them for the
    /// error.
    ///
    /// # Safety
    /// `addr..addr+len` is memory of this process that stays allocated until
    /// [`Registration::deregister`] succeeds, and that the device may access as `access` allows.
    unsafe fn new(
        pd: &ProtectionDomain,
        addr: *mut std::ffi::c_void,
        len: usize,
        access: u32,
        what: &str,
    ) -> Result<Registration> {
        if len == 0 || addr.is_null() {
            return Err(Error::InvalidArgument {
                verb: "ibv_reg_mr",
                what: format!("{what}: a memory region needs an address and at least one byte"),
            });
        }
        let lib = verbs()?;
        // SAFETY: the caller's promise on `addr..addr+len`.
        let raw = unsafe { lib.ibv_reg_mr(pd.raw(), addr, len, access as i32) };
        if raw.is_null() {
            return Err(Error::last_os(
                "ibv_reg_mr",
                format!("{len} {what} on {}", pd.context().name()),
            ));
        }
        Ok(Registration {
            raw,
            pd: pd.clone(),
            addr: addr as u64,
            len,
        })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `raw` is a live MR until `deregister`, which only Drop calls.
        unsafe { (*self.raw).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.raw).rkey }
    }

    /// Deregisters (once). False when `ibv_dereg_mr` failed: the device may still reference
    /// the pages, so the owner must not free them.
    fn deregister(&mut self) -> bool {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return true;
        }
        let Ok(lib) = verbs() else { return true };
        // SAFETY: `raw` is live and deregistered once (it was replaced by null above).
        let rc = unsafe { lib.ibv_dereg_mr(raw) };
        if rc != 0 {
            tracing::error!(rc, "ibv_dereg_mr failed");
        }
        rc == 0
    }
}

/// Registered memory, whoever owns the bytes: a buffer the region owns ([`MemoryRegion`]),
/// shared bytes it keeps alive ([`SharedRegion`]), or a C caller's bytes ([`ForeignRegion`]).
/// What a work request needs of any of them (address, length, keys, a scatter/gather entry)
/// is read here, once; what differs (who owns the bytes, who may write them) stays with each
/// type.
pub trait Region {
    /// The registration behind the region.
    fn registration(&self) -> &Registration;

    /// The virtual address peers use in RDMA requests.
    fn addr(&self) -> u64 {
        self.registration().addr
    }
    /// The registered length in bytes (never 0).
    fn len(&self) -> usize {
        self.registration().len
    }
    /// Always false: a registration covers at least one byte.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn lkey(&self) -> u32 {
        self.registration().lkey()
    }
    fn rkey(&self) -> u32 {
        self.registration().rkey()
    }
    fn pd(&self) -> &ProtectionDomain {
        &self.registration().pd
    }
    /// A scatter/gather entry for `offset..offset+len` of the region; an error outside it.
    fn sge(&self, offset: usize, len: usize) -> Result<crate::wr::Sge> {
        sge_within(self.addr(), self.lkey(), self.len(), offset, len)
    }
}

/// The region types of this module: each keeps its registration in `reg`.
macro_rules! region_in_reg {
    ($($region:ty),*) => {
        $(impl Region for $region {
            fn registration(&self) -> &Registration {
                &self.reg
            }
        })*
    };
}
region_in_reg!(MemoryRegion, SharedRegion, ForeignRegion);

/// A shared region is the region it shares.
impl<R: Region + ?Sized> Region for std::sync::Arc<R> {
    fn registration(&self) -> &Registration {
        (**self).registration()
    }
}

/// A registered buffer owned by this value. The buffer is deregistered before it is freed, so
/// the HCA never touches freed memory: a work request still referencing it completes in error.
///
/// # Soundness (docs/DESIGN.md, "Soundness of registered memory")
/// The HCA writes the buffer outside Rust's knowledge: for a receive or read this process
/// posted, and, with remote write or atomic access, for any peer holding its rkey at any time.
/// So safe code never holds a Rust reference to the bytes of a region that peers may write:
/// - [`MemoryRegion::read_at`], [`MemoryRegion::to_vec`], [`MemoryRegion::read_u64`] and
///   [`MemoryRegion::write_at`] copy through raw pointers; while a peer may be writing, what
///   they read is unspecified (any mix of old and new bytes), but never undefined behaviour.
/// - [`MemoryRegion::local_slice`] and [`MemoryRegion::local_slice_mut`] lend references only
///   for regions without remote write or atomic access, where the HCA writes only into
///   receives the owner posted: the owner reads a slot after its receive completed and before
///   it posts it again (the transport's and the CPCs' receive rings do).
/// - [`MemoryRegion::as_slice`] and [`MemoryRegion::as_mut_slice`] lend the whole buffer to
///   `unsafe` code that promises no concurrent write by the HCA.
pub struct MemoryRegion {
    reg: Registration,
    /// The buffer: `words` u64s from `Box::into_raw`, freed in Drop. A raw pointer, not a
    /// `Box`, since the HCA writes it while `&self` exists.
    buf: std::ptr::NonNull<u64>,
    words: usize,
    access: Access,
}

// SAFETY: the buffer is owned by the region (freed only in Drop); Rust code writes it only
// through `&mut self` (`write_at`, `local_slice_mut`, `as_mut_slice`), reads through `&self`
// copy or borrow it, so the usual aliasing rules hold between threads. The HCA's writes are
// outside the abstract machine and are handled by the rules above.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

/// The piece [`MemoryRegion::write_at`] and [`MemoryRegion::read_at`] copy at a time: glibc
/// copies 8 KiB and more with `rep movsb`, which TCG guests run ten times slower than its
/// vector loop (docs/PERFORMANCE.md).
const COPY_PIECE: usize = 4096;

impl MemoryRegion {
    /// Allocates `len` zeroed bytes (8-byte aligned, as atomics need) and registers them.
    pub fn alloc(pd: &ProtectionDomain, len: usize, access: Access) -> Result<MemoryRegion> {
        let words = len.div_ceil(8);
        let boxed = vec![0u64; words].into_boxed_slice();
        let buf = std::ptr::NonNull::new(Box::into_raw(boxed).cast::<u64>())
            .expect("Box::into_raw is never null");
        // SAFETY: `buf` is valid for `len` bytes and outlives the registration (see Drop).
        let reg = unsafe { Registration::new(pd, buf.as_ptr().cast(), len, access.0, "bytes") };
        let reg = match reg {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: `buf` came from Box::into_raw of `words` u64s and was never
                // registered.
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf.as_ptr(), words))
                });
                return Err(e);
            }
        };
        Ok(MemoryRegion {
            reg,
            buf,
            words,
            access,
        })
    }

    /// The access it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }
    /// Whether peers may write it (remote write or atomic access): then safe code reads and
    /// writes it only by copying.
    pub fn remote_writable(&self) -> bool {
        self.access.0 & (v::IBV_ACCESS_REMOTE_WRITE | v::IBV_ACCESS_REMOTE_ATOMIC) != 0
    }
    fn range(&self, offset: usize, len: usize, what: &'static str) -> Result<*mut u8> {
        range_in(self.buf.as_ptr().cast(), self.len(), offset, len, what)
    }

    /// Copies `dst.len()` bytes at `offset` into `dst`. Safe while peers may write the region:
    /// no reference to its bytes is made, and what a concurrent write leaves in `dst` is
    /// unspecified (stable bytes need the completion, or the message, that says the writes are
    /// done). An out-of-range request is an error.
    ///
    /// ```no_run
    /// # fn f(mr: &openib_sys::MemoryRegion) -> openib_sys::Result<()> {
    /// let mut head = [0u8; 16];
    /// mr.read_at(0, &mut head)?;
    /// # Ok(()) }
    /// ```
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = self.range(offset, dst.len(), "read_at")?;
        // SAFETY: `src..src+dst.len()` is inside the allocation (checked by `range`).
        unsafe { copy_out(src, dst) };
        Ok(())
    }

    /// A copy of `len` bytes at `offset` (see [`MemoryRegion::read_at`]).
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }

    /// The 8 bytes at `offset` (8-byte aligned) as a native-endian u64, read in one volatile
    /// load: how an atomic's old value or a counter that peers update is read.
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let p = self.range(offset, 8, "read_u64")?;
        // SAFETY: 8 bytes inside the allocation (checked by `range`), which is u64-aligned.
        unsafe { read_u64_at(p, offset) }
    }

    /// Copies `src` into the region at `offset` (see [`MemoryRegion::read_at`]; a peer's
    /// concurrent write to the same bytes leaves them unspecified). `&mut self`: no other
    /// Rust code reads or writes the region meanwhile.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let dst = self.range(offset, src.len(), "write_at")?;
        // SAFETY: inside the allocation (checked by `range`); `&mut self` excludes Rust
        // readers.
        unsafe { copy_in(src, dst) };
        Ok(())
    }

    /// `len` bytes at `offset` of a region that peers cannot write (no remote write or atomic
    /// access). The HCA writes such a region only for receives its owner posted: read a slot
    /// after its receive completed and before posting it again. An error for a remotely
    /// writable region or a range outside the region.
    pub fn local_slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.local_only("local_slice")?;
        let p = self.range(offset, len, "local_slice")?;
        // SAFETY: inside the allocation; no peer writes it (checked), no Rust code writes it
        // while `&self` lives, and the owner's receive protocol keeps the HCA off the slot.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Like [`MemoryRegion::local_slice`], writable: for building messages in send slots.
    pub fn local_slice_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8]> {
        self.local_only("local_slice_mut")?;
        let p = self.range(offset, len, "local_slice_mut")?;
        // SAFETY: as for `local_slice`, and `&mut self` excludes other Rust references.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    fn local_only(&self, verb: &'static str) -> Result<()> {
        if self.remote_writable() {
            return Err(Error::InvalidArgument {
                verb,
                what: "peers may write this region (remote write or atomic access): copy with \
                       read_at/write_at instead"
                    .into(),
            });
        }
        Ok(())
    }

    /// The whole buffer.
    ///
    /// # Safety
    /// While the returned slice lives, nothing writes the region: no peer holding its rkey
    /// writes it (no RDMA write or atomic targets it), and no receive or RDMA read posted by
    /// this process lands in it. Use [`MemoryRegion::read_at`] otherwise.
    ///
    /// Safe code cannot borrow a region's bytes this way (issue 27: it could before):
    /// ```compile_fail,E0133
    /// fn peek(mr: &openib_sys::MemoryRegion) -> u8 {
    ///     mr.as_slice()[0]
    /// }
    /// ```
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer holds `len` initialised bytes; the caller's promise on writes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len()) }
    }

    /// The whole buffer, writable.
    ///
    /// # Safety
    /// As for [`MemoryRegion::as_slice`], and the HCA does not read it either (no send, RDMA
    /// write source or remote read of it is in flight) if the bytes sent matter.
    ///
    /// ```compile_fail,E0133
    /// fn poke(mr: &mut openib_sys::MemoryRegion) {
    ///     mr.as_mut_slice()[0] = 1;
    /// }
    /// ```
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` excludes other Rust references.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr().cast(), self.len()) }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if !self.reg.deregister() {
            // The HCA may still reference the pages: leak them rather than free them.
            tracing::error!("leaking the buffer of a region that failed to deregister");
            return;
        }
        // SAFETY: `buf` came from Box::into_raw of `words` u64s in `alloc`, is freed once
        // (here), and the HCA no longer references it (deregistered).
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.buf.as_ptr(),
                self.words,
            ))
        });
    }
}

/// The address of `offset..offset+len` of the `region_len` bytes at `base`, or an error naming
/// `what`.
fn range_in(
    base: *mut u8,
    region_len: usize,
    offset: usize,
    len: usize,
    what: &'static str,
) -> Result<*mut u8> {
    match offset.checked_add(len) {
        // `wrapping_add` stays inside the allocation (`offset <= region_len`): no unsafe needed.
        Some(end) if end <= region_len => Ok(base.wrapping_add(offset)),
        _ => Err(Error::InvalidArgument {
            verb: what,
            what: format!("range {offset}+{len} is outside the {region_len}-byte region"),
        }),
    }
}

/// Copies `dst.len()` bytes from `src` into `dst`, [`COPY_PIECE`] at a time, without making a
/// reference to the source bytes.
///
/// # Safety
/// `src..src+dst.len()` is readable memory outside `dst`.
unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.chunks_mut(COPY_PIECE).enumerate() {
        // SAFETY: the caller's promise; piece `i` starts at `i * COPY_PIECE < dst.len()`.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i * COPY_PIECE), d.as_mut_ptr(), d.len()) };
    }
}

/// Copies `src` to `dst..dst+src.len()`, [`COPY_PIECE`] at a time.
///
/// # Safety
/// `dst..dst+src.len()` is writable memory outside `src` that no Rust reference covers.
unsafe fn copy_in(src: &[u8], dst: *mut u8) {
    for (i, s) in src.chunks(COPY_PIECE).enumerate() {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), dst.add(i * COPY_PIECE), s.len()) };
    }
}

/// One volatile load of the native-endian u64 at `p`, which is `offset` bytes into a
/// u64-aligned buffer; an error when `offset` is not 8-byte aligned.
///
/// # Safety
/// `p..p+8` is readable.
unsafe fn read_u64_at(p: *const u8, offset: usize) -> Result<u64> {
    if offset % 8 != 0 {
        return Err(Error::InvalidArgument {
            verb: "read_u64",
            what: format!("offset {offset} is not 8-byte aligned"),
        });
    }
    // SAFETY: readable (the caller), aligned (an aligned base plus a multiple of 8).
    Ok(unsafe { std::ptr::read_volatile(p.cast::<u64>()) })
}

/// A scatter/gather entry for `offset..offset+len` of a `region_len`-byte region at `addr`.
fn sge_within(
    addr: u64,
    lkey: u32,
    region_len: usize,
    offset: usize,
    len: usize,
) -> Result<crate::wr::Sge> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len && len <= u32::MAX as usize => Ok(crate::wr::Sge {
            addr: addr + offset as u64,
            length: len as u32,
            lkey,
        }),
        _ => Err(Error::InvalidArgument {
            verb: "sge",
            what: format!("range {offset}+{len} is outside the {region_len}-byte region"),
        }),
    }
}

/// A registration of shared, immutable bytes (`Arc<[u8]>`) for the HCA to read: zero copy from
/// memory the caller allocated. The region holds a reference to the bytes, so while it lives
/// they can be neither freed nor changed (no `Arc::get_mut` succeeds while a second reference
/// exists, and `[u8]` has no interior mutability). Access is local read and remote read only:
/// the HCA never writes these pages. Dropping the region deregisters it before the reference
/// is released.
pub struct SharedRegion {
    reg: Registration,
    data: std::sync::Arc<[u8]>,
}

impl SharedRegion {
    /// Registers `data` on `pd` for local and remote reads.
    pub fn register(pd: &ProtectionDomain, data: std::sync::Arc<[u8]>) -> Result<SharedRegion> {
        // SAFETY: `data` is valid for `data.len()` bytes and is kept alive, unchanged, by the
        // reference this region holds until Drop has deregistered it. The registration grants
        // no write access, so the HCA only reads it (a cast to *mut is what the C API takes).
        let reg = unsafe {
            Registration::new(
                pd,
                data.as_ptr() as *mut std::ffi::c_void,
                data.len(),
                v::IBV_ACCESS_REMOTE_READ,
                "shared bytes",
            )?
        };
        Ok(SharedRegion { reg, data })
    }

    /// The registered bytes.
    pub fn data(&self) -> &std::sync::Arc<[u8]> {
        &self.data
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        if !self.reg.deregister() {
            // The HCA may still reference the pages: keep them rather than release them.
            tracing::error!("keeping the shared bytes of a region that failed to deregister");
            std::mem::forget(self.data.clone());
        }
    }
}

/// A registration of memory this process holds elsewhere (a C caller's buffer): read-only for
/// the HCA ([`ForeignRegion::register`], zero-copy sends through the C ABI), or read-write
/// with remote access ([`ForeignRegion::register_writable`], put/get/atomics by address). It does not own the bytes; its creator
/// promises they stay allocated (and, when read-only, unchanged) while it lives.
pub struct ForeignRegion {
    reg: Registration,
}

impl ForeignRegion {
    /// Registers `len` bytes at `ptr` on `pd` for local and remote reads.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be memory of this process that is readable, stays allocated, and is
    /// not changed until the returned region is dropped: peers read it by RDMA in the meantime.
    /// (The kernel pins the pages, so the HCA never reads memory freed under it; breaking the
    /// promise sends unspecified bytes, and lets a peer read what the pages then hold.)
    pub unsafe fn register(
        pd: &ProtectionDomain,
        ptr: *const u8,
        len: usize,
    ) -> Result<ForeignRegion> {
        // SAFETY: the caller's promise on `ptr..ptr+len`; no write access is granted.
        let reg = unsafe {
            Registration::new(
                pd,
                ptr as *mut std::ffi::c_void,
                len,
                v::IBV_ACCESS_REMOTE_READ,
                "foreign bytes",
            )?
        };
        Ok(ForeignRegion { reg })
    }
}

impl ForeignRegion {
    /// Registers `len` bytes at `ptr` on `pd` for local write and remote read, write and
    /// atomics ([`Access::ALL`]): memory a C caller owns, for put, get and atomics by address.
    /// Peers holding its rkey may write the bytes at any time, and so may this process's gets
    /// and atomics: Rust code never reads or writes them through this region.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be memory of this process that stays allocated until the returned
    /// region is dropped, and that the caller accepts the HCA reading and writing meanwhile
    /// (no Rust reference to those bytes may exist while they are written). The kernel pins
    /// the pages, so freeing them earlier lets the HCA write pages the allocator hands out
    /// again: the caller must not.
    pub unsafe fn register_writable(
        pd: &ProtectionDomain,
        ptr: *mut u8,
        len: usize,
    ) -> Result<ForeignRegion> {
        // SAFETY: the caller's promise on `ptr..ptr+len`, writes included.
        let reg = unsafe {
            Registration::new(
                pd,
                ptr.cast::<std::ffi::c_void>(),
                len,
                Access::ALL.0,
                "caller bytes",
            )?
        };
        Ok(ForeignRegion { reg })
    }
}

impl Drop for ForeignRegion {
    fn drop(&mut self) {
        // Nothing to keep on failure: the bytes are the caller's (logged by `deregister`).
        self.reg.deregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy accessors' logic on plain memory (a registration needs a device): ranges are
    /// checked, copies span several pieces, and u64 reads need alignment.
    #[test]
    fn copies_check_their_range_and_cross_pieces() {
        let mut mem = vec![0u64; 2 * COPY_PIECE / 8 + 2];
        let len = mem.len() * 8 - 3;
        let base = mem.as_mut_ptr().cast::<u8>();
        let data: Vec<u8> = (0..COPY_PIECE + 100).map(|i| (i % 251) as u8).collect();
        let at = range_in(base, len, 5, data.len(), "t").unwrap();
        // SAFETY: `at..at+data.len()` is inside `mem`, which nothing else references now.
        unsafe { copy_in(&data, at) };
        let mut back = vec![0u8; data.len()];
        // SAFETY: as above.
        unsafe { copy_out(at, &mut back) };
        assert_eq!(back, data);
        assert!(range_in(base, len, len - 1, 2, "t").is_err());
        assert!(range_in(base, len, usize::MAX, 2, "t").is_err());
        assert!(range_in(base, len, len, 0, "t").is_ok());
        let p = range_in(base, len, 8, 8, "t").unwrap();
        // SAFETY: 8 readable bytes of `mem`.
        let v = unsafe { read_u64_at(p, 8) }.unwrap();
        assert_eq!(v.to_ne_bytes(), data[3..11]);
        // SAFETY: as above.
        assert!(unsafe { read_u64_at(base.wrapping_add(4), 4) }.is_err());
    }
}
