//! Progress and waiting: a progress call polls the completion queues and dispatches what it
//! finds; `flush` and the waiting loops ([`IdleBackoff`], [`Sleeper`]) decide when to spin,
//! yield or sleep; completions wait until the caller takes them ([`BacklogWarning`]).

use super::endpoint::{
    release_outgoing, unwr, Endpoint, EndpointState, Posted, Ready, ANY_PEER, KIND_RECV, KIND_SQ,
    KIND_SRQ,
};
use super::error::{Completion, FailureCause, TransportError};
use super::Transport;
use openib_sys::clock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often `progress` polls the connection services and the failure detector when no
/// connection is being made (incoming connection requests are answered within this, or
/// within [`MAX_NAP`] by a process asleep in a waiting loop).
pub(super) const SERVICE_POLL: Duration = Duration::from_millis(2);

/// Untaken completions at which [`BacklogWarning`] first warns (then at each doubling).
const UNTAKEN_COMPLETIONS_WARNING: usize = 1 << 20;

/// Logs a warning when completions pile up untaken: every send, put, get and atomic reports
/// one, and a caller that never takes them grows memory without bound (and the growing queue
/// touches a new page every few dozen operations, a page fault in the hot path). Warns at
/// [`UNTAKEN_COMPLETIONS_WARNING`] completions, then each time the count doubles.
#[derive(Debug)]
pub struct BacklogWarning {
    pub(super) next: usize,
}

impl Default for BacklogWarning {
    fn default() -> Self {
        BacklogWarning {
            next: UNTAKEN_COMPLETIONS_WARNING,
        }
    }
}

impl BacklogWarning {
    /// Call with the number of completions waiting to be taken.
    #[inline]
    pub fn check(&mut self, untaken: usize) {
        if untaken >= self.next {
            self.warn(untaken);
        }
    }

    #[cold]
    pub(super) fn warn(&mut self, untaken: usize) {
        tracing::warn!(
            untaken,
            bytes = untaken * std::mem::size_of::<Completion>(),
            "completions are piling up untaken: every send, put, get and atomic reports one; \
             take them (take_completions or drain_completions; C: openib_poll_completion)"
        );
        self.next = untaken.saturating_mul(2);
    }

    /// The count at which the next warning is due.
    pub fn next_warning_at(&self) -> usize {
        self.next
    }
}

/// Every this many progress calls the send queues' completions are polled whatever else holds;
/// in between, only by a call that found no receives while send requests are in flight.
const SEND_POLL_EVERY: u32 = 4;

/// The longest sleep of a waiting loop: its first sleep lasts at most [`SERVICE_POLL`], and
/// each one in a row that woke to nothing twice as long, up to this.
const MAX_NAP: Duration = Duration::from_millis(16);

/// The waiting policy of loops that progress until something happens
/// ([`Transport::progress_idle`]): spin while there is work and for
/// [`TransportConfig::yield_after`] of idle polls (timed by the tick counter, so the policy
/// does not depend on how fast a machine polls); then yield the CPU between polls; after
/// [`TransportConfig::wait_polls`] idle polls, sleep on the port's completion channel until
/// a completion arrives (at most 2 ms, so connection services and failure notices are still
/// polled; each further sleep that woke to nothing lasts twice as long, up to 16 ms, so a
/// long-idle process wakes rarely). A long wait otherwise takes the CPU that other processes
/// and software devices such as rxe need.
#[derive(Debug, Default)]
pub struct IdleBackoff {
    pub(super) idle: u32,
    /// The tick of the first idle poll of the current idle stretch.
    idle_since: u64,
    /// Sleeps in a row that woke to nothing.
    naps: u32,
}

impl IdleBackoff {
    /// Counts an idle poll (or resets on work); the idle polls in a row. The first idle poll
    /// of a stretch reads the tick counter.
    pub(super) fn count(&mut self, handled: usize) -> u32 {
        if handled == 0 {
            if self.idle == 0 {
                self.idle_since = clock::ticks();
            }
            self.idle = self.idle.saturating_add(1);
        } else {
            self.idle = 0;
            self.naps = 0;
        }
        self.idle
    }

    /// Whether an idle loop has spun for `spin_ticks` or more by the tick `now` (0: from its
    /// first idle poll).
    fn should_yield(&self, spin_ticks: u64, now: u64) -> bool {
        self.idle > 0 && (spin_ticks == 0 || now.saturating_sub(self.idle_since) >= spin_ticks)
    }

