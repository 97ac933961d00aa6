//! Sans-IO checks of what a peer sends. Every number a received message carries (its header's
//! credit returns, tag and sequence; a rendezvous region's address, key and length) is checked
//! here against what this side allows and what it knows of the endpoint, before the transport
//! indexes, allocates, adds or loops with it. A violation is a [`PeerError`] naming the number
//! and the limit; the transport fails that one endpoint with it (nothing else).
//!
//! [`receive`] is the whole decision for one message; the transport applies the [`Step`] it
//! returns to its endpoint. [`super::peer_model::Model`] (tests and the `wire-oracle` feature
//! only) applies it to a verbs-free endpoint: the fuzz target `transport_msg` and the tests
//! drive that with arbitrary peer messages.

use super::flow::{CreditError, Credits, ReorderError, TrainError};
use super::wire::{Header, ImmHeader, Kind, Rts, WireError};

/// What this side allows a peer to announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Largest message (`OPENIB_MAX_MSG_SIZE`): a rendezvous announcing more is refused before
    /// anything is allocated for it, and a train longer than this is not assembled.
    pub max_msg: u64,
}

/// A message that breaks the protocol or this side's limits: the endpoint fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    #[error("malformed message: {0}")]
    Malformed(#[from] WireError),
    /// The immediate header's sequence byte is not the one due.
    #[error("malformed message: sequence ending in {low:#04x} where {due} is due")]
    ImmSequence { low: u8, due: u32 },
    #[error("{kind:?} message {got} arrived where message {due} is due")]
    Sequence { kind: Kind, got: u32, due: u32 },
    #[error(
        "{kind:?} message with tag {tag} (user messages carry tags 1..=255, the transport's own 0)"
    )]
    Tag { kind: Kind, tag: u8 },
    #[error(transparent)]
    Credits(#[from] CreditError),
    #[error(
        "message {seq} announces {len} bytes, above this side's largest message \
         (OPENIB_MAX_MSG_SIZE={limit})"
    )]
    TooLarge { seq: u32, len: u64, limit: u64 },
    #[error("rendezvous {seq} announces 0 bytes")]
    Empty { seq: u32 },
    #[error(
        "{kind:?} of rendezvous {seq} names {len} bytes at {addr:#x}, past the end of the \
         address space"
    )]
    Wraps {
        kind: Kind,
        seq: u32,
        addr: u64,
        len: u64,
    },
    #[error("{kind:?} for unknown rendezvous {seq}")]
    Unknown { kind: Kind, seq: u32 },
    #[error("second FIN for rendezvous {seq}")]
    SecondFin { seq: u32 },
    #[error("FIN after CTS for rendezvous {seq}")]
    FinAfterCts { seq: u32 },
    #[error("second CTS for rendezvous {seq}")]
    SecondCts { seq: u32 },
    #[error("{kind:?} of {len} bytes for the {msg_len}-byte rendezvous {seq}")]
    CtsLength {
        kind: Kind,
        seq: u32,
        len: u64,
        msg_len: u64,
    },
    #[error("WRITTEN for no CTS of rendezvous {seq}")]
    WrittenWithoutCts { seq: u32 },
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Order(#[from] ReorderError),
}

/// Our rendezvous send `seq`, as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sending {
    pub len: u64,
    /// A CTS or CTS_HEAD arrived.
    pub cts: bool,
    pub fin_seen: bool,
    /// The peer reads some of it, so a FIN is due (no CTS, or a CTS_HEAD).
    pub fin_due: bool,
}

/// The peer's rendezvous `seq` to us, as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receiving {
    /// Bytes the sender writes (after our CTS or CTS_HEAD); 0: we read it all.
    pub head: u64,
    pub cts_sent: bool,
    pub written: bool,
}

