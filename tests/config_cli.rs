//! `openib config` as a user runs it: the table and the JSON of every setting, where each value
//! comes from (environment, settings file, default), bad values, unknown names.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A private directory with a settings file holding `text`.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str, text: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("openib-config-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("openib.conf"), text).unwrap();
        Dir(d)
    }
    fn conf(&self) -> PathBuf {
        self.0.join("openib.conf")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `openib ARGS` with no `OPENIB_*` variable but `env`, the settings file `conf`, and a
/// private HOME so that no user settings file applies.
fn openib(args: &[&str], conf: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openib"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OPENIB_") {
            c.env_remove(&k);
        }
    }
    let home = conf.parent().unwrap();
    c.env("HOME", home).env("XDG_CONFIG_HOME", home.join("xdg"));
    c.env("OPENIB_CONFIG", conf);
    c.envs(env.iter().copied());
    c.output().expect("run openib")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(o)))
}

/// The table row of `name`, split on runs of spaces: [name, value, source, default, ...].
fn row(table: &str, name: &str) -> Vec<String> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row for {name} in\n{table}"));
    line.split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn entry<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {doc}"))
}

const FILE: &str =
    "# test settings\neager_limit = 4096\nOPENIB_RECV_DEPTH = 32\ncpc-include = udcm\n";

