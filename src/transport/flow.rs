//! Sans-IO parts of an endpoint's protocol: credit accounting, in-order delivery across the
//! eager and rendezvous paths, and the fragmentation of rendezvous reads. No verbs here: the
//! transport feeds these with what it posted and what arrived, and the tests drive them with
//! simulated peers.

use super::wire::MAX_TRAIN;
use std::collections::VecDeque;

/// Credit accounting of one endpoint (both directions).
///
/// Contract: the peer posts `data + ctl` receive buffers for us. We send a data message (eager,
/// RTS, FIN) only with a data credit and a credit-only message only with a control credit, so
/// we never overrun its buffers. Buffers we repost for the peer are returned in the header of
/// our next message; when `threshold` data returns pile up and we have nothing to send, a
/// credit-only message carries them (control returns ride on every header but never trigger
/// a message of their own, so control messages cannot ping-pong).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credits {
    /// Data messages we may still send.
    pub data: u32,
    /// Credit-only messages we may still send.
    pub ctl: u32,
    /// Data buffers of the peer's messages we reposted and not yet reported.
    pub to_return: u32,
    /// Control buffers likewise.
    pub ctl_to_return: u32,
    threshold: u32,
    /// Most data credits the peer may lend us: `data` never exceeds it.
    data_max: u32,
    /// Control buffers the peer posted for us: `ctl` never exceeds it.
    ctl_max: u32,
    /// Data and control messages the peer may still send us: what it started with plus the
    /// returns we sent it, less what arrived ([`Credits::on_arrival`]).
    peer_data: u32,
    peer_ctl: u32,
    /// Data and control credits granted the peer in all (for the error).
    granted: [u64; 2],
}

/// A peer returned credits it never lent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreditError {
    #[error(
        "the peer returned {returned} {kind} credits while we held {held}: {} beyond the {limit} it may lend",
        (*held as u64 + *returned as u64).saturating_sub(*limit as u64)
    )]
    TooMany {
        /// "data" or "control".
        kind: &'static str,
        returned: u32,
        held: u32,
        limit: u32,
    },
    /// The peer sent a message into a receive buffer it held no credit for (with a shared
    /// receive queue, a buffer another peer counts on).
    #[error("the peer sent a {kind} message beyond the {granted} {kind} credits we granted it")]
    Overrun {
        kind: &'static str,
        /// Credits granted in all (initial and returned).
        granted: u64,
    },
}

impl Credits {
    /// For a peer that posted `depth` buffers, `ctl_reserve` of them for control messages.
    pub fn new(depth: u32, ctl_reserve: u32) -> Credits {
        Credits {
            data: depth - ctl_reserve,
            ctl: ctl_reserve,
            to_return: 0,
            ctl_to_return: 0,
            threshold: ((depth - ctl_reserve) / 2).max(1),
            data_max: depth - ctl_reserve,
            ctl_max: ctl_reserve,
            peer_data: depth - ctl_reserve,
            peer_ctl: ctl_reserve,
            granted: [(depth - ctl_reserve) as u64, ctl_reserve as u64],
        }
    }

    /// The peer lends up to `data_max` data credits (its shared receive queue's credit pool
    /// grants a sending peer more than its base): returns up to that many are accepted.
    pub fn lending_up_to(mut self, data_max: u32) -> Credits {
        self.data_max = self.data_max.max(data_max);
        self
    }

    /// The returns to write into the next header (and forget).
    pub fn take_returns(&mut self) -> (u16, u8) {
        let d = self.to_return.min(u16::MAX as u32);
        let c = self.ctl_to_return.min(u8::MAX as u32);
        self.to_return -= d;
        self.ctl_to_return -= c;
        self.peer_data = self.peer_data.saturating_add(d);
        self.peer_ctl = self.peer_ctl.saturating_add(c);
        self.granted[0] += d as u64;
        self.granted[1] += c as u64;
        (d as u16, c as u8)
    }

