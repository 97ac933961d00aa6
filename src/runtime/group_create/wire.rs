//! Messages of the group-creation protocol and their wire form (bounded decoder, typed errors).

use super::super::wire::{Dec, WireError};
use std::sync::Arc;

/// A proposal number: (term, root, attempt), ordered lexicographically. A root proposes with a
/// term above every term its gather reported, so a later root's ballots are higher even when
/// it has a lower rank (the participant set grew to include a lower rank).
pub type Ballot = (u32, u32, u32);

/// What a process knows about the groups passed: the participants `members` (U, the union of
/// every group learned), `common` (I, the intersection of those groups) and, for each
/// participant not in `common`, the lowest rank whose group left it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// U, ascending.
    pub members: Arc<Vec<u32>>,
    /// I, ascending, a subset of `members`.
    pub common: Arc<Vec<u32>>,
    /// `(x, k)` for every `x` in U \ I (ascending `x`): `x` is not in `k`'s group.
    pub excluded_by: Arc<Vec<(u32, u32)>>,
    /// [`view_key`] of `members` and `common`, computed once.
    hash: u64,
}

impl View {
    /// A view of these lists (ascending; `excluded_by` covers exactly U \ I).
    pub fn new(
        members: Arc<Vec<u32>>,
        common: Arc<Vec<u32>>,
        excluded_by: Arc<Vec<(u32, u32)>>,
    ) -> View {
        let hash = view_key(&members, &common);
        View {
            members,
            common,
            excluded_by,
            hash,
        }
    }

    /// The 8 bytes two processes compare: a hash of U and I (FNV-1a, see [`group_hash`]).
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

/// FNV-1a over ascending ranks (the same function as [`crate::runtime::Group::hash`]).
pub fn group_hash(ranks: &[u32]) -> u64 {
    super::super::resilient::view_hash(ranks)
}

/// The hash of a view: U's hash, then I's, mixed. Two processes that passed the same group and
/// learned nothing else have equal keys.
pub fn view_key(members: &[u32], common: &[u32]) -> u64 {
    let a = group_hash(members);
    let b = group_hash(common);
    a ^ b.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A proposed or decided outcome: a view, the dead among its participants, and the root that
/// built it (a participant whose group every non-participant is missing from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub view: View,
    /// Dead participants, ascending.
    pub failed: Arc<Vec<u32>>,
    pub root: u32,
    /// I minus `failed`, computed once.
    group: Arc<Vec<u32>>,
}

impl Value {
    pub fn new(view: View, failed: Arc<Vec<u32>>, root: u32) -> Value {
        let group = if failed.iter().all(|r| view.common.binary_search(r).is_err()) {
            view.common.clone()
        } else {
            Arc::new(
                view.common
                    .iter()
                    .copied()
                    .filter(|r| failed.binary_search(r).is_err())
                    .collect(),
            )
        };
        Value {
            view,
            failed,
            root,
            group,
        }
    }

    /// The new group: I minus the dead, ascending.
    pub fn group(&self) -> &Arc<Vec<u32>> {
        &self.group
    }
}

/// Message bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Parent -> child at the start and after a rebuild of the tree: only the header (so a
    /// child with a different view starts the exchange).
    Hello,
    /// Child -> parent: my subtree reported to `root`; the highest proposal it accepted and the
    /// highest term it saw.
    Up {
        root: u32,
        max_term: u32,
        acked: Option<(Ballot, Value)>,
    },
    /// My whole view (the answer to a header whose view hash differs); `reply`: send yours.
    Full { view: View, reply: bool },
    /// Root -> down the tree (attempt 0) or straight to every participant (later attempts).
    /// `fresh`: the value is the root's own view, which it replaces when its view grows (a
    /// process that knows participants the value lacks refuses it); otherwise it is an
    /// accepted value re-proposed unchanged (it may be decided already: always accepted).
    Propose {
        ballot: Ballot,
        fresh: bool,
        value: Value,
    },
    /// Straight to the root: I accepted `ballot`.
    Ack { ballot: Ballot },
    /// The decision of root `by` (from it to every participant, and the answer to anything
    /// once decided).
    Commit { by: u32, value: Value },
    /// Only the header: the answer to a message of a dead root.
    Nudge,
}

/// One protocol message. The header carries the operation's tag, the sender's view hash and
/// its known dead (small: sent whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcMsg {
    /// Tells concurrent operations apart (the driver hashes the caller's string tag).
    pub tag: u64,
    pub view_hash: u64,
    pub failed: Arc<Vec<u32>>,
    pub body: Body,
}

