//! Unit tests of the resilient fence machine (sans-IO: driven by hand, no runtime).

use super::*;

fn machine(me: u32, n: u32, failed: &[u32]) -> ResilientFence {
    let members: Vec<u32> = (0..n).map(|i| i * 10).collect();
    ResilientFence::start(me, 1, &members, failed, Vec::new(), None).0
}

#[test]
fn binomial_tree_is_consistent_and_shallow() {
    for n in 1..300usize {
        let mut seen = vec![false; n];
        seen[0] = true;
        for i in 0..n {
            for c in tree_children(i, n) {
                assert_eq!(tree_parent(c), i);
                assert!(!seen[c]);
                seen[c] = true;
            }
            assert!((i as u32).count_ones() <= usize::BITS - n.leading_zeros());
        }
        assert!(seen.iter().all(|s| *s), "n={n}");
    }
}

#[test]
fn wire_round_trip_and_every_prefix_is_rejected() {
    for m in example_messages() {
        let b = m.encode();
        assert_eq!(ResMsg::decode(&b), Ok(m.clone()));
        for n in 0..b.len() {
            assert!(
                matches!(ResMsg::decode(&b[..n]), Err(WireError::Truncated { .. })),
                "{} prefix of {n} bytes",
                m.kind()
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(ResMsg::decode(&long), Err(WireError::Trailing { len: 1 }));
    }
}

#[test]
fn wire_byte_order_is_little_endian() {
    let m = ResMsg {
        epoch: 0x0102_0304_0506_0708,
        view: View {
            hash: view_hash(&[]),
            failed: Arc::new(vec![]),
        },
        body: Body::Ack {
            ballot: (0x0a0b_0c0d, 1),
        },
    };
    let mut want = vec![tag::ACK, 8, 7, 6, 5, 4, 3, 2, 1];
    want.extend_from_slice(&view_hash(&[]).to_le_bytes());
    want.extend_from_slice(&[0, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a, 1, 0, 0, 0]);
    assert_eq!(m.encode(), want);
}

#[test]
fn wire_rejects_bad_tags_flags_views_and_order() {
    let good = example_messages();
    for t in [0u8, 1, 2, 3, 0x10, 0x18, 0xff] {
        let mut b = good[3].encode();
        b[0] = t;
        assert_eq!(ResMsg::decode(&b), Err(WireError::UnknownTag { tag: t }));
    }
    // A view hash that does not match its failed set.
    let mut b = good[0].encode();
    b[9] ^= 1;
    assert!(matches!(
        ResMsg::decode(&b),
        Err(WireError::Invalid {
            what: "view hash",
            ..
        })
    ));
    // Failed ranks out of order (2, 9 -> 9, 2), with the hash of the forged order.
    let mut b = good[0].encode();
    b[21..25].copy_from_slice(&9u32.to_le_bytes());
    b[25..29].copy_from_slice(&2u32.to_le_bytes());
    b[9..17].copy_from_slice(&view_hash(&[9, 2]).to_le_bytes());
    assert!(matches!(
        ResMsg::decode(&b),
        Err(WireError::Invalid {
            what: "failed rank",
            ..
        })
    ));
    // An acked flag other than 0 or 1 (the last byte of an Up without acked).
    let mut b = good[0].encode();
    *b.last_mut().unwrap() = 2;
    assert!(matches!(
        ResMsg::decode(&b),
        Err(WireError::BadValue {
            what: "acked flag",
            value: 2,
            ..
        })
    ));
    // A forged count cannot make the decoder allocate past the input.
    let mut b = vec![tag::COMMIT];
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&view_hash(&[]).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        ResMsg::decode(&b),
        Err(WireError::Truncated { .. })
    ));
}

proptest::proptest! {
    /// Any bytes: a typed error or a message, never a panic; and the encoding is
    /// canonical (what decodes re-encodes to the same bytes).
    #[test]
    fn wire_decoder_is_total_and_canonical(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
    ) {
        if let Ok(m) = ResMsg::decode(&bytes) {
            proptest::prop_assert_eq!(m.encode(), bytes);
        }
    }

    /// Valid messages with one byte changed or cut short: the same.
    #[test]
    fn wire_mutations_are_rejected_or_canonical(
        which in 0usize..6,
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
        if let Ok(m) = ResMsg::decode(&b) {
            proptest::prop_assert_eq!(m.encode(), b);
        }
    }
}

