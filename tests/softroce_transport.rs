//! The transport between two processes on rxe0: eager sends and RDMA writes of every size up to
//! 1 MiB, with content checked by `openib bench` itself (it fails on a corrupted payload), under
//! the embedded runtime and under mpirun, and with a completion queue too small for the puts in
//! flight (the shared send budget holds them back); rxe takes the split rendezvous by default.
//! Timings are printed, never asserted.

#[path = "common/fault_feature.rs"]
mod fault_feature;
#[path = "softroce/harness.rs"]
mod harness;
#[path = "common/svg.rs"]
mod svg;

use serde_json::Value;

// On a stall `openib bench` prints both endpoints' flow-control counters, and a failing
// section prints the ranks' stderr.
#[test]
fn bench_moves_checked_data_through_both_paths() {
    if harness::skip_guest("softroce_transport") {
        return;
    }
    // The section `lie`: OPENIB_FAULT=lie-seq.
    fault_feature::require("softroce_transport");
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "echo '=== run'; {b} run -n 2 --timeout 300 -- {b} bench --json --iters 20 --svg /tmp/bench.svg 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== svg'; cat /tmp/bench.svg; echo\n\
         echo '=== svg-unwritable'; {b} run -n 2 --timeout 300 -- {b} bench --iters 5 --sizes 8 --svg /proc/no-such-dir/b.svg 2>&1; echo \"exit $?\"\n\
         echo '=== mpirun'; mpirun --oversubscribe -np 2 {b} bench --json --iters 10 --sizes 8,65536 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== small-cq'; OPENIB_CQ_DEPTH=64 {b} run -n 2 --timeout 300 -- {b} bench --json --iters 300 --sizes 4096,16384 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== laps'; {b} run -n 2 --timeout 300 -- {b} bench --json --iters 30 --sizes 8,4096 --laps /tmp/laps.txt >/dev/null 2>/tmp/bench.err && cat /tmp/laps.txt || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== laps-unwritable'; {b} run -n 2 --timeout 300 -- {b} bench --iters 5 --sizes 8 --laps /proc/no-such-dir/laps.txt 2>&1; echo \"exit $?\"\n\
         echo '=== lie'; OPENIB_FAULT=lie-seq:1 {b} run -n 2 --timeout 120 -- {b} bench --iters 200 --sizes 8 2>&1; echo \"exit $?\"\n\
         echo '=== signal-all'; OPENIB_SIGNAL_EVERY=1 {b} run -n 2 --timeout 300 -- {b} bench --json --iters 20 --sizes 8 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== tty'; TERM=xterm script -qec '{b} run -n 2 --timeout 300 -- {b} bench --iters 5 --sizes 8,65536' /dev/null 2>&1; echo \"exit $?\"\n\
         echo '=== tty-json'; TERM=xterm script -qec '{b} run -n 2 --timeout 300 -- {b} bench --json --iters 5 --sizes 8' /dev/null 2>&1; echo \"exit $?\"\n\
         echo '=== tty-stress'; TERM=xterm script -qec '{b} run -n 2 --timeout 300 -- {b} stress --messages 100 --max-size 100000 --puts 2 --atomics 2' /dev/null 2>&1; echo \"exit $?\"\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    // On a terminal (script(1)'s pty) rank 0 draws a progress bar beside the usual output; not
    // with --json (the other sections, off a terminal, parse their output as before).
    let tty = harness::section(&out, "tty").unwrap_or_else(|| panic!("no tty: {out}"));
    assert!(
        tty.contains("openib bench [") && tty.contains("latency us") && tty.contains("exit 0"),
        "{tty}"
    );
    let tty = harness::section(&out, "tty-json").unwrap_or_else(|| panic!("no tty-json: {out}"));
    assert!(
        !tty.contains("openib bench [") && tty.contains("\"results\"") && tty.contains("exit 0"),
        "{tty}"
    );
    let tty =
        harness::section(&out, "tty-stress").unwrap_or_else(|| panic!("no tty-stress: {out}"));
    assert!(
        tty.contains("openib stress [") && tty.contains("\"ok\":true") && tty.contains("exit 0"),
        "{tty}"
    );
    // --laps: every timed round trip, in order, size by size; an unwritable file fails.
    let laps = harness::section(&out, "laps").unwrap_or_else(|| panic!("no laps: {out}"));
    assert!(!laps.contains("FAILED"), "laps: {laps}");
    let rows: Vec<(u64, f64)> = laps
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (size, us) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("laps line {l:?}"));
            (size.parse().unwrap(), us.trim().parse().unwrap())
        })
        .collect();
    let sizes: Vec<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(sizes, [vec![8; 30], vec![4096; 30]].concat(), "{laps}");
    assert!(rows.iter().all(|r| r.1 > 0.0), "{laps}");
    let bad = harness::section(&out, "laps-unwritable")
        .unwrap_or_else(|| panic!("no laps-unwritable: {out}"));
    assert!(
        bad.contains("--laps /proc/no-such-dir/laps.txt:") && !bad.contains("exit 0"),
        "{bad}"
    );
    // --svg: the run's latency and bandwidth drawn (same run as the JSON checked below), `send`
    // and `send_region` above the eager limit; an unwritable file fails before the run.
    let plot = harness::section(&out, "svg").unwrap_or_else(|| panic!("no svg: {out}"));
    svg::check(
        &plot,
        &[
            "message size",
            "latency (µs)",
            "bandwidth (MB/s",
            "1 MiB",
            "openib bench: 2 ranks",
        ],
        &["openib send", "openib send_region (zero copy)"],
    );
    let bad = harness::section(&out, "svg-unwritable")
        .unwrap_or_else(|| panic!("no svg-unwritable: {out}"));
    assert!(
        bad.contains("--svg /proc/no-such-dir/b.svg:") && !bad.contains("exit 0"),
        "{bad}"
    );
    // A peer that misnumbers its eager message 100 (the immediate header's sequence byte reads
    // 0x65): the receiver fails the endpoint and the bench names the cause, without waiting for
    // its timeout.
    let lie = harness::section(&out, "lie").unwrap_or_else(|| panic!("no lie: {out}"));
    assert!(
        lie.contains("malformed message: sequence ending in 0x65 where 100 is due")
            && lie.contains("the endpoint to rank 1 failed")
            && !lie.contains("exit 0"),
        "{lie}"
    );
    // sendi of an inline message goes unsignaled but for one request in 16; with
    // OPENIB_SIGNAL_EVERY=1 every request is signaled and flush has no tail to close.
    let endpoint = |section: &str| {
        let text = harness::section(&out, section).unwrap_or_else(|| panic!("no {section}: {out}"));
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{section} ({e}): {text}"));
        v["endpoint"].clone()
    };
    let run = endpoint("run");
    assert!(run["unsignaled"].as_u64().unwrap() > 0, "{run}");
    eprintln!("run: endpoint {run}");
    let all = endpoint("signal-all");
    assert_eq!(
        (all["unsignaled"].as_u64(), all["tails_closed"].as_u64()),
        (Some(0), Some(0)),
        "{all}"
    );
    assert!(all["eager_sent"].as_u64().unwrap() > 20, "{all}");
    for (section, sizes) in [
        ("run", vec![8, 64, 512, 4096, 8192, 65536, 262144, 1048576]),
        ("signal-all", vec![8]),
        ("mpirun", vec![8, 65536]),
        ("small-cq", vec![4096, 16384]),
    ] {
        let text = harness::section(&out, section).unwrap_or_else(|| panic!("no {section}: {out}"));
        assert!(!text.contains("FAILED"), "{section}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{section} ({e}): {text}"));
        let got: Vec<u64> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["size"].as_u64().unwrap())
            .collect();
        assert_eq!(got, sizes, "{text}");
        // rxe is software RDMA (vendor id 0xffffff): `auto` takes the split rendezvous.
        assert_eq!(v["rndv_protocol"], "split (50% written)", "{section}");
        // The copying send's path by size: eager, a train up to 16 KiB, rendezvous above.
        for r in v["results"].as_array().unwrap() {
            let size = r["size"].as_u64().unwrap();
            let want = match size {
                0..=8192 => "eager",
                8193..=16384 => "train",
                _ => "rendezvous",
            };
            assert_eq!(r["path"], want, "{section}: {r}");
        }
        for r in v["results"].as_array().unwrap() {
            assert!(
                r["latency_us"].as_f64().unwrap() > 0.0
                    && r["bandwidth_mb_s"].as_f64().unwrap() > 0.0,
                "{r}"
            );
        }
        if section == "small-cq" {
            // Streams of 300 sends and puts on a 64-entry completion queue: the shared send
            // budget (40 requests in flight) keeps it from overflowing, which would fail the
            // queue pair; whether a stream reached the budget depends on timing (printed).
            let b = &v["send_budget"];
            assert_eq!(b["limit"], 40, "{v}");
            assert!(r_put_ok(&v), "{v}");
            eprintln!(
                "small-cq: the budget held requests back {} times",
                b["stalls"]
            );
        }
        eprintln!(
            "{section}: {}",
            serde_json::to_string(&v["results"]).unwrap()
        );
    }
}

