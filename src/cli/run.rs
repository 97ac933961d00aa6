//! `openib run -n N [--nodes M] -- PROGRAM ARGS...`: the embedded launcher.

use super::exit;
use crate::runtime::embedded::{node_names, JobSpec, Server};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Number of processes.
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub np: u32,
    /// Split the ranks into this many emulated nodes (contiguous blocks of ranks).
    #[arg(long, default_value_t = 1, value_name = "M")]
    pub nodes: u32,
    /// A topology fixture per emulated node (comma-separated, one per node, or one for all):
    /// each process gets OPENIB_FIXTURE set to its node's file.
    #[arg(long, value_name = "LIST")]
    pub fixture_per_node: Option<String>,
    /// An environment variable for one rank only: RANK:NAME=VALUE (repeatable), e.g.
    /// 1:OPENIB_IF_INCLUDE=mlx5_0:2 for a per-process port choice.
    #[arg(long = "rank-env", value_name = "RANK:NAME=VALUE")]
    pub rank_env: Vec<String>,
    /// Binding of the ranks to CPUs. `none` (default): the kernel places them. `core`: when -n
    /// is at most the CPUs this launcher may use, each rank runs only on one of them (the last
    /// N, rank order), so busy-polling ranks are never placed on one CPU; with more ranks than
    /// CPUs nothing is bound.
    #[arg(long = "bind-to", value_enum, default_value_t = BindTo::None, value_name = "WHAT")]
    pub bind_to: BindTo,
    /// Kill the job after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// The program and its arguments.
    #[arg(required = true, value_name = "PROGRAM")]
    pub program: Vec<String>,
}

/// `openib run --bind-to`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindTo {
    Core,
    None,
}

/// The CPU of each rank under `bind`: the last `np` of `allowed`, so that a job smaller than
/// the machine leaves the first CPUs (where the system's housekeeping and interrupts tend to
/// run) to others; `None` when nothing is bound (not asked, more ranks than `allowed` CPUs,
/// or no CPU known).
fn rank_cpus(bind: BindTo, np: u32, allowed: &[usize]) -> Option<Vec<usize>> {
    (bind == BindTo::Core && !allowed.is_empty() && np as usize <= allowed.len())
        .then(|| allowed[allowed.len() - np as usize..].to_vec())
}

/// Parses `RANK:NAME=VALUE`.
fn parse_rank_env(s: &str, np: u32) -> Result<(u32, String, String), String> {
    let bad =
        || format!("--rank-env {s:?}: expected RANK:NAME=VALUE, e.g. 1:OPENIB_IF_INCLUDE=mlx5_0");
    let (rank, rest) = s.split_once(':').ok_or_else(bad)?;
    let (name, value) = rest.split_once('=').ok_or_else(bad)?;
    let rank: u32 = rank.parse().map_err(|_| bad())?;
    if rank >= np {
        return Err(format!(
            "--rank-env {s:?}: rank {rank} is not below -n {np}"
        ));
    }
    if name.is_empty() {
        return Err(bad());
    }
    Ok((rank, name.to_string(), value.to_string()))
}

