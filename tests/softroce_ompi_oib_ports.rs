//! One oib module per usable port, in the SoftRoCE guest: the test adds a second rxe device
//! (`rxe1` on a veth pair of its own, 10.78.0.1/24) at run time, then runs
//! `mpirun -np 2 --mca pml ob1 --mca btl self,oib` over tests/c/ompi_matrix.c (every byte
//! checked):
//! - both ports: every rank makes two modules (one per port), ob1 uses both for every peer
//!   (Open MPI's "Using oib btl" lines, two per pair) and both carry sends (each module's
//!   count at finalize); the same with MPI_THREAD_MULTIPLE, 4 threads per rank;
//! - rank 1 with rxe0 only (`btl_oib_if_exclude rxe1` for it alone): rank 0's second module
//!   reports rank 1 unreachable (not an error) and the job runs over the first modules;
//! - `btl_oib_if_exclude rxe0` still filters per port: one module, on rxe1;
//! - rxe0 without its IP and `btl_oib_cpc_include rdmacm` (rdmacm needs an IP): the first
//!   usable port offers no CPC and is skipped, the second still gets its module (before one
//!   module per port the process had no module at all and MPI_Init failed);
//! - neither port with a CPC: no module, one message per rank naming both ports (tcp runs
//!   the job).
//!
//! The default guest is left alone: rxe1 exists only inside this test's guest.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/ompi.rs"]
mod ompi;
use harness::prereq;