/// The put stream of every bench result above the eager limit ran (its bandwidth is reported).
fn r_put_ok(v: &Value) -> bool {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"] != "eager")
        .all(|r| r["put_bandwidth_mb_s"].as_f64().is_some_and(|b| b > 0.0))
}

/// Sequence numbers wrap (issue 27): every endpoint's counters start 256 below 2^32
/// (`OPENIB_SEQ_START`), and `openib stress` (every byte checked by the command: eager,
/// trains and rendezvous mixed, from two threads, so eager messages are held behind
/// rendezvous reads across the wrap) and `openib bench` (ping-pong, payload checked) send
/// well past it. Before the fix the reorder buffer took the first message after a held one
/// across the wrap for a duplicate and the endpoint failed or stalled.
#[test]
fn eager_and_rendezvous_messages_cross_the_sequence_wrap() {
    if harness::skip_guest("softroce_transport sequence wrap") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "export OPENIB_SEQ_START=4294967040\n\
         echo '=== stress'; {b} run -n 2 --timeout 500 -- {b} stress --json --messages 600 --max-size 200000 --threads 2 --puts 5 --atomics 0 --seed 27 2>/tmp/stress.err || {{ echo FAILED; cat /tmp/stress.err; }}\n\
         echo '=== bench'; {b} run -n 2 --timeout 300 -- {b} bench --json --iters 200 --sizes 8,65536 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "900"], &["sh", "-c", &script]);
    let sec = |n: &str| harness::section(&out, n).unwrap_or_else(|| panic!("no {n}: {out}"));
    // An endpoint that numbered more than 256 messages (each user message takes one number)
    // from 2^32 - 256 on: its next number is past the wrap, and it received as many from the
    // peer (the other side's numbers came through the wrap in order).
    let crossed = |e: &Value| {
        let numbered: u64 = ["eager_sent", "trains_sent", "rndv_sent"]
            .iter()
            .map(|k| e[k].as_u64().unwrap_or_else(|| panic!("{k}: {e}")))
            .sum();
        let next = e["next_seq"].as_u64().unwrap_or_else(|| panic!("{e}"));
        numbered > 300 && next == (4_294_967_040 + numbered) % (1 << 32) && next < 1 << 20
    };
    let stress = sec("stress");
    assert!(!stress.contains("FAILED"), "stress: {stress}");
    let lines: Vec<Value> = stress
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("stress ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{stress}");
    for v in &lines {
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["received"], 600, "{v}");
        let ep = &v["endpoints"][0]["stats"];
        assert!(crossed(ep), "did not cross the wrap: {v}");
        let next_peer = ep["next_peer_seq"].as_u64().unwrap();
        assert!((256..1 << 20).contains(&next_peer), "{v}");
        assert!(ep["rndv_sent"].as_u64().unwrap() > 0, "no rendezvous: {v}");
        assert!(ep["eager_sent"].as_u64().unwrap() > 0, "no eager: {v}");
    }
    let bench = sec("bench");
    assert!(!bench.contains("FAILED"), "bench: {bench}");
    let v: Value = serde_json::from_str(&bench).unwrap_or_else(|e| panic!("bench ({e}): {bench}"));
    assert!(crossed(&v["endpoint"]), "did not cross the wrap: {v}");
}

