//! `openib ports` as a user runs it: fixtures, JSON schema, exit codes, error messages.

use serde_json::Value;
use std::process::{Command, Output};

fn openib(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openib"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for k in [
        "OPENIB_IF_INCLUDE",
        "OPENIB_IF_EXCLUDE",
        "OPENIB_GID_INDEX",
        "OPENIB_LOG",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run openib")
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn json_has_the_documented_fields() {
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            "tests/fixtures/ib-dual-port.json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json_of(&o);
    let ports = v["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    let p = &ports[0];
    for key in [
        "device",
        "port",
        "state",
        "link_layer",
        "lid",
        "lmc",
        "subnet_id",
        "apm_lid",
        "mtu",
        "mtu_bytes",
        "gids",
        "usable",
        "reason",
    ] {
        assert!(p.get(key).is_some(), "missing {key} in {p}");
    }
    assert_eq!(p["device"], "mlx5_0");
    assert_eq!(p["port"], 1);
    assert_eq!(p["state"], "ACTIVE");
    assert_eq!(p["link_layer"], "InfiniBand");
    assert_eq!(p["lid"], 17);
    assert_eq!(p["subnet_id"], "0xfe80000000000000");
    assert_eq!(p["mtu"], 5);
    assert_eq!(p["mtu_bytes"], 4096);
    assert_eq!(p["usable"], true);
    assert_eq!(p["reason"], Value::Null);
    assert_eq!(p["gids"][0]["index"], 0);
    assert_eq!(
        p["gids"][0]["gid"],
        "fe80:0000:0000:0000:0002:c903:00a1:b2c1"
    );
    assert_eq!(p["gids"][0]["type"], "IB");
}

#[test]
fn down_port_reports_its_reason_in_json_and_table() {
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            "tests/fixtures/port-down.json",
        ],
        &[],
    );
    let v = json_of(&o);
    let down = &v["ports"][1];
    assert_eq!(down["state"], "DOWN");
    assert_eq!(down["usable"], false);
    assert!(down["reason"].as_str().unwrap().contains("DOWN"));
    let t = openib(
        &["ports", "--fixture", "tests/fixtures/port-down.json"],
        &[],
    );
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(
        text.contains("mlx5_0 port 2: DOWN (POLLING), InfiniBand: not used: port state is DOWN"),
        "{text}"
    );
    assert!(
        text.contains("2 port(s) on 1 device(s), 1 usable"),
        "{text}"
    );
}

#[test]
fn include_and_exclude_together_is_a_usage_error() {
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            "tests/fixtures/ib-dual-port.json",
            "--include",
            "mlx5_0",
            "--exclude",
            "mlx5_0:2",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("mutually exclusive"), "{}", stderr(&o));
    let v = json_of(&o);
    assert_eq!(v["ports"], serde_json::json!([]));
    assert_eq!(v["error"]["kind"], "bad_filter");
    // The same through the environment.
    let o = openib(
        &["ports", "--fixture", "tests/fixtures/ib-dual-port.json"],
        &[("OPENIB_IF_INCLUDE", "a"), ("OPENIB_IF_EXCLUDE", "b")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn filters_act_and_unmatched_names_are_reported() {
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            "tests/fixtures/ib-dual-port.json",
            "--exclude",
            "mlx5_0:2,mlx7_3",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let v = json_of(&o);
    assert_eq!(v["ports"][0]["usable"], true);
    assert_eq!(v["ports"][1]["usable"], false);
    assert!(v["ports"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("exclude"));
    assert_eq!(v["unmatched_filters"], serde_json::json!(["mlx7_3"]));
    assert!(
        stderr(&o).contains("\"mlx7_3\" matches no device or port"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn missing_libibverbs_is_one_clear_message_and_valid_json() {
    let env = [("OPENIB_LIBIBVERBS", "/nonexistent/libibverbs.so.1")];
    let o = openib(&["ports", "--json"], &env);
    assert_eq!(o.status.code(), Some(3));
    let v = json_of(&o);
    assert_eq!(v["ports"], serde_json::json!([]));
    assert_eq!(v["error"]["kind"], "no_libibverbs");
    let e = stderr(&o);
    assert!(
        e.contains("libibverbs.so.1 could not be loaded") && e.contains("apt install libibverbs1"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "one message, no backtrace: {e}");
    let o = openib(&["ports"], &env);
    assert_eq!(o.status.code(), Some(3));
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_fixture_names_file_and_problem() {
    let dir = std::env::temp_dir().join(format!("openib-ports-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.json");
    std::fs::write(&f, r#"{"devices":[{"name":"x","node_guid":"0x1","ports":[{"port":1,"state":"ACTIVE","link_layer":"IB","active_mtu":0}]}]}"#).unwrap();
    let o = openib(&["ports", "--fixture", f.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.json") && stderr(&o).contains("active_mtu 0"),
        "{}",
        stderr(&o)
    );
    let o = openib(&["ports", "--fixture", "/nonexistent.json", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_of(&o)["error"]["kind"], "bad_fixture");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn empty_topology_is_the_no_device_exit() {
    let dir = std::env::temp_dir().join(format!("openib-ports-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("empty.json");
    std::fs::write(&f, r#"{"devices":[]}"#).unwrap();
    let o = openib(&["ports", "--json", "--fixture", f.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(4));
    let v = json_of(&o);
    assert_eq!(v["ports"], serde_json::json!([]));
    assert!(
        stderr(&o).contains("rdma link add"),
        "the hint tells how to create a SoftRoCE device"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn default_prefix_warning_is_printed() {
    let o = openib(
        &[
            "ports",
            "--fixture",
            "tests/fixtures/ib-two-hcas-default-prefix.json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let e = stderr(&o);
    assert_eq!(e.matches("default subnet prefix").count(), 1, "{e}");
}

#[test]
fn dump_topology_is_a_fixture_that_reads_back_the_same() {
    let o = openib(
        &[
            "ports",
            "--dump-topology",
            "--fixture",
            "tests/fixtures/roce.json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = std::env::temp_dir().join(format!("openib-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("dumped.json");
    std::fs::write(&f, &o.stdout).unwrap();
    let a = json_of(&openib(
        &["ports", "--json", "--fixture", "tests/fixtures/roce.json"],
        &[],
    ));
    let b = json_of(&openib(
        &["ports", "--json", "--fixture", f.to_str().unwrap()],
        &[],
    ));
    assert_eq!(a["ports"], b["ports"]);
    std::fs::remove_dir_all(&dir).ok();
}
