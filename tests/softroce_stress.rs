//! The transport under load in the SoftRoCE guest (`openib stress`, every byte checked by the
//! command itself): random-size messages (eager and rendezvous mixed, 0 B to 4 MiB) in both
//! directions from two threads per rank, puts and gets of random ranges, fetch-and-add and
//! compare-and-swap counters on rank 0 under contention from two ranks of three threads each,
//! no receiver-not-ready NAK on the device (rxe's hardware counters), and no QP, MR, CQ or PD
//! of a rank left after `finalize` (`rdma resource show`); the same through rdmacm and oob, and
//! through the shared receive queue (forced, automatic, and with a rank dying), and with the
//! rendezvous taken by the split of writes and reads (the default on rxe), by reads, by writes,
//! and by a different choice on each side. The 100,000-message run of issue 6
//! is too long for CI under TCG; docs/PERFORMANCE.md records it with its command.

#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "softroce/harness.rs"]
mod harness;

use serde_json::Value;

#[test]
fn stress_mixed_sizes_threads_rdma_and_atomics() {
    if harness::skip_guest("softroce_stress") {
        return;
    }
    // The sections `srq-survive` and `survive`: OPENIB_FAULT=in-transfer.
    fault_feature::require("softroce_stress");
    let b = env!("CARGO_BIN_EXE_openib");
    let rnr = "cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_rnr_err /sys/class/infiniband/rxe0/ports/1/hw_counters/send_rnr_err | tr '\\n' ' '";
    let script = format!(
        "echo '=== rnr-before'; {rnr}; echo\n\
         echo '=== small'; {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 2000 --max-size 262144 --threads 2 --puts 40 --atomics 20 --seed 7 || echo FAILED\n\
         echo '=== large'; {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 60 --max-size 4194304 --threads 2 --puts 10 --atomics 0 --seed 8 || echo FAILED\n\
         echo '=== large-read'; OPENIB_RNDV_PROTOCOL=read {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 60 --max-size 4194304 --threads 2 --puts 10 --atomics 0 --seed 16 || echo FAILED\n\
         echo '=== large-write'; OPENIB_RNDV_PROTOCOL=write {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 60 --max-size 4194304 --threads 2 --puts 10 --atomics 0 --seed 19 || echo FAILED\n\
         echo '=== large-mixed'; {b} run -n 2 --timeout 500 -- sh -c 'if [ \"$OPENIB_RT_RANK\" = 1 ]; then export OPENIB_RNDV_PROTOCOL=read; else export OPENIB_RNDV_SPLIT=30; fi; exec {b} stress --json --check-resources --shared --messages 100 --max-size 300000 --threads 2 --puts 5 --atomics 0 --seed 17' || echo FAILED\n\
         echo '=== bounded'; OPENIB_PINNED_MAX=4194304 {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 300 --max-size 1048576 --threads 2 --puts 5 --atomics 0 --seed 18 || echo FAILED\n\
         echo '=== shared'; OPENIB_PINNED_MAX=4194304 {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --shared --messages 300 --max-size 1048576 --threads 2 --puts 5 --atomics 0 --seed 18 || echo FAILED\n\
         echo '=== contention'; {b} run -n 3 --timeout 500 -- {b} stress --json --check-resources --sendi --messages 300 --max-size 65536 --threads 3 --puts 10 --atomics 40 --seed 9 || echo FAILED\n\
         echo '=== rdmacm'; OPENIB_CPC_INCLUDE=rdmacm {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 200 --max-size 200000 --threads 2 --puts 5 --atomics 5 --seed 10 || echo FAILED\n\
         echo '=== oob'; OPENIB_CPC_INCLUDE=oob {b} run -n 2 --timeout 500 -- {b} stress --json --check-resources --messages 200 --max-size 200000 --threads 2 --puts 5 --atomics 5 --seed 11 || echo FAILED\n\
         echo '=== srq'; OPENIB_SRQ=on OPENIB_SRQ_CREDITS=4 OPENIB_SRQ_RESERVE=8 {b} run -n 3 --timeout 500 -- {b} stress --json --check-resources --sendi --messages 400 --max-size 65536 --threads 2 --puts 5 --atomics 5 --seed 13 || echo FAILED\n\
         echo '=== srq-auto'; OPENIB_SRQ_PEERS=1 OPENIB_CPC_INCLUDE=rdmacm {b} run -n 3 --timeout 500 -- {b} stress --json --check-resources --messages 100 --max-size 300000 --threads 1 --puts 5 --atomics 5 --seed 14 || echo FAILED\n\
         echo '=== srq-survive'; OPENIB_SRQ=on OPENIB_SRQ_RESERVE=16 OPENIB_FAULT=in-transfer:2 {b} run -n 3 --timeout 500 -- {b} stress --json --survive --messages 300 --max-size 100000 --threads 2 --puts 5 --atomics 5 --seed 15 2>&1; echo rc=$?\n\
         echo '=== survive'; OPENIB_FAULT=in-transfer:2 {b} run -n 3 --timeout 500 -- {b} stress --json --survive --sendi --messages 400 --max-size 200000 --threads 2 --puts 10 --atomics 10 --seed 12 2>&1; echo rc=$?\n\
         echo '=== rnr-after'; {rnr}; echo\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "1500"], &["sh", "-c", &script]);
    let sec = |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n}: {out}"));
    for (name, ranks, messages, threads, atomics) in [
        ("small", 2, 2000, 2, 20),
        ("large", 2, 60, 2, 0),
        // The rendezvous taken by RDMA reads (OPENIB_RNDV_PROTOCOL=read) or writes instead of
        // the default split on rxe, and by one side reading while the other splits 30/70 (the
        // receiver chooses, per process; there every second message is a `send_shared`, read
        // from or written out of the caller's Arc).
        ("large-read", 2, 60, 2, 0),
        ("large-write", 2, 60, 2, 0),
        ("large-mixed", 2, 100, 2, 0),
        // A 4 MiB bound on pinned memory with messages up to 1 MiB both ways: each side's
        // outgoing copies fill the bound, and incoming transfers must still be admitted (this
        // hung until one incoming transfer was always admitted).
        ("bounded", 2, 300, 2, 0),
        // Every second message by `send_shared` from a fresh Arc, with registrations kept up to
        // 4 MiB: kept ones are reused only for the same bytes, evicted ones are dropped, and
        // freed addresses come back from the allocator (a stale registration would corrupt).
        ("shared", 2, 300, 2, 0),
        // Three threads to two peers each, every second message up to the eager limit by
        // `sendi` (no token; mostly unsignaled), mixed with `send` on the same endpoints.
        ("contention", 3, 300, 3, 40),
        // Every CPC's queue pairs carry the rendezvous reads and atomics (rdmacm's active side
        // once refused them).
        ("rdmacm", 2, 200, 2, 5),
        ("oob", 2, 200, 2, 5),
        // Eager messages through the shared receive queue, with a grant of 4 buffers per peer
        // and a reserve of 8 to lend: the credit pool lends and takes back under load.
        ("srq", 3, 400, 2, 5),
        // OPENIB_SRQ=auto: on above OPENIB_SRQ_PEERS peers; through rdmacm's queue pairs.
        ("srq-auto", 3, 100, 1, 5),
    ] {
        let text = sec(name);
        assert!(!text.contains("FAILED"), "{name}: {text}");
        let lines: Vec<Value> = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name} ({e}): {l}")))
            .collect();
        assert_eq!(lines.len(), ranks, "{name}: {text}");
        let mut received = 0;
        for v in &lines {
            assert_eq!(v["ok"], true, "{v}");
            assert_eq!(v["threads"], threads, "{v}");
            received += v["received"].as_u64().unwrap();
            // The check saw the transport's resources while it was open, none after.
            assert!(v["resources_open"]["qp"].as_u64().unwrap() > 0, "{v}");
            for kind in ["qp", "mr", "cq", "pd"] {
                assert_eq!(v["resources_left"][kind], 0, "{name}: {kind} left: {v}");
            }
            let rank = v["rank"].as_u64().unwrap();
            let want_atomics = if rank == 0 { 0 } else { 2 * threads * atomics };
            assert_eq!(v["atomics"], want_atomics, "{v}");
            let srq = &v["srq"];
            if name.starts_with("srq") {
                // Every peer holds its grant; the pool never promises more than it counts,
                // nor counts more buffers than the SRQ holds.
                assert_eq!(srq["peers"], ranks as u64 - 1, "{name}: {v}");
                let n = |k: &str| srq[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
                assert!(
                    n("granted") <= n("counted") && n("counted") <= n("buffers"),
                    "{v}"
                );
            } else {
                assert!(srq.is_null(), "{name}: no SRQ by default for one peer: {v}");
            }
        }
        assert_eq!(received, messages * ranks as u64, "{name}: {text}");
        if name == "contention" || name == "srq" {
            // --sendi: some messages went by sendi, and some send requests unsignaled.
            for v in &lines {
                assert!(v["sendi"].as_u64().unwrap() > 0, "{name}: {v}");
                let unsignaled: u64 = v["endpoints"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e["stats"]["unsignaled"].as_u64().unwrap())
                    .sum();
                assert!(unsignaled > 0, "{name}: {v}");
            }
        }
        if name == "shared" {
            for v in &lines {
                let r = &v["shared_registrations"];
                let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
                assert!(n("misses") > 0 && n("evictions") > 0, "{name}: {v}");
                assert!(n("cached") <= 4 << 20, "{name}: past the bound: {v}");
            }
        }
        if name.starts_with("large") {
            let rndv: u64 = lines
                .iter()
                .flat_map(|v| v["endpoints"].as_array().unwrap().clone())
                .map(|e| e["stats"]["rndv_sent"].as_u64().unwrap())
                .sum();
            assert!(rndv > 0, "the large run used the rendezvous path: {text}");
        }
        eprintln!("{name}: {}", text.trim());
    }
    // Rank 2 dies half way through its messages: ranks 0 and 1 finish everything between
    // themselves (every message, put, get and atomic checked), agree that rank 2 failed, and
    // noticed within a bound; through the per-peer buffers and through the SRQ (whose pool
    // takes the dead peer's grant back).
    for name in ["survive", "srq-survive"] {
        let text = sec(name);
        let died: u64 = text
            .split("unix ms ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no death time: {text}"));
        let lines: Vec<Value> = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name} ({e}): {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{name}: two survivors: {text}");
        for v in &lines {
            assert_eq!(v["ok"], true, "{v}");
            assert_eq!(v["failed"], serde_json::json!([2]), "{v}");
            assert_eq!(v["srq"].is_null(), name == "survive", "{name}: {v}");
            if name == "srq-survive" {
                // The dead peer's grant went back to the pool: one peer holds one now.
                assert_eq!(v["srq"]["peers"], 1, "{v}");
            }
            let noticed = v["noticed_unix_ms"].as_u64().unwrap();
            assert!(
                noticed + 1000 >= died && noticed < died + 30_000,
                "{name}: rank {} noticed the death {} ms after it: {v}",
                v["rank"],
                noticed as i64 - died as i64
            );
            eprintln!(
                "{name}: rank {} noticed rank 2's death after {} ms",
                v["rank"],
                noticed as i64 - died as i64
            );
        }
    }
    assert_eq!(
        sec("rnr-before").trim(),
        sec("rnr-after").trim(),
        "receiver-not-ready NAKs happened (rcvd_rnr_err send_rnr_err)"
    );
}
