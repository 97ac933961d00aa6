//! Fail-stop ranks during the modex exchange under a PMIx server that delivers process
//! termination events (issue 7). Debian's mpirun 4.1.4 delivers none and there is no PRRTE, so
//! the server is tests/pmix_server/pmix_test_server.c (libpmix's server API), compiled here
//! with `cc` into the target directory. Without cc or libpmix-dev the tests fail under CI and
//! are skipped with a `SKIPPED:` line elsewhere (tests/common/prereq.rs); a server that does
//! not compile fails them everywhere.
//!
//! Each case: `pmix_test_server -n 8 -- openib modex exchange --json` with
//! `OPENIB_FAULT=<point>:<victims>`, one or two victims, 20 runs (the victims rotate, rank 0
//! among them). Checks: the server saw exactly the victims killed by SIGKILL and every other
//! rank exit 0 (whether its `PMIx_Finalize` reached the server is counted, not checked: see
//! docs/RUNTIME.md); every survivor says the same failed set, the victims;
//! the lowest survivor's JSON lists exactly the survivors under the "pmix" backend and
//! `"failed"` = the victims; the run ends within [`HANG_BOUND`] (a run takes about 0.5 s
//! here, debug build). The cases and the checks they share with tests/modex_fault.rs are in
//! tests/common/fault_cases.rs; here is what the server adds (its exit status and per-rank
//! endings).

#[path = "common/fault_cases.rs"]
mod fault_cases;
#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "common/prereq.rs"]
mod prereq;
#[path = "common/victims.rs"]
mod victims;

use prereq::Unmet;

use fault_cases::{bin, one_run, Launcher, Outcome, HANG_BOUND, NP};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A run is killed after this (it counts as hung from [`HANG_BOUND`]).
const KILL_AFTER: Duration = Duration::from_secs(90);

/// Survivors that exited 0 but whose `PMIx_Finalize` never reached the server (counted and
/// printed, not a failure: see [`PmixServer::check_endings`]).
static UNFINALIZED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Compiles the test server once into `<target>/pmix_test_server` with `$CC` (default `cc`)
/// and `pkg-config pmix`. No compiler or no libpmix-dev is a missing prerequisite (a failure
/// under CI, a loud skip elsewhere: tests/common/prereq.rs); a server that does not compile is
/// always a failure, with the compiler's output.
fn server() -> Option<&'static Path> {
    static SERVER: OnceLock<Result<PathBuf, Unmet>> = OnceLock::new();
    let built = SERVER.get_or_init(|| {
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", "pmix"])
            .output()
            .map_err(|e| {
                Unmet::Missing(format!(
                    "cannot run pkg-config ({e}) to find libpmix-dev; scripts/setup installs both"
                ))
            })?;
        if !flags.status.success() {
            return Err(Unmet::Missing(format!(
                "`pkg-config --cflags --libs pmix` failed (libpmix-dev missing? scripts/setup \
                 installs it): {}",
                String::from_utf8_lossy(&flags.stderr)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }
        let flags = String::from_utf8_lossy(&flags.stdout).to_string();
        let exe = std::env::current_exe()
            .map_err(|e| Unmet::Broken(format!("test executable path: {e}")))?;
        // <target>/<profile>/deps/pmix_faults-<hash>
        let target = exe
            .ancestors()
            .nth(3)
            .ok_or_else(|| Unmet::Broken("no target directory".into()))?
            .to_path_buf();
        let out = target.join("pmix_test_server");
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pmix_server/pmix_test_server.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-O1", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .args(flags.split_whitespace())
            .output()
            .map_err(|e| {
                Unmet::Missing(format!(
                    "cannot run the C compiler `{cc}` ({e}); scripts/setup installs it"
                ))
            })?;
        if !o.status.success() {
            return Err(Unmet::Broken(format!(
                "the PMIx test server does not compile: `{cc} {}` failed ({}):\n{}",
                src.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            )));
        }
        Ok(out)
    });
    match built {
        Ok(p) => Some(p.as_path()),
        Err(e) => prereq::require::<()>(Err(e.clone())).and(None),
    }
}

/// Builds `examples/pmix_probe` into the target dir and profile of this test binary.
fn probe() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.ancestors().nth(2).expect("target/<profile>");
    let target_dir = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "--quiet", "--example", "pmix_probe"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("cargo build").success(),
        "cargo build --example pmix_probe failed"
    );
    profile_dir.join("examples").join("pmix_probe")
}

