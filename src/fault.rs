//! Fault injection for tests and users: `OPENIB_FAULT=<point>:<rank>[,<point>:<rank>...]` makes
//! that rank kill itself with SIGKILL when it reaches the named point, so each failure case can
//! be reproduced. Points: `before-put`, `after-put` (after the commit, before the fence),
//! `in-connect` (after starting its connections, before they finish).

/// Dies here (SIGKILL) if `OPENIB_FAULT` names `point` for `rank`.
pub fn point(point: &str, rank: u32) {
    let Ok(spec) = std::env::var("OPENIB_FAULT") else {
        return;
    };
    let hit = spec
        .split(',')
        .filter_map(|e| e.trim().split_once(':'))
        .any(|(p, r)| p == point && r.trim().parse() == Ok(rank));
    if hit {
        eprintln!("openib: OPENIB_FAULT: rank {rank} dies at {point}");
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    }
}
