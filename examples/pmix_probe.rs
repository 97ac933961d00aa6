//! A PMIx runtime probe: every rank puts a blob derived from its rank, commits, fences, gets
//! every peer's blob and checks it, then prints one JSON line.
//!
//! ```text
//! mpirun --allow-run-as-root --oversubscribe -np 8 target/debug/examples/pmix_probe
//! OPENIB_RUNTIME=pmix target/debug/examples/pmix_probe          # a PMIx singleton
//! ```
//!
//! Options:
//! - `--mode collect|ondemand`: fence with or without data collection (default collect);
//! - `--bytes N`: blob size (default 64; rank r puts N + r % 5 bytes);
//! - `--iters K`: also time K further empty fences (default 0);
//! - `--missing-timeout S`: also get a key nobody put, with a timeout of S seconds;
//! - `--absent R`: rank R never enters the fence; the others expect a fence timeout (of
//!   `--fence-timeout`, default 30 s) that names R;
//! - `--subset`: also fence over the even ranks only (explicit process list);
//! - `--connect`: go through `openib::runtime::connect()` instead of `PmixRuntime::init()`;
//! - `--threads T`: also get every peer's blob from T threads at once (thread safety);
//! - `--warm`: a barrier before the put, so the timed fence does not include launch skew;
//! - `--no-marks`: no fence arrival marks (`PmixOptions::name_missing = false`);
//! - `--kill R`: after the first fence rank R kills itself (SIGKILL); the others poll
//!   `failed()` for up to `--kill-wait` seconds (default 10), report what they saw
//!   (`failed_after`, `failed_seen_ms`, `termination_events`), then fence once more with a 2 s
//!   timeout (`after_kill_fence`: `PeerFailed` or `FenceTimeout`, and its ranks).

use openib::runtime::pmix::{PmixOptions, PmixRuntime};
use openib::runtime::{Runtime, RuntimeError, Scope};
use std::time::{Duration, Instant};

fn blob(rank: u32, bytes: usize) -> Vec<u8> {
    let n = bytes + (rank % 5) as usize;
    (0..n)
        .map(|i| (rank as usize * 31 + i * 7 + (i >> 8)) as u8)
        .collect()
}

struct Args {
    collect: bool,
    bytes: usize,
    iters: u32,
    missing_timeout: Option<u64>,
    absent: Option<u32>,
    fence_timeout: u64,
    subset: bool,
    connect: bool,
    marks: bool,
    warm: bool,
    threads: u32,
    kill: Option<u32>,
    kill_wait: u64,
}

