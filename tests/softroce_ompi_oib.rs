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
