//! Every setting of openib in one table ([`SETTINGS`]), and typed readers for them.
//!
//! A setting is an `OPENIB_*` environment variable. Before anything reads one, `main` fills in
//! from the settings file ([`crate::settings`]) what the environment leaves unset, so the
//! environment holds every value in effect. A reader returns the value from the environment,
//! else the setting's default; an empty (or blank) value counts as unset. A present value that
//! is malformed or out of range is a [`ConfigError`] naming the setting, the value, where it
//! came from and what is allowed: never silently the default.
//!
//! Asking for a name that is not in the table, or reading a setting as the wrong type (an
//! integer as a bool, say), is a programming error: the reader panics. The tests check that
//! every default is valid for its own kind (`tests.rs`), and that every `OPENIB_` name in the
//! sources and docs is in the table (tests/settings_docs.rs).
//!
//! ```no_run
//! let limit: usize = openib::config::usize("OPENIB_EAGER_LIMIT")?;
//! let pinned: u64 = openib::config::u64("OPENIB_PINNED_MAX")?;
//! # Ok::<(), openib::config::ConfigError>(())
//! ```
//!
//! The files: `setting.rs` (what a setting is: [`Setting`], its [`Kind`], [`Component`] and
//! parsed [`Value`]), `table.rs` (the table itself, [`SETTINGS`]), `read.rs` (lookup and the
//! typed readers from the environment, where a value comes from ([`Source`]) and
//! [`ConfigError`]).

mod read;
mod setting;
mod table;
#[cfg(test)]
mod tests;

pub use read::{
    bool, check, choice, find, list, normalize, pairs, path, problems, setting, source, string,
    text, u32, u64, usize, value, ConfigError, Source,
};
pub use setting::{Component, Kind, Setting, Value};
pub use table::{
    CPC_NAMES, FAULT_INJECTION_BUILT, FAULT_INJECTION_NOT_BUILT, FAULT_POINTS, SETTINGS,
};
