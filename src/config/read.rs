//! Lookup and reading: a setting's value from the environment (where `main` put the settings
//! file's), else its default, parsed by its kind; the typed readers ([`u64`], [`bool`],
//! [`pairs`], ...); where a value comes from ([`Source`]); and [`ConfigError`].

use std::fmt;
use std::path::PathBuf;

use super::setting::{Kind, Setting, Value};
use super::table::SETTINGS;

/// Where the value in effect comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The environment.
    Env,
    /// The settings file (put into the environment by `main`).
    File,
    /// Unset (or blank): the default.
    Default,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Env => "env",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A setting's value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} (from the {}): {problem}; allowed: {allowed}", match .origin { Source::File => "settings file", _ => "environment" })]
pub struct ConfigError {
    pub name: &'static str,
    /// The value as given.
    pub value: String,
    /// Where it came from (the environment or the settings file).
    pub origin: Source,
    /// What is wrong with it ("out of range", "unknown entry \"foo\"").
    pub problem: String,
    /// What is allowed ("an integer from 64 to 65535").
    pub allowed: String,
}

/// The setting `name` (`OPENIB_...`), if the table has it.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The setting `name`. Panics when the table does not have it: a programming error.
pub fn setting(name: &str) -> &'static Setting {
    find(name).unwrap_or_else(|| {
        panic!(
            "openib::config: {name} is not in the settings table (src/config/table.rs, SETTINGS)"
        )
    })
}

/// A name as a user may write it (`eager_limit`, `eager-limit`, `OPENIB_EAGER_LIMIT`) in the
/// `OPENIB_` spelling, as the settings file does.
pub fn normalize(name: &str) -> String {
    let k = name.trim().to_ascii_uppercase().replace('-', "_");
    if k.starts_with("OPENIB_") {
        k
    } else {
        format!("OPENIB_{k}")
    }
}

/// The value of `name` in the environment, when it is set and not blank.
fn present(s: &'static Setting) -> Result<Option<String>, ConfigError> {
    match std::env::var_os(s.name) {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(v) if v.trim().is_empty() => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(v) => Err(ConfigError {
                name: s.name,
                value: v.to_string_lossy().into_owned(),
                origin: Source::Env,
                problem: "not valid UTF-8".into(),
                allowed: s.allowed(),
            }),
        },
    }
}

/// The text of `name` in effect, as given (the environment's, else the default); `None` when
/// unset without a default. Not validated.
pub fn text(name: &str) -> Option<String> {
    let s = setting(name);
    match std::env::var_os(s.name) {
        Some(v) if !v.to_string_lossy().trim().is_empty() => Some(v.to_string_lossy().into_owned()),
        _ => s.default.map(str::to_string),
    }
}

/// Where the value of `name` in effect comes from.
pub fn source(name: &str) -> Source {
    let s = setting(name);
    match std::env::var_os(s.name) {
        None => Source::Default,
        Some(v) if v.to_string_lossy().trim().is_empty() => Source::Default,
        Some(v) => match crate::settings::filled_from_file(s.name) {
            Some(f) if v.to_str() == Some(f.as_str()) => Source::File,
            _ => Source::Env,
        },
    }
}

/// The parsed value of `name` in effect; `None` when unset without a default.
pub fn value(name: &str) -> Result<Option<Value>, ConfigError> {
    let s = setting(name);
    match present(s)? {
        Some(text) => s.parse(&text).map(Some).map_err(|problem| ConfigError {
            name: s.name,
            value: text,
            origin: source(s.name),
            problem,
            allowed: s.allowed(),
        }),
        None => Ok(s.default.map(|d| {
            s.parse(d)
                .unwrap_or_else(|e| panic!("the default of {} is invalid: {e}", s.name))
        })),
    }
}

