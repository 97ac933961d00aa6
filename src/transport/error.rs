//! What fails and why: [`TransportError`] for calls, [`FailureCause`] for an endpoint, and the
//! [`Completion`]s that report each operation's outcome.

use super::peer::PeerError;
use super::wireup::PingError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Wireup(#[from] PingError),
    #[error("verbs: {0}")]
    Verbs(#[from] openib_sys::Error),
    #[error("rank {peer} is not reachable: {why}")]
    NoPath { peer: u32, why: String },
    #[error("the endpoint to rank {peer} failed: {why}")]
    EndpointFailed { peer: u32, why: String },
    /// The peer sent a message this side does not allow (see [`peer`]).
    #[error("the endpoint to rank {peer} failed: {error}")]
    Peer { peer: u32, error: PeerError },
    #[error("message of {len} bytes exceeds the limit of {limit}")]
    TooLarge { len: usize, limit: usize },
    #[error("tag 0 is reserved for the transport's control messages")]
    ReservedTag,
    /// The tag is taken: by group creation ([`super::GROUP_CREATE_TAG`], once it ran), or,
    /// for group creation, by a user's callback.
    #[error("tag {tag} is in use by {by}")]
    TagInUse { tag: u8, by: &'static str },
    #[error("rank {peer} is out of range (job size {size}) or removed")]
    BadPeer { peer: u32, size: u32 },
    #[error("{what} did not finish within {timeout:?}")]
    Timeout { what: String, timeout: Duration },
    #[error("range {offset}+{len} is outside the {size}-byte region")]
    Range { offset: u64, len: u64, size: u64 },
    #[error("atomic target address {addr:#x} is not 8-byte aligned")]
    Misaligned { addr: u64 },
    /// A token given to [`super::Transport::rdma_as`] or [`super::Transport::atomic_as`]
    /// without [`super::CALLER_TOKEN`]: it could be taken for one the transport drew.
    #[error("token {token:#x} lacks the caller-token bit (1 << 63)")]
    NotACallerToken { token: u64 },
    #[error("immediate send not possible now ({why}); use send")]
    Busy { why: &'static str },
    /// A call that waits on progress, made from inside a receive callback (progress there
    /// runs no callbacks, so it would wait for itself).
    #[error("{call} cannot run inside a receive callback: it waits on progress, which runs the callbacks; call it after progress returns")]
    InCallback { call: &'static str },
    #[error(transparent)]
    Setting(#[from] crate::config::ConfigError),
}

/// What finished, reported by [`Transport::take_completions`] and [`Transport::flush`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A send, put, get or atomic (by its token) completed. For a send: the data left this
    /// process (rendezvous: the data is in the peer's memory). For an atomic: the old value is in the local
    /// region.
    Done { peer: u32, token: u64 },
    /// It failed, with the endpoint's error (`error` is `cause` as text).
    Failed {
        peer: u32,
        token: u64,
        error: String,
        cause: FailureCause,
    },
}

/// Why an endpoint failed (every operation it had queued or in flight fails with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailureCause {
    /// A work completion of its QP failed (the first non-flush one).
    #[error("work completion error: {text} (vendor error {vendor:#x})")]
    WorkCompletion {
        /// `ibv_wc_status`.
        status: u32,
        vendor: u32,
        text: String,
    },
    /// The runtime reported the peer dead.
    #[error("rank {0} died")]
    PeerDied(u32),
    /// `del_procs` removed it.
    #[error("endpoint removed by del_procs")]
    Removed,
    /// Its CPC could not connect.
    #[error("{0}")]
    Connect(String),
    /// A local verbs or protocol error (a failed post).
    #[error("{0}")]
    Local(String),
    /// The device reported an asynchronous event that breaks the endpoint's queue pair or the
    /// whole device (`src/transport/device_events.rs`); the event's description.
    #[error("device event: {0}")]
    Device(String),
    /// The peer broke the protocol or this side's limits (a malformed message, a number out
    /// of range).
    #[error("{0}")]
    Peer(PeerError),
}

impl FailureCause {
    /// The cause of an endpoint failing on `e`: the reason alone when `e` already says that an
    /// endpoint failed (the failure is reported as that endpoint's, once).
    pub(super) fn local(e: TransportError) -> FailureCause {
        match e {
            TransportError::EndpointFailed { why, .. } => FailureCause::Local(why),
            TransportError::Peer { error, .. } => FailureCause::Peer(error),
            e => FailureCause::Local(e.to_string()),
        }
    }
}

#[cfg(test)]
mod cause_tests {
    use super::{FailureCause, TransportError};

    #[test]
    fn an_endpoint_failure_is_named_once() {
        let nested = TransportError::EndpointFailed {
            peer: 1,
            why: "malformed message: sequence ending in 0x65 where 100 is due".into(),
        };
        assert_eq!(
            FailureCause::local(nested).to_string(),
            "malformed message: sequence ending in 0x65 where 100 is due"
        );
        let other = TransportError::ReservedTag;
        let text = other.to_string();
        assert_eq!(FailureCause::local(other), FailureCause::Local(text));
    }
}
