//! A loopback self-test of one port: two RC queue pairs on the same port, connected to each
//! other, move a send, an RDMA write, an RDMA read and 64-bit atomics, and every result is
//! checked byte for byte. It proves the verbs layer and the device, not the transport.

use openib_sys::Region;
use openib_sys::{
    Access, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCaps,
    QpInitAttrs, QpType, QueuePair, RcParams, RecvRequest, RemoteAddress, SendOp, SendRequest,
    SharedReceiveQueue, WorkCompletion,
};
use std::time::{Duration, Instant};

/// What to test.
#[derive(Debug, Clone)]
pub struct SelftestConfig {
    /// Device name; `None` takes the first device with an ACTIVE port.
    pub device: Option<String>,
    /// Port number; `None` takes the first ACTIVE port.
    pub port: Option<u8>,
    /// GID index for the GRH; `None` takes the first RoCE v2 IPv4-mapped GID on Ethernet, else 0.
    pub gid_index: Option<u32>,
    /// Ping-pong round trips for the latency figure.
    pub iterations: u32,
    /// How long one completion may take before the test fails.
    pub timeout: Duration,
}

impl Default for SelftestConfig {
    fn default() -> Self {
        SelftestConfig {
            device: None,
            port: None,
            gid_index: None,
            iterations: 100,
            timeout: Duration::from_secs(10),
        }
    }
}

/// One checked step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// The outcome of a self-test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SelftestReport {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub path_mtu_bytes: u32,
    pub steps: Vec<Step>,
    /// Half round trip of an 8-byte send ping-pong between the two QPs.
    pub latency_us: Option<f64>,
}

impl SelftestReport {
    pub fn ok(&self) -> bool {
        self.steps.iter().all(|s| s.ok)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error(transparent)]
    Verbs(#[from] openib_sys::Error),
    #[error("{0}")]
    Setup(String),
}

/// Runs the self-test. Setup failures (no device, QP creation refused) are errors; a step that
/// runs but gives a wrong result is a failed [`Step`] in the report.
pub fn run(cfg: &SelftestConfig) -> Result<SelftestReport, SelftestError> {
    let (ctx, port) = pick_port(cfg)?;
    let attr = ctx.query_port(port)?;
    let ethernet = attr.link_layer == 2;
    let gid_index = match cfg.gid_index {
        Some(i) => i,
        None => pick_gid(&ctx, port, attr.gid_tbl_len, ethernet)?,
    };
    let gid = ctx.query_gid_ex(port, gid_index)?.ok_or_else(|| {
        SelftestError::Setup(format!(
            "{} port {port} has no GID at index {gid_index}",
            ctx.name()
        ))
    })?;

    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 256, None)?;
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mk_qp = || {
        QueuePair::new(
            &pd,
            &QpInitAttrs {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                caps,
                sq_sig_all: false,
            },
        )
    };
    let (a, b) = (mk_qp()?, mk_qp()?);
    for qp in [&a, &b] {
        qp.to_init(port, 0, Access::ALL)?;
    }
    let params = RcParams {
        port,
        sgid_index: gid_index as u8,
        path_mtu: attr.active_mtu,
        ..Default::default()
    };
    let addr = |qp: &QueuePair| RemoteAddress {
        qp_num: qp.qp_num(),
        psn: 0,
        lid: attr.lid,
        gid: Some(gid.gid),
    };
    a.connect_rc(&addr(&b), &params)?;
    b.connect_rc(&addr(&a), &params)?;

    const LEN: usize = 4096;
    let mut mr_a = MemoryRegion::alloc(&pd, LEN, Access::ALL)?;
    let mut mr_b = MemoryRegion::alloc(&pd, LEN, Access::ALL)?;
    let mut steps = Vec::new();
    let mut poller = Poller {
        cq: &cq,
        timeout: cfg.timeout,
        pending: Vec::new(),
    };

