//! The one-machine Slurm cluster of `scripts/slurm` for the srun tests (tests/slurm.rs): started
//! once per test process with [`cluster`] (`scripts/slurm up --nodes 2` under `<target>/slurm`,
//! idempotent: a cluster already up as asked is reused, and left running; `scripts/slurm down`
//! stops it, as scripts/test does at its end), and [`Cluster::srun`] commands whose waits are
//! all bounded. Slurm not installed, or not root, is a missing prerequisite (a failure under
//! CI, a loud skip elsewhere: tests/common/prereq.rs); a cluster that does not come up is a
//! failure everywhere, with the script's message (which names the log to read).
//!
//! The including file declares the module `prereq` (tests/common/prereq.rs).
#![allow(dead_code)]

use crate::prereq::{self, Unmet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The emulated nodes of the test cluster (n1, n2), each with [`CPUS`] configured CPUs.
pub const NODES: u32 = 2;
/// CPUs per node: enough for 8 ranks on one node (Slurm counts the configured ones).
pub const CPUS: u32 = 8;

/// A running cluster: what a client must be told.
pub struct Cluster {
    /// `SLURM_CONF` for every client command.
    pub conf: PathBuf,
    /// The directory of its config, state and logs.
    pub dir: PathBuf,
}

fn found(program: &str) -> bool {
    let in_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    in_path || Path::new("/usr/sbin").join(program).is_file()
}

/// `Err(Unmet::Missing)` naming what is not installed of Slurm and munge.
pub fn installed() -> Result<(), Unmet> {
    let missing: Vec<&str> = ["srun", "sinfo", "slurmctld", "slurmd", "munged", "mungekey"]
        .into_iter()
        .filter(|p| !found(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Unmet::Missing(format!(
        "Slurm is not installed ({} not found; scripts/setup installs slurmd slurmctld \
         slurm-client munge)",
        missing.join(", ")
    )))
}

fn start() -> Result<Cluster, Unmet> {
    installed()?;
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if uid != "0" {
        return Err(Unmet::Missing(format!(
            "scripts/slurm starts munged and slurmd as root; this test runs as uid {uid}"
        )));
    }
    let exe = std::env::current_exe().map_err(|e| Unmet::Broken(format!("test path: {e}")))?;
    // <target>/<profile>/deps/<test>
    let dir = exe
        .ancestors()
        .nth(3)
        .ok_or_else(|| Unmet::Broken("no target directory".into()))?
        .join("slurm");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm");
    let o = Command::new(&script)
        .args([
            "up",
            "--nodes",
            &NODES.to_string(),
            "--cpus",
            &CPUS.to_string(),
        ])
        .arg("--dir")
        .arg(&dir)
        .args(["--wait", "120"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Unmet::Broken(format!("cannot run {}: {e}", script.display())))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    let conf = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export SLURM_CONF="))
        .map(PathBuf::from);
    match conf {
        Some(conf) if o.status.success() => Ok(Cluster { conf, dir }),
        _ => Err(Unmet::Broken(format!(
            "scripts/slurm up failed ({}):\n{}{stdout}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ))),
    }
}

/// The cluster (started on first use), or `None` after a skip (tests/common/prereq.rs).
pub fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Result<Cluster, Unmet>> = OnceLock::new();
    match CLUSTER.get_or_init(start) {
        Ok(c) => Some(c),
        Err(e) => prereq::require::<()>(Err(e.clone())).and(None),
    }
}

/// One job at a time from this process: the jobs of parallel tests would wait for each
/// other's CPUs (bounded by `--immediate`, but a failure then), and the machine has few cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// `srun --mpi=pmix -N nodes -n np --ntasks-per-node np/nodes`, with the bounds: resources
    /// within 60 s or fail (`--immediate`), the rest of the step at most 30 s after a first task
    /// ends (`--wait`), and the step killed when a task exits non-zero. Its environment has no
    /// inherited `SLURM_*` (an enclosing job's), `OPENIB_*`, `PMIX_*` or `OMPI_*`, and this
    /// cluster's `SLURM_CONF`. Append the program and its arguments.
    pub fn srun(&self, mpi: &str, nodes: u32, np: u32) -> Command {
        let mut c = Command::new("srun");
        for (k, _) in std::env::vars() {
            if k.starts_with("SLURM_")
                || k.starts_with("OPENIB_")
                || k.starts_with("PMIX_")
                || k.starts_with("OMPI_")
            {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", &self.conf)
            .arg(format!("--mpi={mpi}"))
            .args(["--immediate=60", "--wait=30", "--kill-on-bad-exit=1"])
            .args(["-N", &nodes.to_string(), "-n", &np.to_string()])
            .args(["--ntasks-per-node", &np.div_ceil(nodes).to_string()]);
        c
    }
}

/// What a bounded run gave.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    /// Everything, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd`, killing it after `deadline` (then panics with what it printed): nothing here
/// may hang.
pub fn run_bounded(mut cmd: Command, deadline: Duration) -> Ran {
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let err_t = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if t0.elapsed() > deadline {
            // srun cancels its step on SIGTERM; SIGKILL only if that does not end it.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let t1 = Instant::now();
            while child.try_wait().ok().flatten().is_none()
                && t1.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not finish within {deadline:?}; stdout:\n{}\nstderr:\n{}",
                out_t.join().unwrap_or_default(),
                err_t.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ran {
        code,
        took: t0.elapsed(),
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}
