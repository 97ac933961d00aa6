//! Settings files: `KEY = VALUE` lines naming the same settings as the environment
//! (`OPENIB_CPC_INCLUDE = udcm,rdmacm`; the `OPENIB_` prefix may be left out), read from
//! `$OPENIB_CONFIG`, else `$XDG_CONFIG_HOME/openib/openib.conf` (or `~/.config/openib/openib.conf`),
//! else `/etc/openib/openib.conf`. The environment always wins over a file; a file only fills
//! in what the environment leaves unset. `#` starts a comment.

use std::path::PathBuf;

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