    // 1. Send/receive.
    let msg = b"openib selftest: send/recv over RC";
    mr_a.write_at(0, msg)?;
    b.post_recv(&RecvRequest {
        wr_id: 1,
        sges: vec![mr_b.sge(0, LEN)?],
    })?;
    a.post_send(&SendRequest {
        wr_id: 2,
        op: SendOp::Send,
        sges: vec![mr_a.sge(0, msg.len())?],
        signaled: true,
        inline: false,
    })?;
    let step = match (poller.wait(1), poller.wait(2)) {
        (Ok(r), Ok(_)) => {
            let got = mr_b.to_vec(0, msg.len())?;
            check(
                "send_recv",
                got == msg && r.byte_len as usize == msg.len(),
                format!("{} bytes received", r.byte_len),
            )
        }
        (Err(e), _) | (_, Err(e)) => check("send_recv", false, e),
    };
    steps.push(step);

    // 1b. An inline send with immediate data from bytes that are in no memory region, and an
    // inline payload longer than the QP takes, refused before anything is posted.
    let inline_msg = *b"inline, from the stack";
    mr_b.write_at(0, &[0u8; LEN])?;
    b.post_recv(&RecvRequest {
        wr_id: 11,
        sges: vec![mr_b.sge(0, LEN)?],
    })?;
    let too_long = vec![0u8; a.caps().max_inline_data as usize + 1];
    let refused = a.post_send_inline(12, SendOp::Send, &too_long, true);
    a.post_send_inline(
        12,
        SendOp::SendWithImm { imm: 0x0a0b_0c0d },
        &inline_msg,
        true,
    )?;
    steps.push(match (poller.wait(11), poller.wait(12)) {
        (Ok(r), Ok(_)) => check(
            "send_inline",
            mr_b.to_vec(0, inline_msg.len())? == inline_msg
                && r.byte_len as usize == inline_msg.len()
                && r.imm() == Some(0x0a0b_0c0d)
                && matches!(refused, Err(openib_sys::Error::InvalidArgument { .. })),
            format!(
                "{} bytes and the immediate data received; {} bytes over max_inline_data: {}",
                r.byte_len,
                too_long.len(),
                match &refused {
                    Ok(()) => "posted (should be refused)".to_string(),
                    Err(e) => format!("refused ({e})"),
                }
            ),
        ),
        (Err(e), _) | (_, Err(e)) => check("send_inline", false, e),
    });

    // 2. RDMA write A -> B.
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    mr_a.write_at(0, &pattern)?;
    a.post_send(&SendRequest {
        wr_id: 3,
        op: SendOp::RdmaWrite {
            remote_addr: mr_b.addr(),
            rkey: mr_b.rkey(),
        },
        sges: vec![mr_a.sge(0, LEN)?],
        signaled: true,
        inline: false,
    })?;
    steps.push(match poller.wait(3) {
        Ok(_) => check(
            "rdma_write",
            mr_b.to_vec(0, LEN)? == pattern,
            format!("{LEN} bytes written"),
        ),
        Err(e) => check("rdma_write", false, e),
    });

    // 3. RDMA read B -> A (after changing B's content).
    let pattern2: Vec<u8> = (0..LEN).map(|i| (i * 13 + 1) as u8).collect();
    mr_b.write_at(0, &pattern2)?;
    mr_a.write_at(0, &[0u8; LEN])?;
    a.post_send(&SendRequest {
        wr_id: 4,
        op: SendOp::RdmaRead {
            remote_addr: mr_b.addr(),
            rkey: mr_b.rkey(),
        },
        sges: vec![mr_a.sge(0, LEN)?],
        signaled: true,
        inline: false,
    })?;
    steps.push(match poller.wait(4) {
        Ok(_) => check(
            "rdma_read",
            mr_a.to_vec(0, LEN)? == pattern2,
            format!("{LEN} bytes read"),
        ),
        Err(e) => check("rdma_read", false, e),
    });