#[test]
fn a_dead_child_is_replaced_by_its_children() {
    // Ranks are index * 10; index 4's children are 5 and 6.
    let m = machine(0, 8, &[40]);
    assert_eq!(m.eff_children(), vec![10, 20, 50, 60]);
    let m = machine(50, 8, &[40]);
    assert_eq!(m.eff_parent(), Some(0));
}

#[test]
fn a_dead_root_makes_the_lowest_live_member_root_and_adopt_the_orphans() {
    let m = machine(10, 8, &[0]);
    assert_eq!(m.eff_parent(), None);
    assert_eq!(m.eff_children(), vec![20, 40]);
    let m = machine(20, 8, &[0]);
    assert_eq!(m.eff_parent(), Some(10));
    let m = machine(30, 8, &[0, 20]);
    assert_eq!(m.eff_parent(), Some(10));
}

#[test]
fn a_lone_member_decides_at_once() {
    let (m, outs) = ResilientFence::start(3, 1, &[3], &[], Vec::new(), None);
    assert!(m.is_finished());
    assert!(matches!(&outs[..], [ResOut::Done { failed, .. }] if failed.is_empty()));
}

#[test]
fn a_mismatched_view_is_merged_and_the_tree_rebuilt() {
    let mut m = machine(50, 8, &[]);
    assert_eq!(m.eff_parent(), Some(40));
    let failed = Arc::new(vec![40]);
    let msg = ResMsg {
        epoch: 1,
        view: View {
            hash: view_hash(&failed),
            failed,
        },
        body: Body::Nudge,
    };
    let outs = m.handle(ResIn::Msg { from: 0, msg });
    assert_eq!(m.known_failed(), &[40]);
    // The leaf re-sends its report to its new parent.
    assert!(
        outs.iter()
            .any(|o| matches!(o, ResOut::Send { to: 0, msg } if msg.kind() == "up")),
        "{outs:?}"
    );
}

#[test]
fn a_decided_member_answers_anything_with_the_decision() {
    let (mut m, _) = ResilientFence::start(0, 1, &[0], &[], Vec::new(), None);
    let outs = m.handle(ResIn::Msg {
        from: 7,
        msg: ResMsg {
            epoch: 1,
            view: View {
                hash: view_hash(&[]),
                failed: Arc::new(vec![]),
            },
            body: Body::Ack { ballot: (0, 0) },
        },
    });
    assert!(matches!(&outs[..], [ResOut::Send { to: 7, msg }] if msg.kind() == "commit"));
}

#[test]
fn the_deadline_gives_up_naming_who_is_missing() {
    let members = [0, 1, 2];
    let (mut m, _) = ResilientFence::start(0, 1, &members, &[], Vec::new(), Some(100));
    assert!(m.handle(ResIn::Tick { now_ms: 99 }).is_empty());
    let outs = m.handle(ResIn::Tick { now_ms: 100 });
    assert_eq!(
        outs,
        vec![ResOut::TimedOut {
            waiting: vec![1, 2]
        }]
    );
}

/// A message of fence epoch 1 with the sender's view `failed`.
fn msg(failed: &[u32], body: Body) -> ResMsg {
    ResMsg {
        epoch: 1,
        view: View {
            hash: view_hash(failed),
            failed: Arc::new(failed.to_vec()),
        },
        body,
    }
}

/// The simulator's contributions of `ranks` (one entry each, distinct per rank).
fn data_of(ranks: &[u32]) -> Gathered {
    ranks
        .iter()
        .map(|&r| (r, crate::runtime::sim_support::contribution(r)))
        .collect()
}

fn decision(failed: &[u32], ranks: &[u32]) -> Decision {
    Decision {
        failed: Arc::new(failed.to_vec()),
        data: Arc::new(data_of(ranks)),
    }
}