fn parse() -> Args {
    let mut a = Args {
        collect: true,
        bytes: 64,
        iters: 0,
        missing_timeout: None,
        absent: None,
        fence_timeout: 30,
        subset: false,
        connect: false,
        marks: true,
        warm: false,
        threads: 0,
        kill: None,
        kill_wait: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--mode" => a.collect = val() != "ondemand",
            "--bytes" => a.bytes = val().parse().expect("--bytes N"),
            "--iters" => a.iters = val().parse().expect("--iters K"),
            "--missing-timeout" => a.missing_timeout = Some(val().parse().expect("seconds")),
            "--absent" => a.absent = Some(val().parse().expect("--absent R")),
            "--fence-timeout" => a.fence_timeout = val().parse().expect("seconds"),
            "--subset" => a.subset = true,
            "--connect" => a.connect = true,
            "--no-marks" => a.marks = false,
            "--warm" => a.warm = true,
            "--threads" => a.threads = val().parse().expect("--threads T"),
            "--kill" => a.kill = Some(val().parse().expect("--kill R")),
            "--kill-wait" => a.kill_wait = val().parse().expect("seconds"),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn main() {
    let args = parse();
    let t0 = Instant::now();
    let (boxed, concrete) = if args.connect {
        let rt = openib::runtime::connect().unwrap_or_else(|e| fail(&format!("connect: {e}")));
        (Some(rt), None)
    } else {
        let options = PmixOptions {
            name_missing: args.marks,
        };
        let rt = PmixRuntime::with_options(options).unwrap_or_else(|e| fail(&format!("init: {e}")));
        (None, Some(rt))
    };
    let init_ms = ms(t0);
    let (out, errors) = match (&boxed, &concrete) {
        (Some(rt), _) => run(&args, &**rt, None, init_ms),
        (None, Some(rt)) => run(&args, rt, Some(rt), init_ms),
        (None, None) => unreachable!(),
    };
    // Finalize (drop) before exiting.
    drop(boxed);
    drop(concrete);
    finish(out, errors);
}

fn run(
    args: &Args,
    rt: &dyn Runtime,
    pmix: Option<&PmixRuntime>,
    init_ms: f64,
) -> (serde_json::Value, Vec<String>) {
    let info = rt.info().clone();
    let mut errors: Vec<String> = Vec::new();
    let mut out = serde_json::json!({
        "rank": info.rank, "size": info.size, "node": info.node, "local_rank": info.local_rank,
        "local_peers": info.local_peers, "backend": info.backend, "init_ms": init_ms,
        "collect": args.collect,
    });

    macro_rules! or_return {
        ($e:expr, $what:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => {
                    errors.push(format!("{}: {e}", $what));
                    return (out, errors);
                }
            }
        };
    }
    if args.warm {
        or_return!(
            rt.fence(false, Duration::from_secs(args.fence_timeout)),
            "warm-up barrier"
        );
    }
    let mine = blob(info.rank, args.bytes);
    or_return!(rt.put(Scope::Global, "probe.blob", &mine), "put");
    // Own key readable right after put.
    match rt.get(info.rank, "probe.blob", Duration::from_secs(5)) {
        Ok(v) if v == mine => {}
        other => errors.push(format!("own get after put: {other:?}")),
    }
    or_return!(rt.commit(), "commit");

    if let Some(absent) = args.absent {
        let timeout = Duration::from_secs(args.fence_timeout);
        if info.rank == absent {
            // Never enter the fence; stay alive past the others' timeout and the mark probe.
            std::thread::sleep(timeout + Duration::from_secs(4));
            out["absent"] = true.into();
            return (out, errors);
        }
        let t = Instant::now();
        let r = rt.fence(args.collect, timeout);
        out["fence_ms"] = ms(t).into();
        match r {
            Err(RuntimeError::FenceTimeout { missing, .. }) => {
                out["fence_error"] = "FenceTimeout".into();
                out["missing"] = missing.clone().into();
                if missing != vec![absent] {
                    errors.push(format!(
                        "fence timeout named {missing:?}, expected [{absent}]"
                    ));
                }
            }
            other => errors.push(format!("fence with an absent rank: {other:?}")),
        }
        return (out, errors);
    }

    let t = Instant::now();
    or_return!(
        rt.fence(args.collect, Duration::from_secs(args.fence_timeout)),
        "fence"
    );
    out["fence_ms"] = ms(t).into();
    out["put_bytes"] = mine.len().into();

    if let Some(victim) = args.kill {
        if let Some(p) = pmix {
            out["events_registered"] = match p.events_registered() {
                Ok(()) => true.into(),
                Err(status) => status.into(),
            };
        }
        out["failed_before"] = rt.failed().into();
        if info.rank == victim {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL returned");
        }
        let t = Instant::now();
        let wait = Duration::from_secs(args.kill_wait);
        let mut seen = None;
        while t.elapsed() < wait {
            if rt.failed().contains(&victim) {
                seen = Some(ms(t));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        out["failed_after"] = rt.failed().into();
        out["failed_seen_ms"] = seen.into();
        if let Some(p) = pmix {
            out["termination_events"] = p.client().termination_events().into();
        }
        let t = Instant::now();
        let r = rt.fence(false, Duration::from_secs(2));
        out["after_kill_fence_ms"] = ms(t).into();
        let (kind, ranks): (&str, Vec<u32>) = match r {
            Err(RuntimeError::PeerFailed { ranks }) => ("PeerFailed", ranks),
            Err(RuntimeError::FenceTimeout { missing, .. }) => ("FenceTimeout", missing),
            Ok(()) => ("Ok", Vec::new()),
            Err(e) => {
                errors.push(format!("fence after the kill: {e}"));
                ("other", Vec::new())
            }
        };
        out["after_kill_fence"] = kind.into();
        out["after_kill_fence_ranks"] = ranks.into();
        return (out, errors);
    }

    let t = Instant::now();
    let mut verified = Vec::new();
    for peer in 0..info.size {
        match rt.get(peer, "probe.blob", Duration::from_secs(10)) {
            Ok(v) if v == blob(peer, args.bytes) => verified.push(peer),
            Ok(v) => errors.push(format!("rank {peer}: wrong blob ({} bytes)", v.len())),
            Err(e) => errors.push(format!("rank {peer}: {e}")),
        }
    }
    out["get_all_ms"] = ms(t).into();
    out["verified"] = verified.into();

    if args.threads > 0 {
        let bad = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..args.threads {
                let bad = &bad;
                s.spawn(move || {
                    for i in 0..info.size {
                        let peer = (i + t) % info.size;
                        match rt.get(peer, "probe.blob", Duration::from_secs(10)) {
                            Ok(v) if v == blob(peer, args.bytes) => {}
                            _ => {
                                bad.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        let bad = bad.into_inner();
        out["threaded_gets_failed"] = bad.into();
        if bad > 0 {
            errors.push(format!("{bad} threaded gets failed"));
        }
    }

    let mut nodes = Vec::new();
    for peer in 0..info.size {
        match rt.node_of(peer) {
            Ok(n) => nodes.push(n),
            Err(e) => errors.push(format!("node_of({peer}): {e}")),
        }
    }
    out["nodes"] = nodes.into();

    if let Some(s) = args.missing_timeout {
        let peer = (info.rank + 1) % info.size;
        let t = Instant::now();
        let r = rt.get(peer, "probe.nobody-put-this", Duration::from_secs(s));
        out["missing_ms"] = ms(t).into();
        out["missing"] = match r {
            Err(RuntimeError::NotFound { .. }) => "NotFound".into(),
            Err(RuntimeError::GetTimeout { .. }) => "GetTimeout".into(),
            other => {
                errors.push(format!("get of a missing key: {other:?}"));
                "unexpected".into()
            }
        };
    }

    if args.subset {
        if let Some(rt) = pmix {
            if info.rank % 2 == 0 {
                let evens: Vec<u32> = (0..info.size).step_by(2).collect();
                let t = Instant::now();
                match rt.fence_ranks(&evens, false, Duration::from_secs(10)) {
                    Ok(()) => out["subset_fence_ms"] = ms(t).into(),
                    Err(e) => errors.push(format!("subset fence: {e}")),
                }
            }
        }
    }

    if args.iters > 0 {
        let t = Instant::now();
        for _ in 0..args.iters {
            if let Err(e) = rt.fence(false, Duration::from_secs(args.fence_timeout)) {
                errors.push(format!("barrier: {e}"));
                break;
            }
        }
        out["barrier_us"] = (t.elapsed().as_secs_f64() * 1e6 / f64::from(args.iters)).into();
    }

    // Everyone done before anyone finalizes (a peer's server may still serve our gets).
    if info.size > 1 {
        if let Err(e) = rt.fence(false, Duration::from_secs(args.fence_timeout)) {
            errors.push(format!("final fence: {e}"));
        }
    }
    (out, errors)
}

fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

fn finish(mut out: serde_json::Value, errors: Vec<String>) -> ! {
    let ok = errors.is_empty();
    out["ok"] = ok.into();
    out["errors"] = errors.into();
    println!("{out}");
    std::process::exit(if ok { 0 } else { 1 });
}

fn fail(msg: &str) -> ! {
    println!("{}", serde_json::json!({"ok": false, "errors": [msg]}));
    std::process::exit(2);
}
