//! The settings table against the sources and docs: every `OPENIB_` name they use is a
//! setting (or a known non-setting), every fault point the sources use is listed, and
//! docs/CLI.md's settings table has a row with the default of every setting.

use openib::config::{find, FAULT_POINTS, SETTINGS};

/// Names that look like settings but are not: the test harness's and scripts/slurm's knobs
/// (docs/SOFTROCE.md, docs/RUNTIME.md) and a placeholder in a doc comment.
fn not_a_setting(name: &str) -> bool {
    name == "OPENIB_SKIP_GUEST"
        || name == "OPENIB_FUZZ_SECONDS"
        || name == "OPENIB_NAME"
        || name.starts_with("OPENIB_GUEST")
        // scripts/slurm's directory and the munge socket it prints (docs/RUNTIME.md, "Slurm").
        || name == "OPENIB_SLURM_DIR"
        || name == "OPENIB_SLURM_MUNGE_SOCKET"
        // scripts/compare's binary (for the whole run, or per variant).
        || name == "OPENIB_BIN"
        // scripts/test's default (no fault injection) build, for tests/fault_feature.rs.
        || name == "OPENIB_TEST_DEFAULT_BIN"
        // The C ABI's return codes (include/openib.h, docs/CAPI.md).
        || name == "OPENIB_OK"
        || name.starts_with("OPENIB_ERR_")
        // The C ABI's caller-token bit (include/openib.h).
        || name == "OPENIB_CALLER_TOKEN"
}

/// Every `OPENIB_X` token of `text` (a bare `OPENIB_` prefix is not one).
fn tokens(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].find("OPENIB_") {
        let start = i + off;
        let mut end = start + 7;
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let name = text[start..end].trim_end_matches('_');
        if before_ok && name.len() > 7 {
            out.push(name.to_string());
        }
        i = end;
    }
    out
}

fn files(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

#[test]
fn every_openib_name_in_the_sources_and_docs_is_in_the_table() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    for d in ["src", "cpc/src", "ports/src", "sys/src", "examples"] {
        files(&root.join(d), "rs", &mut paths);
    }
    files(&root.join("docs"), "md", &mut paths);
    paths.push(root.join("README.md"));
    assert!(paths.len() > 20, "{paths:?}");
    // src/config/ is the table (and its unit tests use names that are not in it on purpose).
    paths.retain(|p| !p.starts_with(root.join("src/config")));
    let mut missing = Vec::new();
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap();
        for name in tokens(&text) {
            if find(&name).is_none() && !not_a_setting(&name) {
                missing.push(format!("{}: {name}", p.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "OPENIB_ names not in src/config/table.rs SETTINGS: {missing:#?}"
    );
}

#[test]
fn fault_points_in_the_sources_are_listed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    files(&root.join("src"), "rs", &mut paths);
    let mut seen = 0;
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap();
        let uses = text
            .match_indices("fault::point(\"")
            .chain(text.match_indices("fault::armed(\""));
        for (i, _) in uses {
            let rest = &text[i + 14..];
            let point = &rest[..rest.find('"').unwrap()];
            assert!(FAULT_POINTS.contains(&point), "{}: {point}", p.display());
            seen += 1;
        }
    }
    assert!(seen >= 3);
}

/// docs/CLI.md's settings table has one row per setting, `| `NAME` | DEFAULT | ...`, with the
/// table's default (or `unset`).
#[test]
fn the_cli_doc_lists_every_setting_with_its_default() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).unwrap();
    let mut wrong = Vec::new();
    for s in SETTINGS {
        let row = format!("| `{}` | ", s.name);
        let Some(line) = doc.lines().find(|l| l.starts_with(&row)) else {
            wrong.push(format!("no row for {}", s.name));
            continue;
        };
        let cell = line[row.len()..].split(" | ").next().unwrap_or("");
        let want = match s.default {
            Some(d) => format!("`{d}`"),
            None => "unset".to_string(),
        };
        if !cell.starts_with(&want) {
            wrong.push(format!("{}: default cell {cell:?}, want {want:?}", s.name));
        }
    }
    assert!(wrong.is_empty(), "docs/CLI.md settings table: {wrong:#?}");
}

/// `OPENIB_MODEX_MODE`'s allowed values and default are exactly what the modex exchange parses
/// (moved here from `config`'s unit tests: the exchange is a layer above the settings).
#[test]
fn the_modex_mode_setting_lists_what_the_exchange_parses() {
    use openib::config::Kind;
    use openib::modex::exchange::ExchangeMode;
    let s = find("OPENIB_MODEX_MODE").expect("OPENIB_MODEX_MODE is a setting");
    let Kind::Enum(modes) = s.kind else {
        panic!("OPENIB_MODEX_MODE is not an enum: {:?}", s.kind)
    };
    for m in modes {
        let parsed: ExchangeMode = m.parse().unwrap();
        assert_eq!(parsed.name(), *m);
    }
    assert_eq!(ExchangeMode::default().name(), s.default.unwrap());
}
