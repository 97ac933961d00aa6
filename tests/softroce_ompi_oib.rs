//! The Open MPI component `oib` carrying an MPI job's bytes on rxe0, in the SoftRoCE guest:
//! `mpirun -np N --mca pml ob1 --mca btl self,oib` (N = 2, 3, 4) runs tests/c/ompi_hello.c (blocking
//! exchanges of 0 B to 4 MiB, 64 non-blocking messages up to 40 KB outstanding at once each
//! way, a barrier and an allreduce; every byte checked by the receiver). With only `self` and
//! `oib`, every byte between ranks goes through oib: Open MPI's own verbose lines say
//! that ob1 chose oib for the peer, and the component that it made its module.
//!
//! The matrix (`matrix_*`, tests/c/ompi_matrix.c with tests/c/mpi_check.h): point-to-point from
//! 0 B to 64 MiB, 256 operations in flight per peer, MPI_ANY_SOURCE and probe, collectives,
//! MPI_THREAD_MULTIPLE with 4 threads per rank, MPI_Abort and a rank killed mid-exchange
//! (the job ends before its timeout), with 2 and 4 ranks under mpirun and under
//! `srun --mpi=pmix` (scripts/slurm in the guest). Across two guests: tests/softroce_slurm_hosts.rs.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/ompi.rs"]
mod ompi;
#[path = "common/slurm.rs"]
mod slurm;
use harness::prereq;

#[test]
fn mpirun_self_oib_exchanges_checked_messages_with_2_3_and_4_ranks() {
    if harness::skip_guest("softroce_ompi_oib") {
        return;
    }
    let Some(so) = prereq::require(ompi::component()) else {
        return;
    };
    let Some(exe) = prereq::require(ompi::hello()) else {
        return;
    };
    let dir = so.parent().expect("dir").display().to_string();
    // np2-lazy: connections made on first use (both ranks send first in the ring of two);
    // np3, np4: connected in btl_init (btl_oib_connect_at_init, the default);
    // np3-lazy, np3-lazy-oob: a ring of 3 connected on first use, where rank 2's first message
    // goes to rank 0 before rank 0 sends to it: the higher rank starts the connection (udcm,
    // oob). Before Wireup::connect_to_send it hung (the lower rank alone started connections).
    let cases: [(&str, u32, &str); 5] = [
        ("np2-lazy", 2, "--mca btl_oib_connect_at_init 0"),
        ("np3", 3, ""),
        ("np4", 4, ""),
        ("np3-lazy", 3, "--mca btl_oib_connect_at_init 0"),
        (
            "np3-lazy-oob",
            3,
            "--mca btl_oib_connect_at_init 0 --mca btl_oib_cpc_include oob",
        ),
    ];
    let mut script = format!("export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT\n");
    for (name, n, extra) in cases {
        script.push_str(&format!(
            "echo '=== {name}'; timeout 200 mpirun --oversubscribe -np {n} --mca pml ob1 \
             --mca btl self,oib --mca btl_base_verbose 10 {extra} {exe} 2>&1; \
             echo \"exit $?\"\n",
            exe = exe.display()
        ));
    }
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "800"], &["sh", "-c", &script]);
    for (name, n, _) in cases {
        let text = harness::section(&out, name).unwrap_or_else(|| panic!("no {name}: {out}"));
        assert!(text.contains("exit 0"), "{name}: mpirun failed:\n{text}");
        for r in 0..n {
            assert!(
                text.contains(&format!("ompi_hello: rank {r} of {n} ok")),
                "{name}: rank {r} did not finish its checked exchanges:\n{text}"
            );
            assert!(
                text.contains(&format!("btl: oib: one module (rank {r} of {n}")),
                "{name}: rank {r} made no oib module:\n{text}"
            );
        }
        let via_oib = text
            .lines()
            .filter(|l| l.contains("mca: bml: Using oib btl for send to"))
            .count();
        assert_eq!(
            via_oib,
            (n * (n - 1)) as usize,
            "{name}: ob1 did not pick oib for every peer:\n{text}"
        );
        assert!(
            !text.contains("btl: oib: no module") && !text.contains("connecting to every peer"),
            "{name}: a rank stepped aside or could not connect:\n{text}"
        );
    }
}

// The test matrix: tests/c/ompi_matrix.c (subtests by argv, every byte checked by the
// receiver; tests/c/mpi_check.h) with `--mca pml ob1 --mca btl self,oib`, so that ob1 has no
// other way between ranks. Each job also runs at `btl_base_verbose 10`, and its output must
// hold the component's own line for every rank ("btl: oib: one module (rank R of N") and
// Open MPI's "Using oib btl for send to" for every ordered pair of ranks. Several subtests
// share one job (one MPI_Init); the seconds each job took are printed, never asserted.