    /// A message of the peer arrived (`ctl`: a credit-only message, in a control buffer):
    /// refused when the peer had no credit left for it.
    pub fn on_arrival(&mut self, ctl: bool) -> Result<(), CreditError> {
        let (left, kind, granted) = if ctl {
            (&mut self.peer_ctl, "control", self.granted[1])
        } else {
            (&mut self.peer_data, "data", self.granted[0])
        };
        *left = left
            .checked_sub(1)
            .ok_or(CreditError::Overrun { kind, granted })?;
        Ok(())
    }

    /// A header arrived with these returns: added, or (nothing added) the error when they
    /// would give us more credits than the peer may lend.
    pub fn on_returns(&mut self, data: u16, ctl: u8) -> Result<(), CreditError> {
        let check = |kind, held: u32, returned: u32, limit: u32| {
            if held as u64 + returned as u64 > limit as u64 {
                Err(CreditError::TooMany {
                    kind,
                    returned,
                    held,
                    limit,
                })
            } else {
                Ok(())
            }
        };
        check("data", self.data, data.into(), self.data_max)?;
        check("control", self.ctl, ctl.into(), self.ctl_max)?;
        self.data += data as u32;
        self.ctl += ctl as u32;
        Ok(())
    }

    /// We reposted the buffer one of the peer's messages used.
    pub fn reposted(&mut self, ctl: bool) {
        if ctl {
            self.ctl_to_return += 1;
        } else {
            self.to_return += 1;
        }
    }

    /// How many of the peer's data buffers we hold before posting them again, as one chain:
    /// a quarter of what the peer may lend (1 to 16). Never a deadlock: buffers held (fewer than
    /// this) plus returns not yet due (fewer than `threshold`, half of it) stay below what
    /// the peer may lend, so a peer out of credits has left us enough returns for a
    /// credit-only message.
    pub fn repost_batch(&self) -> usize {
        (self.data_max / 4).clamp(1, 16) as usize
    }

    /// Whether a credit-only message is due (and allowed) when nothing else will carry returns.
    pub fn credit_message_due(&self) -> bool {
        self.to_return >= self.threshold && self.ctl > 0
    }
}

/// In-order delivery: messages are numbered by the sender; an eager message is complete on
/// arrival, a rendezvous message when its data has been read. Messages come out in sequence
/// order, each exactly once, whatever order they complete in.
///
/// Sequence numbers are `u32`s that wrap (2^32 - 1 is followed by 0): they are compared only
/// modulo 2^32, as distances from the next one to deliver (serial-number arithmetic, RFC 1982),
/// never ordered as plain integers. The messages held are a run of consecutive numbers far
/// shorter than 2^31 (credits bound it), so a distance names one message.
#[derive(Debug)]
pub struct Reorder<T> {
    /// The sequence number of `slots[0]`: the next message to deliver.
    next: u32,
    /// Messages `next`, `next + 1`, ... (mod 2^32) that arrived and are held: complete
    /// (`Some`) or waiting for their data.
    slots: VecDeque<Option<T>>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            next: 0,
            slots: VecDeque::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError {
    #[error("sequence {got} arrived twice or out of order (next expected {next})")]
    Duplicate { got: u32, next: u32 },
    #[error("sequence {0} completed but never arrived incomplete")]
    Unknown(u32),
}

impl<T> Reorder<T> {
    /// Expecting message `first` next (an endpoint's counters start at
    /// [`super::TransportConfig::seq_start`]; tests start them just below the wrap).
    pub fn starting_at(first: u32) -> Self {
        Reorder {
            next: first,
            slots: VecDeque::new(),
        }
    }

    /// Message `seq` arrived: complete (`Some`) or waiting for its data (`None`).
    /// Arrivals must come in sequence order (one RC queue pair keeps it).
    pub fn arrive(&mut self, seq: u32, item: Option<T>) -> Result<(), ReorderError> {
        let expect = self.next_arrival();
        if seq != expect {
            return Err(ReorderError::Duplicate {
                got: seq,
                next: expect,
            });
        }
        self.slots.push_back(item);
        Ok(())
    }

