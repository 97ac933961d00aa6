//! The contracts of the protocol decoders other than the modex's, checked on arbitrary input:
//! used by the fuzz targets `transport_msg`, `runtime_msg`, `fence_msg` and `gc_msg` (fuzz/) and
//! by the corpus replay test (tests/wire_corpus.rs). Each function decodes untrusted bytes and,
//! when the decoder accepts them, panics if a promise is broken:
//! - a transport message re-encodes to the same bytes (its reserved bytes as zero);
//! - a runtime or fence message re-encodes to bytes that decode to the same value;
//! - a group-creation message ([`GcMsg`]) re-encodes to the very same bytes (its encoding has
//!   no slack: flags are 0 or 1, rank lists strictly ascending, no trailing bytes).
//!
//! Rejection is always fine; only a panic inside a decoder or a broken promise is a bug. The
//! seed functions give one valid input per message kind, the fuzzers' starting corpus.
//!
//! The transport target also reads its input as a script of peer messages and local steps
//! ([`check_transport_session`]) that drives the receive path's checks and bookkeeping
//! ([`crate::transport::peer`]) on a verbs-free endpoint: any panic, overflow or allocation
//! beyond the endpoint's limits is a bug; a failed endpoint is fine.

use crate::runtime::fence::FenceMsg;
use crate::runtime::group_create::wire::{self as gc_wire, tag as gc_tag, view_key, GcMsg};
use crate::runtime::resilient::{example_messages, Gathered, ResMsg};
use crate::runtime::wire::{self, Entry, Msg, WireError};
use crate::runtime::Scope;
use crate::transport::peer::PeerLimits;
use crate::transport::peer_model::Model;
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

/// Largest message of the scripted endpoint: small, so that scripts of a few KiB reach it.
pub const SESSION_MAX_MSG: u64 = 2048;

/// Script opcodes of [`check_transport_session`] (the low 3 bits of a step's first byte).
pub mod op {
    /// u16 length, then that many bytes: a message as it arrived.
    pub const RAW: u8 = 0;
    /// kind, tag, credits u16, ctl, seq u32, length u8, payload: a message with a header
    /// written for it (its length field right).
    pub const MSG: u8 = 1;
    /// immediate u32, length u8, payload: an `EAGER` with its header in the immediate data.
    pub const IMM: u8 = 2;
    /// kind (RTS, CTS, CTS_HEAD by value mod 3), tag, credits u16, ctl, seq u32, address
    /// u64, rkey u32, length u64: a rendezvous message.
    pub const REGION: u8 = 3;
    /// length u32: we send a rendezvous of that many bytes.
    pub const SEND_RNDV: u8 = 4;
    /// we send an eager message.
    pub const SEND_EAGER: u8 = 5;
    /// our side moves (a rendezvous to us gets its buffer, CTS and reads).
    pub const PROGRESS: u8 = 6;
}

/// Runs `b` as a script against a verbs-free endpoint (its first byte picks the rendezvous
/// protocol: read, write or split; then steps, see [`op`]): every peer message goes through
/// the transport's receive checks ([`crate::transport::peer::receive`]) and the endpoint
/// applies it as the transport does. Panics on a panic, an overflow, or an allocation beyond
/// the limits; returns whether the script was whole (no step cut short).
pub fn check_transport_session(b: &[u8]) -> bool {
    run_session(b).0
}

