//! The contracts of the protocol decoders other than the modex's, checked on arbitrary input:
//! used by the fuzz targets `transport_msg`, `runtime_msg` and `fence_msg` (fuzz/) and by the
//! corpus replay test (tests/wire_corpus.rs). Each function decodes untrusted bytes and, when
//! the decoder accepts them, panics if a promise is broken:
//! - a transport message re-encodes to the same bytes (its reserved bytes as zero);
//! - a runtime or fence message re-encodes to bytes that decode to the same value.
//!
//! Rejection is always fine; only a panic inside a decoder or a broken promise is a bug. The
//! seed functions give one valid input per message kind, the fuzzers' starting corpus.

use crate::runtime::fence::FenceMsg;
use crate::runtime::resilient::{example_messages, Gathered, ResMsg};
use crate::runtime::wire::{self, Entry, Msg};
use crate::runtime::Scope;
use crate::transport::wire::{Header, Kind, Rts, HDR, RTS_LEN};

/// Checks one transport message (header and payload, as a receive buffer holds it); returns
/// whether it was accepted.
pub fn check_transport_msg(b: &[u8]) -> bool {
    let Ok((h, payload)) = Header::parse(b) else {
        return false;
    };
    let mut again = vec![0u8; HDR + payload.len()];
    h.write(&mut again);
    again[HDR..].copy_from_slice(payload);
    let mut canonical = b.to_vec();
    canonical[5] = 0; // reserved: ignored by the parser, written as zero
    if matches!(h.kind, Kind::Rts | Kind::Cts | Kind::CtsHead) {
        let r = Rts::parse(payload).expect("an accepted RTS/CTS/CTS_HEAD has a region");
        let mut p = [0u8; RTS_LEN];
        r.write(&mut p);
        assert_eq!(Rts::parse(&p), Ok(r), "region round trip");
        canonical[HDR + 20..HDR + RTS_LEN].fill(0); // reserved u64
        again[HDR..].copy_from_slice(&p);
    }
    assert_eq!(again, canonical, "write(parse(b)) != b");
    true
}

/// Checks one frame of the embedded runtime's client/server protocol.
pub fn check_runtime_msg(b: &[u8]) -> bool {
    let Ok(m) = Msg::decode(b) else {
        return false;
    };
    assert_eq!(Msg::decode(&m.encode()), Ok(m), "decode(encode(m)) != m");
    true
}

/// Checks one routed fence payload: a star-fence message or a resilient-fence one (their tags
/// do not overlap, so the first byte picks the decoder).
pub fn check_fence_msg(b: &[u8]) -> bool {
    match b.first() {
        Some(1..=3) => {
            let Ok(m) = FenceMsg::decode(b) else {
                return false;
            };
            assert_eq!(FenceMsg::decode(&m.encode()), Ok(m), "fence round trip");
        }
        _ => {
            let Ok(m) = ResMsg::decode(b) else {
                return false;
            };
            assert_eq!(ResMsg::decode(&m.encode()), Ok(m), "resilient round trip");
        }
    }
    true
}

/// One valid message of every transport kind.
pub fn transport_seeds() -> Vec<Vec<u8>> {
    let region = Rts {
        addr: 0x7f00_1234_5000,
        rkey: 0x1234,
        len: 1 << 20,
    };
    let mut r = [0u8; RTS_LEN];
    region.write(&mut r);
    [
        (Kind::Eager, 7, &b"hello"[..]),
        (Kind::Credit, 0, &[][..]),
        (Kind::Rts, 9, &r[..]),
        (Kind::Fin, 0, &[][..]),
        (Kind::Cts, 0, &r[..]),
        (Kind::Written, 0, &[][..]),
        (Kind::Frag, 7, &b"a piece"[..]),
        (Kind::CtsHead, 0, &r[..]),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (kind, tag, payload))| {
        let mut b = vec![0u8; HDR + payload.len()];
        Header {
            tag,
            kind,
            credits: i as u16 * 3,
            ctl: (i % 2) as u8,
            length: payload.len() as u16,
            seq: 100 + i as u32,
        }
        .write(&mut b);
        b[HDR..].copy_from_slice(payload);
        b
    })
    .collect()
}

fn entries() -> Vec<Entry> {
    vec![
        Entry {
            scope: Scope::Global,
            key: "openib.node".into(),
            value: vec![1, 2, 3],
        },
        Entry {
            scope: Scope::Local,
            key: "openib.proc".into(),
            value: vec![],
        },
    ]
}

/// One valid frame of every runtime message.
pub fn runtime_seeds() -> Vec<Vec<u8>> {
    wire::examples().iter().map(Msg::encode).collect()
}

/// One valid payload of every fence message, star and resilient.
pub fn fence_seeds() -> Vec<Vec<u8>> {
    let data: Gathered = [(0, entries()), (2, vec![])].into_iter().collect();
    let star = [
        FenceMsg::Up {
            epoch: 1,
            data: data.clone(),
        },
        FenceMsg::Down { epoch: 1, data },
        FenceMsg::Abort {
            epoch: 2,
            missing: vec![3, 4],
        },
    ];
    star.iter()
        .map(FenceMsg::encode)
        .chain(example_messages().iter().map(ResMsg::encode))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_accepted_by_its_decoder() {
        for s in transport_seeds() {
            assert!(check_transport_msg(&s), "{s:?}");
        }
        for s in runtime_seeds() {
            assert!(check_runtime_msg(&s), "{s:?}");
        }
        for s in fence_seeds() {
            assert!(check_fence_msg(&s), "{s:?}");
        }
    }

    #[test]
    fn truncations_and_flipped_bytes_never_panic() {
        type Check = fn(&[u8]) -> bool;
        let all: Vec<(Check, Vec<u8>)> = transport_seeds()
            .into_iter()
            .map(|s| (check_transport_msg as Check, s))
            .chain(
                runtime_seeds()
                    .into_iter()
                    .map(|s| (check_runtime_msg as _, s)),
            )
            .chain(fence_seeds().into_iter().map(|s| (check_fence_msg as _, s)))
            .collect();
        for (check, seed) in all {
            for n in 0..seed.len() {
                assert!(
                    !check(&seed[..n]) || n == seed.len(),
                    "a truncation was accepted"
                );
            }
            for i in 0..seed.len() {
                for bit in 0..8 {
                    let mut b = seed.clone();
                    b[i] ^= 1 << bit;
                    check(&b);
                }
            }
        }
    }
}
