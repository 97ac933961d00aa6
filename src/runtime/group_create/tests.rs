//! Unit tests: the wire form, and the protocol in the simulator (the cases of issue 32).

use super::sim::{run, SimConfig, SimReport};
use super::wire::*;
use crate::runtime::wire::WireError;

fn check(r: &SimReport, what: &str) {
    assert!(
        r.ok(),
        "{what}: p={} seed={} dead={:?} decided then died {:?}: {:?}",
        r.p,
        r.seed,
        r.dead,
        r.decided_then_died,
        r.problems
    );
}

#[test]
fn wire_round_trip_and_every_prefix_is_rejected() {
    for m in example_messages() {
        let b = m.encode();
        assert_eq!(GcMsg::decode(&b), Ok(m.clone()));
        for n in 0..b.len() {
            assert!(
                matches!(GcMsg::decode(&b[..n]), Err(WireError::Truncated { .. })),
                "{} prefix of {n} bytes",
                m.kind()
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(GcMsg::decode(&long), Err(WireError::Trailing { len: 1 }));
    }
}

#[test]
fn same_groups_no_failures() {
    for p in [1u32, 2, 3, 5, 8, 16, 33] {
        let r = run(&SimConfig::same_groups(p, 1));
        check(&r, "same groups");
        for x in 0..p {
            let d = r.outcome(x).unwrap().as_ref().unwrap();
            assert_eq!(d.group, (0..p).collect::<Vec<_>>());
        }
        eprintln!("p={p} steps={} messages={}", r.steps, r.messages);
    }
}

#[test]
fn random_smoke() {
    for seed in 0..300u64 {
        let p = 2 + (seed % 40) as u32;
        let c = SimConfig::random(p, (seed % 5) as u32, 0.2, seed);
        check(&run(&c), "random");
    }
}

/// Many random cases (`OPENIB_SIM_RUNS`, default 20,000): `cargo test --lib
/// group_create::tests::stress -- --ignored`.
#[test]
#[ignore]
fn stress() {
    let runs: u64 = std::env::var("OPENIB_SIM_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let base: u64 = std::env::var("OPENIB_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for i in 0..runs {
        let seed = base.wrapping_add(i);
        let mut rng = crate::sim::Rng::new(seed);
        let p = 1 + rng.below(60) as u32;
        let f = rng.below(u64::from(p).min(8)) as u32;
        let differ = [0.0, 0.05, 0.2, 0.6][rng.below(4) as usize];
        let c = SimConfig::random(p, f, differ, seed);
        check(&run(&c), &format!("stress p={p} f={f} differ={differ}"));
    }
}
