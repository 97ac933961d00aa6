//! The transport's message header and the payloads of its protocol messages.
//!
//! Every message on an endpoint's RC queue pair starts with this 12-byte header (little-endian):
//!
//! ```text
//!  0      1      2      3      4      5      6      7      8      9     10     11
//! +------+------+------+------+------+------+------+------+------+------+------+------+
//! | tag  | kind | credits (u16) | ctl  | rsvd | length (u16) | sequence (u32)            |
//! +------+------+------+------+------+------+------+------+------+------+------+------+
//! ```
//!
//! - `tag`: the user's tag (1..=255) for `EAGER`, `FRAG` and `RTS`, 0 otherwise.
//! - `kind`: [`Kind`]. A kind never changes meaning; new kinds get new numbers.
//! - `credits`, `ctl`: receive buffers (data, control) the sender reposted since its last
//!   message: the receiver of this header may send that many more.
//! - `length`: payload bytes after the header (at most the eager limit, itself <= 65,535).
//! - `sequence`: per-endpoint message number of `EAGER`, `FRAG` and `RTS` messages (delivery
//!   order; the pieces of one train share their message's number);
//!   `FIN`, `CTS`, `CTS_HEAD` and `WRITTEN` name the sequence of the rendezvous they belong
//!   to; 0 in `CREDIT`.
//!
//! `RTS` payload (28 bytes): source address u64, rkey u32, length u64, reserved u64.
//! `CTS` payload: the same layout, naming the receiver's landing region. `CTS_HEAD`: the same,
//! for the first `length` bytes only.
//! `FIN`, `WRITTEN` and `CREDIT` have no payload.
//!
//! A message above the eager limit and up to the sender's train limit goes as a **train**: one
//! or more `FRAG` pieces, then the last piece as an `EAGER`, all with the message's tag and
//! sequence, posted back to back (only `CREDIT`, `FIN`, `CTS` and `WRITTEN` can come between
//! them). The receiver appends the pieces and delivers the message with its last piece; it
//! accepts trains of up to [`MAX_TRAIN`] bytes (and its largest message) whatever its own train
//! limit. What else a receiver checks of a peer's numbers: [`super::peer`]. No handshake: on a
//! fabric where a message costs more than copying its bytes, this beats the rendezvous below.
//!
//! An `EAGER` message may instead carry its header in the 32-bit immediate data of a send with
//! immediate ([`ImmHeader`]): the message is then its payload alone, so a payload of a whole
//! number of packets (1, 2, 4 KiB...) does not spill 12 bytes into one packet more. The receiver
//! tells the two apart by the completion's immediate flag and takes the sequence number as the
//! next one due (RC delivers in order), checking its low byte:
//!
//! ```text
//!  31          24 23                      12 11       8 7            0
//! +--------------+--------------------------+----------+--------------+
//! | tag          | credits (0..=4095)       | ctl      | sequence & ff|
//! +--------------+--------------------------+----------+--------------+
//! ```
//!
//! A sender uses it when the returns fit (credits <= 4,095, ctl <= 15) and the payload is not
//! empty; otherwise the 12-byte header.
//!
//! A rendezvous is taken by its receiver in one of two ways, the receiver's choice:
//!
//! ```text
//!  read:   sender --RTS--> receiver   receiver RDMA-reads the source   receiver --FIN--> sender
//!  write:  sender --RTS--> receiver --CTS--> sender   sender RDMA-writes the landing region,
//!          then --WRITTEN--> receiver (after the writes on the same queue pair, so it is
//!          handled only once their data is in place)
//!  split:  sender --RTS--> receiver --CTS_HEAD--> sender   the sender RDMA-writes the head
//!          (the region's length) and sends WRITTEN; meanwhile the receiver RDMA-reads the
//!          rest of the source, then --FIN--> sender once the message is delivered
//! ```
//!
//! The split exists for software RDMA (rxe, siw), where the CPU of the side that drives an RDMA
//! operation moves its bytes: a write runs on the sender's CPU, a read on the receiver's, so a
//! split message keeps both busy at once.

