//! [`PmixClient`]: one initialised PMIx client (`PMIx_Init` .. `PMIx_Finalize`).

use super::error::{Error, Result};
use super::event::{self, FailedSet, Registration};
use super::ffi as p;
use super::library::{library, version};
use super::op::{fence_done, get_done, Completion, FenceOp, GetOp, ValueOwnership};
use super::timeout_secs;
use super::value::{key_cstring, nspace_str, proc_of, InfoList, Value, RANK_WILDCARD};
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a non-blocking call may stay unanswered after its PMIx timeout expired before the
/// caller gives up on its own (the server ignored `PMIX_TIMEOUT`).
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(2);

/// Timeout of the job-level queries (size, hostnames, local peers): the server holds them from
/// the start, so they are local lookups.
const JOB_INFO_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a put value is visible (`pmix_scope_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `PMIX_LOCAL`: processes on this node only.
    Local,
    /// `PMIX_REMOTE`: processes on other nodes only.
    Remote,
    /// `PMIX_GLOBAL`: every process.
    Global,
}

impl Scope {
    fn raw(self) -> p::pmix_scope_t {
        (match self {
            Scope::Local => p::PMIX_LOCAL,
            Scope::Remote => p::PMIX_REMOTE,
            Scope::Global => p::PMIX_GLOBAL,
        }) as p::pmix_scope_t
    }
}

/// The processes a fence spans (all of this process's namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Procs<'a> {
    /// Every process of the job (`PMIX_RANK_WILDCARD`).
    All,
    /// Exactly these ranks, which must include this process (a fence over the survivors after a
    /// failure, issue 7). Every listed process must call the fence with the same list.
    Ranks(&'a [u32]),
}

/// Directives of [`PmixClient::fence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FenceOptions {
    /// `PMIX_COLLECT_DATA`: every committed value of every participant is delivered to every
    /// participant during the fence, so later gets are local. Without it (PMIx's default) the
    /// fence is a barrier and values are fetched on demand by get ("direct modex").
    pub collect: bool,
    /// `PMIX_TIMEOUT` (rounded up to whole seconds); `None` waits as long as the server does.
    pub timeout: Option<Duration>,
    /// Stop waiting, with [`Error::ParticipantDied`], as soon as a termination event names a
    /// participant and the fence has not completed (see [`PmixClient::fence_notify`]).
    pub leave_if_participant_dies: bool,
}

/// How often a fence waiting with [`FenceOptions::leave_if_participant_dies`] looks at the
/// failed set (the event handler does not wake it).
const DEATH_POLL: Duration = Duration::from_millis(5);

/// Where [`PmixClient::get`] may look for a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GetMode {
    /// PMIx's default: the local store, then the local server, which asks the host (the
    /// launcher) for a remote process's data and waits until that process has committed it, or
    /// until the timeout. A key nobody ever puts therefore ends in a timeout, not in
    /// "not found" (seen with Open MPI 4.1.4's mpirun): give a timeout.
    #[default]
    Wait,
    /// `PMIX_IMMEDIATE`: the local store and the local server only; never a request to the
    /// host, never waiting for a commit: `PMIX_ERR_NOT_FOUND` at once when the value is not
    /// there. Right after a collecting fence, when everything committed before it is local.
    Immediate,
    /// `PMIX_OPTIONAL`: this process's own store only ("do not request data from the server
    /// if not found"). On one node PMIx 4's shared-memory store holds every local peer's
    /// committed data, so this answers for them even without a collecting fence.
    Optional,
}

/// Directives of [`PmixClient::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GetOptions {
    pub mode: GetMode,
    /// `PMIX_TIMEOUT` (rounded up to whole seconds); `None` waits as long as the server does.
    pub timeout: Option<Duration>,
}

impl GetOptions {
    pub fn wait(timeout: Duration) -> Self {
        GetOptions {
            mode: GetMode::Wait,
            timeout: Some(timeout),
        }
    }
    pub fn immediate(timeout: Duration) -> Self {
        GetOptions {
            mode: GetMode::Immediate,
            timeout: Some(timeout),
        }
    }
}

