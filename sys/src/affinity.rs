//! CPU binding of the processes a launcher starts (`openib run --bind-to`).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

const SET_BYTES: usize = std::mem::size_of::<libc::cpu_set_t>();
const SET_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPUs this process may run on (its affinity mask), ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain data (all zero: the empty set); the kernel writes at most
    // `SET_BYTES` into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, SET_BYTES, &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every index is below CPU_SETSIZE.
    Ok((0..SET_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Makes the process `cmd` starts run only on `cpu`, from before it executes its program (so
/// every thread it starts inherits the binding). Spawning fails if the kernel refuses the CPU.
pub fn bind_command(cmd: &mut Command, cpu: usize) -> io::Result<()> {
    if cpu >= SET_CPUS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is past the largest affinity set ({SET_CPUS} CPUs)"),
        ));
    }
    // SAFETY: as above; `cpu` is below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure runs in the forked child before exec; it only calls
    // sched_setaffinity (a system call, async-signal-safe) on a set built before the fork, and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, SET_BYTES, &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_child_runs_on_its_cpu_only() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let cpu = *cpus.last().unwrap();
        let mut cmd = Command::new("grep");
        cmd.args(["^Cpus_allowed_list", "/proc/self/status"]);
        bind_command(&mut cmd, cpu).unwrap();
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
        assert!(bind_command(&mut Command::new("true"), SET_CPUS).is_err());
    }
}
