//! Rust equivalents of pmix.h's inline helpers: process names (`PMIX_PROC_LOAD`), info arrays
//! of scalar directives (`PMIX_INFO_LOAD` for bool and int), and values read back from PMIx.

use super::error::{Error, Result};
use super::ffi as p;
use std::ffi::{c_char, CStr, CString};

/// `PMIX_RANK_WILDCARD`: "every process of the namespace", used for job-level keys and fences.
pub const RANK_WILDCARD: u32 = p::PMIX_RANK_WILDCARD;
/// `PMIX_MAX_KEYLEN`: the longest key PMIx stores (bytes, without the NUL).
pub const MAX_KEY_LEN: usize = p::PMIX_MAX_KEYLEN as usize;

/// A `pmix_proc_t` (namespace + rank), built as `PMIX_PROC_LOAD` does.
pub(crate) fn proc_of(nspace: &p::pmix_nspace_t, rank: u32) -> p::pmix_proc_t {
    p::pmix_proc_t {
        nspace: *nspace,
        rank,
    }
}

/// The namespace of a `pmix_proc_t` as text (PMIx keeps it NUL-terminated within 256 bytes).
pub(crate) fn nspace_str(nspace: &p::pmix_nspace_t) -> String {
    let bytes: Vec<u8> = nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Checks a key as PMIx needs it: no NUL, at most [`MAX_KEY_LEN`] bytes.
pub(crate) fn key_cstring(call: &'static str, key: &str) -> Result<CString> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidArgument {
            call,
            what: format!(
                "key {key:?} must have 1 to {MAX_KEY_LEN} bytes, it has {}",
                key.len()
            ),
        });
    }
    CString::new(key).map_err(|_| Error::InvalidArgument {
        call,
        what: format!("key {key:?} contains a NUL byte"),
    })
}

/// An array of `pmix_info_t` directives holding only scalars (bool, int) and opaque pointers
/// PMIx never dereferences (`PMIX_EVENT_RETURN_OBJECT`): nothing in it is owned, so it needs no
/// `PMIX_INFO_DESTRUCT` and may move between threads.
#[derive(Default)]
pub(crate) struct InfoList {
    items: Vec<p::pmix_info_t>,
}

// SAFETY: every pmix_info_t in the list holds a scalar value (bool or int), or an opaque pointer
// to a Sync object (the failed set) that only our event handler dereferences, and a key copied
// inline; nothing in it is owned or mutated through it.
unsafe impl Send for InfoList {}
// SAFETY: as above; the list is only read through shared references.
unsafe impl Sync for InfoList {}

impl InfoList {
    fn push(&mut self, key: &[u8], ty: u32, data: p::pmix_value__bindgen_ty_1) {
        let mut info = p::pmix_info_t::default();
        // Keys are the PMIX_* constants: NUL-terminated byte strings shorter than 512.
        let key = key.strip_suffix(b"\0").unwrap_or(key);
        debug_assert!(key.len() < info.key.len());
        for (dst, &src) in info.key.iter_mut().zip(key) {
            *dst = src as c_char;
        }
        info.flags = 0;
        info.value.type_ = ty as p::pmix_data_type_t;
        info.value.data = data;
        self.items.push(info);
    }
    /// `PMIX_INFO_LOAD(&info, key, &flag, PMIX_BOOL)`.
    pub(crate) fn push_bool(&mut self, key: &[u8], flag: bool) {
        self.push(key, p::PMIX_BOOL, p::pmix_value__bindgen_ty_1 { flag });
    }
    /// `PMIX_INFO_LOAD(&info, key, &n, PMIX_INT)`.
    pub(crate) fn push_int(&mut self, key: &[u8], integer: i32) {
        self.push(key, p::PMIX_INT, p::pmix_value__bindgen_ty_1 { integer });
    }
    /// `PMIX_INFO_LOAD(&info, key, ptr, PMIX_POINTER)` (PMIx stores the pointer, never follows it).
    pub(crate) fn push_pointer(&mut self, key: &[u8], ptr: *mut std::ffi::c_void) {
        self.push(key, p::PMIX_POINTER, p::pmix_value__bindgen_ty_1 { ptr });
    }
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
    /// The array for a PMIx call (NULL when empty, as PMIx expects with ninfo 0).
    pub(crate) fn as_ptr(&self) -> *const p::pmix_info_t {
        if self.items.is_empty() {
            std::ptr::null()
        } else {
            self.items.as_ptr()
        }
    }
}

