//! `openib modex show | decode | size` on the fixtures: JSON shapes, byte counts, typed errors.

use clap::Parser;
use openib::cli::modex::{exec, ModexCmd, Outcome};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Parser)]
struct T {
    #[command(subcommand)]
    cmd: ModexCmd,
}

fn run(args: &[&str]) -> Outcome {
    let mut v = vec!["modex"];
    v.extend_from_slice(args);
    exec(T::try_parse_from(v).expect("arguments parse").cmd)
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn json(o: &Outcome) -> Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", o.stdout))
}

fn tmp(name: &str, content: &[u8]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("openib-modex-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn show_json_has_the_issue_shape_and_decodes_back() {
    let o = run(&["show", "--fixture", &fixture("ib-dual-port.json"), "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o);
    let nb = &v["node_blob"];
    let hex = nb["hex"].as_str().unwrap();
    assert_eq!(nb["bytes"].as_u64().unwrap() as usize * 2, hex.len());
    let ports = nb["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[0]["subnet_id"], "0xfe80000000000000");
    assert_eq!(ports[0]["lid"], 17);
    assert_eq!(ports[0]["apm_lid"], 0);
    assert_eq!(ports[0]["mtu"], 5);
    let cpcs = ports[0]["cpcs"].as_array().unwrap();
    assert_eq!(cpcs[0]["name"], "udcm");
    assert_eq!(cpcs[0]["index"], 5);
    assert_eq!(cpcs[0]["priority"], 63);
    assert_eq!(cpcs[0]["blob_len"], 0);
    assert_eq!(cpcs[1]["name"], "oob");
    assert_eq!(
        cpcs[1]["blob_len"], 4,
        "side channel on the IPoIB IPv4 address"
    );
    assert_eq!(cpcs[2]["name"], "rdmacm");
    assert_eq!(cpcs[2]["blob_len"], 4, "IPoIB IPv4 address");
    let pb = &v["proc_blob"];
    // Per port: udcm QP number 3 B, oob TCP port 2 B, rdmacm port 2 B.
    assert_eq!(pb["bytes"], 1 + 2 * (3 + 2 + 2));
    assert_eq!(pb["hex"].as_str().unwrap().len(), 30);

    // decode gives the same fields back, from a hex file and as raw bytes.
    let hexfile = tmp("node.hex", hex.as_bytes());
    let d = run(&["decode", "--hex", "--json", hexfile.to_str().unwrap()]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert_eq!(
        json(&d)["node_blob"]["ports"],
        nb["ports"]
            .clone()
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.as_object_mut().unwrap().remove("name");
                p
            })
            .collect::<Value>()
    );
    let proc_hex = tmp("proc.hex", pb["hex"].as_str().unwrap().as_bytes());
    let d = run(&[
        "decode",
        "--proc",
        "--hex",
        "--node",
        hexfile.to_str().unwrap(),
        "--json",
        proc_hex.to_str().unwrap(),
    ]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert_eq!(json(&d)["proc_blob"]["all_ports"], true);
}

#[test]
fn every_fixture_shows() {
    for f in [
        "ib-dual-port.json",
        "ib-two-subnets.json",
        "roce.json",
        "port-down.json",
        "lmc2.json",
    ] {
        let o = run(&["show", "--fixture", &fixture(f), "--json"]);
        assert_eq!(o.code, 0, "{f}: {}", o.stderr);
        let v = json(&o);
        let n = v["node_blob"]["ports"].as_array().unwrap().len();
        assert!(n >= 1, "{f}");
        if f == "port-down.json" {
            assert_eq!(n, 1, "only the ACTIVE port is published");
        }
        let t = run(&["show", "--fixture", &fixture(f)]);
        assert_eq!(t.code, 0);
        assert!(t.stdout.contains("node blob: key \"oibN\""), "{}", t.stdout);
    }
    let roce = json(&run(&[
        "show",
        "--fixture",
        &fixture("roce.json"),
        "--json",
    ]));
    let p = &roce["node_blob"]["ports"][0];
    assert_eq!(p["link_layer"], "Ethernet");
    assert_eq!(p["cpcs"][0]["name"], "udcm", "udcm runs on RoCE too");
    assert_eq!(
        p["cpcs"][0]["blob_len"], 16,
        "RoCE udcm publishes the GID for its address handles"
    );
}

#[test]
fn an_excluded_port_shows_in_the_bitmap_not_the_node_blob() {
    let o = run(&[
        "show",
        "--fixture",
        &fixture("ib-dual-port.json"),
        "--exclude",
        "mlx5_0:1",
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o);
    assert_eq!(v["node_blob"]["ports"].as_array().unwrap().len(), 2);
    assert_eq!(v["proc_blob"]["ports"], serde_json::json!([1]));
    assert_eq!(
        v["proc_blob"]["hex"].as_str().unwrap()[..4],
        *"1802",
        "flag K, bitmap 0b10"
    );
}

#[test]
fn malformed_input_is_a_typed_error_with_field_and_offset() {
    let bad = tmp(
        "bad.hex",
        b"10 01 c9 02 00 00 17 10 00 00 00 02 00 01 01 09",
    );
    let o = run(&["decode", "--hex", bad.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("truncated: port at offset 12"),
        "{}",
        o.stderr
    );
    let o = run(&["decode", "--hex", "--json", bad.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    let e = &json(&o)["error"];
    assert_eq!(
        (
            e["kind"].as_str(),
            e["field"].as_str(),
            e["offset"].as_u64()
        ),
        (Some("truncated"), Some("port"), Some(12))
    );
    let mtu = tmp(
        "mtu.hex",
        b"1001c9020000171000000001 0001010911000000000000000000 80fe00 00",
    );
    let o = run(&["decode", "--hex", "--json", mtu.to_str().unwrap()]);
    let e = &json(&o)["error"];
    assert_eq!(
        (
            e["kind"].as_str(),
            e["field"].as_str(),
            e["offset"].as_u64()
        ),
        (Some("bad_mtu"), Some("port.mtu"), Some(15))
    );
    let o = run(&["decode", "--hex", tmp("odd.hex", b"101").to_str().unwrap()]);
    assert_eq!(o.code, 2);
    // Garbage of every length never panics and always fails cleanly.
    let mut rng = fastrand::Rng::with_seed(0x1234_5678_9abc_def1);
    for len in 0..300 {
        let b: Vec<u8> = (0..len)
            .map(|i| {
                let x = rng.u8(..);
                if i == 0 {
                    0x10 | (x & 0x0f)
                } else {
                    x
                }
            })
            .collect();
        let f = tmp("garbage.bin", &b);
        let o = run(&["decode", f.to_str().unwrap()]);
        if o.code != 0 {
            assert_eq!(o.code, 1);
            assert!(
                o.stderr
                    .starts_with("openib modex decode: malformed node blob: "),
                "{}",
                o.stderr
            );
        }
        let o = run(&[
            "decode",
            "--proc",
            "--node",
            f.to_str().unwrap(),
            f.to_str().unwrap(),
        ]);
        assert!(o.code <= 1);
    }
}

#[test]
fn size_meets_the_target_and_names_every_format() {
    let o = run(&[
        "size",
        "--nodes",
        "64",
        "--ppn",
        "64",
        "--fixture",
        &fixture("ib-dual-port.json"),
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o);
    let f: Vec<&Value> = v["formats"].as_array().unwrap().iter().collect();
    let get = |n: &str| {
        f.iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };
    for n in ["openib", "ompi-4.1", "ompi-1.3", "floor"] {
        for k in [
            "per_process_bytes",
            "per_node_bytes",
            "job_bytes",
            "allgather_bytes",
        ] {
            assert!(get(n)[k].is_number(), "{n}.{k}");
        }
    }
    let pp = |n: &str| get(n)["per_process_bytes"].as_f64().unwrap();
    assert!(pp("openib") * 10.0 <= pp("ompi-4.1"), "{}", o.stdout);
    // Open MPI 4.1, two IB ports, udcm + oob + rdmacm:
    // 1 + 2 * (25 + 1 + (3 + 24) + (3 + 0) + (3 + 14)) = 147, + key 23.
    assert_eq!(pp("ompi-4.1"), 170.0);
    assert_eq!(pp("ompi-1.3"), 170.0 - 24.0);
    let job = get("openib")["job_bytes"].as_u64().unwrap();
    assert_eq!(
        get("openib")["allgather_bytes"].as_u64().unwrap(),
        job * (64 * 64 - 1)
    );
    let t = run(&[
        "size",
        "--nodes",
        "2",
        "--ppn",
        "1",
        "--fixture",
        &fixture("roce.json"),
    ]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stdout.contains("ompi-1.3"));
}

/// The real binary, once `openib modex` is wired into src/main.rs: no panic, no backtrace.
#[test]
fn binary_reports_malformed_input_without_backtrace() {
    let bad = tmp("bin-bad.bin", &[0x10, 0x01]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(["modex", "decode", bad.to_str().unwrap()])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("malformed node blob: truncated: device at offset 2"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}