    /// The sequence number the next message to arrive must carry.
    pub fn next_arrival(&self) -> u32 {
        // Held messages are fewer than 2^32: the cast keeps the distance.
        self.next.wrapping_add(self.slots.len() as u32)
    }

    /// Fast path: delivers complete message `seq` at once, without holding it, when nothing is
    /// held and it is next. Returns false when it must go through [`Reorder::arrive`] instead.
    pub fn pass(&mut self, seq: u32) -> bool {
        if self.slots.is_empty() && seq == self.next {
            self.next = self.next.wrapping_add(1);
            true
        } else {
            false
        }
    }

    /// The data of waiting message `seq` is complete.
    pub fn complete(&mut self, seq: u32, item: T) -> Result<(), ReorderError> {
        // Its distance from the next to deliver, modulo 2^32: one before `next` is 2^32 - 1,
        // past every held one.
        let at = seq.wrapping_sub(self.next) as usize;
        match self.slots.get_mut(at) {
            Some(s @ None) => {
                *s = Some(item);
                Ok(())
            }
            _ => Err(ReorderError::Unknown(seq)),
        }
    }

    /// The next message in order, if it is complete.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.slots.front_mut()?.take()?;
        self.slots.pop_front();
        self.next = self.next.wrapping_add(1);
        Some(item)
    }

    /// Messages held back (waiting, or complete behind a waiting one).
    pub fn held(&self) -> usize {
        self.slots.len()
    }
}

/// A train's assembly buffer kept for the next train up to this capacity (larger ones are
/// freed: an endpoint does not keep a megabyte per peer for one large message). A 64 KiB
/// train, the default limit, grows its buffer by doubling to just under 128 KiB.
const KEEP_TRAIN_BUFFER: usize = 256 << 10;

/// Reassembly of the trains arriving on one endpoint (see [`super::wire`]): the pieces of a
/// message above the eager limit, `FRAG`s then a last `EAGER`, with the message's tag and
/// sequence, back to back on the queue pair. Feed it every `FRAG` and every `EAGER` in
/// arrival order; it never holds more than its limit ([`MAX_TRAIN`] bytes, or less:
/// [`TrainAssembly::set_limit`]), and refuses a `FRAG` without bytes (a sender never cuts one).
#[derive(Debug)]
pub struct TrainAssembly {
    /// The train being assembled: sequence, tag, bytes so far.
    open: Option<(u32, u8, Vec<u8>)>,
    /// An empty buffer kept from the last delivered train.
    spare: Vec<u8>,
    /// Largest message assembled.
    limit: usize,
}

impl Default for TrainAssembly {
    fn default() -> Self {
        TrainAssembly {
            open: None,
            spare: Vec::new(),
            limit: MAX_TRAIN,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrainError {
    #[error("a piece of message {got} arrived while message {open} was being assembled")]
    Interleaved { open: u32, got: u32 },
    #[error("a piece of message {seq} has tag {got}, its first piece had tag {first}")]
    TagChanged { seq: u32, first: u8, got: u8 },
    #[error("train {seq} grew to {len} bytes, past the largest this side assembles ({limit})")]
    TooLong { seq: u32, len: u64, limit: u64 },
    #[error("a piece of train {seq} carries no bytes")]
    EmptyPiece { seq: u32 },
}

impl TrainAssembly {
    /// Assembles messages of at most `limit` bytes (and never above [`MAX_TRAIN`]).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_TRAIN);
    }

    fn too_long(&self, seq: u32, len: usize) -> TrainError {
        TrainError::TooLong {
            seq,
            len: len as u64,
            limit: self.limit as u64,
        }
    }

    /// A `FRAG` of message `seq` arrived.
    pub fn fragment(&mut self, seq: u32, tag: u8, piece: &[u8]) -> Result<(), TrainError> {
        if piece.is_empty() {
            self.open = None;
            return Err(TrainError::EmptyPiece { seq });
        }
        let limit = self.limit;
        let (_, _, buf) = match &mut self.open {
            None => self
                .open
                .insert((seq, tag, std::mem::take(&mut self.spare))),
            Some(open) => {
                Self::same(open, seq, tag)?;
                open
            }
        };
        let len = buf.len() + piece.len();
        if len > limit {
            self.open = None;
            return Err(self.too_long(seq, len));
        }
        buf.extend_from_slice(piece);
        Ok(())
    }

    /// An `EAGER` of message `seq` arrived: the last piece of the open train, whose whole
    /// message this returns, or (no train open) a message of its own: `None`.
    pub fn finish(
        &mut self,
        seq: u32,
        tag: u8,
        piece: &[u8],
    ) -> Result<Option<Vec<u8>>, TrainError> {
        let Some(open) = &self.open else {
            return Ok(None);
        };
        Self::same(open, seq, tag)?;
        let (_, _, mut buf) = self.open.take().expect("checked");
        if buf.len() + piece.len() > self.limit {
            return Err(self.too_long(seq, buf.len() + piece.len()));
        }
        buf.extend_from_slice(piece);
        Ok(Some(buf))
    }

    /// A delivered message's buffer, for the next train (kept only if small enough).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= KEEP_TRAIN_BUFFER && buf.capacity() > self.spare.capacity() {
            buf.clear();
            self.spare = buf;
        }
    }

