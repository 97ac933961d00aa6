//! Data moving on rxe0 under Slurm: `srun --mpi=pmix` on one and on two emulated nodes of a
//! cluster started inside one SoftRoCE guest by `scripts/slurm up --nodes 2` (its directory on
//! the guest's own /tmp: the host root is read-only there, and the guest runs the host's
//! installed slurm through its chroot). On each: `openib ping` (the winner, udcm, connects
//! and exchanges a message each way), a short `openib bench` (content checked by the bench
//! itself), and the C ABI example `tests/c/exchange.c` (both ranks' verdicts), every rank
//! saying which node Slurm put it on. Timings are printed, never asserted.
//!
//! The runs are checked by their output, never by srun's exit status alone (srun can exit 0
//! when its tasks did nothing): each section must hold the JSON or the two verdict lines,
//! and both ranks' node lines. Waits are bounded by `--immediate`, `--wait`, `timeout` and
//! the guest's own timeout.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/slurm.rs"]
mod slurm;
#[path = "capi/support.rs"]
mod support;

use harness::prereq;
use serde_json::Value;
use std::collections::BTreeMap;

/// The node each rank says Slurm put it on (`slurm: rank R on NODE` lines).
fn placement(text: &str) -> BTreeMap<u32, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("slurm: rank "))
        .filter_map(|l| {
            let (r, node) = l.split_once(" on ")?;
            Some((r.trim().parse().ok()?, node.trim().to_string()))
        })
        .collect()
}

#[test]
fn ping_bench_and_the_c_abi_under_srun_on_one_and_two_nodes() {
    if harness::skip_guest("softroce_slurm") || prereq::require(slurm::installed()).is_none() {
        return;
    }
    let exe = support::compile_linked("exchange");
    let dir = exe.parent().expect("dir").display().to_string();
    let b = env!("CARGO_BIN_EXE_openib");
    let slurm = format!("{}/scripts/slurm", env!("CARGO_MANIFEST_DIR"));
    let mut script = format!(
        "S={slurm}\n\
         echo '=== up'; $S up --nodes 2 --dir /tmp/slurm --wait 300 >/tmp/slurm.env 2>/tmp/up.err && cat /tmp/up.err || {{ echo FAILED; cat /tmp/up.err; }}\n\
         . /tmp/slurm.env\n\
         on() {{ n=$1; shift; timeout 300 srun --mpi=pmix -N $n -n 2 --ntasks-per-node $((2 / n)) --immediate=120 --wait=60 --kill-on-bad-exit=1 \
            sh -c 'echo \"slurm: rank $SLURM_PROCID on $SLURMD_NODENAME\" >&2; exec \"$@\"' sh \"$@\"; }}\n"
    );
    for n in [1, 2] {
        script.push_str(&format!(
            "echo '=== ping-{n}'; on {n} {b} ping --json 2>/tmp/err || echo FAILED; echo '=== ping-{n}-err'; cat /tmp/err\n\
             echo '=== bench-{n}'; on {n} {b} bench --json --iters 10 --sizes 8,65536 2>/tmp/err || echo FAILED; echo '=== bench-{n}-err'; cat /tmp/err\n\
             echo '=== capi-{n}'; (cd {dir} && on {n} ./exchange 100) 2>/tmp/err || echo FAILED; echo '=== capi-{n}-err'; cat /tmp/err\n"
        ));
    }
    script.push_str("$S down --dir /tmp/slurm 2>&1\necho '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "900"], &["sh", "-c", &script]);
    let sec =
        |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n} section in: {out}"));
    let up = sec("up");
    assert!(
        !up.contains("FAILED"),
        "scripts/slurm up in the guest: {up}"
    );
    eprint!("{up}");
    for n in [1usize, 2] {
        for what in ["ping", "bench", "capi"] {
            let name = format!("{what}-{n}");
            let (text, err) = (sec(&name), sec(&format!("{name}-err")));
            let ctx = format!("{name}:\n{text}\nstderr:\n{err}");
            assert!(!text.contains("FAILED"), "{ctx}");
            // Both ranks ran, on the nodes asked for.
            let nodes = placement(&err);
            let want: BTreeMap<u32, String> = if n == 1 {
                [(0, "n1".into()), (1, "n1".into())].into()
            } else {
                [(0, "n1".into()), (1, "n2".into())].into()
            };
            assert_eq!(nodes, want, "{ctx}");
            match what {
                "ping" => {
                    let v: Value = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("not one JSON ({e}): {ctx}"));
                    assert_eq!(v["size"], 2, "{ctx}");
                    let pairs = v["pairs"].as_array().unwrap();
                    assert_eq!(pairs.len(), 1, "{ctx}");
                    assert_eq!(pairs[0]["ok"], true, "{ctx}");
                    assert_eq!(pairs[0]["cpc"], "udcm", "udcm (63) wins: {ctx}");
                    eprintln!("{name}: connected in {} us", pairs[0]["connect_us"]);
                }
                "bench" => {
                    let v: Value = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("not one JSON ({e}): {ctx}"));
                    let rows = v["results"].as_array().unwrap();
                    let sizes: Vec<u64> =
                        rows.iter().map(|r| r["size"].as_u64().unwrap()).collect();
                    assert_eq!(sizes, [8, 65536], "{ctx}");
                    for r in rows {
                        assert!(
                            r["latency_us"].as_f64().unwrap() > 0.0
                                && r["bandwidth_mb_s"].as_f64().unwrap() > 0.0,
                            "{r}: {ctx}"
                        );
                        eprintln!(
                            "{name}: {} B: {} us, {} MB/s",
                            r["size"], r["latency_us"], r["bandwidth_mb_s"]
                        );
                    }
                }
                _ => {
                    support::assert_exchange_ok(&text, 100, &ctx);
                    eprintln!("{name}: both ranks ok");
                }
            }
        }
    }
}