    /// The limit of the next sleep (call once per sleep): [`SERVICE_POLL`] after work, then
    /// doubling while sleeps wake to nothing, up to [`MAX_NAP`].
    pub(super) fn nap(&mut self) -> Duration {
        let d = SERVICE_POLL
            .saturating_mul(1 << self.naps.min(8))
            .min(MAX_NAP);
        self.naps = self.naps.saturating_add(1);
        d
    }

    /// Whether a loop idle this long should sleep rather than poll (`wait_polls` 0: never).
    pub(super) fn should_sleep(&self, wait_polls: u32) -> bool {
        wait_polls > 0 && self.idle >= wait_polls
    }
}

/// A sleep on the port's completion channel, armed by [`Transport::arm_sleep`]. Sleeping
/// needs no access to the transport, so a shared transport's lock is released meanwhile.
pub struct Sleeper(openib_sys::CompletionChannel);

impl Sleeper {
    /// Sleeps until a completion arrives or `max` passes (signals end it early too).
    pub fn sleep(&self, max: Duration) -> Result<(), TransportError> {
        self.0.wait_timeout(Some(max))?;
        Ok(())
    }
}

impl Transport {
    /// Progresses until nothing is queued or in flight on any live endpoint (every send read
    /// by its peer, every put, get and atomic complete), or `timeout`.
    /// Not from inside a receive callback ([`TransportError::InCallback`]).
    pub fn flush(&mut self, timeout: Duration) -> Result<Vec<Completion>, TransportError> {
        self.flush_until(timeout, "flush", true)
    }

    /// Like [`Transport::flush`], but the immediate sends after an endpoint's last request
    /// that reports a completion (its open tail of unsignaled messages, see
    /// [`Transport::sendi`]) are not waited for: every operation that reports a completion is
    /// complete, and every queued one posted, but those last messages may still be on their
    /// way. For the removal of peers that are leaving too (MPI_Finalize's `del_procs`): to learn
    /// that the tail arrived, `flush` posts a request the peer must acknowledge, and a peer
    /// that already removed its queue pair never does (the request is retried
    /// `OPENIB_RETRY_COUNT` times, each after `OPENIB_ACK_TIMEOUT`).
    pub fn quiesce(&mut self, timeout: Duration) -> Result<Vec<Completion>, TransportError> {
        self.flush_until(timeout, "quiesce", false)
    }

    fn flush_until(
        &mut self,
        timeout: Duration,
        call: &'static str,
        whole: bool,
    ) -> Result<Vec<Completion>, TransportError> {
        if self.callback_depth > 0 {
            return Err(TransportError::InCallback { call });
        }
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut backoff = IdleBackoff::default();
        let mut rounds = 0u32;
        loop {
            // A callback may send during the flush: its tail is closed within 64 rounds.
            if whole && rounds % 64 == 0 {
                self.close_tails();
            }
            self.progress_idle(&mut backoff)?;
            rounds = rounds.wrapping_add(1);
            out.append(&mut self.done);
            let live_busy = |e: &Endpoint| {
                !matches!(e.state, EndpointState::Failed(_))
                    && if whole { e.busy() } else { e.busy_but_tail() }
            };
            if !self.eps.values().any(live_busy) {
                return Ok(out);
            }
            // The clock only now and then (a system call in TCG guests).
            if rounds % 64 == 0 && Instant::now() > deadline {
                let busy: Vec<u32> = self
                    .eps
                    .iter()
                    .filter(|(_, e)| live_busy(e))
                    .map(|(p, _)| p)
                    .collect();
                return Err(TransportError::Timeout {
                    what: format!("{call} (busy endpoints: {busy:?})"),
                    timeout,
                });
            }
        }
    }

