//! Opening on the host's runtime (`openib_open_runtime`: an MPI library's modex, whose fence
//! the host runs itself) and asking whether a peer is reachable (`openib_reachable`).

use super::*;
use openib_rs::runtime::host::{HostOps, HostRuntime};
use openib_rs::runtime::RuntimeError;

/// The version of [`openib_runtime_ops_t`] this library reads.
pub const OPENIB_RUNTIME_OPS_VERSION: u32 = 1;

/// `get`'s result when the rank published nothing under the key.
pub const OPENIB_RUNTIME_NOT_FOUND: c_int = 1;

/// The host's runtime (`openib_runtime_ops_t`): this process's place in the job and the
/// host's put/commit/get, which the transport calls with `ctx`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct openib_runtime_ops_t {
    /// [`OPENIB_RUNTIME_OPS_VERSION`].
    pub version: u32,
    pub rank: u32,
    pub size: u32,
    /// Zero.
    pub reserved: u32,
    /// This process's node name (NUL-terminated; NULL: the host name). Copied at open.
    pub node: *const c_char,
    pub ctx: *mut c_void,
    /// Publishes `len` bytes under `key` for every process of the job; 0 or negative.
    pub put: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            key: *const c_char,
            value: *const c_void,
            len: usize,
        ) -> c_int,
    >,
    /// Hands the puts to the host's runtime; NULL: nothing to do. 0 or negative.
    pub commit: Option<unsafe extern "C" fn(ctx: *mut c_void) -> c_int>,
    /// The value `rank` published under `key`: 0 with `*value_out`/`*len_out` set,
    /// [`OPENIB_RUNTIME_NOT_FOUND`] when it published none, or negative.
    pub get: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            rank: u32,
            key: *const c_char,
            value_out: *mut *mut c_void,
            len_out: *mut usize,
        ) -> c_int,
    >,
    /// Frees a value `get` returned, after the transport copied it; NULL: the host keeps it.
    pub release: Option<unsafe extern "C" fn(ctx: *mut c_void, value: *mut c_void)>,
}

/// The host's callbacks as [`HostOps`].
struct COps(openib_runtime_ops_t);

/// [`COps`] for the unit tests (the caller vouches for `ops` as openib_open_runtime's does).
#[cfg(test)]
pub(crate) fn test_ops(ops: openib_runtime_ops_t) -> impl HostOps {
    COps(ops)
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(openib_runtime_ops_t, node) == 16);
    assert!(offset_of!(openib_runtime_ops_t, put) == 32);
    assert!(offset_of!(openib_runtime_ops_t, release) == 56);
    assert!(size_of::<openib_runtime_ops_t>() == 64);
};

// SAFETY: the caller of openib_open_runtime promised that the callbacks may be called with
// `ctx` from any thread that calls a function on the handle, until it is closed.
unsafe impl Send for COps {}
// SAFETY: as above.
unsafe impl Sync for COps {}

fn host_err(what: String) -> RuntimeError {
    RuntimeError::Backend {
        backend: "host",
        what,
    }
}

fn c_key(key: &str) -> Result<CString, RuntimeError> {
    CString::new(key).map_err(|_| host_err(format!("key {key:?} holds a NUL")))
}

impl HostOps for COps {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), RuntimeError> {
        let put = self.0.put.expect("checked at open");
        let k = c_key(key)?;
        // SAFETY: the caller's contract on `put` and `ctx`; key and value live for the call.
        let rc = unsafe { put(self.0.ctx, k.as_ptr(), value.as_ptr().cast(), value.len()) };
        if rc < 0 {
            return Err(host_err(format!("put of {key:?} failed ({rc})")));
        }
        Ok(())
    }
    fn commit(&self) -> Result<(), RuntimeError> {
        let Some(commit) = self.0.commit else {
            return Ok(());
        };
        // SAFETY: the caller's contract on `commit` and `ctx`.
        let rc = unsafe { commit(self.0.ctx) };
        if rc < 0 {
            return Err(host_err(format!("commit failed ({rc})")));
        }
        Ok(())
    }
    fn get(&self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, RuntimeError> {
        let get = self.0.get.expect("checked at open");
        let k = c_key(key)?;
        let mut value: *mut c_void = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the caller's contract on `get` and `ctx`; the out-pointers are locals.
        let rc = unsafe { get(self.0.ctx, rank, k.as_ptr(), &mut value, &mut len) };
        if rc == OPENIB_RUNTIME_NOT_FOUND {
            return Ok(None);
        }
        if rc != 0 {
            return Err(host_err(format!(
                "get of {key:?} from rank {rank} failed ({rc})"
            )));
        }
        let bytes = if len == 0 {
            Vec::new()
        } else if value.is_null() {
            return Err(host_err(format!(
                "get of {key:?} from rank {rank} returned NULL for {len} bytes"
            )));
        } else {
            // SAFETY: the host's contract: `value` holds `len` bytes until released.
            unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec()
        };
        if let (Some(release), false) = (self.0.release, value.is_null()) {
            // SAFETY: `value` came from this `get` and is released once.
            unsafe { release(self.0.ctx, value) };
        }
        Ok(Some(bytes))
    }
}