/// A value read from PMIx, copied out of the library's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `PMIX_BYTE_OBJECT` (what [`PmixClient::put`](super::PmixClient::put) stores).
    Bytes(Vec<u8>),
    /// `PMIX_STRING`.
    String(String),
    /// `PMIX_BOOL`.
    Bool(bool),
    /// Any unsigned integer type (`PMIX_UINT8..UINT64`, `PMIX_SIZE`, `PMIX_PROC_RANK`).
    Unsigned(u64),
    /// Any signed integer type (`PMIX_INT`, `PMIX_INT8..INT64`, `PMIX_STATUS`).
    Signed(i64),
    /// Another PMIx data type, not converted (the number is its `pmix_data_type_t`).
    Other(u16),
}

impl Value {
    /// Copies a `pmix_value_t`.
    ///
    /// # Safety
    /// `v` must be a valid, initialised `pmix_value_t` as PMIx returns it: for `PMIX_STRING` the
    /// string pointer is NULL or NUL-terminated, for `PMIX_BYTE_OBJECT` `bytes` is NULL or
    /// points to `size` readable bytes.
    pub(crate) unsafe fn copy_from(v: &p::pmix_value_t) -> Value {
        let ty = v.type_ as u32;
        // SAFETY: PMIx sets the union member named by `type_`, and each arm reads exactly that
        // member; the caller guarantees that a string is NULL or NUL-terminated and that a byte
        // object's `bytes` is NULL or points to `size` readable bytes.
        unsafe {
            match ty {
                p::PMIX_BYTE_OBJECT => {
                    let bo = v.data.bo;
                    if bo.bytes.is_null() || bo.size == 0 {
                        Value::Bytes(Vec::new())
                    } else {
                        Value::Bytes(
                            std::slice::from_raw_parts(bo.bytes as *const u8, bo.size).to_vec(),
                        )
                    }
                }
                p::PMIX_STRING => {
                    let s = v.data.string;
                    if s.is_null() {
                        Value::String(String::new())
                    } else {
                        Value::String(CStr::from_ptr(s).to_string_lossy().into_owned())
                    }
                }
                p::PMIX_BOOL => Value::Bool(v.data.flag),
                p::PMIX_BYTE | p::PMIX_UINT8 => Value::Unsigned(v.data.uint8.into()),
                p::PMIX_UINT16 => Value::Unsigned(v.data.uint16.into()),
                p::PMIX_UINT32 => Value::Unsigned(v.data.uint32.into()),
                p::PMIX_PROC_RANK => Value::Unsigned(v.data.rank.into()),
                p::PMIX_UINT => Value::Unsigned(v.data.uint.into()),
                p::PMIX_UINT64 => Value::Unsigned(v.data.uint64),
                p::PMIX_SIZE => Value::Unsigned(v.data.size as u64),
                p::PMIX_INT => Value::Signed(v.data.integer.into()),
                p::PMIX_INT8 => Value::Signed(v.data.int8.into()),
                p::PMIX_INT16 => Value::Signed(v.data.int16.into()),
                p::PMIX_INT32 => Value::Signed(v.data.int32.into()),
                p::PMIX_INT64 => Value::Signed(v.data.int64),
                p::PMIX_STATUS => Value::Signed(v.data.status.into()),
                other => Value::Other(other as u16),
            }
        }
    }

    /// The PMIx data type name this value had, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Bytes(_) => "byte object",
            Value::String(_) => "string",
            Value::Bool(_) => "bool",
            Value::Unsigned(_) => "unsigned integer",
            Value::Signed(_) => "signed integer",
            Value::Other(_) => "other",
        }
    }
    fn type_code(&self) -> u16 {
        match self {
            Value::Bytes(_) => p::PMIX_BYTE_OBJECT as u16,
            Value::String(_) => p::PMIX_STRING as u16,
            Value::Bool(_) => p::PMIX_BOOL as u16,
            Value::Unsigned(_) => p::PMIX_UINT64 as u16,
            Value::Signed(_) => p::PMIX_INT64 as u16,
            Value::Other(t) => *t,
        }
    }
    pub(crate) fn wrong(&self, call: &'static str, key: &str, expected: &'static str) -> Error {
        Error::WrongType {
            call,
            key: key.to_string(),
            expected,
            got: self.type_code(),
        }
    }
    /// The bytes of a byte object (a string's bytes are accepted too).
    pub fn into_bytes(self) -> Option<Vec<u8>> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::String(s) => Some(s.into_bytes()),
            _ => None,
        }
    }
    pub fn as_unsigned(&self) -> Option<u64> {
        match *self {
            Value::Unsigned(u) => Some(u),
            Value::Signed(i) if i >= 0 => Some(i as u64),
            _ => None,
        }
    }
}