    /// Whether a train is being assembled (its pieces so far hold no receive buffer).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    fn same(open: &(u32, u8, Vec<u8>), seq: u32, tag: u8) -> Result<(), TrainError> {
        if open.0 != seq {
            return Err(TrainError::Interleaved {
                open: open.0,
                got: seq,
            });
        }
        if open.1 != tag {
            return Err(TrainError::TagChanged {
                seq,
                first: open.1,
                got: tag,
            });
        }
        Ok(())
    }
}

/// The (offset, length) pieces of a `len`-byte rendezvous read, each at most `fragment` bytes.
/// A zero-length message has no piece.
pub fn fragments(len: u64, fragment: u64) -> impl Iterator<Item = (u64, u64)> {
    let fragment = fragment.max(1);
    (0..len.div_ceil(fragment)).map(move |i| {
        let off = i * fragment;
        (off, fragment.min(len - off))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Buffers held for a batch plus returns not yet due never add up to what the peer may
    /// lend: a peer out of credits always leaves us a credit-only message due (every depth
    /// OPENIB_RECV_DEPTH allows, with the control reserve).
    #[test]
    fn held_buffers_and_undue_returns_stay_below_the_peers_credits() {
        for depth in 8..=256u32 {
            let c = Credits::new(depth, super::super::CTL_RESERVE);
            let data = depth - super::super::CTL_RESERVE;
            let held = c.repost_batch() as u32 - 1;
            let undue = c.threshold - 1;
            assert!(
                held + undue < data,
                "depth {depth}: {held} + {undue} >= {data}"
            );
            assert!((1..=16).contains(&c.repost_batch()), "depth {depth}");
        }
    }

    #[test]
    fn fragments_cover_exactly() {
        assert_eq!(fragments(0, 10).count(), 0);
        assert_eq!(fragments(10, 10).collect::<Vec<_>>(), vec![(0, 10)]);
        assert_eq!(
            fragments(25, 10).collect::<Vec<_>>(),
            vec![(0, 10), (10, 10), (20, 5)]
        );
    }

    proptest! {
        #[test]
        fn fragments_partition(len in 0u64..10_000_000, frag in 1u64..5_000_000) {
            let mut at = 0;
            for (off, l) in fragments(len, frag) {
                prop_assert_eq!(off, at);
                prop_assert!(l > 0 && l <= frag);
                at += l;
            }
            prop_assert_eq!(at, len);
        }
    }

    /// Sequence numbers wrap (issue 27): a rendezvous held across 2^32 - 1 -> 0 while eager
    /// messages arrive behind it, and another one held just after the wrap.
    #[test]
    fn reorder_holds_a_rendezvous_across_the_wrap() {
        let start = u32::MAX - 2;
        let mut r = Reorder::starting_at(start);
        assert!(r.pass(start));
        // u32::MAX - 1: a rendezvous, waiting for its data.
        r.arrive(u32::MAX - 1, None).unwrap();
        // u32::MAX, 0, 1: eager, held behind it.
        for seq in [u32::MAX, 0, 1] {
            assert!(!r.pass(seq));
            assert_eq!(r.next_arrival(), seq);
            r.arrive(seq, Some(seq)).unwrap();
        }
        // 2: another rendezvous; 3: eager.
        r.arrive(2, None).unwrap();
        r.arrive(3, Some(3)).unwrap();
        assert_eq!(r.next_arrival(), 4);
        assert_eq!(r.pop(), None);
        assert_eq!(r.held(), 6);
        // A duplicate (or an old number) and a skipped one are refused.
        assert_eq!(
            r.arrive(0, Some(0)),
            Err(ReorderError::Duplicate { got: 0, next: 4 })
        );
        assert_eq!(
            r.arrive(5, Some(5)),
            Err(ReorderError::Duplicate { got: 5, next: 4 })
        );
        // The later rendezvous completes first: nothing moves.
        r.complete(2, 2).unwrap();
        assert_eq!(r.pop(), None);
        assert_eq!(r.complete(2, 2), Err(ReorderError::Unknown(2)));
        assert_eq!(r.complete(0, 0), Err(ReorderError::Unknown(0)));
        r.complete(u32::MAX - 1, u32::MAX - 1).unwrap();
        let out: Vec<u32> = std::iter::from_fn(|| r.pop()).collect();
        assert_eq!(out, vec![u32::MAX - 1, u32::MAX, 0, 1, 2, 3]);
        assert_eq!(r.held(), 0);
        assert!(r.pass(4));
        assert_eq!(r.next_arrival(), 5);
    }

    proptest! {
        /// Whatever order rendezvous reads finish in, delivery follows the sequence, modulo
        /// 2^32: counters starting at 0 or anywhere in the last 64 numbers before the wrap.
        #[test]
        fn reorder_delivers_in_sequence_across_the_wrap(
            start in prop_oneof![Just(0u32), (u32::MAX - 63)..=u32::MAX],
            kinds in proptest::collection::vec(any::<bool>(), 0..130),
            order in any::<u64>()) {
            let mut r = Reorder::starting_at(start);
            let mut out = Vec::new();
            let mut waiting = Vec::new();
            let mut rng = fastrand::Rng::with_seed(order);
            for (i, eager) in kinds.iter().enumerate() {
                let seq = start.wrapping_add(i as u32);
                if *eager && r.pass(seq) {
                    out.push(seq);
                    continue;
                }
                prop_assert_eq!(r.next_arrival(), seq);
                r.arrive(seq, eager.then_some(seq)).unwrap();
                if !eager { waiting.push(seq); }
                // complete a random waiting one now and then
                if !waiting.is_empty() && rng.u8(..4) == 0 {
                    let i = rng.usize(..waiting.len());
                    let s = waiting.swap_remove(i);
                    r.complete(s, s).unwrap();
                }
                while let Some(x) = r.pop() { out.push(x); }
            }
            while let Some(s) = waiting.pop() {
                r.complete(s, s).unwrap();
                while let Some(x) = r.pop() { out.push(x); }
            }
            let want: Vec<u32> = (0..kinds.len() as u32).map(|i| start.wrapping_add(i)).collect();
            prop_assert_eq!(out, want);
            prop_assert_eq!(r.held(), 0);
        }
    }

    #[test]
    fn a_train_is_delivered_whole_with_its_last_piece() {
        let mut a = TrainAssembly::default();
        // A plain eager message: no train open.
        assert_eq!(a.finish(1, 5, b"solo"), Ok(None));
        a.fragment(2, 5, b"ab").unwrap();
        a.fragment(2, 5, b"cd").unwrap();
        assert!(a.is_open());
        let whole = a.finish(2, 5, b"e").unwrap().unwrap();
        assert_eq!(whole, b"abcde");
        assert!(!a.is_open());
        a.recycle(whole);
        assert_eq!(a.finish(3, 5, b"x"), Ok(None));
        // A 64 KiB train in default pieces: its buffer is kept for the next one.
        let piece = vec![7u8; super::super::wire::train_piece(8192)];
        for _ in 0..8 {
            a.fragment(9, 1, &piece).unwrap();
        }
        let whole = a.finish(9, 1, &[7u8; 96]).unwrap().unwrap();
        assert_eq!(whole.len(), 65_536);
        let kept = whole.as_ptr();
        a.recycle(whole);
        a.fragment(10, 1, b"next").unwrap();
        let next = a.finish(10, 1, b"!").unwrap().unwrap();
        assert_eq!(next.as_ptr(), kept);
        a.fragment(4, 9, b"x").unwrap();
        assert_eq!(a.finish(4, 9, b"y").unwrap().unwrap(), b"xy");
        // Across the sequence wrap: trains are matched by equality only.
        a.fragment(u32::MAX, 2, b"last").unwrap();
        assert_eq!(a.finish(u32::MAX, 2, b"!").unwrap().unwrap(), b"last!");
        a.fragment(0, 2, b"first").unwrap();
        assert_eq!(
            a.fragment(u32::MAX, 2, b"x"),
            Err(TrainError::Interleaved {
                open: 0,
                got: u32::MAX
            })
        );
    }

    #[test]
    fn malformed_trains_are_named() {
        let mut a = TrainAssembly::default();
        a.fragment(7, 1, b"a").unwrap();
        assert_eq!(
            a.fragment(8, 1, b"b"),
            Err(TrainError::Interleaved { open: 7, got: 8 })
        );
        assert_eq!(
            a.finish(6, 1, b"b"),
            Err(TrainError::Interleaved { open: 7, got: 6 })
        );
        assert_eq!(
            a.finish(7, 2, b"b"),
            Err(TrainError::TagChanged {
                seq: 7,
                first: 1,
                got: 2
            })
        );
        let mut a = TrainAssembly::default();
        let big = vec![0u8; MAX_TRAIN / 2];
        a.fragment(1, 1, &big).unwrap();
        a.fragment(1, 1, &big).unwrap();
        let too_long = |seq| TrainError::TooLong {
            seq,
            len: MAX_TRAIN as u64 + 1,
            limit: MAX_TRAIN as u64,
        };
        assert_eq!(a.fragment(1, 1, b"z"), Err(too_long(1)));
        a.fragment(2, 1, &big).unwrap();
        a.fragment(2, 1, &big).unwrap();
        assert_eq!(a.finish(2, 1, b"z"), Err(too_long(2)));
    }

    proptest! {
        /// Pieces of any sizes come out as the one message they were cut from.
        #[test]
        fn trains_reassemble(msgs in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..3000), 1usize..700), 1..12)) {
            let mut a = TrainAssembly::default();
            for (seq, (msg, piece)) in msgs.iter().enumerate() {
                let seq = seq as u32;
                let chunks: Vec<&[u8]> = msg.chunks(*piece).collect();
                let Some((last, first)) = chunks.split_last() else {
                    prop_assert_eq!(a.finish(seq, 3, &[]).unwrap(), None);
                    continue;
                };
                for c in first {
                    a.fragment(seq, 3, c).unwrap();
                }
                match a.finish(seq, 3, last).unwrap() {
                    Some(whole) => {
                        prop_assert!(!first.is_empty());
                        prop_assert_eq!(&whole, msg);
                        a.recycle(whole);
                    }
                    None => {
                        prop_assert!(first.is_empty());
                    }
                }
            }
        }
    }

    /// Regression (issue 27): returns were added unchecked, so a peer could hand us credits
    /// it never lent (overrunning its own buffers) or overflow the counter (a panic).
    #[test]
    fn credit_returns_beyond_what_the_peer_lends_are_refused() {
        let mut c = Credits::new(8, 2);
        assert_eq!(
            c.on_returns(1, 0),
            Err(CreditError::TooMany {
                kind: "data",
                returned: 1,
                held: 6,
                limit: 6
            })
        );
        assert_eq!(
            c.on_returns(0, 1).unwrap_err().to_string(),
            "the peer returned 1 control credits while we held 2: 1 beyond the 2 it may lend"
        );
        assert_eq!((c.data, c.ctl), (6, 2), "a refused return adds nothing");
        c.data -= 3;
        c.ctl -= 1;
        c.on_returns(3, 1).unwrap();
        // Whatever a hostile peer repeats, nothing overflows and nothing is added.
        for _ in 0..70_000 {
            assert!(c.on_returns(u16::MAX, u8::MAX).is_err());
        }
        assert_eq!((c.data, c.ctl), (6, 2));
        // A peer with a shared receive queue lends more than its base.
        let mut c = Credits::new(8, 2).lending_up_to(20);
        c.on_returns(14, 0).unwrap();
        assert!(c.on_returns(1, 0).is_err());
    }

    /// Regression (issue 27): a peer could send beyond the credits it was granted, filling
    /// receive buffers (with a shared receive queue, other peers' buffers) unnoticed.
    #[test]
    fn messages_beyond_the_granted_credits_are_refused() {
        let mut c = Credits::new(4, 2);
        c.on_arrival(false).unwrap();
        c.on_arrival(false).unwrap();
        assert_eq!(
            c.on_arrival(false),
            Err(CreditError::Overrun {
                kind: "data",
                granted: 2
            })
        );
        c.reposted(false);
        c.take_returns();
        c.on_arrival(false).unwrap();
        assert!(c.on_arrival(false).is_err());
        c.on_arrival(true).unwrap();
        c.on_arrival(true).unwrap();
        assert_eq!(
            c.on_arrival(true).unwrap_err().to_string(),
            "the peer sent a control message beyond the 2 control credits we granted it"
        );
    }

    /// Regression (issue 27): an empty piece kept a train open for nothing, and a train was
    /// assembled up to 1 MiB whatever this side allows.
    #[test]
    fn trains_longer_than_the_limit_or_with_empty_pieces_are_refused() {
        let mut a = TrainAssembly::default();
        assert_eq!(
            a.fragment(3, 1, b""),
            Err(TrainError::EmptyPiece { seq: 3 })
        );
        assert!(!a.is_open());
        a.set_limit(10);
        a.fragment(4, 1, b"12345").unwrap();
        assert_eq!(
            a.fragment(4, 1, b"678901"),
            Err(TrainError::TooLong {
                seq: 4,
                len: 11,
                limit: 10
            })
        );
        a.fragment(5, 1, b"12345").unwrap();
        assert_eq!(a.finish(5, 1, b"67890").unwrap().unwrap(), b"1234567890");
        a.fragment(6, 1, b"12345").unwrap();
        assert!(matches!(
            a.finish(6, 1, b"678901"),
            Err(TrainError::TooLong { len: 11, .. })
        ));
        a.set_limit(usize::MAX);
        assert_eq!(a.limit, MAX_TRAIN);
    }

    #[test]
    fn reorder_rejects_duplicates_and_unknowns() {
        let mut r: Reorder<u8> = Reorder::default();
        r.arrive(0, None).unwrap();
        assert!(r.arrive(0, Some(1)).is_err());
        assert!(r.arrive(2, Some(1)).is_err());
        assert_eq!(r.complete(5, 1), Err(ReorderError::Unknown(5)));
        r.complete(0, 9).unwrap();
        assert_eq!(r.complete(0, 9), Err(ReorderError::Unknown(0)));
        assert_eq!(r.pop(), Some(9));
        assert_eq!(r.pop(), None);
    }

    /// One direction of a simulated endpoint pair: the receiver's posted buffers, the wire.
    struct Side {
        credits: Credits,
        posted_data: i64,
        posted_ctl: i64,
        /// Messages the user wants to send.
        backlog: u32,
        delivered: u32,
    }

    #[derive(Clone, Copy, Debug)]
    struct Msg {
        ctl: bool,
        ret: (u16, u8),
    }

    /// Two endpoints exchange random amounts of traffic with random delays and a receiver that
    /// reposts late: buffers are never overrun and everything is delivered (no credit deadlock).
    fn simulate(depth: u32, reserve: u32, a_msgs: u32, b_msgs: u32, seed: u64) {
        let mut sides = [
            Side {
                credits: Credits::new(depth, reserve),
                posted_data: (depth - reserve) as i64,
                posted_ctl: reserve as i64,
                backlog: a_msgs,
                delivered: 0,
            },
            Side {
                credits: Credits::new(depth, reserve),
                posted_data: (depth - reserve) as i64,
                posted_ctl: reserve as i64,
                backlog: b_msgs,
                delivered: 0,
            },
        ];
        // wire[i]: messages in flight towards side i; unreposted[i]: buffers i consumed.
        let mut wire: [VecDeque<Msg>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut unreposted: [Vec<bool>; 2] = [Vec::new(), Vec::new()];
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut next = || rng.u64(..);
        for _step in 0..200_000 {
            let done = sides.iter().all(|s| s.backlog == 0)
                && wire.iter().all(|w| w.is_empty())
                && unreposted.iter().all(|u| u.is_empty());
            if done {
                break;
            }
            let i = (next() % 2) as usize;
            let j = 1 - i;
            match next() % 4 {
                // i sends a data message if allowed
                0 if sides[i].backlog > 0 && sides[i].credits.data > 0 => {
                    sides[i].credits.data -= 1;
                    sides[i].backlog -= 1;
                    let ret = sides[i].credits.take_returns();
                    wire[j].push_back(Msg { ctl: false, ret });
                }
                // deliver one message to i
                1 if !wire[i].is_empty() => {
                    let m = wire[i].pop_front().unwrap();
                    sides[i]
                        .credits
                        .on_arrival(m.ctl)
                        .expect("an honest peer sends within its credits");
                    if m.ctl {
                        sides[i].posted_ctl -= 1;
                        assert!(sides[i].posted_ctl >= 0, "control buffers overrun");
                    } else {
                        sides[i].posted_data -= 1;
                        assert!(sides[i].posted_data >= 0, "data buffers overrun");
                        sides[i].delivered += 1;
                    }
                    sides[i]
                        .credits
                        .on_returns(m.ret.0, m.ret.1)
                        .expect("an honest peer's returns are accepted");
                    if m.ctl {
                        // The transport reposts a control buffer as soon as it is handled.
                        sides[i].posted_ctl += 1;
                        sides[i].credits.reposted(true);
                    } else {
                        unreposted[i].push(false);
                    }
                }
                // i reposts a consumed buffer (late, in random order)
                2 if !unreposted[i].is_empty() => {
                    let k = (next() as usize) % unreposted[i].len();
                    let ctl = unreposted[i].swap_remove(k);
                    if ctl {
                        sides[i].posted_ctl += 1;
                    } else {
                        sides[i].posted_data += 1;
                    }
                    sides[i].credits.reposted(ctl);
                }
                // idle: i returns credits if due and it has nothing to send that would carry them
                _ => {
                    let s = &mut sides[i];
                    let carrier = s.backlog > 0 && s.credits.data > 0;
                    if !carrier && s.credits.credit_message_due() {
                        s.credits.ctl -= 1;
                        let ret = s.credits.take_returns();
                        wire[j].push_back(Msg { ctl: true, ret });
                    }
                }
            }
        }
        assert_eq!(sides[1].delivered, a_msgs, "a -> b stalled");
        assert_eq!(sides[0].delivered, b_msgs, "b -> a stalled");
    }

    #[test]
    fn credits_never_overrun_and_never_deadlock_one_way() {
        for seed in 1..40 {
            simulate(8, 2, 500, 0, seed);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn credits_never_overrun_and_never_deadlock(depth in 4u32..40, a in 0u32..400,
                                                    b in 0u32..400, seed in any::<u64>()) {
            simulate(depth, 2, a, b, seed);
        }
    }
}
