//! The transport reads the device's asynchronous events (src/transport/device_events.rs): in
//! the SoftRoCE guest, rxe0's netdev goes down while two ranks of `openib stress` exchange
//! messages. Every rank must warn, at the default log level, that port rxe0:1 went down, and
//! the endpoint failure that ends the job must name the port's state as its cause (rxe fails a
//! request on a port that is down at once, with "local QP operation error", which alone does
//! not say why). The job must end, not hang.
//!
//! If the guest cannot start, this test fails with the harness's reason; it never passes
//! without running. `OPENIB_SKIP_GUEST=1` skips it loudly (for machines without qemu).

#[path = "softroce/harness.rs"]
mod harness;

/// Seconds after which the job counts as hung (its own timeouts are 120 s).
const HANG_BOUND_S: u64 = 100;

#[test]
fn a_port_that_goes_down_is_reported_and_named_in_the_failure() {
    if harness::skip_guest("softroce_device_events") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    // The link goes down once rxe0 sent 3,000 packets (the ranks are connected and
    // streaming; 20,000 messages take far longer); the script checks that they were still
    // running.
    let script = format!(
        "t0=$(date +%s); \
         ({b} run -n 2 --timeout 120 -- {b} stress --messages 20000 --threads 1 --max-size 65536 \
           --puts 0 --atomics 0 --timeout 110 >/tmp/out 2>/tmp/err; echo \"rc=$?\" >/tmp/rc) & \
         c=/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts; n=0; \
         while [ $(cat $c) -lt 3000 ] && [ $n -lt 600 ] && [ ! -f /tmp/rc ]; do sleep 0.1; n=$((n+1)); done; \
         [ -f /tmp/rc ] && echo 'finished before the link went down'; \
         ip link set veth0 down; wait; ip link set veth0 up; \
         cat /tmp/rc; echo \"secs=$(( $(date +%s) - t0 ))\"; echo '--- err'; cat /tmp/err"
    );
    let out = harness::guest_run_ok(&["--smp", "2", "--timeout", "300"], &["sh", "-c", &script]);
    assert!(!out.contains("finished before the link went down"), "{out}");
    let secs: u64 = out
        .split("secs=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no time: {out}"));
    assert!(secs < HANG_BOUND_S, "the job took {secs} s: {out}");
    assert!(
        !out.contains("rc=0"),
        "the job went on without its port: {out}"
    );
    let (_, err) = out.split_once("--- err\n").expect("err marker");
    // Each rank warns once (its own device context gets the event).
    let warnings = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("port rxe0:1 went down"))
        .count();
    assert_eq!(warnings, 2, "{err}");
    // The failure that ends the job names the cause.
    assert!(
        err.lines()
            .any(|l| l.contains("failed") && l.contains("port rxe0:1 is down")),
        "{err}"
    );
}
