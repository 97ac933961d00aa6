//! Uneven CPC settings within one node, under mpirun with per-rank environments (MPMD), in the
//! SoftRoCE guest: both sides of a pair must still pick the same CPC (the node's published
//! list decides, docs/CPC.md "Uneven settings").

#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "softroce/harness.rs"]
mod harness;

use serde_json::Value;

#[test]
fn differing_cpc_priority_within_a_node_still_connects() {
    if harness::skip_guest("softroce_winner") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    // Rank 0 (the node leader, whose list is published) keeps the defaults (udcm 63 wins);
    // rank 1's own list would make rdmacm win. Before the fix rank 0 connected through udcm
    // while rank 1 waited on rdmacm, and the pair timed out.
    let script = format!(
        "echo '=== mpmd'; mpirun --oversubscribe -np 1 {b} ping --json --timeout 30 : \
         -np 1 -x OPENIB_CPC_PRIORITY=rdmacm:90 {b} ping --json --timeout 30 2>/tmp/err; echo rc=$?\n\
         echo '=== stderr'; cat /tmp/err\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "300"], &["sh", "-c", &script]);
    let sec =
        |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n} section in: {out}"));
    let text = sec("mpmd");
    let err = sec("stderr");
    assert!(text.contains("rc=0"), "ping failed: {text}\n{err}");
    let json = text.rsplit_once("rc=").map(|(j, _)| j).unwrap_or(&text);
    let v: Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{text}");
    assert_eq!(pairs[0]["ok"], true, "{text}\n{err}");
    assert_eq!(
        pairs[0]["cpc"], "udcm",
        "the published list (rank 0's) decides: {text}"
    );
    // Rank 1 says that its own setting differs, naming both values.
    assert!(
        err.contains("OPENIB_CPC_PRIORITY")
            && err.contains("rdmacm:90")
            && err.contains("rdmacm:30"),
        "{err}"
    );
}

/// The winner (udcm) fails on the real path: rank 1's udcm never answers
/// (`OPENIB_FAULT=udcm-deaf:1`), rank 0's attempt times out, rank 0 falls back to the next
/// common CPC (oob) with a log line saying why, and rank 1 accepts it. Before the fallback the
/// pair failed with udcm's timeout.
#[test]
fn a_failed_winner_falls_back_to_the_next_common_cpc() {
    if harness::skip_guest("softroce_winner") {
        return;
    }
    fault_feature::require("softroce_winner");
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "echo '=== fallback'; OPENIB_FAULT=udcm-deaf:1 {b} run -n 2 --timeout 120 -- {b} ping --json --timeout 60 2>/tmp/err; echo rc=$?\n\
         echo '=== stderr'; cat /tmp/err\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "300"], &["sh", "-c", &script]);
    let sec =
        |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n} section in: {out}"));
    let text = sec("fallback");
    let err = sec("stderr");
    assert!(text.contains("rc=0"), "ping failed: {text}\n{err}");
    let json = text.rsplit_once("rc=").map(|(j, _)| j).unwrap_or(&text);
    let v: Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{text}");
    assert_eq!(pairs[0]["ok"], true, "{text}\n{err}");
    assert_eq!(pairs[0]["cpc"], "oob", "the next common CPC: {text}\n{err}");
    assert!(
        err.contains("falling back to the next common CPC, oob") && err.contains("udcm"),
        "the fallback says why: {err}"
    );
}