/// [`check_transport_session`], and the endpoint as the script left it.
fn run_session(b: &[u8]) -> (bool, Option<Model>) {
    let mut r = Reader(b);
    let Some(proto) = r.u8() else {
        return (false, None);
    };
    let limits = PeerLimits {
        max_msg: SESSION_MAX_MSG,
    };
    let mut m = Model::new(limits, 16, [0, 100, 50][proto as usize % 3]);
    let mut buf = Vec::new();
    while let Some(step) = r.u8() {
        let whole = match step & 7 {
            op::RAW => r.u16().and_then(|n| r.take(n as usize)).map(|msg| {
                m.on_message(msg, None);
            }),
            op::MSG => (|| {
                let (kind, tag, credits, ctl, seq) =
                    (r.u8()?, r.u8()?, r.u16()?, r.u8()?, r.u32()?);
                let n = r.u8()? as usize;
                let payload = r.take(n)?;
                buf.clear();
                buf.resize(HDR + n, 0);
                Header {
                    tag,
                    kind: Kind::Eager,
                    credits,
                    ctl,
                    length: n as u16,
                    seq,
                }
                .write(&mut buf);
                buf[1] = kind; // any kind byte, known or not
                buf[HDR..].copy_from_slice(payload);
                m.on_message(&buf, None);
                Some(())
            })(),
            op::IMM => (|| {
                let imm = r.u32()?;
                let n = r.u8()? as usize;
                m.on_message(r.take(n)?, Some(imm));
                Some(())
            })(),
            op::REGION => (|| {
                let kind = [Kind::Rts, Kind::Cts, Kind::CtsHead][r.u8()? as usize % 3];
                let (tag, credits, ctl, seq) = (r.u8()?, r.u16()?, r.u8()?, r.u32()?);
                let region = Rts {
                    addr: r.u64()?,
                    rkey: r.u32()?,
                    len: r.u64()?,
                };
                buf.clear();
                buf.resize(HDR + RTS_LEN, 0);
                Header {
                    tag,
                    kind,
                    credits,
                    ctl,
                    length: RTS_LEN as u16,
                    seq,
                }
                .write(&mut buf);
                region.write(&mut buf[HDR..]);
                m.on_message(&buf, None);
                Some(())
            })(),
            op::SEND_RNDV => r.u32().map(|len| m.send_rndv(len.into())),
            op::SEND_EAGER => {
                m.send_eager();
                Some(())
            }
            _ => {
                m.progress();
                Some(())
            }
        };
        if whole.is_none() {
            return (false, Some(m));
        }
        assert!(m.largest_alloc <= SESSION_MAX_MSG.max(crate::transport::wire::MAX_TRAIN as u64));
    }
    (true, Some(m))
}

/// Builds [`check_transport_session`] scripts.
struct Script(Vec<u8>);

impl Script {
    fn new(proto: u8) -> Script {
        Script(vec![proto])
    }
    fn msg(mut self, kind: Kind, tag: u8, credits: u16, seq: u32, payload: &[u8]) -> Script {
        self.0.extend([op::MSG, kind as u8, tag]);
        self.0.extend(credits.to_le_bytes());
        self.0.push(0);
        self.0.extend(seq.to_le_bytes());
        self.0.push(payload.len() as u8);
        self.0.extend(payload);
        self
    }
    fn imm(mut self, imm: u32, payload: &[u8]) -> Script {
        self.0.push(op::IMM);
        self.0.extend(imm.to_le_bytes());
        self.0.push(payload.len() as u8);
        self.0.extend(payload);
        self
    }
    fn region(mut self, kind: Kind, tag: u8, seq: u32, addr: u64, len: u64) -> Script {
        let k = match kind {
            Kind::Rts => 0,
            Kind::Cts => 1,
            _ => 2,
        };
        self.0.extend([op::REGION, k, tag, 0, 0, 0]);
        self.0.extend(seq.to_le_bytes());
        self.0.extend(addr.to_le_bytes());
        self.0.extend(0x77u32.to_le_bytes());
        self.0.extend(len.to_le_bytes());
        self
    }
    fn step(mut self, op: u8) -> Script {
        self.0.push(op);
        self
    }
    fn send_rndv(mut self, len: u32) -> Script {
        self.0.push(op::SEND_RNDV);
        self.0.extend(len.to_le_bytes());
        self
    }
}

