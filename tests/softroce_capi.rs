//! The C ABI on rxe0: `tests/c/exchange.c`, linked against libopenib.so, under
//! `openib run -n 2`. Each rank checks every message (sizes 0 up to the eager limit, sent from
//! two threads, and a third stream mixing rendezvous sizes up to 1 MiB with eager ones, two of
//! them by `openib_send_mem`), a get and a put byte by byte, `openib_sendi` retried on BUSY,
//! fetch-and-add and compare-and-swap on rank 0's counters (old values at rank 1, final values
//! at rank 0, misaligned and out-of-range atomics refused), the reentrancy rule, that every
//! token completes once, and `openib_del_procs` with a get in flight; it exits 0 only if both
//! ranks matched. Run twice in one boot: with the default eager limit, and with a small one (so
//! messages wait for credits and send slots). And `tests/c/vanish.c`: a send to a peer that
//! removed this process fails after the queue pair's retries.

#[path = "softroce/harness.rs"]
mod harness;
#[path = "capi/support.rs"]
mod support;

#[test]
fn c_program_exchanges_checked_data_through_libopenib() {
    if harness::skip_guest("softroce_capi") {
        return;
    }
    // Built on the host (the guest sees the host's files read-only, in a chroot).
    let exe = support::compile_linked("exchange");
    let dir = exe.parent().expect("dir").display().to_string();
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "cd {dir} || exit 1\n\
         echo '=== default'; {b} run -n 2 --timeout 240 -- ./exchange 200 2>/tmp/ex.err || {{ echo FAILED; cat /tmp/ex.err; }}\n\
         echo '=== small'; OPENIB_EAGER_LIMIT=256 OPENIB_RECV_DEPTH=16 {b} run -n 2 --timeout 240 -- ./exchange 300 2>/tmp/ex.err || {{ echo FAILED; cat /tmp/ex.err; }}\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    for (section, n, limit) in [("default", 200, 8192), ("small", 300, 256)] {
        let text = harness::section(&out, section).unwrap_or_else(|| panic!("no {section}: {out}"));
        assert!(!text.contains("FAILED"), "{section}:\n{text}");
        for rank in 0..2 {
            let want = format!(
                "exchange: rank {rank} ok: {n} messages each way (" // then the byte count
            );
            let line = text
                .lines()
                .find(|l| l.starts_with(&want))
                .unwrap_or_else(|| panic!("{section}: no summary of rank {rank}:\n{text}"));
            assert!(line.contains(&format!("sizes 0..{limit}")), "{line}");
            // tests/c/exchange.c's large_len: 9 of the 15 are above either eager limit.
            assert!(
                line.contains("15 mixed messages (9 rendezvous, up to 1048576 B, "),
                "{line}"
            );
            assert!(line.contains(", 300 sendi ("), "{line}");
            let atomics = if rank == 1 {
                "atomics ok (66 old values)"
            } else {
                "atomics ok (counters 0x123456789abcdef, 32)"
            };
            assert!(line.contains(atomics), "{line}");
            assert!(line.contains("del_procs ok"), "{line}");
            assert!(line.ends_with("peer ok"), "{line}");
        }
        eprint!("{section}:\n{text}");
    }
}