/// The proposals `outs` sends, as (to, ballot, value).
fn proposals(outs: &[ResOut]) -> Vec<(u32, Ballot, Decision)> {
    outs.iter()
        .filter_map(|o| match o {
            ResOut::Send {
                to,
                msg:
                    ResMsg {
                        body: Body::Propose { ballot, value },
                        ..
                    },
            } => Some((*to, *ballot, value.clone())),
            _ => None,
        })
        .collect()
}

/// Rank 10 becomes root of 0, 10, ..., 70 once 0 is dead; 0's children 20 and 40 hang below it.
fn new_root(own_ack: Option<Decision>) -> ResilientFence {
    let members: Vec<u32> = (0..8).map(|i| i * 10).collect();
    let (mut m, outs) = ResilientFence::start(
        10,
        1,
        &members,
        &[],
        crate::runtime::sim_support::contribution(10),
        None,
    );
    // A leaf: it reports to root 0 at once.
    assert!(
        matches!(&outs[..], [ResOut::Send { to: 0, msg }] if msg.kind() == "up"),
        "{outs:?}"
    );
    if let Some(value) = own_ack {
        // Root 0's proposal reaches 10: it acknowledges at once.
        let outs = m.handle(ResIn::Msg {
            from: 0,
            msg: msg(
                &[],
                Body::Propose {
                    ballot: (0, 0),
                    value,
                },
            ),
        });
        assert!(
            matches!(&outs[..], [ResOut::Send { to: 0, msg }] if msg.kind() == "ack"),
            "{outs:?}"
        );
    }
    assert!(m.handle(ResIn::PeerGone { rank: 0 }).is_empty());
    assert_eq!(m.eff_parent(), None);
    assert_eq!(m.eff_children(), vec![20, 40]);
    m
}

fn report(m: &mut ResilientFence, from: u32, acked: Option<(Ballot, Decision)>) -> Vec<ResOut> {
    let sub: &[u32] = if from == 20 {
        &[20, 30]
    } else {
        &[40, 50, 60, 70]
    };
    m.handle(ResIn::Msg {
        from,
        msg: msg(
            &[0],
            Body::Up {
                root: 10,
                data: data_of(sub),
                acked,
            },
        ),
    })
}

/// The Paxos rule of phase 2: a new root re-proposes, unchanged, the highest proposal that it
/// or any member reporting to it acknowledged (it may be decided somewhere already), and
/// proposes afresh only when nobody acknowledged one. Deleting the reporters' part of the rule
/// (`note_acked` of an `Up`'s `acked`) passed every other test.
#[test]
fn a_new_root_re_proposes_the_highest_acknowledged_proposal_unchanged() {
    // (0, 0): everyone alive, root 0's first value; (0, 1): root 0 learned that 30 died.
    let first = decision(&[], &[0, 10, 20, 30, 40, 50, 60, 70]);
    let second = decision(&[30], &[0, 10, 20, 40, 50, 60, 70]);
    let fresh = decision(&[0], &[10, 20, 30, 40, 50, 60, 70]);
    let cases = [
        // Nobody acknowledged anything: a fresh value from the new root's view.
        (None, None, None, fresh.clone()),
        // Only a reporter did (10 never got root 0's proposal).
        (None, Some(((0, 0), first.clone())), None, first.clone()),
        (None, None, Some(((0, 1), second.clone())), second.clone()),
        // The root's own acknowledgement is lower than a reporter's: the highest wins.
        (
            Some(first.clone()),
            Some(((0, 1), second.clone())),
            None,
            second.clone(),
        ),
        // Two reporters, the higher one second and first.
        (
            None,
            Some(((0, 0), first.clone())),
            Some(((0, 1), second.clone())),
            second.clone(),
        ),
        (
            None,
            Some(((0, 1), second.clone())),
            Some(((0, 0), first.clone())),
            second.clone(),
        ),
        // The root's own is the highest.
        (Some(first.clone()), None, None, first.clone()),
    ];
    for (i, (own, from20, from40, want)) in cases.into_iter().enumerate() {
        let mut m = new_root(own);
        assert!(
            proposals(&report(&mut m, 20, from20)).is_empty(),
            "case {i}"
        );
        let outs = report(&mut m, 40, from40);
        assert_eq!(
            proposals(&outs),
            vec![(20, (10, 0), want.clone()), (40, (10, 0), want.clone())],
            "case {i}"
        );
    }
}

