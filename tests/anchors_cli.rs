//! scripts/anchors on the host, without a guest (`--parse` of a saved in-guest output): the
//! system `ompi-oib` (ob1 + our BTL component) beside `ompi-openib` and `ucx`, its ratios to
//! them, the MPI start-up measures (MPI_Init, first and second round trip) and the issue's
//! targets, in the table and in `--json`. The numbers are made up here; the guest run is a
//! benchmark, not a test (docs/PERFORMANCE.md).
//!
//! Needs python3 (the script's table); missing: a failure under CI, a loud skip elsewhere.

#[path = "common/prereq.rs"]
mod prereq;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// One system's section as the guest part prints it (mpi_pingpong's JSON line).
fn section(name: &str, lat8: f64, bw64k: f64, init: [f64; 2], first: f64, second: f64) -> String {
    let mut s = format!(
        "=== BEGIN {name} 1\n{{\"results\":[\
         {{\"size\":8,\"latency_us\":{lat8},\"latency_median_us\":{lat8},\"latency_trimmed_us\":{lat8},\"bandwidth_mb_s\":1.0,\"iterations\":20}},\
         {{\"size\":65536,\"latency_us\":100.0,\"latency_median_us\":100.0,\"latency_trimmed_us\":100.0,\"bandwidth_mb_s\":{bw64k},\"iterations\":20}}],\
         \"wireup_us\":1.0,\"init_us\":{},\"first_exchange_us\":1.0,\"init_median_us\":{},\
         \"init_ranks_us\":[{},{}],\"first_message_us\":{first},\"second_message_us\":{second}}}\n",
        init[1],
        (init[0] + init[1]) / 2.0,
        init[0],
        init[1]
    );
    if name == "ucx" {
        s.push_str("--- ucx endpoints\nep_cfg[0]: tag(rc_verbs/rxe0:1)\n");
    }
    s.push_str(&format!("=== END {name} 1 0\n"));
    s
}

fn anchors(file: &Path, json: bool) -> std::process::Output {
    let mut c = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/anchors"));
    c.arg("--parse")
        .arg(file)
        .args(["--only", "ompi-openib,ucx,ompi-oib", "--sizes", "8,65536"]);
    if json {
        c.arg("--json");
    }
    c.output().expect("scripts/anchors runs")
}

#[test]
fn ompi_oib_is_a_system_with_ratios_start_up_and_targets() {
    if !prereq::have(
        Command::new("python3").arg("--version").output().is_ok(),
        "python3 is not installed (scripts/anchors' table)",
    ) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("anchors_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let raw = dir.join("raw.txt");
    let text = [
        "=== INFO host guest, rxe0 port 1 4: ACTIVE\n".to_string(),
        section("ompi-openib", 20.0, 100.0, [800.0, 900.0], 90.0, 40.0),
        section("ucx", 10.0, 200.0, [1800.0, 1900.0], 80.0, 30.0),
        section("ompi-oib", 12.0, 190.0, [1300.0, 1400.0], 50.0, 20.0),
    ]
    .concat();
    std::fs::write(&raw, text).unwrap();

    let o = anchors(&raw, true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["errors"], Value::Array(vec![]), "{j}");
    assert_eq!(
        j["config"]["systems"],
        serde_json::json!(["ompi-openib", "ucx", "ompi-oib"])
    );
    let row8 = &j["summary"][0];
    assert_eq!(row8["ompi_oib_latency_us"], 12.0);
    assert_eq!(row8["latency_ratio_ompi_oib_ucx"], 1.2);
    assert_eq!(row8["latency_ratio_ompi_oib_ompi_openib"], 0.6);
    assert_eq!(j["summary"][1]["bandwidth_ratio_ompi_oib_ucx"], 0.95);
    // The start-up: MPI_Init's median over the ranks, the round trips as measured.
    let oib = &j["mpi_startup"]["ompi-oib"];
    assert_eq!(oib["init_median_us"], 1350.0);
    assert_eq!(oib["first_message_us"], 50.0);
    assert_eq!(oib["second_message_us"], 20.0);
    assert_eq!(j["mpi_startup"]["ucx"]["init_median_us"], 1850.0);
    assert_eq!(j["mpi_startup"]["ompi-openib"]["first_message_us"], 90.0);
    // The targets against the better of the two others in this run.
    let t = j["ompi_oib_targets"].as_array().unwrap();
    let holds = |prefix: &str| {
        t.iter()
            .find(|x| x["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no target {prefix}: {t:?}"))["holds"]
            .clone()
    };
    assert_eq!(holds("latency 8 B"), false); // 12 against UCX's 10
    assert_eq!(holds("bandwidth 65536 B"), true); // 190 >= 0.95 * 200
    assert_eq!(holds("MPI_Init"), true); // 1350 <= 0.8 * 1850

    let o = anchors(&raw, false);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{table}");
    for want in [
        "anchors: ompi-openib,ucx,ompi-oib;",
        "ompi-oib against the other MPI systems",
        "MPI start-up, us",
        "target: ompi-oib latency 8 B <= the better of ompi-openib,ucx: does NOT hold (ratio 1.20)",
        "target: ompi-oib MPI_Init <= 0.8 of UCX's: holds (ratio 0.73)",
    ] {
        assert!(table.contains(want), "no {want:?} in:\n{table}");
    }
    let startup = table
        .lines()
        .find(|l| l.trim_start().starts_with("ompi-oib |"))
        .unwrap_or_else(|| panic!("no start-up row for ompi-oib:\n{table}"));
    let cells: Vec<&str> = startup.split_whitespace().collect();
    assert_eq!(cells, ["ompi-oib", "|", "1350", "50", "20"], "{startup}");
}

#[test]
fn an_unknown_system_is_refused_and_ompi_oib_is_known() {
    let run = |only: &str| {
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/anchors"))
            .args(["--only", only, "--parse", "/nonexistent"])
            .output()
            .unwrap()
    };
    let o = run("ompi-oob");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown system 'ompi-oob'") && err.contains("ompi-oib"),
        "{err}"
    );
    // Known: it gets past the system check to the (missing) --parse file.
    let o = run("ompi-oib");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--parse /nonexistent is not a readable file"),
        "{err}"
    );
}

/// `openib plot` (scripts/anchors --svg) names the ompi-oib curve.
#[test]
fn the_plot_names_the_ompi_oib_curve() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("anchors_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let summary: Vec<Value> = [8u32, 65536]
        .iter()
        .map(|&s| {
            let s = f64::from(s);
            serde_json::json!({
                "size": s as u64,
                "ucx_latency_trimmed_us": 10.0 + s / 1000.0,
                "ucx_bandwidth_mb_s": s / 10.0,
                "ompi_oib_latency_trimmed_us": 12.0 + s / 900.0,
                "ompi_oib_bandwidth_mb_s": s / 12.0,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "config": {"sizes": [8, 65536], "iters": 20, "rounds": 1, "systems": ["ucx", "ompi-oib"]},
        "rounds": [], "errors": [], "warnings": [], "summary": summary,
    });
    let input = dir.join("plot.json");
    let svg = dir.join("plot.svg");
    std::fs::write(&input, doc.to_string()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(["plot", "--svg"])
        .arg(&svg)
        .arg(&input)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("Open MPI 4.1 ob1 + oib"),
        "no ompi-oib legend"
    );
    assert!(text.contains("Open MPI 4.1 + UCX"), "no ucx legend");
}