    /// Takes the completions gathered so far.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.done)
    }

    /// Takes the completions gathered so far, oldest first, without allocating: the queue
    /// keeps its memory for the next ones (call this once per round of a hot loop). Those the
    /// iterator does not reach are dropped with it.
    pub fn drain_completions(&mut self) -> std::vec::Drain<'_, Completion> {
        self.done.drain(..)
    }

    /// Whether completions wait to be taken (a poll loop skips the taking when none do).
    pub fn has_completions(&self) -> bool {
        !self.done.is_empty()
    }

    /// Gives back completions taken by [`Transport::take_completions`] that belong to someone
    /// else (for callers that share the transport between threads).
    pub fn requeue_completions(&mut self, mut c: Vec<Completion>) {
        self.done.append(&mut c);
    }

    /// Makes progress: connections, completions, receive callbacks, queued operations and
    /// credit returns. Returns how many work completions it handled.
    ///
    /// A receive callback that panics does not cut the batch short: its panic is caught, the
    /// rest of the batch is handled (messages delivered, receive buffers reposted, completions
    /// recorded), and then the first such panic is re-raised from here. The transport stays
    /// consistent and usable; the message whose callback panicked counts as delivered.
    ///
    /// From inside a receive callback (a [`super::TransportHandler`] calling back) it returns
    /// `Ok(0)` at once: the progress call running that callback goes on when it returns.
    #[inline]
    pub fn progress(&mut self) -> Result<usize, TransportError> {
        if self.callback_depth > 0 {
            return Ok(0);
        }
        // The idle round inline in the caller; the rest out of line, so that the idle round
        // saves no registers for it (every idle round of every waiting loop is this path).
        let prepolled = match self.poll_if_idle()? {
            Some(0) => return Ok(0),
            Some(_) => true,
            None => false,
        };
        self.progress_work(prepolled)
    }

    /// [`Transport::progress`] past the idle round: a batch, with panics of callbacks
    /// re-raised after it.
    #[inline(never)]
    fn progress_work(&mut self, prepolled: bool) -> Result<usize, TransportError> {
        self.in_batch = true;
        let r = self.progress_batch(prepolled);
        self.in_batch = false;
        self.handlers.raise();
        r
    }

    /// The idle round of a waiting loop, as short as it can be: when nothing is deferred (no
    /// receive buffers to repost, no connection being made, no services due, no rendezvous
    /// reads waiting, no SRQ grants retiring) and the port has one CQ, polls it into `wcs`
    /// and returns how many it took (0: the call is over); `None` when a full round is due
    /// (nothing polled). In the TCG guest an instruction costs about 7 ns and a message
    /// waits on average half an idle round before a poll finds it, so this round's length is
    /// part of every message's latency.
    #[inline]
    fn poll_if_idle(&mut self) -> Result<Option<usize>, TransportError> {
        if !self.one_cq
            || self.connecting > 0
            || !self.repost_peers.is_empty()
            || !self.reading_peers.is_empty()
            || self.srq.as_ref().is_some_and(|s| !s.retiring.is_empty())
        {
            return Ok(None);
        }
        let tick = clock::ticks();
        if tick.saturating_sub(self.last_service_tick) >= self.service_ticks {
            return Ok(None);
        }
        self.progress_calls = self.progress_calls.wrapping_add(1);
        self.progress_tick = tick;
        self.wcs.clear();
        Ok(Some(self.w.port().recv_cq.poll(&mut self.wcs, 32)?))
    }

    /// Receive callbacks that panicked since the transport opened (each was caught, its batch
    /// finished, and the first panic of each batch re-raised by [`Transport::progress`]).
    pub fn callback_panics(&self) -> u64 {
        self.handlers.panics()
    }

    /// Whether a progress call was cut short by a panic in the transport's own code (a bug;
    /// callback panics never do this): its state is then not consistent, and it must only
    /// be dropped. [`SharedTransport`] refuses the lock of such a transport.
    pub fn interrupted(&self) -> bool {
        self.in_batch
    }

    /// A full progress round; `prepolled`: [`Transport::poll_if_idle`] found completions (in
    /// `wcs`), nothing else is due.
    fn progress_batch(&mut self, prepolled: bool) -> Result<usize, TransportError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let recv_drained = if prepolled {
            wcs.len() < 32
        } else {
            self.start_round(&mut wcs)?
        };
        self.handle_batch(wcs, recv_drained)
    }

    /// The round's deferred work, then its poll into `wcs`; whether the poll drained the CQ.
    fn start_round(
        &mut self,
        wcs: &mut Vec<openib_sys::WorkCompletion>,
    ) -> Result<bool, TransportError> {
        // Services every SERVICE_POLL by the tick counter: where the clock source has no vDSO
        // path (TCG guests) every clock read is a system call.
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let tick = clock::ticks();
        self.progress_tick = tick;
        // Before the services: a connection they attach never sees an earlier one's buffers.
        if !self.repost_peers.is_empty() {
            self.repost_deferred();
        }
        if self.connecting > 0 || tick.saturating_sub(self.last_service_tick) >= self.service_ticks
        {
            self.last_service_tick = tick;
            self.poll_services(Instant::now())?;
        }
        wcs.clear();
        Ok({
            let lp = self.w.port();
            lp.recv_cq.poll(wcs, 32)?;
            let received = wcs.len();
            // With one CQ for both (as the transport opens its port) that poll took sends'
            // completions too. With two: send completions free slots and credits, nothing
            // waits on them at once: when messages came in, the send queue waits for the next
            // call (at most three calls), so no second poll stands between a message and its
            // callback. With nothing in flight there is nothing to poll for but the flushes of
            // a dropped connection, which the periodic poll collects: a waiting loop polls one
            // queue, not two. A failed receive brings them in at once: the cause of a flush
            // may be there.
            if !self.one_cq
                && ((received == 0 && self.sq_budget.signaled.load(Ordering::Relaxed) > 0)
                    || self.progress_calls % SEND_POLL_EVERY == 0
                    || wcs.iter().any(|wc| !wc.is_success()))
            {
                lp.send_cq.poll(wcs, 32)?;
            }
            received < 32
        })
    }

    /// Handles the completions of one round (`wcs`, given back to the transport's buffer).
    fn handle_batch(
        &mut self,
        mut wcs: Vec<openib_sys::WorkCompletion>,
        recv_drained: bool,
    ) -> Result<usize, TransportError> {
        let n = wcs.len();
        if n == 0 && self.reading_peers.is_empty() {
            self.wcs = wcs;
            if recv_drained {
                self.retire_srq_grants();
            }
            return Ok(0);
        }
        // A QP in error flushes its other requests: report the error that caused it, which
        // may sit behind the flushes in this batch (or on the other queue).
        if wcs.iter().any(|wc| wc.is_flush()) {
            wcs.sort_by_key(|wc| wc.is_flush());
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        for wc in &wcs {
            let (mut peer, kind, id) = unwr(wc.wr_id);
            if peer == ANY_PEER {
                match self.qp_peer.get(&wc.qp_num) {
                    Some(&p) => peer = p,
                    None if self.dropped_qps.contains(wc.qp_num) => {
                        // Queued before its connection was dropped: nobody's message.
                        self.discard_dropped(std::slice::from_ref(wc));
                        continue;
                    }
                    None => {
                        self.early.push(*wc);
                        continue;
                    }
                }
            }
            // Only the endpoint's own QP: a removed endpoint's requests (flushed when it was
            // removed, polled after `add_procs` made the peer a new endpoint, or one to the own
            // rank at once) are not the new endpoint's, and nobody's without one.
            if self
                .eps
                .get(&peer)
                .and_then(|e| e.conn.as_ref())
                .is_none_or(|c| c.qp.qp_num() != wc.qp_num)
            {
                self.discard_dropped(std::slice::from_ref(wc));
                continue;
            }
            if touched.last() != Some(&peer) {
                touched.push(peer);
            }
            if !wc.is_success() {
                if kind == KIND_SRQ {
                    // The buffer belongs to the SRQ, not to the failed connection.
                    if let Err(e) = self.srq.as_mut().expect("SRQ buffer").repost(id) {
                        tracing::warn!(error = %e, "SRQ buffer not reposted");
                    }
                }
                if kind == KIND_SQ {
                    // Unsignaled messages before the first failed request completed (a failed
                    // or flushed one reports itself, signaled or not).
                    if let Some(ep) = self.eps.get_mut(&peer) {
                        ep.retire_unsignaled_before(id);
                    }
                }
                // The port's state is read for the endpoint's first failure only (a flush of
                // each request follows it).
                let first = self
                    .eps
                    .get(&peer)
                    .is_some_and(|e| !matches!(e.state, EndpointState::Failed(_)));
                let text = if first {
                    self.with_port_state(wc.status_str(), wc.status)
                } else {
                    wc.status_str()
                };
                self.fail(
                    peer,
                    FailureCause::WorkCompletion {
                        status: wc.status,
                        vendor: wc.vendor_err,
                        text,
                    },
                );
                continue;
            }
            let r = match kind {
                KIND_RECV | KIND_SRQ => {
                    self.on_recv(peer, kind, id, wc.byte_len as usize, wc.imm())
                }
                KIND_SQ => self.on_send_done(peer, id),
                _ => Ok(()),
            };
            if let Err(e) = r {
                self.fail(peer, FailureCause::local(e));
            }
        }
        self.wcs = wcs;
        self.done_backlog.check(self.done.len());
        if touched.len() > 1 {
            touched.sort_unstable();
            touched.dedup();
        }
        // Reads waiting for the cache's bound may start after another endpoint freed memory.
        if !self.reading_peers.is_empty() {
            let sorted = touched.len();
            for &p in &self.reading_peers {
                if touched[..sorted].binary_search(&p).is_err() {
                    touched.push(p);
                }
            }
        }
        // A load first: the swap (a locked instruction) only when it was hit.
        if self.sq_budget.hit.load(Ordering::Relaxed)
            && self.sq_budget.hit.swap(false, Ordering::Relaxed)
        {
            // Endpoints held back by the shared send budget may go on now.
            touched.extend(self.eps.iter().filter(|(_, e)| e.busy()).map(|(p, _)| p));
            touched.sort_unstable();
            touched.dedup();
        }
        for &p in &touched {
            if let Err(e) = self.drain(p) {
                self.fail(p, FailureCause::local(e));
            }
        }
        self.touched = touched;
        if recv_drained {
            // After the batch: its buffers of stopped peers are reposted by now.
            self.retire_srq_grants();
        }
        Ok(n)
    }

    /// One round of a waiting loop: [`Transport::progress`], then by `backoff`'s policy a
    /// yield or a sleep of at most 2 ms until a completion arrives. Returns the
    /// completions handled.
    pub fn progress_idle(&mut self, backoff: &mut IdleBackoff) -> Result<usize, TransportError> {
        let n = self.progress()?;
        if backoff.count(n) == 0 {
            return Ok(n);
        }
        if backoff.should_sleep(self.cfg.wait_polls) {
            let (n, sleeper) = self.arm_sleep()?;
            if let Some(s) = sleeper {
                s.sleep(backoff.nap())?;
                let n = self.progress()?;
                backoff.count(n);
                return Ok(n);
            }
            backoff.count(n);
            return Ok(n);
        }
        // The tick the progress call read: no second read per idle poll.
        if backoff.should_yield(self.yield_after_ticks, self.progress_tick) {
            std::thread::yield_now();
        }
        Ok(n)
    }

    /// Arms the completion queues to wake the port's channel, then progresses once (a
    /// completion that came before the arming is handled here, not slept through). Returns
    /// the completions handled and, when there were none and no connection is being set up
    /// (those are polled, not signalled) and no receive callback is running (this is not a call
    /// from inside one), the [`Sleeper`] to wait on.
    pub fn arm_sleep(&mut self) -> Result<(usize, Option<Sleeper>), TransportError> {
        if self.connecting > 0 || self.callback_depth > 0 {
            return Ok((self.progress()?, None));
        }
        let lp = self.w.port();
        lp.recv_cq.req_notify(false)?;
        if !self.one_cq {
            lp.send_cq.req_notify(false)?;
        }
        let channel = lp.channel.clone();
        let n = self.progress()?;
        if n > 0 || !self.reading_peers.is_empty() {
            return Ok((n, None));
        }
        self.sleeps += 1;
        Ok((0, Some(Sleeper(channel))))
    }

    /// Closes every open tail of unsignaled messages (see [`Endpoint::close_tail`]), for
    /// `flush`.
    fn close_tails(&mut self) {
        let mut failed = Vec::new();
        for (peer, ep) in self.eps.iter_mut() {
            if !ep.posted.open_tail() {
                continue;
            }
            if let Err(e) = ep.close_tail(peer) {
                failed.push((peer, e));
            }
        }
        for (peer, e) in failed {
            self.fail(peer, FailureCause::local(e));
        }
    }

    fn on_send_done(&mut self, peer: u32, id: u32) -> Result<(), TransportError> {
        let Some(ep) = self.eps.get_mut(&peer) else {
            return Ok(());
        };
        ep.retire_unsignaled_before(id);
        let posted = ep.posted.remove(id);
        match posted {
            // A provider that reports every request (it may): retired like the others.
            Some(Posted::Unsignaled { .. }) => ep.sq_budget.done(1, 0),
            Some(_) => ep.sq_budget.done(1, 1),
            None => {}
        }
        match posted {
            Some(Posted::Msg { slot, token }) => {
                ep.free_send.push(slot);
                if token != 0 {
                    self.done.push(Completion::Done { peer, token });
                }
            }
            Some(Posted::Inline { token }) => {
                if token != 0 {
                    self.done.push(Completion::Done { peer, token });
                }
            }
            Some(Posted::Rdma { token, .. }) | Some(Posted::Atomic { token, .. }) => {
                self.done.push(Completion::Done { peer, token })
            }
            Some(Posted::Read { seq }) => {
                let inc = ep
                    .incoming
                    .get_mut(&seq)
                    .expect("a read belongs to an incoming");
                inc.reading -= 1;
                tracing::trace!(peer, seq, "rendezvous read completed");
                if inc.complete() {
                    ep.reorder.complete(seq, Ready::Rndv { seq }).map_err(|e| {
                        TransportError::EndpointFailed {
                            peer,
                            why: e.to_string(),
                        }
                    })?;
                    self.deliver_ready(peer);
                }
            }
            Some(Posted::Write { seq }) => {
                let o = ep
                    .outgoing
                    .get_mut(&seq)
                    .expect("a write belongs to an outgoing");
                o.writing -= 1;
                tracing::trace!(peer, seq, "rendezvous write completed");
                if o.finished() {
                    // Every byte we write is in the peer's memory (its WRITTEN notice is posted
                    // or queued; it carries no data) and the peer read the rest, if any.
                    release_outgoing(ep, peer, seq, &mut self.cache, &mut self.done);
                }
            }
            Some(Posted::Close) | Some(Posted::Probe) | Some(Posted::Unsignaled { .. }) | None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::IdleBackoff;

    #[test]
    fn a_waiting_loop_sleeps_only_after_the_configured_idle_polls_in_a_row() {
        let mut b = IdleBackoff::default();
        for i in 1..=99 {
            assert_eq!(b.count(0), i);
            assert!(!b.should_sleep(100), "slept after {i} idle polls");
        }
        b.count(0);
        assert!(b.should_sleep(100));
        // Work resets the count: the next idle stretch starts over.
        assert_eq!(b.count(3), 0);
        assert!(!b.should_sleep(100));
        assert_eq!(b.count(0), 1);
    }

    #[test]
    fn backlog_warning_waits_for_each_doubling() {
        let mut w = super::BacklogWarning::default();
        let first = super::UNTAKEN_COMPLETIONS_WARNING;
        w.check(first - 1);
        assert_eq!(w.next_warning_at(), first);
        w.check(first);
        assert_eq!(w.next_warning_at(), 2 * first);
        w.check(2 * first - 1);
        assert_eq!(w.next_warning_at(), 2 * first);
        w.check(5 * first);
        assert_eq!(w.next_warning_at(), 10 * first);
    }

    #[test]
    fn an_idle_loop_yields_once_it_has_spun_its_time_and_work_starts_it_over() {
        let mut b = IdleBackoff::default();
        // Yielding at once (0) still needs an idle poll: a loop that found work goes on.
        assert!(!b.should_yield(0, super::clock::ticks()));
        b.count(0);
        assert!(b.should_yield(0, super::clock::ticks()));
        assert!(
            !b.should_yield(u64::MAX, super::clock::ticks()),
            "yielded before its spin time"
        );
        let since = b.idle_since;
        std::thread::sleep(std::time::Duration::from_millis(1));
        b.count(0);
        assert_eq!(
            b.idle_since, since,
            "a later idle poll restarted the stretch"
        );
        assert!(b.should_yield(1, super::clock::ticks()));
        b.count(2);
        assert!(!b.should_yield(0, super::clock::ticks()));
        // A new idle stretch is timed from its own first idle poll.
        b.count(0);
        assert!(b.idle_since > since);
        assert!(!b.should_yield(u64::MAX, super::clock::ticks()));
    }

    #[test]
    fn wait_polls_zero_never_sleeps() {
        let mut b = IdleBackoff::default();
        for _ in 0..10_000 {
            b.count(0);
        }
        assert!(!b.should_sleep(0));
        assert!(b.should_sleep(10_000));
    }

    #[test]
    fn sleeps_that_wake_to_nothing_grow_to_the_cap_and_work_resets_them() {
        use super::{MAX_NAP, SERVICE_POLL};
        let mut b = IdleBackoff::default();
        let naps: Vec<_> = (0..8).map(|_| b.nap()).collect();
        assert_eq!(naps[0], SERVICE_POLL);
        assert_eq!(naps[1], SERVICE_POLL * 2);
        assert!(naps.windows(2).all(|w| w[0] <= w[1]), "{naps:?}");
        assert_eq!(*naps.last().unwrap(), MAX_NAP);
        // Idle polls do not reset the growth; work does.
        b.count(0);
        assert_eq!(b.nap(), MAX_NAP);
        b.count(1);
        assert_eq!(b.nap(), SERVICE_POLL);
    }
}