/// The sends of `outs` as (to, kind).
fn sends(outs: &[ResOut]) -> Vec<(u32, &'static str)> {
    outs.iter()
        .filter_map(|o| match o {
            ResOut::Send { to, msg } => Some((*to, msg.kind())),
            _ => None,
        })
        .collect()
}

fn from(m: &mut ResilientFence, sender: u32, failed: &[u32], body: Body) -> Vec<ResOut> {
    m.handle(ResIn::Msg {
        from: sender,
        msg: msg(failed, body),
    })
}

#[test]
fn the_view_hash_is_fnv_1a_over_little_endian_ranks() {
    // Computed independently (FNV-1a 64 over the ranks' 4 little-endian bytes each).
    assert_eq!(view_hash(&[]), 0xcbf2_9ce4_8422_2325);
    assert_eq!(view_hash(&[0]), 0x4d25_767f_9dce_13f5);
    assert_eq!(view_hash(&[1]), 0xad2a_ca77_4798_5764);
    assert_eq!(view_hash(&[2, 9]), 0x4698_3a7e_9970_f5fe);
    assert_eq!(view_hash(&[9, 2]), 0xc198_c182_2110_b9ce);
}

#[test]
fn the_accessors_report_what_the_machine_was_started_with_and_reached() {
    let (m, _) = ResilientFence::start(3, 7, &[5, 3, 4], &[5], Vec::new(), None);
    assert_eq!((m.me(), m.epoch(), m.known_failed()), (3, 7, &[5][..]));
    assert!(!m.is_finished());
    assert_eq!(m.decision(), None);
    let (m, _) = ResilientFence::start(
        3,
        7,
        &[3],
        &[],
        crate::runtime::sim_support::contribution(3),
        None,
    );
    assert!(m.is_finished());
    assert_eq!(m.decision(), Some(&decision(&[], &[3])));
}

#[test]
fn the_deadline_fires_once_only_undecided_and_names_only_the_silent() {
    // Root 0 of 0, 1, 2: 1 reported, 2 did not.
    let (mut m, _) = ResilientFence::start(0, 1, &[0, 1, 2], &[], Vec::new(), Some(100));
    let up = Body::Up {
        root: 0,
        data: data_of(&[1]),
        acked: None,
    };
    assert!(from(&mut m, 1, &[], up).is_empty());
    assert!(!m.is_finished());
    assert_eq!(
        m.handle(ResIn::Tick { now_ms: 100 }),
        vec![ResOut::TimedOut { waiting: vec![2] }]
    );
    assert!(m.is_finished());
    assert_eq!(m.decision(), None);
    assert!(m.handle(ResIn::Tick { now_ms: 200 }).is_empty());
    // A member waiting for its parent names the parent.
    let (mut m, _) = ResilientFence::start(2, 1, &[0, 1, 2], &[], Vec::new(), Some(100));
    assert_eq!(
        m.handle(ResIn::Tick { now_ms: 100 }),
        vec![ResOut::TimedOut { waiting: vec![0] }]
    );
    // Decided, a deadline means nothing.
    let (mut m, _) = ResilientFence::start(2, 1, &[2], &[], Vec::new(), Some(100));
    assert!(m.handle(ResIn::Tick { now_ms: 100 }).is_empty());
    assert!(m.decision().is_some());
}

