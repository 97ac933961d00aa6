//! Data moving on rxe0 under Slurm: `srun --mpi=pmix` on one and on two emulated nodes of a
//! cluster started inside one SoftRoCE guest by `scripts/slurm up --nodes 2` (its directory on
//! the guest's own /tmp: the host root is read-only there, and the guest runs the host's
//! installed slurm through its chroot). On each: `openib ping` (the winner, udcm, connects
//! and exchanges a message each way), a short `openib bench` (content checked by the bench
//! itself), and the C ABI example `tests/c/exchange.c` (both ranks' verdicts), every rank
//! saying which node Slurm put it on; then `openib group-create` (issue 32) by 4 tasks on the
//! two nodes, failure-free with differing groups. Timings are printed, never asserted.
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
    // Group creation (issue 32) failure-free under srun: 4 tasks on the two nodes, two
    // operations with differing random groups (a death ends the whole step under Slurm
    // 22.05: docs/RUNTIME.md, "Slurm").
    script.push_str(&format!(
        "echo '=== gc'; timeout 300 srun --mpi=pmix -N 2 -n 4 --ntasks-per-node 2 --immediate=120 --wait=60 --kill-on-bad-exit=1 \
            {b} group-create --json --random-groups {GC_SEED} --rounds 2 --timeout 60 2>/tmp/err || echo FAILED; echo '=== gc-err'; cat /tmp/err\n"
    ));
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
    let (text, err) = (sec("gc"), sec("gc-err"));
    group_create_checks(&text, &format!("gc:\n{text}\nstderr:\n{err}"));
}

/// The seed of the random groups of the srun group-create runs.
const GC_SEED: u64 = 29;

/// Failure-free group creation by 4 tasks, 2 operations: every task prints one outcome per
/// operation, all hold the same decision, and it is docs/RUNTIME.md's: the participants are
/// everyone, nobody failed, the group is the intersection of the groups passed, and a task
/// outside it is excluded by a task whose group lacks it.
fn group_create_checks(text: &str, ctx: &str) {
    use std::collections::BTreeSet;
    assert!(!text.contains("FAILED"), "{ctx}");
    let set = |v: &Value| -> BTreeSet<u64> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}: {ctx}"))
            .iter()
            .map(|r| r.as_u64().expect("rank"))
            .collect()
    };
    let mut rounds: BTreeMap<u64, BTreeMap<u64, Value>> = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}: {ctx}"));
        let (r, round) = (v["rank"].as_u64().unwrap(), v["round"].as_u64().unwrap());
        assert!(
            rounds.entry(round).or_default().insert(r, v).is_none(),
            "rank {r} printed round {round} twice: {ctx}"
        );
    }
    assert_eq!(rounds.len(), 2, "two operations: {ctx}");
    for (round, lines) in &rounds {
        assert_eq!(
            lines.keys().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "round {round}: every task prints: {ctx}"
        );
        let passed: BTreeMap<u64, BTreeSet<u64>> =
            lines.iter().map(|(&r, v)| (r, set(&v["passed"]))).collect();
        let inter = passed
            .values()
            .cloned()
            .reduce(|a, b| a.intersection(&b).copied().collect())
            .unwrap();
        for (&r, v) in lines {
            assert_eq!(
                set(&v["participants"]),
                (0..4).collect(),
                "round {round}: {ctx}"
            );
            assert!(set(&v["failed"]).is_empty(), "round {round}: {ctx}");
            assert_eq!(set(&v["group"]), inter, "round {round}, rank {r}: {ctx}");
            if inter.contains(&r) {
                assert_eq!(v["outcome"], "member", "round {round}, rank {r}: {ctx}");
            } else {
                assert_eq!(v["outcome"], "excluded", "round {round}, rank {r}: {ctx}");
                let by = v["by"].as_u64().expect("by");
                assert!(
                    !passed[&by].contains(&r),
                    "round {round}: rank {r} excluded by {by}, whose group has it: {ctx}"
                );
            }
        }
        eprintln!("gc round {round}: group {inter:?} (groups passed: {passed:?})");
    }
}