pub fn run(a: &RunArgs) -> i32 {
    if a.np == 0 {
        eprintln!("openib run: -n must be at least 1");
        return exit::USAGE;
    }
    if a.nodes == 0 || a.nodes > a.np {
        eprintln!(
            "openib run: --nodes {} must be between 1 and -n {}",
            a.nodes, a.np
        );
        return exit::USAGE;
    }
    let mut rank_env = Vec::new();
    for s in &a.rank_env {
        match parse_rank_env(s, a.np) {
            Ok(e) => rank_env.push(e),
            Err(e) => {
                eprintln!("openib run: {e}");
                return exit::USAGE;
            }
        }
    }
    let fixtures: Vec<String> = a
        .fixture_per_node
        .as_deref()
        .map(|l| l.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    if !(fixtures.is_empty() || fixtures.len() == 1 || fixtures.len() == a.nodes as usize) {
        eprintln!(
            "openib run: --fixture-per-node has {} entries; give one, or one per node ({})",
            fixtures.len(),
            a.nodes
        );
        return exit::USAGE;
    }
    let nodes = node_names(a.np, a.nodes, &crate::runtime::singleton::hostname());
    let node_index: Vec<usize> = {
        let mut idx = Vec::new();
        let mut last: Option<&String> = None;
        let mut i = 0usize;
        for n in &nodes {
            if last.is_some_and(|l| l != n) {
                i += 1;
            }
            last = Some(n);
            idx.push(i);
        }
        idx
    };
    let server = match Server::start(
        JobSpec {
            nodes: nodes.clone(),
        },
        None,
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("openib run: cannot start the runtime server: {e}");
            return exit::ERROR;
        }
    };
    let allowed = openib_sys::affinity::allowed_cpus().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read this process's CPUs: the ranks are not bound");
        Vec::new()
    });
    let cpus = rank_cpus(a.bind_to, a.np, &allowed);
    match &cpus {
        Some(c) => tracing::info!(cpus = ?c, "rank R runs on the R-th of these CPUs"),
        None if a.bind_to == BindTo::Core => tracing::info!(
            ranks = a.np,
            cpus = allowed.len(),
            "more ranks than CPUs: not binding"
        ),
        None => {}
    }
    let mut children: Vec<(u32, Child)> = Vec::new();
    for rank in 0..a.np {
        let mut cmd = Command::new(&a.program[0]);
        cmd.args(&a.program[1..]);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PMIX_") {
                cmd.env_remove(&k);
            }
        }
        for (k, v) in server.env_for(rank) {
            cmd.env(k, v);
        }
        if !fixtures.is_empty() {
            let f = if fixtures.len() == 1 {
                &fixtures[0]
            } else {
                &fixtures[node_index[rank as usize]]
            };
            cmd.env("OPENIB_FIXTURE", f);
        }
        for (r, k, v) in &rank_env {
            if *r == rank {
                cmd.env(k, v);
            }
        }
        let bound = match &cpus {
            Some(c) => openib_sys::affinity::bind_command(&mut cmd, c[rank as usize]),
            None => Ok(()),
        };
        match bound.and_then(|()| cmd.spawn()) {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                eprintln!(
                    "openib run: cannot start {:?} for rank {rank}: {e}",
                    a.program[0]
                );
                for (_, c) in children.iter_mut() {
                    let _ = c.kill();
                }
                return exit::ERROR;
            }
        }
    }
    let deadline = a
        .timeout
        .map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
    let mut worst = 0i32;
    let mut running = children;
    // Sleeps until a child exits or the deadline passes (a 10 ms polling loop here woke the
    // launcher 100 times a second, which steals the CPU of polling ranks on small machines).
    let exits = ExitNotifier::start();
    while !running.is_empty() {
        let mut still = Vec::new();
        for (rank, mut c) in running {
            match c.try_wait() {
                Ok(Some(st)) => {
                    let code = exit_code(&st);
                    server.process_exited(rank, code == 0);
                    if code != 0 {
                        // One write: the children share this stderr.
                        let line = format!(
                            "openib run: rank {rank} (pid {}) {}\n",
                            c.id(),
                            describe(&st)
                        );
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                        worst = worst.max(code);
                    }
                }
                Ok(None) => still.push((rank, c)),
                Err(e) => {
                    eprintln!("openib run: waiting for rank {rank}: {e}");
                    worst = worst.max(1);
                }
            }
        }
        running = still;
        if deadline.is_some_and(|d| Instant::now() > d) && !running.is_empty() {
            let ranks: Vec<u32> = running.iter().map(|(r, _)| *r).collect();
            eprintln!(
                "openib run: timeout after {} s; killing rank(s) {ranks:?}",
                a.timeout.unwrap_or(0.0)
            );
            for (_, c) in running.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return 124;
        }
        if !running.is_empty() {
            exits.wait(deadline);
        }
    }
    worst
}

/// Wakes the launcher when one of its children has exited. A thread blocks in `waitid` with
/// `WNOWAIT` (the child stays a zombie, so `Child::try_wait` still reaps it and reads its
/// status) and reports each exit; it waits for the launcher's reaping before it looks again.
struct ExitNotifier {
    exited: std::sync::mpsc::Receiver<()>,
    reaped: std::sync::mpsc::SyncSender<()>,
}

impl ExitNotifier {
    fn start() -> ExitNotifier {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        let (exited_tx, exited) = std::sync::mpsc::sync_channel(1);
        let (reaped, reaped_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let spawned = std::thread::Builder::new()
            .name("openib-run-wait".into())
            .spawn(move || loop {
                match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    // ECHILD (no child left) or anything else: the launcher polls from now on.
                    Err(_) => return,
                }
                if exited_tx.send(()).is_err() || reaped_rx.recv().is_err() {
                    return;
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "no exit-notifier thread; polling for exits");
        }
        ExitNotifier { exited, reaped }
    }

    /// Waits for a child's exit, at most until `deadline`, and at most 1 s when the notifier
    /// has gone (then this is a slow poll). Call only with children still running.
    fn wait(&self, deadline: Option<Instant>) {
        // The zombie reported last time has been reaped by now: let the thread look again.
        let _ = self.reaped.try_send(());
        let mut limit = Duration::from_secs(1);
        if let Some(d) = deadline {
            limit = limit.min(d.saturating_duration_since(Instant::now()));
        }
        match self.exited.recv_timeout(limit) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(limit.min(Duration::from_millis(10)))
            }
        }
    }
}

fn exit_code(st: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn describe(st: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_rank_env, rank_cpus, BindTo};

    #[test]
    fn ranks_are_bound_one_per_cpu_when_they_fit() {
        assert_eq!(rank_cpus(BindTo::Core, 2, &[0, 1, 2, 3]), Some(vec![2, 3]));
        assert_eq!(rank_cpus(BindTo::Core, 2, &[0, 1]), Some(vec![0, 1]));
        assert_eq!(rank_cpus(BindTo::Core, 2, &[4, 6]), Some(vec![4, 6]));
        assert_eq!(rank_cpus(BindTo::Core, 3, &[0, 1]), None);
        assert_eq!(rank_cpus(BindTo::Core, 1, &[]), None);
        assert_eq!(rank_cpus(BindTo::None, 2, &[0, 1, 2]), None);
    }

    #[test]
    fn rank_env_parses_and_checks_the_rank() {
        assert_eq!(
            parse_rank_env("1:A=b=c", 2).unwrap(),
            (1, "A".into(), "b=c".into())
        );
        assert!(parse_rank_env("2:A=b", 2)
            .unwrap_err()
            .contains("not below"));
        assert!(parse_rank_env("x:A=b", 2).is_err());
        assert!(parse_rank_env("1:=b", 2).is_err());
        assert!(parse_rank_env("1:A", 2).is_err());
    }
}