    // 4. Atomics on B's first word: 10 fetch-and-adds, then a compare-and-swap that hits and
    // one that misses.
    mr_b.write_at(0, &0u64.to_ne_bytes())?;
    // Aligned offsets: read_u64 cannot fail here.
    let word = |mr: &MemoryRegion, at: usize| mr.read_u64(at).unwrap_or(u64::MAX);
    let mut fetched = Vec::new();
    let mut atomic_err = None;
    for i in 0..10u64 {
        a.post_send(&SendRequest {
            wr_id: 100 + i,
            op: SendOp::FetchAdd {
                remote_addr: mr_b.addr(),
                rkey: mr_b.rkey(),
                add: 1,
            },
            sges: vec![mr_a.sge(8, 8)?],
            signaled: true,
            inline: false,
        })?;
        match poller.wait(100 + i) {
            Ok(_) => fetched.push(word(&mr_a, 8)),
            Err(e) => {
                atomic_err = Some(e);
                break;
            }
        }
    }
    steps.push(match atomic_err {
        None => check(
            "fetch_add",
            fetched == (0..10).collect::<Vec<u64>>() && word(&mr_b, 0) == 10,
            format!("fetched {fetched:?}, final {}", word(&mr_b, 0)),
        ),
        Some(e) => check("fetch_add", false, e),
    });
    let mut cas = |wr_id: u64, compare: u64, swap: u64| -> Result<u64, String> {
        a.post_send(&SendRequest {
            wr_id,
            op: SendOp::CompareSwap {
                remote_addr: mr_b.addr(),
                rkey: mr_b.rkey(),
                compare,
                swap,
            },
            sges: vec![mr_a.sge(16, 8).map_err(|e| e.to_string())?],
            signaled: true,
            inline: false,
        })
        .map_err(|e| e.to_string())?;
        poller.wait(wr_id).map(|_| word(&mr_a, 16))
    };
    let hit = cas(200, 10, 42);
    let miss = cas(201, 10, 99);
    steps.push(match (hit, miss) {
        (Ok(h), Ok(m)) => check(
            "compare_swap",
            h == 10 && m == 42 && word(&mr_b, 0) == 42,
            format!("old values {h} then {m}, final {}", word(&mr_b, 0)),
        ),
        (Err(e), _) | (_, Err(e)) => check("compare_swap", false, e),
    });

    // 5. A shared receive queue, with completions signalled through a completion channel: a
    // third and fourth QP, the receiver's receives posted to the SRQ, the CQ armed and waited on.
    steps.push(srq_and_channel(
        &ctx,
        &pd,
        port,
        &params,
        &addr_of(attr.lid, gid.gid),
        caps,
        cfg.timeout,
    )?);

    // 6. The udcm and oob CPCs end to end: two services on this port exchange Hellos (UD
    // datagrams; the TCP side channel on loopback), each side creates and connects one RC
    // queue pair, and a message crosses the new connection.
    steps.push(udcm_loopback(&ctx, port, gid_index, caps, cfg.timeout));
    steps.push(oob_loopback(&ctx, port, gid_index, caps, cfg.timeout));
    steps.push(rdmacm_loopback(
        &ctx,
        port,
        gid_index,
        gid.gid,
        caps,
        cfg.timeout,
    ));

    // 7. Ping-pong latency (informational; never a pass/fail criterion).
    let latency_us = ping_pong(&a, &b, &mr_a, &mr_b, cfg.iterations, &mut poller).ok();

    Ok(SelftestReport {
        device: ctx.name().to_string(),
        port,
        gid_index,
        path_mtu_bytes: 128u32 << attr.active_mtu,
        steps,
        latency_us,
    })
}

fn addr_of(lid: u16, gid: [u8; 16]) -> impl Fn(&QueuePair) -> RemoteAddress {
    move |qp: &QueuePair| RemoteAddress {
        qp_num: qp.qp_num(),
        psn: 0,
        lid,
        gid: Some(gid),
    }
}

