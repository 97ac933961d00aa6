//! An open device (`ibv_context`): queries, and the parent of every other verbs object.

use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use std::ffi::CStr;
use std::sync::Arc;

/// Room for `ibv_query_gid_table`, in tables of the queried port's length: the call returns
/// the populated entries of every port of the device and fails when they do not fit.
const GID_TABLE_ROOM: usize = 4;
/// ... but at most this many: the kernel takes the buffer as an ioctl attribute whose length
/// is 16 bits (65,535 bytes of 32-byte entries); a larger one fails with EINVAL.
const GID_TABLE_MAX_ROOM: usize = 65535 / std::mem::size_of::<v::ibv_gid_entry>();

pub(crate) struct ContextInner {
    pub(crate) raw: *mut v::ibv_context,
    pub(crate) name: String,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs locks internally).
unsafe impl Send for ContextInner {}
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Children (PD, CQ, channels) hold an Arc to us, so they are gone by now.
        if let Ok(lib) = verbs() {
            // SAFETY: `raw` came from ibv_open_device and is closed exactly once.
            let rc = unsafe { lib.ibv_close_device(self.raw) };
            if rc != 0 {
                tracing::warn!(device = %self.name, rc, "ibv_close_device failed");
            }
        }
    }
}

/// An open RDMA device. Cheap to clone (shared).
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// What `ibv_query_device` reports that openib uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub atomic_cap: u32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub phys_port_cnt: u8,
}

impl DeviceAttr {
    /// The device supports XRC (`IBV_DEVICE_XRC`).
    pub fn has_xrc(&self) -> bool {
        self.device_cap_flags & v::IBV_DEVICE_XRC != 0
    }
}

/// What `ibv_query_port` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
}

/// One GID table entry (`ibv_query_gid_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: [u8; 16],
    pub index: u32,
    pub port: u32,
    /// `IBV_GID_TYPE_IB` (0), `_ROCE_V1` (1) or `_ROCE_V2` (2).
    pub gid_type: u32,
    /// Interface index of the network device of a RoCE GID; 0 when none.
    pub ndev_ifindex: u32,
}

impl GidEntry {
    /// The entry the library filled in, or `None` for an unpopulated one (all-zero GID).
    fn from_raw(e: &v::ibv_gid_entry) -> Option<GidEntry> {
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        let gid = unsafe { e.gid.raw };
        (gid != [0; 16]).then_some(GidEntry {
            gid,
            index: e.gid_index,
            port: e.port_num,
            gid_type: e.gid_type,
            ndev_ifindex: e.ndev_ifindex,
        })
    }
}

impl Context {
    pub(crate) fn from_raw(raw: *mut v::ibv_context, name: String) -> Context {
        Context {
            inner: Arc::new(ContextInner { raw, name }),
        }
    }