/// `pmix_test_server -n 8 -t 60 -- openib modex exchange --json ... [--mode M]`, killed after
/// [`KILL_AFTER`].
struct PmixServer(&'static Path);

/// The launcher, or `None` (a skip, said on stderr) when the server's prerequisites are missing
/// outside CI.
fn pmix() -> Option<PmixServer> {
    server().map(PmixServer)
}

impl Launcher for PmixServer {
    const TEST: &'static str = "pmix_faults";
    const BACKEND: &'static str = "pmix";
    const EMULATES_NODES: bool = false;

    fn launch(&self, fault: Option<&str>, mode: Option<&str>, _nodes: u32) -> Outcome {
        let mut c = Command::new(self.0);
        fault_cases::clean_env(&mut c);
        if let Some(f) = fault {
            c.env("OPENIB_FAULT", f);
        }
        c.args(["-n", &NP.to_string(), "-t", "60", "--"])
            .arg(bin())
            .args(fault_cases::exchange_args());
        if let Some(m) = mode {
            c.args(["--mode", m]);
        }
        let t0 = Instant::now();
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pmix_test_server");
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let out_t = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
        let err_t = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
        let code = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s.code();
            }
            if t0.elapsed() > KILL_AFTER {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "OPENIB_FAULT={fault:?}: hung, killed after {KILL_AFTER:?}; stderr:\n{}",
                    err_t.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Outcome {
            code,
            took: t0.elapsed(),
            stdout: out_t.join().unwrap_or_default(),
            stderr: err_t.join().unwrap_or_default(),
        }
    }

    fn check_endings(&self, o: &Outcome, dead: &[u32], ctx: &str) {
        // 3: some ranks were killed, every other one exited 0; 0: every rank exited 0.
        assert_eq!(o.code, Some(if dead.is_empty() { 0 } else { 3 }), "{ctx}");
        let ends = endings(&o.stderr, ctx);
        assert_eq!(ends.len(), NP as usize, "one ending per rank: {ctx}");
        for (rank, how) in &ends {
            if dead.contains(rank) {
                assert_eq!(how, "killed by signal 9", "rank {rank}: {ctx}");
            } else if how == "exited with status 0 without PMIx_Finalize" {
                // libpmix 4.2.2: the client's finalize did not reach the server within its 2 s
                // (docs/RUNTIME.md); the rank still exited 0.
                UNFINALIZED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            } else {
                assert_eq!(how, "exited with status 0", "rank {rank}: {ctx}");
            }
        }
    }

    fn note(&self) -> String {
        format!(
            " ({} survivor(s) so far in this binary exited 0 without their PMIx_Finalize \
             reaching the server)",
            UNFINALIZED.load(std::sync::atomic::Ordering::Relaxed)
        )
    }
}

/// What the server said of each rank: `(rank, "killed by signal 9")` or `(rank, "exited with
/// status 0")`.
fn endings(stderr: &str, ctx: &str) -> Vec<(u32, String)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("pmix_test_server: rank "))
        .filter(|l| l.contains("(pid "))
        .map(|l| {
            let rank = l
                .split_whitespace()
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("garbled line {l:?}: {ctx}"));
            let how = l
                .split_once(") ")
                .map(|(_, h)| h.to_string())
                .unwrap_or_default();
            (rank, how)
        })
        .collect()
}

/// One case of tests/common/fault_cases.rs under the server (a skip when it cannot be built
/// outside CI).
fn under_the_server(point: &str, two: bool) {
    let Some(l) = pmix() else { return };
    fault_cases::case(&l, point, two);
}

#[test]
fn no_failure_exchanges_every_rank() {
    let Some(l) = pmix() else { return };
    one_run(&l, "before-put", &[], None, 1);
}

#[test]
fn one_rank_dies_before_its_put() {
    under_the_server("before-put", false);
}