fn srq_and_channel(
    ctx: &Context,
    pd: &ProtectionDomain,
    port: u8,
    params: &RcParams,
    addr: &impl Fn(&QueuePair) -> RemoteAddress,
    caps: QpCaps,
    timeout: Duration,
) -> Result<Step, SelftestError> {
    let channel = CompletionChannel::new(ctx)?;
    let cq = CompletionQueue::new(ctx, 64, Some(&channel))?;
    let srq = SharedReceiveQueue::new(pd, 16, 1)?;
    let sender = QueuePair::new(
        pd,
        &QpInitAttrs {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            caps,
            sq_sig_all: false,
        },
    )?;
    let receiver = QueuePair::new(
        pd,
        &QpInitAttrs {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: Some(&srq),
            caps,
            sq_sig_all: false,
        },
    )?;
    for qp in [&sender, &receiver] {
        qp.to_init(port, 0, Access::ALL)?;
    }
    sender.connect_rc(&addr(&receiver), params)?;
    receiver.connect_rc(&addr(&sender), params)?;
    let mut src = MemoryRegion::alloc(pd, 256, Access::ALL)?;
    let dst = MemoryRegion::alloc(pd, 256 * 4, Access::ALL)?;
    for i in 0..4u64 {
        srq.post_recv(&RecvRequest {
            wr_id: 10 + i,
            sges: vec![dst.sge(i as usize * 256, 256)?],
        })?;
    }
    let msg = b"through the shared receive queue";
    src.write_at(0, msg)?;
    cq.req_notify(false)?;
    sender.post_send(&SendRequest {
        wr_id: 1,
        op: SendOp::Send,
        sges: vec![src.sge(0, msg.len())?],
        signaled: true,
        inline: false,
    })?;
    // The channel fires once the CQ has a completion; wait on it in a thread so a lost event
    // fails the step instead of hanging the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let ch = channel.clone();
    std::thread::spawn(move || {
        let _ = tx.send(ch.wait().map_err(|e| e.to_string()));
    });
    let woke = match rx.recv_timeout(timeout) {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            return Ok(check(
                "srq_channel",
                false,
                format!("completion channel: {e}"),
            ))
        }
        Err(_) => {
            return Ok(check(
                "srq_channel",
                false,
                format!("completion channel did not fire within {timeout:?}"),
            ))
        }
    };
    let mut poller = Poller {
        cq: &cq,
        timeout,
        pending: Vec::new(),
    };
    let (recv, sent) = (poller.wait(10), poller.wait(1));
    Ok(match (recv, sent) {
        (Ok(r), Ok(_)) => check(
            "srq_channel",
            woke && dst.to_vec(0, msg.len())? == msg
                && r.byte_len as usize == msg.len()
                && r.qp_num == receiver.qp_num(),
            format!(
                "{} bytes received through the SRQ on qp {}, channel woke",
                r.byte_len, r.qp_num
            ),
        ),
        (Err(e), _) | (_, Err(e)) => check("srq_channel", false, e),
    })
}

fn udcm_loopback(ctx: &Context, port: u8, gid_index: u32, caps: QpCaps, timeout: Duration) -> Step {
    let run = || -> Result<String, String> {
        use openib_cpc::{Connector, LocalPort, Retry, UdcmService};
        let e = |e: openib_sys::Error| e.to_string();
        let (lp0, lp1) = (
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
        );
        let (ud0, ud1) = (
            UdcmService::new(&lp0).map_err(e)?,
            UdcmService::new(&lp1).map_err(e)?,
        );
        let (a0, a1) = (ud0.address(), ud1.address());
        let mut c0 = Connector::new(0, lp0.clone(), ud0, Retry::default());
        let mut c1 = Connector::new(1, lp1.clone(), ud1, Retry::default());
        c0.add_peer(1, a1);
        c1.add_peer(0, a0);
        connect_and_send(c0, c1, &lp0, &lp1, timeout)
    };
    let r = run();
    check("udcm_connect", r.is_ok(), r.unwrap_or_else(|e| e))
}