/// 30,000 small messages streamed one way with thousands queued at the sender, three times,
/// beside two CPU hogs on the guest's two vCPUs (so the ranks get preempted): the credit-only
/// messages that return the receiver's credits must get their control credits back on the
/// sender's next header. Before that was fixed two runs in three hung this way (a sender that
/// missed the receiver's two credit messages until one poll spent every credit they brought
/// before reposting their buffers); without the hogs the race hardly ever showed. In release
/// (`scripts/test` runs it with `cargo test --release -- --ignored`): the debug build is slow.
#[test]
#[ignore = "release build: scripts/test runs it with --release --ignored"]
fn long_one_way_stream_of_small_messages_does_not_stall() {
    if harness::skip_guest("softroce_transport long stream") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "sh -c 'while :; do :; done' & h1=$!; sh -c 'while :; do :; done' & h2=$!\n\
         for r in 1 2 3; do echo \"=== run$r\"; {b} run -n 2 --timeout 200 -- {b} bench --json --iters 30000 --sizes 8 2>/tmp/bench.err || {{ echo FAILED; cat /tmp/bench.err; }}; done\n\
         kill $h1 $h2\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--smp", "2", "--timeout", "900"], &["sh", "-c", &script]);
    for run in ["run1", "run2", "run3"] {
        let text = harness::section(&out, run).unwrap_or_else(|| panic!("no {run}: {out}"));
        assert!(!text.contains("FAILED"), "{run}: {text}");
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{run} ({e}): {text}"));
        assert!(
            v["results"][0]["bandwidth_mb_s"].as_f64().unwrap() > 0.0,
            "{v}"
        );
    }
}

