//! Fault injection for tests and users: `OPENIB_FAULT=<point>:<rank>[,<point>:<rank>...]` (a
//! bare `<rank>` repeats the previous point: `in-fence:3,5`) makes
//! that rank kill itself with SIGKILL when it reaches the named point, so each failure case can
//! be reproduced. Points: `before-put`, `after-put` (after the commit, before the fence),
//! `in-fence` (inside an embedded-runtime fence, just after sending its first fence message;
//! under PMIx, in its first fence, just after `PMIx_Fence_nb` took its contribution),
//! `in-connect` (after starting its connections, before they finish), `in-transfer` (half
//! way through the messages of `openib stress`); group creation's (`Transport::group_create`,
//! issue 32): `gc-before` (at the call, before it sends anything), `gc-tree` (right after its
//! first protocol message of the operation was posted), `gc-agree` (right after its first
//! `Ack` or `Propose` was posted: inside the agreement); for these three, `<rank>` is
//! `k * size + rank`: the rank dies in its operation `k` (from 0) on that transport.
//!
//! One point makes the rank misbehave instead of dying: `lie-seq` (the transport sends its
//! eager message number `LIE_SEQ` to every peer with a wrong sequence byte in the immediate
//! header), so that the peers' check of what arrives is exercised end to end.
//!
//! The injection is compiled only with the cargo feature `fault-injection` (every test build
//! has it: the package's dev-dependency on itself turns it on; `scripts/test` and CI too). A
//! default build, `cargo build --release`, has no `point` nor `armed`: each call site is
//! `#[cfg(feature = "fault-injection")]`, so no fault check can sit in its data path (an
//! ungated call does not compile there), and it refuses `OPENIB_FAULT` by name
//! ([`check_available`], which the CLI and [`crate::transport::TransportConfig::from_env`]
//! call; `openib config` shows the setting and flags it). [`say`] and [`say_agreed`] are
//! reporting, not injection: always built.

use crate::config::{self, ConfigError};

/// Whether this build injects faults, and why `OPENIB_FAULT` is refused when it does not
/// (declared with the settings, which check it; named here for the fault points' users).
pub use crate::config::{FAULT_INJECTION_BUILT as BUILT, FAULT_INJECTION_NOT_BUILT as NOT_BUILT};

/// `Err` naming `OPENIB_FAULT`, its value and the missing feature when it is set (not blank)
/// in a build without fault injection; `Ok` otherwise (a malformed value in a build with it
/// is `point`'s to report, as before).
pub fn check_available() -> Result<(), ConfigError> {
    match config::text("OPENIB_FAULT") {
        Some(value) if !BUILT && !value.trim().is_empty() => Err(ConfigError {
            name: "OPENIB_FAULT",
            value,
            origin: config::source("OPENIB_FAULT"),
            problem: NOT_BUILT.into(),
            allowed: "unset, in this build".into(),
        }),
        _ => Ok(()),
    }
}

/// The sequence number of the message that `OPENIB_FAULT=lie-seq:RANK` misnumbers.
#[cfg(feature = "fault-injection")]
pub const LIE_SEQ: u32 = 100;

/// Whether `OPENIB_FAULT` names `point` for `rank` (for the points that make a rank
/// misbehave rather than die); says so on stderr when it does. A malformed `OPENIB_FAULT`
/// arms nothing (and [`point`] says so).
#[cfg(feature = "fault-injection")]
pub fn armed(point: &str, rank: u32) -> bool {
    let hit = crate::config::pairs("OPENIB_FAULT").is_ok_and(|spec| {
        spec.iter()
            .any(|&(p, r)| p == point && r == u64::from(rank))
    });
    if hit {
        say(&format!("openib: OPENIB_FAULT: rank {rank} will {point}"));
    }
    hit
}

/// Dies here (SIGKILL) if `OPENIB_FAULT` names `point` for `rank`. A malformed `OPENIB_FAULT`
/// injects nothing and says so on stderr (once).
#[cfg(feature = "fault-injection")]
pub fn point(point: &str, rank: u32) {
    let spec = match crate::config::pairs("OPENIB_FAULT") {
        Ok(spec) => spec,
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("openib: {e}; no fault is injected"));
            return;
        }
    };
    let hit = spec
        .iter()
        .any(|&(p, r)| p == point && r == u64::from(rank));
    if hit {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        say(&format!(
            "openib: OPENIB_FAULT: rank {rank} dies at {point} (unix ms {ms})"
        ));
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Writes `line` and a newline to stderr in one write, so that the lines of several processes
/// on one pipe do not interleave.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Says, as every survivor of a run with failed ranks does, which ranks the survivors agreed
/// had failed: `openib COMMAND: rank R: survivors agree; failed rank(s) [..]` (tests read it).
pub fn say_agreed(command: &str, rank: u32, failed: &[u32]) {
    say(&format!(
        "openib {command}: rank {rank}: survivors agree; failed rank(s) {failed:?}"
    ));
}
