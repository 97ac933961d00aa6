//! The modex exchange with real port discovery on rxe0, under mpirun and `openib run`, in one
//! SoftRoCE guest boot.

#[path = "softroce/harness.rs"]
mod harness;

use serde_json::Value;

#[test]
fn exchange_with_real_discovery_under_mpirun_and_openib_run() {
    if harness::skip_guest("softroce_modex") {
        return;
    }
    let b = env!("CARGO_BIN_EXE_openib");
    let script = format!(
        "echo '=== mpirun'; mpirun --oversubscribe -np 2 {b} modex exchange --json || echo FAILED\n\
         echo '=== run'; {b} run -n 3 --nodes 2 --timeout 120 -- {b} modex exchange --json || echo FAILED\n\
         echo '=== end'\n"
    );
    let out = harness::guest_run_ok(&[], &["sh", "-c", &script]);
    for (section, size, nodes, backend) in [("mpirun", 2, 1, "pmix"), ("run", 3, 2, "embedded")] {
        let text = harness::section(&out, section)
            .unwrap_or_else(|| panic!("no {section} section: {out}"));
        assert!(!text.contains("FAILED"), "{section}: {text}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{section} is not JSON ({e}): {text}"));
        assert_eq!(v["backend"], backend);
        assert_eq!(v["size"], size);
        let peers = v["peers"].as_array().unwrap();
        assert_eq!(peers.iter().filter(|p| p["leader"] == true).count(), nodes);
        for p in peers {
            assert_eq!(p["ports"], serde_json::json!(["rxe0:1"]), "{p}");
            let cpcs: Vec<&str> = p["cpcs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            for want in ["udcm", "oob", "rdmacm"] {
                assert!(cpcs.contains(&want), "{want} is usable on rxe0: {p}");
            }
            assert!(
                !cpcs.contains(&"xoob") && !cpcs.contains(&"ibcm"),
                "rxe has no XRC and 6.1 no ib_ucm: {p}"
            );
        }
    }
}
