//! Rendezvous (RTS, CTS/CTS_HEAD, WRITTEN, FIN): the protocol a receiver chooses
//! ([`RndvProtocol`]), where a payload lives until the peer is done with it ([`Source`]), and
//! the state of each transfer in either direction ([`Outgoing`], [`Incoming`]).

use super::error::TransportError;
use super::wire::Rts;
use super::Tag;
use openib_sys::Region;
use openib_sys::{ForeignRegion, MemoryRegion, SharedRegion};
use std::sync::Arc;

/// How a receiver takes an incoming rendezvous (`OPENIB_RNDV_PROTOCOL`): its choice alone, so
/// the processes of a job may differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvProtocol {
    /// The default: `Split` on a software RDMA device ([`is_software_rdma`]), `Write` on
    /// hardware. [`Transport::open`] resolves it for its port.
    Auto { write_percent: u8 },
    /// A `CTS` names the landing buffer; the sender RDMA-writes every byte.
    Write,
    /// The receiver RDMA-reads every byte, then sends `FIN`.
    Read,
    /// The sender writes the first `write_percent` of the message (after a `CTS_HEAD`) while
    /// the receiver reads the rest.
    Split { write_percent: u8 },
}

impl std::fmt::Display for RndvProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RndvProtocol::Auto { write_percent } => write!(f, "auto ({write_percent}% split)"),
            RndvProtocol::Write => f.write_str("write"),
            RndvProtocol::Read => f.write_str("read"),
            RndvProtocol::Split { write_percent } => write!(f, "split ({write_percent}% written)"),
        }
    }
}

/// Whether a device with this verbs `vendor_id` is RDMA in software, where the CPU that drives
/// an RDMA operation moves its bytes: rxe (soft-RoCE, 0xffffff) and siw (soft-iWARP,
/// 0x626d74, "bmt").
pub fn is_software_rdma(vendor_id: u32) -> bool {
    matches!(vendor_id, 0x00ff_ffff | 0x0062_6d74)
}

impl RndvProtocol {
    /// The protocol on a device with this verbs `vendor_id`: `Auto` decided, the others as
    /// they are.
    pub fn resolve(self, vendor_id: u32) -> RndvProtocol {
        match self {
            RndvProtocol::Auto { write_percent } if is_software_rdma(vendor_id) => {
                RndvProtocol::Split { write_percent }
            }
            RndvProtocol::Auto { .. } => RndvProtocol::Write,
            p => p,
        }
    }

    /// Bytes at the start of a `len`-byte message that the sender writes (the receiver reads
    /// the rest): `len` for `Write`, 0 for `Read`; for `Split` its share rounded down to whole
    /// 4 KiB pages, and a share that rounds to nothing or everything makes it a plain read or
    /// write.
    pub fn head(&self, len: u64) -> u64 {
        match *self {
            // Unresolved (a transport resolves it at open): as on hardware.
            RndvProtocol::Auto { .. } | RndvProtocol::Write => len,
            RndvProtocol::Read => 0,
            RndvProtocol::Split { write_percent } => {
                let head = (len as u128 * write_percent as u128 / 100) as u64 & !4095;
                if head >= len {
                    len
                } else {
                    head
                }
            }
        }
    }
}

/// Where a rendezvous payload lives until the peer's FIN.
pub(super) enum Source {
    /// A registration-cache buffer holding a copy.
    Cached(MemoryRegion),
    /// The user's registered region (zero copy).
    User(Arc<MemoryRegion>, usize),
    /// The caller's shared bytes, registered where they are (zero copy).
    Shared(Arc<SharedRegion>),
    /// Bytes a C caller holds, registered for this transfer (zero copy).
    Foreign(ForeignRegion),
}

impl Source {
    /// The registered region holding the payload, and where in it the payload starts.
    fn region(&self) -> (&dyn Region, usize) {
        match self {
            Source::Cached(m) => (m, 0),
            Source::User(m, off) => (m.as_ref(), *off),
            Source::Shared(m) => (m.as_ref(), 0),
            Source::Foreign(m) => (m, 0),
        }
    }

