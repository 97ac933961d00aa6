use std::fmt;

/// Errors of the verbs layer. Each names the verb (or library) that failed and why.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The shared library could not be loaded (`dlopen` failed, or a symbol is missing).
    #[error("{soname} could not be loaded: {detail}. {hint}")]
    LibraryNotFound {
        soname: &'static str,
        detail: String,
        hint: &'static str,
    },
    /// A verb returned an error; `errno` is the OS error it reported.
    #[error("{verb} failed{}: {source}", context_suffix(.context))]
    Verb {
        verb: &'static str,
        context: String,
        source: std::io::Error,
    },
    /// An argument cannot be passed to the verb.
    #[error("{verb}: {what}")]
    InvalidArgument { verb: &'static str, what: String },
}

fn context_suffix(c: &str) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!(" ({c})")
    }
}

impl Error {
    /// A failure of `verb` (or of the system call named so) with its I/O error.
    pub(crate) fn io(
        verb: &'static str,
        context: impl fmt::Display,
        source: std::io::Error,
    ) -> Self {
        Error::Verb {
            verb,
            context: context.to_string(),
            source,
        }
    }
    /// A verb failure from a negative/NULL return: takes `errno`.
    pub(crate) fn last_os(verb: &'static str, context: impl fmt::Display) -> Self {
        Error::io(verb, context, std::io::Error::last_os_error())
    }
    /// A verb failure whose return value is the errno (ibv_modify_qp, ibv_post_send, ...).
    pub(crate) fn from_rc(verb: &'static str, rc: i32, context: impl fmt::Display) -> Self {
        let code = if rc < 0 { -rc } else { rc };
        Error::io(verb, context, std::io::Error::from_raw_os_error(code))
    }
    /// The errno of a failed verb, if it was one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
