//! What the server routes between clients: fence traffic of either fence, and the resilient
//! fence's timeout exchange, in one tagged encoding.

use crate::runtime::fence::FenceMsg;
use crate::runtime::resilient::ResMsg;
use crate::runtime::wire::{Dec, WireError};

/// What a routed payload carries: fence traffic of either kind, and the resilient fence's
/// timeout exchange. Tags: 1–3 [`FenceMsg`], 0x11–0x17 [`ResMsg`], 0x20 `Present`, 0x21
/// `Verdict`; integers little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencePayload {
    Star(FenceMsg),
    Res(ResMsg),
    /// Member -> root after its deadline: "I am in fence `epoch`" (so the root can tell who
    /// never arrived).
    Present {
        epoch: u64,
    },
    /// Root -> members after its deadline: fence `epoch` failed; these never arrived.
    Verdict {
        epoch: u64,
        missing: Vec<u32>,
    },
}

const TAG_PRESENT: u8 = 0x20;
const TAG_VERDICT: u8 = 0x21;

impl FencePayload {
    pub fn epoch(&self) -> u64 {
        match self {
            FencePayload::Star(m) => m.epoch(),
            FencePayload::Res(m) => m.epoch,
            FencePayload::Present { epoch } | FencePayload::Verdict { epoch, .. } => *epoch,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            FencePayload::Star(m) => m.encode(),
            FencePayload::Res(m) => m.encode(),
            FencePayload::Present { epoch } => {
                let mut out = vec![TAG_PRESENT];
                out.extend_from_slice(&epoch.to_le_bytes());
                out
            }
            FencePayload::Verdict { epoch, missing } => {
                let mut out = vec![TAG_VERDICT];
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&(missing.len() as u32).to_le_bytes());
                for r in missing {
                    out.extend_from_slice(&r.to_le_bytes());
                }
                out
            }
        }
    }

    /// Decodes by the first byte's tag; bounded, never panics.
    pub fn decode(buf: &[u8]) -> std::result::Result<FencePayload, WireError> {
        let Some(&tag) = buf.first() else {
            return Err(WireError::Truncated {
                what: "fence tag",
                offset: 0,
            });
        };
        match tag {
            1..=3 => FenceMsg::decode(buf).map(FencePayload::Star),
            0x11..=0x17 => ResMsg::decode(buf).map(FencePayload::Res),
            TAG_PRESENT | TAG_VERDICT => {
                let mut d = Dec::new(&buf[1..]);
                let epoch = d.u64("epoch")?;
                let p = if tag == TAG_PRESENT {
                    FencePayload::Present { epoch }
                } else {
                    let n = d.count("missing count", 4)?;
                    let mut missing = Vec::with_capacity(n);
                    for _ in 0..n {
                        missing.push(d.u32("rank")?);
                    }
                    FencePayload::Verdict { epoch, missing }
                };
                d.finish()?;
                Ok(p)
            }
            tag => Err(WireError::UnknownTag { tag }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fence::FenceMsg;

    #[test]
    fn fence_payloads_round_trip_and_reject_bad_input() {
        let ps = [
            FencePayload::Star(FenceMsg::Abort {
                epoch: 3,
                missing: vec![1],
            }),
            FencePayload::Present { epoch: 9 },
            FencePayload::Verdict {
                epoch: 9,
                missing: vec![2, 4],
            },
        ];
        for p in ps {
            let b = p.encode();
            assert_eq!(FencePayload::decode(&b), Ok(p.clone()));
            for n in 0..b.len() {
                assert!(
                    matches!(
                        FencePayload::decode(&b[..n]),
                        Err(WireError::Truncated { .. })
                    ),
                    "{p:?} cut at {n}"
                );
            }
        }
        assert_eq!(
            FencePayload::decode(&[0x30, 0]),
            Err(WireError::UnknownTag { tag: 0x30 })
        );
        let mut b = FencePayload::Present { epoch: 1 }.encode();
        b.push(0);
        assert_eq!(
            FencePayload::decode(&b),
            Err(WireError::Trailing { len: 1 })
        );
    }
}
