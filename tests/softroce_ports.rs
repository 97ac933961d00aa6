//! `openib ports` and `openib selftest` on a real SoftRoCE device (rxe0 in the qemu guest),
//! checked against `ibv_devinfo -v`. Each test boots one guest and runs several commands in it,
//! since a boot costs 10-20 s under TCG.
//!
//! If the guest cannot start, these tests fail with the harness's reason; they never pass
//! without running. `OPENIB_SKIP_GUEST=1` skips them loudly (for machines without qemu).

#[path = "softroce/harness.rs"]
mod harness;

use serde_json::Value;
use std::collections::BTreeMap;

const SEP: &str = "=====OPENIB-SECTION=====";

/// Runs `commands` in one guest boot; returns each command's stdout (its exit code last).
fn run_sections(guest_args: &[&str], commands: &[String]) -> Option<Vec<(String, i32)>> {
    if harness::skip_guest("softroce_ports") {
        return None;
    }
    let script: String = commands
        .iter()
        .map(|c| format!("{c}; echo \"{SEP} $?\"\n"))
        .collect();
    let out = harness::guest_run(guest_args, &["sh", "-c", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut sections = Vec::new();
    let mut rest = stdout.as_str();
    for c in commands {
        let at = rest.find(SEP).unwrap_or_else(|| {
            panic!(
                "section for {c:?} missing; stdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let body = rest[..at].to_string();
        let after = &rest[at + SEP.len()..];
        let (code, tail) = after.split_once('\n').unwrap_or((after, ""));
        sections.push((body, code.trim().parse().expect("exit code")));
        rest = tail;
    }
    Some(sections)
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_openib")
}

/// One port of `ibv_devinfo -v`, the fields we compare.
#[derive(Debug, Default)]
struct DevinfoPort {
    state: String,
    active_mtu_enum: u64,
    lid: u64,
    lmc: u64,
    link_layer: String,
    gids: BTreeMap<u64, (std::net::Ipv6Addr, String)>,
}

/// Parses `ibv_devinfo -v` into (device, port) -> fields.
fn parse_devinfo(text: &str) -> BTreeMap<(String, u64), DevinfoPort> {
    let mut out = BTreeMap::new();
    let mut dev = String::new();
    let mut port: Option<u64> = None;
    let num_in_parens = |v: &str| -> u64 {
        v.rsplit_once('(')
            .and_then(|(_, n)| n.trim_end_matches(')').parse().ok())
            .expect("(N)")
    };
    for line in text.lines() {
        let t = line.trim();
        let Some((key, val)) = t.split_once(':') else {
            continue;
        };
        let val = val.trim();
        match key.trim() {
            "hca_id" => {
                dev = val.to_string();
                port = None;
            }
            "port" => {
                let n: u64 = val.parse().expect("port number");
                port = Some(n);
                out.insert((dev.clone(), n), DevinfoPort::default());
            }
            k => {
                let Some(p) = port.and_then(|n| out.get_mut(&(dev.clone(), n))) else {
                    continue;
                };
                match k {
                    "state" => {
                        p.state = val
                            .split_whitespace()
                            .next()
                            .unwrap()
                            .trim_start_matches("PORT_")
                            .to_string()
                    }
                    "active_mtu" => p.active_mtu_enum = num_in_parens(val),
                    "port_lid" => p.lid = val.parse().unwrap(),
                    "port_lmc" => {
                        p.lmc = u64::from_str_radix(val.trim_start_matches("0x"), 16).unwrap()
                    }
                    "link_layer" => p.link_layer = val.to_string(),
                    _ if k.starts_with("GID[") => {
                        let idx: u64 = k
                            .trim_start_matches("GID[")
                            .trim_end_matches(']')
                            .trim()
                            .parse()
                            .unwrap();
                        // The value itself contains ':'; take the rest of the line after "]:".
                        let rest = t.split_once("]:").unwrap().1.trim();
                        let (gid, ty) = rest.rsplit_once(',').expect("GID, type");
                        out.get_mut(&(dev.clone(), port.unwrap()))
                            .unwrap()
                            .gids
                            .insert(
                                idx,
                                (gid.trim().parse().expect("GID text"), ty.trim().to_string()),
                            );
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Set in the guest when the test binary runs [`rdmacm_unmarked_refusals`] as one command.
const RDMACM_REFUSALS_ENV: &str = "OPENIB_TEST_RDMACM_REFUSALS";

/// rdmacm on rxe0:1 between two services of this process: a request that the peer's side
/// refuses without a marker (as its kernel's rdma_cm may, once seen in CI) is sent again, up to
/// three requests in all; a third refusal ends the attempt with it.
fn rdmacm_unmarked_refusals() -> Result<String, String> {
    use openib_cpc::{LocalPort, RdmacmService};
    use std::time::{Duration, Instant};
    let e = |e: openib_sys::Error| e.to_string();
    let list = openib_sys::devices().map_err(e)?;
    let dev = list.iter().find(|d| d.name() == "rxe0").ok_or("no rxe0")?;
    let ctx = dev.open().map_err(e)?;
    // The harness's veth0 has 10.77.0.1; rxe0's GID 1 is its IPv4-mapped GID.
    let ip = std::net::IpAddr::from([10, 77, 0, 1]);
    let caps = openib_sys::QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut report = Vec::new();
    for refusals in [2u32, 3] {
        let lp = LocalPort::open(&ctx, 1, 1, 64, caps).map_err(e)?;
        let mut s0 = RdmacmService::bind(0, &lp, ip).map_err(e)?;
        let mut s1 = RdmacmService::bind(1, &lp, ip).map_err(e)?;
        s1.add_peer(0, s0.address());
        s0.refuse_next_requests_unmarked(refusals);
        let start = Instant::now();
        s1.connect(0, 0, start);
        let outcome = loop {
            let now = Instant::now();
            s0.progress(now).map_err(e)?;
            s1.progress(now).map_err(e)?;
            if let Some((peer, _, err)) =
                s0.take_failed().into_iter().chain(s1.take_failed()).next()
            {
                break format!("failed: rank {peer}: {err}");
            }
            let (e0, e1) = (s0.take_established(), s1.take_established());
            if !e0.is_empty() || !e1.is_empty() {
                // The other side's half follows within the settle time.
                let (mut n0, mut n1) = (e0.len(), e1.len());
                let settle = Instant::now();
                while settle.elapsed() < Duration::from_millis(300) {
                    s0.progress(Instant::now()).map_err(e)?;
                    s1.progress(Instant::now()).map_err(e)?;
                    n0 += s0.take_established().len();
                    n1 += s1.take_established().len();
                }
                break format!("connected: {n0} + {n1}");
            }
            if now.duration_since(start) > Duration::from_secs(30) {
                break "no outcome in 30 s".to_string();
            }
        };
        report.push(format!("refusals {refusals}: {outcome}"));
    }
    Ok(report.join("\n"))
}

#[test]
fn ports_agree_with_ibv_devinfo_and_filters_act_on_rxe0() {
    if std::env::var_os(RDMACM_REFUSALS_ENV).is_some() {
        match rdmacm_unmarked_refusals() {
            Ok(r) => println!("{r}"),
            Err(e) => panic!("rdmacm refusals: {e}"),
        }
        return;
    }
    let b = bin();
    let me = std::env::current_exe().expect("the test binary's path");
    let me = me.display();
    let cmds = [
        "ibv_devinfo -v".to_string(),
        format!("{b} ports --json"),
        format!("{b} ports --json --exclude rxe0"),
        format!("{b} ports --json --include rxe0:1"),
        format!("{b} ports --json --include rxe0:2,mlx5_9"),
        format!("{b} ports"),
        format!("{b} selftest --json --iters 20"),
        format!("env {RDMACM_REFUSALS_ENV}=1 {me} --exact ports_agree_with_ibv_devinfo_and_filters_act_on_rxe0 --nocapture --test-threads 1 2>&1"),
        // Async events: the port goes down and comes back while `openib events` watches.
        format!("({b} events --count 2 --timeout 120 --json > /tmp/ev &); sleep 5; ip link set veth0 down; sleep 3; ip link set veth0 up; sleep 5; cat /tmp/ev"),
    ];
    let Some(s) = run_sections(&[], &cmds) else {
        return;
    };
    assert_eq!(s[0].1, 0, "ibv_devinfo failed: {}", s[0].0);
    let devinfo = parse_devinfo(&s[0].0);
    let rxe = devinfo
        .get(&("rxe0".to_string(), 1))
        .unwrap_or_else(|| panic!("no rxe0 port 1 in ibv_devinfo: {}", s[0].0));

    assert_eq!(s[1].1, 0);
    let v = json(&s[1].0);
    let ports = v["ports"].as_array().unwrap();
    let p = ports
        .iter()
        .find(|p| p["device"] == "rxe0" && p["port"] == 1)
        .expect("rxe0:1 in openib ports");
    assert_eq!(p["state"].as_str().unwrap(), rxe.state);
    assert_eq!(p["mtu"].as_u64().unwrap(), rxe.active_mtu_enum);
    assert_eq!(p["mtu_bytes"].as_u64().unwrap(), 128 << rxe.active_mtu_enum);
    assert_eq!(p["link_layer"].as_str().unwrap(), rxe.link_layer);
    assert_eq!(p["lid"].as_u64().unwrap(), rxe.lid);
    assert_eq!(p["lmc"].as_u64().unwrap(), rxe.lmc);
    assert_eq!(p["usable"], true, "{p}");
    let gids = p["gids"].as_array().unwrap();
    assert_eq!(
        gids.len(),
        rxe.gids.len(),
        "every GID: ours {gids:?}, devinfo {:?}",
        rxe.gids
    );
    for g in gids {
        let idx = g["index"].as_u64().unwrap();
        let (addr, ty) = rxe
            .gids
            .get(&idx)
            .unwrap_or_else(|| panic!("GID {idx} not in ibv_devinfo"));
        let ours: std::net::Ipv6Addr = g["gid"].as_str().unwrap().parse().unwrap();
        assert_eq!(&ours, addr, "GID {idx}");
        assert_eq!(g["type"].as_str().unwrap(), ty, "GID {idx} type");
    }
    // RoCE: the subnet id comes from veth0's IP subnet (the harness gives it 10.77.0.1/24).
    assert_eq!(p["subnet_source"], "IP subnet 10.77.0.0/24 on veth0", "{p}");
    assert_eq!(p["subnet_id"], "0x000418000a4d0000");

    // --exclude rxe0: listed, not usable, with the reason.
    let ex = json(&s[2].0);
    let p = &ex["ports"][0];
    assert_eq!(p["usable"], false);
    assert!(p["reason"].as_str().unwrap().contains("exclude"), "{p}");
    // --include rxe0:1: usable.
    assert_eq!(json(&s[3].0)["ports"][0]["usable"], true);
    // --include of names that match nothing: reported, and rxe0:1 not used.
    let inc = json(&s[4].0);
    assert_eq!(inc["ports"][0]["usable"], false);
    assert_eq!(
        inc["unmatched_filters"],
        serde_json::json!(["rxe0:2", "mlx5_9"])
    );
    // The table names the port.
    assert!(s[5].0.contains("rxe0 port 1: ACTIVE"), "{}", s[5].0);

    // The verbs layer moves real RC traffic: every selftest step checks its bytes.
    assert_eq!(s[6].1, 0, "selftest failed: {}", s[6].0);
    let st = json(&s[6].0);
    assert_eq!(st["ok"], true, "{st}");
    let names: Vec<&str> = st["report"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "send_recv",
            "send_inline",
            "rdma_write",
            "rdma_read",
            "fetch_add",
            "compare_swap",
            "srq_channel",
            "udcm_connect",
            "oob_connect",
            "rdmacm_connect"
        ]
    );

    for step in st["report"]["steps"].as_array().unwrap() {
        assert!(
            !step["detail"].as_str().unwrap().starts_with("skipped"),
            "no step may be skipped on rxe0: {step}"
        );
    }

    // Refused without a marker: two refusals cost two more requests and make one connection;
    // a third ends the attempt with the refusal.
    assert_eq!(s[7].1, 0, "rdmacm refusals: {}", s[7].0);
    assert!(
        s[7].0.contains("refusals 2: connected: 1 + 1"),
        "two unmarked refusals, then one connection: {}",
        s[7].0
    );
    assert!(
        s[7].0
            .contains("refusals 3: failed: rank 0: rdmacm: Rejected (status 28)"),
        "a third refusal ends the attempt: {}",
        s[7].0
    );

    let events: Vec<Value> = s[8].0.lines().map(json).collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["PortError { port: 1 }", "PortActive { port: 1 }"],
        "{}",
        s[8].0
    );
}

#[test]
fn a_port_whose_netdev_is_down_is_not_usable_with_its_reason() {
    let b = bin();
    let cmds = [
        "ibv_devinfo -v".to_string(),
        format!("{b} ports --json"),
        format!("{b} selftest"),
    ];
    let Some(s) = run_sections(&["--rxe-down"], &cmds) else {
        return;
    };
    let devinfo = parse_devinfo(&s[0].0);
    let rxe = devinfo.get(&("rxe0".to_string(), 1)).expect("rxe0 port 1");
    assert_ne!(
        rxe.state, "ACTIVE",
        "the harness's --rxe-down must take the port down"
    );
    let v = json(&s[1].0);
    let p = &v["ports"][0];
    assert_eq!(p["state"].as_str().unwrap(), rxe.state);
    assert_eq!(p["usable"], false);
    let why = p["reason"].as_str().unwrap();
    assert!(
        why.contains(&format!("port state is {}", rxe.state)) && why.contains("veth0 is down"),
        "{why}"
    );
    // The self-test refuses, naming the reason, instead of hanging.
    assert_eq!(s[2].1, 1);
}