/// Scripts for [`check_transport_session`]: honest exchanges under each rendezvous protocol
/// (the first three), then peers that break one limit each.
pub fn transport_session_seeds() -> Vec<Vec<u8>> {
    use crate::transport::wire::ImmHeader;
    let imm = |tag, seq| ImmHeader::fitting(tag, 0, 0, seq).expect("fits").encode();
    let train_piece = [0x54u8; 255];
    let mut long_train = Script::new(0);
    for _ in 0..9 {
        long_train = long_train.msg(Kind::Frag, 3, 0, 0, &train_piece);
    }
    vec![
        // read: eager, immediate, a train, a rendezvous read, an eager held behind it
        Script::new(0)
            .msg(Kind::Eager, 1, 0, 0, b"hello")
            .imm(imm(2, 1), b"imm")
            .msg(Kind::Frag, 3, 0, 2, b"ab")
            .msg(Kind::Eager, 3, 0, 2, b"c")
            .region(Kind::Rts, 4, 3, 0x7f00_0000_1000, 1500)
            .msg(Kind::Eager, 5, 0, 4, b"held")
            .step(op::PROGRESS)
            .msg(Kind::Credit, 0, 0, 0, b""),
        // write: our rendezvous written after the peer's CTS; theirs after our CTS and WRITTEN
        Script::new(1)
            .send_rndv(5000)
            .region(Kind::Cts, 0, 0, 0x7f00_0000_2000, 5000)
            .step(op::SEND_EAGER)
            .msg(Kind::Credit, 0, 2, 0, b"")
            .region(Kind::Rts, 1, 0, 0x7f00_0000_3000, 2000)
            .step(op::PROGRESS)
            .msg(Kind::Written, 0, 0, 0, b""),
        // split: a CTS_HEAD and a FIN for ours; the head written and the rest read for theirs
        Script::new(2)
            .send_rndv(9000)
            .region(Kind::CtsHead, 0, 0, 0x7f00_0000_4000, 4096)
            .msg(Kind::Fin, 0, 1, 0, b"")
            .region(Kind::Rts, 1, 0, 0x7f00_0000_5000, 2048)
            .step(op::PROGRESS)
            .msg(Kind::Written, 0, 0, 0, b""),
        // a rendezvous above the largest message
        Script::new(0)
            .region(Kind::Rts, 1, 0, 0x1000, u64::MAX)
            .step(op::PROGRESS),
        // a CTS whose region wraps the address space
        Script::new(1)
            .send_rndv(8192)
            .region(Kind::Cts, 0, 0, u64::MAX - 4095, 8192),
        // credits never lent
        Script::new(0).msg(Kind::Credit, 0, u16::MAX, 0, b""),
        // a train past the largest message
        long_train.msg(Kind::Eager, 3, 0, 0, b"end"),
        // more messages than credits granted (16 buffers, 14 for data)
        (0..15).fold(Script::new(0), |s, seq| s.msg(Kind::Eager, 1, 0, seq, b"x")),
    ]
    .into_iter()
    .map(|s| s.0)
    .collect()
}

/// The transport target's corpus: [`transport_seeds`], then [`transport_session_seeds`].
pub fn transport_corpus() -> Vec<Vec<u8>> {
    let mut all = transport_seeds();
    all.extend(transport_session_seeds());
    all
}

/// A transport fuzz input: one message ([`check_transport_msg`]) and a script
/// ([`check_transport_session`]) at once; accepted if either is.
pub fn check_transport_input(b: &[u8]) -> bool {
    let msg = check_transport_msg(b);
    check_transport_session(b) || msg
}

/// Little-endian fields off the front of a script.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, rest) = (self.0.get(..n)?, &self.0[n..]);
        self.0 = rest;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
    }
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

/// Checks one group-creation message (`GcMsg`, issue 32's protocol): if the decoder accepts
/// it, it re-encodes to exactly `b` and decodes again to the same message.
pub fn check_gc_msg(b: &[u8]) -> bool {
    let Ok(m) = GcMsg::decode(b) else {
        return false;
    };
    let again = m.encode();
    assert_eq!(again, b, "encode(decode(b)) != b");
    assert_eq!(GcMsg::decode(&again), Ok(m), "decode(encode(m)) != m");
    true
}