/// A `Nudge` (just the view) answers a message of a dead root, and nothing else.
#[test]
fn messages_of_a_dead_root_are_answered_with_a_nudge() {
    // 0 is dead: 10 is root and 20's parent.
    let mut m = machine(20, 8, &[0]);
    let stale_up = Body::Up {
        root: 0,
        data: data_of(&[30]),
        acked: None,
    };
    assert_eq!(sends(&from(&mut m, 30, &[], stale_up)), vec![(30, "nudge")]);
    let stale_prop = Body::Propose {
        ballot: (0, 0),
        value: decision(&[], &[0]),
    };
    assert_eq!(sends(&from(&mut m, 0, &[], stale_prop)), vec![(0, "nudge")]);
    let stale_ack = Body::Accepted { ballot: (0, 0) };
    assert_eq!(
        sends(&from(&mut m, 30, &[], stale_ack)),
        vec![(30, "nudge")]
    );
    // An ack for the live root before its proposal got here: nothing to say.
    assert!(from(&mut m, 30, &[0], Body::Accepted { ballot: (10, 0) }).is_empty());
    // The earlier protocol's tree ack is not answered at all, stale or not.
    assert!(from(&mut m, 30, &[], Body::Ack { ballot: (0, 0) }).is_empty());
    // Not a stale message: a Propose of the live root is taken, forwarded to child 30 and
    // accepted straight to the root.
    let prop = Body::Propose {
        ballot: (10, 0),
        value: decision(&[0], &[10, 20, 30]),
    };
    assert_eq!(
        sends(&from(&mut m, 10, &[0], prop)),
        vec![(30, "propose"), (10, "ack")]
    );
    // With a proposal in hand, a stale ack still gets a nudge, not the proposal.
    let stale_ack = Body::Accepted { ballot: (0, 0) };
    assert_eq!(
        sends(&from(&mut m, 30, &[], stale_ack)),
        vec![(30, "nudge")]
    );
}

/// A member accepts its root's proposal at once and says so straight to the root (not to its
/// parent); a proposal seen again (from an adopting grandparent, say) changes nothing; a newer
/// attempt replaces it, is forwarded and accepted again; an older one arriving late is not taken.
#[test]
fn a_proposal_is_accepted_straight_to_the_root_and_a_repeat_changes_nothing() {
    // 20's parent is 0 (the root), its child 30.
    let mut m = machine(20, 8, &[]);
    let value = decision(&[], &[0, 10, 20, 30, 40, 50, 60, 70]);
    let prop = |ballot| Body::Propose {
        ballot,
        value: value.clone(),
    };
    assert_eq!(
        sends(&from(&mut m, 0, &[], prop((0, 0)))),
        vec![(30, "propose"), (0, "ack")]
    );
    // A repeat, from anyone: nothing to send.
    assert!(from(&mut m, 10, &[], prop((0, 0))).is_empty());
    assert!(from(&mut m, 0, &[], prop((0, 0))).is_empty());
    // A newer attempt: forwarded again, accepted again.
    assert_eq!(
        sends(&from(&mut m, 0, &[], prop((0, 1)))),
        vec![(30, "propose"), (0, "ack")]
    );
    // An older attempt arriving late is not taken.
    assert!(from(&mut m, 0, &[], prop((0, 0))).is_empty());
    // A leaf two levels down (30, parent 20) accepts to the root 0, not to 20.
    let mut m = machine(30, 8, &[]);
    let outs = from(&mut m, 20, &[], prop((0, 0)));
    assert_eq!(sends(&outs), vec![(0, "ack")]);
    let ResOut::Send { msg, .. } = &outs[0] else {
        unreachable!()
    };
    assert_eq!(msg.body, Body::Accepted { ballot: (0, 0) });
    // Waiting now for the root's commit: the deadline names the root.
    let (mut m, _) = ResilientFence::start(30, 1, &[0, 10, 20, 30], &[], Vec::new(), Some(5));
    from(&mut m, 20, &[], prop((0, 0)));
    assert_eq!(
        m.handle(ResIn::Tick { now_ms: 5 }),
        vec![ResOut::TimedOut { waiting: vec![0] }]
    );
}

/// Root 0 of 0, 10, 20, 30 with both reports in: it proposes (0, 0) with nobody failed.
fn proposing_root() -> ResilientFence {
    let mine = crate::runtime::sim_support::contribution(0);
    let (mut m, _) = ResilientFence::start(0, 1, &[0, 10, 20, 30], &[], mine, None);
    let up = |ranks: &[u32]| Body::Up {
        root: 0,
        data: data_of(ranks),
        acked: None,
    };
    assert!(from(&mut m, 10, &[], up(&[10])).is_empty());
    let outs = from(&mut m, 20, &[], up(&[20, 30]));
    assert_eq!(sends(&outs), vec![(10, "propose"), (20, "propose")]);
    m
}

