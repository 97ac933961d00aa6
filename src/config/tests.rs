//! The unit tests of the settings table and its readers (the scans of the sources and docs
//! are tests/settings_docs.rs).

use super::*;
use std::path::PathBuf;
use std::sync::Mutex;

/// Tests that change the environment hold this.
static ENV: Mutex<()> = Mutex::new(());

fn with_env<T>(vars: &[(&str, Option<&str>)], f: impl FnOnce() -> T) -> T {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let saved: Vec<_> = vars
        .iter()
        .map(|(k, _)| (k.to_string(), std::env::var_os(k)))
        .collect();
    for (k, v) in vars {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(&k, v),
            None => std::env::remove_var(&k),
        }
    }
    out.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

#[test]
fn the_table_is_consistent() {
    let mut names = std::collections::BTreeSet::new();
    for s in SETTINGS {
        assert!(names.insert(s.name), "{} twice", s.name);
        assert!(s.name.starts_with("OPENIB_"), "{}", s.name);
        assert!(
            s.name[7..]
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
            "{}",
            s.name
        );
        assert!(!s.description.is_empty() && !s.description.contains('\n'));
        if let Some(d) = s.default {
            s.parse(d)
                .unwrap_or_else(|e| panic!("default of {}: {e}", s.name));
            assert!(!d.trim().is_empty());
        }
        if matches!(s.kind, Kind::Int { .. } | Kind::Bool) {
            assert!(s.default.is_some(), "{} needs a default", s.name);
        }
        if let Kind::Int { min, max } = s.kind {
            assert!(min <= max, "{}", s.name);
        }
        if let Some(o) = s.exclusive_with {
            assert_eq!(
                setting(o).exclusive_with,
                Some(s.name),
                "{} <-> {o}",
                s.name
            );
        }
    }
    // Grouped by component, in the order of the enum.
    assert!(SETTINGS
        .windows(2)
        .all(|w| w[0].component <= w[1].component));
}

#[test]
fn names_mirror_the_code() {
    let cpcs: Vec<&str> = openib_cpc::CpcId::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(cpcs, CPC_NAMES);
    let prio = setting("OPENIB_CPC_PRIORITY").description;
    for c in openib_cpc::CpcId::ALL {
        let want = format!("{} {}", c.name(), c.default_priority());
        assert!(prio.contains(&want), "{prio:?} lacks {want:?}");
    }
    // OPENIB_MODEX_MODE against the exchange's parser: tests/settings_docs.rs (the modex is a
    // layer above the settings).
    assert_eq!(
        setting("OPENIB_LIBIBVERBS").default,
        Some(openib_sys::VERBS_SONAME)
    );
    assert_eq!(
        setting("OPENIB_LIBRDMACM").default,
        Some(openib_sys::RDMACM_SONAME)
    );
}

#[test]
fn kinds_parse_and_refuse() {
    let eager = setting("OPENIB_EAGER_LIMIT");
    assert_eq!(eager.parse(" 4096 "), Ok(Value::Int(4096)));
    assert_eq!(eager.parse("64"), Ok(Value::Int(64)));
    assert_eq!(eager.parse("65535"), Ok(Value::Int(65535)));
    assert_eq!(eager.parse("63").unwrap_err(), "out of range");
    assert_eq!(eager.parse("65536").unwrap_err(), "out of range");
    assert_eq!(
        eager.parse("99999999999999999999999").unwrap_err(),
        "out of range"
    );
    assert_eq!(eager.parse("8k").unwrap_err(), "not an integer");
    assert_eq!(eager.parse("-1").unwrap_err(), "not an integer");
    let pinned = setting("OPENIB_PINNED_MAX");
    assert_eq!(
        pinned.parse("18446744073709551615"),
        Ok(Value::Int(u64::MAX))
    );
    assert_eq!(pinned.kind.allowed(), "an integer >= 0");

    let b = setting("OPENIB_APM_OVER_PORTS");
    for t in ["1", "true", "YES", "On"] {
        assert_eq!(b.parse(t), Ok(Value::Bool(true)), "{t}");
    }
    for t in ["0", "false", "no", "OFF"] {
        assert_eq!(b.parse(t), Ok(Value::Bool(false)), "{t}");
    }
    assert!(b.parse("maybe").is_err());

    let rt = setting("OPENIB_RUNTIME");
    assert_eq!(rt.parse("PMIx"), Ok(Value::Name("pmix")));
    assert_eq!(rt.parse("mpi").unwrap_err(), "unknown value \"mpi\"");

    let inc = setting("OPENIB_CPC_INCLUDE");
    assert_eq!(
        inc.parse("udcm, RDMACM,"),
        Ok(Value::List(vec!["udcm".into(), "rdmacm".into()]))
    );
    assert_eq!(inc.parse("udcm,foo").unwrap_err(), "unknown entry \"foo\"");

    let prio = setting("OPENIB_CPC_PRIORITY");
    assert_eq!(
        prio.parse("rdmacm:70, oob : 1"),
        Ok(Value::Pairs(vec![("rdmacm", 70), ("oob", 1)]))
    );
    for bad in ["rdmacm", "rdmacm:256", "foo:1", "rdmacm:x"] {
        assert!(prio.parse(bad).is_err(), "{bad}");
    }
    let fault = setting("OPENIB_FAULT");
    assert_eq!(
        fault.parse("in-connect:1,before-put:0"),
        Ok(Value::Pairs(vec![("in-connect", 1), ("before-put", 0)]))
    );
    assert!(fault.parse("in-conect:1").is_err());
    assert_eq!(
        fault.parse("in-fence:3,5, after-put:0,1"),
        Ok(Value::Pairs(vec![
            ("in-fence", 3),
            ("in-fence", 5),
            ("after-put", 0),
            ("after-put", 1)
        ]))
    );
    assert!(fault.parse("3,in-fence:5").is_err());

    let ifs = setting("OPENIB_IF_INCLUDE");
    assert_eq!(
        ifs.parse("mlx5_0,mlx5_1:2"),
        Ok(Value::List(vec!["mlx5_0".into(), "mlx5_1:2".into()]))
    );
    assert!(ifs.parse("mlx5_0:x").unwrap_err().contains("mlx5_0:x"));

    let log = setting("OPENIB_LOG");
    assert!(log.parse("openib_ports=trace,warn").is_ok());
    assert!(log.parse("debug").is_ok());
    assert!(log
        .parse("foo=bar=baz")
        .unwrap_err()
        .contains("not a log filter"));
}