#[test]
fn table_shows_every_setting_with_value_source_and_default() {
    let d = Dir::new("table", FILE);
    let o = openib(&["config"], &d.conf(), &[("OPENIB_RECV_DEPTH", "16")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    assert_eq!(
        t.lines().next().unwrap(),
        format!("settings file: {}", d.conf().display())
    );
    for s in openib::config::SETTINGS {
        row(&t, s.name);
    }
    assert_eq!(
        row(&t, "OPENIB_EAGER_LIMIT")[..4],
        ["OPENIB_EAGER_LIMIT", "4096", "file", "8192"]
    );
    // The environment wins over the file.
    assert_eq!(
        row(&t, "OPENIB_RECV_DEPTH")[..4],
        ["OPENIB_RECV_DEPTH", "16", "env", "64"]
    );
    assert_eq!(
        row(&t, "OPENIB_SEND_DEPTH")[..4],
        ["OPENIB_SEND_DEPTH", "128", "default", "128"]
    );
    assert_eq!(
        row(&t, "OPENIB_CPC_INCLUDE")[..4],
        ["OPENIB_CPC_INCLUDE", "udcm", "file", "unset"]
    );
    assert_eq!(
        row(&t, "OPENIB_RUNTIME")[..4],
        ["OPENIB_RUNTIME", "unset", "default", "unset"]
    );
    assert!(row(&t, "OPENIB_EAGER_LIMIT")[4].contains("rendezvous"));
}

#[test]
fn json_has_every_field_of_every_setting() {
    let d = Dir::new("json", FILE);
    let o = openib(
        &["config", "--json"],
        &d.conf(),
        &[("OPENIB_PINNED_MAX", "0")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = json_of(&o);
    assert_eq!(doc["file"], d.conf().display().to_string());
    let all = doc["settings"].as_array().unwrap();
    assert_eq!(all.len(), openib::config::SETTINGS.len());
    for s in all {
        for k in [
            "name",
            "value",
            "source",
            "default",
            "kind",
            "allowed",
            "component",
            "description",
            "error",
        ] {
            assert!(s.get(k).is_some(), "{k} missing in {s}");
        }
        assert!(s["error"].is_null(), "{s}");
    }
    let e = entry(&doc, "OPENIB_EAGER_LIMIT");
    assert_eq!(e["value"], "4096");
    assert_eq!(e["source"], "file");
    assert_eq!(e["default"], "8192");
    assert_eq!(e["kind"], "integer");
    assert_eq!(e["component"], "transport");
    assert_eq!(e["allowed"], "an integer from 64 to 65535");
    let p = entry(&doc, "OPENIB_PINNED_MAX");
    assert_eq!((&p["value"], &p["source"]), (&"0".into(), &"env".into()));
    let f = entry(&doc, "OPENIB_FIXTURE");
    assert!(f["value"].is_null() && f["default"].is_null());
    assert_eq!(f["source"], "default");
    assert_eq!(entry(&doc, "OPENIB_CPC_INCLUDE")["component"], "cpc");
}

#[test]
fn names_select_settings_and_an_unknown_name_is_bad_usage() {
    let d = Dir::new("names", "");
    let o = openib(&["config", "eager-limit", "OPENIB_LOG"], &d.conf(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("OPENIB_")).collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(rows[0].starts_with("OPENIB_EAGER_LIMIT ") && rows[1].starts_with("OPENIB_LOG "));

    let o = openib(&["config", "eager_limit", "no_such_thing"], &d.conf(), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown setting \"no_such_thing\""),
        "{}",
        stderr(&o)
    );
    let o = openib(&["config", "--json", "OPENIB_NOPE"], &d.conf(), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json_of(&o)["error"]["kind"], "unknown_setting");
}

#[test]
fn a_bad_value_is_shown_flagged_and_fails_after_printing_everything() {
    let d = Dir::new("bad", "send_depth = 5\n");
    let o = openib(
        &["config"],
        &d.conf(),
        &[("OPENIB_APM_OVER_PORTS", "perhaps")],
    );
    assert_eq!(o.status.code(), Some(2));
    let t = stdout(&o);
    for s in openib::config::SETTINGS {
        row(&t, s.name);
    }
    assert_eq!(
        row(&t, "OPENIB_SEND_DEPTH")[..3],
        ["OPENIB_SEND_DEPTH", "5", "file"]
    );
    assert!(
        t.contains("^ invalid: out of range; allowed: an integer from 16 to 256"),
        "{t}"
    );
    let err = stderr(&o);
    assert!(
        err.contains("OPENIB_SEND_DEPTH=\"5\" (from the settings file): out of range"),
        "{err}"
    );
    assert!(
        err.contains("OPENIB_APM_OVER_PORTS=\"perhaps\" (from the environment): not a boolean"),
        "{err}"
    );

    let o = openib(
        &["config", "--json"],
        &d.conf(),
        &[
            ("OPENIB_CPC_INCLUDE", "udcm"),
            ("OPENIB_CPC_EXCLUDE", "oob"),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let doc = json_of(&o);
    assert_eq!(
        doc["settings"].as_array().unwrap().len(),
        openib::config::SETTINGS.len()
    );
    let e = entry(&doc, "OPENIB_SEND_DEPTH");
    assert_eq!(e["value"], "5");
    assert!(e["error"].as_str().unwrap().contains("out of range"), "{e}");
    // Include and exclude together: both flagged.
    let inc = entry(&doc, "OPENIB_CPC_EXCLUDE")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(inc.contains("OPENIB_CPC_INCLUDE"), "{inc}");
    assert!(entry(&doc, "OPENIB_CPC_INCLUDE")["error"].is_string());
    assert!(entry(&doc, "OPENIB_EAGER_LIMIT")["error"].is_null());
}

#[test]
fn secrets_are_hidden_and_unknown_openib_names_are_warned_about() {
    let d = Dir::new("secret", "eager_limt = 100\n");
    let o = openib(
        &["config"],
        &d.conf(),
        &[
            ("OPENIB_RT_TOKEN", "00112233445566778899aabbccddeeff"),
            ("OPENIB_RECV_DEPHT", "8"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(!t.contains("00112233"), "{t}");
    assert_eq!(row(&t, "OPENIB_RT_TOKEN")[1], "<hidden>");
    let err = stderr(&o);
    assert!(
        err.contains("the environment sets OPENIB_RECV_DEPHT, which is not an openib setting"),
        "{err}"
    );
    assert!(
        err.contains("the settings file sets OPENIB_EAGER_LIMT, which is not an openib setting"),
        "{err}"
    );
}

#[test]
fn other_commands_refuse_a_bad_setting_from_the_file() {
    let d = Dir::new("ports", "gid_index = one\n");
    let o = openib(
        &["ports", "--fixture", "tests/fixtures/ib-dual-port.json"],
        &d.conf(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("OPENIB_GID_INDEX=\"one\" (from the settings file): not an integer"),
        "{}",
        stderr(&o)
    );
    // The flag wins over the setting.
    let o = openib(
        &[
            "ports",
            "--gid-index",
            "0",
            "--fixture",
            "tests/fixtures/ib-dual-port.json",
        ],
        &d.conf(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A boolean setting takes the usual spellings.
    let d = Dir::new("apm", "apm_over_ports = on\n");
    let o = openib(
        &[
            "ports",
            "--json",
            "--fixture",
            "tests/fixtures/ib-dual-port.json",
        ],
        &d.conf(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = json_of(&o);
    assert!(
        doc["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["apm_lid"].as_u64() != Some(0)),
        "{doc}"
    );
}

/// Issue 27: the largest message a process sends or accepts is a setting `openib config` shows,
/// with its default and its range checked.
#[test]
fn the_largest_message_is_a_setting_with_a_default_and_a_range() {
    let d = Dir::new("maxmsg", "");
    let o = openib(&["config", "max-msg-size"], &d.conf(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = stdout(&o);
    assert_eq!(
        row(&t, "OPENIB_MAX_MSG_SIZE")[..4],
        ["OPENIB_MAX_MSG_SIZE", "1073741824", "default", "1073741824"]
    );
    assert!(row(&t, "OPENIB_MAX_MSG_SIZE")[4].contains("refused"), "{t}");
    let o = openib(
        &["config", "max_msg_size"],
        &d.conf(),
        &[("OPENIB_MAX_MSG_SIZE", "100")],
    );
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("OPENIB_MAX_MSG_SIZE"), "{}", stdout(&o));
}
