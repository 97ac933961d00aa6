//! The plots: `openib plot` of a saved `openib bench --json`, `scripts/anchors --save` or
//! `openib sim group-create --json` document, and `openib modex size --svg`. Each SVG parses, has its axis labels and one
//! curve per system. (`openib bench --svg` itself runs in the guest: softroce_transport.)

#[path = "common/svg.rs"]
mod svg;

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

fn openib(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openib"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENIB_") {
            c.env_remove(k);
        }
    }
    c.output().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("openib-plot-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

const SIZES: [u64; 6] = [8, 512, 8192, 65536, 262144, 1048576];

/// A document in the shape of `openib bench --json` (the fields the plot reads, and others).
fn bench_doc() -> Value {
    let results: Vec<Value> = SIZES
        .iter()
        .map(|&s| {
            let lat = 20.0 + s as f64 / 300.0;
            let big = s > 8192;
            json!({"size": s, "latency_us": lat * 1.1, "latency_trimmed_us": lat,
                "latency_median_us": lat, "bandwidth_mb_s": s as f64 / lat,
                "latency_zero_copy_trimmed_us": if big { json!(lat * 0.8) } else { Value::Null },
                "bandwidth_zero_copy_mb_s": if big { json!(s as f64 / lat * 1.5) } else { Value::Null },
                "path": if big { "rendezvous" } else { "eager" }})
        })
        .collect();
    json!({"results": results, "eager_limit": 8192, "wireup_us": 1000.0})
}

const LAT_BW_LABELS: [&str; 6] = [
    "message size",
    "latency (µs)",
    "bandwidth (MB/s",
    "Latency (half round trip)",
    "Bandwidth (streamed)",
    "1 MiB",
];

/// The legend names of an anchors plot of all four systems (openib has two curves).
const ANCHORS_SERIES: [&str; 5] = [
    "openib send",
    "openib send_region (zero copy)",
    "perftest (ib_send_lat, ib_write_bw)",
    "Open MPI 4.1 openib BTL",
    "Open MPI 4.1 + UCX (rc_verbs)",
];

#[test]
fn a_bench_document_plots_latency_and_bandwidth_of_both_sends() {
    let input = tmp("bench.json");
    std::fs::write(&input, bench_doc().to_string()).unwrap();
    let out = tmp("bench.svg");
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty());
    let text = std::fs::read_to_string(&out).unwrap();
    let all = svg::check(
        &text,
        &LAT_BW_LABELS,
        &["openib send", "openib send_region (zero copy)"],
    );
    assert!(all.contains("openib bench"), "default title: {all}");
    assert!(all.contains("eager limit 8 KiB"), "{all}");
}