/// A PMIx client: this process's identity in the job and the key-value exchange.
///
/// `Send + Sync`: every method may be called from any thread, concurrently (see the module
/// documentation). Dropping it calls `PMIx_Finalize` (reference-counted by libpmix).
pub struct PmixClient {
    lib: &'static p::PmixLib,
    me: p::pmix_proc_t,
    nspace: String,
    singleton: bool,
    init_status: i32,
    version: String,
    ownership: ValueOwnership,
    /// Peers PMIx reported terminated (filled by the event handler, event.rs).
    failed: Arc<FailedSet>,
    /// The termination event handler, or why it could not be registered (a PMIx status).
    events: std::result::Result<Registration, i32>,
}

impl fmt::Debug for PmixClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmixClient")
            .field("nspace", &self.nspace)
            .field("rank", &self.me.rank)
            .field("singleton", &self.singleton)
            .field("version", &self.version)
            .finish()
    }
}

impl PmixClient {
    /// `PMIx_Init`. Under a launcher it connects to the local PMIx server; started alone,
    /// PMIx answers `PMIX_ERR_UNREACH` with a filled-in singleton process, which is accepted as
    /// a job of size 1 ([`Self::is_singleton`]). Any other failure is an error.
    pub fn init() -> Result<Self> {
        let lib = library()?;
        let version = version().unwrap_or_default();
        let ownership = ownership_for(&version);
        let mut me = p::pmix_proc_t::default();
        // SAFETY: `me` is a valid pmix_proc_t to fill in; no info array (NULL, 0). PMIx_Init is
        // reference-counted and serialised by libpmix's global lock.
        let rc = unsafe { lib.PMIx_Init(&mut me, std::ptr::null_mut(), 0) };
        let singleton = match rc {
            0 => false,
            p::PMIX_ERR_UNREACH if me.nspace[0] != 0 && me.rank != p::PMIX_RANK_UNDEF => true,
            _ => {
                // SAFETY: PMIx_Initialized takes no arguments and may be called at any time.
                if unsafe { lib.PMIx_Initialized() } != 0 {
                    // PMIx counted this init even though it failed: balance it.
                    // SAFETY: no info array; PMIx is initialised (checked above).
                    unsafe { lib.PMIx_Finalize(std::ptr::null(), 0) };
                }
                let hint = if std::env::var_os("PMIX_NAMESPACE").is_some() {
                    "PMIX_NAMESPACE is set: is the launcher's PMIx server alive?"
                } else {
                    "no launcher environment (PMIX_NAMESPACE unset)"
                };
                return Err(Error::status_of(lib, "PMIx_Init", rc, hint));
            }
        };
        let nspace = nspace_str(&me.nspace);
        let failed = Arc::new(FailedSet::new(me.nspace, me.rank));
        let events = event::register(lib, &failed);
        if let Err(status) = events {
            tracing::warn!(
                status,
                "PMIx termination event handler not registered: failed() will not see dead peers"
            );
        }
        tracing::debug!(%nspace, rank = me.rank, singleton, %version, "PMIx initialised");
        Ok(PmixClient {
            lib,
            me,
            nspace,
            singleton,
            init_status: rc,
            version,
            ownership,
            failed,
            events,
        })
    }