/// Adds `rxe1` on a new veth pair and waits until its port is ACTIVE with its IPv4 GID.
const ADD_RXE1: &str = "\
ip link add veth2 type veth peer name veth3 || exit 91
ip addr add 10.78.0.1/24 dev veth2 || exit 92
ip link set veth3 up && ip link set veth2 up || exit 93
rdma link add rxe1 type rxe netdev veth2 || exit 94
P=/sys/class/infiniband/rxe1/ports/1
for i in $(seq 100); do grep -q ACTIVE $P/state && break; sleep 0.2; done
for i in $(seq 50); do [ \"$(cat $P/gids/1)\" != 0000:0000:0000:0000:0000:0000:0000:0000 ] && break; sleep 0.2; done
echo \"rxe1: $(cat $P/state)\"
";

/// The number of sends a rank's module reported at finalize (`btl_base_verbose` 5):
/// "btl: oib: rank R: module M (...): S sends".
fn module_sends(text: &str, rank: u32, module: u32) -> Option<u64> {
    let head = format!("btl: oib: rank {rank}: module {module} (");
    let line = text.lines().find(|l| l.contains(&head))?;
    let rest = &line[line.find(&head)? + head.len()..];
    let n = rest.split("): ").nth(1)?.split_whitespace().next()?;
    n.parse().ok()
}

#[test]
fn two_ports_make_two_modules_and_a_port_without_a_cpc_does_not_hide_the_next() {
    if harness::skip_guest("softroce_ompi_oib_ports") {
        return;
    }
    let Some(so) = prereq::require(ompi::component()) else {
        return;
    };
    let Some(exe) = prereq::require(ompi::matrix()) else {
        return;
    };
    let dir = so.parent().expect("dir").display().to_string();
    let mut script = format!(
        "{ADD_RXE1}export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT OMPI_MCA_pml=ob1 \
         OMPI_MCA_btl=self,oib OMPI_MCA_btl_base_verbose=10\n"
    );
    let job = |name: &str, mca: &str, args: &str| {
        format!(
            "echo '=== {name}'; timeout 600 mpirun --oversubscribe -np 2 {mca} {exe} {args} \
             2>&1; echo \"exit $?\"\n",
            exe = exe.display()
        )
    };
    script.push_str(&job("two-ports", "", "eager=12288 p2p=4194304 coll"));
    // MPI_THREAD_MULTIPLE, 4 threads per rank, over both modules (component progress runs
    // every module from any thread).
    script.push_str(&job("two-ports-threads", "", "threads coll"));
    // Rank 1 has rxe0 only: rank 0's second module finds no port of rank 1 to pair with and
    // reports it unreachable (not an error); the pair talks over the two first modules.
    script.push_str(&format!(
        "echo '=== asymmetric'; timeout 600 mpirun --oversubscribe -np 1 {exe} {args} : \
         -np 1 env OMPI_MCA_btl_oib_if_exclude=rxe1 {exe} {args} 2>&1; echo \"exit $?\"\n",
        exe = exe.display(),
        args = "eager=12288 p2p=262144"
    ));
    script.push_str(&job(
        "exclude-rxe0",
        "--mca btl_oib_if_exclude rxe0",
        "eager=12288 p2p=262144",
    ));
    // rxe0 loses its IP: rdmacm (the only CPC allowed) cannot serve it.
    script.push_str("ip addr del 10.77.0.1/24 dev veth0 || echo 'cannot remove the IP'\n");
    script.push_str(&job(
        "first-port-no-cpc",
        "--mca btl_oib_cpc_include rdmacm",
        "eager=12288 p2p=262144",
    ));
    // Neither port has a CPC now: no module; the one message (default verbosity: oib is named
    // in `btl`) names both ports and rdmacm's refusal; tcp carries the job.
    script.push_str("ip addr del 10.78.0.1/24 dev veth2 || echo 'cannot remove the IP'\n");
    script.push_str(&job(
        "no-port-has-a-cpc",
        "--mca btl self,tcp,oib --mca btl_tcp_if_include lo --mca btl_base_verbose 0 \
         --mca btl_oib_cpc_include rdmacm",
        "eager=12288 p2p=65536",
    ));
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "1500"], &["sh", "-c", &script]);
    assert!(
        out.contains("rxe1: 4: ACTIVE"),
        "rxe1 did not come up:\n{out}"
    );

    let n = 2;
    let text = harness::section(&out, "two-ports").unwrap_or_else(|| panic!("no job:\n{out}"));
    assert!(
        text.contains("exit 0"),
        "two-ports: the job failed:\n{text}"
    );
    for r in 0..n {
        assert!(
            text.contains(&format!(
                "btl: oib: 2 modules, one per usable port (rank {r} of {n}"
            )),
            "two-ports: rank {r} did not make two modules:\n{text}"
        );
        for s in ["p2p", "coll"] {
            assert!(
                text.contains(&format!("ompi_matrix: {s} rank {r} of {n} ok")),
                "two-ports: rank {r} did not pass {s}:\n{text}"
            );
        }
        // One module on each port, in port order.
        for (m, port) in [(0, "rxe0:1"), (1, "rxe1:1")] {
            assert!(
                text.contains(&format!("btl: oib: rank {r}: module {m} ({port}): ")),
                "two-ports: rank {r}'s module {m} is not on {port}:\n{text}"
            );
        }
        for m in 0..2 {
            let sends = module_sends(&text, r, m)
                .unwrap_or_else(|| panic!("two-ports: no count of rank {r} module {m}:\n{text}"));
            assert!(
                sends > 0,
                "two-ports: ob1 sent nothing through rank {r}'s module {m}:\n{text}"
            );
        }
    }
    assert!(
        !text.contains("ompi_matrix: FAIL"),
        "a check failed:\n{text}"
    );
    // Open MPI's BML names every BTL module it uses for a peer: two per ordered pair.
    let via_oib = ompi::oib_send_btls(&text);
    assert_eq!(
        via_oib,
        2 * (n * (n - 1)) as usize,
        "two-ports: ob1 did not take both oib modules for every peer:\n{text}"
    );

    let text =
        harness::section(&out, "two-ports-threads").unwrap_or_else(|| panic!("no job:\n{out}"));
    assert!(
        text.contains("exit 0"),
        "two-ports-threads: the job failed:\n{text}"
    );
    assert!(
        !text.contains("ompi_matrix: FAIL"),
        "a check failed:\n{text}"
    );
    for r in 0..n {
        assert!(
            text.contains(&format!(
                "btl: oib: 2 modules, one per usable port (rank {r} of {n}"
            )),
            "two-ports-threads: rank {r} did not make two modules:\n{text}"
        );
        for s in ["threads", "coll"] {
            assert!(
                text.contains(&format!("ompi_matrix: {s} rank {r} of {n} ok")),
                "two-ports-threads: rank {r} did not pass {s}:\n{text}"
            );
        }
        for m in 0..2 {
            assert!(
                module_sends(&text, r, m) > Some(0),
                "two-ports-threads: nothing sent through rank {r}'s module {m}:\n{text}"
            );
        }
    }

    let text = harness::section(&out, "asymmetric").unwrap_or_else(|| panic!("no job:\n{out}"));
    assert!(
        text.contains("exit 0"),
        "asymmetric: the job failed:\n{text}"
    );
    assert!(
        text.contains("btl: oib: 2 modules, one per usable port (rank 0 of 2")
            && text.contains("btl: oib: one module (rank 1 of 2"),
        "asymmetric: rank 0 should have two modules, rank 1 one:\n{text}"
    );
    assert!(
        text.contains("btl: oib: rank 1 unreachable: ") && text.contains("no port to pair"),
        "asymmetric: rank 0's second module did not report rank 1 unreachable:\n{text}"
    );
    for r in 0..n {
        assert!(
            text.contains(&format!("ompi_matrix: p2p rank {r} of {n} ok")),
            "asymmetric: rank {r} did not pass p2p:\n{text}"
        );
    }
    assert_eq!(module_sends(&text, 0, 1), Some(0), "asymmetric:\n{text}");
    assert!(module_sends(&text, 0, 0) > Some(0), "asymmetric:\n{text}");
    assert_eq!(
        ompi::oib_send_btls(&text),
        2,
        "asymmetric: one oib module per ordered pair:\n{text}"
    );

    for name in ["exclude-rxe0", "first-port-no-cpc"] {
        let text = harness::section(&out, name).unwrap_or_else(|| panic!("no {name}:\n{out}"));
        assert!(text.contains("exit 0"), "{name}: the job failed:\n{text}");
        ompi::assert_matrix_ran(name, &text, n, &["p2p"]);
        for r in 0..n {
            assert!(
                text.contains(&format!("btl: oib: rank {r}: module 0 (rxe1:1): ")),
                "{name}: rank {r}'s module is not on rxe1:\n{text}"
            );
        }
    }
    let text =
        harness::section(&out, "no-port-has-a-cpc").unwrap_or_else(|| panic!("no job:\n{out}"));
    assert!(
        text.contains("exit 0"),
        "no-port-has-a-cpc: the job failed:\n{text}"
    );
    for r in 0..n {
        assert!(
            text.contains(&format!("ompi_matrix: p2p rank {r} of {n} ok")),
            "no-port-has-a-cpc: rank {r} did not pass p2p over tcp:\n{text}"
        );
    }
    let msgs: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("btl: oib: no module ("))
        .collect();
    assert_eq!(msgs.len(), n as usize, "one message per rank:\n{text}");
    for m in msgs {
        for want in [
            "usable port 0: ",
            "rxe0:1",
            "usable port 1: ",
            "rxe1:1",
            "rdmacm: ",
        ] {
            assert!(
                m.contains(want),
                "no-port-has-a-cpc: {want:?} missing in {m}"
            );
        }
    }

    let text = harness::section(&out, "first-port-no-cpc").expect("checked");
    // The skipped port is said (verbosity 1), naming rdmacm's refusal.
    assert!(
        text.contains("btl: oib: no module on usable port 0:") && text.contains("rdmacm"),
        "first-port-no-cpc: rxe0's refusal is not named:\n{text}"
    );
}
