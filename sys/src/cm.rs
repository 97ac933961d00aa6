//! librdmacm: event channels and connection identifiers, for the rdmacm CPC.
//!
//! openib creates its queue pairs itself (on its own device context and PD) and hands rdmacm
//! only their numbers (`rdma_conn_param.qp_num`); the QP transitions use the attributes
//! `rdma_init_qp_attr` computes. So no PD or QP of rdmacm's own context is ever needed.

use crate::error::{Error, Result};
use crate::ffi::rdmacm as cm;
use crate::library::rdmacm;
use crate::qp::{QpAttr, QueuePair, RcParams};
use std::net::SocketAddr;
use std::sync::Arc;

struct ChannelInner {
    raw: *mut cm::rdma_event_channel,
}

// SAFETY: an event channel is a file descriptor plus a small struct; librdmacm is thread-safe.
unsafe impl Send for ChannelInner {}
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if let Ok(lib) = rdmacm() {
            // SAFETY: ids on this channel hold an Arc to it, so none is left.
            unsafe { lib.rdma_destroy_event_channel(self.raw) };
        }
    }
}

/// An rdmacm event channel in non-blocking mode.
#[derive(Clone)]
pub struct CmChannel {
    inner: Arc<ChannelInner>,
}

/// A connection identifier. Dropping it destroys the id.
pub struct CmId {
    raw: *mut cm::rdma_cm_id,
    _ch: Arc<ChannelInner>,
}

// SAFETY: as for the channel.
unsafe impl Send for CmId {}
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Ok(lib) = rdmacm() {
            // SAFETY: live id, destroyed once; its events were acknowledged when read.
            unsafe { lib.rdma_destroy_id(self.raw) };
        }
    }
}

/// What an event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    TimewaitExit,
    Other(u32),
}

/// One event, copied out and acknowledged.
pub struct CmEvent {
    pub kind: CmEventKind,
    pub status: i32,
    /// Which id it is for ([`CmId::token`]); for a connect request, the listening id's token.
    pub token: usize,
    /// The new id of a connect request (ours to accept or reject).
    pub new_id: Option<CmId>,
    /// The peer's private data (connect requests and responses).
    pub private_data: Vec<u8>,
    /// The QP number the peer announced (connect requests and responses).
    pub peer_qp_num: u32,
    /// librdmacm's name of the event.
    pub name: String,
}

fn sockaddr(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: an all-zero sockaddr_storage is valid; we fill the variant we use.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

impl CmChannel {
    pub fn new() -> Result<CmChannel> {
        let lib = rdmacm()?;
        // SAFETY: no arguments; NULL reports errno.
        let raw = unsafe { lib.rdma_create_event_channel() };
        if raw.is_null() {
            return Err(Error::last_os("rdma_create_event_channel", ""));
        }
        let inner = Arc::new(ChannelInner { raw });
        // SAFETY: `fd` is the channel's open descriptor.
        unsafe {
            let fd = (*raw).fd;
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(Error::last_os(
                    "fcntl(O_NONBLOCK) on the rdmacm channel",
                    "",
                ));
            }
        }
        Ok(CmChannel { inner })
    }

    /// A new id (reliable connected, `RDMA_PS_TCP`) on this channel.
    pub fn create_id(&self) -> Result<CmId> {
        let lib = rdmacm()?;
        let mut id: *mut cm::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: valid channel and out pointer.
        let rc = unsafe {
            lib.rdma_create_id(
                self.inner.raw,
                &mut id,
                std::ptr::null_mut(),
                cm::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("rdma_create_id", ""));
        }
        Ok(CmId {
            raw: id,
            _ch: self.inner.clone(),
        })
    }

    /// The next event, if one is waiting (never blocks).
    pub fn poll_event(&self) -> Result<Option<CmEvent>> {
        let lib = rdmacm()?;
        let mut ev: *mut cm::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: valid channel (non-blocking) and out pointer.
        let rc = unsafe { lib.rdma_get_cm_event(self.inner.raw, &mut ev) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::io("rdma_get_cm_event", "", err));
        }
        // SAFETY: `ev` is a live event until acknowledged below; the union member read is the
        // one its type says is valid (conn for connect requests/responses).
        let out = unsafe {
            let e = &*ev;
            let kind = match e.event {
                cm::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
                cm::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
                cm::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
                cm::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
                cm::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
                cm::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
                cm::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
                cm::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
                cm::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
                cm::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
                cm::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
                cm::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
                n => CmEventKind::Other(n),
            };
            let (mut private_data, mut peer_qp_num) = (Vec::new(), 0);
            if matches!(
                kind,
                CmEventKind::ConnectRequest
                    | CmEventKind::ConnectResponse
                    | CmEventKind::Established
            ) {
                let conn = e.param.conn.as_ref();
                if !conn.private_data.is_null() {
                    private_data = std::slice::from_raw_parts(
                        conn.private_data as *const u8,
                        conn.private_data_len as usize,
                    )
                    .to_vec();
                }
                peer_qp_num = conn.qp_num;
            }
            let (token, new_id) = if kind == CmEventKind::ConnectRequest {
                (
                    e.listen_id as usize,
                    Some(CmId {
                        raw: e.id,
                        _ch: self.inner.clone(),
                    }),
                )
            } else {
                (e.id as usize, None)
            };
            let name = std::ffi::CStr::from_ptr(lib.rdma_event_str(e.event))
                .to_string_lossy()
                .into_owned();
            CmEvent {
                kind,
                status: e.status,
                token,
                new_id,
                private_data,
                peer_qp_num,
                name,
            }
        };
        // SAFETY: acknowledges the event read above, once.
        unsafe { lib.rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }
}