#[test]
fn two_ranks_die_before_their_put() {
    under_the_server("before-put", true);
}

#[test]
fn one_rank_dies_after_its_put() {
    under_the_server("after-put", false);
}

#[test]
fn two_ranks_die_after_their_put() {
    under_the_server("after-put", true);
}

#[test]
fn one_rank_dies_inside_the_fence() {
    under_the_server("in-fence", false);
}

#[test]
fn two_ranks_die_inside_the_fence() {
    under_the_server("in-fence", true);
}

/// The per-process and on-demand modes (one fence, then a second, non-collecting one): every
/// point in each run, modes and victim counts rotating.
#[test]
fn other_modes() {
    let Some(l) = pmix() else { return };
    fault_cases::other_modes(&l, "other modes");
}

/// The server's own behaviour the cases rely on: a rank killed after a first fence is
/// announced to the others, and a fence naming it fails at once instead of hanging.
#[test]
fn server_announces_a_death_and_fails_fences_naming_it() {
    let Some(server) = server() else { return };
    let probe = probe();
    let t0 = Instant::now();
    let o = Command::new(server)
        .args(["-n", "4", "-t", "60", "--"])
        .arg(&probe)
        .args(["--kill", "2", "--kill-wait", "10"])
        .output()
        .expect("run the probe");
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let ctx = format!(
        "{:?} in {took:?}\nstdout: {stdout}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(3), "{ctx}");
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect();
    let ranks: BTreeSet<u64> = lines.iter().map(|l| l["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, BTreeSet::from([0, 1, 3]), "{ctx}");
    for l in &lines {
        assert_eq!(l["events_registered"], true, "{ctx}");
        assert_eq!(l["failed_after"], serde_json::json!([2]), "{ctx}");
        // The event arrives well within the 10 s the probe waits for it.
        assert!(l["failed_seen_ms"].as_f64().unwrap() < 5000.0, "{ctx}");
        // Knowing rank 2 dead, the next fence runs over the survivors and completes.
        assert_eq!(l["after_kill_fence"], "Ok", "{ctx}");
    }
    assert!(took < HANG_BOUND, "{ctx}");
}

/// The prerequisite rule (tests/common/prereq.rs), on this file's own test run as a child
/// process: no C compiler fails it under CI and skips it with a `SKIPPED:` line elsewhere; a
/// compiler that fails (as on a compile error in tests/pmix_server/) fails it either way.
#[test]
fn a_missing_or_failing_compiler_never_passes_silently() {
    let pc = Command::new("pkg-config")
        .args(["--exists", "pmix"])
        .status()
        .is_ok_and(|s| s.success());
    if !prereq::have(
        pc,
        "pkg-config finds no pmix (scripts/setup installs libpmix-dev)",
    ) {
        return;
    }
    let child = |ci: bool, cc: &str| {
        let mut c = Command::new(std::env::current_exe().expect("test executable path"));
        c.args(["--exact", "no_failure_exchanges_every_rank"])
            .env("CC", cc)
            .env("RUST_BACKTRACE", "0");
        if ci {
            c.env("CI", "true");
        } else {
            c.env_remove("CI");
        }
        let o = c.output().expect("run this test binary");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), text)
    };
    let (ok, text) = child(true, "/nonexistent/cc");
    assert!(!ok, "CI, no compiler: must fail\n{text}");
    assert!(
        text.contains("prerequisite missing for no_failure_exchanges_every_rank: cannot run the C compiler `/nonexistent/cc`"),
        "{text}"
    );
    let (ok, text) = child(false, "/nonexistent/cc");
    assert!(ok, "no CI, no compiler: a skip\n{text}");
    assert!(
        text.contains("SKIPPED: no_failure_exchanges_every_rank: cannot run the C compiler"),
        "{text}"
    );
    // `false` runs and exits 1: what a compile error looks like.
    for ci in [false, true] {
        let (ok, text) = child(ci, "false");
        assert!(!ok, "CI {ci}, compile error: must fail\n{text}");
        assert!(
            text.contains("the PMIx test server does not compile"),
            "{text}"
        );
    }
}