fn oob_loopback(ctx: &Context, port: u8, gid_index: u32, caps: QpCaps, timeout: Duration) -> Step {
    let run = || -> Result<String, String> {
        use openib_cpc::{Connector, LocalPort, OobService, Retry};
        let e = |e: openib_sys::Error| e.to_string();
        let (lp0, lp1) = (
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
        );
        let lo = std::net::IpAddr::from([127, 0, 0, 1]);
        let (s0, s1) = (
            OobService::bind(lo).map_err(e)?,
            OobService::bind(lo).map_err(e)?,
        );
        let (a0, a1) = (s0.address(), s1.address());
        let mut c0 = Connector::new(0, lp0.clone(), s0, Retry::default());
        let mut c1 = Connector::new(1, lp1.clone(), s1, Retry::default());
        c0.add_peer(1, a1);
        c1.add_peer(0, a0);
        connect_and_send(c0, c1, &lp0, &lp1, timeout)
    };
    let r = run();
    check("oob_connect", r.is_ok(), r.unwrap_or_else(|e| e))
}

fn rdmacm_loopback(
    ctx: &Context,
    port: u8,
    gid_index: u32,
    gid: [u8; 16],
    caps: QpCaps,
    timeout: Duration,
) -> Step {
    // rdmacm addresses ports by IP: the IPv4 address an IPv4-mapped GID carries.
    let Some(ip) = (gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff])
        .then(|| std::net::IpAddr::from([gid[12], gid[13], gid[14], gid[15]]))
    else {
        return check(
            "rdmacm_connect",
            true,
            "skipped: GID index has no IPv4 address (rdmacm needs IPoIB or RoCE with an IP)",
        );
    };
    let run = || -> Result<String, String> {
        use openib_cpc::{LocalPort, RdmacmService};
        let e = |e: openib_sys::Error| e.to_string();
        let (lp0, lp1) = (
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
            LocalPort::open(ctx, port, gid_index, 64, caps).map_err(e)?,
        );
        let mut s0 = RdmacmService::bind(0, &lp0, ip).map_err(e)?;
        let mut s1 = RdmacmService::bind(1, &lp1, ip).map_err(e)?;
        s0.add_peer(1, s1.address());
        s1.add_peer(0, s0.address());
        let start = Instant::now();
        // Both sides start at once: exactly one connection must result.
        s0.connect(1, 0, start);
        s1.connect(0, 0, start);
        let (mut e0, mut e1) = (Vec::new(), Vec::new());
        while e0.is_empty() || e1.is_empty() {
            let now = Instant::now();
            s0.progress(now).map_err(e)?;
            s1.progress(now).map_err(e)?;
            e0.extend(s0.take_established());
            e1.extend(s1.take_established());
            if let Some((peer, _, err)) =
                s0.take_failed().into_iter().chain(s1.take_failed()).next()
            {
                return Err(format!("connection to rank {peer} failed: {err}"));
            }
            if now.duration_since(start) > timeout {
                return Err(format!("rdmacm did not connect within {timeout:?}"));
            }
        }
        let connect_us = start.elapsed().as_secs_f64() * 1e6;
        // Give a duplicate connection the chance to show up.
        let settle = Instant::now();
        while settle.elapsed() < Duration::from_millis(300) {
            s0.progress(Instant::now()).map_err(e)?;
            s1.progress(Instant::now()).map_err(e)?;
            e0.extend(s0.take_established());
            e1.extend(s1.take_established());
        }
        if e0.len() != 1 || e1.len() != 1 {
            return Err(format!(
                "a simultaneous connect made {} + {} connections, not one",
                e0.len(),
                e1.len()
            ));
        }
        let (q0, q1) = (&e0[0], &e1[0]);
        if q0.remote.qp_num != q1.qp.qp_num() || q1.remote.qp_num != q0.qp.qp_num() {
            return Err(format!(
                "the two sides disagree: qp {} -> {}, qp {} -> {}",
                q0.qp.qp_num(),
                q0.remote.qp_num,
                q1.qp.qp_num(),
                q1.remote.qp_num
            ));
        }
        send_and_check(
            &q0.qp,
            &q1.qp,
            &lp0,
            &lp1,
            b"over an rdmacm-made connection",
            timeout,
        )?;
        Ok(format!("simultaneous connect on {ip}: one connection, qp {} <-> qp {} in {connect_us:.0} us, message delivered", q0.qp.qp_num(), q1.qp.qp_num()))
    };
    let r = run();
    check("rdmacm_connect", r.is_ok(), r.unwrap_or_else(|e| e))
}

