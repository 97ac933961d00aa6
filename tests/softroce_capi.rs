//! The C ABI on rxe0: `tests/c/exchange.c`, linked against libopenib.so, under
//! `openib run -n 2`. Each rank checks every message (sizes 0 up to the eager limit, sent from
//! two threads), a get and a put byte by byte, the reentrancy rule and that every token
//! completes once; it exits 0 only if both ranks matched. Run twice in one boot: with the
//! default eager limit, and with a small one (so messages wait for credits and send slots).

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
            assert!(line.ends_with("peer ok"), "{line}");
        }
        eprint!("{section}:\n{text}");
    }
}
