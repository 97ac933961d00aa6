//! Error codes (`enum openib_error` of include/openib.h), the thread's last error, and
//! [`call`], the wrapper every entry point runs in (no panic crosses the boundary).

use super::*;

pub const OPENIB_OK: c_int = 0;
pub const OPENIB_ERR_INVALID: c_int = -1;
pub const OPENIB_ERR_NO_VERBS: c_int = -2;
pub const OPENIB_ERR_NO_DEVICE: c_int = -3;
pub const OPENIB_ERR_SETUP: c_int = -4;
pub const OPENIB_ERR_RUNTIME: c_int = -5;
pub const OPENIB_ERR_NO_PATH: c_int = -6;
pub const OPENIB_ERR_BAD_PEER: c_int = -7;
pub const OPENIB_ERR_ENDPOINT_FAILED: c_int = -8;
pub const OPENIB_ERR_TOO_LARGE: c_int = -9;
pub const OPENIB_ERR_RANGE: c_int = -10;
pub const OPENIB_ERR_TIMEOUT: c_int = -11;
pub const OPENIB_ERR_VERBS: c_int = -12;
pub const OPENIB_ERR_REENTRANT: c_int = -13;
pub const OPENIB_ERR_PANIC: c_int = -14;
pub const OPENIB_ERR_OTHER: c_int = -15;
pub const OPENIB_ERR_BUSY: c_int = -16;
pub const OPENIB_ERR_EXCLUDED: c_int = -17;

/// Every code, its header name and what `openib_strerror` says.
pub(crate) const CODES: &[(c_int, &str, &CStr)] = &[
    (OPENIB_OK, "OPENIB_OK", c"success"),
    (
        OPENIB_ERR_INVALID,
        "OPENIB_ERR_INVALID",
        c"invalid argument",
    ),
    (
        OPENIB_ERR_NO_VERBS,
        "OPENIB_ERR_NO_VERBS",
        c"libibverbs cannot be loaded",
    ),
    (
        OPENIB_ERR_NO_DEVICE,
        "OPENIB_ERR_NO_DEVICE",
        c"no RDMA device",
    ),
    (
        OPENIB_ERR_SETUP,
        "OPENIB_ERR_SETUP",
        c"transport setup failed",
    ),
    (
        OPENIB_ERR_RUNTIME,
        "OPENIB_ERR_RUNTIME",
        c"runtime or modex exchange failed",
    ),
    (
        OPENIB_ERR_NO_PATH,
        "OPENIB_ERR_NO_PATH",
        c"peer not reachable",
    ),
    (
        OPENIB_ERR_BAD_PEER,
        "OPENIB_ERR_BAD_PEER",
        c"peer rank out of range",
    ),
    (
        OPENIB_ERR_ENDPOINT_FAILED,
        "OPENIB_ERR_ENDPOINT_FAILED",
        c"endpoint failed",
    ),
    (
        OPENIB_ERR_TOO_LARGE,
        "OPENIB_ERR_TOO_LARGE",
        c"message too large",
    ),
    (
        OPENIB_ERR_RANGE,
        "OPENIB_ERR_RANGE",
        c"range outside the region",
    ),
    (OPENIB_ERR_TIMEOUT, "OPENIB_ERR_TIMEOUT", c"timed out"),
    (OPENIB_ERR_VERBS, "OPENIB_ERR_VERBS", c"verbs call failed"),
    (
        OPENIB_ERR_REENTRANT,
        "OPENIB_ERR_REENTRANT",
        c"called from inside the handle's own callback",
    ),
    (OPENIB_ERR_PANIC, "OPENIB_ERR_PANIC", c"internal panic"),
    (
        OPENIB_ERR_OTHER,
        "OPENIB_ERR_OTHER",
        c"other transport error",
    ),
    (
        OPENIB_ERR_BUSY,
        "OPENIB_ERR_BUSY",
        c"cannot post now; retry after progress",
    ),
    (
        OPENIB_ERR_EXCLUDED,
        "OPENIB_ERR_EXCLUDED",
        c"left out of the new group",
    ),
];

/// A failed call: its code and the message `openib_last_error` returns.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) code: c_int,
    pub(crate) msg: String,
}