/// What the checks need of an endpoint.
pub trait RecvBook {
    /// Our credits towards the peer (the returns are checked and added here).
    fn credits(&mut self) -> &mut Credits;
    /// The sequence number the next `EAGER`, `FRAG` or `RTS` must carry.
    fn next_arrival(&self) -> u32;
    fn sending(&self, seq: u32) -> Option<Sending>;
    fn receiving(&self, seq: u32) -> Option<Receiving>;
}

/// A message that passed every check, for the endpoint to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    Credit,
    /// The peer read our rendezvous `seq` (or its part after a CTS_HEAD).
    Fin {
        seq: u32,
    },
    /// Write `region.len` bytes of our rendezvous `seq` there (`CTS`: all of it, `CTS_HEAD`:
    /// fewer); the region lies within the address space.
    Cts {
        seq: u32,
        region: Rts,
    },
    /// The sender's writes of rendezvous `seq` are in place.
    Written {
        seq: u32,
    },
    /// A piece of a train; `seq` is the message due.
    Frag {
        seq: u32,
        tag: u8,
        piece: &'a [u8],
    },
    /// A message (or a train's last piece); `seq` is the message due.
    Eager {
        seq: u32,
        tag: u8,
        data: &'a [u8],
    },
    /// A rendezvous of `1..=max_msg` bytes whose region lies within the address space; `seq`
    /// is the message due.
    Rts {
        seq: u32,
        tag: u8,
        rts: Rts,
    },
}