/// Wire tags of [`GcMsg`] bodies; disjoint from the fences' (1 to 3, 0x11 to 0x17).
pub mod tag {
    pub const HELLO: u8 = 0x21;
    pub const UP: u8 = 0x22;
    pub const FULL: u8 = 0x23;
    /// A value re-proposed unchanged (`fresh` false): the first layout, kept as it was.
    pub const PROPOSE: u8 = 0x24;
    pub const ACK: u8 = 0x25;
    pub const COMMIT: u8 = 0x26;
    pub const NUDGE: u8 = 0x27;
    /// A root's own view proposed (`fresh` true): the body of [`PROPOSE`], under a tag of its
    /// own (a new kind, never a re-purposed field: a peer without it rejects the tag).
    pub const PROPOSE_FRESH: u8 = 0x28;
}

impl GcMsg {
    /// A short name of the kind, for statistics and the simulator's deaths "on first".
    pub fn kind(&self) -> &'static str {
        match self.body {
            Body::Hello => "hello",
            Body::Up { .. } => "up",
            Body::Full { .. } => "full",
            Body::Propose { .. } => "propose",
            Body::Ack { .. } => "ack",
            Body::Commit { .. } => "commit",
            Body::Nudge => "nudge",
        }
    }

    /// The wire form: `u8` tag, op tag `u64`, view hash `u64`, failed ranks (`u32` count and
    /// ascending `u32`s), then the body. Integers little-endian; a view is U, I (rank lists)
    /// and the exclusions (`u32` count, then `(x, k)` pairs, ascending `x`); a value is a view,
    /// its failed ranks and its root; a ballot three `u32`s; flags one byte (0 or 1).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let t = match self.body {
            Body::Hello => tag::HELLO,
            Body::Up { .. } => tag::UP,
            Body::Full { .. } => tag::FULL,
            Body::Propose { fresh: false, .. } => tag::PROPOSE,
            Body::Propose { fresh: true, .. } => tag::PROPOSE_FRESH,
            Body::Ack { .. } => tag::ACK,
            Body::Commit { .. } => tag::COMMIT,
            Body::Nudge => tag::NUDGE,
        };
        out.push(t);
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&self.view_hash.to_le_bytes());
        put_ranks(&mut out, &self.failed);
        match &self.body {
            Body::Hello | Body::Nudge => {}
            Body::Up {
                root,
                max_term,
                acked,
            } => {
                put_u32(&mut out, *root);
                put_u32(&mut out, *max_term);
                match acked {
                    None => out.push(0),
                    Some((b, v)) => {
                        out.push(1);
                        put_ballot(&mut out, *b);
                        put_value(&mut out, v);
                    }
                }
            }
            Body::Full { view, reply } => {
                put_view(&mut out, view);
                out.push(u8::from(*reply));
            }
            Body::Propose { ballot, value, .. } => {
                put_ballot(&mut out, *ballot);
                put_value(&mut out, value);
            }
            Body::Ack { ballot } => put_ballot(&mut out, *ballot),
            Body::Commit { by, value } => {
                put_u32(&mut out, *by);
                put_value(&mut out, value);
            }
        }
        out
    }

    /// Decodes one message, bounded by `buf`: truncation, an unknown tag, a bad flag, rank lists
    /// out of order, a common set not within the members, exclusions not exactly the members
    /// outside the common set, a view whose hash does not match (in `Full`), and trailing bytes
    /// are typed errors, never a panic or an allocation larger than the input allows.
    pub fn decode(buf: &[u8]) -> Result<GcMsg, WireError> {
        let mut d = Dec::new(buf);
        let t = d.u8("group-create tag")?;
        if !(tag::HELLO..=tag::PROPOSE_FRESH).contains(&t) {
            return Err(WireError::UnknownTag { tag: t });
        }
        let op_tag = d.u64("op tag")?;
        let hash_at = d.pos();
        let view_hash = d.u64("view hash")?;
        let failed = get_ranks(&mut d, "failed rank")?;
        let body = match t {
            tag::HELLO => Body::Hello,
            tag::NUDGE => Body::Nudge,
            tag::UP => {
                let root = d.u32("root")?;
                let max_term = d.u32("max term")?;
                let acked = if get_flag(&mut d, "acked flag")? {
                    Some((get_ballot(&mut d)?, get_value(&mut d)?))
                } else {
                    None
                };
                Body::Up {
                    root,
                    max_term,
                    acked,
                }
            }
            tag::FULL => {
                let view = get_view(&mut d)?;
                if view.hash() != view_hash {
                    return Err(WireError::Invalid {
                        what: "view hash",
                        offset: hash_at,
                    });
                }
                Body::Full {
                    view,
                    reply: get_flag(&mut d, "reply flag")?,
                }
            }
            tag::PROPOSE | tag::PROPOSE_FRESH => Body::Propose {
                ballot: get_ballot(&mut d)?,
                fresh: t == tag::PROPOSE_FRESH,
                value: get_value(&mut d)?,
            },
            tag::ACK => Body::Ack {
                ballot: get_ballot(&mut d)?,
            },
            _ => Body::Commit {
                by: d.u32("committing root")?,
                value: get_value(&mut d)?,
            },
        };
        d.finish()?;
        Ok(GcMsg {
            tag: op_tag,
            view_hash,
            failed: Arc::new(failed),
            body,
        })
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_ranks(out: &mut Vec<u8>, ranks: &[u32]) {
    put_u32(out, ranks.len() as u32);
    for &r in ranks {
        put_u32(out, r);
    }
}

fn put_ballot(out: &mut Vec<u8>, b: Ballot) {
    put_u32(out, b.0);
    put_u32(out, b.1);
    put_u32(out, b.2);
}

fn put_view(out: &mut Vec<u8>, v: &View) {
    put_ranks(out, &v.members);
    put_ranks(out, &v.common);
    put_u32(out, v.excluded_by.len() as u32);
    for &(x, k) in v.excluded_by.iter() {
        put_u32(out, x);
        put_u32(out, k);
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    put_view(out, &v.view);
    put_ranks(out, &v.failed);
    put_u32(out, v.root);
}

fn get_flag(d: &mut Dec<'_>, what: &'static str) -> Result<bool, WireError> {
    let at = d.pos();
    match d.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(WireError::BadValue {
            what,
            value,
            offset: at,
        }),
    }
}

/// A strictly ascending rank list.
fn get_ranks(d: &mut Dec<'_>, what: &'static str) -> Result<Vec<u32>, WireError> {
    let n = d.count(what, 4)?;
    let mut out: Vec<u32> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = d.pos();
        let r = d.u32(what)?;
        if out.last().is_some_and(|&last| last >= r) {
            return Err(WireError::Invalid { what, offset: at });
        }
        out.push(r);
    }
    Ok(out)
}

