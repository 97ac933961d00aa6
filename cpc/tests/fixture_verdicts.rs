//! CPC verdicts on the fixture ports: each refusal carries its reason.

use openib_cpc::*;
use openib_ports::{derive, DeriveConfig, Topology};

fn ports(name: &str) -> Vec<openib_ports::Port> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    derive(
        &Topology::from_fixture_file(&path).unwrap(),
        &DeriveConfig::default(),
    )
    .ports
}

fn verdict(v: &[(CpcId, Result<Advert, Unusable>)], c: CpcId) -> &Result<Advert, Unusable> {
    &v.iter().find(|(id, _)| *id == c).unwrap().1
}

#[test]
fn roce_port_on_a_modern_kernel() {
    let p = &ports("roce.json")[0];
    let host = HostFacts {
        rdmacm: Ok(()),
        ucm: false,
        kernel: "6.1.0".into(),
    };
    let v = evaluate(p, true, &host, &CpcConfig::default());
    assert!(
        verdict(&v, CpcId::Oob).is_ok(),
        "oob works on RoCE (it carries the GID)"
    );
    assert!(
        verdict(&v, CpcId::Udcm).is_ok(),
        "udcm works on RoCE (address handles from GIDs)"
    );
    assert!(verdict(&v, CpcId::Rdmacm).is_ok());
    assert!(matches!(
        verdict(&v, CpcId::Ibcm),
        Err(Unusable::NotInfiniBand { .. })
    ));
    assert!(
        matches!(
            verdict(&v, CpcId::Xoob),
            Err(Unusable::XrcNotImplemented { .. })
        ),
        "the fixture's ConnectX has XRC, but the XRC path is not built: it says so"
    );
    let ads = adverts(&v);
    assert_eq!(
        select(&ads, &ads).map(|w| w.index),
        Some(CpcId::Udcm.index()),
        "udcm has the highest default priority"
    );
}

#[test]
fn missing_ip_ucm_and_librdmacm_are_reasons() {
    let ib = &ports("ib-dual-port.json")[0];
    let host = HostFacts {
        rdmacm: Err("librdmacm.so.1: cannot open".into()),
        ucm: false,
        kernel: "6.1.0".into(),
    };
    let v = evaluate(ib, false, &host, &CpcConfig::default());
    let e = verdict(&v, CpcId::Ibcm).as_ref().unwrap_err().to_string();
    assert!(e.contains("5.3") && e.contains("6.1.0"), "{e}");
    let e = verdict(&v, CpcId::Rdmacm).as_ref().unwrap_err().to_string();
    assert!(e.contains("librdmacm"), "{e}");
    let host = HostFacts {
        rdmacm: Ok(()),
        ..host
    };
    let v = evaluate(ib, false, &host, &CpcConfig::default());
    assert!(matches!(
        verdict(&v, CpcId::Rdmacm),
        Err(Unusable::NoIpAddress { .. })
    ));
}

#[test]
fn a_down_port_offers_nothing_and_says_why() {
    let down = &ports("port-down.json")[1];
    let v = evaluate(down, true, &HostFacts::everything(), &CpcConfig::default());
    for (c, r) in &v {
        assert!(
            matches!(r, Err(Unusable::PortNotUsable { reason }) if reason.contains("DOWN")),
            "{c}: {r:?}"
        );
    }
}

#[test]
fn include_lists_force_a_cpc() {
    let p = &ports("roce.json")[0];
    let cfg = CpcConfig::parse(Some("rdmacm"), None, None).unwrap();
    let v = evaluate(p, true, &HostFacts::everything(), &cfg);
    let ads = adverts(&v);
    assert_eq!(
        ads.iter().map(|a| a.index).collect::<Vec<_>>(),
        vec![CpcId::Rdmacm.index()]
    );
    assert!(matches!(
        verdict(&v, CpcId::Udcm),
        Err(Unusable::Excluded { .. })
    ));
}

/// ibcm has no connection path: even where the kernel offers ib_ucm (a fake device directory
/// with a `ucm0` node) it is refused, with that reason, not advertised.
#[test]
fn ibcm_is_refused_even_with_ucm() {
    let dir = std::env::temp_dir().join(format!("openib-fake-dev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ucm0"), b"").unwrap();
    let host = HostFacts::probe_in(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(host.ucm, "the fake directory has ucm0");
    let ib = &ports("ib-dual-port.json")[0];
    for host in [host, HostFacts::everything()] {
        let v = evaluate(ib, true, &host, &CpcConfig::default());
        let r = verdict(&v, CpcId::Ibcm);
        assert!(
            matches!(r, Err(Unusable::IbcmNotImplemented)),
            "ibcm must not be offered without a connection path: {r:?}"
        );
        let e = r.as_ref().unwrap_err().to_string();
        assert!(
            e.contains("no ibcm connection path") && e.contains("ucm"),
            "{e}"
        );
        assert!(!adverts(&v).iter().any(|a| a.index == CpcId::Ibcm.index()));
    }
}
