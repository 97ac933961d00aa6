//! The Open MPI component `oib` carrying an MPI job's bytes on rxe0, in the SoftRoCE guest:
//! `mpirun -np 2 --mca pml ob1 --mca btl self,oib` runs tests/c/ompi_hello.c (blocking
//! exchanges of 0 B to 4 MiB, 64 non-blocking messages up to 40 KB outstanding at once each
//! way, a barrier and an allreduce; every byte checked by the receiver). With only `self` and
//! `oib`, every byte between the two ranks goes through oib: Open MPI's own verbose lines say
//! that ob1 chose oib for the peer, and the component that it made its module.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/ompi.rs"]
mod ompi;
use harness::prereq;

#[test]
fn mpirun_np2_self_oib_exchanges_checked_messages() {
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
    let script = format!(
        "echo '=== np2'; OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT timeout 240 \
         mpirun -np 2 --mca pml ob1 --mca btl self,oib --mca btl_base_verbose 10 {exe} 2>&1; \
         echo \"exit $?\"; echo '=== end'\n",
        exe = exe.display()
    );
    let out = harness::guest_run_ok(&["--timeout", "400"], &["sh", "-c", &script]);
    let text = harness::section(&out, "np2").unwrap_or_else(|| panic!("no np2 section: {out}"));
    assert!(text.contains("exit 0"), "mpirun failed:\n{text}");
    for r in 0..2 {
        assert!(
            text.contains(&format!("ompi_hello: rank {r} of 2 ok")),
            "rank {r} did not finish its checked exchanges:\n{text}"
        );
        assert!(
            text.contains(&format!("btl: oib: one module (rank {r} of 2")),
            "rank {r} made no oib module:\n{text}"
        );
    }
    let via_oib = text
        .lines()
        .filter(|l| l.contains("mca: bml: Using oib btl for send to"))
        .count();
    assert_eq!(via_oib, 2, "ob1 did not pick oib for each peer:\n{text}");
    assert!(
        !text.contains("btl: oib: no module"),
        "a rank stepped aside:\n{text}"
    );
}