impl Fail {
    pub(crate) fn new(code: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

pub(crate) fn null(arg: &str) -> Fail {
    Fail::new(OPENIB_ERR_INVALID, format!("{arg} is NULL"))
}

pub(crate) fn verbs_code(e: &openib_sys::Error) -> c_int {
    match e {
        openib_sys::Error::LibraryNotFound { .. } => OPENIB_ERR_NO_VERBS,
        _ => OPENIB_ERR_VERBS,
    }
}

/// The code of a transport error. New `TransportError` variants land in the last arm until
/// they get a code of their own.
pub(crate) fn code_of(e: &TransportError) -> c_int {
    #[allow(unreachable_patterns)]
    match e {
        TransportError::Wireup(PingError::Setup(_)) => OPENIB_ERR_SETUP,
        TransportError::Wireup(PingError::Runtime(_) | PingError::Exchange(_)) => {
            OPENIB_ERR_RUNTIME
        }
        TransportError::Wireup(PingError::Verbs(v)) | TransportError::Verbs(v) => verbs_code(v),
        TransportError::NoPath { .. } => OPENIB_ERR_NO_PATH,
        TransportError::EndpointFailed { .. } | TransportError::Peer { .. } => {
            OPENIB_ERR_ENDPOINT_FAILED
        }
        TransportError::TooLarge { .. } => OPENIB_ERR_TOO_LARGE,
        TransportError::ReservedTag => OPENIB_ERR_INVALID,
        TransportError::TagInUse { .. } => OPENIB_ERR_INVALID,
        TransportError::InCallback { .. } => OPENIB_ERR_REENTRANT,
        TransportError::BadPeer { .. } => OPENIB_ERR_BAD_PEER,
        TransportError::Timeout { .. } => OPENIB_ERR_TIMEOUT,
        TransportError::Range { .. } => OPENIB_ERR_RANGE,
        TransportError::Misaligned { .. } => OPENIB_ERR_INVALID,
        TransportError::NotACallerToken { .. } => OPENIB_ERR_INVALID,
        TransportError::Setting(_) => OPENIB_ERR_SETUP,
        TransportError::Busy { .. } => OPENIB_ERR_BUSY,
        _ => OPENIB_ERR_OTHER,
    }
}

impl From<TransportError> for Fail {
    fn from(e: TransportError) -> Fail {
        Fail::new(code_of(&e), e.to_string())
    }
}

/// `Transport::open` failed: says "no device" or "no libibverbs" the way `openib ports` does
/// (exit codes 4 and 3) when that is why.
pub(crate) fn open_failure(e: TransportError) -> Fail {
    let f = Fail::from(e);
    if !matches!(
        f.code,
        OPENIB_ERR_SETUP | OPENIB_ERR_VERBS | OPENIB_ERR_NO_VERBS
    ) {
        return f;
    }
    let hint = openib_rs::cli::ports::NO_DEVICE_HINT;
    match openib_ports::hw::read_topology() {
        Err(HwError::NoVerbs(e)) => Fail::new(OPENIB_ERR_NO_VERBS, e.to_string()),
        Err(e @ HwError::DeviceList(_)) => Fail::new(OPENIB_ERR_NO_DEVICE, format!("{e}; {hint}")),
        Ok(scan) if scan.topology.devices.is_empty() => {
            let why = if scan.problems.is_empty() {
                String::new()
            } else {
                format!(" ({})", scan.problems.join("; "))
            };
            Fail::new(OPENIB_ERR_NO_DEVICE, format!("{hint}{why}"))
        }
        Ok(_) => f,
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(msg: String) {
    // A NUL inside the message would cut it: replace it.
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// Identifies the calling thread (see `openib_t::holder`): never 0, the handle's "nobody".
/// No thread-local lookup: every call of the C ABI takes the lock.
pub(crate) fn thread_mark() -> usize {
    openib_sys::thread::current_id()
}

/// Runs one entry point: a panic becomes [`OPENIB_ERR_PANIC`], an error its code; both set the
/// thread's last error, prefixed with the function's name.
pub(crate) fn call(func: &str, f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {}", e.msg));
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown payload".into());
            set_last_error(format!("{func}: internal panic: {what}"));
            OPENIB_ERR_PANIC
        }
    }
}

/// The message of this thread's last failed call ("" if none failed yet); valid until the
/// next failing call on this thread.
#[no_mangle]
pub extern "C" fn openib_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(EMPTY.as_ptr())
}

/// A static description of an error code ("unknown error code" for others).
#[no_mangle]
pub extern "C" fn openib_strerror(code: c_int) -> *const c_char {
    CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(c"unknown error code", |(_, _, s)| s)
        .as_ptr()
}
