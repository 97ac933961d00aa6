//! The device's asynchronous events: a port that went down or came back, a queue pair's or
//! the device's fatal error. Without them a broken queue pair showed only at its next
//! operation's error completion, and a port that went down only as retries running out.
//!
//! The service round reads them every [`DEVICE_EVENT_POLL`] (one `poll(2)` of the context's
//! event descriptor, never in the message path) and acts by [`action`]:
//! - an event that breaks a queue pair (fatal, request or access error, failed path
//!   migration) fails that queue pair's endpoint, naming the event;
//! - an event that breaks the context (the device's fatal error, a CQ's error, the SRQ's
//!   error) fails every endpoint;
//! - this port going down is a warning, and the failures of work completions that follow
//!   name it (at the default level: the link may come back within
//!   the queue pairs' retries, and a connection that cannot go on fails through its own
//!   completions), its return a notice; other ports' events and notices are logged at debug.
//!
//! Every event counts in [`Transport::device_events`].

use super::error::FailureCause;
use super::Transport;
use openib_ports::PortState;
use openib_sys::AsyncEventKind;
use std::time::{Duration, Instant};

/// How often the service round reads the device's events.
pub(super) const DEVICE_EVENT_POLL: Duration = Duration::from_millis(100);
/// How long an endpoint's first local QP operation error waits, once per transport, for the
/// device to say its port is down (see [`Transport::with_port_state`]).
const PORT_EVENT_WAIT: Duration = Duration::from_millis(200);
/// `IBV_WC_LOC_QP_OP_ERR`.
const LOCAL_QP_OPERATION_ERROR: u32 = openib_sys::ffi::verbs::IBV_WC_LOC_QP_OP_ERR;
/// At most this many events are handled in one round (the rest wait for the next).
const EVENTS_PER_ROUND: usize = 16;

/// What an event means for this transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// The endpoint of this queue pair cannot go on.
    FailPeer(u32),
    /// No endpoint of the context can go on.
    FailAll,
    /// A queue pair of no endpoint (a connection manager's, or one already dropped) broke.
    WarnUnowned(u32),
    /// This transport's port went down.
    PortDown,
    /// This transport's port is active again.
    PortUp,
    /// Nothing to do (a notice, or another port's event).
    Note,
}

/// The action for `kind` on a transport using port `port`; `peer_of_qp` names the endpoint
/// of a queue pair number. Pure: the unit tests give it every kind.
pub(super) fn action(
    kind: &AsyncEventKind,
    port: u8,
    peer_of_qp: impl Fn(u32) -> Option<u32>,
) -> Action {
    match *kind {
        AsyncEventKind::Qp { qp_num, .. } if kind.breaks_qp() => match peer_of_qp(qp_num) {
            Some(peer) => Action::FailPeer(peer),
            None => Action::WarnUnowned(qp_num),
        },
        _ if kind.breaks_device() => Action::FailAll,
        AsyncEventKind::PortError { port: p } if p == port => Action::PortDown,
        AsyncEventKind::PortActive { port: p } if p == port => Action::PortUp,
        _ => Action::Note,
    }
}

/// This transport's port went down (from its event or its state), once per time down.
fn warn_port_down(device: &str, port: u8, what: &str) {
    tracing::warn!(
        event = %what,
        "port {device}:{port} went down: connections over it fail unless it comes back within their retries"
    );
}

impl Transport {
    /// Reads and acts on the device's events when [`DEVICE_EVENT_POLL`] has passed since the
    /// last read (called by the service round).
    pub(super) fn poll_device_events(&mut self, now: Instant) {
        if now < self.next_device_poll {
            return;
        }
        self.next_device_poll = now + DEVICE_EVENT_POLL;
        self.read_device_events(Duration::ZERO);
    }