/// The root commits only once every member live in its view accepted, straight to each of
/// them; a fresh root whose acks teach it a failure proposes again, attempt k + 1, with it; a
/// late ack of the old attempt gets the new one; the new attempt's acks commit it.
#[test]
fn a_fresh_root_proposes_again_when_the_acks_teach_a_failure() {
    let accepted = |k| Body::Accepted { ballot: (0, k) };
    let mut m = proposing_root();
    assert!(from(&mut m, 10, &[], accepted(0)).is_empty());
    // The earlier protocol's tree ack from 20 ("my subtree acked") counts for nothing.
    assert!(from(&mut m, 20, &[], Body::Ack { ballot: (0, 0) }).is_empty());
    assert!(from(&mut m, 30, &[], accepted(0)).is_empty());
    assert_eq!(m.decision(), None);
    // 20 accepted and learned that 30 died.
    let outs = from(&mut m, 20, &[30], accepted(0));
    let again = decision(&[30], &[0, 10, 20]);
    assert_eq!(
        proposals(&outs),
        vec![(10, (0, 1), again.clone()), (20, (0, 1), again.clone())]
    );
    let outs = from(&mut m, 10, &[], accepted(0));
    assert_eq!(proposals(&outs), vec![(10, (0, 1), again.clone())]);
    assert!(from(&mut m, 10, &[30], accepted(1)).is_empty());
    // A dead member's acceptance is not waited for, and does not count.
    assert!(from(&mut m, 30, &[], accepted(1)).is_empty());
    assert_eq!(m.decision(), None);
    let outs = from(&mut m, 20, &[30], accepted(1));
    assert_eq!(m.decision(), Some(&again));
    assert_eq!(sends(&outs), vec![(10, "commit"), (20, "commit")]);
    // Without a new failure the first attempt is committed as it is, once all three accepted,
    // straight to each (30 is not the root's child).
    let mut m = proposing_root();
    assert!(from(&mut m, 10, &[], accepted(0)).is_empty());
    assert!(from(&mut m, 20, &[], accepted(0)).is_empty());
    assert_eq!(m.decision(), None);
    let outs = from(&mut m, 30, &[], accepted(0));
    assert_eq!(m.decision(), Some(&decision(&[], &[0, 10, 20, 30])));
    assert_eq!(
        sends(&outs),
        vec![(10, "commit"), (20, "commit"), (30, "commit")]
    );
    // An acceptance that dies with its sender: 30 accepted, then died; 10 and 20 suffice.
    let mut m = proposing_root();
    assert!(from(&mut m, 30, &[], accepted(0)).is_empty());
    assert!(from(&mut m, 10, &[], accepted(0)).is_empty());
    assert!(m.handle(ResIn::PeerGone { rank: 30 }).is_empty());
    let outs = from(&mut m, 20, &[30], accepted(0));
    assert_eq!(
        proposals(&outs),
        vec![(10, (0, 1), again.clone()), (20, (0, 1), again.clone())]
    );
    // Waiting for acceptances, the deadline names exactly the live members that did not.
    let mut m2 = ResilientFence::start(0, 1, &[0, 10, 20, 30], &[], Vec::new(), Some(1)).0;
    let up = |ranks: &[u32]| Body::Up {
        root: 0,
        data: data_of(ranks),
        acked: None,
    };
    from(&mut m2, 10, &[], up(&[10]));
    from(&mut m2, 20, &[], up(&[20, 30]));
    from(&mut m2, 20, &[], accepted(0));
    assert_eq!(
        m2.handle(ResIn::Tick { now_ms: 1 }),
        vec![ResOut::TimedOut {
            waiting: vec![10, 30]
        }]
    );
}

/// A root that re-proposed an acknowledged value commits it unchanged, even when the acks
/// teach it failures the value does not name (it may be decided somewhere already).
#[test]
fn a_re_proposed_value_is_committed_unchanged_despite_new_failures() {
    let first = decision(&[], &[0, 10, 20, 30, 40, 50, 60, 70]);
    let mut m = new_root(Some(first.clone()));
    report(&mut m, 20, None);
    let outs = report(&mut m, 40, None);
    assert_eq!(proposals(&outs).len(), 2);
    for r in [20, 40, 50, 60] {
        assert!(from(&mut m, r, &[0, 30], Body::Accepted { ballot: (10, 0) }).is_empty());
    }
    let outs = from(&mut m, 70, &[0, 30], Body::Accepted { ballot: (10, 0) });
    assert_eq!(m.known_failed(), &[0, 30]);
    assert_eq!(m.decision(), Some(&first));
    assert_eq!(
        sends(&outs),
        vec![
            (20, "commit"),
            (40, "commit"),
            (50, "commit"),
            (60, "commit"),
            (70, "commit")
        ]
    );
}