    /// Started without a PMIx server: a job of size 1 served by this process alone.
    pub fn is_singleton(&self) -> bool {
        self.singleton
    }
    /// What `PMIx_Init` returned (0, or -25 for a singleton).
    pub fn init_status(&self) -> i32 {
        self.init_status
    }
    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }
    /// The job's namespace (`singleton.<host>.<pid>` for a singleton).
    pub fn namespace(&self) -> &str {
        &self.nspace
    }
    /// `PMIx_Get_version` of the loaded library.
    pub fn library_version(&self) -> &str {
        &self.version
    }

    /// The ranks of this job PMIx reported terminated (termination events: see
    /// [`event::TERMINATION_CODES`](super::TERMINATION_CODES)), ascending. A local snapshot.
    pub fn failed_ranks(&self) -> Vec<u32> {
        self.failed.ranks()
    }
    /// How many termination events the handler received.
    pub fn termination_events(&self) -> u64 {
        self.failed.events()
    }
    /// Whether the termination event handler is registered (`Err(status)` when PMIx refused it
    /// or did not confirm within 5 s).
    pub fn events_registered(&self) -> std::result::Result<(), i32> {
        self.events.as_ref().map(|_| ()).map_err(|&s| s)
    }

    /// `PMIX_JOB_SIZE`: the number of processes of the job.
    pub fn job_size(&self) -> Result<u32> {
        let v = self.get_raw(
            RANK_WILDCARD,
            p::PMIX_JOB_SIZE,
            GetOptions::wait(JOB_INFO_TIMEOUT),
        )?;
        v.as_unsigned()
            .and_then(|u| u32::try_from(u).ok())
            .ok_or_else(|| v.wrong("PMIx_Get", "pmix.job.size", "uint32"))
    }
    /// `PMIX_HOSTNAME` of this process.
    pub fn hostname(&self) -> Result<String> {
        self.hostname_of(self.me.rank)
    }
    /// `PMIX_HOSTNAME` of `rank`: the node it runs on.
    pub fn hostname_of(&self, rank: u32) -> Result<String> {
        match self.get_raw(rank, p::PMIX_HOSTNAME, GetOptions::wait(JOB_INFO_TIMEOUT))? {
            Value::String(s) => Ok(s),
            other => Err(other.wrong("PMIx_Get", "pmix.hname", "string")),
        }
    }
    /// `PMIX_LOCAL_PEERS`: the ranks of this job on this node, ascending (this one included).
    pub fn local_peers(&self) -> Result<Vec<u32>> {
        match self.get_raw(
            RANK_WILDCARD,
            p::PMIX_LOCAL_PEERS,
            GetOptions::wait(JOB_INFO_TIMEOUT),
        )? {
            Value::String(s) => parse_rank_list(&s).ok_or_else(|| Error::InvalidArgument {
                call: "PMIx_Get",
                what: format!("pmix.lpeers is not a rank list: {s:?}"),
            }),
            other => Err(other.wrong("PMIx_Get", "pmix.lpeers", "string")),
        }
    }
    /// `PMIX_LOCAL_RANK`: this process's rank among the job's processes on this node.
    pub fn local_rank(&self) -> Result<u16> {
        let v = self.get_raw(
            self.me.rank,
            p::PMIX_LOCAL_RANK,
            GetOptions::wait(JOB_INFO_TIMEOUT),
        )?;
        v.as_unsigned()
            .and_then(|u| u16::try_from(u).ok())
            .ok_or_else(|| v.wrong("PMIx_Get", "pmix.lrank", "uint16"))
    }

    /// `PMIx_Put(scope, key, value as PMIX_BYTE_OBJECT)`. PMIx copies the bytes before
    /// returning; they reach the server at [`Self::commit`].
    pub fn put(&self, scope: Scope, key: &str, value: &[u8]) -> Result<()> {
        let ckey = key_cstring("PMIx_Put", key)?;
        let mut val = p::pmix_value_t {
            type_: p::PMIX_BYTE_OBJECT as p::pmix_data_type_t,
            ..Default::default()
        };
        val.data.bo = p::pmix_byte_object_t {
            bytes: if value.is_empty() {
                std::ptr::null_mut()
            } else {
                value.as_ptr() as *mut std::ffi::c_char
            },
            size: value.len(),
        };
        // SAFETY: `ckey` is NUL-terminated and at most PMIX_MAX_KEYLEN long; `val` is a byte
        // object pointing at `value.len()` readable bytes (or NULL, 0). PMIx_Put only reads
        // them: it copies the value into its own store (thread-shifted, waited for) before it
        // returns, so the borrow outlives the use.
        let rc = unsafe { self.lib.PMIx_Put(scope.raw(), ckey.as_ptr(), &mut val) };
        self.check("PMIx_Put", rc, || {
            format!("key {key:?}, {} bytes, {scope:?}", value.len())
        })
    }

    /// `PMIx_Commit`: sends every value put so far to the local server.
    pub fn commit(&self) -> Result<()> {
        // SAFETY: no arguments; PMIx is initialised for the life of `self`.
        let rc = unsafe { self.lib.PMIx_Commit() };
        self.check("PMIx_Commit", rc, String::new)
    }

    /// `PMIx_Fence` over `procs`, with `PMIX_COLLECT_DATA` and `PMIX_TIMEOUT` from `opts`.
    /// Every participant must call it. A timeout is an error with [`Error::is_timeout`]; PMIx
    /// does not say who was missing.
    pub fn fence(&self, procs: Procs<'_>, opts: FenceOptions) -> Result<()> {
        self.fence_notify(procs, opts, || {})
    }

    /// [`Self::fence`], calling `issued` once this process's contribution is handed to PMIx
    /// (`PMIx_Fence_nb` accepted it) and before waiting for the others: the point "inside the
    /// fence" of the fault injection (issue 7). Not called when PMIx refused or completed the
    /// fence at once.
    ///
    /// With [`FenceOptions::leave_if_participant_dies`], the wait ends with
    /// [`Error::ParticipantDied`] once the failed set ([`Self::failed_ranks`]) names a
    /// participant while the fence is still pending. Why leaving is safe, i.e. why that fence
    /// can no longer complete successfully for anybody: it could only if the server had
    /// decided its success before the participant died, and then the server sent the fence's
    /// reply before the termination event, on the same connection; this client's progress
    /// thread runs the reply's callback before the event handler, and the wait reads the
    /// failed set before it looks at the result one last time. This holds for a server that
    /// fails every fence whose participant is dead when the last contribution arrives
    /// (libpmix's own handling of a lost client, tests/pmix_server/) and that raises the event
    /// only after the death; it is an assumption about the launcher, not a PMIx guarantee.
    /// The pending fence stays allocated until PMIx calls back (its failure or timeout).
    pub fn fence_notify(
        &self,
        procs: Procs<'_>,
        opts: FenceOptions,
        issued: impl FnOnce(),
    ) -> Result<()> {
        let (list, what) = match procs {
            Procs::All => (
                vec![proc_of(&self.me.nspace, RANK_WILDCARD)],
                "all ranks".to_string(),
            ),
            Procs::Ranks(ranks) => {
                if ranks.is_empty() {
                    return Err(Error::InvalidArgument {
                        call: "PMIx_Fence",
                        what: "empty process list".into(),
                    });
                }
                let list = ranks.iter().map(|&r| proc_of(&self.me.nspace, r)).collect();
                (list, format!("ranks {}", short_list(ranks)))
            }
        };
        let mut info = InfoList::default();
        if opts.collect {
            info.push_bool(p::PMIX_COLLECT_DATA, true);
        }
        if let Some(t) = opts.timeout {
            info.push_int(p::PMIX_TIMEOUT, timeout_secs(t));
        }
        let context = || {
            format!(
                "{what}, collect={}, timeout={:?}",
                opts.collect, opts.timeout
            )
        };
        if self.singleton {
            // PMIx_Fence_nb refuses a singleton (UNREACH); the blocking call returns at once.
            // SAFETY: `list` and `info` are valid arrays of their lengths for the whole call.
            let rc = unsafe {
                self.lib
                    .PMIx_Fence(list.as_ptr(), list.len(), info.as_ptr(), info.len())
            };
            return self.check("PMIx_Fence", rc, context);
        }
        let op = Arc::new(FenceOp {
            procs: list,
            info,
            done: Completion::new(),
        });
        let cbdata = Arc::into_raw(Arc::clone(&op)) as *mut c_void;
        // SAFETY: the arrays live in `op`, which the reference in `cbdata` keeps alive until
        // fence_done runs; fence_done matches pmix_op_cbfunc_t and takes that reference back.
        let rc = unsafe {
            self.lib.PMIx_Fence_nb(
                op.procs.as_ptr(),
                op.procs.len(),
                op.info.as_ptr(),
                op.info.len(),
                Some(fence_done),
                cbdata,
            )
        };
        if rc != 0 {
            // Refused (or done at once): PMIx will not call back, take the reference back.
            // SAFETY: `cbdata` came from Arc::into_raw above and PMIx did not keep it.
            drop(unsafe { Arc::from_raw(cbdata as *const FenceOp) });
            if rc == p::PMIX_OPERATION_SUCCEEDED {
                return Ok(());
            }
            return Err(Error::status_of(self.lib, "PMIx_Fence_nb", rc, context()));
        }
        issued();
        let (deadline, waited) = backstop(opts.timeout);
        let participants: Option<&[u32]> = match procs {
            Procs::All => None,
            Procs::Ranks(r) => Some(r),
        };
        loop {
            let slice = if opts.leave_if_participant_dies {
                let next = Instant::now() + DEATH_POLL;
                Some(deadline.map_or(next, |d| d.min(next)))
            } else {
                deadline
            };
            if let Some(status) = op.done.wait(slice) {
                return self.check("PMIx_Fence", status, context);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Backstop {
                    call: "PMIx_Fence",
                    context: context(),
                    waited,
                });
            }
            // Read the failed set first, then the result once more (see above).
            let dead: Vec<u32> = self
                .failed_ranks()
                .into_iter()
                .filter(|r| participants.is_none_or(|p| p.contains(r)))
                .collect();
            if dead.is_empty() {
                continue;
            }
            if let Some(status) = op.done.wait(Some(Instant::now())) {
                return self.check("PMIx_Fence", status, context);
            }
            return Err(Error::ParticipantDied {
                call: "PMIx_Fence",
                context: context(),
                ranks: dead,
            });
        }
    }

    /// `PMIx_Get(rank, key)` with the mode and timeout of `opts`. Values put by
    /// [`Self::put`] come back as [`Value::Bytes`]; this process's own keys are readable right
    /// after put.
    pub fn get(&self, rank: u32, key: &str, opts: GetOptions) -> Result<Value> {
        let ckey = key_cstring("PMIx_Get", key)?;
        let op = self.start_get(rank, ckey, opts)?;
        self.finish_get(&op, opts)
    }

    /// [`Self::get`] of a byte object.
    pub fn get_bytes(&self, rank: u32, key: &str, opts: GetOptions) -> Result<Vec<u8>> {
        let v = self.get(rank, key, opts)?;
        match v {
            Value::Bytes(b) => Ok(b),
            other => Err(other.wrong("PMIx_Get", key, "byte object")),
        }
    }

    /// `key` of every rank in `ranks`, all requested at once (non-blocking gets) and waited for
    /// with one deadline: the on-demand modex fetches many peers without paying one round trip
    /// each. Results are in the order of `ranks`.
    pub fn get_many(&self, ranks: &[u32], key: &str, opts: GetOptions) -> Vec<Result<Value>> {
        let ckey = match key_cstring("PMIx_Get", key) {
            Ok(k) => k,
            Err(e) => return ranks.iter().map(|_| Err(e.clone())).collect(),
        };
        let ops: Vec<Result<Arc<GetOp>>> = ranks
            .iter()
            .map(|&r| self.start_get(r, ckey.clone(), opts))
            .collect();
        ops.into_iter()
            .map(|op| op.and_then(|op| self.finish_get(&op, opts)))
            .collect()
    }

    fn get_raw(&self, rank: u32, key: &'static [u8], opts: GetOptions) -> Result<Value> {
        let ckey = CStr::from_bytes_with_nul(key)
            .map(CStr::to_owned)
            .map_err(|_| Error::InvalidArgument {
                call: "PMIx_Get",
                what: "attribute name without NUL".into(),
            })?;
        let op = self.start_get(rank, ckey, opts)?;
        self.finish_get(&op, opts)
    }

    fn start_get(&self, rank: u32, key: CString, opts: GetOptions) -> Result<Arc<GetOp>> {
        let mut info = InfoList::default();
        match opts.mode {
            GetMode::Wait => {}
            GetMode::Immediate => info.push_bool(p::PMIX_IMMEDIATE, true),
            GetMode::Optional => info.push_bool(p::PMIX_OPTIONAL, true),
        }
        if let Some(t) = opts.timeout {
            info.push_int(p::PMIX_TIMEOUT, timeout_secs(t));
        }
        let op = Arc::new(GetOp {
            proc_: proc_of(&self.me.nspace, rank),
            key,
            info,
            lib: self.lib,
            ownership: self.ownership,
            done: Completion::new(),
        });
        let cbdata = Arc::into_raw(Arc::clone(&op)) as *mut c_void;
        // SAFETY: the process, key and info array live in `op`, kept alive by the reference in
        // `cbdata` until get_done runs (PMIx 4 reads `info` after returning, on its progress
        // thread); get_done matches pmix_value_cbfunc_t and takes that reference back.
        let rc = unsafe {
            self.lib.PMIx_Get_nb(
                &op.proc_,
                op.key.as_ptr(),
                op.info.as_ptr(),
                op.info.len(),
                Some(get_done),
                cbdata,
            )
        };
        if rc != 0 {
            // SAFETY: refused, so PMIx will not call back: take back the reference.
            drop(unsafe { Arc::from_raw(cbdata as *const GetOp) });
            return Err(Error::status_of(
                self.lib,
                "PMIx_Get_nb",
                rc,
                get_context(&op, opts),
            ));
        }
        Ok(op)
    }

    fn finish_get(&self, op: &GetOp, opts: GetOptions) -> Result<Value> {
        let (deadline, waited) = backstop(opts.timeout);
        match op.done.wait(deadline) {
            Some(Ok(v)) => Ok(v),
            Some(Err(status)) => Err(Error::status_of(
                self.lib,
                "PMIx_Get",
                status,
                get_context(op, opts),
            )),
            None => Err(Error::Backstop {
                call: "PMIx_Get",
                context: get_context(op, opts),
                waited,
            }),
        }
    }

    fn check(&self, call: &'static str, rc: i32, context: impl FnOnce() -> String) -> Result<()> {
        if rc == 0 || rc == p::PMIX_OPERATION_SUCCEEDED {
            Ok(())
        } else {
            Err(Error::status_of(self.lib, call, rc, context()))
        }
    }
}