impl CmId {
    /// Identifies this id in events.
    pub fn token(&self) -> usize {
        self.raw as usize
    }

    pub fn bind(&self, addr: &SocketAddr) -> Result<()> {
        let lib = rdmacm()?;
        let mut ss = sockaddr(addr);
        // SAFETY: valid id; `ss` holds a sockaddr of the family it states.
        let rc = unsafe {
            lib.rdma_bind_addr(self.raw, (&mut ss as *mut libc::sockaddr_storage).cast())
        };
        if rc != 0 {
            return Err(Error::last_os("rdma_bind_addr", addr));
        }
        Ok(())
    }

    pub fn listen(&self, backlog: i32) -> Result<()> {
        let lib = rdmacm()?;
        // SAFETY: valid, bound id.
        if unsafe { lib.rdma_listen(self.raw, backlog) } != 0 {
            return Err(Error::last_os("rdma_listen", ""));
        }
        Ok(())
    }

    /// The local port the id is bound to (host order).
    pub fn local_port(&self) -> Result<u16> {
        let lib = rdmacm()?;
        // SAFETY: valid id.
        Ok(u16::from_be(unsafe { lib.rdma_get_src_port(self.raw) }))
    }

    pub fn resolve_addr(
        &self,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: i32,
    ) -> Result<()> {
        let lib = rdmacm()?;
        let mut s = src.map(sockaddr);
        let mut d = sockaddr(dst);
        let sp = s
            .as_mut()
            .map(|s| (s as *mut libc::sockaddr_storage).cast())
            .unwrap_or(std::ptr::null_mut());
        // SAFETY: valid id; the sockaddrs live across the call.
        let rc = unsafe {
            lib.rdma_resolve_addr(
                self.raw,
                sp,
                (&mut d as *mut libc::sockaddr_storage).cast(),
                timeout_ms,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("rdma_resolve_addr", dst));
        }
        Ok(())
    }

    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        let lib = rdmacm()?;
        // SAFETY: valid id with a resolved address.
        if unsafe { lib.rdma_resolve_route(self.raw, timeout_ms) } != 0 {
            return Err(Error::last_os("rdma_resolve_route", ""));
        }
        Ok(())
    }

    /// The attributes for moving a QP of this connection to `state`, as `rdma_init_qp_attr`
    /// computes them (path, PSNs, MTU from the resolved route).
    pub fn qp_attr(&self, state: u32) -> Result<(QpAttr, u32)> {
        let lib = rdmacm()?;
        let mut attr = QpAttr {
            qp_state: state,
            ..Default::default()
        };
        let mut mask: i32 = 0;
        // SAFETY: valid id and out pointers.
        let rc = unsafe { lib.rdma_init_qp_attr(self.raw, &mut attr, &mut mask) };
        if rc != 0 {
            return Err(Error::last_os(
                "rdma_init_qp_attr",
                format!("state {state}"),
            ));
        }
        Ok((attr, mask as u32))
    }

    /// Moves `qp` through `states` with rdmacm's attributes, except the local ACK timeout and
    /// the retry count of RTS, which are `ours` (the other CPCs' too). The CM derives its
    /// timeout from the path's packet lifetime (on rxe about 2.3 s: with 6 retries a request to
    /// a peer that vanished failed only after 16 s) and takes the retry count from the active
    /// side's connect parameters.
    pub fn transition(&self, qp: &QueuePair, states: &[u32], ours: &RcParams) -> Result<()> {
        for &s in states {
            let (mut attr, mask) = self.qp_attr(s)?;
            if mask & crate::ffi::verbs::IBV_QP_TIMEOUT != 0 {
                attr.timeout = ours.timeout;
            }
            if mask & crate::ffi::verbs::IBV_QP_RETRY_CNT != 0 {
                attr.retry_cnt = ours.retry_cnt;
            }
            qp.modify(&attr, mask)?;
        }
        Ok(())
    }

    fn conn_param(qp_num: u32, srq: bool, private: &[u8]) -> cm::rdma_conn_param {
        cm::rdma_conn_param {
            private_data: private.as_ptr().cast(),
            private_data_len: private.len().min(56) as u8,
            // Outstanding RDMA reads and atomics in each direction (the transport's rendezvous
            // reads); the same as the other CPCs' `RcParams::max_rd_atomic`.
            responder_resources: 4,
            initiator_depth: 4,
            flow_control: 0,
            // What the peer's CM is told; both sides' queue pairs take `OPENIB_RETRY_COUNT`
            // instead at RTS (`transition`). Never 7: rxe retries a count of 7 forever.
            retry_count: 6,
            rnr_retry_count: 7,
            // Tells the peer's CM that our QP receives through a shared receive queue.
            srq: u8::from(srq),
            qp_num,
        }
    }

    /// Connects with our own QP `qp_num` (not attached to the id; `srq`: it receives through
    /// a shared receive queue) and `private` data (<= 56 B).
    pub fn connect(&self, qp_num: u32, srq: bool, private: &[u8]) -> Result<()> {
        let lib = rdmacm()?;
        let mut p = Self::conn_param(qp_num, srq, private);
        // SAFETY: valid id; `private` outlives the call (rdmacm copies it).
        if unsafe { lib.rdma_connect(self.raw, &mut p) } != 0 {
            return Err(Error::last_os("rdma_connect", ""));
        }
        Ok(())
    }

    /// Accepts with our own QP `qp_num` (see [`CmId::connect`]).
    pub fn accept(&self, qp_num: u32, srq: bool, private: &[u8]) -> Result<()> {
        let lib = rdmacm()?;
        let mut p = Self::conn_param(qp_num, srq, private);
        // SAFETY: as for connect.
        if unsafe { lib.rdma_accept(self.raw, &mut p) } != 0 {
            return Err(Error::last_os("rdma_accept", ""));
        }
        Ok(())
    }

    pub fn reject(&self, private: &[u8]) -> Result<()> {
        let lib = rdmacm()?;
        // SAFETY: valid id of a connect request.
        if unsafe {
            lib.rdma_reject(
                self.raw,
                private.as_ptr().cast(),
                private.len().min(56) as u8,
            )
        } != 0
        {
            return Err(Error::last_os("rdma_reject", ""));
        }
        Ok(())
    }

    /// Tells the passive side we are ready (after a connect response, when the QP is ours).
    pub fn establish(&self) -> Result<()> {
        let lib = rdmacm()?;
        // SAFETY: valid id after a connect response.
        if unsafe { lib.rdma_establish(self.raw) } != 0 {
            return Err(Error::last_os("rdma_establish", ""));
        }
        Ok(())
    }

    pub fn disconnect(&self) -> Result<()> {
        let lib = rdmacm()?;
        // SAFETY: valid id.
        if unsafe { lib.rdma_disconnect(self.raw) } != 0 {
            return Err(Error::last_os("rdma_disconnect", ""));
        }
        Ok(())
    }
}
