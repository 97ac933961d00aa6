//! The decoder's contract, checked on arbitrary input: used by the property tests, the fuzz
//! targets (fuzz/) and the corpus replay test. Each function decodes untrusted bytes and, when
//! the decoder accepts them, panics if a promise is broken:
//! - an accepted uncompressed blob re-encodes to exactly the same bytes (canonical form);
//! - an accepted compressed blob re-encodes (uncompressed) to its decompressed body, and the
//!   re-encoding decodes to the same value (a deflate stream itself has many valid forms);
//! - the gathered section gives back proc blobs that gather to the same section.
//!
//! Rejection is always fine; only a panic inside the decoder or a broken promise is a bug.

use super::{frame, Compression, LocalProcs, NodeBlob, ProcBlob};

/// Checks a node blob; returns the decoded value when accepted.
pub fn check_node(b: &[u8]) -> Option<NodeBlob> {
    let v = NodeBlob::decode(b).ok()?;
    let info = frame::info(b).expect("an accepted blob has a readable frame");
    let plain = v
        .encode(Compression::OFF)
        .expect("a decoded node blob re-encodes");
    if info.compressed {
        assert_eq!(plain.len() - 1, info.body_len, "decompressed body length");
        assert_eq!(
            NodeBlob::decode(&plain).as_ref(),
            Ok(&v),
            "re-encoding decodes to the same value"
        );
    } else {
        assert_eq!(plain, b, "encode(decode(b)) != b");
    }
    if let Some(lp) = &v.local_procs {
        let procs = lp.to_proc_blobs(&v);
        assert_eq!(procs.len(), lp.count as usize);
        for (rank, p) in procs.iter().enumerate() {
            let mut parts = p.parts.iter();
            for (i, j) in ProcBlob::slots(&v, p.ports) {
                assert_eq!(
                    lp.part(&v, rank, i, j),
                    parts.next().map(Vec::as_slice),
                    "part() != to_proc_blobs()"
                );
            }
        }
        let back = LocalProcs::gather(&v, &procs).expect("proc blobs of a decoded section gather");
        assert_eq!(&back, lp, "gather(to_proc_blobs(x)) != x");
    }
    Some(v)
}

/// Checks a proc blob against `node`; returns the decoded value when accepted.
pub fn check_proc(b: &[u8], node: &NodeBlob) -> Option<ProcBlob> {
    let v = ProcBlob::decode(b, node).ok()?;
    let info = frame::info(b).expect("an accepted blob has a readable frame");
    let plain = v
        .encode(node, Compression::OFF)
        .expect("a decoded proc blob re-encodes");
    if info.compressed {
        assert_eq!(ProcBlob::decode(&plain, node).as_ref(), Ok(&v));
    } else {
        assert_eq!(plain, b, "encode(decode(b)) != b");
    }
    Some(v)
}

/// The proc-blob fuzz input: `u16 LE node length, node blob, proc blob`.
pub fn check_proc_input(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let n = u16::from_le_bytes([data[0], data[1]]) as usize;
    let rest = &data[2..];
    let (node, proc_) = rest.split_at(n.min(rest.len()));
    if let Some(node) = check_node(node) {
        check_proc(proc_, &node);
    }
}

/// Builds a proc-blob fuzz input.
pub fn proc_input(node: &[u8], proc_: &[u8]) -> Vec<u8> {
    let mut v = (node.len() as u16).to_le_bytes().to_vec();
    v.extend_from_slice(node);
    v.extend_from_slice(proc_);
    v
}
