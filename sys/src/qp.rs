//! Queue pairs (`ibv_create_qp`, `ibv_modify_qp`, `ibv_post_send`, `ibv_post_recv`).

use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi::verbs as v;
use crate::library::verbs;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use crate::wr::{raw_sges, RecvRequest, SendOp, SendRequest, Sge};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

impl QpType {
    fn raw(self) -> u32 {
        match self {
            QpType::Rc => v::IBV_QPT_RC,
            QpType::Uc => v::IBV_QPT_UC,
            QpType::Ud => v::IBV_QPT_UD,
        }
    }
}

/// Queue sizes requested at creation (the provider may round up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        }
    }
}

/// Creation attributes of a queue pair.
pub struct QpInitAttrs<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a CompletionQueue,
    pub recv_cq: &'a CompletionQueue,
    pub srq: Option<&'a SharedReceiveQueue>,
    pub caps: QpCaps,
    /// Signal a completion for every send (else only for requests asking for one).
    pub sq_sig_all: bool,
}

/// QP states (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
    Other(u32),
}

impl QpState {
    pub fn from_raw(v: u32) -> QpState {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            n => QpState::Other(n),
        }
    }
}

/// A queue pair. Holds its PD, CQs and SRQ alive.
pub struct QueuePair {
    raw: *mut v::ibv_qp,
    _pd: ProtectionDomain,
    _send_cq: CompletionQueue,
    _recv_cq: CompletionQueue,
    _srq: Option<SharedReceiveQueue>,
    caps: QpCaps,
}

// SAFETY: QPs are thread-safe verbs objects; providers lock their queues.
unsafe impl Send for QueuePair {}
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Ok(lib) = verbs() {
            // SAFETY: live QP, destroyed once, before the PD/CQs we hold.
            let rc = unsafe { lib.ibv_destroy_qp(self.raw) };
            if rc != 0 {
                tracing::warn!(rc, "ibv_destroy_qp failed");
            }
        }
    }
}

/// `ibv_qp_attr`, plain data (no pointers): fill what the transition needs and name it in the mask.
pub type QpAttr = v::ibv_qp_attr;
pub use v::ibv_ah_attr as AhAttr;

/// Receive requests handed to the provider in one call by [`QueuePair::post_recv_sges`].
pub const RECV_CHAIN: usize = 16;

impl QueuePair {
    pub fn new(pd: &ProtectionDomain, attrs: &QpInitAttrs<'_>) -> Result<QueuePair> {
        let lib = verbs()?;
        let mut init = v::ibv_qp_init_attr {
            send_cq: attrs.send_cq.raw(),
            recv_cq: attrs.recv_cq.raw(),
            srq: attrs.srq.map(|s| s.raw()).unwrap_or(std::ptr::null_mut()),
            cap: v::ibv_qp_cap {
                max_send_wr: attrs.caps.max_send_wr,
                max_recv_wr: attrs.caps.max_recv_wr,
                max_send_sge: attrs.caps.max_send_sge,
                max_recv_sge: attrs.caps.max_recv_sge,
                max_inline_data: attrs.caps.max_inline_data,
            },
            qp_type: attrs.qp_type.raw(),
            sq_sig_all: attrs.sq_sig_all as i32,
            ..Default::default()
        };
        // SAFETY: every pointer in `init` is live (held by the QueuePair we return).
        let raw = unsafe { lib.ibv_create_qp(pd.raw(), &mut init) };
        if raw.is_null() {
            return Err(Error::last_os(
                "ibv_create_qp",
                format!("{:?} on {}", attrs.qp_type, pd.context().name()),
            ));
        }
        let c = init.cap;
        Ok(QueuePair {
            raw,
            _pd: pd.clone(),
            _send_cq: attrs.send_cq.clone(),
            _recv_cq: attrs.recv_cq.clone(),
            _srq: attrs.srq.cloned(),
            caps: QpCaps {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
        })
    }

    /// The QP number peers address.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: live QP.
        unsafe { (*self.raw).qp_num }
    }