/// The environment every matrix job runs in (mpirun and srun alike): the component's
/// directory before Open MPI's, ob1 and only `self,oib`, verbose enough to show oib's lines.
fn matrix_env(so: &std::path::Path) -> String {
    let dir = so.parent().expect("dir").display();
    format!(
        "export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT OMPI_MCA_pml=ob1 \
         OMPI_MCA_btl=self,oib OMPI_MCA_btl_base_verbose=10\n"
    )
}

/// The script lines of one job: section `=== name` with its output, `exit N` and `took S s`.
fn job(name: &str, launcher: &str, exe: &std::path::Path, args: &str) -> String {
    format!(
        "echo '=== {name}'; t0=$(date +%s); {launcher} {exe} {args} 2>&1; \
         echo \"exit $?\"; echo \"took $(( $(date +%s) - t0 )) s\"\n",
        exe = exe.display()
    )
}

/// `mpirun -np N` bounded by `timeout` (exit 124 when it had to stop it: a hang).
fn mpirun(n: u32, timeout: u32) -> String {
    format!("timeout {timeout} mpirun --oversubscribe -np {n}")
}

/// The section `name` of a guest's output, with its time reported.
fn job_text(out: &str, name: &str) -> String {
    let text = harness::section(out, name).unwrap_or_else(|| panic!("no {name} section:\n{out}"));
    if let Some(t) = text.lines().find(|l| l.starts_with("took ")) {
        eprintln!("{name}: {t}");
    }
    text
}

/// `exit N` of a section.
fn exit_status(name: &str, text: &str) -> i32 {
    text.lines()
        .filter_map(|l| l.strip_prefix("exit "))
        .next_back()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no exit status:\n{text}"))
}

/// The job exited 0, every rank passed every subtest, all over oib.
fn assert_matrix_passed(name: &str, text: &str, n: u32, subtests: &[&str]) {
    ompi::assert_matrix_ran(name, text, n, subtests);
    assert_eq!(
        exit_status(name, text),
        0,
        "{name}: the job failed:\n{text}"
    );
}

/// The component and the matrix program, or `None` after a loud skip (a failure under CI).
fn matrix_prereqs(test: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    if harness::skip_guest(test) {
        return None;
    }
    let so = prereq::require(ompi::component())?;
    let exe = prereq::require(ompi::matrix())?;
    Some((so, exe))
}

/// Point-to-point from 0 B to 64 MiB (2 ranks; 16 MiB with 4, eager limit 4096), 256
/// operations in flight per peer, MPI_ANY_SOURCE and probe, and collectives, with 2 and 4
/// ranks under mpirun; and 4 ranks whose connections are made by that burst of 256 messages.
#[test]
fn matrix_p2p_many_probe_coll_with_2_and_4_ranks_under_mpirun() {
    let Some((so, exe)) = matrix_prereqs("softroce_ompi_oib") else {
        return;
    };
    let subtests = ["p2p", "many", "probe", "coll"];
    // The sizes straddle the eager limit the program is told; each job's oib module must
    // say it uses that one (the default 8192, and 4096 set through btl_oib_eager_limit).
    let jobs = [
        ("np2", 2, "", 8192, "p2p many probe coll"),
        (
            "np4",
            4,
            " --mca btl_oib_eager_limit 4096",
            4096,
            "eager=4096 p2p=16777216 many probe coll",
        ),
        // connections made on first use, by the burst of 256 messages to every peer at once
        (
            "np4-lazy",
            4,
            " --mca btl_oib_connect_at_init 0",
            8192,
            "many probe",
        ),
    ];
    let mut script = matrix_env(&so);
    for (name, n, mca, _, args) in jobs {
        script.push_str(&job(name, &format!("{}{mca}", mpirun(n, 900)), &exe, args));
    }
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "2000"], &["sh", "-c", &script]);
    for (name, n, _, eager, args) in jobs {
        let text = job_text(&out, name);
        let ran: Vec<&str> = subtests
            .into_iter()
            .filter(|s| {
                args.split_whitespace()
                    .any(|a| a.split('=').next() == Some(*s))
            })
            .collect();
        assert_matrix_passed(name, &text, n, &ran);
        assert_eq!(
            text.matches(&format!(", eager limit {eager})")).count(),
            n as usize,
            "{name}: the oib modules' eager limit is not the {eager} the sizes straddle:\n{text}"
        );
    }
}

/// MPI_THREAD_MULTIPLE granted, 4 threads per rank exchanging with their counterparts, then
/// collectives in the same job, with 2 and 4 ranks under mpirun (4 also connected lazily).
#[test]
fn matrix_thread_multiple_4_threads_per_rank_with_2_and_4_ranks() {
    let Some((so, exe)) = matrix_prereqs("softroce_ompi_oib") else {
        return;
    };
    // threads-np4-lazy: the threads' first messages make the connections, several threads
    // racing to the same peer.
    let jobs = [
        ("threads-np2", 2, ""),
        ("threads-np4", 4, ""),
        ("threads-np4-lazy", 4, " --mca btl_oib_connect_at_init 0"),
    ];
    let mut script = matrix_env(&so);
    for (name, n, mca) in jobs {
        let launcher = format!("{}{mca}", mpirun(n, 600));
        script.push_str(&job(name, &launcher, &exe, "threads coll"));
    }
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "1500"], &["sh", "-c", &script]);
    for (name, n, _) in jobs {
        assert_matrix_passed(name, &job_text(&out, name), n, &["threads", "coll"]);
    }
}

