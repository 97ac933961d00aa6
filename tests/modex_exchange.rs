//! `openib modex exchange` under real runtimes: Open MPI's mpirun (PMIx), `openib run` with
//! emulated nodes, and alone. Every rank checks every peer's per-process parts itself (the
//! command exits non-zero otherwise); rank 0's JSON is checked here against the fixtures.

#[path = "common/exchange.rs"]
mod exchange;

use exchange::{bin, check_peers, clean, doc, expected, fixture, peer_ports, run};
use std::process::Command;

fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn mpirun_np8_every_mode_rebuilds_every_peer() {
    if !have_mpirun() {
        panic!("mpirun is not installed (scripts/setup installs openmpi-bin)");
    }
    let fix = fixture("ib-dual-port.json");
    for mode in ["gathered", "per-process", "on-demand"] {
        let o = run(Command::new("mpirun").args([
            "--oversubscribe",
            "-np",
            "8",
            bin(),
            "modex",
            "exchange",
            "--json",
            "--fixture",
            &fix,
            "--mode",
            mode,
        ]));
        exchange::check_pmix_run(&doc(&o), &fix, mode, 8, 1);
    }
}

#[test]
fn mpirun_heterogeneous_include_on_one_node() {
    if !have_mpirun() {
        panic!("mpirun is not installed (scripts/setup installs openmpi-bin)");
    }
    let fix = fixture("ib-dual-port.json");
    // MPMD: rank 0 and 1 use only port 2, ranks 2 and 3 use only port 1.
    let mut c = Command::new("mpirun");
    c.args([
        "--oversubscribe",
        "-np",
        "2",
        "-x",
        "OPENIB_IF_INCLUDE=mlx5_0:2",
        bin(),
        "modex",
        "exchange",
        "--json",
        "--fixture",
        &fix,
    ]);
    c.args([
        ":",
        "-np",
        "2",
        "-x",
        "OPENIB_IF_INCLUDE=mlx5_0:1",
        bin(),
        "modex",
        "exchange",
        "--json",
        "--fixture",
        &fix,
    ]);
    let v = doc(&run(&mut c));
    check_peers(&v, 4, 1);
    assert_eq!(peer_ports(&v, 0), ["mlx5_0:2"]);
    assert_eq!(peer_ports(&v, 1), ["mlx5_0:2"]);
    assert_eq!(peer_ports(&v, 2), ["mlx5_0:1"]);
    assert_eq!(peer_ports(&v, 3), ["mlx5_0:1"]);
}

#[test]
fn openib_run_with_1_2_and_4_nodes_and_alone() {
    let fix = fixture("ib-dual-port.json");
    let (ports, _) = expected(&fix, None);
    for (n, nodes) in [(1, 1), (4, 1), (4, 2), (8, 4)] {
        let o = run(Command::new(bin()).args([
            "run",
            "-n",
            &n.to_string(),
            "--nodes",
            &nodes.to_string(),
            "--timeout",
            "60",
            "--",
            bin(),
            "modex",
            "exchange",
            "--json",
            "--fixture",
            &fix,
        ]));
        let v = doc(&o);
        assert_eq!(v["backend"], "embedded");
        check_peers(&v, n, nodes);
        for r in 0..n {
            assert_eq!(peer_ports(&v, r), ports);
        }
    }
    // Alone: a singleton.
    let v = doc(&run(Command::new(bin()).args([
        "modex",
        "exchange",
        "--json",
        "--fixture",
        &fix,
    ])));
    assert_eq!(v["backend"], "singleton");
    check_peers(&v, 1, 1);
}

#[test]
fn emulated_nodes_with_their_own_topologies_and_per_rank_ports() {
    let (a, b) = (fixture("ib-dual-port.json"), fixture("lmc2.json"));
    let o = run(Command::new(bin()).args([
        "run",
        "-n",
        "4",
        "--nodes",
        "2",
        "--fixture-per-node",
        &format!("{a},{b}"),
        "--rank-env",
        "1:OPENIB_IF_INCLUDE=mlx5_0:2",
        "--timeout",
        "60",
        "--",
        bin(),
        "modex",
        "exchange",
        "--json",
    ]));
    let v = doc(&o);
    check_peers(&v, 4, 2);
    assert_eq!(peer_ports(&v, 0), ["mlx5_0:1", "mlx5_0:2"]);
    assert_eq!(peer_ports(&v, 1), ["mlx5_0:2"], "rank 1's own include list");
    assert_eq!(
        peer_ports(&v, 2),
        ["mlx4_0:1"],
        "node 1 has the lmc2 fixture's HCA"
    );
    assert_eq!(peer_ports(&v, 3), ["mlx4_0:1"]);
}