    /// The capacities the provider granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The current state (as last cached by libibverbs).
    pub fn state(&self) -> QpState {
        // SAFETY: live QP.
        QpState::from_raw(unsafe { (*self.raw).state })
    }

    /// `ibv_modify_qp` with the attributes named by `mask` (`IBV_QP_*`).
    pub fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        let lib = verbs()?;
        let mut a = *attr;
        // SAFETY: `a` is plain data; the provider validates the transition.
        let rc = unsafe { lib.ibv_modify_qp(self.raw, &mut a, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc(
                "ibv_modify_qp",
                rc,
                format!(
                    "to state {:?}, mask {mask:#x}",
                    QpState::from_raw(attr.qp_state)
                ),
            ));
        }
        Ok(())
    }

    /// Posts one send-queue request (the body of the inline `ibv_post_send`).
    pub fn post_send(&self, req: &SendRequest) -> Result<()> {
        let mut sges = raw_sges(&req.sges);
        self.post_send_list(req.wr_id, req.op, &mut sges, req.signaled, req.inline)
    }

    /// [`QueuePair::post_send`] of a request with one entry, without allocating (the hot path
    /// of a transport).
    pub fn post_send_sge(
        &self,
        wr_id: u64,
        op: SendOp,
        sge: &Sge,
        signaled: bool,
        inline: bool,
    ) -> Result<()> {
        self.post_send_list(wr_id, op, &mut [sge.raw()], signaled, inline)
    }

    /// Posts a send of `data` copied into the request itself (`IBV_SEND_INLINE`): no memory
    /// region and no bounce copy, the provider reads the bytes before it returns. Only for
    /// ops that carry a payload (send, send with immediate, RDMA write, with or without
    /// immediate) and for `data` up to the QP's `max_inline_data`; anything else is an
    /// `InvalidArgument` error naming what was wrong, and nothing is posted.
    pub fn post_send_inline(
        &self,
        wr_id: u64,
        op: SendOp,
        data: &[u8],
        signaled: bool,
    ) -> Result<()> {
        let max = self.caps.max_inline_data as usize;
        if data.len() > max {
            return Err(Error::InvalidArgument {
                verb: "ibv_post_send",
                what: format!(
                    "inline payload of {} bytes on qp {} (its max_inline_data is {max})",
                    data.len(),
                    self.qp_num()
                ),
            });
        }
        if !matches!(
            op,
            SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::RdmaWrite { .. }
                | SendOp::RdmaWriteWithImm { .. }
        ) {
            return Err(Error::InvalidArgument {
                verb: "ibv_post_send",
                what: format!("{op:?} carries no inline payload"),
            });
        }
        // The key is not looked at for an inline entry: the CPU copies the bytes.
        let mut sge = [v::ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32,
            lkey: 0,
        }];
        self.post_send_list(wr_id, op, &mut sge, signaled, true)
    }

    /// Posts one request. Every entry of `sges` lies inside live registered memory, or
    /// `inline` is set and it lies inside memory borrowed for the call.
    fn post_send_list(
        &self,
        wr_id: u64,
        op: SendOp,
        sges: &mut [v::ibv_sge],
        signaled: bool,
        inline: bool,
    ) -> Result<()> {
        let mut wr = v::ibv_send_wr {
            wr_id,
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
            send_flags: (if signaled { v::IBV_SEND_SIGNALED } else { 0 })
                | (if inline { v::IBV_SEND_INLINE } else { 0 }),
            ..Default::default()
        };
        match op {
            SendOp::Send => wr.opcode = v::IBV_WR_SEND,
            SendOp::SendWithImm { imm } => {
                wr.opcode = v::IBV_WR_SEND_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
            SendOp::RdmaWrite { remote_addr, rkey } => {
                wr.opcode = v::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = v::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr.rdma = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                wr.opcode = v::IBV_WR_RDMA_READ;
                wr.wr.rdma = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                wr.opcode = v::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                wr.opcode = v::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
        }
        // SAFETY: `wr` and `sges` live across the call; every SGE lies inside a live MR (see
        // `Sge`), or the request is inline and its SGE inside a slice borrowed for the call,
        // which the provider copies before it returns.
        unsafe { self.post_send_raw(&mut wr, format_args!("qp {}", self.qp_num())) }
    }

    /// The body of the inline `ibv_post_send`: hands one request to the provider, which
    /// copies it before returning.
    ///
    /// # Safety
    /// Every pointer in `wr` (its SGE list, an address handle) must be valid for the call,
    /// and every SGE must lie inside live registered memory (an inline request's: inside
    /// memory valid for reads during the call).
    unsafe fn post_send_raw(
        &self,
        wr: &mut v::ibv_send_wr,
        context: std::fmt::Arguments<'_>,
    ) -> Result<()> {
        let mut bad: *mut v::ibv_send_wr = std::ptr::null_mut();
        let ctx = (*self.raw).context;
        let f = (*ctx).ops.post_send.ok_or_else(|| Error::InvalidArgument {
            verb: "ibv_post_send",
            what: "provider has no post_send".into(),
        })?;
        let rc = f(self.raw, wr, &mut bad);
        if rc != 0 {
            return Err(Error::from_rc("ibv_post_send", rc, context));
        }
        Ok(())
    }

    /// Posts one receive request (the body of the inline `ibv_post_recv`).
    pub fn post_recv(&self, req: &RecvRequest) -> Result<()> {
        let mut sges = raw_sges(&req.sges);
        self.post_recv_list(req.wr_id, &mut sges)
    }

    /// [`QueuePair::post_recv`] of one entry, without allocating.
    pub fn post_recv_sge(&self, wr_id: u64, sge: &Sge) -> Result<()> {
        self.post_recv_list(wr_id, &mut [sge.raw()])
    }

    /// Posts one receive request per `(wr_id, sge)`, in order, as chains of up to
    /// [`RECV_CHAIN`] requests (one provider call each), without allocating. On an error the
    /// requests before the failed chain are posted and none after it.
    pub fn post_recv_sges(&self, reqs: &[(u64, Sge)]) -> Result<()> {
        for chunk in reqs.chunks(RECV_CHAIN) {
            let mut sges = [v::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; RECV_CHAIN];
            // SAFETY: `ibv_recv_wr` is plain data; every field used is set below.
            let mut wrs: [v::ibv_recv_wr; RECV_CHAIN] = unsafe { std::mem::zeroed() };
            let n = chunk.len();
            for (i, (_, sge)) in chunk.iter().enumerate() {
                sges[i] = sge.raw();
            }
            // Pointers into both arrays come from one base pointer each, taken after the
            // arrays were written, and neither array is touched through a reference after.
            let sge_base = sges.as_mut_ptr();
            let wr_base = wrs.as_mut_ptr();
            for (i, (wr_id, _)) in chunk.iter().enumerate() {
                // SAFETY: `i < n <= RECV_CHAIN`: inside both arrays.
                unsafe {
                    let wr = &mut *wr_base.add(i);
                    wr.wr_id = *wr_id;
                    wr.sg_list = sge_base.add(i);
                    wr.num_sge = 1;
                    wr.next = if i + 1 < n {
                        wr_base.add(i + 1)
                    } else {
                        std::ptr::null_mut()
                    };
                }
            }
            // SAFETY: the chain and its SGEs live across the call and every SGE lies inside a
            // live MR (see `Sge`).
            unsafe {
                self.post_recv_raw(
                    wr_base,
                    format_args!("qp {} (a chain of {n})", self.qp_num()),
                )?
            };
        }
        Ok(())
    }

    /// The body of the inline `ibv_post_recv`: hands a chain of requests to the provider,
    /// which copies them before returning.
    ///
    /// # Safety
    /// `wr` must point to a valid chain of requests whose pointers (next, SGE lists) are
    /// valid for the call, and every SGE must lie inside live registered memory.
    unsafe fn post_recv_raw(
        &self,
        wr: *mut v::ibv_recv_wr,
        context: std::fmt::Arguments<'_>,
    ) -> Result<()> {
        let mut bad: *mut v::ibv_recv_wr = std::ptr::null_mut();
        let ctx = (*self.raw).context;
        let f = (*ctx).ops.post_recv.ok_or_else(|| Error::InvalidArgument {
            verb: "ibv_post_recv",
            what: "provider has no post_recv".into(),
        })?;
        let rc = f(self.raw, wr, &mut bad);
        if rc != 0 {
            return Err(Error::from_rc("ibv_post_recv", rc, context));
        }
        Ok(())
    }

    fn post_recv_list(&self, wr_id: u64, sges: &mut [v::ibv_sge]) -> Result<()> {
        let mut wr = v::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
        };
        // SAFETY: as for post_send.
        unsafe { self.post_recv_raw(&mut wr, format_args!("qp {}", self.qp_num())) }
    }
}

