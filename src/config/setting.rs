//! What a setting is: its [`Kind`] of values, the [`Component`] it belongs to, and how a
//! value parses ([`Setting::parse`] into a [`Value`]).

use std::fmt;

/// The part of openib a setting belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    Ports,
    Cpc,
    Modex,
    Runtime,
    Transport,
    Fault,
    Logging,
    /// The settings machinery itself (`OPENIB_CONFIG`).
    Settings,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Ports => "ports",
            Component::Cpc => "cpc",
            Component::Modex => "modex",
            Component::Runtime => "runtime",
            Component::Transport => "transport",
            Component::Fault => "fault",
            Component::Logging => "logging",
            Component::Settings => "settings",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A decimal integer in `min..=max`.
    Int { min: u64, max: u64 },
    /// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off` (any case).
    Bool,
    /// One of these names (any case).
    Enum(&'static [&'static str]),
    /// Comma-separated entries, each one of these names (any case); any text when `None`.
    List(Option<&'static [&'static str]>),
    /// Comma-separated `NAME:N` entries: NAME one of these names (any case), N in `0..=max`;
    /// with `repeat`, an entry `N` alone means the previous entry's NAME (`in-fence:3,5`).
    Pairs {
        names: &'static [&'static str],
        max: u64,
        repeat: bool,
    },
    /// Any text.
    String,
    /// A file path (for a library: a file or a soname).
    Path,
}

impl Kind {
    /// A one-word name of the kind: integer, bool, enum, list, pairs, string, path.
    pub fn tag(&self) -> &'static str {
        match self {
            Kind::Int { .. } => "integer",
            Kind::Bool => "bool",
            Kind::Enum(_) => "enum",
            Kind::List(_) => "list",
            Kind::Pairs { .. } => "pairs",
            Kind::String => "string",
            Kind::Path => "path",
        }
    }

    /// What the kind allows, as a phrase ("an integer from 64 to 65535").
    pub fn allowed(&self) -> String {
        match self {
            Kind::Int { min, max } if *max == u64::MAX => format!("an integer >= {min}"),
            Kind::Int { min, max } => format!("an integer from {min} to {max}"),
            Kind::Bool => "true or false (or 1/0, yes/no, on/off)".into(),
            Kind::Enum(names) => format!("one of {}", names.join(", ")),
            Kind::List(Some(names)) => format!("a comma-separated list of {}", names.join(", ")),
            Kind::List(None) => "a comma-separated list".into(),
            Kind::Pairs { names, max, repeat } => format!(
                "comma-separated NAME:N entries, NAME one of {} and N from 0 to {max}{}",
                names.join(", "),
                if *repeat {
                    " (N alone repeats the previous NAME: NAME:N,N)"
                } else {
                    ""
                }
            ),
            Kind::String => "any text".into(),
            Kind::Path => "a file path".into(),
        }
    }
}

/// Validation beyond a kind: `Err` says why the value is refused.
pub(super) type Check = fn(&str) -> Result<(), String>;

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable, `OPENIB_...`.
    pub name: &'static str,
    /// The default as text; `None`: unset by default (the description says what that means).
    pub default: Option<&'static str>,
    pub kind: Kind,
    pub component: Component,
    /// One line.
    pub description: &'static str,
    /// Set by `openib run` for the processes it starts, not by users.
    pub internal: bool,
    /// Never printed (`openib config` shows `<hidden>`).
    pub secret: bool,
    /// The other setting of an exclusive pair (include / exclude lists).
    pub exclusive_with: Option<&'static str>,
    /// What is allowed, when the kind alone does not say it well.
    pub(super) allowed: Option<&'static str>,
    /// Validation beyond the kind: the reason a value is refused.
    pub(super) check: Option<Check>,
}

impl Setting {
    pub(super) const fn new(
        name: &'static str,
        component: Component,
        kind: Kind,
        default: Option<&'static str>,
        description: &'static str,
    ) -> Setting {
        Setting {
            name,
            default,
            kind,
            component,
            description,
            internal: false,
            secret: false,
            exclusive_with: None,
            allowed: None,
            check: None,
        }
    }
    pub(super) const fn internal(self) -> Setting {
        Setting {
            internal: true,
            ..self
        }
    }
    pub(super) const fn secret(self) -> Setting {
        Setting {
            secret: true,
            ..self
        }
    }
    pub(super) const fn exclusive_with(self, other: &'static str) -> Setting {
        Setting {
            exclusive_with: Some(other),
            ..self
        }
    }
    pub(super) const fn allowed_text(self, allowed: &'static str) -> Setting {
        Setting {
            allowed: Some(allowed),
            ..self
        }
    }
    pub(super) const fn checked(self, check: Check) -> Setting {
        Setting {
            check: Some(check),
            ..self
        }
    }

    /// What values are allowed, as a phrase.
    pub fn allowed(&self) -> String {
        match self.allowed {
            Some(a) => a.to_string(),
            None => self.kind.allowed(),
        }
    }

    /// The default as shown to users: the value, or `unset`.
    pub fn default_text(&self) -> &'static str {
        self.default.unwrap_or("unset")
    }

    /// Parses `text` (a present, non-blank value) by this setting's kind; the error is what is
    /// wrong with it ("out of range", "unknown entry \"foo\"").
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let text = text.trim();
        let v = match self.kind {
            Kind::Int { min, max } => {
                let n: u64 = text.parse().map_err(|_| {
                    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                        "out of range".to_string()
                    } else {
                        "not an integer".to_string()
                    }
                })?;
                if !(min..=max).contains(&n) {
                    return Err("out of range".into());
                }
                Value::Int(n)
            }
            Kind::Bool => match text.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Value::Bool(true),
                "0" | "false" | "no" | "off" => Value::Bool(false),
                _ => return Err("not a boolean".into()),
            },
            Kind::Enum(names) => {
                Value::Name(name_in(names, text).ok_or_else(|| format!("unknown value {text:?}"))?)
            }
            Kind::List(names) => {
                let mut out = Vec::new();
                for entry in entries(text) {
                    out.push(match names {
                        Some(names) => name_in(names, entry)
                            .ok_or_else(|| format!("unknown entry {entry:?}"))?
                            .to_string(),
                        None => entry.to_string(),
                    });
                }
                Value::List(out)
            }
            Kind::Pairs { names, max, repeat } => {
                let mut out: Vec<(&'static str, u64)> = Vec::new();
                for entry in entries(text) {
                    let bad = || format!("bad entry {entry:?}");
                    let (name, n) = match entry.split_once(':') {
                        Some((name, n)) => (name_in(names, name.trim()).ok_or_else(bad)?, n),
                        None if repeat => (out.last().map(|p| p.0).ok_or_else(bad)?, entry),
                        None => return Err(bad()),
                    };
                    let n: u64 = n.trim().parse().map_err(|_| bad())?;
                    if n > max {
                        return Err(bad());
                    }
                    out.push((name, n));
                }
                Value::Pairs(out)
            }
            Kind::String | Kind::Path => Value::Text(text.to_string()),
        };
        if let Some(check) = self.check {
            check(text)?;
        }
        Ok(v)
    }
}

fn name_in(names: &'static [&'static str], text: &str) -> Option<&'static str> {
    names
        .iter()
        .copied()
        .find(|n| n.eq_ignore_ascii_case(text.trim()))
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(u64),
    Bool(bool),
    /// An enum's value, as the table spells it.
    Name(&'static str),
    /// A list's entries (names as the table spells them).
    List(Vec<String>),
    Pairs(Vec<(&'static str, u64)>),
    /// A string or a path.
    Text(String),
}
