//! The device list (`ibv_get_device_list`).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use std::ffi::CStr;

/// The RDMA devices present, as one `ibv_get_device_list` snapshot. Open the devices you need
/// before dropping the list (the list's entries die with it; open contexts do not).
pub struct DeviceList {
    list: *mut *mut v::ibv_device,
    len: usize,
}

// SAFETY: the list is an immutable array owned by this value; libibverbs allows using it from
// any thread.
unsafe impl Send for DeviceList {}
unsafe impl Sync for DeviceList {}

/// One entry of a [`DeviceList`].
#[derive(Clone, Copy)]
pub struct DeviceInfo<'a> {
    dev: *mut v::ibv_device,
    _list: &'a DeviceList,
}

/// The devices libibverbs finds (an empty list when there are none).
pub fn devices() -> Result<DeviceList> {
    let lib = verbs()?;
    let mut n: i32 = 0;
    // SAFETY: `n` is a valid out pointer; a NULL return reports errno.
    let list = unsafe { lib.ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(Error::last_os(
            "ibv_get_device_list",
            "is the ib_uverbs kernel module loaded?",
        ));
    }
    Ok(DeviceList {
        list,
        len: n.max(0) as usize,
    })
}

impl DeviceList {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = DeviceInfo<'_>> + '_ {
        // SAFETY: ibv_get_device_list returned an array of `len` valid device pointers.
        (0..self.len).map(move |i| DeviceInfo {
            dev: unsafe { *self.list.add(i) },
            _list: self,
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
            unsafe { lib.ibv_free_device_list(self.list) };
        }
    }
}

impl DeviceInfo<'_> {
    /// The kernel name of the device (`mlx5_0`, `rxe0`).
    pub fn name(&self) -> String {
        // SAFETY: `dev` is a valid device of a live list; the name is a NUL-terminated array.
        unsafe { CStr::from_ptr((*self.dev).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
    /// The node GUID in host order.
    pub fn guid(&self) -> u64 {
        let lib = verbs().expect("a DeviceInfo exists only once libibverbs is loaded");
        // SAFETY: `dev` is valid; the verb returns the GUID in network byte order.
        u64::from_be(unsafe { lib.ibv_get_device_guid(self.dev) })
    }
    /// `IBV_NODE_*`: 1 = CA, 2 = switch, 3 = router, 4 = RNIC, ...
    pub fn node_type(&self) -> i32 {
        // SAFETY: `dev` is valid.
        unsafe { (*self.dev).node_type }
    }
    /// `IBV_TRANSPORT_*`: 0 = IB (also RoCE), 1 = iWARP, ...
    pub fn transport_type(&self) -> i32 {
        // SAFETY: `dev` is valid.
        unsafe { (*self.dev).transport_type }
    }
    /// Opens the device. The context stays valid after the list is dropped.
    pub fn open(&self) -> Result<Context> {
        let lib = verbs()?;
        // SAFETY: `dev` is a valid device of a live list.
        let ctx = unsafe { lib.ibv_open_device(self.dev) };
        if ctx.is_null() {
            return Err(Error::last_os("ibv_open_device", self.name()));
        }
        Ok(Context::from_raw(ctx, self.name()))
    }
}