    /// Reads and acts on up to [`EVENTS_PER_ROUND`] events, waiting at most `wait` for the
    /// first.
    fn read_device_events(&mut self, mut wait: Duration) {
        for _ in 0..EVENTS_PER_ROUND {
            let ev = match self
                .w
                .port()
                .ctx
                .poll_async_event(std::mem::take(&mut wait))
            {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "the device's events cannot be read");
                    return;
                }
            };
            self.device_events += 1;
            let port = self.w.port().port;
            let device = self.w.port().ctx.name().to_string();
            let what = format!("{} ({device})", ev.description);
            match action(&ev.kind, port, |qpn| self.qp_peer.get(&qpn).copied()) {
                Action::FailPeer(peer) => {
                    tracing::warn!(peer, event = %what, "a queue pair's device event ends its endpoint");
                    self.fail(peer, FailureCause::Device(what));
                }
                Action::FailAll => {
                    tracing::warn!(event = %what, "a device event ends every endpoint");
                    let peers: Vec<u32> = self.eps.keys().collect();
                    for peer in peers {
                        self.fail(peer, FailureCause::Device(what.clone()));
                    }
                }
                Action::WarnUnowned(qp_num) => {
                    tracing::warn!(qp_num, event = %what, "device event for a queue pair of no endpoint");
                }
                Action::PortDown => {
                    // Found already by a failure's port query: warned then.
                    if self.port_down.is_none() {
                        self.port_down =
                            Some(format!("{device}:{port} is down ({})", ev.description));
                        warn_port_down(&device, port, &what);
                    }
                }
                Action::PortUp => {
                    self.port_down = None;
                    tracing::info!(event = %what, "port {device}:{port} is active again");
                }
                Action::Note => tracing::debug!(event = %what, kind = ?ev.kind, "device event"),
            }
        }
    }

    /// A failed work completion's text (of `status`), with the port's state when the device
    /// says the port is down (its events read at once, then, if none said so, the port's
    /// state queried; for a local QP operation error both again for up to
    /// [`PORT_EVENT_WAIT`], once per transport: the failure may come before either), so that
    /// the endpoint's failure names its cause.
    pub(super) fn with_port_state(&mut self, text: String, status: u32) -> String {
        self.next_device_poll = Instant::now() + DEVICE_EVENT_POLL;
        self.read_device_events(Duration::ZERO);
        self.query_port_down();
        // A local QP operation error is what a device gives for a request it cannot send (on
        // rxe: its network device went down), and it can come before the device has marked
        // the port down or queued its event: wait for them a little, once per transport.
        if self.port_down.is_none() && status == LOCAL_QP_OPERATION_ERROR && !self.port_waited {
            self.port_waited = true;
            let deadline = Instant::now() + PORT_EVENT_WAIT;
            while self.port_down.is_none() {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                self.read_device_events((deadline - now).min(Duration::from_millis(10)));
                self.query_port_down();
            }
        }
        match &self.port_down {
            Some(why) => format!("{text}; port {why}"),
            None => text,
        }
    }

    /// When no event said so yet, the port's own state: not active means down (warned once).
    fn query_port_down(&mut self) {
        if self.port_down.is_some() {
            return;
        }
        let (port, ctx) = (self.w.port().port, &self.w.port().ctx);
        match ctx.query_port(port).map(|a| PortState::from_raw(a.state)) {
            Ok(PortState::Active) => {}
            Ok(state) => {
                let device = ctx.name().to_string();
                let what = format!("port state {state:?} ({device})");
                self.port_down = Some(format!("{device}:{port} is down (state {state:?})"));
                warn_port_down(&device, port, &what);
            }
            Err(e) => tracing::debug!(error = %e, "the port's state cannot be read"),
        }
    }

    /// The device events this transport read since it opened (each logged; see
    /// `src/transport/device_events.rs` for what each does).
    pub fn device_events(&self) -> u64 {
        self.device_events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(qpn: u32) -> Option<u32> {
        (qpn == 77).then_some(3)
    }

    #[test]
    fn a_broken_queue_pair_fails_its_endpoint_only() {
        let fatal = AsyncEventKind::qp_for_tests(true, 77);
        assert_eq!(action(&fatal, 1, owned), Action::FailPeer(3));
        let unowned = AsyncEventKind::qp_for_tests(true, 78);
        assert_eq!(action(&unowned, 1, owned), Action::WarnUnowned(78));
        // Communication established is a notice, owned or not.
        let notice = AsyncEventKind::qp_for_tests(false, 77);
        assert_eq!(action(&notice, 1, owned), Action::Note);
    }

    #[test]
    fn a_broken_device_cq_or_srq_fails_every_endpoint() {
        assert_eq!(
            action(&AsyncEventKind::DeviceFatal, 1, owned),
            Action::FailAll
        );
        assert_eq!(
            action(&AsyncEventKind::Cq { event_type: 0 }, 1, owned),
            Action::FailAll
        );
        assert_eq!(
            action(&AsyncEventKind::srq_for_tests(true), 1, owned),
            Action::FailAll
        );
        assert_eq!(
            action(&AsyncEventKind::srq_for_tests(false), 1, owned),
            Action::Note
        );
    }

    #[test]
    fn only_this_ports_state_changes_are_reported() {
        assert_eq!(
            action(&AsyncEventKind::PortError { port: 1 }, 1, owned),
            Action::PortDown
        );
        assert_eq!(
            action(&AsyncEventKind::PortActive { port: 1 }, 1, owned),
            Action::PortUp
        );
        assert_eq!(
            action(&AsyncEventKind::PortError { port: 2 }, 1, owned),
            Action::Note
        );
        assert_eq!(
            action(&AsyncEventKind::LidChange { port: 1 }, 1, owned),
            Action::Note
        );
        assert_eq!(
            action(&AsyncEventKind::Other { event_type: 99 }, 1, owned),
            Action::Note
        );
    }
}