/// Group-creation messages that break one rule of the wire form each, and the error the
/// decoder must give for it: every malformation has its own error (name and offset), so a
/// peer's bad message is reported as what it is.
pub fn gc_msg_malformed() -> Vec<(Vec<u8>, WireError)> {
    // The header: tag, op tag, view hash, then the sender's failed ranks.
    fn header(t: u8, hash: u64, failed: &[u32]) -> Vec<u8> {
        let mut b = vec![t];
        b.extend(0x0102_0304_0506_0708u64.to_le_bytes());
        b.extend(hash.to_le_bytes());
        list(&mut b, failed);
        b
    }
    fn list(b: &mut Vec<u8>, xs: &[u32]) {
        b.extend((xs.len() as u32).to_le_bytes());
        for x in xs {
            b.extend(x.to_le_bytes());
        }
    }
    fn u32s(b: &mut Vec<u8>, xs: &[u32]) {
        for x in xs {
            b.extend(x.to_le_bytes());
        }
    }
    // A view: U, I, then the exclusions as given.
    fn view(b: &mut Vec<u8>, u: &[u32], i: &[u32], ex: &[(u32, u32)]) {
        list(b, u);
        list(b, i);
        b.extend((ex.len() as u32).to_le_bytes());
        for (x, k) in ex {
            u32s(b, &[*x, *k]);
        }
    }
    let good_view = |b: &mut Vec<u8>| view(b, &[0, 1, 2], &[0, 2], &[(1, 2)]);
    let good_hash = view_key(&[0, 1, 2], &[0, 2]);
    const HEADER: usize = 21; // with no failed ranks
    let full = |u: &[u32], i: &[u32], ex: &[(u32, u32)]| {
        let mut b = header(gc_tag::FULL, view_key(u, i), &[]);
        view(&mut b, u, i, ex);
        b.push(0);
        b
    };
    let invalid = |what, offset| WireError::Invalid { what, offset };
    let mut cases = vec![
        (
            vec![],
            WireError::Truncated {
                what: "group-create tag",
                offset: 0,
            },
        ),
        (vec![0x29], WireError::UnknownTag { tag: 0x29 }),
        (
            vec![gc_tag::HELLO, 1, 2, 3],
            WireError::Truncated {
                what: "op tag",
                offset: 1,
            },
        ),
        (
            header(gc_tag::HELLO, 0, &[5, 3]),
            invalid("failed rank", 25),
        ),
        (
            {
                let mut b = header(gc_tag::NUDGE, 0, &[]);
                b[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            },
            WireError::Truncated {
                what: "failed rank",
                offset: 17,
            },
        ),
        (
            {
                let mut b = header(gc_tag::HELLO, 0, &[1]);
                b.push(0);
                b
            },
            WireError::Trailing { len: 1 },
        ),
        (
            {
                let mut b = header(gc_tag::UP, 0, &[]);
                u32s(&mut b, &[0, 3]);
                b.push(2);
                b
            },
            WireError::BadValue {
                what: "acked flag",
                value: 2,
                offset: HEADER + 8,
            },
        ),
        (
            {
                let mut b = header(gc_tag::FULL, good_hash, &[]);
                good_view(&mut b);
                b.push(7);
                b
            },
            WireError::BadValue {
                what: "reply flag",
                value: 7,
                offset: HEADER + 40,
            },
        ),
        (
            {
                let mut b = header(gc_tag::FULL, good_hash ^ 1, &[]);
                good_view(&mut b);
                b.push(1);
                b
            },
            invalid("view hash", 9),
        ),
        (
            full(&[2, 1], &[], &[(1, 0), (2, 0)]),
            invalid("member", HEADER + 8),
        ),
        (
            full(&[1, 2], &[2, 1], &[]),
            invalid("common member", HEADER + 12 + 8),
        ),
        (
            full(&[1, 2], &[1, 3], &[(2, 1)]),
            invalid("common set outside the members", HEADER + 12),
        ),
        (
            full(&[1, 2, 3], &[1], &[(2, 1)]),
            invalid("exclusions", HEADER + 16 + 8),
        ),
        (
            full(&[1, 2, 3], &[1], &[(3, 1), (2, 1)]),
            invalid("exclusion order", HEADER + 16 + 8 + 4 + 8),
        ),
        (
            {
                let mut b = header(gc_tag::FULL, 0, &[]);
                list(&mut b, &[]);
                list(&mut b, &[]);
                b.extend(u32::MAX.to_le_bytes());
                b
            },
            WireError::Truncated {
                what: "exclusion count",
                offset: HEADER + 8,
            },
        ),
        (
            {
                // A proposal whose value lists its dead out of order.
                let mut b = header(gc_tag::PROPOSE_FRESH, 0, &[]);
                u32s(&mut b, &[1, 0, 0]);
                good_view(&mut b);
                list(&mut b, &[2, 2]);
                u32s(&mut b, &[0]);
                b
            },
            invalid("value's failed rank", HEADER + 12 + 40 + 8),
        ),
        (
            {
                let mut b = header(gc_tag::ACK, 0, &[]);
                u32s(&mut b, &[1, 0]);
                b
            },
            WireError::Truncated {
                what: "ballot attempt",
                offset: HEADER + 8,
            },
        ),
        (
            header(gc_tag::COMMIT, 0, &[]),
            WireError::Truncated {
                what: "committing root",
                offset: HEADER,
            },
        ),
    ];
    // An Up whose accepted proposal is cut inside its value's root.
    let mut up = header(gc_tag::UP, 0, &[]);
    u32s(&mut up, &[0, 3]);
    up.push(1);
    u32s(&mut up, &[2, 1, 0]);
    good_view(&mut up);
    list(&mut up, &[]);
    up.extend([0, 0]);
    let at = up.len() - 2;
    cases.push((
        up,
        WireError::Truncated {
            what: "value root",
            offset: at,
        },
    ));
    cases
}

/// The `gc_msg` target's corpus: one valid message of every body kind (the examples of
/// [`gc_wire::example_messages`]), then the malformed ones of [`gc_msg_malformed`].
pub fn gc_msg_seeds() -> Vec<Vec<u8>> {
    gc_wire::example_messages()
        .iter()
        .map(GcMsg::encode)
        .chain(gc_msg_malformed().into_iter().map(|(b, _)| b))
        .collect()
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
        let valid = gc_wire::example_messages().len();
        for (i, s) in gc_msg_seeds().iter().enumerate() {
            assert_eq!(check_gc_msg(s), i < valid, "gc seed {i}: {s:?}");
        }
    }

    /// Each malformed group-creation message gets exactly its own error, and no two share one.
    #[test]
    fn every_gc_malformation_has_its_own_error() {
        let cases = gc_msg_malformed();
        for (b, want) in &cases {
            assert_eq!(GcMsg::decode(b).as_ref(), Err(want), "{b:?}");
        }
        for (i, (_, a)) in cases.iter().enumerate() {
            for (_, b) in &cases[i + 1..] {
                assert_ne!(a, b, "two malformations with one error");
            }
        }
    }

    /// The honest scripts run to the end with every message delivered; each hostile one
    /// fails the endpoint with the error naming its number.
    #[test]
    fn session_seeds_are_whole_and_fail_only_where_a_limit_is_broken() {
        use crate::transport::flow::{CreditError, TrainError};
        use crate::transport::peer::PeerError;
        let seeds = transport_session_seeds();
        let runs: Vec<Model> = seeds
            .iter()
            .map(|s| {
                let (whole, m) = run_session(s);
                assert!(whole, "{s:?}");
                m.expect("ran")
            })
            .collect();
        for (m, delivered) in runs[..3].iter().zip([5, 1, 1]) {
            assert_eq!((m.failed.clone(), m.delivered), (None, delivered));
        }
        assert!(matches!(
            runs[3].failed,
            Some(PeerError::TooLarge {
                len: u64::MAX,
                limit: SESSION_MAX_MSG,
                ..
            })
        ));
        assert_eq!(runs[3].largest_alloc, 0);
        assert!(matches!(
            runs[4].failed,
            Some(PeerError::Wraps {
                kind: Kind::Cts,
                ..
            })
        ));
        assert!(matches!(runs[5].failed, Some(PeerError::Credits(_))));
        assert!(matches!(
            runs[7].failed,
            Some(PeerError::Credits(CreditError::Overrun { granted: 14, .. }))
        ));
        assert_eq!(runs[7].delivered, 14);
        assert!(matches!(
            runs[6].failed,
            Some(PeerError::Train(TrainError::TooLong {
                len: 2295,
                limit: 2048,
                ..
            }))
        ));
        for s in &seeds {
            assert!(check_transport_input(s));
            for n in 0..s.len() {
                check_transport_session(&s[..n]);
            }
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
            .chain(
                gc_wire::example_messages()
                    .iter()
                    .map(|m| (check_gc_msg as _, m.encode())),
            )
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