#[test]
fn an_anchors_document_plots_one_curve_per_system() {
    let systems = ["openib", "perftest", "ompi-openib", "ucx"];
    let summary: Vec<Value> = SIZES
        .iter()
        .map(|&s| {
            let mut row = json!({"size": s});
            for (k, sys) in systems.iter().enumerate() {
                let key = sys.replace('-', "_");
                let lat = 10.0 * (k + 1) as f64 + s as f64 / 500.0;
                row[format!("{key}_latency_trimmed_us")] = json!(lat);
                row[format!("{key}_latency_us")] = json!(lat * 1.2);
                row[format!("{key}_bandwidth_mb_s")] = json!(s as f64 / lat);
            }
            row["openib_zero_copy_latency_trimmed_us"] = if s > 8192 {
                json!(9.0 + s as f64 / 600.0)
            } else {
                Value::Null
            };
            row["openib_zero_copy_bandwidth_mb_s"] = if s > 8192 {
                json!(s as f64 / 30.0)
            } else {
                Value::Null
            };
            row
        })
        .collect();
    let doc = json!({"config": {"sizes": SIZES, "iters": 20, "rounds": 1, "systems": systems},
        "rounds": [], "summary": summary, "errors": [], "warnings": []});
    let out = tmp("anchors.svg");
    // From standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_openib"))
        .args([
            "plot",
            "--svg",
            out.to_str().unwrap(),
            "--title",
            "anchors test",
        ])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let all = svg::check(
        &text,
        &LAT_BW_LABELS,
        &[
            "openib send",
            "openib send_region (zero copy)",
            "perftest (ib_send_lat, ib_write_bw)",
            "Open MPI 4.1 openib BTL",
            "Open MPI 4.1 + UCX (rc_verbs)",
        ],
    );
    assert!(all.contains("anchors test"));
    // A system that did not run (--only) has no curve.
    let mut two = doc.clone();
    two["config"]["systems"] = json!(["openib", "perftest"]);
    let input = tmp("anchors2.json");
    std::fs::write(&input, two.to_string()).unwrap();
    let out2 = tmp("anchors2.svg");
    let o = openib(&[
        "plot",
        "--svg",
        out2.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all = svg::check(
        &std::fs::read_to_string(&out2).unwrap(),
        &LAT_BW_LABELS,
        &[
            "openib send",
            "openib send_region (zero copy)",
            "perftest (ib_send_lat, ib_write_bw)",
        ],
    );
    assert!(!all.contains("UCX"));
}

#[test]
fn an_unplottable_document_fails_naming_why() {
    let input = tmp("other.json");
    std::fs::write(&input, r#"{"size": 3}"#).unwrap();
    let out = tmp("never.svg");
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("openib plot: not a plottable document"),
        "{err}"
    );
    assert!(!out.exists());
    std::fs::write(&input, "{not json").unwrap();
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("other.json"));
    // No positive value anywhere: nothing to draw, said so.
    std::fs::write(
        &input,
        r#"{"results": [{"size": 8, "latency_trimmed_us": 0}]}"#,
    )
    .unwrap();
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to plot"));
    let o = openib(&["plot", "--svg", "/proc/no-such-dir/x.svg", "-"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn modex_size_draws_every_format_against_job_size_and_prints_the_same() {
    let base = [
        "modex",
        "size",
        "--nodes",
        "8",
        "--ppn",
        "16",
        "--fixture",
        "tests/fixtures/ib-dual-port.json",
    ];
    let plain = openib(&base);
    assert!(plain.status.success());
    let out = tmp("modex.svg");
    let mut args = base.to_vec();
    args.extend(["--svg", out.to_str().unwrap()]);
    let o = openib(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, plain.stdout, "--svg changes nothing printed");
    let all = svg::check(
        &std::fs::read_to_string(&out).unwrap(),
        &[
            "job size (processes)",
            "modex bytes per process",
            "8 node(s), 1 to 16 processes each",
            "16 processes per node, 1 to 8 node(s)",
        ],
        &[
            "openib (node leaders, gathered)",
            "openib, a blob per process",
            "Open MPI 4.1 openib BTL",
            "Open MPI 1.3 openib BTL",
            "floor (distinct values, no keys)",
        ],
    );
    assert!(
        all.contains("128"),
        "the job's 128 processes on the axis: {all}"
    );
    // With --json too; a file that cannot be written fails the command.
    args.push("--json");
    let o = openib(&args);
    assert!(o.status.success());
    args.pop();
    let n = args.len();
    args[n - 1] = "/proc/no-such-dir/m.svg";
    let o = openib(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--svg"));
}

#[test]
fn the_cli_doc_documents_the_plots() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
    for s in ["`--svg FILE`", "## `openib plot`", "docs/plots/README.md"] {
        assert!(doc.contains(s), "docs/CLI.md: {s}");
    }
}

/// The committed pictures: each listed with the command that made it, and each a complete
/// plot (its labels, every system's curve).
#[test]
fn the_committed_plots_are_complete() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plots");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for cmd in [
        "bench --json --svg /tmp/bench.svg",
        "scripts/anchors --iters 100 --warmup 20 --rounds 3 --save docs/plots/anchors.json --svg docs/plots/anchors.svg",
        "modex size --nodes 1024 --ppn 64 --fixture tests/fixtures/ib-dual-port.json --svg docs/plots/modex-size.svg",
        "sim group-create --max-procs 65536 --json > docs/plots/group-create.json",
        "plot --svg docs/plots/group-create.svg docs/plots/group-create.json",
    ] {
        assert!(readme.contains(cmd), "docs/plots/README.md: {cmd}");
    }
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("docs/plots/{f}: {e}"))
    };
    svg::check(
        &read("bench.svg"),
        &LAT_BW_LABELS,
        &["openib send", "openib send_region (zero copy)"],
    );
    svg::check(&read("anchors.svg"), &LAT_BW_LABELS, &ANCHORS_SERIES);
    svg::check(
        &read("modex-size.svg"),
        &["job size (processes)", "modex bytes per process", "64K"],
        &[
            "openib (node leaders, gathered)",
            "openib, a blob per process",
            "Open MPI 4.1 openib BTL",
            "Open MPI 1.3 openib BTL",
            "floor (distinct values, no keys)",
        ],
    );
    svg::check(
        &read("group-create.svg"),
        &GROUP_CREATE_LABELS,
        &GROUP_CREATE_SERIES,
    );
    // The group-creation data: p = 16 to 65,536, every run judged right, and redrawn the same.
    let gc: Value = serde_json::from_str(&read("group-create.json")).unwrap();
    let rows = gc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7 * 4);
    assert_eq!(rows.last().unwrap()["p"], 65536);
    assert!(rows.iter().all(|r| r["problems"] == json!([])));
    let out = tmp("re-group-create.svg");
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        dir.join("group-create.json").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    svg::check(
        &std::fs::read_to_string(&out).unwrap(),
        &GROUP_CREATE_LABELS,
        &GROUP_CREATE_SERIES,
    );
    // The JSON beside them redraws the same curves.
    for (json, series) in [
        ("bench.json", &ANCHORS_SERIES[..2]),
        ("anchors.json", &ANCHORS_SERIES[..]),
    ] {
        let out = tmp(&format!("re-{json}.svg"));
        let o = openib(&[
            "plot",
            "--svg",
            out.to_str().unwrap(),
            dir.join(json).to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{json}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        svg::check(
            &std::fs::read_to_string(&out).unwrap(),
            &LAT_BW_LABELS,
            series,
        );
    }
}

/// `scripts/anchors --svg`: a file it cannot write fails before the (long) guest run, and the
/// flag wants a value.
#[test]
fn anchors_svg_fails_at_once_on_a_file_it_cannot_write() {
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg("scripts/anchors")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    };
    let o = run(&["--only", "perftest", "--svg", "/proc/no-such-dir/a.svg"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--svg /proc/no-such-dir/a.svg cannot be written"),
        "{err}"
    );
    let o = run(&["--svg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--svg needs a value"));
}

/// `scripts/anchors --osc --save`: the one-sided figures (latency per operation, put
/// bandwidth), drawn by themselves when no point-to-point system ran and with `--osc` from any
/// anchors document; an operation that failed has no marker and the note names it.
#[test]
fn an_anchors_osc_document_plots_each_operation_per_system() {
    let systems = ["ompi-openib", "ucx", "ompi-oib"];
    let ops = ["put", "get", "fop", "put_bw", "cas"];
    let summary: Vec<Value> = ops
        .iter()
        .map(|&op| {
            let mut row = json!({"op": op, "size": if op == "put_bw" { 1048576 } else { 8 }});
            for (k, sys) in systems.iter().enumerate() {
                let key = sys.replace('-', "_");
                let failed = *sys == "ompi-openib" && op == "cas";
                let lat = if op == "put_bw" || failed {
                    Value::Null
                } else {
                    json!(20.0 + 7.0 * k as f64)
                };
                row[format!("{key}_latency_trimmed_us")] = lat.clone();
                row[format!("{key}_latency_us")] = lat;
                row[format!("{key}_bandwidth_mb_s")] = if op == "put_bw" {
                    json!(20.0 + k as f64)
                } else {
                    Value::Null
                };
            }
            row
        })
        .collect();
    let osc = json!({"systems": systems, "flavor": "create", "rounds": 3, "summary": summary,
        "failures": [{"system": "ompi-openib", "round": 1, "op": "cas",
                      "error": "rank 1: signal 11 (SIGSEGV) during cas"}], "targets": []});
    let labels = [
        "Put+flush",
        "Get+flush",
        "Fetch_and_op",
        "Compare_and_swap",
        "Latency of one 8-byte operation",
        "Put bandwidth",
        "1 MiB",
        "failed (no marker): ompi-openib in cas",
        "MPI_Win_create",
    ];
    let names = [
        "Open MPI 4.1 openib BTL",
        "Open MPI 4.1 + UCX (rc_verbs)",
        "Open MPI 4.1 ob1 + oib (this transport)",
    ];
    // One-sided systems only: the one-sided figures by themselves.
    let only = json!({"config": {"sizes": [8], "iters": 20, "rounds": 3, "systems": [],
        "osc_systems": systems}, "rounds": [], "summary": [], "osc": osc});
    let input = tmp("osc.json");
    std::fs::write(&input, only.to_string()).unwrap();
    let out = tmp("osc.svg");
    let o = openib(&[
        "plot",
        "--svg",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let all = svg::check_markers(&text, &labels, &names);
    assert!(all.contains("One-sided MPI"), "{all}");
    // Markers: one per system and operation that ran (11 latencies: 3 x 4 less the failed
    // cas; 3 bandwidths), told apart by the marker shapes of the first three styles.
    let count = |pat: &str| text.matches(pat).count();
    assert_eq!(
        count("<circle"),
        3 + 1 + 1,
        "circles: ompi-openib's 3 latencies, 1 bandwidth, legend"
    );
    assert_eq!(
        count("<polygon"),
        4 + 1 + 1,
        "triangles: ucx's 4 latencies, 1 bandwidth, legend"
    );
    // With --osc from a document that has point-to-point systems too.
    let mut both = only.clone();
    both["config"]["systems"] = json!(["ucx"]);
    std::fs::write(&input, both.to_string()).unwrap();
    let out2 = tmp("osc2.svg");
    let o = openib(&[
        "plot",
        "--osc",
        "--svg",
        out2.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    svg::check_markers(&std::fs::read_to_string(&out2).unwrap(), &labels, &names);
    // --osc on a document without one-sided figures: said so.
    std::fs::write(&input, r#"{"config": {"systems": ["ucx"]}, "summary": []}"#).unwrap();
    let o = openib(&[
        "plot",
        "--osc",
        "--svg",
        out2.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no \"osc\" object"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The legend names of the group-creation plot (issue 32): a curve per failure count and the
/// three reference lines.
const GROUP_CREATE_SERIES: [&str; 7] = [
    "group create, no failure",
    "group create, 1 failure",
    "group create, 2 failures",
    "group create, 4 failures",
    "bound 2⌈log2 p⌉ + 2",
    "resilient fence 4⌈log2 p⌉",
    "bound p log2 p (log2 p per process)",
];

const GROUP_CREATE_LABELS: [&str; 5] = [
    "processes p",
    "Steps to the last survivor's decision",
    "Messages per process",
    "messages / p",
    "steps (message hops, critical path)",
];

/// `openib sim group-create --json` measures p = 16 and 64 (failure-free: the bound's steps
/// and 5 (p - 1) messages; every run judged right), and `openib plot` draws the document: a
/// curve per failure count and the reference lines, told by its kind or by `--group-create`.
#[test]
fn group_create_measurement_plots_steps_and_messages_against_p() {
    let o = openib(&["sim", "group-create", "--max-procs", "64", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "group-create-sim");
    let rows = doc["rows"].as_array().unwrap();
    let points: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["p"].as_u64().unwrap(), r["failures"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        points,
        [16, 64]
            .iter()
            .flat_map(|&p| [0, 1, 2, 4].map(|f| (p, f)))
            .collect::<Vec<_>>()
    );
    for r in rows {
        let p = r["p"].as_u64().unwrap();
        let log2_p = if p == 16 { 4 } else { 6 };
        assert_eq!(r["problems"], json!([]), "{r}");
        assert_eq!(
            (&r["steps_bound"], &r["fence_steps"], &r["log2_p"]),
            (&json!(2 * log2_p + 2), &json!(4 * log2_p), &json!(log2_p))
        );
        if r["failures"] == 0 {
            assert_eq!(
                (&r["runs"], &r["steps_max"]),
                (&json!(1), &r["steps_bound"])
            );
            assert_eq!(r["messages_mean"], json!(5 * (p - 1)), "{r}");
        } else {
            assert_eq!(r["runs"], doc["seeds_with_failures"]);
            assert!(
                r["messages_mean"].as_u64().unwrap() > 5 * (p - 1) / 2,
                "{r}"
            );
        }
    }
    let input = tmp("group-create.json");
    std::fs::write(&input, &o.stdout).unwrap();
    for flag in [None, Some("--group-create")] {
        let out = tmp("group-create.svg");
        let mut args = vec!["plot", "--svg", out.to_str().unwrap()];
        args.extend(flag);
        args.push(input.to_str().unwrap());
        let o = openib(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let all = svg::check(
            &std::fs::read_to_string(&out).unwrap(),
            &GROUP_CREATE_LABELS,
            &GROUP_CREATE_SERIES,
        );
        assert!(all.contains("issue 32"), "default title: {all}");
        assert!(all.contains("worst of 3 seeds"), "{all}");
    }
    // Text: the table's rows; a p below 16 is bad usage.
    let o = openib(&["sim", "group-create", "--max-procs", "16"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("| 16 | 0 | 10 | 10 | 75 | 4.69 |"), "{text}");
    assert_eq!(text.lines().count(), 2 + 4, "{text}");
    let o = openib(&["sim", "group-create", "--max-procs", "8"]);
    assert_eq!(o.status.code(), Some(2));
    // --group-create on another document: exit 1 naming what is missing.
    let other = tmp("not-group-create.json");
    std::fs::write(&other, bench_doc().to_string()).unwrap();
    let out = tmp("never.svg");
    let o = openib(&[
        "plot",
        "--group-create",
        "--svg",
        out.to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no \"rows\" array (openib sim group-create --json)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