use thiserror::Error;

/// Header bytes of every message.
pub const HDR: usize = 12;

/// The header of an `EAGER` message carried in the immediate data (drawn above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmHeader {
    pub tag: u8,
    /// Data credits returned, at most [`ImmHeader::MAX_CREDITS`].
    pub credits: u16,
    /// Control credits returned, at most [`ImmHeader::MAX_CTL`].
    pub ctl: u8,
    /// The low byte of the message's sequence number (a check: the receiver knows the rest).
    pub seq_low: u8,
}

impl ImmHeader {
    pub const MAX_CREDITS: u16 = 0xfff;
    pub const MAX_CTL: u8 = 0xf;

    /// The header, if its returns fit the immediate's fields.
    pub fn fitting(tag: u8, credits: u32, ctl: u32, seq: u32) -> Option<ImmHeader> {
        (credits <= Self::MAX_CREDITS as u32 && ctl <= Self::MAX_CTL as u32).then_some(ImmHeader {
            tag,
            credits: credits as u16,
            ctl: ctl as u8,
            seq_low: seq as u8,
        })
    }

    pub fn encode(&self) -> u32 {
        debug_assert!(self.credits <= Self::MAX_CREDITS && self.ctl <= Self::MAX_CTL);
        (self.tag as u32) << 24
            | (self.credits as u32 & 0xfff) << 12
            | (self.ctl as u32 & 0xf) << 8
            | self.seq_low as u32
    }

    /// Every 32-bit value is a header: nothing here can be malformed (the sequence check is
    /// the receiver's, against the number it expects).
    pub fn decode(imm: u32) -> ImmHeader {
        ImmHeader {
            tag: (imm >> 24) as u8,
            credits: ((imm >> 12) & 0xfff) as u16,
            ctl: ((imm >> 8) & 0xf) as u8,
            seq_low: imm as u8,
        }
    }
}

/// Largest message a receiver assembles from a train (the largest train limit a sender may set).
pub const MAX_TRAIN: usize = 1 << 20;

/// Payload bytes of each piece but the last of a train, for slots of `HDR + eager_limit`
/// bytes: the largest whose message (header included) is a whole number of 4 KiB, so every
/// full piece fills whole packets at any IB MTU; the eager limit itself below 4 KiB.
pub fn train_piece(eager_limit: usize) -> usize {
    let whole = (HDR + eager_limit) / 4096 * 4096;
    if whole == 0 {
        eager_limit
    } else {
        whole - HDR
    }
}

mod field {
    use std::ops::Range;
    pub const TAG: usize = 0;
    pub const KIND: usize = 1;
    pub const CREDITS: Range<usize> = 2..4;
    pub const CTL: usize = 4;
    pub const LENGTH: Range<usize> = 6..8;
    pub const SEQ: Range<usize> = 8..12;
    pub const RTS_ADDR: Range<usize> = 0..8;
    pub const RTS_RKEY: Range<usize> = 8..12;
    pub const RTS_LEN: Range<usize> = 12..20;
    pub const RTS_END: usize = 28;
}

/// Payload bytes of an `RTS`.
pub const RTS_LEN: usize = field::RTS_END;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A user message carried whole (tag, sequence, payload).
    Eager = 0,
    /// Returns credits only; uses a control buffer.
    Credit = 1,
    /// Ready-to-send of a rendezvous: the receiver reads the data from the source region.
    Rts = 2,
    /// The receiver finished reading the rendezvous `sequence`: the source may be released.
    Fin = 3,
    /// Clear to send: the receiver's landing region for rendezvous `sequence`; the sender
    /// RDMA-writes the data there, then sends `Written`.
    Cts = 4,
    /// The sender's writes of rendezvous `sequence` are in place.
    Written = 5,
    /// A piece of a train other than the last: bytes of eager message `sequence`, followed by
    /// its next piece (the last one comes as `Eager`).
    Frag = 6,
    /// Clear to send the head of rendezvous `sequence`: the sender RDMA-writes the first
    /// `length` bytes (fewer than the message's) into the named region, then sends `Written`;
    /// the receiver reads the rest itself and sends `Fin`. The source is free after both.
    CtsHead = 7,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("message of {0} bytes is shorter than the {HDR}-byte header")]
    Runt(usize),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("header says {said} payload bytes but {got} arrived")]
    Length { said: usize, got: usize },
    #[error("{kind:?} payload of {got} bytes, expected {want}")]
    Payload { kind: Kind, got: usize, want: usize },
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    pub kind: Kind,
    pub credits: u16,
    pub ctl: u8,
    pub length: u16,
    pub seq: u32,
}