    /// `len` bytes of the payload from `offset`, as a scatter/gather entry for a write.
    pub(super) fn sge(&self, offset: usize, len: usize) -> Result<openib_sys::Sge, TransportError> {
        let (region, start) = self.region();
        Ok(region.sge(start + offset, len)?)
    }

    /// The request to send for the `len`-byte payload: where peers read it, with which key.
    pub(super) fn rts(&self, len: usize) -> Rts {
        let (region, start) = self.region();
        Rts {
            addr: region.addr() + start as u64,
            rkey: region.rkey(),
            len: len as u64,
        }
    }
}

/// An incoming rendezvous: read in fragments into a cache buffer.
pub(super) struct Incoming {
    pub(super) tag: Tag,
    pub(super) rts: Rts,
    pub(super) buf: Option<MemoryRegion>,
    /// Leading bytes the sender writes (after our `CTS`, or `CTS_HEAD` when fewer than all);
    /// we read the rest and send a `FIN` if there is any. See [`RndvProtocol::head`].
    pub(super) head: u64,
    /// Next offset to read (from `head`).
    pub(super) next: u64,
    /// Fragments posted and not completed.
    pub(super) reading: u32,
    /// The CTS or CTS_HEAD was posted (a WRITTEN before it is a protocol error).
    pub(super) cts_sent: bool,
    /// The sender's WRITTEN arrived: the head is in place.
    pub(super) written: bool,
}

impl Incoming {
    /// A rendezvous just announced by `rts`, of which the sender is to write `head` bytes.
    pub(super) fn new(tag: Tag, rts: Rts, head: u64) -> Incoming {
        Incoming {
            tag,
            rts,
            buf: None,
            head,
            next: head,
            reading: 0,
            cts_sent: false,
            written: false,
        }
    }

    /// Every byte is in our buffer: the head written (if any), every read completed.
    pub(super) fn complete(&self) -> bool {
        self.reading == 0 && self.next >= self.rts.len && (self.head == 0 || self.written)
    }
}

/// Our rendezvous send, until the peer's FIN (read protocol) or until our writes completed
/// (write protocol).
pub(super) struct Outgoing {
    pub(super) src: Source,
    pub(super) len: usize,
    pub(super) token: u64,
    /// Write protocol: the peer's landing region (from its CTS).
    pub(super) cts: Option<Rts>,
    /// Next offset to write.
    pub(super) next: u64,
    /// Write fragments posted and not completed.
    pub(super) writing: u32,
    /// The peer's `FIN` arrived (it read the whole message, or the part after a `CTS_HEAD`).
    pub(super) fin_seen: bool,
}

impl Outgoing {
    /// The source is no longer needed: see [`SendProgress::finished`].
    pub(super) fn finished(&self) -> bool {
        self.progress().finished()
    }

    pub(super) fn progress(&self) -> SendProgress {
        SendProgress {
            len: self.len as u64,
            head: self.cts.map(|c| c.len),
            next: self.next,
            writing: self.writing,
            fin_seen: self.fin_seen,
        }
    }
}

/// Where a rendezvous send stands, as [`Outgoing`] holds it.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendProgress {
    /// The message's length.
    pub(super) len: u64,
    /// Bytes we write (from the peer's CTS or CTS_HEAD); `None` before one (or never: read).
    pub(super) head: Option<u64>,
    pub(super) next: u64,
    pub(super) writing: u32,
    pub(super) fin_seen: bool,
}

impl SendProgress {
    /// The peer reads some of the message, so a `FIN` is due: no CTS (read protocol, or none
    /// yet) or a `CTS_HEAD` for less than all of it.
    pub(super) fn fin_due(&self) -> bool {
        self.head.is_none_or(|h| h < self.len)
    }

    /// Our writes (if any) completed, and the peer's FIN (if it reads any part) arrived.
    pub(super) fn finished(&self) -> bool {
        let written = self
            .head
            .is_none_or(|h| self.writing == 0 && self.next >= h);
        written && (!self.fin_due() || self.fin_seen)
    }
}

#[cfg(test)]
mod rndv_tests {
    use super::{Incoming, RndvProtocol, SendProgress};
    use proptest::prelude::*;

