//! Include / exclude lists of `device` or `device:port`.
//!
//! At most one of the two lists may be given (as in Open MPI's `btl_openib_if_include` and
//! `btl_openib_if_exclude`): asking for both is [`FilterError::Both`]. Entries that match no
//! device or port are reported back so the user learns about typos.

use crate::derive::Port;

/// One entry: a whole device, or one port of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterEntry {
    pub device: String,
    pub port: Option<u8>,
}

impl FilterEntry {
    fn matches(&self, p: &Port) -> bool {
        self.device == p.device && self.port.is_none_or(|n| n == p.raw.port)
    }
}

impl std::fmt::Display for FilterEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(n) => write!(f, "{}:{}", self.device, n),
            None => f.write_str(&self.device),
        }
    }
}

/// Which ports to keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Filter {
    #[default]
    All,
    Include(Vec<FilterEntry>),
    Exclude(Vec<FilterEntry>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("port include and exclude lists are mutually exclusive: give either --include ({include}) or --exclude ({exclude}), not both")]
    Both { include: String, exclude: String },
    #[error("bad port filter entry {entry:?}: {why} (expected DEVICE or DEVICE:PORT, e.g. mlx5_0 or mlx5_0:1)")]
    BadEntry { entry: String, why: String },
}

/// What applying a filter found.
#[derive(Debug, Default)]
pub struct FilterOutcome {
    /// Entries that matched nothing, as the user wrote them.
    pub unmatched: Vec<String>,
}

impl Filter {
    /// Builds a filter from the two optional comma-separated lists.
    pub fn from_lists(include: Option<&str>, exclude: Option<&str>) -> Result<Filter, FilterError> {
        let include = include.filter(|s| !s.trim().is_empty());
        let exclude = exclude.filter(|s| !s.trim().is_empty());
        match (include, exclude) {
            (Some(i), Some(e)) => Err(FilterError::Both {
                include: i.into(),
                exclude: e.into(),
            }),
            (Some(i), None) => Ok(Filter::Include(parse_list(i)?)),
            (None, Some(e)) => Ok(Filter::Exclude(parse_list(e)?)),
            (None, None) => Ok(Filter::All),
        }
    }

    /// Marks filtered-out ports as not usable, with the reason. Ports already unusable keep their
    /// own reason.
    pub fn apply(&self, ports: &mut [Port]) -> FilterOutcome {
        let (entries, include) = match self {
            Filter::All => return FilterOutcome::default(),
            Filter::Include(e) => (e, true),
            Filter::Exclude(e) => (e, false),
        };
        let unmatched = entries
            .iter()
            .filter(|e| !ports.iter().any(|p| e.matches(p)))
            .map(|e| e.to_string())
            .collect();
        for p in ports.iter_mut() {
            let hit = entries.iter().find(|e| e.matches(p));
            let why = match (include, hit) {
                (true, None) => Some(format!("not in the include list ({})", join(entries))),
                (false, Some(e)) => Some(format!("excluded by the exclude list entry {e}")),
                _ => None,
            };
            if let Some(why) = why {
                if p.usable {
                    p.usable = false;
                    p.reason = Some(why);
                }
            }
        }
        FilterOutcome { unmatched }
    }
}

fn join(entries: &[FilterEntry]) -> String {
    entries
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_list(list: &str) -> Result<Vec<FilterEntry>, FilterError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_entry)
        .collect()
}

fn parse_entry(s: &str) -> Result<FilterEntry, FilterError> {
    let bad = |why: &str| FilterError::BadEntry {
        entry: s.into(),
        why: why.into(),
    };
    let (device, port) = match s.split_once(':') {
        None => (s, None),
        Some((d, p)) => {
            let n: u8 = p
                .parse()
                .map_err(|_| bad("the port is not a number from 1 to 255"))?;
            if n == 0 {
                return Err(bad("port numbers start at 1"));
            }
            (d, Some(n))
        }
    };
    if device.is_empty() {
        return Err(bad("the device name is empty"));
    }
    Ok(FilterEntry {
        device: device.into(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lists_is_an_error_naming_both() {
        let e = Filter::from_lists(Some("mlx5_0"), Some("mlx5_1")).unwrap_err();
        assert!(e.to_string().contains("mutually exclusive"), "{e}");
        assert!(e.to_string().contains("mlx5_0") && e.to_string().contains("mlx5_1"));
    }

    #[test]
    fn entries_parse() {
        assert_eq!(
            Filter::from_lists(Some("mlx5_0, rxe0:1"), None).unwrap(),
            Filter::Include(vec![
                FilterEntry {
                    device: "mlx5_0".into(),
                    port: None
                },
                FilterEntry {
                    device: "rxe0".into(),
                    port: Some(1)
                }
            ])
        );
        assert!(Filter::from_lists(None, Some("rxe0:x")).is_err());
        assert!(Filter::from_lists(None, Some("rxe0:0")).is_err());
        assert!(Filter::from_lists(None, Some(":1")).is_err());
        assert_eq!(Filter::from_lists(Some(""), None).unwrap(), Filter::All);
    }
}