/// A rank calls MPI_Abort(MPI_COMM_WORLD, 7) while the others wait in a receive: mpirun ends
/// the job with status 7 before its timeout. A rank kills itself (SIGKILL) in the middle of a
/// rendezvous send: the job ends, non-zero, before the timeout (124 would be a hang).
#[test]
fn matrix_mpi_abort_and_a_killed_rank_end_the_job_in_bounded_time() {
    let Some((so, exe)) = matrix_prereqs("softroce_ompi_oib") else {
        return;
    };
    let mut script = matrix_env(&so);
    script.push_str(&job("abort-np2", &mpirun(2, 300), &exe, "abort"));
    script.push_str(&job("abort-np4", &mpirun(4, 300), &exe, "abort"));
    script.push_str(&job("kill-np2", &mpirun(2, 300), &exe, "kill"));
    script.push_str(&job("kill-np4", &mpirun(4, 300), &exe, "kill"));
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "1500"], &["sh", "-c", &script]);
    for (name, n) in [("abort-np2", 2), ("abort-np4", 4)] {
        let text = job_text(&out, name);
        assert!(!text.contains("ompi_matrix: FAIL"), "{name}:\n{text}");
        assert!(
            text.contains(&format!(
                "ompi_matrix: abort: rank {} calls MPI_Abort(MPI_COMM_WORLD, 7)",
                n - 1
            )),
            "{name}: the last rank did not reach MPI_Abort:\n{text}"
        );
        assert_eq!(
            exit_status(name, &text),
            7,
            "{name}: mpirun's status is not MPI_Abort's code (124: it hung):\n{text}"
        );
        ompi::assert_over_oib(name, &text, n);
    }
    for (name, n) in [("kill-np2", 2), ("kill-np4", 4)] {
        let text = job_text(&out, name);
        assert!(!text.contains("ompi_matrix: FAIL"), "{name}:\n{text}");
        assert!(
            text.contains("ompi_matrix: kill: rank 0 received the victim's first messages")
                && text.contains(&format!("ompi_matrix: kill: rank {} kills itself", n - 1)),
            "{name}: the exchange did not reach the kill:\n{text}"
        );
        let status = exit_status(name, &text);
        assert!(
            status != 0 && status != 124,
            "{name}: exit {status} (0: the job did not fail; 124: it hung):\n{text}"
        );
        ompi::assert_over_oib(name, &text, n);
    }
}

/// The point-to-point and collectives programs under `srun --mpi=pmix` on the Slurm cluster
/// of scripts/slurm in one guest: 2 ranks on one node, 4 ranks on two emulated nodes.
#[test]
fn matrix_p2p_and_coll_under_srun_mpi_pmix() {
    let Some((so, exe)) = matrix_prereqs("softroce_ompi_oib") else {
        return;
    };
    if prereq::require(slurm::installed()).is_none() {
        return;
    }
    let s = format!("{}/scripts/slurm", env!("CARGO_MANIFEST_DIR"));
    let mut script = format!(
        "echo '=== up'; {s} up --nodes 2 --dir /tmp/slurm --wait 300 >/tmp/slurm.env 2>/tmp/up.err && cat /tmp/up.err || {{ echo FAILED; cat /tmp/up.err; }}\n\
         . /tmp/slurm.env\n"
    );
    script.push_str(&matrix_env(&so));
    let srun = |nodes: u32, n: u32| {
        format!(
            "timeout 900 srun --mpi=pmix -N {nodes} -n {n} --ntasks-per-node {} \
             --immediate=120 --wait=120 --kill-on-bad-exit=1",
            n / nodes
        )
    };
    let jobs = [
        ("srun-n2", 1, 2, "p2p=16777216 probe coll"),
        ("srun-N2-n4", 2, 4, "p2p=1048576 coll"),
    ];
    for (name, nodes, n, args) in jobs {
        script.push_str(&job(name, &srun(nodes, n), &exe, args));
    }
    script.push_str(&format!("{s} down --dir /tmp/slurm 2>&1\necho '=== end'\n"));
    let out = harness::guest_run_ok(&["--timeout", "2000"], &["sh", "-c", &script]);
    let up = job_text(&out, "up");
    assert!(
        !up.contains("FAILED"),
        "scripts/slurm up in the guest: {up}"
    );
    for (name, _, n, args) in jobs {
        let subtests: Vec<&str> = args
            .split_whitespace()
            .map(|a| a.split('=').next().unwrap())
            .collect();
        assert_matrix_passed(name, &job_text(&out, name), n, &subtests);
    }
}