impl Drop for PmixClient {
    fn drop(&mut self) {
        if let Ok(reg) = std::mem::replace(&mut self.events, Err(0)) {
            event::deregister(self.lib, reg);
        }
        // Pending non-blocking calls own their memory (op.rs), so finalizing under them is safe.
        // SAFETY: this client's PMIx_Init succeeded (or made a singleton), so one
        // PMIx_Finalize is owed; no info array.
        let rc = unsafe { self.lib.PMIx_Finalize(std::ptr::null(), 0) };
        if rc != 0 {
            tracing::warn!(rc, "PMIx_Finalize failed");
        }
    }
}

fn ownership_for(version: &str) -> ValueOwnership {
    // "OpenPMIx 4.2.2, repo rev: ..." (older: "PMIx 3.2.3 ...").
    let major = version
        .split_whitespace()
        .find_map(|w| w.split('.').next()?.parse::<u32>().ok());
    match major {
        Some(3 | 4) => ValueOwnership::Callback,
        Some(m) if m >= 5 => ValueOwnership::Library,
        _ => ValueOwnership::Unknown,
    }
}

fn backstop(timeout: Option<Duration>) -> (Option<Instant>, Duration) {
    match timeout {
        None => (None, Duration::MAX),
        Some(t) => {
            let waited = Duration::from_secs(timeout_secs(t) as u64) + BACKSTOP_GRACE;
            (Some(Instant::now() + waited), waited)
        }
    }
}

