//! PMIx errors: the call, the PMIx status number and PMIx's own text for it.

use std::ffi::CStr;
use std::fmt;

/// Errors of the PMIx client.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// libpmix could not be loaded (`dlopen` failed, or a symbol is missing).
    #[error("{soname} could not be loaded: {detail}. {hint}")]
    LibraryNotFound {
        soname: &'static str,
        detail: String,
        hint: &'static str,
    },
    /// A PMIx call returned (or completed with) a status other than success.
    #[error("{call} failed{}: PMIx status {status} ({text})", context_suffix(.context))]
    Status {
        call: &'static str,
        /// The `pmix_status_t`, e.g. -24 (`PMIX_ERR_TIMEOUT`), -46 (`PMIX_ERR_NOT_FOUND`).
        status: i32,
        /// `PMIx_Error_string(status)`, e.g. "TIMEOUT".
        text: String,
        /// What was asked: the key, the rank, the process set.
        context: String,
    },
    /// The server did not complete a non-blocking call within the PMIx timeout plus the
    /// backstop grace: it ignored `PMIX_TIMEOUT`. Counts as a timeout ([`Error::is_timeout`]).
    #[error("{call}{}: no completion from the PMIx server within {waited:?} (backstop; the server did not honour PMIX_TIMEOUT)", context_suffix(.context))]
    Backstop {
        call: &'static str,
        context: String,
        waited: std::time::Duration,
    },
    /// A collective was left before it completed because termination events named some of its
    /// participants ([`FenceOptions::leave_if_participant_dies`](super::FenceOptions)).
    #[error("{call}{}: left before completion: participant rank(s) {ranks:?} died", context_suffix(.context))]
    ParticipantDied {
        call: &'static str,
        context: String,
        ranks: Vec<u32>,
    },
    /// An argument cannot be passed to PMIx (a key with NUL or too long, an empty process set).
    #[error("{call}: {what}")]
    InvalidArgument { call: &'static str, what: String },
    /// PMIx returned a value of another type than the key is specified with.
    #[error("{call} of {key}: expected {expected}, got PMIx data type {got}")]
    WrongType {
        call: &'static str,
        key: String,
        expected: &'static str,
        got: u16,
    },
}

fn context_suffix(c: &str) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!(" ({c})")
    }
}

impl Error {
    /// The PMIx status, if PMIx reported one (a backstop reports `PMIX_ERR_TIMEOUT`).
    pub fn status(&self) -> Option<i32> {
        match self {
            Error::Status { status, .. } => Some(*status),
            Error::Backstop { .. } => Some(super::ffi::PMIX_ERR_TIMEOUT),
            _ => None,
        }
    }
    /// `PMIX_ERR_TIMEOUT`, or the backstop fired.
    pub fn is_timeout(&self) -> bool {
        self.status() == Some(super::ffi::PMIX_ERR_TIMEOUT)
    }
    /// `PMIX_ERR_NOT_FOUND`: no such key (or no such process).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(super::ffi::PMIX_ERR_NOT_FOUND)
    }
    pub(crate) fn status_of(
        lib: &super::ffi::PmixLib,
        call: &'static str,
        status: i32,
        context: impl fmt::Display,
    ) -> Self {
        Error::Status {
            call,
            status,
            text: status_text(lib, status),
            context: context.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `PMIx_Error_string(status)`.
fn status_text(lib: &super::ffi::PmixLib, status: i32) -> String {
    // SAFETY: PMIx_Error_string accepts any status and returns a pointer to a static string (or
    // "UNKNOWN STATUS"); it does not need PMIx_Init.
    let p = unsafe { lib.PMIx_Error_string(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