#[test]
fn readers_take_the_environment_else_the_default_and_refuse_bad_values() {
    with_env(
        &[
            ("OPENIB_EAGER_LIMIT", Some("4096")),
            ("OPENIB_RECV_DEPTH", None),
            ("OPENIB_SEND_DEPTH", Some("  ")),
            ("OPENIB_RNDV_FRAGMENT", Some("2048")),
            ("OPENIB_PINNED_MAX", Some("0")),
            ("OPENIB_PMIX_FENCE_MARKS", Some("off")),
            ("OPENIB_RUNTIME", None),
            ("OPENIB_CPC_PRIORITY", Some("udcm:1")),
        ],
        || {
            assert_eq!(usize("OPENIB_EAGER_LIMIT"), Ok(4096));
            assert_eq!(source("OPENIB_EAGER_LIMIT"), Source::Env);
            assert_eq!(u32("OPENIB_RECV_DEPTH"), Ok(64));
            assert_eq!(source("OPENIB_RECV_DEPTH"), Source::Default);
            // Blank counts as unset.
            assert_eq!(u32("OPENIB_SEND_DEPTH"), Ok(128));
            assert_eq!(source("OPENIB_SEND_DEPTH"), Source::Default);
            assert_eq!(u64("OPENIB_PINNED_MAX"), Ok(0));
            assert!(!bool("OPENIB_PMIX_FENCE_MARKS").unwrap());
            assert_eq!(choice("OPENIB_RUNTIME"), Ok(None));
            assert_eq!(choice("OPENIB_MODEX_MODE"), Ok(Some("gathered")));
            assert_eq!(pairs("OPENIB_CPC_PRIORITY"), Ok(vec![("udcm", 1)]));
            assert_eq!(pairs("OPENIB_FAULT"), Ok(vec![]));
            assert_eq!(list("OPENIB_CPC_EXCLUDE"), Ok(vec![]));
            assert_eq!(path("OPENIB_FIXTURE"), Ok(None));
            assert_eq!(
                path("OPENIB_LIBPMIX"),
                Ok(Some(PathBuf::from("libpmix.so.2")))
            );
            assert_eq!(string("OPENIB_MODEX_MODE"), Ok(Some("gathered".into())));

            let e = u64("OPENIB_RNDV_FRAGMENT").unwrap_err();
            assert_eq!(e.name, "OPENIB_RNDV_FRAGMENT");
            assert_eq!(e.value, "2048");
            assert_eq!(e.origin, Source::Env);
            assert_eq!(
                e.to_string(),
                "OPENIB_RNDV_FRAGMENT=\"2048\" (from the environment): out of range; \
                 allowed: an integer from 4096 to 1073741824"
            );
            assert_eq!(problems(), vec![e]);
        },
    );
}

#[test]
fn source_names_the_settings_file_for_what_it_filled() {
    with_env(
        &[
            ("OPENIB_RECV_DEPTH", Some("7")),
            ("OPENIB_SEND_DEPTH", Some("32")),
        ],
        || {
            crate::settings::record_filled("OPENIB_RECV_DEPTH", "7");
            // Filled from the file with another value, then changed: the environment's.
            crate::settings::record_filled("OPENIB_SEND_DEPTH", "64");
            assert_eq!(source("OPENIB_RECV_DEPTH"), Source::File);
            assert_eq!(source("OPENIB_SEND_DEPTH"), Source::Env);
            let e = u32("OPENIB_RECV_DEPTH").unwrap_err();
            assert_eq!(e.origin, Source::File);
            assert!(e.to_string().contains("(from the settings file)"), "{e}");
        },
    );
}

#[test]
fn exclusive_pairs_are_refused_together() {
    with_env(
        &[
            ("OPENIB_CPC_INCLUDE", Some("udcm")),
            ("OPENIB_CPC_EXCLUDE", Some("oob")),
        ],
        || {
            let e = check("OPENIB_CPC_EXCLUDE").unwrap_err();
            assert!(e.problem.contains("OPENIB_CPC_INCLUDE"), "{e}");
            assert!(check("OPENIB_CPC_INCLUDE").is_err());
            // Each value is fine on its own.
            assert_eq!(list("OPENIB_CPC_EXCLUDE"), Ok(vec!["oob".to_string()]));
        },
    );
}

#[test]
#[should_panic(expected = "not in the settings table")]
fn an_unknown_name_is_a_programming_error() {
    let _ = usize("OPENIB_NO_SUCH_SETTING");
}

#[test]
#[should_panic(expected = "is bool setting, not an integer")]
fn the_wrong_type_is_a_programming_error() {
    let _ = usize("OPENIB_APM_OVER_PORTS");
}

#[test]
fn normalize_spells_names_like_the_settings_file() {
    assert_eq!(normalize("eager-limit"), "OPENIB_EAGER_LIMIT");
    assert_eq!(normalize("cpc_include"), "OPENIB_CPC_INCLUDE");
    assert_eq!(normalize("OPENIB_LOG"), "OPENIB_LOG");
}
