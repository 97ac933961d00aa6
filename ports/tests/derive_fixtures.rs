//! The derivation rules, exercised through the fixture files (the same path hardware takes).

use openib_ports::*;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

fn fixture(name: &str) -> Topology {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    Topology::from_fixture_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn discover(name: &str, cfg: &DeriveConfig) -> Discovery {
    derive(&fixture(name), cfg)
}

fn port<'a>(d: &'a Discovery, name: &str) -> &'a Port {
    d.ports
        .iter()
        .find(|p| p.name() == name)
        .unwrap_or_else(|| panic!("no port {name}"))
}

#[test]
fn ib_subnet_id_is_the_gid_prefix_at_the_configured_index() {
    let d = discover("ib-two-subnets.json", &DeriveConfig::default());
    assert_eq!(port(&d, "mlx5_0:1").subnet_id, 0xfec0_0000_0000_0001);
    assert_eq!(port(&d, "mlx5_1:1").subnet_id, 0xfec0_0000_0000_0002);
    assert_eq!(port(&d, "mlx5_1:1").mtu, Mtu::from_enum(4));
    assert!(
        d.warnings.is_empty(),
        "distinct prefixes need no warning: {:?}",
        d.warnings
    );
}

#[test]
fn a_missing_gid_index_makes_the_port_unusable_with_the_reason() {
    let d = discover(
        "ib-dual-port.json",
        &DeriveConfig {
            gid_index: 7,
            ..Default::default()
        },
    );
    let p = port(&d, "mlx5_0:1");
    assert!(!p.usable);
    assert!(
        p.reason.as_deref().unwrap().contains("no GID at index 7"),
        "{:?}",
        p.reason
    );
}

#[test]
fn down_port_is_listed_but_not_usable() {
    let d = discover("port-down.json", &DeriveConfig::default());
    assert!(port(&d, "mlx5_0:1").usable);
    let down = port(&d, "mlx5_0:2");
    assert!(!down.usable);
    assert_eq!(down.raw.state, PortState::Down);
    assert!(
        down.reason.as_deref().unwrap().contains("DOWN"),
        "{:?}",
        down.reason
    );
}

#[test]
fn apm_lid_rules() {
    let d = discover("lmc2.json", &DeriveConfig::default());
    assert_eq!(
        port(&d, "mlx4_0:1").apm_lid,
        21,
        "lmc > 0: the second LID of the port"
    );
    let d = discover("ib-dual-port.json", &DeriveConfig::default());
    assert_eq!(
        port(&d, "mlx5_0:1").apm_lid,
        0,
        "lmc 0 without APM over ports: no alternate path"
    );
    let d = discover(
        "ib-dual-port.json",
        &DeriveConfig {
            apm_over_ports: true,
            ..Default::default()
        },
    );
    assert_eq!(
        port(&d, "mlx5_0:1").apm_lid,
        18,
        "APM over ports: the other port's LID"
    );
    assert_eq!(
        port(&d, "mlx5_0:2").apm_lid,
        17,
        "wraps around to the lower port"
    );
    let d = discover(
        "port-down.json",
        &DeriveConfig {
            apm_over_ports: true,
            ..Default::default()
        },
    );
    assert_eq!(
        port(&d, "mlx5_0:1").apm_lid,
        0,
        "a DOWN port is no alternate path"
    );
    let d = discover(
        "roce.json",
        &DeriveConfig {
            apm_over_ports: true,
            ..Default::default()
        },
    );
    assert_eq!(port(&d, "mlx5_0:1").apm_lid, 0, "RoCE has no LIDs");
}

#[test]
fn roce_subnet_id_comes_from_the_ip_subnet() {
    let d = discover("roce.json", &DeriveConfig::default());
    let p = port(&d, "mlx5_0:1");
    assert!(p.usable);
    let net: IpNet = "192.168.10.0/24".parse().unwrap();
    assert_eq!(p.subnet_id, roce_subnet_id(&net));
    assert_eq!(
        p.subnet_source,
        SubnetSource::IpSubnet("192.168.10.0/24 on ens1f0".into())
    );
    // Index 3 (the IPv4-mapped RoCE v2 GID) picks the same address.
    let d3 = discover(
        "roce.json",
        &DeriveConfig {
            gid_index: 3,
            ..Default::default()
        },
    );
    assert_eq!(port(&d3, "mlx5_0:1").subnet_id, p.subnet_id);
}

#[test]
fn roce_ports_on_one_ip_subnet_agree_and_on_two_differ() {
    let mut a = fixture("roce.json");
    let mut b = a.clone();
    b.netdevs[0].addrs[0] = "192.168.10.77/24".parse().unwrap();
    let cfg = DeriveConfig::default();
    let ida = derive(&a, &cfg).ports[0].subnet_id;
    let idb = derive(&b, &cfg).ports[0].subnet_id;
    assert_eq!(ida, idb, "same /24, different hosts");
    b.netdevs[0].addrs[0] = "192.168.11.77/24".parse().unwrap();
    assert_ne!(ida, derive(&b, &cfg).ports[0].subnet_id, "different /24");
    a.netdevs[0].addrs.clear();
    let fallback = derive(&a, &cfg);
    assert!(
        matches!(fallback.ports[0].subnet_source, SubnetSource::GidPrefixFallback(ref why) if why.contains("no IP address"))
    );
}

