//! Run-time loading of libibverbs and librdmacm.

use crate::error::{Error, Result};
use crate::ffi::rdmacm::RdmaCmLib;
use crate::ffi::verbs::VerbsLib;
use std::sync::OnceLock;

pub const VERBS_SONAME: &str = "libibverbs.so.1";
pub const RDMACM_SONAME: &str = "librdmacm.so.1";

/// Environment variables naming another file to load instead of the sonames above (a private
/// rdma-core build, say; the tests use them to exercise the "library missing" path).
pub const VERBS_ENV: &str = "OPENIB_LIBIBVERBS";
pub const RDMACM_ENV: &str = "OPENIB_LIBRDMACM";

fn path_of(env: &str, soname: &'static str) -> String {
    std::env::var(env)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| soname.to_string())
}

const VERBS_HINT: &str = "Install rdma-core's verbs library and providers \
(Debian/Ubuntu: apt install libibverbs1 ibverbs-providers; RHEL: dnf install libibverbs)";
const RDMACM_HINT: &str =
    "Install librdmacm (Debian/Ubuntu: apt install librdmacm1; RHEL: dnf install librdmacm)";

static VERBS: OnceLock<std::result::Result<VerbsLib, String>> = OnceLock::new();
static RDMACM: OnceLock<std::result::Result<RdmaCmLib, String>> = OnceLock::new();

/// libibverbs, loaded on first call. The library stays loaded for the life of the process.
pub fn verbs() -> Result<&'static VerbsLib> {
    let loaded = VERBS.get_or_init(|| {
        // SAFETY: loading libibverbs runs its ELF constructors, which only initialise its own
        // state; every symbol is resolved with the signature bindgen read from the same
        // library's headers (rdma-core keeps these symbols ABI-stable with symbol versions).
        unsafe { VerbsLib::new(path_of(VERBS_ENV, VERBS_SONAME)) }.map_err(|e| e.to_string())
    });
    match loaded {
        Ok(lib) => Ok(lib),
        Err(detail) => Err(Error::LibraryNotFound {
            soname: VERBS_SONAME,
            detail: detail.clone(),
            hint: VERBS_HINT,
        }),
    }
}

/// librdmacm, loaded on first call.
pub fn rdmacm() -> Result<&'static RdmaCmLib> {
    let loaded = RDMACM.get_or_init(|| {
        // SAFETY: as for `verbs()`; librdmacm itself depends on libibverbs.
        unsafe { RdmaCmLib::new(path_of(RDMACM_ENV, RDMACM_SONAME)) }.map_err(|e| e.to_string())
    });
    match loaded {
        Ok(lib) => Ok(lib),
        Err(detail) => Err(Error::LibraryNotFound {
            soname: RDMACM_SONAME,
            detail: detail.clone(),
            hint: RDMACM_HINT,
        }),
    }
}