/// Opens the transport on the host's runtime `ops` (see `openib_runtime_ops_t` in the
/// header): discovers the ports, opens the CPC services, publishes this process's modex with
/// one `put` and a `commit`, and returns WITHOUT a fence: the host runs its fence afterwards,
/// and peers' modex are read with `get` when first needed (`openib_reachable`, a send, or
/// their connection attempt). A process without a usable port fails here and publishes
/// nothing; its peers then find it unreachable.
///
/// # Safety
/// `ops` is NULL or readable; its callbacks may be called with its `ctx` from any thread that
/// calls a function on the handle, until `openib_close`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_open_runtime(
    ops: *const openib_runtime_ops_t,
    out: *mut *mut openib_t,
) -> c_int {
    call("openib_open_runtime", || {
        // SAFETY: the caller's contract on `out`.
        unsafe { put_out(out, std::ptr::null_mut(), "out") }?;
        if ops.is_null() {
            return Err(null("ops"));
        }
        // SAFETY: non-NULL and readable (the caller's contract).
        let ops = unsafe { *ops };
        if ops.version != OPENIB_RUNTIME_OPS_VERSION {
            return Err(Fail::new(
                OPENIB_ERR_INVALID,
                format!(
                    "ops->version is {}, this library reads version {OPENIB_RUNTIME_OPS_VERSION}",
                    ops.version
                ),
            ));
        }
        if ops.put.is_none() {
            return Err(null("ops->put"));
        }
        if ops.get.is_none() {
            return Err(null("ops->get"));
        }
        let node = if ops.node.is_null() {
            openib_rs::runtime::singleton::hostname()
        } else {
            // SAFETY: a NUL-terminated string (the caller's contract).
            unsafe { CStr::from_ptr(ops.node) }
                .to_string_lossy()
                .into_owned()
        };
        let rt = HostRuntime::new(ops.rank, ops.size, node, Box::new(COps(ops)))
            .map_err(|e| Fail::new(OPENIB_ERR_INVALID, format!("ops: {e}")))?;
        init_logging();
        let cfg = TransportConfig::from_env(PingConfig {
            derive: openib_rs::transport::derive_from_env()?,
            cpc: None,
            timeout: Duration::from_secs(60),
            mode: ExchangeMode::OnDemand,
        })?;
        let t = Transport::open_host(Box::new(rt), cfg).map_err(open_failure)?;
        let h = new_handle(t);
        // SAFETY: as above.
        unsafe { put_out(out, h, "out") }?;
        Ok(OPENIB_OK)
    })
}

/// Whether rank `peer` can be reached: 1 yes (a port pair and a CPC connect to it; the
/// connection is still made on first use; this process's own rank is reachable through a
/// loopback queue pair, docs/TRANSPORT.md), 0 no (`openib_last_error` says why: it published
/// no modex, no common subnet or CPC, or it was removed), or a negative error
/// (`OPENIB_ERR_BAD_PEER` for a rank outside the job). On a handle of `openib_open_runtime`
/// the first call for a peer reads its modex through the host's `get`.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn openib_reachable(t: *mut openib_t, peer: u32) -> c_int {
    call("openib_reachable", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        if peer >= h.size {
            return Err(TransportError::BadPeer { peer, size: h.size }.into());
        }
        let mut l = h.lock()?;
        match l.t().reachable(peer) {
            Ok(()) => Ok(1),
            Err(e @ (TransportError::NoPath { .. } | TransportError::BadPeer { .. })) => {
                set_last_error(format!("openib_reachable: {e}"));
                Ok(0)
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// The number of usable ports of this machine under the settings (`OPENIB_IF_INCLUDE` /
/// `OPENIB_IF_EXCLUDE`, ...), in `*count`: a host that opens one transport per port opens
/// the i-th with `OPENIB_PORT_INDEX=i` (and its own `OPENIB_HOST_SLOT`). 0 ports is
/// `OPENIB_OK` with `*count` 0; no libibverbs or no device is `OPENIB_ERR_NO_VERBS` /
/// `OPENIB_ERR_NO_DEVICE`, a refused filter `OPENIB_ERR_SETUP`.
///
/// # Safety
/// `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_usable_ports(count: *mut u32) -> c_int {
    call("openib_usable_ports", || {
        // SAFETY: the caller's contract on `count`.
        unsafe { put_out(count, 0, "count") }?;
        let derive = openib_rs::transport::derive_from_env()?;
        let names = openib_rs::transport::wireup::usable_port_names(&derive)
            .map_err(|e| open_failure(TransportError::Wireup(e)))?;
        // SAFETY: as above.
        unsafe { put_out(count, names.len() as u32, "count") }?;
        Ok(OPENIB_OK)
    })
}

/// The port handle `t` serves, `device:port` (e.g. "rxe0:1"), NUL-terminated into `buf` of
/// `len` bytes: `OPENIB_OK`, or `OPENIB_ERR_RANGE` when it does not fit (`buf` then holds "").
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn openib_port_name(t: *mut openib_t, buf: *mut c_char, len: usize) -> c_int {
    call("openib_port_name", || {
        // SAFETY: the caller's contract on `t`.
        let h = unsafe { handle(t) }?;
        if buf.is_null() || len == 0 {
            return Err(null("buf"));
        }
        let name = h.lock()?.t().port_name();
        // SAFETY: writable for `len` bytes (the caller's contract), len > 0.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        out[0] = 0;
        if name.len() + 1 > len {
            return Err(Fail::new(
                OPENIB_ERR_RANGE,
                format!(
                    "port name {name:?} needs {} bytes, buf has {len}",
                    name.len() + 1
                ),
            ));
        }
        out[..name.len()].copy_from_slice(name.as_bytes());
        out[name.len()] = 0;
        Ok(OPENIB_OK)
    })
}
