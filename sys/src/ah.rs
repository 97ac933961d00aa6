//! Address handles (`ibv_create_ah`): where a UD datagram goes.

use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use crate::pd::ProtectionDomain;

/// A destination on the fabric, as an address handle needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Destination {
    pub port: u8,
    pub dlid: u16,
    /// Route with a GRH to this GID (always on RoCE).
    pub dgid: Option<[u8; 16]>,
    pub sgid_index: u8,
    pub service_level: u8,
}

/// An address handle. Holds its PD alive.
pub struct AddressHandle {
    raw: *mut v::ibv_ah,
    _pd: ProtectionDomain,
}

// SAFETY: AHs are thread-safe verbs objects.
unsafe impl Send for AddressHandle {}
unsafe impl Sync for AddressHandle {}

impl AddressHandle {
    pub fn new(pd: &ProtectionDomain, d: &Destination) -> Result<AddressHandle> {
        let lib = verbs()?;
        let mut attr = v::ibv_ah_attr {
            dlid: d.dlid,
            sl: d.service_level,
            port_num: d.port,
            ..Default::default()
        };
        if let Some(gid) = d.dgid {
            attr.is_global = 1;
            attr.grh.dgid = v::ibv_gid { raw: gid };
            attr.grh.sgid_index = d.sgid_index;
            attr.grh.hop_limit = 64;
        }
        // SAFETY: valid PD and plain-data attributes.
        let raw = unsafe { lib.ibv_create_ah(pd.raw(), &mut attr) };
        if raw.is_null() {
            return Err(Error::last_os("ibv_create_ah", format!("{d:?}")));
        }
        Ok(AddressHandle {
            raw,
            _pd: pd.clone(),
        })
    }

    pub(crate) fn raw(&self) -> *mut v::ibv_ah {
        self.raw
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: live AH, destroyed once; sends using it hold a borrow of it until posted,
            // and a posted UD send does not need the AH after the post returns.
            unsafe { lib.ibv_destroy_ah(self.raw) };
        }
    }
}