#[test]
fn default_prefix_warning_needs_two_devices() {
    let d = discover("ib-two-hcas-default-prefix.json", &DeriveConfig::default());
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].contains("mlx5_0:1") && d.warnings[0].contains("mlx5_1:1"),
        "{}",
        d.warnings[0]
    );
    // Two ports of one device on the default prefix: nothing to tell apart.
    assert!(discover("ib-dual-port.json", &DeriveConfig::default())
        .warnings
        .is_empty());
    // Excluding one device removes the condition.
    let cfg = DeriveConfig {
        filter: Filter::from_lists(None, Some("mlx5_1")).unwrap(),
        ..Default::default()
    };
    assert!(discover("ib-two-hcas-default-prefix.json", &cfg)
        .warnings
        .is_empty());
}

#[test]
fn filters_mark_ports_and_report_unmatched_entries() {
    let cfg = DeriveConfig {
        filter: Filter::from_lists(Some("mlx5_0:2,mlx9"), None).unwrap(),
        ..Default::default()
    };
    let d = discover("ib-dual-port.json", &cfg);
    assert!(!port(&d, "mlx5_0:1").usable);
    assert!(port(&d, "mlx5_0:1")
        .reason
        .as_deref()
        .unwrap()
        .contains("include list"));
    assert!(port(&d, "mlx5_0:2").usable);
    assert_eq!(d.unmatched_filters, vec!["mlx9".to_string()]);

    let cfg = DeriveConfig {
        filter: Filter::from_lists(None, Some("mlx5_0")).unwrap(),
        ..Default::default()
    };
    let d = discover("ib-dual-port.json", &cfg);
    assert_eq!(d.usable().count(), 0);
    assert!(d.unmatched_filters.is_empty());
    // A DOWN port keeps its own reason when a filter would also remove it.
    let cfg = DeriveConfig {
        filter: Filter::from_lists(None, Some("mlx5_0:2")).unwrap(),
        ..Default::default()
    };
    let d = discover("port-down.json", &cfg);
    assert!(port(&d, "mlx5_0:2")
        .reason
        .as_deref()
        .unwrap()
        .contains("DOWN"));
}

#[test]
fn bad_fixtures_are_rejected_with_the_reason() {
    let bad_mtu = r#"{"devices":[{"name":"x","node_guid":"0x1","ports":[{"port":1,"state":"ACTIVE","link_layer":"IB","active_mtu":9}]}]}"#;
    let e = Topology::from_fixture_json(bad_mtu, "t.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("active_mtu 9"), "{e}");
    let dup = r#"{"devices":[{"name":"x","node_guid":"0x1","ports":[]},{"name":"x","node_guid":"0x2","ports":[]}]}"#;
    assert!(Topology::from_fixture_json(dup, "t.json")
        .unwrap_err()
        .to_string()
        .contains("twice"));
    let unknown = r#"{"devices":[], "bogus": 1}"#;
    assert!(Topology::from_fixture_json(unknown, "t.json")
        .unwrap_err()
        .to_string()
        .contains("bogus"));
    let state = r#"{"devices":[{"name":"x","node_guid":"0x1","ports":[{"port":1,"state":"UPPISH","link_layer":"IB","active_mtu":3}]}]}"#;
    assert!(Topology::from_fixture_json(state, "t.json")
        .unwrap_err()
        .to_string()
        .contains("UPPISH"));
}

#[test]
fn fixtures_round_trip_through_json() {
    for name in [
        "ib-dual-port.json",
        "ib-two-subnets.json",
        "roce.json",
        "port-down.json",
        "lmc2.json",
    ] {
        let t = fixture(name);
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(
            Topology::from_fixture_json(&text, name).unwrap(),
            t,
            "{name}"
        );
    }
}

proptest! {
    #[test]
    fn ipv4_subnet_ids_equal_exactly_when_networks_equal(a: u32, b: u32, pa in 0u8..=32, pb in 0u8..=32) {
        let na = IpNet { addr: IpAddr::V4(Ipv4Addr::from(a)), prefix_len: pa };
        let nb = IpNet { addr: IpAddr::V4(Ipv4Addr::from(b)), prefix_len: pb };
        let same = na.network() == nb.network() && pa == pb;
        prop_assert_eq!(roce_subnet_id(&na) == roce_subnet_id(&nb), same);
    }

    #[test]
    fn ipv6_subnet_ids_agree_within_a_network(hi: u64, lo_a: u64, lo_b: u64) {
        let a = IpNet { addr: IpAddr::V6((((hi as u128) << 64) | lo_a as u128).into()), prefix_len: 64 };
        let b = IpNet { addr: IpAddr::V6((((hi as u128) << 64) | lo_b as u128).into()), prefix_len: 64 };
        prop_assert_eq!(roce_subnet_id(&a), roce_subnet_id(&b));
        prop_assert_ne!(roce_subnet_id(&a) >> 56, 0xfe, "never looks like a link-local IB prefix");
    }
}

#[test]
fn roce_port_down_names_its_network_device() {
    let mut t = fixture("roce.json");
    t.devices[0].ports[0].state = PortState::Down;
    t.devices[0].ports[0].phys_state = PhysState::DISABLED;
    t.netdevs[0].up = false;
    let d = derive(&t, &DeriveConfig::default());
    let why = d.ports[0].reason.clone().unwrap();
    assert!(why.contains("ens1f0 is down"), "{why}");
    t.netdevs[0].up = true;
    let why = derive(&t, &DeriveConfig::default()).ports[0]
        .reason
        .clone()
        .unwrap();
    assert!(why.contains("DISABLED") && why.contains("carrier"), "{why}");
}
