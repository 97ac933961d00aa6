//! Shared by the tests of the Open MPI component `oib` (tests/ompi_oib.rs on the host,
//! tests/softroce_ompi_oib.rs in the SoftRoCE guest): building it with scripts/build-oib, the
//! MPI test program, and a clean environment for Open MPI's commands.
#![allow(dead_code)]

use crate::prereq::Unmet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn runs(prog: &str, arg: &str) -> bool {
    Command::new(prog)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What the component's build needs, as the script checks it (mpicc, btl.h in its includes).
pub fn have_ompi_dev() -> Result<(), Unmet> {
    let missing = |why: &str| Unmet::Missing(format!("{why} (install libopenmpi-dev)"));
    let o = Command::new("mpicc")
        .arg("--showme:incdirs")
        .output()
        .map_err(|e| missing(&format!("mpicc cannot run: {e}")))?;
    if !o.status.success() {
        return Err(missing("mpicc --showme:incdirs failed"));
    }
    let dirs = String::from_utf8_lossy(&o.stdout).to_string();
    if !dirs
        .split_whitespace()
        .any(|d| Path::new(d).join("opal/mca/btl/btl.h").is_file())
    {
        return Err(missing(&format!(
            "Open MPI's opal/mca/btl/btl.h is not in {}",
            dirs.trim()
        )));
    }
    Ok(())
}

/// `scripts/build-oib`'s mca_btl_oib.so, built once for every test of this file.
pub fn component() -> Result<PathBuf, Unmet> {
    static SO: OnceLock<Result<PathBuf, Unmet>> = OnceLock::new();
    SO.get_or_init(|| {
        have_ompi_dev()?;
        let o = Command::new(root().join("scripts/build-oib"))
            .arg("--quiet")
            .output()
            .map_err(|e| Unmet::Broken(format!("scripts/build-oib cannot run: {e}")))?;
        let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !o.status.success() || out.is_empty() {
            return Err(Unmet::Broken(format!(
                "scripts/build-oib failed ({:?}): {}{}",
                o.status,
                out,
                String::from_utf8_lossy(&o.stderr)
            )));
        }
        Ok(PathBuf::from(out))
    })
    .clone()
}

/// A command with the environment of a clean job: no inherited OPENIB_/PMIX_/OMPI_ variable,
/// root allowed, and the component's directory before Open MPI's own.
pub fn ompi_cmd(prog: &str, so: &Path) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENIB_") || k.starts_with("PMIX_") || k.starts_with("OMPI_") {
            c.env_remove(k);
        }
    }
    let dir = so.parent().expect("the .so has a directory");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env(
            "OMPI_MCA_mca_base_component_path",
            format!("{}:SYS_DEFAULT", dir.display()),
        );
    c
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

/// `tests/c/<name>.c` compiled with mpicc (and `flags`) into cargo's scratch directory for
/// tests (under target/, which the SoftRoCE guest sees; its /tmp is its own).
fn mpicc(name: &str, flags: &[&str]) -> Result<PathBuf, Unmet> {
    let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    mpicc_linked(name, &flags, &[])
}