/// Issue 27: a peer that announces a rendezvous above this side's `OPENIB_MAX_MSG_SIZE`
/// (rank 1 allows 64 KiB, rank 0 sends 1 MiB) fails that endpoint with the number and the
/// limit, before anything is allocated for it: no abort, and the error is named. A send above
/// the sender's own limit is refused at once.
#[test]
fn a_rendezvous_above_the_receivers_largest_message_fails_only_its_endpoint() {
    if harness::skip_guest("softroce_transport") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "echo '=== uneven'; {b} run -n 2 --timeout 120 -- sh -c 'if [ \"$OPENIB_RT_RANK\" = 1 ]; then export OPENIB_MAX_MSG_SIZE=65536; fi; exec {b} bench --iters 3 --sizes 1048576' 2>&1; echo \"exit $?\"\n\
         echo '=== uneven-srq'; OPENIB_SRQ=on {b} run -n 2 --timeout 120 -- sh -c 'if [ \"$OPENIB_RT_RANK\" = 1 ]; then export OPENIB_MAX_MSG_SIZE=65536; fi; exec {b} bench --iters 3 --sizes 1048576' 2>&1; echo \"exit $?\"\n\
         echo '=== both'; OPENIB_MAX_MSG_SIZE=65536 {b} run -n 2 --timeout 120 -- {b} bench --iters 3 --sizes 1048576 2>&1; echo \"exit $?\"\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    let uneven = harness::section(&out, "uneven").unwrap_or_else(|| panic!("no uneven: {out}"));
    assert!(
        uneven.contains("announces 1048576 bytes, above this side's largest message (OPENIB_MAX_MSG_SIZE=65536)")
            && uneven.contains("the endpoint to rank 0 failed")
            && !uneven.contains("exit 0")
            && !uneven.contains("panicked")
            && !uneven.contains("memory allocation"),
        "{uneven}"
    );
    // The same through the shared receive queue (the RTS's buffer is reposted all the same).
    let srq = harness::section(&out, "uneven-srq").unwrap_or_else(|| panic!("no srq: {out}"));
    assert!(
        srq.contains("announces 1048576 bytes, above this side's largest message (OPENIB_MAX_MSG_SIZE=65536)")
            && !srq.contains("exit 0")
            && !srq.contains("panicked"),
        "{srq}"
    );
    let both = harness::section(&out, "both").unwrap_or_else(|| panic!("no both: {out}"));
    assert!(
        both.contains("message of 1048576 bytes exceeds the limit of 65536")
            && !both.contains("exit 0"),
        "{both}"
    );
}
