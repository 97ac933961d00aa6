//! udcm: the handshake's Hellos travel as UD datagrams between per-port UD queue pairs.
//!
//! Unlike Open MPI's udcm, which refuses Ethernet ports, address handles are built from the
//! peer's GID (with a GRH), so it runs on RoCE as on InfiniBand. The UD QP number is the
//! per-process part of udcm's modex data; LID and GID come from the node blob.

use crate::handshake::Hello;
use crate::rc::LocalPort;
use openib_sys::Region;
use openib_sys::{
    AddressHandle, CompletionQueue, Destination, MemoryRegion, QpCaps, QpInitAttrs, QpType,
    QueuePair, RecvRequest, WorkCompletion,
};
use std::collections::HashMap;

/// The Q_Key of openib's udcm datagrams.
pub const QKEY: u32 = 0x0b1b_0001;
/// UD receives land after a 40-byte GRH.
const GRH: usize = 40;
/// One receive slot: the GRH plus a Hello, rounded up.
const SLOT: usize = 128;
const _: () = assert!(
    GRH + Hello::LEN <= SLOT,
    "a Hello and its GRH must fit a receive slot"
);
const RECV_SLOTS: usize = 64;
const SEND_SLOTS: usize = 16;

/// Where a peer's udcm service listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdAddress {
    pub qpn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
}

/// One port's UD endpoint for handshakes.
pub struct UdcmService {
    port: LocalPort,
    qp: QueuePair,
    cq: CompletionQueue,
    recv: MemoryRegion,
    send: MemoryRegion,
    next_send: usize,
    ahs: HashMap<(u16, [u8; 16]), AddressHandle>,
    completions: Vec<WorkCompletion>,
}

impl UdcmService {
    pub fn new(port: &LocalPort) -> Result<UdcmService, openib_sys::Error> {
        let cq = CompletionQueue::new(&port.ctx, (RECV_SLOTS + SEND_SLOTS) as i32 * 2, None)?;
        let caps = QpCaps {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = QueuePair::new(
            &port.pd,
            &QpInitAttrs {
                qp_type: QpType::Ud,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                caps,
                sq_sig_all: true,
            },
        )?;
        qp.to_rts_ud(port.port, 0, QKEY)?;
        let recv =
            MemoryRegion::alloc(&port.pd, SLOT * RECV_SLOTS, openib_sys::Access::LOCAL_WRITE)?;
        let send =
            MemoryRegion::alloc(&port.pd, SLOT * SEND_SLOTS, openib_sys::Access::LOCAL_WRITE)?;
        let s = UdcmService {
            port: port.clone(),
            qp,
            cq,
            recv,
            send,
            next_send: 0,
            ahs: HashMap::new(),
            completions: Vec::new(),
        };
        for slot in 0..RECV_SLOTS {
            s.post_recv(slot)?;
        }
        Ok(s)
    }

    /// This service's address (its QPN goes into the proc blob).
    pub fn address(&self) -> UdAddress {
        UdAddress {
            qpn: self.qp.qp_num(),
            lid: self.port.lid,
            gid: self.port.gid,
        }
    }

    fn post_recv(&self, slot: usize) -> Result<(), openib_sys::Error> {
        self.qp.post_recv(&RecvRequest {
            wr_id: slot as u64,
            sges: vec![self.recv.sge(slot * SLOT, SLOT)?],
        })
    }

    /// Sends `hello` to `to` (best effort: a lost datagram is retransmitted by the handshake).
    pub fn send(&mut self, to: &UdAddress, hello: &Hello) -> Result<(), openib_sys::Error> {
        let key = (to.lid, to.gid);
        if !self.ahs.contains_key(&key) {
            let dest = Destination {
                port: self.port.port,
                dlid: to.lid,
                dgid: (to.gid != [0; 16]).then_some(to.gid),
                sgid_index: self.port.sgid_index,
                service_level: 0,
            };
            self.ahs
                .insert(key, AddressHandle::new(&self.port.pd, &dest)?);
        }
        let slot = self.next_send;
        self.next_send = (slot + 1) % SEND_SLOTS;
        let bytes = hello.encode();
        self.send.write_at(slot * SLOT, &bytes)?;
        let sge = self.send.sge(slot * SLOT, bytes.len())?;
        self.qp
            .post_send_ud(1 << 32 | slot as u64, &self.ahs[&key], to.qpn, QKEY, &[sge])
    }

    /// Receives the Hellos that arrived (malformed datagrams are dropped and logged).
    pub fn poll(&mut self) -> Result<Vec<Hello>, openib_sys::Error> {
        self.completions.clear();
        self.cq.poll(&mut self.completions, 32)?;
        let mut out = Vec::new();
        for wc in std::mem::take(&mut self.completions) {
            if wc.wr_id >> 32 == 1 {
                if !wc.is_success() {
                    tracing::debug!(status = %wc.status_str(), "udcm send failed");
                }
                continue;
            }
            let slot = wc.wr_id as usize;
            if wc.is_success() {
                let len = (wc.byte_len as usize).saturating_sub(GRH).min(SLOT - GRH);
                let at = slot * SLOT + GRH;
                // A completed receive slot of a local-only region: stable until reposted.
                match Hello::decode(self.recv.local_slice(at, len)?) {
                    Some(h) => out.push(h),
                    None => tracing::debug!(len, "malformed udcm datagram dropped"),
                }
            }
            self.post_recv(slot)?;
        }
        Ok(out)
    }
}