/// Where an RC queue pair's remote end is: what a CPC exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddress {
    pub qp_num: u32,
    /// The first packet sequence number the remote sends (our receive PSN).
    pub psn: u32,
    /// The remote port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The remote GID; `Some` routes with a GRH (always on RoCE, across IB subnets).
    pub gid: Option<[u8; 16]>,
}

/// Parameters of the RTR and RTS transitions of an RC queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcParams {
    pub port: u8,
    /// Our GID index (the source GID of the GRH).
    pub sgid_index: u8,
    /// Path MTU as the verbs enum (the smaller of the two ports' active MTUs).
    pub path_mtu: u32,
    /// Our send PSN.
    pub sq_psn: u32,
    pub service_level: u8,
    /// Local ACK timeout exponent (4.096 us * 2^timeout); 14 is about 67 ms.
    pub timeout: u8,
    /// Transport retries before a completion error (at most 7; rxe takes 7 as forever, see
    /// the default).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (7 = forever).
    pub rnr_retry: u8,
    /// Outstanding RDMA reads/atomics we issue and accept.
    pub max_rd_atomic: u8,
    /// Minimum RNR NAK timer code (12 is about 0.64 ms).
    pub min_rnr_timer: u8,
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            port: 1,
            sgid_index: 0,
            path_mtu: v::IBV_MTU_1024,
            sq_psn: 0,
            service_level: 0,
            timeout: 14,
            // 6, not 7: rxe never counts a retry count of 7 down (as the IBTA has it for
            // rnr_retry only), so a request to a vanished peer would be retried forever there.
            retry_cnt: 6,
            rnr_retry: 7,
            max_rd_atomic: 4,
            min_rnr_timer: 12,
        }
    }
}

