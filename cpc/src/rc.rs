//! RC queue pairs for one local port: creation and the RTR/RTS transitions every CPC shares.

use crate::handshake::QpAddress;
use openib_sys::{
    Access, CompletionChannel, CompletionQueue, Context, ProtectionDomain, QpCaps, QpInitAttrs,
    QpType, QueuePair, RcParams, RemoteAddress, SharedReceiveQueue,
};
use std::sync::{Arc, OnceLock};

/// The local side of connections on one port: device objects shared by every QP of the port.
#[derive(Clone)]
pub struct LocalPort {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    /// The channel both CQs report to once armed (`req_notify`): a waiting transport sleeps
    /// on it instead of spinning.
    pub channel: CompletionChannel,
    pub srq: Option<SharedReceiveQueue>,
    pub port: u8,
    pub sgid_index: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active MTU (verbs enum).
    pub mtu: u8,
    pub caps: QpCaps,
    /// Timeouts and retries of the connected QPs.
    pub params: RcParams,
    /// Called with every new RC queue pair once it is in INIT, before it can receive (RTR):
    /// the transport posts its receive buffers there, so the peer's first message never meets
    /// an empty receive queue (no receiver-not-ready NAK at start-up). Shared by every clone.
    pub prepare: Arc<OnceLock<PrepareHook>>,
}

/// See [`LocalPort::prepare`].
pub type PrepareHook = Arc<dyn Fn(&QueuePair) -> Result<(), openib_sys::Error> + Send + Sync>;

/// `caps` with the largest inline size, up to the one asked for, that the device grants an RC
/// queue pair: devices do not report their limit (creation fails above it), so this tries the
/// size asked for, then 64 bytes, then none, with a queue pair created and dropped at once.
fn granted_inline(
    pd: &ProtectionDomain,
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
    caps: QpCaps,
) -> QpCaps {
    let wanted = caps.max_inline_data;
    let mut tries = vec![wanted, wanted.min(64), 0];
    tries.dedup();
    for inline in tries {
        let c = QpCaps {
            max_inline_data: inline,
            ..caps
        };
        let attrs = QpInitAttrs {
            qp_type: QpType::Rc,
            send_cq,
            recv_cq,
            srq: None,
            caps: c,
            sq_sig_all: false,
        };
        match QueuePair::new(pd, &attrs) {
            Ok(_) => {
                if inline < wanted {
                    tracing::debug!(wanted, inline, "the device grants less inline data");
                }
                return c;
            }
            Err(e) => tracing::debug!(inline, error = %e, "no RC queue pair with this inline size"),
        }
    }
    caps // creating the connections' queue pairs fails with the device's own error
}

impl LocalPort {
    /// Opens `port` of `ctx` with new PD and CQs (`cqe` entries each), GID index `sgid_index`.
    pub fn open(
        ctx: &Context,
        port: u8,
        sgid_index: u32,
        cqe: i32,
        caps: QpCaps,
    ) -> Result<LocalPort, openib_sys::Error> {
        Self::open_with(ctx, port, sgid_index, cqe, caps, false)
    }

    /// [`LocalPort::open`] with one CQ of `cqe` entries for both the send and the receive
    /// queues (`send_cq` and `recv_cq` are the same queue): one poll takes both kinds of
    /// completion, and the caller sizes it for both.
    pub fn open_one_cq(
        ctx: &Context,
        port: u8,
        sgid_index: u32,
        cqe: i32,
        caps: QpCaps,
    ) -> Result<LocalPort, openib_sys::Error> {
        Self::open_with(ctx, port, sgid_index, cqe, caps, true)
    }

    /// Whether the send and receive queues report to one CQ ([`LocalPort::open_one_cq`]).
    pub fn one_cq(&self) -> bool {
        self.send_cq.same_as(&self.recv_cq)
    }

