//! Run-time loading of libpmix.

use super::error::{Error, Result};
use super::ffi::PmixLib;
use std::ffi::CStr;
use std::sync::OnceLock;

/// The soname of the PMIx 4 client library (Debian's libpmix2, Open MPI 4.1's external PMIx).
pub const PMIX_SONAME: &str = "libpmix.so.2";
/// An environment variable naming another file to load instead (a private PMIx build; the tests
/// use it to exercise the "library missing" path).
pub const PMIX_ENV: &str = "OPENIB_LIBPMIX";

const PMIX_HINT: &str = "Install the PMIx client library (Debian/Ubuntu: apt install libpmix2; \
RHEL: dnf install pmix), or point OPENIB_LIBPMIX at a libpmix.so; without PMIx use \
`openib run` or OPENIB_RUNTIME=singleton";

static PMIX: OnceLock<std::result::Result<PmixLib, String>> = OnceLock::new();

/// libpmix, loaded on first call. The library stays loaded for the life of the process.
pub fn library() -> Result<&'static PmixLib> {
    let loaded = PMIX.get_or_init(|| {
        let path = std::env::var(PMIX_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| PMIX_SONAME.to_string());
        // SAFETY: loading libpmix runs its ELF constructors, which only initialise its own state
        // (nothing runs until PMIx_Init); every symbol is resolved with the signature bindgen read
        // from the pmix.h of the same PMIx major version (the soname carries the ABI).
        unsafe { PmixLib::new(path) }.map_err(|e| e.to_string())
    });
    match loaded {
        Ok(lib) => Ok(lib),
        Err(detail) => Err(Error::LibraryNotFound {
            soname: PMIX_SONAME,
            detail: detail.clone(),
            hint: PMIX_HINT,
        }),
    }
}

/// The version string of the loaded libpmix (`PMIx_Get_version`), e.g. "OpenPMIx 4.2.2 ...".
pub fn version() -> Result<String> {
    let lib = library()?;
    // SAFETY: PMIx_Get_version may be called at any time, before PMIx_Init too, and returns a
    // pointer to a static NUL-terminated string.
    let p = unsafe { lib.PMIx_Get_version() };
    if p.is_null() {
        return Ok(String::new());
    }
    // SAFETY: non-null, NUL-terminated, static (see above).
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