impl Header {
    pub fn write(&self, b: &mut [u8]) {
        b[field::TAG] = self.tag;
        b[field::KIND] = self.kind as u8;
        b[field::CREDITS].copy_from_slice(&self.credits.to_le_bytes());
        b[field::CTL] = self.ctl;
        b[5] = 0;
        b[field::LENGTH].copy_from_slice(&self.length.to_le_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
    }

    /// Parses a received message: its header and the payload the header announces.
    pub fn parse(b: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if b.len() < HDR {
            return Err(WireError::Runt(b.len()));
        }
        let kind = match b[field::KIND] {
            0 => Kind::Eager,
            1 => Kind::Credit,
            2 => Kind::Rts,
            3 => Kind::Fin,
            4 => Kind::Cts,
            5 => Kind::Written,
            6 => Kind::Frag,
            7 => Kind::CtsHead,
            k => return Err(WireError::UnknownKind(k)),
        };
        let h = Header {
            tag: b[field::TAG],
            kind,
            credits: u16::from_le_bytes([b[2], b[3]]),
            ctl: b[field::CTL],
            length: u16::from_le_bytes([b[6], b[7]]),
            seq: u32::from_le_bytes(b[field::SEQ].try_into().expect("4 bytes")),
        };
        let payload = &b[HDR..];
        if payload.len() != h.length as usize {
            return Err(WireError::Length {
                said: h.length as usize,
                got: payload.len(),
            });
        }
        let want = match kind {
            Kind::Eager | Kind::Frag => payload.len(),
            Kind::Rts | Kind::Cts | Kind::CtsHead => RTS_LEN,
            Kind::Credit | Kind::Fin | Kind::Written => 0,
        };
        if payload.len() != want {
            return Err(WireError::Payload {
                kind,
                got: payload.len(),
                want,
            });
        }
        Ok((h, payload))
    }
}

/// A region of a rendezvous: where the receiver of an `RTS` reads the message from, or (in a
/// `CTS`) where the sender writes it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rts {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl Rts {
    pub fn write(&self, b: &mut [u8]) {
        b[field::RTS_ADDR].copy_from_slice(&self.addr.to_le_bytes());
        b[field::RTS_RKEY].copy_from_slice(&self.rkey.to_le_bytes());
        b[field::RTS_LEN].copy_from_slice(&self.len.to_le_bytes());
        b[field::RTS_LEN.end..field::RTS_END].fill(0);
    }

