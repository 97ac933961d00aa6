//! Property tests: decode(encode(x)) == x for arbitrary valid node and proc blobs, and
//! encode(decode(b)) == b for every blob the decoder accepts (blobs made by mutating valid ones).

use super::*;
use proptest::prelude::*;

/// A small deterministic generator, so one `u64` seed describes a whole (dependent) value.
struct Gen(fastrand::Rng);
impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(fastrand::Rng::with_seed(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
    /// Uniform in `0..n` (`0..1` for `n` = 0).
    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n.max(1))
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        std::iter::repeat_with(|| self.0.u8(..)).take(n).collect()
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// An arbitrary valid node blob; `procs` adds a gathered section.
pub(crate) fn arb_node(seed: u64, procs: bool) -> NodeBlob {
    let mut g = Gen::new(seed);
    let ndev = 1 + g.below(3) as usize;
    let devices = (0..ndev)
        .map(|_| Device {
            vendor_id: g.next() as u32,
            vendor_part_id: g.next() as u32,
            transport: g.next() as u8,
        })
        .collect();
    let nports = 1 + if g.chance(10) {
        g.below(20)
    } else {
        g.below(4)
    } as usize;
    let ports = (0..nports)
        .map(|i| {
            let ncpc = g.below(4) as usize;
            let mut idx: Vec<u8> = Vec::new();
            while idx.len() < ncpc {
                let range = if g.chance(80) { 5 } else { 255 };
                let c = 1 + g.below(range) as u8;
                if !idx.contains(&c) {
                    idx.push(c);
                }
            }
            NodePort {
                device: g.below(ndev as u64) as u8,
                port_num: i as u8 + 1,
                link_layer: if g.chance(50) {
                    WireLinkLayer::InfiniBand
                } else {
                    WireLinkLayer::Ethernet
                },
                mtu: 1 + g.below(5) as u8,
                lid: g.next() as u16,
                apm_lid: g.next() as u16,
                subnet_id: g.next(),
                cpcs: idx
                    .into_iter()
                    .map(|cpc| {
                        let proc_len = if g.chance(10) {
                            g.below(20)
                        } else {
                            g.below(9)
                        } as u8;
                        let blob_len = if g.chance(5) {
                            g.below(300)
                        } else {
                            g.below(17)
                        } as usize;
                        CpcRecord {
                            cpc,
                            priority: g.next() as u8,
                            proc_len,
                            blob: g.bytes(blob_len),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let mut node = NodeBlob {
        devices,
        ports,
        local_procs: None,
        extensions: vec![],
    };
    let mut kind = 0u32;
    for _ in 0..g.below(3) {
        kind += 1 + g.below(1000) as u32;
        let n = g.below(8) as usize;
        node.extensions.push(Extension {
            kind,
            data: g.bytes(n),
        });
    }
    if procs {
        let count = 1 + if g.chance(10) {
            g.below(100)
        } else {
            g.below(8)
        } as usize;
        let procs: Vec<ProcBlob> = (0..count)
            .map(|rank| arb_proc_with(&mut g, &node, rank))
            .collect();
        node.local_procs =
            Some(LocalProcs::gather(&node, &procs).expect("generated procs are valid"));
    }
    node
}

fn arb_proc_with(g: &mut Gen, node: &NodeBlob, rank: usize) -> ProcBlob {
    let n = node.ports.len();
    let mut ports = PortSet::all(n);
    if g.chance(20) {
        for i in 0..n {
            if g.chance(40) {
                ports.remove(i);
            }
        }
    }
    let sequential = g.chance(50);
    let parts = ProcBlob::slots(node, ports)
        .map(|(i, j)| {
            let w = node.ports[i].cpcs[j].proc_len as usize;
            if sequential {
                // QP-number-like: a base per column plus the rank, little-endian.
                let v = (0x1000u64 + (i * 31 + j) as u64 * 977 + rank as u64 * 3).to_le_bytes();
                (0..w).map(|k| if k < 8 { v[k] } else { 0 }).collect()
            } else {
                g.bytes(w)
            }
        })
        .collect();
    ProcBlob { ports, parts }
}

pub(crate) fn arb_proc(seed: u64, node: &NodeBlob) -> ProcBlob {
    let mut g = Gen::new(seed);
    let rank = g.below(64) as usize;
    arb_proc_with(&mut g, node, rank)
}

/// Mutations of a valid blob: byte flips, truncation, insertion, deletion.
fn mutate(b: &[u8], seed: u64) -> Vec<u8> {
    let mut g = Gen::new(seed);
    let mut v = b.to_vec();
    for _ in 0..1 + g.below(3) {
        match g.below(5) {
            0 | 1 if !v.is_empty() => {
                let i = g.below(v.len() as u64) as usize;
                v[i] ^= 1 << g.below(8);
            }
            2 if !v.is_empty() => {
                let i = g.below(v.len() as u64) as usize;
                v[i] = g.next() as u8;
            }
            3 => {
                let n = g.below(v.len() as u64 + 1) as usize;
                v.truncate(n);
            }
            _ => {
                let i = g.below(v.len() as u64 + 1) as usize;
                v.insert(i, g.next() as u8);
            }
        }
    }
    v
}

pub(crate) fn check_node_canonical(b: &[u8], _v: &NodeBlob) {
    super::oracle::check_node(b).expect("accepted");
}

pub(crate) fn check_proc_canonical(b: &[u8], node: &NodeBlob, _v: &ProcBlob) {
    super::oracle::check_proc(b, node).expect("accepted");
}

const SQUEEZE: Compression = Compression {
    threshold: 16,
    level: 1,
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn node_decode_encode(seed in any::<u64>(), procs in any::<bool>(), squeeze in any::<bool>()) {
        let x = arb_node(seed, procs);
        let b = x.encode(if squeeze { SQUEEZE } else { Compression::OFF }).unwrap();
        prop_assert_eq!(NodeBlob::decode(&b).unwrap(), x.clone());
        // The gathered section gives back every process's proc blob.
        if let Some(lp) = &x.local_procs {
            let blobs = lp.to_proc_blobs(&x);
            prop_assert_eq!(LocalProcs::gather(&x, &blobs).unwrap(), lp.clone());
        }
    }

    #[test]
    fn proc_decode_encode(seed in any::<u64>(), pseed in any::<u64>()) {
        let node = arb_node(seed, false);
        let p = arb_proc(pseed, &node);
        let b = p.encode(&node, Compression::OFF).unwrap();
        prop_assert_eq!(ProcBlob::decode(&b, &node).unwrap(), p);
    }

    #[test]
    fn node_accepted_blobs_are_canonical(seed in any::<u64>(), procs in any::<bool>(), m in any::<u64>(), squeeze in any::<bool>()) {
        let x = arb_node(seed, procs);
        let b = mutate(&x.encode(if squeeze { SQUEEZE } else { Compression::OFF }).unwrap(), m);
        if let Ok(v) = NodeBlob::decode(&b) {
            check_node_canonical(&b, &v);
        }
    }

    #[test]
    fn proc_accepted_blobs_are_canonical(seed in any::<u64>(), pseed in any::<u64>(), m in any::<u64>()) {
        let node = arb_node(seed, false);
        let b = mutate(&arb_proc(pseed, &node).encode(&node, Compression::OFF).unwrap(), m);
        if let Ok(v) = ProcBlob::decode(&b, &node) {
            check_proc_canonical(&b, &node, &v);
        }
    }

    #[test]
    fn random_bytes_never_panic(h in 0usize..6, mut b in proptest::collection::vec(any::<u8>(), 0..200)) {
        // Mostly a valid byte 0, so that the bodies get decoded.
        if let Some(b0) = [0x10u8, 0x12, 0x11, 0x18, 0x1c].get(h) {
            b.insert(0, *b0);
        }
        if let Ok(v) = NodeBlob::decode(&b) {
            check_node_canonical(&b, &v);
        }
        let node = arb_node(7, false);
        if let Ok(v) = ProcBlob::decode(&b, &node) {
            check_proc_canonical(&b, &node, &v);
        }
    }
}
