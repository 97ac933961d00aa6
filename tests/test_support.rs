//! Test support stays out of a default build (issue 28; docs/DESIGN.md, "Fault injection and
//! test support"): every module that only tests, benchmarks or fuzz targets use is declared
//! behind `#[cfg(test)]` or one of the cargo features `wire-oracle` / `test-support`, which only
//! the package's dev-dependency on itself (and fuzz/Cargo.toml) turn on.

use std::path::Path;

/// (file declaring the module, module name, the `cfg` it must sit behind).
const GATED: &[(&str, &str, &str)] = &[
    ("src/lib.rs", "wire_oracle", "feature = \"wire-oracle\""),
    ("src/modex/mod.rs", "oracle", "feature = \"wire-oracle\""),
    ("src/modex/mod.rs", "fixtures", "feature = \"test-support\""),
    ("src/modex/mod.rs", "proptests", "#[cfg(test)]"),
    ("src/modex/mod.rs", "vectors", "#[cfg(test)]"),
];

/// The attribute lines (`#[...]`, doc comments skipped) right above `mod NAME;` in `src`.
fn attributes_of(src: &str, name: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = src.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| *l == format!("pub mod {name};") || *l == format!("mod {name};"))?;
    Some(
        lines[..at]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
            .filter(|l| l.starts_with("#["))
            .map(|l| l.to_string())
            .collect(),
    )
}

#[test]
fn test_only_modules_are_gated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, name, gate) in GATED {
        let src =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let attrs = attributes_of(&src, name)
            .unwrap_or_else(|| panic!("{file} declares no module `{name}`"));
        assert!(
            attrs
                .iter()
                .any(|a| a.starts_with("#[cfg(") && a.contains(gate)),
            "{file}: `mod {name}` is built into a default build: it needs `{gate}` in a \
             #[cfg(...)] (has {attrs:?})"
        );
    }
}

#[test]
fn the_test_builds_have_the_test_support() {
    // The package's dev-dependency on itself turns the features on for every test build.
    const {
        assert!(
            cfg!(feature = "test-support") && cfg!(feature = "wire-oracle"),
            "the test build lacks the cargo feature `test-support`"
        )
    };
    // And the gated items are there.
    let t = openib::modex::fixtures::ib_template(2, true);
    let job =
        openib::modex::fixtures::synth_job(&t, 2, 3, openib::modex::synth::Values::Random, true, 1);
    assert_eq!(job.len(), 2);
    let blob = job[0].node.encode(openib::modex::Compression::OFF).unwrap();
    assert!(openib::modex::oracle::check_node(&blob).is_some());
}