impl QueuePair {
    /// RESET -> INIT on `port`, allowing the remote the given access.
    pub fn to_init(&self, port: u8, pkey_index: u16, access: crate::Access) -> Result<()> {
        let attr = QpAttr {
            qp_state: v::IBV_QPS_INIT,
            pkey_index,
            port_num: port,
            qp_access_flags: access.0,
            ..Default::default()
        };
        self.modify(
            &attr,
            v::IBV_QP_STATE | v::IBV_QP_PKEY_INDEX | v::IBV_QP_PORT | v::IBV_QP_ACCESS_FLAGS,
        )
    }

    /// Sets the remote access of a QP in INIT (an INIT -> INIT transition).
    pub fn set_access(&self, access: crate::Access) -> Result<()> {
        let attr = QpAttr {
            qp_state: v::IBV_QPS_INIT,
            qp_access_flags: access.0,
            ..Default::default()
        };
        self.modify(&attr, v::IBV_QP_STATE | v::IBV_QP_ACCESS_FLAGS)
    }

    /// INIT -> RTR toward `remote`, then RTR -> RTS: an RC queue pair ready to send.
    pub fn connect_rc(&self, remote: &RemoteAddress, p: &RcParams) -> Result<()> {
        let mut ah = v::ibv_ah_attr {
            dlid: remote.lid,
            sl: p.service_level,
            port_num: p.port,
            ..Default::default()
        };
        if let Some(gid) = remote.gid {
            ah.is_global = 1;
            ah.grh.dgid = v::ibv_gid { raw: gid };
            ah.grh.sgid_index = p.sgid_index;
            ah.grh.hop_limit = 64;
        }
        let rtr = QpAttr {
            qp_state: v::IBV_QPS_RTR,
            path_mtu: p.path_mtu,
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn,
            max_dest_rd_atomic: p.max_rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ah_attr: ah,
            ..Default::default()
        };
        self.modify(
            &rtr,
            v::IBV_QP_STATE
                | v::IBV_QP_AV
                | v::IBV_QP_PATH_MTU
                | v::IBV_QP_DEST_QPN
                | v::IBV_QP_RQ_PSN
                | v::IBV_QP_MAX_DEST_RD_ATOMIC
                | v::IBV_QP_MIN_RNR_TIMER,
        )?;
        let rts = QpAttr {
            qp_state: v::IBV_QPS_RTS,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            sq_psn: p.sq_psn,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        };
        self.modify(
            &rts,
            v::IBV_QP_STATE
                | v::IBV_QP_TIMEOUT
                | v::IBV_QP_RETRY_CNT
                | v::IBV_QP_RNR_RETRY
                | v::IBV_QP_SQ_PSN
                | v::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// A UD queue pair: RESET -> INIT -> RTR -> RTS on `port` with `qkey`.
    pub fn to_rts_ud(&self, port: u8, pkey_index: u16, qkey: u32) -> Result<()> {
        let init = QpAttr {
            qp_state: v::IBV_QPS_INIT,
            pkey_index,
            port_num: port,
            qkey,
            ..Default::default()
        };
        self.modify(
            &init,
            v::IBV_QP_STATE | v::IBV_QP_PKEY_INDEX | v::IBV_QP_PORT | v::IBV_QP_QKEY,
        )?;
        self.modify(
            &QpAttr {
                qp_state: v::IBV_QPS_RTR,
                ..Default::default()
            },
            v::IBV_QP_STATE,
        )?;
        self.modify(
            &QpAttr {
                qp_state: v::IBV_QPS_RTS,
                sq_psn: 0,
                ..Default::default()
            },
            v::IBV_QP_STATE | v::IBV_QP_SQ_PSN,
        )
    }

    /// Posts a UD send of `sges` to `remote_qpn` through `ah` (signaled).
    pub fn post_send_ud(
        &self,
        wr_id: u64,
        ah: &crate::AddressHandle,
        remote_qpn: u32,
        qkey: u32,
        sges: &[Sge],
    ) -> Result<()> {
        let mut list = raw_sges(sges);
        let mut wr = v::ibv_send_wr {
            wr_id,
            sg_list: list.as_mut_ptr(),
            num_sge: list.len() as i32,
            opcode: v::IBV_WR_SEND,
            send_flags: v::IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.ud = v::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.raw(),
            remote_qpn,
            remote_qkey: qkey,
        };
        // SAFETY: as for post_send; the AH is borrowed for the duration of the post.
        unsafe {
            self.post_send_raw(
                &mut wr,
                format_args!("UD qp {} to qpn {remote_qpn}", self.qp_num()),
            )
        }
    }

    /// Moves the QP to the error state (flushes outstanding requests with errors).
    pub fn to_error(&self) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: v::IBV_QPS_ERR,
                ..Default::default()
            },
            v::IBV_QP_STATE,
        )
    }
}
