//! Which local port talks to which remote port.
//!
//! Two ports can reach each other when they have the same link layer and the same subnet id
//! (or, with `allow_cross_subnet`, any subnet: routed IB with a GRH, routed RoCE v2). Within
//! one group (a subnet, or a link layer when crossing subnets), with `nl` local and `nr` remote
//! ports, each sorted by their index in their node's blob, pair number `i` for `i` in
//! `0..max(nl, nr)` joins local port `i % nl` with remote port `i % nr`: every port on both
//! sides is used, and both sides compute the same set of pairs (the rule is symmetric).

use openib_ports::Mtu;

/// What pairing needs to know of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortView {
    /// Index of the port in its node's blob (stable, known to both sides).
    pub index: usize,
    pub subnet_id: u64,
    /// Link layer wire value (1 InfiniBand, 2 Ethernet).
    pub link_layer: u8,
    pub mtu: Mtu,
}

/// A reachable pair of ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortPair {
    pub local: usize,
    pub remote: usize,
    /// The smaller of the two active MTUs.
    pub path_mtu: Mtu,
}

/// All reachable pairs, sorted by (local, remote). Empty when nothing is reachable.
pub fn pair_ports(
    local: &[PortView],
    remote: &[PortView],
    allow_cross_subnet: bool,
) -> Vec<PortPair> {
    let key = |p: &PortView| {
        (
            p.link_layer,
            if allow_cross_subnet { 0 } else { p.subnet_id },
        )
    };
    let mut keys: Vec<(u8, u64)> = local.iter().map(key).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let mut l: Vec<&PortView> = local.iter().filter(|p| key(p) == k).collect();
        let mut r: Vec<&PortView> = remote.iter().filter(|p| key(p) == k).collect();
        if r.is_empty() {
            continue;
        }
        l.sort_by_key(|p| p.index);
        r.sort_by_key(|p| p.index);
        for i in 0..l.len().max(r.len()) {
            let (a, b) = (l[i % l.len()], r[i % r.len()]);
            out.push(PortPair {
                local: a.index,
                remote: b.index,
                path_mtu: a.mtu.min(b.mtu),
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pv(index: usize, subnet_id: u64, mtu: u8) -> PortView {
        PortView {
            index,
            subnet_id,
            link_layer: 1,
            mtu: Mtu::from_enum(mtu).unwrap(),
        }
    }

    #[test]
    fn same_subnet_pairs_in_order_and_mtu_is_the_minimum() {
        let a = [pv(0, 1, 5), pv(1, 1, 5)];
        let b = [pv(0, 1, 4), pv(1, 1, 5)];
        let p = pair_ports(&a, &b, false);
        assert_eq!(
            p,
            vec![
                PortPair {
                    local: 0,
                    remote: 0,
                    path_mtu: Mtu::from_enum(4).unwrap()
                },
                PortPair {
                    local: 1,
                    remote: 1,
                    path_mtu: Mtu::from_enum(5).unwrap()
                },
            ]
        );
    }

    #[test]
    fn different_subnets_do_not_pair_unless_allowed() {
        let a = [pv(0, 1, 5)];
        let b = [pv(0, 2, 5)];
        assert!(pair_ports(&a, &b, false).is_empty());
        assert_eq!(pair_ports(&a, &b, true).len(), 1);
        let mut eth = pv(0, 2, 5);
        eth.link_layer = 2;
        assert!(
            pair_ports(&a, &[eth], true).is_empty(),
            "IB never pairs with Ethernet"
        );
    }

    #[test]
    fn uneven_counts_use_every_port() {
        let a = [pv(0, 1, 5), pv(1, 1, 5), pv(2, 1, 5)];
        let b = [pv(0, 1, 5)];
        let p = pair_ports(&a, &b, false);
        assert_eq!(
            p.iter().map(|x| (x.local, x.remote)).collect::<Vec<_>>(),
            vec![(0, 0), (1, 0), (2, 0)]
        );
    }

    fn views() -> impl Strategy<Value = Vec<PortView>> {
        prop::collection::vec((0u64..3, 1u8..3, 1u8..=5), 0..6).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (s, ll, m))| PortView {
                    index: i,
                    subnet_id: s,
                    link_layer: ll,
                    mtu: Mtu::from_enum(m).unwrap(),
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn pairing_is_symmetric(a in views(), b in views(), cross in any::<bool>()) {
            let ab = pair_ports(&a, &b, cross);
            let mut ba: Vec<PortPair> = pair_ports(&b, &a, cross)
                .into_iter()
                .map(|p| PortPair { local: p.remote, remote: p.local, path_mtu: p.path_mtu })
                .collect();
            ba.sort();
            prop_assert_eq!(ab, ba);
        }
    }
}