/// Connects rank 0 to rank 1 through their connectors, then sends one message 0 -> 1 over
/// the new RC connection and checks it.
fn connect_and_send<T: openib_cpc::HelloTransport>(
    mut c0: openib_cpc::Connector<T>,
    mut c1: openib_cpc::Connector<T>,
    lp0: &openib_cpc::LocalPort,
    lp1: &openib_cpc::LocalPort,
    timeout: Duration,
) -> Result<String, String> {
    let e = |e: openib_sys::Error| e.to_string();
    let start = Instant::now();
    c0.connect(1, 0, start);
    let (mut e0, mut e1) = (Vec::new(), Vec::new());
    while e0.is_empty() || e1.is_empty() {
        let now = Instant::now();
        c0.progress(now).map_err(e)?;
        c1.progress(now).map_err(e)?;
        e0.extend(c0.take_established());
        e1.extend(c1.take_established());
        if let Some((peer, _, err)) = c0.take_failed().into_iter().chain(c1.take_failed()).next() {
            return Err(format!("connection to rank {peer} failed: {err}"));
        }
        if now.duration_since(start) > timeout {
            return Err(format!("handshake did not finish within {timeout:?}"));
        }
    }
    let connect_us = start.elapsed().as_secs_f64() * 1e6;
    let (q0, q1) = (&e0[0], &e1[0]);
    if q0.remote.qp_num != q1.local.qp_num || q1.remote.qp_num != q0.local.qp_num {
        return Err(format!(
            "the two sides disagree: {:?}/{:?} vs {:?}/{:?}",
            q0.local, q0.remote, q1.local, q1.remote
        ));
    }
    send_and_check(
        &q0.qp,
        &q1.qp,
        lp0,
        lp1,
        b"over a CPC-made connection",
        timeout,
    )?;
    Ok(format!(
        "qp {} <-> qp {} in {connect_us:.0} us, message delivered",
        q0.local.qp_num, q1.local.qp_num
    ))
}

/// Sends `msg` from `a` (on `lp0`) to `b` (on `lp1`) over their connection and checks it.
fn send_and_check(
    a: &QueuePair,
    b: &QueuePair,
    lp0: &openib_cpc::LocalPort,
    lp1: &openib_cpc::LocalPort,
    msg: &[u8],
    timeout: Duration,
) -> Result<(), String> {
    let e = |e: openib_sys::Error| e.to_string();
    let mut src = MemoryRegion::alloc(&lp0.pd, 64, Access::ALL).map_err(e)?;
    let dst = MemoryRegion::alloc(&lp1.pd, 64, Access::ALL).map_err(e)?;
    src.write_at(0, msg).map_err(e)?;
    b.post_recv(&RecvRequest {
        wr_id: 7,
        sges: vec![dst.sge(0, 64).map_err(e)?],
    })
    .map_err(e)?;
    a.post_send(&SendRequest {
        wr_id: 8,
        op: SendOp::Send,
        sges: vec![src.sge(0, msg.len()).map_err(e)?],
        signaled: true,
        inline: false,
    })
    .map_err(e)?;
    Poller {
        cq: &lp1.recv_cq,
        timeout,
        pending: Vec::new(),
    }
    .wait(7)?;
    Poller {
        cq: &lp0.send_cq,
        timeout,
        pending: Vec::new(),
    }
    .wait(8)?;
    if dst.to_vec(0, msg.len()).map_err(e)? != msg {
        return Err("the message arrived corrupted".into());
    }
    Ok(())
}

fn check(name: &'static str, ok: bool, detail: impl Into<String>) -> Step {
    Step {
        name,
        ok,
        detail: detail.into(),
    }
}