/// A peer that removes this process (`openib_del_procs`) and stays alive: nothing answers the
/// packets of a send to it any more, and the runtime reports no death, so only the queue pair's
/// transport retries can fail the send (`tests/c/vanish.c`). rxe retries a `retry_cnt` of 7
/// forever (`rxe_comp.c`); with 7 this send never failed. Under the default CPC list, with
/// oob (no disconnect message could fail the endpoint another way) and with rdmacm (whose
/// queue pairs take our ACK timeout, not the CM's: with the CM's it took 16 s on rxe). Each
/// within 20 s (vanish.c's limit; about 7.5 s at the default `OPENIB_ACK_TIMEOUT` 18).
#[test]
fn a_send_to_a_peer_that_vanished_fails_after_its_retries() {
    if harness::skip_guest("softroce_capi vanish") {
        return;
    }
    let exe = support::compile_linked("vanish");
    let dir = exe.parent().expect("dir").display().to_string();
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "cd {dir} || exit 1\n\
         echo '=== default'; {b} run -n 2 --timeout 120 -- ./vanish 20 2>&1 || echo FAILED\n\
         echo '=== oob'; OPENIB_CPC_INCLUDE=oob {b} run -n 2 --timeout 120 -- ./vanish 20 2>&1 || echo FAILED\n\
         echo '=== rdmacm'; OPENIB_CPC_INCLUDE=rdmacm {b} run -n 2 --timeout 120 -- ./vanish 20 2>&1 || echo FAILED\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "400"], &["sh", "-c", &script]);
    for section in ["default", "oob", "rdmacm"] {
        let text = harness::section(&out, section).unwrap_or_else(|| panic!("no {section}: {out}"));
        assert!(!text.contains("FAILED"), "{section}:\n{text}");
        assert!(text.contains("vanish: rank 1 ok"), "{section}:\n{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("vanish: rank 0 ok: the send failed after "))
            .unwrap_or_else(|| panic!("{section}: no verdict of rank 0:\n{text}"));
        eprintln!("{section}: {line}");
    }
}

/// Caller memory registered with `openib_mem_register` and put/get/atomics by address
/// (`tests/c/memreg.c`): a malloc'ed buffer at an odd address, 1 MiB puts and gets checked
/// byte by byte (and the guard bytes around the registration), `openib_send_mem` from it,
/// 100 fetch-and-adds and 2 compare-and-swaps with every old value and the final counters
/// checked, range errors naming the side, and a put with a key the peer never gave failing in
/// its completion. The same boot runs `tests/c/group_create.c` ([`group_create_checks`]).
#[test]
fn caller_memory_registered_for_put_get_and_atomics_by_address() {
    if harness::skip_guest("softroce_capi memreg") {
        return;
    }
    let exe = support::compile_linked("memreg");
    let dir = exe.parent().expect("dir").display().to_string();
    let gc = support::compile_linked("group_create");
    let gc_dir = gc.parent().expect("dir").display().to_string();
    let b = env!("CARGO_BIN_EXE_openib");
    // group_create.c shares this boot (a boot costs 15-30 s of CI): checked by
    // `group_create_checks` below.
    let script = format!(
        "cd {dir} || exit 1\n\
         echo '=== memreg'; {b} run -n 2 --timeout 240 -- ./memreg 2>&1 || echo FAILED\n\
         cd {gc_dir} || exit 1\n\
         echo '=== four'; {b} run -n 4 --timeout 240 -- ./group_create 2>&1 || echo FAILED\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    group_create_checks(&out);
    let text = harness::section(&out, "memreg").unwrap_or_else(|| panic!("no memreg: {out}"));
    assert!(!text.contains("FAILED"), "{text}");
    for rank in 0..2 {
        let want = format!(
            "memreg: rank {rank} ok: put/get 1048583 bytes, send_mem, 102 atomics, refusals, "
        );
        let line = text
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no summary of rank {rank}:\n{text}"));
        assert!(line.ends_with("peer ok"), "{line}");
        if rank == 0 {
            assert!(!line.contains("foreign handle success"), "{line}");
        }
    }
    eprint!("{text}");
}

/// `tests/c/own_rank.c`: the C ABI to the process's own rank (issue 30: `osc rdma` needs an
/// endpoint to the caller itself). In jobs of 1 and 2 ranks, each rank finds itself reachable,
/// sends itself every size class (sendi with BUSY retries, `openib_send_mem`,
/// `openib_send_nocopy`, an answer sent from inside a callback), each message from the own
/// rank, in order, every byte checked and none delivered inside the send call; puts and gets
/// its own memory by offset and by address (malloc'd memory registered at an odd address),
/// every byte and the guard bytes checked; 44 atomics with every old value; every completion
/// names the own rank; after `openib_del_procs` of the own rank sends give
/// `OPENIB_ERR_BAD_PEER`.
#[test]
fn c_program_sends_puts_gets_and_atomics_to_its_own_rank() {
    if harness::skip_guest("softroce_capi own_rank") {
        return;
    }
    let exe = support::compile_linked("own_rank");
    let dir = exe.parent().expect("dir").display().to_string();
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "cd {dir} || exit 1\n\
         echo '=== one'; {b} run -n 1 --timeout 240 -- ./own_rank 2>&1 || echo FAILED\n\
         echo '=== two'; {b} run -n 2 --timeout 240 -- ./own_rank 2>&1 || echo FAILED\n\
         echo '=== small'; OPENIB_EAGER_LIMIT=256 OPENIB_RECV_DEPTH=16 {b} run -n 2 --timeout 240 -- ./own_rank 2>&1 || echo FAILED\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&["--timeout", "600"], &["sh", "-c", &script]);
    for (section, n) in [("one", 1), ("two", 2), ("small", 2)] {
        let text = harness::section(&out, section).unwrap_or_else(|| panic!("no {section}: {out}"));
        assert!(!text.contains("FAILED"), "{section}:\n{text}");
        for rank in 0..n {
            let want = format!("own_rank: rank {rank} ok: 214 messages to itself (");
            let line = text
                .lines()
                .find(|l| l.starts_with(&want))
                .unwrap_or_else(|| panic!("{section}: no summary of rank {rank}:\n{text}"));
            assert!(
                line.contains(
                    "echo 1, put/get 1048568 B and 65535 B by address, 44 atomics, del_procs ok"
                ),
                "{line}"
            );
        }
        eprint!("{section}:\n{text}");
    }
}

/// `tests/c/group_create.c`: `openib_group_create` through the C ABI (issue 32) in a job of 4:
/// a group without the caller is `OPENIB_ERR_INVALID`; rank 0's group lacks rank 3, so ranks 0
/// to 2 get `OPENIB_OK` and the group {0, 1, 2} and rank 3 `OPENIB_ERR_EXCLUDED`, the same
/// group and `who` = 0; tag 0x3f is then refused to `openib_set_handler`. Run in the boot of
/// `caller_memory_registered_for_put_get_and_atomics_by_address`, section `four`.
fn group_create_checks(out: &str) {
    let text = harness::section(out, "four").unwrap_or_else(|| panic!("no four: {out}"));
    assert!(!text.contains("FAILED"), "{text}");
    for rank in 0..4 {
        let want = if rank == 3 {
            format!("group_create: rank {rank} ok: excluded by 0, group of 3")
        } else {
            format!("group_create: rank {rank} ok: member, group of 3")
        };
        assert!(text.lines().any(|l| l == want), "rank {rank}: {text}");
    }
}