/// Checks `name`: its value, and that the other setting of an exclusive pair is not set too.
pub fn check(name: &str) -> Result<(), ConfigError> {
    let s = setting(name);
    value(name)?;
    if let Some(other) = s.exclusive_with {
        if let (Some(mine), Some(_)) = (present(s)?, present(setting(other)).ok().flatten()) {
            return Err(ConfigError {
                name: s.name,
                value: mine,
                origin: source(s.name),
                problem: format!("set together with {other}"),
                allowed: format!("unset when {other} is set (the two are exclusive)"),
            });
        }
    }
    Ok(())
}

/// Every setting's problem ([`check`]), in table order.
pub fn problems() -> Vec<ConfigError> {
    SETTINGS
        .iter()
        .filter_map(|s| check(s.name).err())
        .collect()
}

fn wrong_kind(name: &str, want: &str) -> ! {
    panic!(
        "openib::config: {name} is {} setting, not {want}",
        setting(name).kind.tag()
    )
}

fn int(name: &str) -> Result<u64, ConfigError> {
    match value(name)? {
        Some(Value::Int(n)) => Ok(n),
        None => panic!("openib::config: the integer setting {name} has no default"),
        Some(_) => wrong_kind(name, "an integer"),
    }
}

/// An integer setting that fits a `u64`.
pub fn u64(name: &str) -> Result<u64, ConfigError> {
    int(name)
}

/// An integer setting whose range fits a `usize`.
pub fn usize(name: &str) -> Result<usize, ConfigError> {
    if let Kind::Int { max, .. } = setting(name).kind {
        assert!(
            usize::try_from(max).is_ok(),
            "openib::config: {name}'s range does not fit a usize"
        );
    }
    int(name).map(|n| n as usize)
}

/// An integer setting whose range fits a `u32`.
pub fn u32(name: &str) -> Result<u32, ConfigError> {
    if let Kind::Int { max, .. } = setting(name).kind {
        assert!(
            max <= u32::MAX as u64,
            "openib::config: {name}'s range does not fit a u32"
        );
    }
    int(name).map(|n| n as u32)
}

/// A bool setting.
pub fn bool(name: &str) -> Result<bool, ConfigError> {
    match value(name)? {
        Some(Value::Bool(b)) => Ok(b),
        None => panic!("openib::config: the bool setting {name} has no default"),
        Some(_) => wrong_kind(name, "a bool"),
    }
}

/// An enum setting: its value as the table spells it; `None` when unset without a default.
pub fn choice(name: &str) -> Result<Option<&'static str>, ConfigError> {
    match value(name)? {
        Some(Value::Name(n)) => Ok(Some(n)),
        None => Ok(None),
        Some(_) => wrong_kind(name, "an enum"),
    }
}

/// The text in effect of any setting but an integer or a bool, validated by its kind and
/// trimmed; `None` when unset without a default.
pub fn string(name: &str) -> Result<Option<String>, ConfigError> {
    if matches!(setting(name).kind, Kind::Int { .. } | Kind::Bool) {
        wrong_kind(name, "text");
    }
    value(name)?;
    Ok(text(name).map(|t| t.trim().to_string()))
}

/// A path setting; `None` when unset without a default.
pub fn path(name: &str) -> Result<Option<PathBuf>, ConfigError> {
    match value(name)? {
        Some(Value::Text(t)) if setting(name).kind == Kind::Path => Ok(Some(PathBuf::from(t))),
        None if setting(name).kind == Kind::Path => Ok(None),
        _ => wrong_kind(name, "a path"),
    }
}

/// A list setting's entries (names as the table spells them); empty when unset.
pub fn list(name: &str) -> Result<Vec<String>, ConfigError> {
    match value(name)? {
        Some(Value::List(l)) => Ok(l),
        None if matches!(setting(name).kind, Kind::List(_)) => Ok(Vec::new()),
        _ => wrong_kind(name, "a list"),
    }
}

/// A `NAME:N` list setting's entries; empty when unset.
pub fn pairs(name: &str) -> Result<Vec<(&'static str, u64)>, ConfigError> {
    match value(name)? {
        Some(Value::Pairs(p)) => Ok(p),
        None if matches!(setting(name).kind, Kind::Pairs { .. }) => Ok(Vec::new()),
        _ => wrong_kind(name, "a NAME:N list"),
    }
}
