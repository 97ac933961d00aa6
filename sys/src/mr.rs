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

/// One `ibv_mr` handle and the protection domain it lives in. It does not deregister itself:
/// the region that owns it calls [`Registration::deregister`] in its Drop, before it releases
/// the memory, and decides what to do when that fails.
struct Registration {
    raw: *mut v::ibv_mr,
    pd: ProtectionDomain,
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

/// A registered buffer owned by this value. The buffer is deregistered before it is freed, so
/// the HCA never touches freed memory: a work request still referencing it completes in error.
///
/// The HCA may write the buffer while Rust code reads it (that is what RDMA is for); callers
/// read it only after the completion (or the protocol message) that says the write is done.
pub struct MemoryRegion {
    reg: Registration,
    buf: Box<[u64]>,
    len: usize,
}

impl MemoryRegion {
    /// Allocates `len` zeroed bytes (8-byte aligned, as atomics need) and registers them.
    pub fn alloc(pd: &ProtectionDomain, len: usize, access: Access) -> Result<MemoryRegion> {
        let mut buf = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        // SAFETY: `buf` is valid for `len` bytes and outlives the registration (see Drop).
        let reg =
            unsafe { Registration::new(pd, buf.as_mut_ptr().cast(), len, access.0, "bytes")? };
        Ok(MemoryRegion { reg, buf, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn lkey(&self) -> u32 {
        self.reg.lkey()
    }
    pub fn rkey(&self) -> u32 {
        self.reg.rkey()
    }
    /// The virtual address peers use in RDMA requests.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only Rust reference.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast(), self.len) }
    }
    pub fn pd(&self) -> &ProtectionDomain {
        &self.reg.pd
    }
    /// A scatter/gather entry for `offset..offset+len` of this region.
    pub fn sge(&self, offset: usize, len: usize) -> Result<crate::qp::Sge> {
        sge_within(self.addr(), self.lkey(), self.len, offset, len)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if !self.reg.deregister() {
            // The HCA may still reference the pages: leak them rather than free them.
            tracing::error!("leaking the buffer of a region that failed to deregister");
            std::mem::forget(std::mem::take(&mut self.buf));
        }
    }
}

/// A scatter/gather entry for `offset..offset+len` of a `region_len`-byte region at `addr`.
fn sge_within(
    addr: u64,
    lkey: u32,
    region_len: usize,
    offset: usize,
    len: usize,
) -> Result<crate::qp::Sge> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len && len <= u32::MAX as usize => Ok(crate::qp::Sge {
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
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn lkey(&self) -> u32 {
        self.reg.lkey()
    }
    pub fn rkey(&self) -> u32 {
        self.reg.rkey()
    }
    /// The virtual address peers use in RDMA requests.
    pub fn addr(&self) -> u64 {
        self.data.as_ptr() as u64
    }
    pub fn pd(&self) -> &ProtectionDomain {
        &self.reg.pd
    }
    /// A scatter/gather entry for `offset..offset+len` of these bytes.
    pub fn sge(&self, offset: usize, len: usize) -> Result<crate::qp::Sge> {
        sge_within(self.addr(), self.lkey(), self.len(), offset, len)
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

/// A read-only registration of memory this process holds elsewhere (a C caller's buffer), for
/// the HCA to read: zero copy through the C ABI. It does not own the bytes; its creator
/// promises they stay allocated and unchanged while it lives. Local read and remote read only.
pub struct ForeignRegion {
    reg: Registration,
    addr: u64,
    len: usize,
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
        Ok(ForeignRegion {
            reg,
            addr: ptr as u64,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn lkey(&self) -> u32 {
        self.reg.lkey()
    }
    pub fn rkey(&self) -> u32 {
        self.reg.rkey()
    }
    /// The virtual address peers use in RDMA requests.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn pd(&self) -> &ProtectionDomain {
        &self.reg.pd
    }
    /// A scatter/gather entry for `offset..offset+len` of the region.
    pub fn sge(&self, offset: usize, len: usize) -> Result<crate::qp::Sge> {
        sge_within(self.addr, self.lkey(), self.len, offset, len)
    }
}

impl Drop for ForeignRegion {
    fn drop(&mut self) {
        // Nothing to keep on failure: the bytes are the caller's (logged by `deregister`).
        self.reg.deregister();
    }
}
