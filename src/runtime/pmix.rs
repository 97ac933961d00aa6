//! The PMIx backend: a [`Runtime`] over libpmix, under Open MPI's `mpirun` or Slurm's
//! `srun --mpi=pmix` (all FFI is in `openib_sys::pmix`; see docs/RUNTIME.md, "PMIx").
//!
//! - Identity comes from PMIx, not from guesses: rank, `PMIX_JOB_SIZE`, `PMIX_HOSTNAME` (the
//!   node), `PMIX_LOCAL_PEERS` and `PMIX_LOCAL_RANK` (0 = the node leader).
//! - Started with no launcher (`OPENIB_RUNTIME=pmix`), PMIx makes a singleton: a job of size 1.
//! - `fence(collect)` is `PMIx_Fence` over every process with `PMIX_COLLECT_DATA`; after a
//!   collecting fence every value committed before it is local, so `get` asks with
//!   `PMIX_IMMEDIATE` and a key nobody put is [`RuntimeError::NotFound`] at once. After a
//!   non-collecting fence (the on-demand modex) `get` fetches from the peer's server and waits
//!   for it up to the timeout: a key nobody put is then [`RuntimeError::GetTimeout`].
//! - Timeouts are whole seconds in PMIx (rounded up). PMIx does not say who is missing when a
//!   fence times out; to name them anyway each process puts a small arrival mark
//!   (`openib.fence.<set>.<n>`, 4 bytes) before each fence, and after a timeout the ranks whose
//!   mark cannot be fetched within [`MARK_PROBE_TIMEOUT`] are reported as missing
//!   ([`PmixOptions::name_missing`]).
//! - `failed()` is what the client's PMIx termination event handler recorded (the source, or
//!   the affected processes, of `PMIX_ERR_PROC_ABORTED`, `PMIX_EVENT_PROC_TERMINATED`, ...).
//!   A fence or get that fails while that set names one of its peers fails with
//!   [`RuntimeError::PeerFailed`] naming them; a get of a known-dead rank only looks locally
//!   (`PMIX_IMMEDIATE`: what it committed before a collecting fence is still there) instead of
//!   waiting on it. Open MPI 4.1.4's mpirun never delivers those events (docs/RUNTIME.md);
//!   tests/pmix_faults.rs runs a small PMIx server that does (tests/pmix_server/).
//! - After a failure the next fence runs over the survivors only, and the survivors agree on
//!   the failed set ([`Runtime::fence_agrees_on_failures`]): see [`PmixRuntime`]'s `fence`.

use super::group::{Group, ProcSet};
use super::{JobInfo, Result, Runtime, RuntimeError, Scope};
use openib_sys::pmix::{self, FenceOptions, GetMode, GetOptions, PmixClient, Procs};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long, after a fence timed out, the arrival marks of the participants are waited for.
pub const MARK_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long, after a fence attempt failed, `fence` waits for a termination event naming a
/// participant it did not know dead (the server fails the fence and announces the death
/// separately; the two may arrive in either order). Without such an event the error stands.
pub const EVENT_WAIT: Duration = Duration::from_secs(2);

/// The shortest PMIx timeout a retried fence attempt is given (PMIx counts whole seconds).
const MIN_ATTEMPT: Duration = Duration::from_secs(1);

const BACKEND: &str = "pmix";

/// Settings of the PMIx backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmixOptions {
    /// Put an arrival mark before each fence so that a fence timeout can name the ranks that
    /// never arrived. Costs one 4-byte put per fence, which makes the commit before the fence a
    /// real message to the server: about +0.5 ms per fence at 2 ranks, +2 ms at 8, +5 ms at 16
    /// on one 2-core host (docs/RUNTIME.md). Irrelevant to the modex's one or two fences; turn
    /// it off for barrier-heavy use. Default: on ([`MARKS_ENV`]).
    pub name_missing: bool,
}

/// Setting (a bool, src/config/table.rs): `0`, `off`, `no` or `false` turns the fence arrival marks
/// off; `1`, `on`, `yes`, `true` or unset leaves them on; anything else is an error.
pub const MARKS_ENV: &str = "OPENIB_PMIX_FENCE_MARKS";

impl Default for PmixOptions {
    fn default() -> Self {
        PmixOptions { name_missing: true }
    }
}

impl PmixOptions {
    /// The defaults, with [`MARKS_ENV`] applied; a malformed value is an error naming it.
    pub fn from_env() -> std::result::Result<Self, crate::config::ConfigError> {
        Ok(PmixOptions {
            name_missing: crate::config::bool(MARKS_ENV)?,
        })
    }
}

