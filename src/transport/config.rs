//! Transport settings ([`TransportConfig`], read from the environment and the settings file) and
//! the limits they imply.

use super::error::TransportError;
use super::flow::Credits;
use super::rendezvous::RndvProtocol;
use super::wireup::PingConfig;
use super::{wire, CTL_RESERVE};
use std::time::Duration;

/// Transport settings; see `openib config` for their environment names and defaults.
#[derive(Clone)]
pub struct TransportConfig {
    pub wireup: PingConfig,
    /// Largest eager payload in bytes (the header comes on top); 64..=65,535.
    pub eager_limit: usize,
    /// Largest message [`Transport::send`] sends as a train of eager pieces (above the eager
    /// limit; at most [`wire::MAX_TRAIN`]); larger ones, and every zero-copy send above the
    /// eager limit, go by rendezvous.
    pub train_limit: usize,
    /// Receive buffers posted per endpoint.
    pub recv_depth: u32,
    /// Send bounce slots per endpoint.
    pub send_depth: u32,
    /// Largest single RDMA read of a rendezvous.
    pub rndv_fragment: u64,
    /// Largest message sent or received (`OPENIB_MAX_MSG_SIZE`): a send above it is refused
    /// with [`TransportError::TooLarge`], and a peer announcing more fails its endpoint
    /// ([`peer::PeerError::TooLarge`]) before anything is allocated.
    pub max_msg: u64,
    /// Bound on the bytes the registration cache keeps pinned.
    pub pinned_max: u64,
    /// Entries of the port's send and receive completion queues.
    pub cq_depth: u32,
    /// Whether eager messages land in a shared receive queue (see [`SrqMode`]).
    pub srq: SrqMode,
    /// With [`SrqMode::Auto`]: the SRQ is used when the job has more peers than this.
    pub srq_peers: u32,
    /// SRQ buffers each connected peer holds for good, control credits included.
    pub srq_credits: u32,
    /// SRQ buffers lent to sending peers beyond their grants.
    pub srq_reserve: u32,
    /// How long a waiting loop spins without finding work before it yields the CPU between
    /// polls; zero: it yields after every idle poll.
    pub yield_after: Duration,
    /// Idle progress calls in a row after which a waiting loop sleeps on the completion
    /// channel instead of polling; 0: never sleep.
    pub wait_polls: u32,
    /// At least one send request in this many asks for a completion (inline messages may go
    /// without one); 1: every one.
    pub signal_every: u32,
    /// How this process takes incoming rendezvous messages (see [`wire`]).
    pub rndv: RndvProtocol,
    /// The first sequence number of every endpoint, both ways (`OPENIB_SEQ_START`, for tests:
    /// just below 2^32 makes a short run cross the wrap). Both sides of an endpoint must agree.
    pub seq_start: u32,
}

/// `OPENIB_SRQ`: every process of a job must decide the same way, because a sender starts
/// with the credits its peer's mode grants (decided from the job size, which all share).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrqMode {
    Auto,
    On,
    Off,
}

/// The port discovery settings of the environment: OPENIB_IF_INCLUDE / OPENIB_IF_EXCLUDE,
/// OPENIB_GID_INDEX and OPENIB_APM_OVER_PORTS (as `openib ports` reads them); an error names
/// the setting.
pub fn derive_from_env() -> Result<openib_ports::DeriveConfig, TransportError> {
    use crate::config;
    let include = config::string("OPENIB_IF_INCLUDE")?;
    let exclude = config::string("OPENIB_IF_EXCLUDE")?;
    Ok(openib_ports::DeriveConfig {
        gid_index: config::u32("OPENIB_GID_INDEX")?,
        apm_over_ports: config::bool("OPENIB_APM_OVER_PORTS")?,
        filter: openib_ports::Filter::from_lists(include.as_deref(), exclude.as_deref()).map_err(
            |e| {
                TransportError::Wireup(super::wireup::PingError::Setup(format!(
                    "OPENIB_IF_INCLUDE / OPENIB_IF_EXCLUDE: {e}"
                )))
            },
        )?,
    })
}

