//! Real RC connections between processes on rxe0, through each CPC, in one guest boot:
//! `openib ping` forced to udcm, oob and rdmacm (under `openib run`), the winner under mpirun,
//! verbs resources back to where they were afterwards, and disjoint CPC lists failing with a
//! reason instead of hanging.

#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "softroce/harness.rs"]
mod harness;

use serde_json::Value;

#[test]
fn ping_through_every_cpc_and_the_negative_cases() {
    if harness::skip_guest("softroce_cpc") {
        return;
    }
    // The section `dies`: OPENIB_FAULT=in-connect.
    fault_feature::require("softroce_cpc");
    let b = env!("CARGO_BIN_EXE_openib");
    let mut script = String::from("count() { rdma resource show $1 | grep -c rxe0 || true; }\n");
    script.push_str("echo \"=== before\"; echo qp $(count qp) mr $(count mr)\n");
    // Forced by include lists (udcm, oob) and by --cpc (rdmacm).
    for cpc in ["udcm", "oob"] {
        script.push_str(&format!("echo '=== {cpc}'; OPENIB_CPC_INCLUDE={cpc} {b} run -n 2 --timeout 120 -- {b} ping --json || echo FAILED\n"));
    }
    script.push_str(&format!("echo '=== rdmacm'; {b} run -n 2 --timeout 120 -- {b} ping --cpc rdmacm --json || echo FAILED\n"));
    script.push_str(&format!(
        "echo '=== mpirun'; mpirun --oversubscribe -np 3 {b} ping --json || echo FAILED\n"
    ));
    script.push_str("echo \"=== after\"; echo qp $(count qp) mr $(count mr)\n");
    script.push_str(&format!(
        "echo '=== disjoint'; {b} run -n 2 --nodes 2 --timeout 120 --rank-env 0:OPENIB_CPC_INCLUDE=udcm --rank-env 1:OPENIB_CPC_INCLUDE=rdmacm -- {b} ping --timeout 20 2>&1; echo rc=$?\n"
    ));
    // A peer that dies during the handshake: the survivor fails with the reason, quickly.
    script.push_str(&format!(
        "echo '=== dies'; t0=$(date +%s); OPENIB_FAULT=in-connect:1 {b} run -n 2 --timeout 120 -- {b} ping --timeout 60 2>&1; echo rc=$? secs=$(( $(date +%s) - t0 ))\n"
    ));
    // A peer on an unreachable subnet: a second rxe device on veth1 with another IP subnet
    // (rxe devices in one namespace cannot reach each other), rank 1 restricted to it.
    script.push_str(&format!(
        "echo '=== unreachable'; ip addr add 10.78.0.1/24 dev veth1; ip link set veth1 up; rdma link add rxe1 type rxe netdev veth1; sleep 1; \
         {b} run -n 2 --timeout 120 --rank-env 0:OPENIB_IF_INCLUDE=rxe0 --rank-env 1:OPENIB_IF_INCLUDE=rxe1 -- {b} ping --timeout 20 2>&1; echo rc=$?\n"
    ));
    script.push_str("echo '=== end'\n");
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    let sec =
        |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n} section in: {out}"));

    for cpc in ["udcm", "oob", "rdmacm"] {
        let text = sec(cpc);
        assert!(!text.contains("FAILED"), "{cpc}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{cpc} ({e}): {text}"));
        let pairs = v["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0]["cpc"], cpc, "{text}");
        assert_eq!(pairs[0]["ok"], true, "{text}");
        assert!(pairs[0]["connect_us"].as_f64().unwrap() > 0.0);
        eprintln!("{cpc}: connected in {} us", pairs[0]["connect_us"]);
    }
    let text = sec("mpirun");
    assert!(!text.contains("FAILED"), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pairs"].as_array().unwrap().len(), 3);
    for p in v["pairs"].as_array().unwrap() {
        assert_eq!(p["ok"], true, "{p}");
        assert_eq!(p["cpc"], "udcm", "udcm (63) wins by default: {p}");
    }
    // Every QP and MR the pings made is gone.
    assert_eq!(
        sec("before").trim(),
        sec("after").trim(),
        "verbs resources leaked"
    );

    let text = sec("dies");
    assert!(
        text.contains("rc=1") && text.contains("rank 1 died before the connection was up"),
        "{text}"
    );
    let secs: u64 = text.rsplit("secs=").next().unwrap().trim().parse().unwrap();
    assert!(
        secs < 45,
        "the survivor must not wait for the 60 s timeout: {secs} s\n{text}"
    );

    let text = sec("unreachable");
    assert!(
        text.contains("rc=1")
            && text.contains("is unreachable")
            && text.contains("0x000418000a4e0000"),
        "{text}"
    );

    let text = sec("disjoint");
    assert!(
        text.contains("rc=1"),
        "disjoint CPC lists must fail: {text}"
    );
    assert!(
        text.contains("no common CPC with rank")
            && text.contains("udcm")
            && text.contains("rdmacm"),
        "{text}"
    );
}