/// Checks one received message (`b`: the bytes that arrived; `imm`: the immediate data, for
/// an `EAGER` whose header travels there) against `limits` and the endpoint `book`, and adds
/// its credit returns. Never panics, whatever the bytes.
pub fn receive<'a, B: RecvBook + ?Sized>(
    book: &mut B,
    limits: &PeerLimits,
    b: &'a [u8],
    imm: Option<u32>,
) -> Result<Step<'a>, PeerError> {
    let (h, payload) = match imm {
        Some(imm) => {
            let i = ImmHeader::decode(imm);
            let due = book.next_arrival();
            if i.seq_low != due as u8 {
                return Err(PeerError::ImmSequence {
                    low: i.seq_low,
                    due,
                });
            }
            let h = Header {
                tag: i.tag,
                kind: Kind::Eager,
                credits: i.credits,
                ctl: i.ctl,
                length: b.len().min(u16::MAX as usize) as u16,
                seq: due,
            };
            (h, b)
        }
        None => Header::parse(b)?,
    };
    book.credits().on_arrival(h.kind == Kind::Credit)?;
    book.credits().on_returns(h.credits, h.ctl)?;
    let (kind, seq) = (h.kind, h.seq);
    let user = matches!(kind, Kind::Eager | Kind::Frag | Kind::Rts);
    if user == (h.tag == 0) {
        return Err(PeerError::Tag { kind, tag: h.tag });
    }
    if user {
        let due = book.next_arrival();
        if seq != due {
            return Err(PeerError::Sequence {
                kind,
                got: seq,
                due,
            });
        }
    }
    let wraps = |r: &Rts| {
        r.addr
            .checked_add(r.len)
            .is_none()
            .then_some(PeerError::Wraps {
                kind,
                seq,
                addr: r.addr,
                len: r.len,
            })
    };
    Ok(match kind {
        Kind::Credit => Step::Credit,
        Kind::Fin => {
            let o = book.sending(seq).ok_or(PeerError::Unknown { kind, seq })?;
            if o.fin_seen {
                return Err(PeerError::SecondFin { seq });
            }
            if !o.fin_due {
                return Err(PeerError::FinAfterCts { seq });
            }
            Step::Fin { seq }
        }
        Kind::Cts | Kind::CtsHead => {
            let region = Rts::parse(payload)?;
            let o = book.sending(seq).ok_or(PeerError::Unknown { kind, seq })?;
            if o.cts || o.fin_seen {
                return Err(PeerError::SecondCts { seq });
            }
            let fits = match kind {
                Kind::Cts => region.len == o.len,
                _ => region.len > 0 && region.len < o.len,
            };
            if !fits {
                return Err(PeerError::CtsLength {
                    kind,
                    seq,
                    len: region.len,
                    msg_len: o.len,
                });
            }
            if let Some(e) = wraps(&region) {
                return Err(e);
            }
            Step::Cts { seq, region }
        }
        Kind::Written => {
            book.receiving(seq)
                .filter(|i| i.head > 0 && i.cts_sent && !i.written)
                .ok_or(PeerError::WrittenWithoutCts { seq })?;
            Step::Written { seq }
        }
        Kind::Frag => Step::Frag {
            seq,
            tag: h.tag,
            piece: payload,
        },
        Kind::Eager if payload.len() as u64 > limits.max_msg => {
            return Err(PeerError::TooLarge {
                seq,
                len: payload.len() as u64,
                limit: limits.max_msg,
            })
        }
        Kind::Eager => Step::Eager {
            seq,
            tag: h.tag,
            data: payload,
        },
        Kind::Rts => {
            let rts = Rts::parse(payload)?;
            if rts.len == 0 {
                return Err(PeerError::Empty { seq });
            }
            if rts.len > limits.max_msg {
                return Err(PeerError::TooLarge {
                    seq,
                    len: rts.len,
                    limit: limits.max_msg,
                });
            }
            if let Some(e) = wraps(&rts) {
                return Err(e);
            }
            Step::Rts {
                seq,
                tag: h.tag,
                rts,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::peer_model::Model;
    use crate::transport::wire::{HDR, RTS_LEN};

    const LIMITS: PeerLimits = PeerLimits { max_msg: 1 << 20 };

    fn msg(kind: Kind, tag: u8, credits: u16, ctl: u8, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HDR + payload.len()];
        Header {
            tag,
            kind,
            credits,
            ctl,
            length: payload.len() as u16,
            seq,
        }
        .write(&mut b);
        b[HDR..].copy_from_slice(payload);
        b
    }

    fn region(addr: u64, len: u64) -> [u8; RTS_LEN] {
        let mut p = [0u8; RTS_LEN];
        Rts { addr, rkey: 7, len }.write(&mut p);
        p
    }

    fn failed(m: &mut Model, b: &[u8]) -> PeerError {
        m.on_message(b, None);
        m.failed.clone().expect("the endpoint failed")
    }

    /// Regression (issue 27): an RTS's length sized the receiver's buffer unchecked (a bogus
    /// length aborted the process), and a zero-length one stalled the endpoint for good.
    #[test]
    fn a_rendezvous_above_the_largest_message_or_empty_or_wrapping_fails_the_endpoint() {
        let mut m = Model::new(LIMITS, 8, 0);
        let e = failed(
            &mut m,
            &msg(Kind::Rts, 1, 0, 0, 0, &region(0x1000, u64::MAX)),
        );
        assert_eq!(
            e,
            PeerError::TooLarge {
                seq: 0,
                len: u64::MAX,
                limit: 1 << 20
            }
        );
        assert!(e.to_string().contains("OPENIB_MAX_MSG_SIZE=1048576"), "{e}");
        assert_eq!(m.largest_alloc, 0, "nothing allocated");
        let mut m = Model::new(LIMITS, 8, 0);
        assert_eq!(
            failed(&mut m, &msg(Kind::Rts, 1, 0, 0, 0, &region(0x1000, 0))),
            PeerError::Empty { seq: 0 }
        );
        let mut m = Model::new(LIMITS, 8, 0);
        assert!(matches!(
            failed(&mut m, &msg(Kind::Rts, 1, 0, 0, 0, &region(u64::MAX - 10, 4096))),
            PeerError::Wraps { addr, len: 4096, .. } if addr == u64::MAX - 10
        ));
        // At the limit: taken.
        let mut m = Model::new(LIMITS, 8, 0);
        m.on_message(&msg(Kind::Rts, 1, 0, 0, 0, &region(0x1000, 1 << 20)), None);
        m.progress();
        assert_eq!((m.failed.clone(), m.delivered), (None, 1));
        assert_eq!(m.largest_alloc, 1 << 20);
    }

    /// Regression (issue 27): a CTS region was written at `addr + offset` unchecked (an
    /// overflow panic in a debug build, a wrapped address in a release one).
    #[test]
    fn a_cts_region_past_the_address_space_fails_the_endpoint() {
        let mut m = Model::new(LIMITS, 8, 0);
        m.send_rndv(8192);
        let e = failed(
            &mut m,
            &msg(Kind::Cts, 0, 0, 0, 0, &region(u64::MAX - 4095, 8192)),
        );
        assert!(
            matches!(
                e,
                PeerError::Wraps {
                    kind: Kind::Cts,
                    seq: 0,
                    ..
                }
            ),
            "{e}"
        );
        let mut m = Model::new(LIMITS, 8, 0);
        m.send_rndv(8192);
        assert_eq!(
            failed(
                &mut m,
                &msg(Kind::CtsHead, 0, 0, 0, 0, &region(0x1000, 8192))
            ),
            PeerError::CtsLength {
                kind: Kind::CtsHead,
                seq: 0,
                len: 8192,
                msg_len: 8192
            }
        );
    }

    #[test]
    fn notices_for_no_such_rendezvous_fail_the_endpoint() {
        let mut m = Model::new(LIMITS, 8, 0);
        assert_eq!(
            failed(&mut m, &msg(Kind::Fin, 0, 0, 0, 5, &[])),
            PeerError::Unknown {
                kind: Kind::Fin,
                seq: 5
            }
        );
        let mut m = Model::new(LIMITS, 8, 0);
        assert_eq!(
            failed(&mut m, &msg(Kind::Written, 0, 0, 0, 0, &[])),
            PeerError::WrittenWithoutCts { seq: 0 }
        );
        // A FIN, then a second one for the same rendezvous.
        let mut m = Model::new(LIMITS, 8, 0);
        m.send_rndv(100_000);
        m.on_message(&msg(Kind::Fin, 0, 0, 0, 0, &[]), None);
        assert_eq!(m.failed, None);
        assert_eq!(
            failed(&mut m, &msg(Kind::Fin, 0, 0, 0, 0, &[])),
            PeerError::Unknown {
                kind: Kind::Fin,
                seq: 0
            }
        );
    }

    /// Regression (issue 27): credit returns were added unchecked.
    #[test]
    fn returns_of_credits_never_lent_fail_the_endpoint() {
        let mut m = Model::new(LIMITS, 8, 0);
        let e = failed(&mut m, &msg(Kind::Credit, 0, 1, 0, 0, &[]));
        assert!(matches!(e, PeerError::Credits(_)), "{e}");
        // In an immediate header too.
        let mut m = Model::new(LIMITS, 8, 0);
        m.send_eager();
        let imm = ImmHeader::fitting(1, 2, 0, 0).unwrap().encode();
        m.on_message(b"x", Some(imm));
        assert!(matches!(m.failed, Some(PeerError::Credits(_))));
    }

    /// Regression (issue 27): a peer sending beyond the credits we granted it filled our
    /// receive buffers unnoticed (with a shared receive queue, those other peers count on).
    #[test]
    fn a_peer_sending_beyond_its_credits_fails_the_endpoint() {
        let mut m = Model::new(LIMITS, 8, 0);
        for seq in 0..6 {
            m.on_message(&msg(Kind::Eager, 1, 0, 0, seq, b"x"), None);
        }
        assert_eq!((m.failed.clone(), m.delivered), (None, 6));
        assert_eq!(
            failed(&mut m, &msg(Kind::Eager, 1, 0, 0, 6, b"x")),
            PeerError::Credits(CreditError::Overrun {
                kind: "data",
                granted: 6
            })
        );
        // Returns we send give it room again.
        let mut m = Model::new(LIMITS, 8, 0);
        for seq in 0..6 {
            m.on_message(&msg(Kind::Eager, 1, 0, 0, seq, b"x"), None);
        }
        m.progress(); // 6 reposted: a credit-only message returns them
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 6, b"x"), None);
        assert_eq!(m.failed, None);
    }

    /// Regression (issue 27): a FRAG's sequence number was not checked until its train's
    /// last piece, and tags were not checked at all.
    #[test]
    fn header_fields_are_checked() {
        let mut m = Model::new(LIMITS, 8, 0);
        assert_eq!(
            failed(&mut m, &msg(Kind::Frag, 1, 0, 0, 9, b"piece")),
            PeerError::Sequence {
                kind: Kind::Frag,
                got: 9,
                due: 0
            }
        );
        let mut m = Model::new(LIMITS, 8, 0);
        assert_eq!(
            failed(&mut m, &msg(Kind::Eager, 0, 0, 0, 0, b"x")),
            PeerError::Tag {
                kind: Kind::Eager,
                tag: 0
            }
        );
        let mut m = Model::new(LIMITS, 8, 0);
        assert!(matches!(
            failed(&mut m, &msg(Kind::Credit, 3, 0, 0, 0, &[])),
            PeerError::Tag { .. }
        ));
        let mut m = Model::new(LIMITS, 8, 0);
        let imm = ImmHeader::fitting(1, 0, 0, 1).unwrap().encode();
        m.on_message(b"x", Some(imm));
        assert_eq!(
            m.failed.as_ref().map(|e| e.to_string()),
            Some("malformed message: sequence ending in 0x01 where 0 is due".into())
        );
    }

    /// An eager message above the largest message (a sender's eager limit above the
    /// receiver's OPENIB_MAX_MSG_SIZE) is refused like a rendezvous.
    #[test]
    fn an_eager_message_above_the_largest_message_fails_the_endpoint() {
        let mut m = Model::new(PeerLimits { max_msg: 4 }, 8, 0);
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 0, b"1234"), None);
        assert_eq!(m.failed, None);
        assert_eq!(
            failed(&mut m, &msg(Kind::Eager, 1, 0, 0, 1, b"12345")),
            PeerError::TooLarge {
                seq: 1,
                len: 5,
                limit: 4
            }
        );
    }

    /// Regression (issue 27): trains were assembled up to 1 MiB whatever this side allows.
    #[test]
    fn a_train_past_the_largest_message_fails_the_endpoint() {
        let mut m = Model::new(PeerLimits { max_msg: 100 }, 64, 0);
        let piece = [5u8; 60];
        m.on_message(&msg(Kind::Frag, 1, 0, 0, 0, &piece), None);
        assert_eq!(m.failed, None);
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 0, &piece), None);
        assert!(matches!(
            m.failed,
            Some(PeerError::Train(TrainError::TooLong {
                len: 120,
                limit: 100,
                ..
            }))
        ));
    }

    #[test]
    fn an_honest_exchange_is_delivered() {
        let mut m = Model::new(LIMITS, 8, 50);
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 0, b"a"), None);
        m.on_message(&msg(Kind::Frag, 1, 0, 0, 1, b"bc"), None);
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 1, b"d"), None);
        m.on_message(&msg(Kind::Rts, 1, 0, 0, 2, &region(0x1000, 10_000)), None);
        m.on_message(&msg(Kind::Eager, 1, 0, 0, 3, b"e"), None);
        assert_eq!(m.delivered, 2);
        m.progress();
        m.on_message(&msg(Kind::Written, 0, 0, 0, 2, &[]), None);
        assert_eq!((m.failed.clone(), m.delivered), (None, 4));
        m.send_rndv(9000);
        m.on_message(&msg(Kind::Cts, 0, 1, 0, 0, &region(0x2000, 9000)), None);
        assert_eq!(m.failed, None);
        assert_eq!(m.credits.data, 6);
    }
}