/// A [`Runtime`] served by the launcher's PMIx server.
pub struct PmixRuntime {
    client: PmixClient,
    info: JobInfo,
    options: PmixOptions,
    /// The last fence completed with data collection: committed values are all local.
    collected: AtomicBool,
    /// Fences entered so far, per participant set (for the arrival marks).
    epochs: Mutex<HashMap<String, u32>>,
    /// The ranks left out of the last fence that completed: every participant of that fence
    /// fenced over the same list, so every survivor holds the same set.
    agreed: Mutex<Vec<u32>>,
    /// Fences entered so far (the `in-fence` fault point fires in the first).
    #[cfg(feature = "fault-injection")]
    fences: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PmixRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixRuntime")
            .field("client", &self.client)
            .field("info", &self.info)
            .finish()
    }
}

fn backend_err(e: pmix::Error) -> RuntimeError {
    RuntimeError::Backend {
        backend: BACKEND,
        what: e.to_string(),
    }
}

impl PmixRuntime {
    /// `PMIx_Init` and the job-level queries, with [`PmixOptions::from_env`].
    pub fn init() -> Result<PmixRuntime> {
        let options = PmixOptions::from_env().map_err(|e| RuntimeError::Backend {
            backend: BACKEND,
            what: e.to_string(),
        })?;
        Self::with_options(options)
    }

