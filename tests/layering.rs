//! The layers of docs/DESIGN.md ("Layers" and "Inside `src/`"), checked against the code: no
//! crate depends on a crate above it, and no module of `src/` imports from a module of a layer
//! above its own. Data flows one way; a change that reaches up fails here, naming the file, the
//! line and both layers. The picture in DESIGN.md and the tables below say the same thing.

use std::path::{Path, PathBuf};

/// The workspace crates, lowest first, with the workspace crates each may depend on.
const CRATES: [(&str, &str, &[&str]); 5] = [
    ("sys/Cargo.toml", "openib-sys", &[]),
    ("ports/Cargo.toml", "openib-ports", &["openib-sys"]),
    (
        "cpc/Cargo.toml",
        "openib-cpc",
        &["openib-sys", "openib-ports"],
    ),
    (
        "Cargo.toml",
        "openib",
        &["openib-sys", "openib-ports", "openib-cpc"],
    ),
    (
        "capi/Cargo.toml",
        "openib-capi",
        &["openib", "openib-sys", "openib-ports", "openib-cpc"],
    ),
];

/// The top-level modules of `src/`, by layer (0 lowest). A module may use its own layer and
/// those below; `cli` (and `main.rs`) sit on top of everything.
const MODULES: [(&str, u8); 11] = [
    ("settings", 0),
    ("config", 0),
    ("fault", 0),
    ("runtime", 1),
    ("modex", 2),
    ("transport", 3),
    ("ping", 4),
    ("selftest", 4),
    ("sim", 4),
    ("wire_oracle", 4),
    ("cli", 5),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn layer(module: &str) -> Option<u8> {
    MODULES.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

/// The top-level module a file of `src/` belongs to (`src/transport/send.rs` -> `transport`).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root().join("src")).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a line without its comment (`//`, `///`, `//!`); string literals are rare enough
/// in `use` lines and paths that they are not parsed.
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Every `crate::MODULE` a line of code names.
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code(line);
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `$crate::` or `openib_crate::`: not this crate's root.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.push(name);
        }
    }
    found
}

/// The lines of `text`, code of module `from`, that name a module of a higher layer:
/// (line number, the module named, the line).
fn upward_lines(from: &str, text: &str) -> Vec<(usize, String, String)> {
    let own = layer(from).unwrap_or(u8::MAX);
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for to in crate_paths(line) {
            if layer(&to).is_some_and(|l| l > own) {
                bad.push((n + 1, to, line.trim().to_string()));
            }
        }
    }
    bad
}

/// The upward imports of the files of `src/`, one line each.
fn upward_imports(files: &[PathBuf]) -> Vec<String> {
    let mut bad = Vec::new();
    for f in files {
        let Some(from) = module_of(f) else { continue };
        if from == "main" || from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, to, line) in upward_lines(&from, &text) {
            bad.push(format!(
                "{}:{n}: `{from}` (layer {}) uses `crate::{to}` (layer {}): {line}",
                f.display(),
                layer(&from).map_or("?".into(), |l| l.to_string()),
                layer(&to).map_or("?".into(), |l| l.to_string())
            ));
        }
    }
    bad
}

#[test]
fn no_module_of_src_imports_from_a_layer_above_it() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    // Every top-level module has a layer, and every layer named is a module.
    for f in &files {
        let m = module_of(f).unwrap();
        assert!(
            m == "main" || m == "lib" || layer(&m).is_some(),
            "{}: module `{m}` has no layer in tests/layering.rs (add it, and to docs/DESIGN.md)",
            f.display()
        );
    }
    let bad = upward_imports(&files);
    assert!(bad.is_empty(), "imports that reach up:\n{}", bad.join("\n"));
}

#[test]
fn the_check_catches_an_upward_import() {
    let text = "use crate::runtime::Runtime;\nuse crate::cli::Cli;\n/// see [`crate::cli`]\n";
    let bad = upward_lines("transport", text);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!((bad[0].0, bad[0].1.as_str()), (2, "cli"));
    // Comments and `$crate::` are not imports; several paths on one line are all seen.
    assert!(crate_paths("$crate::cli::x()").is_empty());
    assert_eq!(
        crate_paths("x(crate::modex::y, crate::fault::z)"),
        ["modex", "fault"]
    );
}

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let names: Vec<&str> = CRATES.iter().map(|c| c.1).collect();
    for (manifest, name, allowed) in CRATES {
        let text = std::fs::read_to_string(root().join(manifest)).unwrap();
        let mut section = String::new();
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('[') {
                section = l.to_string();
                continue;
            }
            // Only what the crate's own code links: [dependencies], not dev-dependencies or
            // the workspace table.
            if section != "[dependencies]" || l.starts_with('#') {
                continue;
            }
            let key = l.split('=').next().unwrap_or("").trim();
            let package = l
                .split("package = \"")
                .nth(1)
                .and_then(|p| p.split('"').next())
                .unwrap_or(key);
            if names.contains(&package) {
                assert!(
                    allowed.contains(&package),
                    "{manifest}: {name} depends on {package}, which is not below it (docs/DESIGN.md, Layers)"
                );
            }
        }
    }
}
