//! Which CPCs a process offers and with what priority: include/exclude lists and priority
//! overrides, from the environment (`OPENIB_CPC_INCLUDE`, `OPENIB_CPC_EXCLUDE`,
//! `OPENIB_CPC_PRIORITY`) or a config file (same syntax).

use crate::query::{query, HostFacts, Unusable};
use crate::select::Advert;
use crate::CpcId;
use openib_ports::Port;
use std::collections::BTreeMap;

/// CPC settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpcConfig {
    /// Only these CPCs (in any order), when set.
    pub include: Option<Vec<CpcId>>,
    /// Never these.
    pub exclude: Vec<CpcId>,
    /// Priority overrides (0-255, higher wins).
    pub priority: BTreeMap<CpcId, u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpcConfigError {
    #[error("unknown CPC {name:?} in {setting} (known: oob, xoob, ibcm, rdmacm, udcm)")]
    UnknownCpc { setting: &'static str, name: String },
    #[error("bad priority entry {entry:?} in {setting}: expected NAME:PRIORITY with PRIORITY 0-255, e.g. rdmacm:70")]
    BadPriority {
        setting: &'static str,
        entry: String,
    },
    #[error("CPC include and exclude lists are mutually exclusive: got include {include:?} and exclude {exclude:?}")]
    Both { include: String, exclude: String },
}

fn parse_names(setting: &'static str, list: &str) -> Result<Vec<CpcId>, CpcConfigError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|n| {
            CpcId::from_name(n).ok_or_else(|| CpcConfigError::UnknownCpc {
                setting,
                name: n.to_string(),
            })
        })
        .collect()
}

impl CpcConfig {
    /// Builds a configuration from the three settings' text (each may be absent).
    pub fn parse(
        include: Option<&str>,
        exclude: Option<&str>,
        priority: Option<&str>,
    ) -> Result<CpcConfig, CpcConfigError> {
        let include = include.filter(|s| !s.trim().is_empty());
        let exclude = exclude.filter(|s| !s.trim().is_empty());
        if let (Some(i), Some(e)) = (include, exclude) {
            return Err(CpcConfigError::Both {
                include: i.into(),
                exclude: e.into(),
            });
        }
        let mut prio = BTreeMap::new();
        for entry in priority
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let bad = || CpcConfigError::BadPriority {
                setting: "OPENIB_CPC_PRIORITY",
                entry: entry.to_string(),
            };
            let (name, p) = entry.split_once(':').ok_or_else(bad)?;
            let cpc = CpcId::from_name(name).ok_or_else(|| CpcConfigError::UnknownCpc {
                setting: "OPENIB_CPC_PRIORITY",
                name: name.trim().to_string(),
            })?;
            prio.insert(cpc, p.trim().parse::<u8>().map_err(|_| bad())?);
        }
        Ok(CpcConfig {
            include: include
                .map(|i| parse_names("OPENIB_CPC_INCLUDE", i))
                .transpose()?,
            exclude: exclude
                .map(|e| parse_names("OPENIB_CPC_EXCLUDE", e))
                .transpose()?
                .unwrap_or_default(),
            priority: prio,
        })
    }

    /// Reads `OPENIB_CPC_INCLUDE`, `OPENIB_CPC_EXCLUDE` and `OPENIB_CPC_PRIORITY`.
    pub fn from_env() -> Result<CpcConfig, CpcConfigError> {
        let v = |k: &str| std::env::var(k).ok();
        Self::parse(
            v("OPENIB_CPC_INCLUDE").as_deref(),
            v("OPENIB_CPC_EXCLUDE").as_deref(),
            v("OPENIB_CPC_PRIORITY").as_deref(),
        )
    }

    pub fn priority_of(&self, cpc: CpcId) -> u8 {
        self.priority
            .get(&cpc)
            .copied()
            .unwrap_or(cpc.default_priority())
    }

    fn excluded(&self, cpc: CpcId) -> Option<String> {
        if let Some(inc) = &self.include {
            if !inc.contains(&cpc) {
                let names: Vec<&str> = inc.iter().map(|c| c.name()).collect();
                return Some(format!("not in OPENIB_CPC_INCLUDE={}", names.join(",")));
            }
        }
        self.exclude
            .contains(&cpc)
            .then(|| format!("listed in OPENIB_CPC_EXCLUDE ({cpc})"))
    }
}

/// Every CPC's verdict for one port: an advert, or why not. Logged at info for each refusal.
pub fn evaluate(
    port: &Port,
    has_ip: bool,
    host: &HostFacts,
    cfg: &CpcConfig,
) -> Vec<(CpcId, Result<Advert, Unusable>)> {
    CpcId::ALL
        .into_iter()
        .map(|cpc| {
            let verdict = match cfg.excluded(cpc) {
                Some(how) => Err(Unusable::Excluded { how }),
                None => query(cpc, port, has_ip, host).map(|()| Advert {
                    index: cpc.index(),
                    priority: cfg.priority_of(cpc),
                }),
            };
            if let Err(why) = &verdict {
                tracing::info!(port = %port.name(), cpc = %cpc, reason = %why, "CPC not offered");
            }
            (cpc, verdict)
        })
        .collect()
}

/// Just the adverts of [`evaluate`].
pub fn adverts(verdicts: &[(CpcId, Result<Advert, Unusable>)]) -> Vec<Advert> {
    verdicts
        .iter()
        .filter_map(|(_, v)| v.as_ref().ok().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_errors_name_the_problem() {
        let c = CpcConfig::parse(Some("udcm, rdmacm"), None, Some("rdmacm:70,oob:1")).unwrap();
        assert_eq!(c.include, Some(vec![CpcId::Udcm, CpcId::Rdmacm]));
        assert_eq!(c.priority_of(CpcId::Rdmacm), 70);
        assert_eq!(c.priority_of(CpcId::Udcm), 63);
        assert!(matches!(
            CpcConfig::parse(Some("udcm"), Some("oob"), None),
            Err(CpcConfigError::Both { .. })
        ));
        let e = CpcConfig::parse(Some("udcm,foo"), None, None).unwrap_err();
        assert!(e.to_string().contains("\"foo\""), "{e}");
        assert!(CpcConfig::parse(None, None, Some("rdmacm:300")).is_err());
        assert!(CpcConfig::parse(None, None, Some("rdmacm")).is_err());
    }

    #[test]
    fn exclusion_reasons() {
        let c = CpcConfig::parse(Some("udcm"), None, None).unwrap();
        assert!(c
            .excluded(CpcId::Oob)
            .unwrap()
            .contains("OPENIB_CPC_INCLUDE=udcm"));
        assert_eq!(c.excluded(CpcId::Udcm), None);
        let c = CpcConfig::parse(None, Some("udcm"), None).unwrap();
        assert!(c.excluded(CpcId::Udcm).is_some());
    }
}