    pub fn with_options(options: PmixOptions) -> Result<PmixRuntime> {
        let client = PmixClient::init().map_err(backend_err)?;
        let rank = client.rank();
        let size = client.job_size().map_err(backend_err)?;
        let node = client.hostname().map_err(backend_err)?;
        let local_rank = u32::from(client.local_rank().map_err(backend_err)?);
        let local_peers = client.local_peers().map_err(backend_err)?;
        if rank >= size || !local_peers.contains(&rank) || local_rank as usize >= local_peers.len()
        {
            return Err(RuntimeError::Backend {
                backend: BACKEND,
                what: format!(
                    "inconsistent job data from PMIx: rank {rank}, job size {size}, local rank \
                     {local_rank}, local peers {local_peers:?}"
                ),
            });
        }
        if local_peers.iter().position(|&r| r == rank) != Some(local_rank as usize) {
            // PMIx numbers local ranks itself; the leader is its local rank 0 either way.
            tracing::debug!(
                rank,
                local_rank,
                ?local_peers,
                "PMIx local rank is not the index in local peers"
            );
        }
        tracing::debug!(
            rank, size, %node, local_rank, singleton = client.is_singleton(),
            nspace = client.namespace(), "PMIx runtime up"
        );
        Ok(PmixRuntime {
            info: JobInfo {
                rank,
                size,
                node,
                local_rank,
                local_peers,
                backend: BACKEND.into(),
            },
            client,
            options,
            collected: AtomicBool::new(false),
            epochs: Mutex::new(HashMap::new()),
            agreed: Mutex::new(Vec::new()),
            #[cfg(feature = "fault-injection")]
            fences: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The PMIx client underneath (namespace, singleton state, raw get modes).
    pub fn client(&self) -> &PmixClient {
        &self.client
    }

    /// Started without a PMIx server (`PMIx_Init` answered -25 with a singleton process).
    pub fn is_singleton(&self) -> bool {
        self.client.is_singleton()
    }

    fn fence_over(&self, ranks: Option<&[u32]>, collect: bool, timeout: Duration) -> Result<()> {
        let mark = if self.options.name_missing && !self.client.is_singleton() {
            let key = self.next_mark_key(ranks);
            let epoch = key
                .rsplit('.')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            self.client
                .put(pmix::Scope::Global, &key, &epoch.to_le_bytes())
                .map_err(backend_err)?;
            Some(key)
        } else {
            None
        };
        self.client.commit().map_err(backend_err)?;
        // Until this fence completes, what is local is not known.
        self.collected.store(false, Ordering::SeqCst);
        let procs = match ranks {
            None => Procs::All,
            Some(r) => Procs::Ranks(r),
        };
        let opts = FenceOptions {
            collect,
            timeout: Some(timeout),
            leave_if_participant_dies: true,
        };
        let participants: Vec<u32> = match ranks {
            None => (0..self.info.size).collect(),
            Some(r) => r.to_vec(),
        };
        #[cfg(feature = "fault-injection")]
        let issued = {
            let rank = self.info.rank;
            let first = self.fences.fetch_add(1, Ordering::SeqCst) == 0;
            move || {
                if first {
                    crate::fault::point("in-fence", rank);
                }
            }
        };
        #[cfg(not(feature = "fault-injection"))]
        let issued = || {};
        match self.client.fence_notify(procs, opts, issued) {
            Ok(()) => {
                self.collected.store(collect, Ordering::SeqCst);
                Ok(())
            }
            Err(e) if !self.failed_among(&participants).is_empty() => {
                // A participant is known dead: that is why the fence failed.
                let ranks = self.failed_among(&participants);
                tracing::debug!(error = %e, ?ranks, "PMIx fence failed with dead participants");
                Err(RuntimeError::PeerFailed { ranks })
            }
            Err(e) if e.is_timeout() => {
                let missing = match &mark {
                    Some(key) => self.ranks_without_mark(&participants, key),
                    None => {
                        tracing::warn!(
                            "PMIx fence timed out; PMIx does not say who is missing (arrival \
                             marks are off)"
                        );
                        Vec::new()
                    }
                };
                tracing::debug!(error = %e, ?missing, "PMIx fence timed out");
                Err(RuntimeError::FenceTimeout { timeout, missing })
            }
            Err(e) => Err(backend_err(e)),
        }
    }

    /// `openib.fence.<set>.<n>`: the n-th fence this process enters over that set.
    fn next_mark_key(&self, ranks: Option<&[u32]>) -> String {
        let set = match ranks {
            None => "all".to_string(),
            Some(r) => format!(
                "{:016x}",
                Group::new(self.info.size, ProcSet::Ranks(r), &[]).hash()
            ),
        };
        let mut epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
        let n = epochs.entry(set.clone()).or_insert(0);
        *n += 1;
        format!("openib.fence.{set}.{n}")
    }

    /// The participants (other than this one) whose arrival mark `key` cannot be fetched
    /// within [`MARK_PROBE_TIMEOUT`]: they did not reach the fence.
    fn ranks_without_mark(&self, participants: &[u32], key: &str) -> Vec<u32> {
        let others: Vec<u32> = participants
            .iter()
            .copied()
            .filter(|&r| r != self.info.rank)
            .collect();
        let results = self
            .client
            .get_many(&others, key, GetOptions::wait(MARK_PROBE_TIMEOUT));
        others
            .into_iter()
            .zip(results)
            .filter(|(_, r)| r.is_err())
            .map(|(rank, _)| rank)
            .collect()
    }

    /// The known-dead ranks among `ranks`, ascending.
    fn failed_among(&self, ranks: &[u32]) -> Vec<u32> {
        self.client
            .failed_ranks()
            .into_iter()
            .filter(|r| ranks.contains(r))
            .collect()
    }

    /// Whether PMIx accepted the termination event handler that feeds [`Runtime::failed`]
    /// (`Err(status)` if not).
    pub fn events_registered(&self) -> std::result::Result<(), i32> {
        self.client.events_registered()
    }

    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.info.size {
            Err(RuntimeError::BadRank {
                rank,
                size: self.info.size,
            })
        } else {
            Ok(())
        }
    }
}

impl PmixRuntime {
    /// The ranks this process knows dead: its detector and what earlier fences agreed.
    fn known_dead(&self) -> Vec<u32> {
        let mut dead = self.client.failed_ranks();
        dead.extend(self.agreed.lock().unwrap_or_else(|e| e.into_inner()).iter());
        dead
    }

    /// Waits until the detector names a rank outside `known`, up to `until`; returns whether
    /// it did.
    fn wait_for_news(&self, known: &[u32], until: Instant) -> bool {
        loop {
            if self
                .client
                .failed_ranks()
                .iter()
                .any(|r| !known.contains(r))
            {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(5)));
        }
    }
}

impl Runtime for PmixRuntime {
    fn info(&self) -> &JobInfo {
        &self.info
    }

    fn node_of(&self, rank: u32) -> Result<String> {
        self.check_rank(rank)?;
        if rank == self.info.rank {
            return Ok(self.info.node.clone());
        }
        self.client.hostname_of(rank).map_err(backend_err)
    }

    fn put(&self, scope: Scope, key: &str, value: &[u8]) -> Result<()> {
        let scope = match scope {
            Scope::Local => pmix::Scope::Local,
            Scope::Remote => pmix::Scope::Remote,
            Scope::Global => pmix::Scope::Global,
        };
        self.client.put(scope, key, value).map_err(backend_err)
    }

    fn commit(&self) -> Result<()> {
        self.client.commit().map_err(backend_err)
    }