fn ping_pong(
    a: &QueuePair,
    b: &QueuePair,
    mr_a: &MemoryRegion,
    mr_b: &MemoryRegion,
    iters: u32,
    poller: &mut Poller<'_>,
) -> Result<f64, String> {
    let e = |e: openib_sys::Error| e.to_string();
    if iters == 0 {
        return Err("no iterations".into());
    }
    let start = Instant::now();
    for i in 0..iters as u64 {
        let base = 1_000 + i * 4;
        b.post_recv(&RecvRequest {
            wr_id: base,
            sges: vec![mr_b.sge(1024, 8).map_err(e)?],
        })
        .map_err(e)?;
        a.post_recv(&RecvRequest {
            wr_id: base + 1,
            sges: vec![mr_a.sge(1024, 8).map_err(e)?],
        })
        .map_err(e)?;
        a.post_send(&SendRequest {
            wr_id: base + 2,
            op: SendOp::Send,
            sges: vec![mr_a.sge(0, 8).map_err(e)?],
            signaled: true,
            inline: true,
        })
        .map_err(e)?;
        poller.wait(base)?;
        b.post_send(&SendRequest {
            wr_id: base + 3,
            op: SendOp::Send,
            sges: vec![mr_b.sge(0, 8).map_err(e)?],
            signaled: true,
            inline: true,
        })
        .map_err(e)?;
        poller.wait(base + 1)?;
        poller.wait(base + 2)?;
        poller.wait(base + 3)?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0)
}

/// Waits for specific work completions on a shared CQ, keeping the others it sees.
struct Poller<'a> {
    cq: &'a CompletionQueue,
    timeout: Duration,
    pending: Vec<WorkCompletion>,
}

impl Poller<'_> {
    fn wait(&mut self, wr_id: u64) -> Result<WorkCompletion, String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.pending.iter().position(|w| w.wr_id == wr_id) {
                let wc = self.pending.swap_remove(i);
                return if wc.is_success() {
                    Ok(wc)
                } else {
                    Err(format!(
                        "work request {wr_id} completed with error: {} (vendor error {:#x})",
                        wc.status_str(),
                        wc.vendor_err
                    ))
                };
            }
            self.cq
                .poll(&mut self.pending, 32)
                .map_err(|e| e.to_string())?;
            if Instant::now() > deadline {
                return Err(format!(
                    "no completion for work request {wr_id} within {:?}",
                    self.timeout
                ));
            }
        }
    }
}

fn pick_port(cfg: &SelftestConfig) -> Result<(Context, u8), SelftestError> {
    let list = openib_sys::devices()?;
    let mut seen = Vec::new();
    for info in list.iter() {
        let name = info.name();
        if cfg.device.as_ref().is_some_and(|d| *d != name) {
            seen.push(name);
            continue;
        }
        let ctx = info.open()?;
        let nports = ctx.query_device()?.phys_port_cnt;
        for port in 1..=nports {
            if cfg.port.is_some_and(|p| p != port) {
                continue;
            }
            let attr = ctx.query_port(port)?;
            if attr.state == 4 {
                return Ok((ctx, port));
            }
            if cfg.port == Some(port) {
                return Err(SelftestError::Setup(format!(
                    "{name} port {port} is not ACTIVE (state {})",
                    attr.state
                )));
            }
        }
        seen.push(name);
    }
    Err(SelftestError::Setup(match &cfg.device {
        Some(d) if !seen.contains(d) => format!(
            "no device named {d} (devices: {})",
            if seen.is_empty() {
                "none".into()
            } else {
                seen.join(", ")
            }
        ),
        _ => format!(
            "no ACTIVE port found (devices: {})",
            if seen.is_empty() {
                "none".into()
            } else {
                seen.join(", ")
            }
        ),
    }))
}

fn pick_gid(ctx: &Context, port: u8, table_len: i32, ethernet: bool) -> Result<u32, SelftestError> {
    if !ethernet {
        return Ok(0);
    }
    let table = ctx.gid_table(port, table_len)?;
    let v4_mapped = |g: &[u8; 16]| g[..10] == [0; 10] && g[10..12] == [0xff, 0xff];
    Ok(table
        .iter()
        .find(|e| e.gid_type == 2 && v4_mapped(&e.gid))
        .or_else(|| table.iter().find(|e| v4_mapped(&e.gid)))
        .or(table.first())
        .map(|e| e.index)
        .unwrap_or(0))
}
