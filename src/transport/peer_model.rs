//! A verbs-free endpoint for tests and the fuzz oracle (`wire-oracle` feature): it applies
//! [`receive`]'s steps as the transport does, so arbitrary peer messages can drive the whole
//! receive path without a device. Not in a default build.

use super::flow::{fragments, Credits, Reorder, TrainAssembly};
use super::peer::*;
use super::wire::MAX_TRAIN;
use std::collections::BTreeMap;

/// A verbs-free endpoint that applies [`receive`]'s steps as the transport does (reads and
/// writes complete when [`Model::progress`] says so), for driving the receive path with
/// arbitrary messages. Records the largest buffer it would allocate.
#[derive(Debug)]
pub struct Model {
    pub limits: PeerLimits,
    pub credits: Credits,
    reorder: Reorder<usize>,
    trains: TrainAssembly,
    /// Our rendezvous sends: length, CTS region length, FIN seen.
    sending: BTreeMap<u32, (u64, Option<u64>, bool)>,
    /// Their rendezvous: length, head, CTS sent, written, read done.
    receiving: BTreeMap<u32, (u64, u64, bool, bool, bool)>,
    next_seq: u32,
    /// The write share of a rendezvous taken (percent; 0: read, 100: write).
    write_percent: u8,
    /// Why the endpoint failed, once it did.
    pub failed: Option<PeerError>,
    /// Messages delivered, and the largest buffer allocated for one.
    pub delivered: u64,
    pub largest_alloc: u64,
}

impl RecvBook for Model {
    fn credits(&mut self) -> &mut Credits {
        &mut self.credits
    }
    fn next_arrival(&self) -> u32 {
        self.reorder.next_arrival()
    }
    fn sending(&self, seq: u32) -> Option<Sending> {
        self.sending.get(&seq).map(|&(len, cts, fin_seen)| Sending {
            len,
            cts: cts.is_some(),
            fin_seen,
            fin_due: cts.is_none_or(|h| h < len),
        })
    }
    fn receiving(&self, seq: u32) -> Option<Receiving> {
        self.receiving
            .get(&seq)
            .map(|&(_, head, cts_sent, written, _)| Receiving {
                head,
                cts_sent,
                written,
            })
    }
}

impl Model {
    /// An endpoint whose peer posted `depth` buffers (2 for control) and which takes a
    /// rendezvous by writing `write_percent` of it.
    pub fn new(limits: PeerLimits, depth: u32, write_percent: u8) -> Model {
        let mut trains = TrainAssembly::default();
        trains.set_limit(limits.max_msg.min(MAX_TRAIN as u64) as usize);
        Model {
            limits,
            credits: Credits::new(depth.max(3), 2),
            reorder: Reorder::default(),
            trains,
            sending: BTreeMap::new(),
            receiving: BTreeMap::new(),
            next_seq: 0,
            write_percent: write_percent.min(100),
            failed: None,
            delivered: 0,
            largest_alloc: 0,
        }
    }

    fn alloc(&mut self, n: u64) {
        assert!(
            n <= self.limits.max_msg.max(MAX_TRAIN as u64),
            "allocation of {n} bytes passed the limits"
        );
        self.largest_alloc = self.largest_alloc.max(n);
    }

    /// A message from the peer (see [`receive`]); a failed endpoint ignores it.
    pub fn on_message(&mut self, b: &[u8], imm: Option<u32>) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.apply(b, imm) {
            self.failed = Some(e);
        }
    }

    fn apply(&mut self, b: &[u8], imm: Option<u32>) -> Result<(), PeerError> {
        let limits = self.limits;
        let step = receive(self, &limits, b, imm)?;
        match step {
            Step::Credit => self.credits.reposted(true),
            Step::Fin { seq } => {
                let s = self.sending.get_mut(&seq).expect("checked");
                s.2 = true;
                self.finish_send(seq);
            }
            Step::Cts { seq, region } => {
                // Our writes, fragment by fragment, stay within the region.
                for (off, len) in fragments(region.len, 4096) {
                    assert!(off + len <= region.len);
                    assert!(region.addr.checked_add(off + len).is_some());
                }
                self.sending.get_mut(&seq).expect("checked").1 = Some(region.len);
                self.finish_send(seq);
            }
            Step::Written { seq } => {
                self.receiving.get_mut(&seq).expect("checked").3 = true;
                self.complete_recv(seq)?;
            }
            Step::Frag { seq, tag, piece } => {
                self.trains.fragment(seq, tag, piece)?;
                self.credits.reposted(false);
            }
            Step::Eager { seq, tag, data } => {
                let data = match self.trains.finish(seq, tag, data)? {
                    Some(whole) => whole.len(),
                    None => data.len(),
                };
                self.alloc(data as u64);
                if self.reorder.pass(seq) {
                    self.delivered += 1;
                } else {
                    self.reorder.arrive(seq, Some(data))?;
                }
                self.credits.reposted(false);
            }
            Step::Rts { seq, rts, .. } => {
                self.reorder.arrive(seq, None)?;
                let head = (rts.len as u128 * self.write_percent as u128 / 100) as u64;
                self.receiving
                    .insert(seq, (rts.len, head, false, false, head == rts.len));
                self.credits.reposted(false);
            }
        }
        self.deliver();
        Ok(())
    }

    fn finish_send(&mut self, seq: u32) {
        let s = self.sending[&seq];
        // Writes complete at once here.
        if s.1.is_none_or(|h| h < s.0) && !s.2 {
            return;
        }
        self.sending.remove(&seq);
    }

    fn complete_recv(&mut self, seq: u32) -> Result<(), PeerError> {
        let (len, head, _, written, read) = self.receiving[&seq];
        if read && (head == 0 || written) {
            self.receiving.remove(&seq);
            self.reorder.complete(seq, len as usize)?;
        }
        Ok(())
    }

    fn deliver(&mut self) {
        while self.reorder.pop().is_some() {
            self.delivered += 1;
        }
    }

    /// We send a rendezvous of `len` bytes (if a credit allows).
    pub fn send_rndv(&mut self, len: u64) {
        if self.failed.is_none() && self.credits.data > 0 && len > 0 {
            self.credits.data -= 1;
            self.sending.insert(self.next_seq, (len, None, false));
            self.next_seq = self.next_seq.wrapping_add(1);
        }
    }

    /// We send an eager message (if a credit allows); its header carries our returns.
    pub fn send_eager(&mut self) {
        if self.failed.is_none() && self.credits.data > 0 {
            self.credits.data -= 1;
            self.credits.take_returns();
            self.next_seq = self.next_seq.wrapping_add(1);
        }
    }

    /// Our side moves: the oldest rendezvous to us gets its buffer (the allocation the length
    /// sizes), its CTS and its reads done.
    pub fn progress(&mut self) {
        if self.failed.is_some() {
            return;
        }
        // Returns go back in a credit-only message when due, as the transport's drain sends.
        if self.credits.credit_message_due() {
            self.credits.ctl -= 1;
            self.credits.take_returns();
        }
        let Some((&seq, &(len, head, cts_sent, ..))) =
            self.receiving.iter().find(|(_, r)| !r.2 || !r.4)
        else {
            return;
        };
        if !cts_sent {
            self.alloc(len);
        }
        let r = self.receiving.get_mut(&seq).expect("found");
        r.2 = r.2 || head > 0;
        r.4 = true;
        if let Err(e) = self.complete_recv(seq) {
            self.failed = Some(e);
        }
        self.deliver();
    }
}