/// tests/c/`name`.c compiled with mpicc into the test's scratch directory (c99 and warnings as
/// errors; `flags` after those, so a later `-std=` wins), `libs` after the source.
pub fn mpicc_linked(name: &str, flags: &[String], libs: &[String]) -> Result<PathBuf, Unmet> {
    have_ompi_dev()?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ompi_oib");
    std::fs::create_dir_all(&dir).map_err(|e| Unmet::Broken(format!("{dir:?}: {e}")))?;
    let exe = dir.join(name);
    // Compiled under a name of its own, then renamed: test binaries, and the tests of one
    // binary, may compile the same program at once (under the process id alone, two tests
    // of one binary renamed each other's file away).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.{}.{n}", std::process::id()));
    let o = Command::new("mpicc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(root().join(format!("tests/c/{name}.c")))
        .args(libs)
        .output()
        .map_err(|e| Unmet::Broken(format!("mpicc cannot run: {e}")))?;
    if !o.status.success() {
        let (out, err) = text(&o);
        return Err(Unmet::Broken(format!(
            "mpicc tests/c/{name}.c failed: {out}{err}"
        )));
    }
    std::fs::rename(&tmp, &exe).map_err(|e| Unmet::Broken(format!("{exe:?}: {e}")))?;
    Ok(exe)
}

/// tests/c/ompi_hello.c, compiled once per test process.
pub fn hello() -> Result<PathBuf, Unmet> {
    static EXE: OnceLock<Result<PathBuf, Unmet>> = OnceLock::new();
    EXE.get_or_init(|| mpicc("ompi_hello", &["-O1"])).clone()
}

/// tests/c/ompi_large.c (1 MiB to 64 MiB, the RDMA path), compiled once per test process.
pub fn large() -> Result<PathBuf, Unmet> {
    static EXE: OnceLock<Result<PathBuf, Unmet>> = OnceLock::new();
    EXE.get_or_init(|| mpicc("ompi_large", &["-O1"])).clone()
}

/// tests/c/ompi_matrix.c (subtests by argv, checks in tests/c/mpi_check.h), compiled once per
/// test process.
pub fn matrix() -> Result<PathBuf, Unmet> {
    static EXE: OnceLock<Result<PathBuf, Unmet>> = OnceLock::new();
    EXE.get_or_init(|| mpicc("ompi_matrix", &["-O2", "-pthread"]))
        .clone()
}

/// How many (rank, peer, oib module) sends Open MPI's BML set up: its "Using oib btl for send
/// to" lines (`btl_base_verbose` 10), one per ordered pair of ranks and oib module.
pub fn oib_send_btls(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("mca: bml: Using oib btl for send to"))
        .count()
}

/// A job of tests/c/ompi_matrix.c run at `btl_base_verbose 10` with only `self,oib`: every rank
/// made its oib module ("btl: oib: one module (rank R of N"), and Open MPI says it sends to
/// every peer through oib (one "Using oib btl for send to" per ordered pair of ranks).
pub fn assert_over_oib(name: &str, text: &str, n: u32) {
    for r in 0..n {
        assert!(
            text.contains(&format!("btl: oib: one module (rank {r} of {n}")),
            "{name}: rank {r} made no oib module (component not loaded?):\n{text}"
        );
    }
    let via_oib = oib_send_btls(text);
    assert_eq!(
        via_oib,
        (n * (n - 1)) as usize,
        "{name}: ob1 did not pick oib for every peer:\n{text}"
    );
}

/// A job of tests/c/ompi_matrix.c: over oib ([`assert_over_oib`], checked first), no check
/// failed, every rank passed every subtest named. The caller checks the job's exit status.
pub fn assert_matrix_ran(name: &str, text: &str, n: u32, subtests: &[&str]) {
    // First: a job that could not load the component fails naming that.
    assert_over_oib(name, text, n);
    assert!(
        !text.contains("ompi_matrix: FAIL"),
        "{name}: a check failed:\n{text}"
    );
    for s in subtests {
        for r in 0..n {
            assert!(
                text.contains(&format!("ompi_matrix: {s} rank {r} of {n} ok")),
                "{name}: rank {r} did not pass {s}:\n{text}"
            );
        }
    }
}

/// One rank's oib RDMA counters from its finalize line (`btl_base_verbose` 5): "btl: oib: rank
/// R: rdma: X registrations, P puts (PB bytes), G gets (GB bytes), A atomics".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaCounts {
    pub registrations: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    pub atomics: u64,
}

/// The [`RdmaCounts`] rank `rank` printed in `text`, if it printed them.
pub fn rdma_counts(text: &str, rank: u32) -> Option<RdmaCounts> {
    let head = format!("btl: oib: rank {rank}: rdma: ");
    let line = text
        .lines()
        .find_map(|l| l.split_once(&head).map(|(_, t)| t))?;
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("digits"))
        .collect();
    (n.len() == 6).then(|| RdmaCounts {
        registrations: n[0],
        puts: n[1],
        put_bytes: n[2],
        gets: n[3],
        get_bytes: n[4],
        atomics: n[5],
    })
}
