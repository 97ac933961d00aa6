//! Settings files: `KEY = VALUE` lines naming the same settings as the environment
//! (`OPENIB_CPC_INCLUDE = udcm,rdmacm`; the `OPENIB_` prefix may be left out), read from
//! `$OPENIB_CONFIG`, else `$XDG_CONFIG_HOME/openib/openib.conf` (or `~/.config/openib/openib.conf`),
//! else `/etc/openib/openib.conf`. The environment always wins over a file; a file only fills
//! in what the environment leaves unset. `#` starts a comment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// The settings [`apply_file_defaults`] put into the environment, with their values: what
/// `crate::config::source` reports as coming from the file.
static FILLED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// A setting file's line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {what}")]
pub struct SettingsError {
    pub path: String,
    pub line: usize,
    pub what: String,
}

/// The settings file in effect, if any.
pub fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OPENIB_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home_cfg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|d| d.join("openib/openib.conf"));
    [home_cfg, Some(PathBuf::from("/etc/openib/openib.conf"))]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
}

/// Parses a settings file into (OPENIB_NAME, value) pairs.
pub fn parse(text: &str, path: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(SettingsError {
                path: path.into(),
                line: i + 1,
                what: format!("expected KEY = VALUE, got {line:?}"),
            });
        };
        let k = k.trim().to_ascii_uppercase().replace('-', "_");
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(SettingsError {
                path: path.into(),
                line: i + 1,
                what: format!("bad key {k:?}"),
            });
        }
        let k = if k.starts_with("OPENIB_") {
            k
        } else {
            format!("OPENIB_{k}")
        };
        out.push((k, v.trim().to_string()));
    }
    Ok(out)
}

/// The settings of the file in effect that the environment does not already set.
pub fn file_defaults() -> Result<Vec<(String, String)>, SettingsError> {
    let Some(path) = config_path() else {
        return Ok(Vec::new());
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| SettingsError {
        path: shown.clone(),
        line: 0,
        what: e.to_string(),
    })?;
    Ok(parse(&text, &shown)?
        .into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .collect())
}

/// Puts the settings of the file in effect that the environment does not already set into
/// the environment (what `main` does before anything reads a setting), and records which keys
/// it filled ([`filled_from_file`]).
pub fn apply_file_defaults() -> Result<(), SettingsError> {
    let defaults = file_defaults()?;
    let mut filled = FILLED.lock().unwrap_or_else(|e| e.into_inner());
    for (k, v) in defaults {
        std::env::set_var(&k, &v);
        filled.insert(k, v);
    }
    Ok(())
}

/// The value the settings file filled in for `key` (an `OPENIB_` name), if it did.
pub fn filled_from_file(key: &str) -> Option<String> {
    FILLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .cloned()
}

/// Every key the settings file filled in, sorted.
pub fn filled_keys() -> Vec<String> {
    FILLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .cloned()
        .collect()
}

/// Records `key` as filled from the settings file with `value` (for unit tests).
#[cfg(test)]
pub(crate) fn record_filled(key: &str, value: &str) {
    FILLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_string(), value.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_or_without_the_prefix() {
        let s = parse(
            "# comment\ncpc_include = udcm,rdmacm\nOPENIB_GID_INDEX=1 # trailing\n\n",
            "f",
        )
        .unwrap();
        assert_eq!(
            s,
            vec![
                ("OPENIB_CPC_INCLUDE".into(), "udcm,rdmacm".into()),
                ("OPENIB_GID_INDEX".into(), "1".into())
            ]
        );
        let e = parse("oops\n", "f").unwrap_err();
        assert_eq!((e.line, e.path.as_str()), (1, "f"));
        assert!(parse("bad key = 1", "f").is_err());
    }
}