fn get_context(op: &GetOp, opts: GetOptions) -> String {
    let rank = if op.proc_.rank == RANK_WILDCARD {
        "the job".to_string()
    } else {
        format!("rank {}", op.proc_.rank)
    };
    format!(
        "key {:?} of {rank}, {:?}, timeout={:?}",
        op.key.to_string_lossy(),
        opts.mode,
        opts.timeout
    )
}

fn short_list(ranks: &[u32]) -> String {
    if ranks.len() <= 16 {
        format!("{ranks:?}")
    } else {
        format!("{:?}.. ({} ranks)", &ranks[..16], ranks.len())
    }
}

/// Parses PMIx's rank lists: "0,1,2" (and, defensively, ranges "0-3,8").
pub(crate) fn parse_rank_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 1 << 24 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists() {
        assert_eq!(parse_rank_list("0"), Some(vec![0]));
        assert_eq!(parse_rank_list("3,1,2"), Some(vec![1, 2, 3]));
        assert_eq!(parse_rank_list("0-2,7"), Some(vec![0, 1, 2, 7]));
        assert_eq!(parse_rank_list(""), Some(vec![]));
        assert_eq!(parse_rank_list("a"), None);
        assert_eq!(parse_rank_list("3-1"), None);
    }

    #[test]
    fn ownership_by_version() {
        assert_eq!(
            ownership_for("OpenPMIx 4.2.2, repo rev: v4.2.2"),
            ValueOwnership::Callback
        );
        assert_eq!(
            ownership_for("PMIx 3.2.3 (Mar 2021)"),
            ValueOwnership::Callback
        );
        assert_eq!(ownership_for("OpenPMIx 5.0.1"), ValueOwnership::Library);
        assert_eq!(ownership_for("mystery"), ValueOwnership::Unknown);
    }

    #[test]
    fn timeouts_round_up() {
        assert_eq!(timeout_secs(Duration::from_millis(1)), 1);
        assert_eq!(timeout_secs(Duration::ZERO), 1);
        assert_eq!(timeout_secs(Duration::from_secs(2)), 2);
        assert_eq!(timeout_secs(Duration::from_millis(2500)), 3);
    }
}