    /// The device name this context was opened from.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn raw(&self) -> *mut v::ibv_context {
        self.inner.raw
    }

    pub fn query_device(&self) -> Result<DeviceAttr> {
        let lib = verbs()?;
        let mut a = v::ibv_device_attr::default();
        // SAFETY: valid context and out struct.
        let rc = unsafe { lib.ibv_query_device(self.raw(), &mut a) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_device", rc, &self.inner.name));
        }
        // SAFETY: fw_ver is a NUL-terminated array filled by the provider (zeroed before).
        let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(DeviceAttr {
            fw_ver,
            node_guid: u64::from_be(a.node_guid),
            sys_image_guid: u64::from_be(a.sys_image_guid),
            max_mr_size: a.max_mr_size,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            device_cap_flags: a.device_cap_flags,
            max_sge: a.max_sge,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_pd: a.max_pd,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            atomic_cap: a.atomic_cap,
            max_srq: a.max_srq,
            max_srq_wr: a.max_srq_wr,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// Port attributes of port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let lib = verbs()?;
        let mut a = v::ibv_port_attr::default();
        // SAFETY: the exported ibv_query_port@IBVERBS_1.1 hands the buffer to the provider's
        // query_port, which fills at most a full `ibv_port_attr`; ours is a full, zeroed one.
        let rc = unsafe {
            lib.ibv_query_port(self.raw(), port, (&mut a as *mut v::ibv_port_attr).cast())
        };
        if rc != 0 {
            return Err(Error::from_rc(
                "ibv_query_port",
                rc,
                format!("{} port {port}", self.inner.name),
            ));
        }
        Ok(PortAttr {
            state: a.state,
            max_mtu: a.max_mtu,
            active_mtu: a.active_mtu,
            gid_tbl_len: a.gid_tbl_len,
            port_cap_flags: a.port_cap_flags,
            max_msg_sz: a.max_msg_sz,
            pkey_tbl_len: a.pkey_tbl_len,
            lid: a.lid,
            sm_lid: a.sm_lid,
            lmc: a.lmc,
            max_vl_num: a.max_vl_num,
            sm_sl: a.sm_sl,
            active_width: a.active_width,
            active_speed: a.active_speed,
            phys_state: a.phys_state,
            link_layer: a.link_layer,
        })
    }

    /// GID `index` of `port` with its type, or `None` for an empty (unpopulated) entry.
    pub fn query_gid_ex(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let lib = verbs()?;
        let mut e = v::ibv_gid_entry::default();
        // SAFETY: valid context and out struct; the size argument is the struct we pass, as the
        // inline `ibv_query_gid_ex` of verbs.h does.
        let rc = unsafe {
            lib._ibv_query_gid_ex(
                self.raw(),
                port as u32,
                index,
                &mut e,
                0,
                std::mem::size_of::<v::ibv_gid_entry>(),
            )
        };
        match rc {
            // ENODATA: the entry is not populated (RoCE tables are sparse).
            0 => {}
            rc if rc == libc::ENODATA || rc == -libc::ENODATA => return Ok(None),
            rc => {
                return Err(Error::from_rc(
                    "ibv_query_gid_ex",
                    rc,
                    format!("{} port {port} index {index}", self.inner.name),
                ))
            }
        }
        Ok(GidEntry::from_raw(&e))
    }

    /// Every populated GID of `port` (table length from [`PortAttr::gid_tbl_len`]), in index
    /// order.
    ///
    /// One `ibv_query_gid_table` call (one system call for the whole device); where it fails
    /// (an older kernel, or more populated entries than room for them), a scan with one
    /// `ibv_query_gid_ex` per index: 1,024 system calls on an rxe port.
    pub fn gid_table(&self, port: u8, table_len: i32) -> Result<Vec<GidEntry>> {
        let room = (table_len.max(1) as usize * GID_TABLE_ROOM).min(GID_TABLE_MAX_ROOM);
        match self.query_gid_table(room) {
            Ok(mut all) => {
                all.retain(|e| e.port == port as u32);
                all.sort_by_key(|e| e.index);
                Ok(all)
            }
            Err(e) => {
                tracing::debug!(device = %self.inner.name, error = %e,
                    "ibv_query_gid_table failed; scanning the GID table entry by entry");
                let mut out = Vec::new();
                for index in 0..table_len.max(0) as u32 {
                    if let Some(e) = self.query_gid_ex(port, index)? {
                        out.push(e);
                    }
                }
                Ok(out)
            }
        }
    }

    /// The populated GID entries of every port of this device (`ibv_query_gid_table`), at most
    /// `room` of them (more is an error).
    fn query_gid_table(&self, room: usize) -> Result<Vec<GidEntry>> {
        let lib = verbs()?;
        let mut entries = vec![v::ibv_gid_entry::default(); room];
        // SAFETY: valid context; `entries` has room for `room` entries of the size we pass, as
        // the inline `ibv_query_gid_table` of verbs.h does.
        let n = unsafe {
            lib._ibv_query_gid_table(
                self.raw(),
                entries.as_mut_ptr(),
                room,
                0,
                std::mem::size_of::<v::ibv_gid_entry>(),
            )
        };
        if n < 0 {
            return Err(Error::from_rc(
                "ibv_query_gid_table",
                n as i32,
                format!("{} ({room} entries of room)", self.inner.name),
            ));
        }
        entries.truncate((n as usize).min(room));
        Ok(entries.iter().filter_map(GidEntry::from_raw).collect())
    }

    /// Waits for the next asynchronous event of this device (blocks). See [`crate::AsyncEvent`].
    pub fn get_async_event(&self) -> Result<crate::AsyncEvent> {
        crate::async_event::get(self)
    }

    /// Waits up to `timeout` for the next asynchronous event; `None` if none came.
    pub fn poll_async_event(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<crate::AsyncEvent>> {
        crate::async_event::poll(self, timeout)
    }
}