    pub fn parse(b: &[u8]) -> Result<Rts, WireError> {
        if b.len() != RTS_LEN {
            return Err(WireError::Payload {
                kind: Kind::Rts,
                got: b.len(),
                want: RTS_LEN,
            });
        }
        Ok(Rts {
            addr: u64::from_le_bytes(b[field::RTS_ADDR].try_into().expect("8")),
            rkey: u32::from_le_bytes(b[field::RTS_RKEY].try_into().expect("4")),
            len: u64::from_le_bytes(b[field::RTS_LEN].try_into().expect("8")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_vector() {
        let h = Header {
            tag: 7,
            kind: Kind::Eager,
            credits: 0x0102,
            ctl: 3,
            length: 2,
            seq: 0x0a0b0c0d,
        };
        let mut b = [0xffu8; HDR + 2];
        h.write(&mut b);
        assert_eq!(&b[..HDR], &[7, 0, 2, 1, 3, 0, 2, 0, 0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(Header::parse(&b).unwrap(), (h, &[0xff, 0xff][..]));
    }

    #[test]
    fn malformed_headers_are_named() {
        assert_eq!(Header::parse(&[0; 5]), Err(WireError::Runt(5)));
        let mut b = [0u8; HDR];
        b[1] = 9;
        assert_eq!(Header::parse(&b), Err(WireError::UnknownKind(9)));
        b[1] = 0;
        b[6] = 4;
        assert_eq!(
            Header::parse(&b),
            Err(WireError::Length { said: 4, got: 0 })
        );
        let mut f = [0u8; HDR + 1];
        Header {
            tag: 0,
            kind: Kind::Fin,
            credits: 0,
            ctl: 0,
            length: 1,
            seq: 1,
        }
        .write(&mut f);
        assert!(matches!(
            Header::parse(&f),
            Err(WireError::Payload {
                kind: Kind::Fin,
                ..
            })
        ));
    }

    #[test]
    fn rendezvous_kinds_keep_their_numbers_and_payloads() {
        for (kind, byte, len) in [
            (Kind::Rts, 2, RTS_LEN),
            (Kind::Fin, 3, 0),
            (Kind::Cts, 4, RTS_LEN),
            (Kind::Written, 5, 0),
            (Kind::Frag, 6, 0),
            (Kind::CtsHead, 7, RTS_LEN),
        ] {
            let mut b = vec![0u8; HDR + len];
            Header {
                tag: 0,
                kind,
                credits: 0,
                ctl: 0,
                length: len as u16,
                seq: 9,
            }
            .write(&mut b);
            assert_eq!(b[1], byte, "{kind:?} changed its number");
            assert_eq!(Header::parse(&b).unwrap().0.kind, kind);
            // One byte more or less than the kind's payload is malformed.
            let mut short = b[..HDR].to_vec();
            short[6] = 0;
            if len > 0 {
                assert!(
                    Header::parse(&short).is_err(),
                    "{kind:?} without its payload"
                );
            }
        }
    }

    #[test]
    fn train_pieces_fill_whole_packets() {
        // 8,192: pieces of 8,180 bytes, 8,192 with the header (8 packets of 1 KiB, 2 of 4 KiB).
        assert_eq!(train_piece(8192), 8180);
        assert_eq!(train_piece(65_535), 65_524);
        assert_eq!((HDR + train_piece(65_535)) % 4096, 0);
        // Below a 4 KiB message: the whole slot.
        assert_eq!(train_piece(4083), 4083);
        assert_eq!(train_piece(4084), 4084);
        assert_eq!(train_piece(64), 64);
        for limit in [64, 1000, 4095, 4096, 8191, 8192, 20_000, 65_535] {
            let piece = train_piece(limit);
            assert!(piece > 0 && piece <= limit, "{limit}: {piece}");
        }
    }

    #[test]
    fn immediate_header_vector() {
        let h = ImmHeader::fitting(0xab, 0x123, 0x4, 0x1234_56cd).unwrap();
        assert_eq!(h.encode(), 0xab12_34cd);
        assert_eq!(ImmHeader::decode(0xab12_34cd), h);
        assert_eq!(ImmHeader::fitting(1, 4096, 0, 0), None);
        assert_eq!(ImmHeader::fitting(1, 0, 16, 0), None);
        let max = ImmHeader::fitting(255, 4095, 15, 255).unwrap();
        assert_eq!(max.encode(), u32::MAX);
    }

    proptest::proptest! {
        #[test]
        fn immediate_headers_round_trip(imm in proptest::prelude::any::<u32>()) {
            proptest::prop_assert_eq!(ImmHeader::decode(imm).encode(), imm);
        }
    }

    #[test]
    fn rts_round_trip() {
        let r = Rts {
            addr: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            len: 4 << 20,
        };
        let mut b = [1u8; RTS_LEN];
        r.write(&mut b);
        assert_eq!(Rts::parse(&b).unwrap(), r);
        assert!(Rts::parse(&b[..20]).is_err());
    }
}
