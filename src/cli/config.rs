//! `openib config [--json] [NAME...]`: every setting (src/config/table.rs), its value in
//! effect, where that comes from (env, file or default), its default and what it does; the settings file in
//! use first. A malformed value is shown and flagged, and makes the command exit 2 after printing
//! everything.

use super::exit;
use crate::config::{self, ConfigError, Setting, SETTINGS};
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// Print JSON: {"file": PATH|null, "settings": [{"name", "value", "source", "default",
    /// "kind", "allowed", "component", "description", "error"}], "warnings": [...]}.
    #[arg(long)]
    pub json: bool,
    /// Only these settings, in this order (OPENIB_EAGER_LIMIT, or eager_limit as in the
    /// settings file).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// One setting as shown.
struct Row {
    setting: &'static Setting,
    /// `None`: unset without a default.
    value: Option<String>,
    source: config::Source,
    error: Option<ConfigError>,
}

fn row(s: &'static Setting) -> Row {
    let value = config::text(s.name).map(|v| {
        if s.secret && config::source(s.name) != config::Source::Default {
            "<hidden>".to_string()
        } else {
            v
        }
    });
    Row {
        setting: s,
        value,
        source: config::source(s.name),
        error: config::check(s.name).err(),
    }
}

/// `OPENIB_` names set in the environment (or by the settings file) that are not settings.
fn unknown_names() -> Vec<String> {
    let mut out = Vec::new();
    let from_file = crate::settings::filled_keys();
    let mut env: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("OPENIB_") && config::find(k).is_none())
        .collect();
    env.sort();
    for k in env {
        let whence = if from_file.contains(&k) {
            "the settings file sets"
        } else {
            "the environment sets"
        };
        out.push(format!(
            "{whence} {k}, which is not an openib setting (ignored)"
        ));
    }
    out
}

fn file_shown() -> Option<String> {
    crate::settings::config_path().map(|p| p.display().to_string())
}

pub fn run(a: &ConfigArgs) -> i32 {
    let mut chosen = Vec::new();
    for n in &a.names {
        let name = config::normalize(n);
        match config::find(&name) {
            Some(s) => chosen.push(s),
            None => {
                let msg = format!(
                    "openib config: unknown setting {n:?} ({name} is not a setting; `openib config` lists them all)"
                );
                if a.json {
                    print_json(&json!({
                        "file": file_shown(),
                        "settings": [],
                        "warnings": [],
                        "error": {"kind": "unknown_setting", "message": msg},
                    }));
                }
                eprintln!("{msg}");
                return exit::USAGE;
            }
        }
    }
    if chosen.is_empty() {
        chosen = SETTINGS.iter().collect();
    }
    let rows: Vec<Row> = chosen.into_iter().map(row).collect();
    let warnings = if a.names.is_empty() {
        unknown_names()
    } else {
        Vec::new()
    };
    if a.json {
        print_json(&json!({
            "file": file_shown(),
            "settings": rows.iter().map(row_json).collect::<Vec<_>>(),
            "warnings": warnings,
        }));
    } else {
        print_table(&rows);
    }
    for w in &warnings {
        eprintln!("openib config: warning: {w}");
    }
    let bad: Vec<&ConfigError> = rows.iter().filter_map(|r| r.error.as_ref()).collect();
    if bad.is_empty() {
        return exit::OK;
    }
    for e in &bad {
        eprintln!("openib config: bad setting {e}");
    }
    exit::USAGE
}

fn row_json(r: &Row) -> Value {
    let s = r.setting;
    json!({
        "name": s.name,
        "value": r.value,
        "source": r.source.name(),
        "default": s.default,
        "kind": s.kind.tag(),
        "allowed": s.allowed(),
        "component": s.component.name(),
        "description": s.description,
        "error": r.error.as_ref().map(|e| format!("{}; allowed: {}", e.problem, e.allowed)),
    })
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON serialises")
    );
}

fn print_table(rows: &[Row]) {
    match file_shown() {
        Some(f) => println!("settings file: {f}"),
        None => println!(
            "settings file: none (OPENIB_CONFIG is unset and there is no \
             $XDG_CONFIG_HOME/openib/openib.conf, ~/.config/openib/openib.conf or /etc/openib/openib.conf)"
        ),
    }
    println!();
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.setting.name.to_string(),
                r.value.clone().unwrap_or_else(|| "unset".into()),
                r.source.name().to_string(),
                r.setting.default_text().to_string(),
                r.setting.description.to_string(),
            ]
        })
        .collect();
    let head = ["SETTING", "VALUE", "SOURCE", "DEFAULT", "DESCRIPTION"];
    let mut width = head.map(str::len);
    for c in &cells {
        for i in 0..4 {
            width[i] = width[i].max(c[i].chars().count());
        }
    }
    let line = |c: [&str; 5]| {
        let mut s = String::new();
        for i in 0..4 {
            s.push_str(&format!("{:w$}  ", c[i], w = width[i]));
        }
        s.push_str(c[4]);
        s
    };
    println!("{}", line(head));
    for (c, r) in cells.iter().zip(rows) {
        println!("{}", line([&c[0], &c[1], &c[2], &c[3], &c[4]]));
        if let Some(e) = &r.error {
            println!("  ^ invalid: {}; allowed: {}", e.problem, e.allowed);
        }
    }
}