impl TransportConfig {
    /// Settings from the environment (and the settings file, see `openib config`); a
    /// malformed or out-of-range value is an error naming the setting.
    pub fn from_env(wireup: PingConfig) -> Result<TransportConfig, TransportError> {
        use crate::config;
        // OPENIB_FAULT in a build without fault injection: refused by name, not ignored.
        crate::fault::check_available()?;
        Ok(TransportConfig {
            wireup,
            eager_limit: config::usize("OPENIB_EAGER_LIMIT")?,
            train_limit: config::usize("OPENIB_EAGER_TRAIN_LIMIT")?.min(wire::MAX_TRAIN),
            recv_depth: config::u32("OPENIB_RECV_DEPTH")?,
            send_depth: config::u32("OPENIB_SEND_DEPTH")?,
            rndv_fragment: config::u64("OPENIB_RNDV_FRAGMENT")?,
            max_msg: config::u64("OPENIB_MAX_MSG_SIZE")?,
            pinned_max: config::u64("OPENIB_PINNED_MAX")?,
            cq_depth: config::u32("OPENIB_CQ_DEPTH")?,
            srq: match config::choice("OPENIB_SRQ")? {
                Some("on") => SrqMode::On,
                Some("off") => SrqMode::Off,
                _ => SrqMode::Auto,
            },
            srq_peers: config::u32("OPENIB_SRQ_PEERS")?,
            srq_credits: config::u32("OPENIB_SRQ_CREDITS")?,
            srq_reserve: config::u32("OPENIB_SRQ_RESERVE")?,
            yield_after: Duration::from_micros(config::u32("OPENIB_YIELD_AFTER_US")?.into()),
            wait_polls: config::u32("OPENIB_WAIT_POLLS")?,
            signal_every: config::u32("OPENIB_SIGNAL_EVERY")?,
            rndv: {
                let write_percent = config::u32("OPENIB_RNDV_SPLIT")? as u8;
                match config::choice("OPENIB_RNDV_PROTOCOL")? {
                    Some("read") => RndvProtocol::Read,
                    Some("write") => RndvProtocol::Write,
                    Some("split") => RndvProtocol::Split { write_percent },
                    _ => RndvProtocol::Auto { write_percent },
                }
            },
            seq_start: config::u32("OPENIB_SEQ_START")?,
        })
    }

    /// Whether a job of `size` processes uses the shared receive queue.
    pub fn srq_for(&self, size: u32) -> bool {
        match self.srq {
            SrqMode::On => true,
            SrqMode::Off => false,
            SrqMode::Auto => size.saturating_sub(1) > self.srq_peers,
        }
    }

    /// The credits a sender starts with towards a peer of a job of `size` processes (the
    /// peer's receive buffers it may count on), control credits included.
    pub fn initial_credits(&self, size: u32) -> u32 {
        if self.srq_for(size) {
            self.srq_credits.min(self.recv_depth)
        } else {
            self.recv_depth
        }
    }

    /// Our credits towards a peer of a job of `size` processes, whose returns are checked
    /// against what it may lend: its receive buffers, or with the shared receive queue the
    /// most its credit pool grants one peer (`OPENIB_RECV_DEPTH` less the control reserve;
    /// like the initial credits, this assumes the job's processes share the setting).
    pub fn peer_credits(&self, size: u32) -> Credits {
        let initial = self.initial_credits(size);
        let c = Credits::new(initial, CTL_RESERVE);
        if self.srq_for(size) {
            c.lending_up_to(self.recv_depth.saturating_sub(CTL_RESERVE))
        } else {
            c
        }
    }

    /// Refuses a message of `len` bytes above `OPENIB_MAX_MSG_SIZE`.
    pub fn check_msg_len(&self, len: usize) -> Result<(), TransportError> {
        check_msg_len(len, self.max_msg)
    }
}

/// [`TransportError::TooLarge`] for a message of `len` bytes above `max_msg`.
pub(super) fn check_msg_len(len: usize, max_msg: u64) -> Result<(), TransportError> {
    if len as u64 > max_msg {
        return Err(TransportError::TooLarge {
            len,
            limit: max_msg.try_into().unwrap_or(usize::MAX),
        });
    }
    Ok(())
}

#[cfg(test)]
mod limit_tests {
    use super::*;
    use crate::transport::pool;

    /// Regression (issue 27): a send of any length went out, for the peer to allocate.
    #[test]
    fn a_send_above_the_largest_message_is_refused() {
        assert!(check_msg_len(1 << 20, 1 << 20).is_ok());
        let e = check_msg_len((1 << 20) + 1, 1 << 20).unwrap_err();
        assert!(matches!(
            e,
            TransportError::TooLarge {
                len: 1_048_577,
                limit: 1_048_576
            }
        ));
        assert_eq!(
            e.to_string(),
            "message of 1048577 bytes exceeds the limit of 1048576"
        );
    }

    /// With the SRQ, a peer's credit pool lends up to `OPENIB_RECV_DEPTH` less the control
    /// reserve; without it, exactly the receive buffers.
    #[test]
    fn peer_credits_accept_what_the_peer_may_lend_and_no_more() {
        let pool = pool::CreditPool::new(256, 8 - CTL_RESERVE, CTL_RESERVE, 64 - CTL_RESERVE);
        let lend_max = 64 - CTL_RESERVE;
        let mut c = Credits::new(8, CTL_RESERVE).lending_up_to(lend_max);
        assert_eq!(c.data, pool.per_peer() - CTL_RESERVE);
        c.on_returns((lend_max - c.data) as u16, 0).unwrap();
        assert!(c.on_returns(1, 0).is_err());
    }
}