    fn open_with(
        ctx: &Context,
        port: u8,
        sgid_index: u32,
        cqe: i32,
        caps: QpCaps,
        one_cq: bool,
    ) -> Result<LocalPort, openib_sys::Error> {
        let attr = ctx.query_port(port)?;
        let gid = ctx.query_gid_ex(port, sgid_index)?.ok_or_else(|| {
            openib_sys::Error::InvalidArgument {
                verb: "ibv_query_gid_ex",
                what: format!(
                    "{} port {port} has no GID at index {sgid_index}",
                    ctx.name()
                ),
            }
        })?;
        let pd = ProtectionDomain::new(ctx)?;
        let channel = CompletionChannel::new(ctx)?;
        let send_cq = CompletionQueue::new(ctx, cqe, Some(&channel))?;
        let recv_cq = if one_cq {
            send_cq.clone()
        } else {
            CompletionQueue::new(ctx, cqe, Some(&channel))?
        };
        let caps = granted_inline(&pd, &send_cq, &recv_cq, caps);
        Ok(LocalPort {
            ctx: ctx.clone(),
            pd,
            send_cq,
            recv_cq,
            channel,
            srq: None,
            port,
            sgid_index: sgid_index as u8,
            lid: attr.lid,
            gid: gid.gid,
            mtu: attr.active_mtu as u8,
            caps,
            params: RcParams {
                port,
                sgid_index: sgid_index as u8,
                path_mtu: attr.active_mtu,
                ..Default::default()
            },
            prepare: Arc::new(OnceLock::new()),
        })
    }

    /// A new RC queue pair left in RESET (rdmacm moves it with its own attributes).
    pub fn create_qp_reset(&self) -> Result<QueuePair, openib_sys::Error> {
        QueuePair::new(
            &self.pd,
            &QpInitAttrs {
                qp_type: QpType::Rc,
                send_cq: &self.send_cq,
                recv_cq: &self.recv_cq,
                srq: self.srq.as_ref(),
                caps: self.caps,
                sq_sig_all: false,
            },
        )
    }

    /// A new RC queue pair in INIT, with a random-ish starting PSN.
    pub fn create_qp(&self) -> Result<(QueuePair, QpAddress), openib_sys::Error> {
        let qp = QueuePair::new(
            &self.pd,
            &QpInitAttrs {
                qp_type: QpType::Rc,
                send_cq: &self.send_cq,
                recv_cq: &self.recv_cq,
                srq: self.srq.as_ref(),
                caps: self.caps,
                sq_sig_all: false,
            },
        )?;
        qp.to_init(self.port, 0, Access::ALL)?;
        self.prepare_qp(&qp)?;
        let qp_num = qp.qp_num();
        Ok((
            qp,
            QpAddress {
                qp_num,
                psn: psn_for(qp_num),
                lid: self.lid,
                gid: self.gid,
                mtu: self.mtu,
            },
        ))
    }

    /// Runs the [`LocalPort::prepare`] hook, if set, on a queue pair in INIT.
    pub fn prepare_qp(&self, qp: &QueuePair) -> Result<(), openib_sys::Error> {
        match self.prepare.get() {
            Some(hook) => hook(qp),
            None => Ok(()),
        }
    }

    /// RTR then RTS toward `remote`; the path MTU is the smaller of the two ports' MTUs.
    pub fn connect(
        &self,
        qp: &QueuePair,
        local_psn: u32,
        remote: &QpAddress,
    ) -> Result<(), openib_sys::Error> {
        let params = RcParams {
            sq_psn: local_psn,
            path_mtu: self.mtu.min(remote.mtu) as u32,
            ..self.params
        };
        let gid_routed = remote.gid != [0; 16];
        qp.connect_rc(
            &RemoteAddress {
                qp_num: remote.qp_num,
                psn: remote.psn,
                lid: remote.lid,
                gid: gid_routed.then_some(remote.gid),
            },
            &params,
        )
    }
}

/// A 24-bit starting PSN derived from the QP number and the clock (PSNs only need to differ
/// between incarnations of a QP number).
fn psn_for(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (qpn.wrapping_mul(2_654_435_761) ^ t) & 0x00ff_ffff
}
