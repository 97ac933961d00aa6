//! The Open MPI component `oib` carrying an MPI job's bytes on rxe0, in the SoftRoCE guest:
//! `mpirun -np N --mca pml ob1 --mca btl self,oib` (N = 2, 3, 4) runs tests/c/ompi_hello.c (blocking
//! exchanges of 0 B to 4 MiB, 64 non-blocking messages up to 40 KB outstanding at once each
//! way, a barrier and an allreduce; every byte checked by the receiver). With only `self` and
//! `oib`, every byte between ranks goes through oib: Open MPI's own verbose lines say
//! that ob1 chose oib for the peer, and the component that it made its module.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/ompi.rs"]
mod ompi;
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

/// A job mixing ranks with and without a usable port (issue 30): rank 2 runs with
/// `btl_oib_if_include=nonexistent0`, so its transport finds no usable port, publishes no modex
/// and steps aside at once. With `self,tcp,oib` the job succeeds (ranks 0 and 1 over oib, rank
/// 2 over tcp) and ranks 0 and 1 did not wait for rank 2: they made their modules (before, the
/// transport's own PMIx fence waited for rank 2 until its timeout and then gave up). With
/// `self,oib` Open MPI ends the job with its unreachable error, in bounded time (the
/// `timeout 200` would say 124). Rank 2's message names its ports and why, at the default
/// verbosity, with oib named in `btl` and without (rxe0 exists).
#[test]
fn mixed_job_a_rank_without_a_port_steps_aside_and_nobody_waits() {
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
    // A wrapper script beside the program (the guest sees the host's paths): rank 2 only gets
    // a port filter that matches nothing.
    let wrap = exe.with_file_name("ompi_hello_rank2_noport.sh");
    std::fs::write(
        &wrap,
        format!(
            "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then\n    \
             export OMPI_MCA_btl_oib_if_include=nonexistent0\nfi\nexec {} \"$@\"\n",
            exe.display()
        ),
    )
    .expect("write the wrapper");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrap, std::fs::Permissions::from_mode(0o755))
            .expect("chmod the wrapper");
    }
    let wrap = wrap.display();
    let mut script = format!("export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT\n");
    for (name, btl, verbose) in [
        ("tcp", "self,tcp,oib", "--mca btl_base_verbose 10"),
        ("oib-only", "self,oib", "--mca btl_base_verbose 10"),
        // oib not named (an exclusion list selects every other BTL, as Debian's defaults do):
        // rxe0 exists, so rank 2's message is still shown at the default verbosity.
        ("not-named", "^openib,uct", ""),
    ] {
        script.push_str(&format!(
            "echo '=== {name}'; timeout 200 mpirun --oversubscribe -np 3 --mca pml ob1 \
             --mca btl {btl} --mca btl_tcp_if_include lo {verbose} {wrap} 2>&1; \
             echo \"exit $?\"\n"
        ));
    }
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "800"], &["sh", "-c", &script]);

    let text = harness::section(&out, "tcp").unwrap_or_else(|| panic!("no tcp: {out}"));
    assert!(text.contains("exit 0"), "tcp: mpirun failed:\n{text}");
    for r in 0..3 {
        assert!(
            text.contains(&format!("ompi_hello: rank {r} of 3 ok")),
            "tcp: rank {r} did not finish its checked exchanges:\n{text}"
        );
    }
    for r in 0..2 {
        assert!(
            text.contains(&format!("btl: oib: one module (rank {r} of 3")),
            "tcp: rank {r} made no oib module (did it wait for rank 2?):\n{text}"
        );
    }
    let no_module: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("btl: oib: no module"))
        .collect();
    assert_eq!(no_module.len(), 1, "tcp: only rank 2 steps aside:\n{text}");
    // The message names the port, why it is not used, each CPC's verdict and the filter.
    assert!(
        no_module[0].contains("no usable port")
            && no_module[0].contains("rxe0")
            && no_module[0].contains("CPCs: ")
            && no_module[0].contains("nonexistent0"),
        "tcp: the message does not name the port, its CPCs and the filter: {}",
        no_module[0]
    );
    // Ranks 0 and 1 reach each other through oib, and rank 2 through tcp.
    let via_oib = text
        .lines()
        .filter(|l| l.contains("mca: bml: Using oib btl for send to"))
        .count();
    assert_eq!(via_oib, 2, "tcp: oib between ranks 0 and 1 only:\n{text}");

    // Ranks 0 and 1 found rank 2 unreachable at once, with the transport's reason (it
    // published no modex): not an error, ob1 took tcp for it.
    for r in 0..2 {
        let marker = format!("btl: oib: one module (rank {r} of 3");
        let pid = text
            .lines()
            .find(|l| l.contains(&marker))
            .and_then(|l| l.split(']').next())
            .unwrap_or_else(|| panic!("tcp: rank {r} made no module:\n{text}"));
        assert!(
            text.lines().any(|l| l.starts_with(pid)
                && l.contains("btl: oib: rank 2 unreachable")
                && l.contains("published no openib modex")),
            "tcp: rank {r} did not find rank 2 unreachable with the reason:\n{text}"
        );
    }
    let text = harness::section(&out, "oib-only").unwrap_or_else(|| panic!("no oib-only: {out}"));
    assert!(
        !text.contains("exit 0") && !text.contains("exit 124"),
        "oib-only: the job must fail, and not by the timeout:\n{text}"
    );
    // Rank 2 (self alone) reaches nobody: MPI_Init fails there and the job ends. Open MPI's
    // help text ("unreachable from another") goes through mpirun, which sometimes loses it when
    // processes abort together (then it logs an error in show_help.c instead).
    assert!(
        text.contains("is unreachable\nfrom another")
            || text.contains("unable to reach each other")
            || text.contains("error occurred in MPI_Init")
            || text.contains("show_help.c"),
        "oib-only: no sign of Open MPI's MPI_Init error:\n{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("btl: oib: no module"))
            .count(),
        1,
        "oib-only: rank 2's one message expected:\n{text}"
    );

    let text = harness::section(&out, "not-named").unwrap_or_else(|| panic!("no not-named: {out}"));
    assert!(text.contains("exit 0"), "not-named: mpirun failed:\n{text}");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("btl: oib: no module"))
        .collect();
    assert!(
        lines.len() == 1 && lines[0].contains("rxe0") && lines[0].contains("nonexistent0"),
        "not-named: rank 2's one message (a device exists, no usable port) expected at the \
         default verbosity:\n{text}"
    );
}