fn get_ballot(d: &mut Dec<'_>) -> Result<Ballot, WireError> {
    Ok((
        d.u32("ballot term")?,
        d.u32("ballot root")?,
        d.u32("ballot attempt")?,
    ))
}

fn get_view(d: &mut Dec<'_>) -> Result<View, WireError> {
    let members = get_ranks(d, "member")?;
    let at = d.pos();
    let common = get_ranks(d, "common member")?;
    if common.iter().any(|r| members.binary_search(r).is_err()) {
        return Err(WireError::Invalid {
            what: "common set outside the members",
            offset: at,
        });
    }
    let at = d.pos();
    let n = d.count("exclusion count", 8)?;
    let mut excluded_by: Vec<(u32, u32)> = Vec::with_capacity(n);
    for _ in 0..n {
        let pair_at = d.pos();
        let x = d.u32("excluded rank")?;
        let k = d.u32("excluded by")?;
        if excluded_by.last().is_some_and(|&(last, _)| last >= x) {
            return Err(WireError::Invalid {
                what: "exclusion order",
                offset: pair_at,
            });
        }
        excluded_by.push((x, k));
    }
    // Exactly the members outside the common set have a reason.
    let outside = members
        .iter()
        .filter(|r| common.binary_search(r).is_err())
        .copied();
    if !outside.eq(excluded_by.iter().map(|e| e.0)) {
        return Err(WireError::Invalid {
            what: "exclusions",
            offset: at,
        });
    }
    Ok(View::new(
        Arc::new(members),
        Arc::new(common),
        Arc::new(excluded_by),
    ))
}

fn get_value(d: &mut Dec<'_>) -> Result<Value, WireError> {
    let view = get_view(d)?;
    let failed = get_ranks(d, "value's failed rank")?;
    let root = d.u32("value root")?;
    Ok(Value::new(view, Arc::new(failed), root))
}

/// One message of every body kind (unit tests and fuzz seeds).
#[cfg(any(test, feature = "wire-oracle"))]
pub fn example_messages() -> Vec<GcMsg> {
    let view = View::new(
        Arc::new(vec![0, 1, 2, 5]),
        Arc::new(vec![0, 2]),
        Arc::new(vec![(1, 5), (5, 0)]),
    );
    let value = Value::new(view.clone(), Arc::new(vec![2]), 0);
    let bodies = vec![
        Body::Hello,
        Body::Up {
            root: 0,
            max_term: 3,
            acked: None,
        },
        Body::Up {
            root: 0,
            max_term: 3,
            acked: Some(((2, 1, 0), value.clone())),
        },
        Body::Full {
            view: view.clone(),
            reply: true,
        },
        Body::Propose {
            ballot: (4, 0, 2),
            fresh: true,
            value: value.clone(),
        },
        Body::Propose {
            ballot: (5, 1, 0),
            fresh: false,
            value: value.clone(),
        },
        Body::Ack { ballot: (4, 0, 2) },
        Body::Commit { by: 1, value },
        Body::Nudge,
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| GcMsg {
            tag: 0x0102_0304_0506_0708 + i as u64,
            view_hash: view.hash(),
            failed: Arc::new(if i % 2 == 0 { vec![3, 9] } else { vec![] }),
            body,
        })
        .collect()
}