#[test]
fn a_peer_that_never_arrives_fails_the_fence_naming_it() {
    let fix = fixture("ib-dual-port.json");
    let script = format!(
        "if [ \"$OPENIB_RT_RANK\" = 2 ]; then exec sleep 30; else exec {} modex exchange --fixture {fix} --timeout 2; fi",
        bin()
    );
    let o = clean(Command::new(bin()).args([
        "run",
        "-n",
        "3",
        "--timeout",
        "8",
        "--",
        "sh",
        "-c",
        &script,
    ]))
    .output()
    .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    for r in [0, 1] {
        assert!(
            err.contains(&format!("rank {r}: fence timed out")) && err.contains("[2]"),
            "rank {r} must name rank 2: {err}"
        );
    }
}

/// `openib run --bind-to core` binds each rank to a CPU of its own when the ranks fit, and not
/// otherwise; `--bind-to none` and the default leave the launcher's CPUs.
#[test]
fn openib_run_binds_ranks_to_cpus_when_they_fit() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let allowed = |args: &[&str], np: usize| -> Vec<String> {
        let np_s = np.to_string();
        let mut all = vec!["run", "-n", &np_s, "--timeout", "30"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "echo $OPENIB_RT_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)",
        ]);
        let o = run(Command::new(bin()).args(&all));
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        assert_eq!(lines.len(), np, "{lines:?}");
        lines
    };
    let own = String::from_utf8_lossy(&std::fs::read("/proc/self/status").unwrap())
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|v| v.trim().to_string())
        })
        .unwrap();
    // Two ranks when there are two CPUs or more: each alone on its own CPU.
    if cpus >= 2 {
        let bound = allowed(&["--bind-to", "core"], 2);
        let (a, b) = (&bound[0], &bound[1]);
        let cpu = |l: &str| l.split_whitespace().nth(1).unwrap().to_string();
        assert!(
            cpu(a).parse::<usize>().is_ok(),
            "rank 0 not bound to one CPU: {a}"
        );
        assert!(
            cpu(b).parse::<usize>().is_ok(),
            "rank 1 not bound to one CPU: {b}"
        );
        assert_ne!(cpu(a), cpu(b), "{bound:?}");
    }
    // More ranks than CPUs, or --bind-to none: every rank keeps the launcher's CPUs.
    for line in allowed(&["--bind-to", "core"], cpus + 1)
        .iter()
        .chain(allowed(&["--bind-to", "none"], 2).iter())
        .chain(allowed(&[], 2).iter())
    {
        assert_eq!(line.split_whitespace().nth(1), Some(own.as_str()), "{line}");
    }
}

/// Two processes of one node offering different CPCs (exclude lists of equal widths, so the
/// leader's decoding cannot notice): the process whose list differs from its node's published
/// one fails the exchange naming both lists, instead of publishing parts its peers misread.
#[test]
fn differing_cpc_lists_within_a_node_fail_naming_both() {
    let fix = fixture("ib-dual-port.json");
    for mode in ["gathered", "per-process", "on-demand"] {
        let o = clean(Command::new(bin()).args([
            "run",
            "-n",
            "2",
            "--timeout",
            "30",
            "--rank-env",
            "0:OPENIB_CPC_EXCLUDE=oob",
            "--rank-env",
            "1:OPENIB_CPC_EXCLUDE=rdmacm",
            "--",
            bin(),
            "modex",
            "exchange",
            "--mode",
            mode,
            "--fixture",
            &fix,
        ]))
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{mode}: must fail: {err}");
        assert!(
            err.contains("rank 1 offers CPCs udcm:63, oob:50")
                && err.contains("node leader, rank 0, published udcm:63, rdmacm:30")
                && err.contains("OPENIB_CPC_EXCLUDE"),
            "{mode}: {err}"
        );
    }
}
