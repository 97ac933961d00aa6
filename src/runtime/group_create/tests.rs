//! Unit tests: the wire form, and the protocol in the simulator (the cases of issue 32).

use super::sim::{log2_ceil, run, SimConfig, SimReport, When};
use super::wire::*;
use super::{tag_of, GcIn, GcOut, GroupCreate, GroupCreateError, Value, View};
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
fn wire_byte_order_is_little_endian() {
    let m = GcMsg {
        tag: 0x0102_0304_0506_0708,
        view_hash: 0x1112_1314_1516_1718,
        failed: std::sync::Arc::new(vec![0x0a0b_0c0d]),
        body: Body::Ack {
            ballot: (1, 2, 0x2122_2324),
        },
    };
    let mut want = vec![tag::ACK, 8, 7, 6, 5, 4, 3, 2, 1];
    want.extend_from_slice(&[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]);
    want.extend_from_slice(&[1, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a]);
    want.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0, 0x24, 0x23, 0x22, 0x21]);
    assert_eq!(m.encode(), want);
}

#[test]
fn wire_rejects_bad_tags_flags_views_and_order() {
    let good = example_messages();
    let full = good.iter().find(|m| m.kind() == "full").unwrap().encode();
    let up = good
        .iter()
        .find(|m| matches!(m.body, Body::Up { acked: None, .. }))
        .unwrap()
        .encode();
    for t in [0u8, 0x11, 0x20, 0x29, 0xff] {
        let mut b = up.clone();
        b[0] = t;
        assert_eq!(GcMsg::decode(&b), Err(WireError::UnknownTag { tag: t }));
    }
    // The acked flag of an Up (its last byte) other than 0 or 1.
    let mut b = up.clone();
    *b.last_mut().unwrap() = 2;
    assert!(matches!(
        GcMsg::decode(&b),
        Err(WireError::BadValue {
            what: "acked flag",
            value: 2,
            ..
        })
    ));
    // The reply flag of a Full.
    let mut b = full.clone();
    *b.last_mut().unwrap() = 7;
    assert!(matches!(
        GcMsg::decode(&b),
        Err(WireError::BadValue {
            what: "reply flag",
            ..
        })
    ));
    // A root's own proposal and a re-proposed value differ only in their tag (a kind of its
    // own, not a flag in the first layout): the same bytes after it, each decoding as itself.
    let fresh = good
        .iter()
        .find(|m| matches!(m.body, Body::Propose { fresh: true, .. }))
        .unwrap();
    let Body::Propose { ballot, value, .. } = &fresh.body else {
        unreachable!()
    };
    let stale = GcMsg {
        body: Body::Propose {
            ballot: *ballot,
            fresh: false,
            value: value.clone(),
        },
        ..fresh.clone()
    };
    let (a, b) = (fresh.encode(), stale.encode());
    assert_eq!((a[0], b[0]), (tag::PROPOSE_FRESH, tag::PROPOSE));
    assert_eq!(a[1..], b[1..]);
    assert_eq!(GcMsg::decode(&a).as_ref(), Ok(fresh));
    assert_eq!(GcMsg::decode(&b), Ok(stale));
    // A Full whose view hash does not match its view.
    let mut b = full.clone();
    b[9] ^= 1;
    assert!(matches!(
        GcMsg::decode(&b),
        Err(WireError::Invalid {
            what: "view hash",
            ..
        })
    ));
    // Views built by hand: members out of order, I not within U, exclusions that are not
    // exactly U \ I.
    let header = |out: &mut Vec<u8>, hash: u64| {
        out.push(tag::FULL);
        out.extend_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&hash.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    };
    let list = |out: &mut Vec<u8>, xs: &[u32]| {
        out.extend_from_slice(&(xs.len() as u32).to_le_bytes());
        for x in xs {
            out.extend_from_slice(&x.to_le_bytes());
        }
    };
    type Case<'a> = (&'a [u32], &'a [u32], &'a [(u32, u32)], &'a str);
    let cases: [Case; 4] = [
        (&[2, 1], &[2, 1], &[], "member"),
        (
            &[1, 2],
            &[1, 3],
            &[(2, 1)],
            "common set outside the members",
        ),
        (&[1, 2, 3], &[1], &[(2, 1)], "exclusions"),
        (&[1, 2, 3], &[1], &[(3, 1), (2, 1)], "exclusion order"),
    ];
    for (u, i, ex, what) in cases {
        let mut b = Vec::new();
        header(&mut b, view_key(u, i));
        list(&mut b, u);
        list(&mut b, i);
        b.extend_from_slice(&(ex.len() as u32).to_le_bytes());
        for (x, k) in ex {
            b.extend_from_slice(&x.to_le_bytes());
            b.extend_from_slice(&k.to_le_bytes());
        }
        b.push(0);
        match GcMsg::decode(&b) {
            Err(WireError::Invalid { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    // A forged count cannot make the decoder allocate past the input.
    let mut b = Vec::new();
    header(&mut b, 0);
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        GcMsg::decode(&b),
        Err(WireError::Truncated { .. })
    ));
}

proptest::proptest! {
    /// Any bytes: a typed error or a message, never a panic; what decodes re-encodes to the
    /// same bytes.
    #[test]
    fn wire_decoder_is_total_and_canonical(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
    ) {
        if let Ok(m) = GcMsg::decode(&bytes) {
            proptest::prop_assert_eq!(m.encode(), bytes);
        }
    }

    /// Valid messages with one byte changed or cut short: the same.
    #[test]
    fn wire_mutations_are_rejected_or_canonical(
        which in 0usize..8,
        at in proptest::prelude::any::<proptest::sample::Index>(),
        xor in 1u8..=255,
        cut in proptest::prelude::any::<bool>(),
    ) {
        let mut b = example_messages()[which].encode();
        let i = at.index(b.len());
        if cut {
            b.truncate(i);
        } else {
            b[i] ^= xor;
        }
        if let Ok(m) = GcMsg::decode(&b) {
            proptest::prop_assert_eq!(m.encode(), b);
        }
    }
}

#[test]
fn same_seed_same_run() {
    let c = SimConfig::random(40, 4, 0.3, 77);
    let (a, b) = (run(&c), run(&c));
    check(&a, "same seed");
    assert_eq!(
        (a.steps, a.messages, &a.values),
        (b.steps, b.messages, &b.values)
    );
}

/// With failures the messages stay below p log2 p: one failure from p = 64 on (a death inside
/// the agreement costs no new attempt, one in the tree a few greetings), two from p = 256 on
/// and four from p = 1,024 on (two participants dead without acknowledging, one of them in
/// the group, cost a new attempt, about 2p), and from p = 1,024 on when the root dies too (a
/// new gather, about 4p). Victims die in the tree, in the agreement (on their first proposal
/// or acknowledgement) or at a random time.
#[test]
fn messages_with_failures_stay_below_p_log_p() {
    let whens = [
        When::OnFirst("propose"),
        When::OnFirst("ack"),
        When::At(2),
        When::At(9),
        When::OnFirst("up"),
    ];
    // (p, failures, of them the roots: rank 0, then rank 1)
    let cases = [
        (64u32, 1u32, 0u32),
        (256, 1, 0),
        (256, 2, 0),
        (1024, 2, 0),
        (1024, 4, 0),
        (1024, 1, 1),
        (1024, 4, 1),
        (4096, 4, 0),
        (4096, 2, 2),
    ];
    for (p, f, roots) in cases {
        for seed in 0..3u64 {
            let mut c = SimConfig::same_groups(p, seed);
            let mut rng = crate::runtime::sim_support::Rng::new(seed * 31 + u64::from(f));
            let mut victims: std::collections::BTreeSet<u32> = (0..roots).collect();
            while (victims.len() as u32) < f {
                victims.insert(roots.max(1) + rng.below(u64::from(p - roots.max(1))) as u32);
            }
            c.failures = victims
                .into_iter()
                .map(|v| (v, whens[rng.below(whens.len() as u64) as usize]))
                .collect();
            let r = run(&c);
            check(&r, &format!("p={p} f={f} seed={seed}"));
            assert!(
                r.messages < u64::from(p) * log2_ceil(p),
                "p={p} f={f} seed={seed}: {} messages {:?} (victims {:?})",
                r.messages,
                r.by_kind,
                c.failures
            );
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn ok_group(r: &SimReport, rank: u32) -> Vec<u32> {
    match r.outcome(rank) {
        Some(Ok(d)) => d.group.to_vec(),
        other => panic!("rank {rank}: {other:?}; seed {}: {:?}", r.seed, r.problems),
    }
}

fn value_of(r: &SimReport, rank: u32) -> &Value {
    r.values[rank as usize].as_ref().expect("decided")
}

/// Seeds that found bugs while the protocol was written, and a fixed sweep.
#[test]
fn regression_seeds() {
    for seed in [114u64, 269, 1030, 3898].into_iter().chain(0..250) {
        check(&run(&SimConfig::random_case(seed, 60)), "regression");
    }
    // 1024943: the root re-proposing another root's value commits to one process and dies;
    // the commit must name the deciding root (not the value's author) so that those holding it
    // pass it on.
    for seed in [1_024_943u64].into_iter().chain(0..100) {
        check(&run(&SimConfig::harsh_case(seed, 24)), "regression (harsh)");
    }
    // 1796493854 (of up to 64 processes): a root's value reached, through a process that
    // then died, processes its root never heard of; the root decided alone and died
    // (docs/RUNTIME.md, "Decisions nobody can pass on").
    check(
        &run(&SimConfig::random_case(1_796_493_854, 64)),
        "regression",
    );
    // Runs that stopped making progress (2026-12-05, 60 sweeps of 5,000 cases of up to 64
    // processes): a root re-proposing a value it had authored under another root's ballot,
    // refused by a process that knew more (fixed by the fresh proposal, tag `PROPOSE_FRESH`); a child holding
    // the root's proposal when its root stepped down and back and gathered again (fixed: a
    // greeting after a proposal means a new gather, report again). 8673119138: a process that
    // had accepted a proposal naming it refused the decision of its own root (made without it)
    // and waited for that root for ever.
    for seed in [
        3_277_165_873u64,
        3_356_359_994,
        4_069_067_984,
        4_979_752_301,
        8_673_119_138,
    ] {
        check(&run(&SimConfig::random_case(seed, 64)), "regression (64)");
    }
    for seed in [
        3_673_116_557u64,
        3_950_284_007,
        4_306_638_558,
        4_385_825_276,
        4_504_613_980,
        4_702_589_188,
        4_781_777_738,
        4_821_372_866,
        4_860_967_022,
        4_900_560_709,
        5_098_536_954,
        5_138_131_233,
        5_177_728_889,
        5_336_109_224,
    ] {
        check(
            &run(&SimConfig::harsh_case(seed, 64)),
            "regression (harsh, 64)",
        );
    }
    // Disagreements of the same sweeps: a process that had accepted a proposal naming it
    // adopted a decision made without it (passed on by a process left out of it, or the
    // answer of a process that decided alone), while the root of its proposal decided with
    // it in the group (4187852491, 4979752835, 5256919036); and a root's two attempts decided
    // by two processes left alone, groups equal, participants not (3356358150: allowed by
    // rule (a), docs/RUNTIME.md "Semantics").
    for seed in [
        4_187_852_491u64,
        4_979_752_835,
        5_256_919_036,
        3_356_358_150,
    ] {
        check(
            &run(&SimConfig::harsh_case(seed, 64)),
            "regression (harsh, 64)",
        );
    }
    // 2026-12-06's CI sweeps: 1796540446, a root engaged with its own proposal refused the
    // decision a participant had taken (made without them both, by a process that then died)
    // and waited for that participant's acknowledgement for ever (fixed: a root takes the
    // decision of a live participant); 1796547630, a participant took a decision made without
    // it and died unacknowledged, and the root, counting only that death, decided a group
    // naming it (fixed: two unacknowledged deaths, one in the group, make a new attempt).
    for seed in [1_796_540_446u64, 1_796_547_630] {
        check(
            &run(&SimConfig::harsh_case(seed, 64)),
            "regression (harsh, 64)",
        );
    }
}

/// New seeds every run (from the clock, or `SIM_SEED` to replay: the failing seed is
/// in the message).
#[test]
fn random_seeds_each_run() {
    let base = env_u64("SIM_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
    });
    eprintln!("random_seeds_each_run: SIM_SEED={base}");
    for i in 0..150 {
        let seed = base.wrapping_add(i);
        check(
            &run(&SimConfig::random_case(seed, 80)),
            &format!("replay with SIM_SEED={seed}"),
        );
    }
}

#[test]
fn same_groups_no_failures_every_process_gets_the_group() {
    for p in [1u32, 2, 3, 5, 8, 16, 33, 100] {
        let r = run(&SimConfig::same_groups(p, 1));
        check(&r, "same groups");
        for x in 0..p {
            assert_eq!(ok_group(&r, x), (0..p).collect::<Vec<_>>());
        }
        assert!(r.steps <= 2 * log2_ceil(p) + 2, "p={p}: {} steps", r.steps);
        assert_eq!(r.messages, 5 * u64::from(p - 1), "p={p}: {:?}", r.by_kind);
    }
}

/// The failure-free bound of issue 32 at p = 4,096: at most 2 ceil(log2 p) + 2 steps (the
/// report up the tree, the proposal down, the acknowledgements to the root and its commit),
/// and 5 (p - 1) messages (hello, up, propose, ack, commit).
#[test]
fn failure_free_steps_at_4096() {
    let p = 4096;
    let r = run(&SimConfig::same_groups(p, 3));
    check(&r, "p=4096");
    assert_eq!(r.steps, 2 * log2_ceil(p) + 2, "{:?}", r.by_kind);
    assert_eq!(r.messages, 5 * u64::from(p - 1), "{:?}", r.by_kind);
    // With random delays (per-link order kept), the hops on the critical path are the same.
    let mut c = SimConfig::same_groups(p, 4);
    c.max_delay = 3;
    let r = run(&c);
    check(&r, "p=4096 with delays");
    assert_eq!(r.steps, 2 * log2_ceil(p) + 2);
}

/// Case 1: processes already dead in the group a process passes (known to some at the start,
/// learned later by the others).
#[test]
fn case1_dead_before_the_call() {
    for seed in 0..20 {
        let mut c = SimConfig::with_groups(
            12,
            &[],
            vec![(3, When::Before), (0, When::Before), (7, When::Before)],
        );
        c.seed = seed;
        c.max_delay = seed % 3;
        let r = run(&c);
        check(&r, "case 1");
        for x in [1, 2, 4, 5, 6, 8, 9, 10, 11] {
            assert_eq!(
                ok_group(&r, x),
                vec![1, 2, 4, 5, 6, 8, 9, 10, 11],
                "seed {seed}"
            );
        }
        assert_eq!(*value_of(&r, 1).failed, vec![0, 3, 7]);
    }
}

/// Case 2: different processes passing different groups: the new group is their
/// intersection; a process left out is told whose group lacks it.
#[test]
fn case2_different_groups() {
    for seed in 0..20 {
        let mut c = SimConfig::with_groups(
            6,
            &[
                (2, &[0, 1, 2, 3, 4]),
                (4, &[0, 1, 2, 3, 4, 5]),
                (3, &[1, 2, 3, 4, 5]),
            ],
            vec![],
        );
        c.seed = seed;
        c.max_delay = seed % 4;
        let r = run(&c);
        check(&r, "case 2");
        for x in [1, 2, 3, 4] {
            assert_eq!(ok_group(&r, x), vec![1, 2, 3, 4], "seed {seed}");
        }
        assert_eq!(
            r.outcome(5),
            Some(&Err(GroupCreateError::ExcludedBy { rank: 5, by: 2 }))
        );
        assert_eq!(
            r.outcome(0),
            Some(&Err(GroupCreateError::ExcludedBy { rank: 0, by: 3 }))
        );
        assert_eq!(*value_of(&r, 1).view.members, vec![0, 1, 2, 3, 4, 5]);
    }
}

/// Case 3: processes dying during the operation: in the tree, on their first proposal (inside
/// the agreement), on their first commit, and roots right after deciding (their commits half
/// sent). Every survivor has the same group, every survivor is in it, and whoever decided and
/// then died decided the same (uniform agreement, checked by the judge).
#[test]
fn case3_deaths_during_the_operation_and_the_agreement() {
    let whens = [
        When::At(1),
        When::At(4),
        When::OnFirst("propose"),
        When::OnFirst("ack"),
        When::OnFirst("commit"),
        When::AfterDecide(0),
        When::AfterDecide(1),
    ];
    let mut decided_then_died = 0;
    for (i, w) in whens.iter().enumerate() {
        for victims in [vec![0u32], vec![0, 1], vec![5, 9, 2], vec![1, 2, 3, 4]] {
            for seed in 0..6u64 {
                let failures = victims.iter().map(|&v| (v, *w)).collect();
                let mut c = SimConfig::with_groups(16, &[], failures);
                c.seed = seed * 31 + i as u64;
                c.max_delay = seed % 3;
                c.max_detect_delay = 1 + seed % 4;
                let r = run(&c);
                check(&r, &format!("case 3 {w:?} {victims:?}"));
                decided_then_died += r.decided_then_died.len();
                let survivors: Vec<u32> = (0..16).filter(|x| !r.dead.contains(x)).collect();
                let g = ok_group(&r, survivors[0]);
                for &x in &survivors {
                    assert_eq!(ok_group(&r, x), g);
                    assert!(g.contains(&x));
                }
            }
        }
    }
    assert!(decided_then_died > 20, "{decided_then_died}");
}

/// Case 4: a death before the call that nobody knows at the start (the detector tells each
/// process 1 to 4 steps in): found during the operation, agreed failed.
#[test]
fn case4_death_before_the_call_found_during_it() {
    for seed in 0..20 {
        let mut c = SimConfig::with_groups(16, &[], vec![(0, When::Before), (6, When::Before)]);
        c.seed = seed;
        c.min_detect_delay = 1;
        c.max_detect_delay = 4;
        c.max_delay = seed % 2;
        let r = run(&c);
        check(&r, "case 4");
        let want: Vec<u32> = (1..16).filter(|x| *x != 6).collect();
        for &x in &want {
            assert_eq!(ok_group(&r, x), want, "seed {seed}");
        }
        assert_eq!(*value_of(&r, 1).failed, vec![0, 6]);
    }
}

/// Case 5a: A's group has B, and B has died (before the call, or during it).
#[test]
fn case5a_a_group_names_a_dead_process() {
    for when in [When::Before, When::At(0), When::At(2)] {
        for seed in 0..10 {
            let mut c = SimConfig::with_groups(
                4,
                &[(0, &[0, 1, 2, 3]), (1, &[0, 1, 3]), (3, &[0, 1, 3])],
                vec![(2, when)],
            );
            c.seed = seed;
            let r = run(&c);
            check(&r, "case 5a");
            for x in [0, 1, 3] {
                assert_eq!(ok_group(&r, x), vec![0, 1, 3], "{when:?} seed {seed}");
            }
        }
    }
}

/// Case 5b: A's group has B, B's group lacks A. With B also in others' groups (0 and 3 pass
/// everyone), A is left out, named excluded by B. With A and B alone, B's operation is over
/// before A reaches it (nobody B waits for knows A): A gets B's decision and is told it is in
/// no participant's group (no deadlock until a deadline).
#[test]
fn case5b_my_group_has_b_whose_group_lacks_me() {
    for seed in 0..10 {
        let mut c = SimConfig::with_groups(4, &[(2, &[0, 2, 3])], vec![]);
        c.seed = seed;
        c.max_delay = seed % 3;
        let r = run(&c);
        check(&r, "case 5b");
        for x in [0, 2, 3] {
            assert_eq!(ok_group(&r, x), vec![0, 2, 3]);
        }
        assert_eq!(
            r.outcome(1),
            Some(&Err(GroupCreateError::ExcludedBy { rank: 1, by: 2 }))
        );

        let mut c = SimConfig::with_groups(2, &[(0, &[0, 1]), (1, &[1])], vec![]);
        c.seed = seed;
        let r = run(&c);
        check(&r, "case 5b alone");
        assert_eq!(ok_group(&r, 1), vec![1]);
        assert_eq!(
            r.outcome(0),
            Some(&Err(GroupCreateError::NotAParticipant { rank: 0, root: 1 }))
        );

        // B decides alone and dies at once: A cannot learn B's decision and decides among
        // those it reaches, B agreed dead (a separate decision: B's had no participant A).
        let mut c = SimConfig::with_groups(
            2,
            &[(0, &[0, 1]), (1, &[1])],
            vec![(1, When::AfterDecide(0))],
        );
        c.seed = seed;
        let r = run(&c);
        check(&r, "case 5b, B decides and dies");
        assert_eq!(r.decided_then_died, vec![1]);
        assert_eq!(value_of(&r, 1).group().to_vec(), vec![1]);
        assert_eq!(ok_group(&r, 0), vec![0]);
        assert_eq!(*value_of(&r, 0).failed, vec![1]);
    }
}

/// Case 5c: A's group has B and C, B's has A but not C: B never ends up with C, and C is told
/// B's group lacks it.
#[test]
fn case5c_b_lacks_c() {
    for seed in 0..10 {
        for (a, b, c_) in [(0u32, 1u32, 2u32), (2, 1, 0), (1, 2, 0)] {
            let ga = [a, b, c_];
            let gb = [a, b];
            let mut c = SimConfig::with_groups(3, &[(a, &ga), (b, &gb), (c_, &ga)], vec![]);
            c.seed = seed;
            c.max_delay = seed % 3;
            let r = run(&c);
            check(&r, "case 5c");
            let mut want = vec![a, b];
            want.sort_unstable();
            assert_eq!(ok_group(&r, a), want);
            assert_eq!(ok_group(&r, b), want);
            assert_eq!(
                r.outcome(c_),
                Some(&Err(GroupCreateError::ExcludedBy { rank: c_, by: b }))
            );
        }
    }
}

/// Case 5d: identical groups where they first meet (the root and its children), and the
/// problems of 5a, 5b and 5c found deeper in the tree: rank 9 dead before the call and
/// unknown at the start, rank 15 (a leaf) lacks rank 3, rank 12 lacks rank 13.
#[test]
fn case5d_identical_groups_later_discover_problems() {
    let all: Vec<u32> = (0..16).collect();
    let no3: Vec<u32> = all.iter().copied().filter(|x| *x != 3).collect();
    let no13: Vec<u32> = all.iter().copied().filter(|x| *x != 13).collect();
    for seed in 0..20 {
        let mut c = SimConfig::with_groups(16, &[(15, &no3), (12, &no13)], vec![(9, When::Before)]);
        c.seed = seed;
        c.min_detect_delay = 1;
        c.max_delay = seed % 3;
        let r = run(&c);
        check(&r, "case 5d");
        let want: Vec<u32> = all
            .iter()
            .copied()
            .filter(|x| ![3, 9, 13].contains(x))
            .collect();
        for &x in &want {
            assert_eq!(ok_group(&r, x), want, "seed {seed}");
        }
        assert_eq!(
            r.outcome(3),
            Some(&Err(GroupCreateError::ExcludedBy { rank: 3, by: 15 }))
        );
        assert_eq!(
            r.outcome(13),
            Some(&Err(GroupCreateError::ExcludedBy { rank: 13, by: 12 }))
        );
        assert_eq!(*value_of(&r, 0).failed, vec![9]);
    }
}

/// The judge is not vacuous: a forged disagreement and a forged invalid group are reported.
#[test]
fn the_judge_catches_wrong_outcomes() {
    let r = run(&SimConfig::same_groups(4, 1));
    check(&r, "baseline");
    let mut forged = r.values.clone();
    let v = forged[2].clone().unwrap();
    let view = View::new(
        v.view.members.clone(),
        std::sync::Arc::new(vec![0, 1, 2]),
        std::sync::Arc::new(vec![(3, 2)]),
    );
    forged[2] = Some(Value::new(view, v.failed.clone(), v.root));
    let problems = super::sim::judge_values(&SimConfig::same_groups(4, 1), &forged, &[]);
    assert!(
        problems.iter().any(|p| p.contains("disagreement")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("left out")),
        "{problems:?}"
    );
}

/// The judge reports two decisions whose groups overlap without being equal, also when their
/// holders never heard of each other (rank 0 decided {0,1} and died, rank 3 decided {1,3},
/// rank 1 died undecided): docs/RUNTIME.md, "Decisions nobody can pass on".
#[test]
fn the_judge_catches_overlapping_groups_of_strangers() {
    use std::sync::Arc;
    let value = |u: &[u32], root: u32| {
        let u = Arc::new(u.to_vec());
        Value::new(
            View::new(u.clone(), u, Arc::new(Vec::new())),
            Arc::new(Vec::new()),
            root,
        )
    };
    let cfg = SimConfig::with_groups(4, &[(0, &[0, 1]), (1, &[0, 1]), (3, &[1, 3])], vec![]);
    let values = vec![Some(value(&[0, 1], 0)), None, None, Some(value(&[1, 3], 3))];
    let problems = super::sim::judge_values(&cfg, &values, &[0, 1, 2]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("overlapping groups: rank 1 is in")),
        "{problems:?}"
    );
    assert!(
        !problems.iter().any(|p| p.contains("disagreement")),
        "{problems:?}"
    );
    // Disjoint groups of strangers are allowed.
    let values = vec![Some(value(&[0], 0)), None, None, Some(value(&[3], 3))];
    let cfg = SimConfig::with_groups(4, &[(0, &[0]), (3, &[3])], vec![]);
    let problems = super::sim::judge_values(&cfg, &values, &[0, 1, 2]);
    assert!(problems.is_empty(), "{problems:?}");
}

/// Uniform agreement when everyone that had the decision dies: the root and the lowest ranks
/// (who receive its commit first) die right after deciding, the root's commits half sent.
/// The survivors must decide what the dead decided: a new root re-proposes the highest
/// accepted proposal. Removing that rule (proposing its own view instead) fails this test.
#[test]
fn processes_that_die_right_after_deciding_decided_the_same() {
    let mut all_deciders_died = 0;
    for p in [4u32, 6, 8] {
        for k in 1..=3u32 {
            for seed in 0..40u64 {
                let failures = (0..k).map(|v| (v, When::AfterDecide(0))).collect();
                let mut c = SimConfig::with_groups(p, &[], failures);
                c.seed = seed * 7 + u64::from(p * 3 + k);
                c.max_detect_delay = 1 + seed % 3;
                let r = run(&c);
                check(&r, &format!("p={p} k={k}"));
                // Every survivor decided what a dead process decided.
                if let Some(&d) = r.decided_then_died.first() {
                    let dead_group = value_of(&r, d).group().to_vec();
                    for x in (0..p).filter(|x| !r.dead.contains(x)) {
                        assert_eq!(ok_group(&r, x), dead_group, "p={p} k={k} seed={}", c.seed);
                    }
                    if r.dead.len() == r.decided_then_died.len() && dead_group.contains(&0) {
                        all_deciders_died += 1;
                    }
                }
            }
        }
    }
    assert!(all_deciders_died > 10, "{all_deciders_died}");
}

/// The API by hand: a process outside its own group is refused; the snapshot of the group's
/// failures is used; another tag's messages are ignored; a named process that never calls
/// ends in `TimedOut` naming it at the deadline.
#[test]
fn api_start_tags_and_deadline() {
    use crate::runtime::{Group, ProcSet};
    let g = Group::new(4, ProcSet::Ranks(&[0, 1, 2]), &[2]);
    assert_eq!(
        GroupCreate::start(3, 9, &g, None).err(),
        Some(GroupCreateError::NotInOwnGroup { rank: 3 })
    );
    let (mut m, out) = GroupCreate::start(0, tag_of("t"), &g, Some(100)).unwrap();
    assert_eq!(m.known_failed(), &[2]);
    // Rank 0 is the root; it greets its live child 1 (2 is known dead).
    let sends: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            GcOut::Send { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(sends, vec![1]);
    let (other, _) = GroupCreate::start(1, tag_of("other"), &g, None).unwrap();
    let msg = GcMsg {
        tag: other.tag(),
        view_hash: 0,
        failed: std::sync::Arc::new(vec![]),
        body: Body::Nudge,
    };
    assert!(m.handle(GcIn::Msg { from: 1, msg }).is_empty());
    assert!(m.handle(GcIn::Tick { now_ms: 99 }).is_empty());
    assert_eq!(
        m.handle(GcIn::Tick { now_ms: 100 }),
        vec![GcOut::TimedOut { waiting: vec![1] }]
    );
    assert!(m.is_finished() && m.outcome().is_none());
    // Alone (the others dead): decided at once.
    let (m, out) = GroupCreate::start(1, 5, &g.with_failed(&[0]), None).unwrap();
    let d = m.outcome().unwrap().unwrap();
    assert_eq!((d.group.to_vec(), d.failed.to_vec()), (vec![1], vec![0, 2]));
    assert!(out.iter().any(|o| matches!(o, GcOut::Decided(Ok(_)))));
}

/// The accessors and the string tag's hash (FNV-1a 64, its published vectors): a started
/// machine that has not decided says so, and names its rank and tag.
#[test]
fn accessors_and_the_string_tag_hash() {
    use crate::runtime::{Group, ProcSet};
    assert_eq!(tag_of(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(tag_of("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(tag_of("foobar"), 0x8594_4171_f739_67e8);
    let g = Group::new(4, ProcSet::Ranks(&[0, 1, 2, 3]), &[]);
    let (m, _) = GroupCreate::start(2, tag_of("t"), &g, None).unwrap();
    assert_eq!((m.me(), m.tag()), (2, tag_of("t")));
    assert!(!m.is_finished());
    assert!(m.decision().is_none() && m.outcome().is_none());
    // The simulator's report of a stuck run: rank, root, view sizes, ...
    assert!(
        m.describe().starts_with("rank 2 root 0 U 4 I 4 dead []"),
        "{}",
        m.describe()
    );
}

/// Runs machines for ranks `0..p` (all passing every rank, deadline 100 ms) by hand, delivering
/// every message `keep(from, to, msg)` allows until none is left; returns the machines.
fn drive_by_hand(p: u32, keep: impl Fn(u32, u32, &GcMsg) -> bool) -> Vec<GroupCreate> {
    let all: Vec<u32> = (0..p).collect();
    drive_group_by_hand(p, &all, &[], keep)
}

/// [`drive_by_hand`] for the participants `ranks` of a job of `p`, all passing `ranks`, each
/// told by its detector at the start that `dead` died.
fn drive_group_by_hand(
    p: u32,
    ranks: &[u32],
    dead: &[u32],
    keep: impl Fn(u32, u32, &GcMsg) -> bool,
) -> Vec<GroupCreate> {
    use crate::runtime::{Group, ProcSet};
    let g = Group::new(p, ProcSet::Ranks(ranks), &[]);
    let mut queue = std::collections::VecDeque::new();
    let mut ms: Vec<GroupCreate> = Vec::new();
    for &r in ranks {
        let (mut m, out) = GroupCreate::start(r, 7, &g, Some(100)).unwrap();
        queue.extend(out.into_iter().map(|o| (r, o)));
        for &d in dead {
            let out = m.handle(GcIn::PeerGone { rank: d });
            queue.extend(out.into_iter().map(|o| (r, o)));
        }
        assert!(dead.iter().all(|d| m.known_failed().contains(d)));
        ms.push(m);
    }
    while let Some((from, o)) = queue.pop_front() {
        if let GcOut::Send { to, msg } = o {
            let Some(at) = ranks.iter().position(|&r| r == to) else {
                continue;
            };
            if keep(from, to, &msg) {
                let out = ms[at].handle(GcIn::Msg { from, msg });
                queue.extend(out.into_iter().map(|o| (to, o)));
            }
        }
    }
    ms
}

/// The decision's failed set holds dead participants only: a dead process of the job that no
/// group names is not among them.
#[test]
fn the_failed_set_names_dead_participants_only() {
    let ms = drive_group_by_hand(5, &[0, 1, 3], &[2, 4], |_, _, _| true);
    for m in &ms {
        let d = m.outcome().expect("decided").expect("a member");
        assert_eq!(
            (d.group.to_vec(), d.failed.to_vec()),
            (vec![0, 1, 3], vec![])
        );
    }
}

/// Times `m` out; whom it names. `waiting_for` (what a driver probes) named the same before,
/// and names nobody once the machine has finished.
fn timed_out_waiting(m: &mut GroupCreate) -> Vec<u32> {
    assert!(!m.is_finished());
    let before = m.waiting_for();
    let waiting = match m.handle(GcIn::Tick { now_ms: 100 }).as_slice() {
        [GcOut::TimedOut { waiting }] => waiting.clone(),
        other => panic!("rank {}: {other:?}", m.me()),
    };
    assert_eq!(before, waiting, "rank {}: probed and named differ", m.me());
    assert!(m.waiting_for().is_empty(), "a timed-out machine waits");
    waiting
}

/// Whom a timed-out process names: in the tree, its parent and the children that have not
/// reported; a root with a proposal out, the live participants that have not acknowledged it.
/// (Binomial tree of 4: 0 -> 1, 2; 2 -> 3.)
#[test]
fn a_timeout_names_whom_it_waits_for() {
    // Rank 3 silent (nothing to or from it): 2 waits for its child 3 and its parent 0; the
    // root for 2 (1 has reported).
    let mut ms = drive_by_hand(4, |from, to, _| from != 3 && to != 3);
    assert_eq!(timed_out_waiting(&mut ms[2]), vec![0, 3]);
    assert_eq!(timed_out_waiting(&mut ms[0]), vec![2]);
    // Only 3's acknowledgement lost: the root waits for 3 alone.
    let mut ms = drive_by_hand(4, |from, _, m| !(from == 3 && m.kind() == "ack"));
    assert!(ms[0].decision().is_none());
    assert_eq!(timed_out_waiting(&mut ms[0]), vec![3]);
    // Without losses, everyone decides the whole group.
    let ms = drive_by_hand(4, |_, _, _| true);
    for m in &ms {
        assert!(m.is_finished());
        assert!(m.waiting_for().is_empty(), "a decided machine waits");
        assert_eq!(
            m.outcome().unwrap().unwrap().group.to_vec(),
            vec![0, 1, 2, 3]
        );
    }
}

/// A report that reaches a process past its gather (it holds a proposal) is answered with the
/// proposal; one naming a dead root with a nudge.
#[test]
fn a_late_report_gets_the_proposal() {
    // 3's acknowledgement lost: the root holds its proposal, undecided.
    let mut ms = drive_by_hand(4, |from, _, m| !(from == 3 && m.kind() == "ack"));
    let (hash, prop) = (ms[0].view().hash(), ms[0].decision().cloned());
    assert!(prop.is_none());
    let up = |root| GcMsg {
        tag: 7,
        view_hash: hash,
        failed: std::sync::Arc::new(vec![]),
        body: Body::Up {
            root,
            max_term: 0,
            acked: None,
        },
    };
    let out = ms[0].handle(GcIn::Msg {
        from: 1,
        msg: up(0),
    });
    assert!(
        matches!(
            out.as_slice(),
            [GcOut::Send { to: 1, msg: GcMsg { body: Body::Propose { value, .. }, .. } }]
                if value.group().to_vec() == vec![0, 1, 2, 3]
        ),
        "{out:?}"
    );
    // A report to root 0 reaching 2 after 0 died: a nudge (and 2's own moves).
    ms[2].handle(GcIn::PeerGone { rank: 0 });
    let out = ms[2].handle(GcIn::Msg {
        from: 3,
        msg: up(0),
    });
    assert!(
        out.iter()
            .any(|o| matches!(o, GcOut::Send { to: 3, msg } if msg.kind() == "nudge")),
        "{out:?}"
    );
}

/// Four processes passing every rank, 3's acknowledgement lost: nobody decides, root 0 holds
/// its proposal and 2 the one it passed to 3. The machines, and root 0's proposal to 2.
fn run_with_3s_ack_lost() -> (Vec<GroupCreate>, GcMsg) {
    let seen = std::cell::RefCell::new(None);
    let ms = drive_by_hand(4, |from, to, m| {
        if (from, to, m.kind()) == (0, 2, "propose") {
            *seen.borrow_mut() = Some(m.clone());
        }
        !(from == 3 && m.kind() == "ack")
    });
    (ms, seen.into_inner().expect("0 proposed to 2"))
}

/// The ballot of a proposal.
fn ballot_of(m: &GcMsg) -> Ballot {
    match m.body {
        Body::Propose { ballot, .. } => ballot,
        _ => panic!("not a proposal: {m:?}"),
    }
}

/// A proposal received again (the same ballot) is acknowledged again and not passed down the
/// tree a second time.
#[test]
fn a_repeated_proposal_is_acknowledged_not_forwarded_again() {
    let (mut ms, propose) = run_with_3s_ack_lost();
    let out = ms[2].handle(GcIn::Msg {
        from: 0,
        msg: propose,
    });
    assert!(
        matches!(out.as_slice(), [GcOut::Send { to: 0, msg }] if msg.kind() == "ack"),
        "{out:?}"
    );
}

/// Delivers the queued sends, and those they cause, to the ranks below `live` (the others
/// are dead: their messages are dropped), each message shown to `see` first; fails after
/// `limit` deliveries (no end).
fn deliver_below(
    ms: &mut [GroupCreate],
    mut queue: std::collections::VecDeque<(u32, GcOut)>,
    live: u32,
    limit: usize,
    mut see: impl FnMut(&GcMsg),
) {
    let mut delivered = 0;
    while let Some((from, o)) = queue.pop_front() {
        if let GcOut::Send { to, msg } = o {
            see(&msg);
            if to < live {
                delivered += 1;
                assert!(delivered < limit, "no end");
                let out = ms[to as usize].handle(GcIn::Msg { from, msg });
                queue.extend(out.into_iter().map(|o| (to, o)));
            }
        }
    }
}

/// A death found inside the agreement leaves the proposal standing: no new attempt, the
/// acknowledgements of the others decide it, and the process that died after the proposal is
/// in the decided group (the next operation finds it dead).
#[test]
fn a_death_inside_the_agreement_keeps_the_value_and_its_acks() {
    let (mut ms, propose) = run_with_3s_ack_lost();
    let ballot = ballot_of(&propose);
    let mut queue: std::collections::VecDeque<(u32, GcOut)> = std::collections::VecDeque::new();
    for r in 0..3u32 {
        let out = ms[r as usize].handle(GcIn::PeerGone { rank: 3 });
        assert!(
            !out.iter().any(|o| matches!(
                o,
                GcOut::Send {
                    msg: GcMsg {
                        body: Body::Propose { .. },
                        ..
                    },
                    ..
                }
            )),
            "rank {r} proposed again: {out:?}"
        );
        queue.extend(out.into_iter().map(|o| (r, o)));
    }
    assert!(ms[0].is_finished(), "the root decided on the acks it had");
    deliver_below(&mut ms, queue, 3, 200, |msg| {
        if let Body::Commit { value, .. } = &msg.body {
            assert_eq!(*value.failed, Vec::<u32>::new(), "the proposal's value");
        }
    });
    for m in &ms[..3] {
        let d = m.outcome().expect("decided").expect("a member");
        assert_eq!(
            (d.group.to_vec(), d.failed.to_vec()),
            (vec![0, 1, 2, 3], vec![]),
            "ballot {ballot:?}"
        );
    }
}

/// A view that grows inside the agreement (a participant names a process the root never
/// heard of) makes a new attempt, a higher ballot the others accept over the old one;
/// acknowledgements of the old attempt do not count for the new one (they get the new
/// proposal); all four decide the new view's value.
#[test]
fn a_new_attempt_is_accepted_over_the_old_and_old_acks_do_not_count() {
    let (mut ms, propose) = run_with_3s_ack_lost();
    let old = ballot_of(&propose);
    let mut queue: std::collections::VecDeque<(u32, GcOut)> = std::collections::VecDeque::new();
    // Rank 4, named by 3's view alone, never calls: every detector knows it dead.
    for r in 0..4u32 {
        let out = ms[r as usize].handle(GcIn::PeerGone { rank: 4 });
        queue.extend(out.into_iter().map(|o| (r, o)));
    }
    // Rank 3's view names 4: the root's view grows.
    let grown = plain_view(&[0, 1, 2, 3, 4]);
    let out = ms[0].handle(msg_from(
        3,
        grown.hash(),
        Body::Full {
            view: grown,
            reply: false,
        },
    ));
    let new = out
        .iter()
        .find_map(|o| match o {
            GcOut::Send { to: 1, msg } => Some(ballot_of(msg)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no new proposal to 1: {out:?}"));
    assert!(new > old, "{new:?} after {old:?}");
    queue.extend(out.into_iter().map(|o| (0, o)));
    // Old acknowledgements reaching the root after its new attempt: answered with the new
    // proposal, not counted.
    for from in [1u32, 2] {
        let view_hash = ms[0].view().hash();
        let out = ms[0].handle(GcIn::Msg {
            from,
            msg: GcMsg {
                tag: 7,
                view_hash,
                failed: std::sync::Arc::new(vec![4]),
                body: Body::Ack { ballot: old },
            },
        });
        assert!(!ms[0].is_finished(), "an old ack counted");
        assert!(
            out.iter().any(|o| matches!(o, GcOut::Send { to, msg: GcMsg { body: Body::Propose { ballot, .. }, .. } } if *to == from && *ballot == new)),
            "{out:?}"
        );
        queue.extend(out.into_iter().map(|o| (0, o)));
    }
    deliver_below(&mut ms, queue, 4, 400, |_| {});
    for m in &ms[..4] {
        let d = m.outcome().expect("decided").expect("a member");
        assert_eq!(
            (d.group.to_vec(), d.failed.to_vec(), d.participants.to_vec()),
            (vec![0, 1, 2, 3], vec![4], vec![0, 1, 2, 3, 4])
        );
    }
}

/// A view of the given members, all of whom passed every one of them (I = U).
fn plain_view(members: &[u32]) -> View {
    let m = std::sync::Arc::new(members.to_vec());
    View::new(m.clone(), m, std::sync::Arc::new(vec![]))
}

/// Root 0's proposal `ballot` of `members` (its own view when `fresh`), as rank 0 sends it.
fn propose_from_0(ballot: Ballot, fresh: bool, members: &[u32]) -> GcIn {
    let view = plain_view(members);
    let hash = view.hash();
    let value = Value::new(view, std::sync::Arc::new(vec![]), 0);
    msg_from(
        0,
        hash,
        Body::Propose {
            ballot,
            fresh,
            value,
        },
    )
}

/// A message of operation 7 from `from`, with view hash `view_hash` and no failures.
fn msg_from(from: u32, view_hash: u64, body: Body) -> GcIn {
    GcIn::Msg {
        from,
        msg: GcMsg {
            tag: 7,
            view_hash,
            failed: std::sync::Arc::new(vec![]),
            body,
        },
    }
}

/// A root's own (fresh) value that lacks a participant I know is refused, answered with my
/// whole view, even after I accepted an earlier proposal; the very proposal I accepted, sent
/// again after my view grew, is acknowledged again (idempotent).
#[test]
fn a_fresh_value_lacking_a_participant_i_know_is_refused_whatever_i_accepted() {
    use crate::runtime::{Group, ProcSet};
    let g = Group::new(4, ProcSet::Ranks(&[0, 1, 2]), &[]);
    let (mut m, _) = GroupCreate::start(1, 7, &g, Some(100)).unwrap();
    let kinds = |out: &[GcOut]| -> Vec<(u32, &'static str)> {
        out.iter()
            .filter_map(|o| match o {
                // A refusal is my view unasked ("full"); a question about theirs asks back.
                GcOut::Send {
                    to,
                    msg:
                        GcMsg {
                            body: Body::Full { reply: true, .. },
                            ..
                        },
                } => Some((*to, "full?")),
                GcOut::Send { to, msg } => Some((*to, msg.kind())),
                _ => None,
            })
            .collect()
    };
    // Root 0's own value of my group: accepted.
    let out = m.handle(propose_from_0((1, 0, 0), true, &[0, 1, 2]));
    assert!(kinds(&out).contains(&(0, "ack")), "{out:?}");
    // A later attempt of it (higher ballot) lacking 2, whom I know: refused with my view.
    let out = m.handle(propose_from_0((1, 0, 1), true, &[0, 1]));
    let k = kinds(&out);
    assert!(k.contains(&(0, "full")), "{out:?}");
    assert!(
        !k.contains(&(0, "ack")),
        "accepted a value lacking 2: {out:?}"
    );
    // My view grows (2 knows 3); the proposal I accepted comes again: acknowledged again.
    let full = plain_view(&[0, 1, 2, 3]);
    let hash = full.hash();
    m.handle(msg_from(
        2,
        hash,
        Body::Full {
            view: full,
            reply: false,
        },
    ));
    assert_eq!(*m.view().members, vec![0, 1, 2, 3]);
    let out = m.handle(propose_from_0((1, 0, 0), true, &[0, 1, 2]));
    let k = kinds(&out);
    assert!(k.contains(&(0, "ack")), "{out:?}");
    assert!(
        !k.contains(&(0, "full")),
        "refused the proposal it accepted: {out:?}"
    );
}

/// An acknowledgement that reaches a process which is not the root of its ballot: nothing in
/// answer while that root lives (no proposal, no nudge); a nudge once that root is dead.
#[test]
fn a_stray_ack_gets_nothing_while_its_root_lives_and_a_nudge_once_it_died() {
    // 3's acknowledgement lost: 2 holds root 0's proposal (it passed it to 3).
    let (mut ms, propose) = run_with_3s_ack_lost();
    let ballot = ballot_of(&propose);
    let ack = |m: &GroupCreate| msg_in_view(m, 3, Body::Ack { ballot });
    assert!(!ms[2].is_finished());
    let a = ack(&ms[2]);
    let out = ms[2].handle(a);
    assert!(
        out.is_empty(),
        "answered a stray ack of a live root: {out:?}"
    );
    // Root 0 dies: the same ack now gets a nudge (its root is gone).
    ms[2].handle(GcIn::PeerGone { rank: 0 });
    let a = ack(&ms[2]);
    let out = ms[2].handle(a);
    assert!(
        out.iter()
            .any(|o| matches!(o, GcOut::Send { to: 3, msg } if msg.kind() == "nudge")),
        "{out:?}"
    );
}

/// A message of operation 7 from `from` carrying `m`'s own view hash and no failures.
fn msg_in_view(m: &GroupCreate, from: u32, body: Body) -> GcIn {
    msg_from(from, m.view().hash(), body)
}

/// A root that holds its proposal and gets an acknowledgement of another live root's ballot
/// answers nothing (its proposal goes only to acknowledgements of its own older attempts).
#[test]
fn a_root_answers_nothing_to_an_ack_of_another_live_roots_ballot() {
    let mut ms = drive_by_hand(4, |from, _, m| !(from == 3 && m.kind() == "ack"));
    assert!(!ms[0].is_finished());
    let ack = msg_in_view(&ms[0], 3, Body::Ack { ballot: (9, 1, 0) });
    let out = ms[0].handle(ack);
    assert!(
        out.is_empty(),
        "answered an ack of root 1's ballot: {out:?}"
    );
}

/// A process that adopts its root's decision made without some of the processes its own
/// group names passes the decision to them (they may be waiting for it), the dead excepted.
#[test]
fn a_decision_goes_to_my_groups_members_outside_it_but_the_dead() {
    use crate::runtime::{Group, ProcSet};
    let g = Group::new(5, ProcSet::Ranks(&[0, 1, 2, 3, 4]), &[]);
    let (mut m, _) = GroupCreate::start(1, 7, &g, Some(100)).unwrap();
    m.handle(GcIn::PeerGone { rank: 4 });
    // Root 0's decision of {0, 1} (its group lacked 2, 3 and 4).
    let view = plain_view(&[0, 1]);
    let hash = view.hash();
    let value = Value::new(view, std::sync::Arc::new(vec![]), 0);
    let out = m.handle(msg_from(0, hash, Body::Commit { by: 0, value }));
    let d = m.outcome().expect("decided").expect("a member");
    assert_eq!(d.group.to_vec(), vec![0, 1]);
    let mut commits: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            GcOut::Send { to, msg } if msg.kind() == "commit" => Some(*to),
            _ => None,
        })
        .collect();
    commits.sort_unstable();
    assert_eq!(commits, vec![2, 3], "{out:?}");
}

/// A root that learns that a participant accepted a higher ballot than its proposal's starts
/// again above it, re-proposing that accepted value unchanged (not fresh) to every live
/// participant.
#[test]
fn a_root_restarts_above_a_higher_accepted_ballot_with_its_value() {
    let mut ms = drive_by_hand(3, |from, _, m| !(from == 2 && m.kind() == "ack"));
    assert!(!ms[0].is_finished());
    let accepted = Value::new(plain_view(&[0, 1, 2]), std::sync::Arc::new(vec![]), 2);
    let up = Body::Up {
        root: 0,
        max_term: 5,
        acked: Some(((5, 2, 0), accepted.clone())),
    };
    let up = msg_in_view(&ms[0], 1, up);
    let out = ms[0].handle(up);
    for to in [1u32, 2] {
        assert!(
            out.iter().any(|o| matches!(o,
                GcOut::Send { to: t, msg: GcMsg { body: Body::Propose { ballot, fresh: false, value }, .. } }
                    if *t == to && *ballot > (5, 2, 0) && ballot.1 == 0 && *value == accepted)),
            "no restart above (5, 2, 0) to {to}: {out:?}"
        );
    }
}

/// The sorted union and intersection that views merge with.
#[test]
fn union_and_intersection_of_ascending_lists() {
    use super::{intersection, union};
    type Case<'a> = (&'a [u32], &'a [u32], &'a [u32], &'a [u32]);
    let cases: [Case; 6] = [
        (&[], &[], &[], &[]),
        (&[1, 3], &[], &[1, 3], &[]),
        (&[], &[2], &[2], &[]),
        (&[0, 2, 4], &[1, 2, 5, 6], &[0, 1, 2, 4, 5, 6], &[2]),
        (&[5, 7], &[1, 2, 3], &[1, 2, 3, 5, 7], &[]),
        (&[1, 2, 3], &[1, 2, 3], &[1, 2, 3], &[1, 2, 3]),
    ];
    for (a, b, u, i) in cases {
        assert_eq!(union(a, b), u, "union of {a:?} and {b:?}");
        assert_eq!(union(b, a), u, "union of {b:?} and {a:?}");
        assert_eq!(intersection(a, b), i, "intersection of {a:?} and {b:?}");
    }
}