    /// Over every process while none is known dead; then over the survivors only (an explicit
    /// process list, [`Group::survivors`] of the detector snapshot), so the job goes on without
    /// the dead.
    ///
    /// Agreement: a PMIx fence over an explicit list completes only when every listed process
    /// called it with that same list (the server matches fences by their process list), so
    /// when it completes every participant left out the same ranks: that set is
    /// [`Runtime::agreed_failed`], the same on every survivor. A survivor that has not seen a
    /// death yet fences over a larger list, which includes the dead rank and so fails at the
    /// server (a server that knows the rank is dead fails it; otherwise at the timeout); it
    /// then waits up to [`EVENT_WAIT`] for the termination event and tries again over the
    /// survivors it now knows, until an attempt completes or `timeout` (for the whole call)
    /// has passed. A participant that learns of a death while waiting leaves the fence at once
    /// ([`FenceOptions::leave_if_participant_dies`]). Each attempt gets the time left (at
    /// least 1 s), so the call returns within about `timeout` + 1 s +
    /// [`pmix::BACKSTOP_GRACE`] + [`MARK_PROBE_TIMEOUT`]. Without termination events (mpirun
    /// 4.1.4) this is one attempt, as before.
    fn fence(&self, collect: bool, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let group = Group::new(self.info.size, ProcSet::All, &self.known_dead());
            let survivors = group.survivors();
            let attempt = deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_ATTEMPT);
            let result = if group.failed().is_empty() {
                self.fence_over(None, collect, attempt)
            } else {
                tracing::debug!(dead = ?group.failed(), "PMIx fence over the survivors");
                self.fence_over(Some(&survivors), collect, attempt)
            };
            let e = match result {
                Ok(()) => {
                    *self.agreed.lock().unwrap_or_else(|e| e.into_inner()) =
                        group.failed().to_vec();
                    return Ok(());
                }
                Err(e) => e,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(e);
            }
            if !self.wait_for_news(group.failed(), (now + EVENT_WAIT).min(deadline)) {
                return Err(e);
            }
            tracing::debug!(error = %e, "PMIx fence failed; a participant died: again over the survivors");
        }
    }

    fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.check_rank(rank)?;
        let dead = self.client.failed_ranks().contains(&rank);
        let mode = if dead || self.collected.load(Ordering::SeqCst) {
            GetMode::Immediate
        } else {
            GetMode::Wait
        };
        let opts = GetOptions {
            mode,
            timeout: Some(timeout),
        };
        match self.client.get(rank, key, opts) {
            Ok(v) => {
                let kind = v.kind();
                v.into_bytes().ok_or_else(|| RuntimeError::Backend {
                    backend: BACKEND,
                    what: format!("key {key:?} of rank {rank} holds a {kind}, not bytes"),
                })
            }
            Err(e) if dead || self.client.failed_ranks().contains(&rank) => {
                tracing::debug!(error = %e, rank, key, "PMIx get of a dead rank failed");
                Err(RuntimeError::PeerFailed { ranks: vec![rank] })
            }
            Err(e) if e.is_not_found() => Err(RuntimeError::NotFound {
                rank,
                key: key.to_string(),
            }),
            Err(e) if e.is_timeout() => Err(RuntimeError::GetTimeout {
                rank,
                key: key.to_string(),
                timeout,
            }),
            Err(e) => Err(backend_err(e)),
        }
    }

    fn failed(&self) -> Vec<u32> {
        self.client.failed_ranks()
    }

    fn agreed_failed(&self) -> Vec<u32> {
        self.agreed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A completed fence is an agreement on who is left out of it (see `fence`).
    fn fence_agrees_on_failures(&self) -> bool {
        true
    }

    /// A fence over exactly `ranks` (which must include this process; every listed process
    /// calls it with the same list), e.g. the survivors after a failure: PMIx_Fence with
    /// their list.
    fn fence_ranks(&self, ranks: &[u32], collect: bool, timeout: Duration) -> Result<()> {
        let mut set: Vec<u32> = ranks.to_vec();
        set.sort_unstable();
        set.dedup();
        if let Some(&bad) = set.iter().find(|&&r| r >= self.info.size) {
            return Err(RuntimeError::BadRank {
                rank: bad,
                size: self.info.size,
            });
        }
        if !set.contains(&self.info.rank) {
            return Err(RuntimeError::Backend {
                backend: BACKEND,
                what: format!(
                    "fence over {set:?} must include this rank ({})",
                    self.info.rank
                ),
            });
        }
        self.fence_over(Some(&set), collect, timeout)
    }
}