/// A member that got the decision sends nothing more while the root that made it lives (it
/// sent the decision straight to every live member), whoever else dies; once that root is known
/// dead (its commits perhaps half sent), the member sends the decision, naming that root, to
/// its tree neighbours, once each, and to new ones after repairs. It answers anything with it.
/// The first protocol's `Commit` is not taken.
#[test]
fn a_decided_member_tells_its_tree_neighbours_only_once_the_deciding_root_is_dead() {
    // 20: parent 0, child 30 (ranks index * 10 of 8).
    let mut m = machine(20, 8, &[]);
    let value = decision(&[], &[0, 10, 20, 30, 40, 50, 60, 70]);
    assert!(from(
        &mut m,
        0,
        &[],
        Body::Commit {
            value: value.clone()
        }
    )
    .is_empty());
    assert_eq!(m.decision(), None);
    let decided = |root| Body::Decided {
        root,
        value: value.clone(),
    };
    // Relayed by 40 (it names root 0): taken.
    let outs = from(&mut m, 40, &[], decided(0));
    assert_eq!(m.decision(), Some(&value));
    assert!(
        matches!(&outs[..], [ResOut::Done { failed, .. }] if failed.is_empty()),
        "{outs:?}"
    );
    // Others die, the deciding root lives: nothing to tell.
    assert!(m.handle(ResIn::PeerGone { rank: 50 }).is_empty());
    // Anything is answered with the decision, naming its root.
    let outs = from(&mut m, 40, &[], Body::Nudge);
    assert!(outs.is_empty());
    let outs = from(&mut m, 40, &[], Body::Accepted { ballot: (0, 0) });
    assert_eq!(
        outs,
        vec![ResOut::Send {
            to: 40,
            msg: msg(&[50], decided(0))
        }]
    );
    // The root 0 died: 10 is the new root and 20, an orphan, hangs below it; 30 stays 20's.
    let outs = m.handle(ResIn::PeerGone { rank: 0 });
    assert_eq!(
        outs,
        vec![
            ResOut::Send {
                to: 30,
                msg: msg(&[0, 50], decided(0))
            },
            ResOut::Send {
                to: 10,
                msg: msg(&[0, 50], decided(0))
            }
        ]
    );
    // Another death: only new neighbours are told (30 was a leaf: none).
    assert!(m.handle(ResIn::PeerGone { rank: 30 }).is_empty());
    // A decision made by a root already known dead: told to the neighbours at once, except
    // whoever told it.
    let mut m = machine(20, 8, &[0]);
    let outs = from(&mut m, 10, &[0], decided(0));
    assert_eq!(sends(&outs), vec![(30, "commit")]);
}

/// Only other members can be dead: a notice or a view naming this member or a non-member
/// changes nothing (the detector is accurate; a confused peer must not make me drop myself).
#[test]
fn a_view_naming_me_or_a_stranger_is_ignored() {
    let mut m = machine(20, 8, &[]);
    assert!(m.handle(ResIn::PeerGone { rank: 20 }).is_empty());
    assert!(m.handle(ResIn::PeerGone { rank: 25 }).is_empty());
    assert!(from(&mut m, 10, &[20, 25], Body::Nudge).is_empty());
    assert_eq!(m.known_failed(), &[] as &[u32]);
    assert_eq!((m.eff_parent(), m.eff_children()), (Some(0), vec![30]));
    // A real death is taken, once: 20, now a leaf, reports.
    let outs = m.handle(ResIn::PeerGone { rank: 30 });
    assert_eq!(sends(&outs), vec![(0, "up")]);
    assert!(from(&mut m, 10, &[20, 30], Body::Nudge).is_empty());
    assert_eq!(m.known_failed(), &[30]);
}