    #[test]
    fn write_and_read_take_all_or_nothing_and_split_takes_whole_pages() {
        let mib = 1 << 20;
        assert_eq!(RndvProtocol::Write.head(mib), mib);
        assert_eq!(RndvProtocol::Read.head(mib), 0);
        let split = |p| RndvProtocol::Split { write_percent: p };
        assert_eq!(split(50).head(mib), mib / 2);
        // 55% of 1 MiB is 576,716.8 bytes: rounded down to 140 pages.
        assert_eq!(split(55).head(mib), 140 * 4096);
        // A share below one page leaves it all to the reads.
        assert_eq!(split(1).head(300_000), 0);
        // Two pages and a byte, 99% written: one whole page (8,111 bytes round down).
        assert_eq!(split(99).head(8193), 4096);
    }

    #[test]
    fn auto_splits_on_rxe_and_siw_and_writes_on_hardware() {
        let auto = RndvProtocol::Auto { write_percent: 50 };
        let split = RndvProtocol::Split { write_percent: 50 };
        assert_eq!(auto.resolve(0xffffff), split, "rxe");
        assert_eq!(auto.resolve(0x626d74), split, "siw");
        assert_eq!(auto.resolve(0x02c9), RndvProtocol::Write, "Mellanox");
        assert_eq!(RndvProtocol::Read.resolve(0xffffff), RndvProtocol::Read);
        assert_eq!(RndvProtocol::Write.resolve(0xffffff), RndvProtocol::Write);
        assert_eq!(split.to_string(), "split (50% written)");
    }

    proptest! {
        #[test]
        fn a_split_head_is_page_aligned_and_never_past_the_message(
            len in 0u64..(1 << 40),
            p in 1u8..=99,
        ) {
            let head = RndvProtocol::Split { write_percent: p }.head(len);
            prop_assert!(head <= len);
            prop_assert!(head == len || head % 4096 == 0);
            prop_assert!(head <= len * p as u64 / 100 + 1);
        }
    }

    fn incoming(len: u64, head: u64) -> Incoming {
        let rts = super::Rts {
            addr: 0,
            rkey: 0,
            len,
        };
        Incoming::new(1, rts, head)
    }

    #[test]
    fn an_incoming_split_completes_only_with_its_head_written_and_its_reads_done() {
        let mut i = incoming(1 << 20, 1 << 19);
        assert!(!i.complete(), "nothing read or written");
        i.next = 1 << 20;
        i.reading = 2;
        i.written = true;
        assert!(!i.complete(), "reads in flight");
        i.reading = 0;
        assert!(i.complete());
        i.written = false;
        assert!(!i.complete(), "head not written");
        // Read protocol: no WRITTEN is waited for.
        let mut r = incoming(1 << 20, 0);
        r.next = 1 << 20;
        assert!(r.complete());
    }

    /// A 1 MiB send; `head`: the bytes the peer's CTS or CTS_HEAD asked us to write.
    fn outgoing(head: Option<u64>) -> SendProgress {
        SendProgress {
            len: 1 << 20,
            head,
            next: 0,
            writing: 0,
            fin_seen: false,
        }
    }

    #[test]
    fn an_outgoing_split_is_finished_by_its_writes_and_the_fin_in_either_order() {
        // Read protocol: the FIN alone.
        let mut o = outgoing(None);
        assert!(!o.finished());
        o.fin_seen = true;
        assert!(o.finished());
        // Write protocol: the writes alone.
        let mut o = outgoing(Some(1 << 20));
        assert!(!o.finished());
        o.next = 1 << 20;
        o.writing = 1;
        assert!(!o.finished(), "a write in flight");
        o.writing = 0;
        assert!(o.finished());
        // Split: writes done, then the FIN; and the other way round.
        let mut o = outgoing(Some(1 << 19));
        o.next = 1 << 19;
        assert!(!o.finished(), "the FIN is due");
        o.fin_seen = true;
        assert!(o.finished());
        let mut o = outgoing(Some(1 << 19));
        o.fin_seen = true;
        assert!(!o.finished(), "the head is not written");
        o.next = 1 << 19;
        assert!(o.finished());
    }
}
