//! The wire-up of a process: port discovery, the CPC services opened on its port, the modex
//! exchange over the job's runtime, and each peer's CPC (the winner of the two ports' CPC
//! lists, or one CPC named; [`after_failure`] for the fallback). The transport opens it
//! ([`Wireup::open_with`]) and `openib ping` ([`crate::ping`]) drives it directly.

use crate::modex::build::{build_node, port_name, NodeBuild};
use crate::modex::exchange::{exchange, ExchangeMode, Peer};
use crate::modex::procs::{LocalProcs, PortSet, ProcBlob};
use crate::modex::{NodeBlob, KEY_HOST};
use crate::runtime::Runtime;
use openib_cpc::pack::PeerAddress;
use openib_cpc::{
    pair_ports, select, Advert, Connection, Connector, CpcConfig, CpcId, HostFacts, LocalPort,
    OobService, PortPair, PortView, RdmacmService, Retry, UdcmService,
};
use openib_ports::{derive, DeriveConfig, Discovery, Filter, Topology};
use openib_sys::QpCaps;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Connections the CPCs finished since the last call: established (CPC, connection) and
/// failed (CPC, peer, why).
pub type Settled = (Vec<(CpcId, Connection)>, Vec<(CpcId, u32, String)>);

#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error(transparent)]
    Exchange(#[from] crate::modex::exchange::ExchangeError),
    #[error("verbs: {0}")]
    Verbs(#[from] openib_sys::Error),
}

/// Settings of a ping run.
#[derive(Clone)]
pub struct PingConfig {
    pub derive: DeriveConfig,
    /// Force this CPC for every pair (it must be usable on both sides).
    pub cpc: Option<CpcId>,
    pub timeout: Duration,
    pub mode: ExchangeMode,
}

struct Services {
    port: LocalPort,
    udcm: Option<Connector<UdcmService>>,
    oob: Option<Connector<OobService>>,
    rdmacm: Option<RdmacmService>,
    /// Fault injection (`OPENIB_FAULT=udcm-deaf:RANK`): udcm is never progressed here, so it
    /// never answers (nor retries), and the peer's udcm attempt times out.
    #[cfg(feature = "fault-injection")]
    udcm_deaf: bool,
}

impl Services {
    fn progress(&mut self, now: Instant) -> Result<(), openib_sys::Error> {
        #[cfg(feature = "fault-injection")]
        let udcm_deaf = self.udcm_deaf;
        #[cfg(not(feature = "fault-injection"))]
        let udcm_deaf = false;
        if let Some(c) = self.udcm.as_mut().filter(|_| !udcm_deaf) {
            c.progress(now)?;
        }
        if let Some(c) = &mut self.oob {
            c.progress(now)?;
        }
        if let Some(c) = &mut self.rdmacm {
            c.progress(now)?;
        }
        Ok(())
    }

    fn take(&mut self) -> Settled {
        let mut ok = Vec::new();
        let mut bad = Vec::new();
        if let Some(c) = &mut self.udcm {
            ok.extend(c.take_established().into_iter().map(|x| (CpcId::Udcm, x)));
            bad.extend(
                c.take_failed()
                    .into_iter()
                    .map(|(p, _, e)| (CpcId::Udcm, p, e.to_string())),
            );
        }
        if let Some(c) = &mut self.oob {
            ok.extend(c.take_established().into_iter().map(|x| (CpcId::Oob, x)));
            bad.extend(
                c.take_failed()
                    .into_iter()
                    .map(|(p, _, e)| (CpcId::Oob, p, e.to_string())),
            );
        }
        if let Some(c) = &mut self.rdmacm {
            ok.extend(c.take_established().into_iter().map(|x| (CpcId::Rdmacm, x)));
            bad.extend(
                c.take_failed()
                    .into_iter()
                    .map(|(p, _, e)| (CpcId::Rdmacm, p, e.to_string())),
            );
        }
        (ok, bad)
    }
}

impl Wireup {
    /// Discovers the ports, opens the CPC services on this process's port, runs the modex
    /// exchange over `rt` and decides each peer's CPC (connections stay lazy).
    pub fn open(rt: &dyn Runtime, cfg: &PingConfig) -> Result<Wireup, PingError> {
        Self::open_with(rt, cfg, super::CQ_DEPTH, None)
    }

    /// [`Wireup::open`] with completion queues of `cq_depth` entries, and a shared receive
    /// queue of up to `srq_max` requests on the port that every RC queue pair uses (when the
    /// device cannot make one: a warning, and none).
    pub fn open_with(
        rt: &dyn Runtime,
        cfg: &PingConfig,
        cq_depth: u32,
        srq_max: Option<u32>,
    ) -> Result<Wireup, PingError> {
        let Prepared {
            info,
            node,
            my_index,
            mut svc,
            mine,
            own_ads,
            refused,
        } = Self::prepare(rt, cfg, cq_depth, srq_max)?;
        let table = exchange(rt, &node, &mine, cfg.mode, cfg.timeout)?;

        // Decide, per peer, the CPC and its address; the lower rank initiates.
        let local_view = [port_view(&node.blob, my_index)];
        // The pair decision uses this node's published list, as the peers do (the winner
        // rule is symmetric only over the same two lists).
        let me_published = table.peers.iter().find(|p| p.rank == info.rank);
        let published_ads: Option<Vec<Advert>> = me_published.and_then(|p| {
            p.node_blob.ports.get(my_index).map(|port| {
                port.cpcs
                    .iter()
                    .map(|r| Advert {
                        index: r.cpc,
                        priority: r.priority,
                    })
                    .collect()
            })
        });
        let leader = me_published.map(|p| p.leader).unwrap_or(info.rank);
        let local_ads = match published_ads {
            Some(published) => pair_adverts(&own_ads, &published, leader),
            None => Ok(own_ads),
        };
        let allow_cross_subnet = crate::config::bool("OPENIB_ALLOW_CROSS_SUBNET")
            .map_err(|e| PingError::Setup(e.to_string()))?;
        let mut plans = BTreeMap::new();
        let mut orders = BTreeMap::new();
        let pairing = Pairing {
            node,
            my_index,
            local_view,
            refused,
            forced: cfg.cpc,
            allow_cross_subnet,
        };
        for peer in table.peers.iter().filter(|p| p.rank != info.rank) {
            let plan = local_ads
                .clone()
                .and_then(|ads| pairing.plan_peer(&mut svc, &mut orders, &ads, peer));
            plans.insert(peer.rank, plan);
        }
        Ok(Wireup {
            me: info.rank,
            services: svc,
            table,
            plans,
            orders,
            on_demand: None,
        })
    }

    /// Opens on a host's runtime ([`crate::runtime::host::HostRuntime`]): discovers the ports
    /// and opens the CPC services as [`Wireup::open_with`] does, then publishes this process's
    /// modex with ONE put under [`KEY_HOST`] and a commit, and runs no fence (the host runs
    /// it after this returns). The value is a node blob of this process alone, its CPC parts in
    /// the gathered section, as a node with one process publishes it in every mode: no node
    /// leader, no gathering, since both need a fence between puts. Peers are read on demand
    /// ([`Wireup::resolve`]); `plans` starts empty.
    pub fn open_host(
        rt: &dyn Runtime,
        cfg: &PingConfig,
        cq_depth: u32,
        srq_max: Option<u32>,
    ) -> Result<Wireup, PingError> {
        let Prepared {
            info,
            node,
            my_index,
            svc,
            mine,
            own_ads,
            refused,
        } = Self::prepare(rt, cfg, cq_depth, srq_max)?;
        // A port no CPC can serve is no usable port: publish nothing, so that peers find this
        // process unreachable at once (the caller says why once, not each peer).
        if own_ads.is_empty() {
            return Err(PingError::Setup(format!(
                "no usable port: {} offers no CPC ({})",
                node.port_names[my_index],
                refused.join("; ")
            )));
        }
        let mut blob = node.blob.clone();
        blob.local_procs = Some(
            LocalProcs::gather(&node.blob, std::slice::from_ref(&mine))
                .map_err(crate::modex::exchange::ExchangeError::from)?,
        );
        let bytes = blob
            .encode(crate::modex::Compression::default())
            .map_err(crate::modex::exchange::ExchangeError::from)?;
        let slot =
            crate::config::u32("OPENIB_HOST_SLOT").map_err(|e| PingError::Setup(e.to_string()))?;
        let key = host_key(slot);
        rt.put(crate::runtime::Scope::Global, &key, &bytes)?;
        rt.commit()?;
        let allow_cross_subnet = crate::config::bool("OPENIB_ALLOW_CROSS_SUBNET")
            .map_err(|e| PingError::Setup(e.to_string()))?;
        let local_view = [port_view(&node.blob, my_index)];
        tracing::debug!(
            bytes = bytes.len(),
            key,
            port = %node.port_names[my_index],
            "modex published on the host's runtime; peers are read on demand"
        );
        let my_subnet = node.blob.ports[my_index].subnet_id;
        Ok(Wireup {
            me: info.rank,
            services: svc,
            table: crate::modex::exchange::PeerTable {
                peers: Vec::new(),
                mode: ExchangeMode::OnDemand,
                my_put_bytes: key.len() + bytes.len(),
                failed: Vec::new(),
            },
            plans: BTreeMap::new(),
            orders: BTreeMap::new(),
            on_demand: Some(OnDemand {
                pairing: Pairing {
                    node,
                    my_index,
                    local_view,
                    refused,
                    forced: cfg.cpc,
                    allow_cross_subnet,
                },
                ads: own_ads,
                size: info.size,
                timeout: cfg.timeout,
                removed: Default::default(),
                slot,
                my_subnet,
                own_lower: None,
            }),
        })
    }

    /// The plan of `peer`: on a host's runtime ([`Wireup::open_host`]) read from the peer's
    /// modex the first time (a peer that published none is unreachable: `Err` naming why, never
    /// a wait); otherwise the one decided at open. `None` for this process's rank and ranks
    /// outside the job.
    pub fn resolve(&mut self, rt: &dyn Runtime, peer: u32) -> Option<&Result<CpcId, String>> {
        if !self.plans.contains_key(&peer) {
            let me = self.me;
            let od = self.on_demand.as_mut()?;
            if peer == me || peer >= od.size || od.removed.contains(&peer) {
                return None;
            }
            if od.own_lower.is_none() {
                match od.own_lower_subnets(rt, me) {
                    Ok(v) => od.own_lower = Some(v),
                    Err(why) => tracing::warn!(why = %why, "own modex slots unreadable"),
                }
            }
            let od = self.on_demand.as_ref()?;
            let plan = match &od.own_lower {
                Some(lower) => od.read_peer(rt, peer, lower),
                None => Err("this process's own lower modex slots cannot be read".to_string()),
            }
            .and_then(|p| {
                od.pairing
                    .plan_peer(&mut self.services, &mut self.orders, &od.ads, &p)
            });
            if let Err(why) = &plan {
                tracing::info!(peer, why = %why, "peer unreachable");
            }
            self.plans.insert(peer, plan);
        }
        self.plans.get(&peer)
    }

    /// The ranks that tried to connect (udcm, oob) before this process knew their address;
    /// on a host's runtime the caller [`Wireup::resolve`]s them, and their next retry gets
    /// through.
    pub fn take_unknown(&mut self) -> Vec<u32> {
        let mut v = Vec::new();
        if let Some(c) = &mut self.services.udcm {
            v.extend(c.take_unknown());
        }
        if let Some(c) = &mut self.services.oob {
            v.extend(c.take_unknown());
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// `peer` was removed (`del_procs`): its CPC handshakes are forgotten; on a host's runtime
    /// it is not read again (until [`Wireup::unforget`]), so a late hello from it does not make
    /// it an endpoint again.
    pub fn forget(&mut self, peer: u32) {
        // Its finished handshakes go in every mode, so that adding it again reconnects.
        if let Some(c) = &mut self.services.udcm {
            c.forget(peer);
        }
        if let Some(c) = &mut self.services.oob {
            c.forget(peer);
        }
        if let Some(od) = &mut self.on_demand {
            od.removed.insert(peer);
            self.plans.remove(&peer);
        }
    }

    /// On a host's runtime: `peer`, removed by [`Wireup::forget`], may be read again (its
    /// modex on the next [`Wireup::resolve`]); true if it had been removed.
    pub fn unforget(&mut self, peer: u32) -> bool {
        self.on_demand
            .as_mut()
            .is_some_and(|od| od.removed.remove(&peer))
    }

    /// Whether peers are read on demand (opened on a host's runtime).
    pub fn on_demand(&self) -> bool {
        self.on_demand.is_some()
    }

    /// Discovery, the CPC services and this process's parts: what both ways of opening share.
    fn prepare(
        rt: &dyn Runtime,
        cfg: &PingConfig,
        cq_depth: u32,
        srq_max: Option<u32>,
    ) -> Result<Prepared, PingError> {
        let info = rt.info().clone();
        let scan =
            openib_ports::hw::read_topology().map_err(|e| PingError::Setup(e.to_string()))?;
        let topo: Topology = scan.topology;
        let discovery: Discovery = derive(&topo, &cfg.derive);
        let unfiltered = derive(
            &topo,
            &DeriveConfig {
                filter: Filter::All,
                ..cfg.derive.clone()
            },
        );
        let host = HostFacts::probe();
        let cpc_cfg = CpcConfig::from_env().map_err(|e| PingError::Setup(e.to_string()))?;
        let node: NodeBuild = build_node(&unfiltered, &topo, cfg.derive.gid_index, &host, &cpc_cfg)
            .map_err(|e| PingError::Setup(e.to_string()))?;

        // The one port this transport serves: the OPENIB_PORT_INDEX-th usable port (0, the
        // first, unless a host opens one transport per port: the oib BTL).
        let port_index = crate::config::u32("OPENIB_PORT_INDEX")
            .map_err(|e| PingError::Setup(e.to_string()))? as usize;
        let usable = discovery.usable().count();
        if port_index > 0 && port_index >= usable {
            return Err(PingError::Setup(format!(
                "OPENIB_PORT_INDEX={port_index}: there are only {usable} usable ports ({})",
                discovery
                    .usable()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let Some(port) = discovery.usable().nth(port_index) else {
            let why: Vec<String> = discovery
                .ports
                .iter()
                .map(|p| {
                    let ip = crate::modex::build::port_ip(p, &topo, cfg.derive.gid_index);
                    format!(
                        "{}: {} [CPCs: {}]",
                        p.name(),
                        p.reason.as_deref().unwrap_or("?"),
                        cpc_verdicts(p, ip.is_some(), &host, &cpc_cfg)
                    )
                })
                .collect();
            let filters = if discovery.unmatched_filters.is_empty() {
                String::new()
            } else {
                format!(
                    "; filter entries matching no port: {}",
                    discovery.unmatched_filters.join(", ")
                )
            };
            return Err(PingError::Setup(format!(
                "no usable port ({}){filters}",
                if why.is_empty() {
                    "the devices have no port".to_string()
                } else {
                    why.join("; ")
                }
            )));
        };
        let my_index = node
            .port_names
            .iter()
            .position(|n| *n == port.name())
            .ok_or_else(|| PingError::Setup(format!("{} is not in the node blob", port.name())))?;
        let list = openib_sys::devices()?;
        let info_dev = list
            .iter()
            .find(|d| d.name() == port.device)
            .ok_or_else(|| PingError::Setup(format!("device {} vanished", port.device)))?;
        let ctx = info_dev.open()?;
        drop(list);
        let caps = QpCaps {
            max_send_wr: crate::transport::MAX_QUEUE,
            max_recv_wr: crate::transport::MAX_QUEUE,
            max_send_sge: 1,
            max_recv_sge: 1,
            // Small messages go inside the work request (perftest inlines up to 236 bytes);
            // LocalPort::open lowers it where the device grants less.
            max_inline_data: crate::transport::INLINE_WANTED,
        };
        // One CQ for sends and receives, so that a progress call polls once: room for
        // `cq_depth` of each (the send budget keeps signaled sends within `cq_depth`, the
        // receive buffers posted are checked against it when an endpoint connects).
        let cqe = i32::try_from(u64::from(cq_depth) * 2).unwrap_or(i32::MAX);
        let mut lp = LocalPort::open_one_cq(
            &ctx,
            port.raw.port,
            source_gid_index(port, cfg.derive.gid_index),
            cqe,
            caps,
        )?;
        // Every CPC's queue pairs, rdmacm's too (the CM would derive its own timeout from the
        // path).
        let setting = |name| crate::config::u32(name).map_err(|e| PingError::Setup(e.to_string()));
        lp.params.timeout = setting("OPENIB_ACK_TIMEOUT")? as u8;
        lp.params.retry_cnt = setting("OPENIB_RETRY_COUNT")? as u8;
        if let Some(max) = srq_max {
            match openib_sys::SharedReceiveQueue::new(&lp.pd, max, 1) {
                Ok(srq) => lp.srq = Some(srq),
                Err(e) => tracing::warn!(
                    port = %port.name(),
                    error = %e,
                    "no shared receive queue: every endpoint posts its own receive buffers"
                ),
            }
        }
        let ip = crate::modex::build::port_ip(port, &topo, cfg.derive.gid_index);
        let records = &node.blob.ports[my_index].cpcs;
        let refused: Vec<String> = openib_cpc::evaluate(port, ip.is_some(), &host, &cpc_cfg)
            .into_iter()
            .filter_map(|(c, v)| v.err().map(|why| format!("{c}: {why}")))
            .collect();
        let mut svc = Services {
            port: lp.clone(),
            udcm: None,
            oob: None,
            rdmacm: None,
            #[cfg(feature = "fault-injection")]
            udcm_deaf: crate::fault::armed("udcm-deaf", info.rank),
        };
        let mut parts = Vec::new();
        for r in records {
            let w = r.proc_len as usize;
            let part = match CpcId::from_index(r.cpc) {
                Some(CpcId::Udcm) => {
                    let s = UdcmService::new(&lp)?;
                    let q = s.address().qpn;
                    svc.udcm = Some(Connector::new(info.rank, lp.clone(), s, Retry::default()));
                    openib_cpc::pack::pack_value(q as u64, w as u8)
                }
                Some(CpcId::Oob) => {
                    let s = OobService::bind(ip.unwrap_or(IpAddr::from([127, 0, 0, 1])))?;
                    let p = s.address().port();
                    svc.oob = Some(Connector::new(info.rank, lp.clone(), s, Retry::default()));
                    openib_cpc::pack::pack_value(p as u64, w as u8)
                }
                Some(CpcId::Rdmacm) if ip.is_some() => {
                    let s = RdmacmService::bind(info.rank, &lp, ip.expect("checked"))?;
                    let p = s.address().port();
                    svc.rdmacm = Some(s);
                    openib_cpc::pack::pack_value(p as u64, w as u8)
                }
                _ => vec![0; w],
            };
            parts.push(part);
        }
        let mut mine_ports = PortSet::EMPTY;
        mine_ports.insert(my_index);
        let mine = ProcBlob {
            ports: mine_ports,
            parts,
        };
        let own_ads: Vec<Advert> = records
            .iter()
            .map(|r| Advert {
                index: r.cpc,
                priority: r.priority,
            })
            .collect();
        Ok(Prepared {
            info,
            node,
            my_index,
            svc,
            mine,
            own_ads,
            refused,
        })
    }

    /// Starts connecting to `peer` (only the lower rank of a pair initiates; the other side
    /// answers from `progress`). A no-op for peers with no usable plan.
    pub fn connect(&mut self, peer: u32, now: Instant) {
        if self.me > peer {
            return;
        }
        self.start(peer, now);
    }

    /// Starts connecting to `peer` because this process has something to send to it: as
    /// [`Wireup::connect`], and from the higher rank of a pair too when the planned CPC's
    /// handshake is symmetric (udcm, oob: either side may start, and a simultaneous start
    /// ends in one connection, `openib_cpc::handshake`). Otherwise a higher rank's first
    /// message to a lower rank that never sends to it would wait forever. rdmacm is started
    /// by the lower rank only (a crossing start from both sides failed one run in two under
    /// `openib stress`: docs/TRANSPORT.md, "Limits"); on a host's runtime the lower rank
    /// starts it as soon as it learns the peer ([`Wireup::starts_at_once`]).
    pub fn connect_to_send(&mut self, peer: u32, now: Instant) {
        let symmetric = matches!(self.plans.get(&peer), Some(Ok(CpcId::Udcm | CpcId::Oob)));
        if self.me > peer && !symmetric {
            return;
        }
        self.start(peer, now);
    }

    /// Whether the connection to `peer` is started as soon as the peer is known rather than on
    /// first use: over rdmacm, from the lower rank of a pair, so that the higher rank's first
    /// message (which cannot start rdmacm) finds it under way.
    pub fn starts_at_once(&self, peer: u32) -> bool {
        self.me < peer && matches!(self.plans.get(&peer), Some(Ok(CpcId::Rdmacm)))
    }

    fn start(&mut self, peer: u32, now: Instant) {
        let svc = &mut self.services;
        match self.plans.get(&peer) {
            Some(Ok(CpcId::Udcm)) => svc.udcm.as_mut().expect("planned").connect(peer, 0, now),
            Some(Ok(CpcId::Oob)) => svc.oob.as_mut().expect("planned").connect(peer, 0, now),
            Some(Ok(CpcId::Rdmacm)) => svc.rdmacm.as_mut().expect("planned").connect(peer, 0, now),
            _ => {}
        }
    }

    /// The local port the services run on.
    pub fn port(&self) -> &LocalPort {
        &self.services.port
    }

    /// Progresses every CPC service; returns new connections and failures. A failure of a
    /// CPC that has a next common one is not returned: the initiator moves on to the next
    /// (and logs why), the answering side expects it ([`after_failure`]); `plans` shows the
    /// CPC a peer is on.
    pub fn poll(&mut self, now: Instant) -> Result<Settled, openib_sys::Error> {
        self.services.progress(now)?;
        let (ok, bad) = self.services.take();
        for (cpc, c) in &ok {
            if let Some(Ok(cur)) = self.plans.get_mut(&c.peer) {
                *cur = *cpc;
            }
        }
        let mut failed = Vec::new();
        for (cpc, peer, why) in bad {
            let (Some(Ok(cur)), Some(order)) = (self.plans.get(&peer), self.orders.get(&peer))
            else {
                failed.push((cpc, peer, why));
                continue;
            };
            match after_failure(self.me < peer, cpc, *cur, order) {
                Next::Report => failed.push((cpc, peer, why)),
                Next::Stale => tracing::debug!(
                    peer,
                    cpc = %cpc,
                    current = %cur,
                    error = %why,
                    "failure of a CPC this pair has left"
                ),
                Next::Expect(next) => {
                    tracing::info!(
                        peer,
                        failed = %cpc,
                        next = %next,
                        error = %why,
                        "connection through the winner failed here; expecting the initiator's next common CPC"
                    );
                    self.plans.insert(peer, Ok(next));
                }
                Next::Retry(next) => {
                    tracing::warn!(
                        peer,
                        failed = %cpc,
                        next = %next,
                        error = %why,
                        "connecting through {cpc} failed; falling back to the next common CPC, {next}"
                    );
                    self.plans.insert(peer, Ok(next));
                    self.connect(peer, now);
                }
            }
        }
        Ok((ok, failed))
    }
}

/// What a pair does after a connection attempt through `failed` ended in failure on this
/// side, with `current` the CPC the pair is on and `order` the pair's common CPCs (the
/// winner first, [`fallback_order`]; both sides compute the same one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The initiator starts again through this CPC.
    Retry(CpcId),
    /// The answering side waits for the initiator's attempt through this CPC (it accepts an
    /// attempt through any CPC of `order` anyway: only the initiator chooses, so the two
    /// sides cannot end up on different CPCs).
    Expect(CpcId),
    /// A failure of a CPC the pair already left: nothing to do.
    Stale,
    /// The last common CPC failed: the pair fails.
    Report,
}

/// The fallback rule (see [`Next`]). `initiator`: this side starts the pair's connections
/// (the lower rank).
pub fn after_failure(initiator: bool, failed: CpcId, current: CpcId, order: &[CpcId]) -> Next {
    if failed != current {
        return Next::Stale;
    }
    let next = order
        .iter()
        .position(|&c| c == failed)
        .and_then(|i| order.get(i + 1).copied());
    match (next, initiator) {
        (None, _) => Next::Report,
        (Some(n), true) => Next::Retry(n),
        (Some(n), false) => Next::Expect(n),
    }
}

/// Every common CPC of two lists that has a connection path in this build, in the winner
/// rule's order ([`openib_cpc::ranked`]: the same on both sides).
pub fn fallback_order(local: &[Advert], remote: &[Advert]) -> Vec<CpcId> {
    openib_cpc::ranked(local, remote)
        .into_iter()
        .filter_map(|w| CpcId::from_index(w.index))
        .filter(|c| matches!(c, CpcId::Udcm | CpcId::Oob | CpcId::Rdmacm))
        .collect()
}

/// The CPC list a peer's node published for its port `pi`.
fn peer_adverts(peer: &Peer, pi: usize) -> Vec<Advert> {
    peer.node_blob.ports[pi]
        .cpcs
        .iter()
        .map(|r| Advert {
            index: r.cpc,
            priority: r.priority,
        })
        .collect()
}

/// This process's CPC services, the modex table and each peer's chosen CPC.
pub struct Wireup {
    pub me: u32,
    services: Services,
    pub table: crate::modex::exchange::PeerTable,
    /// Per peer: its CPC (the winner; after a fallback, the CPC the pair moved on to), or
    /// why there is none.
    pub plans: BTreeMap<u32, Result<CpcId, String>>,
    /// Per peer with a plan: the pair's common CPCs with a connection path, winner first.
    orders: BTreeMap<u32, Vec<CpcId>>,
    /// Opened on a host's runtime: what reading a peer's modex on demand needs.
    on_demand: Option<OnDemand>,
}

/// What the two ways of opening share: this process's port, services and modex parts.
struct Prepared {
    info: crate::runtime::JobInfo,
    node: NodeBuild,
    my_index: usize,
    svc: Services,
    mine: ProcBlob,
    /// This process's own CPC list on its port.
    own_ads: Vec<Advert>,
    /// The CPCs refused on this port, with why (for messages).
    refused: Vec<String>,
}

/// What deciding a pair needs of this process.
struct Pairing {
    node: NodeBuild,
    my_index: usize,
    local_view: [PortView; 1],
    refused: Vec<String>,
    forced: Option<CpcId>,
    allow_cross_subnet: bool,
}

impl Pairing {
    /// Decides the pair with `peer` over the CPC list `ads`, records the peer's addresses in
    /// the services (the winner's and every fallback's) and its fallback order.
    fn plan_peer(
        &self,
        svc: &mut Services,
        orders: &mut BTreeMap<u32, Vec<CpcId>>,
        ads: &[Advert],
        peer: &Peer,
    ) -> Result<CpcId, String> {
        let (cpc, pi) = plan(
            peer,
            &self.local_view,
            ads,
            self.forced,
            self.allow_cross_subnet,
            &self.node,
            self.my_index,
            &self.refused,
        )?;
        add_peer(svc, cpc, peer, pi)?;
        // The rest of the common CPCs, in the winner rule's order: this side accepts an
        // attempt through any of them, and, initiating, falls back through them.
        let mut order = vec![cpc];
        if self.forced.is_none() {
            for next in fallback_order(ads, &peer_adverts(peer, pi))
                .into_iter()
                .skip(1)
            {
                match add_peer(svc, next, peer, pi) {
                    Ok(()) => order.push(next),
                    Err(why) => tracing::debug!(
                        peer = peer.rank,
                        cpc = %next,
                        why,
                        "not a fallback for this peer"
                    ),
                }
            }
        }
        orders.insert(peer.rank, order);
        Ok(cpc)
    }
}

/// The names (`device:port`) of the usable ports under `derive`'s filters, in the order
/// `OPENIB_PORT_INDEX` counts them: what a host that opens one transport per port iterates.
pub fn usable_port_names(derive_cfg: &DeriveConfig) -> Result<Vec<String>, PingError> {
    let scan = openib_ports::hw::read_topology().map_err(|e| PingError::Setup(e.to_string()))?;
    let discovery = derive(&scan.topology, derive_cfg);
    Ok(discovery.usable().map(|p| p.name()).collect())
}

/// The modex key of host slot `slot` ([`Wireup::open_host`]): [`KEY_HOST`] for slot 0 (what a
/// process with one transport has always published), `oibH<slot>` for the others.
pub fn host_key(slot: u32) -> String {
    if slot == 0 {
        KEY_HOST.to_string()
    } else {
        format!("{KEY_HOST}{slot}")
    }
}

/// The most transports (ports) of one process read on a host's runtime.
pub const MAX_HOST_SLOTS: u32 = 64;

/// Reading peers on demand from a host's runtime.
struct OnDemand {
    pairing: Pairing,
    /// This process's CPC list: it published its own node blob, so its own list is the one
    /// its peers see.
    ads: Vec<Advert>,
    size: u32,
    timeout: Duration,
    /// Peers removed by `del_procs`: never read again.
    removed: std::collections::BTreeSet<u32>,
    /// This transport's modex slot (`OPENIB_HOST_SLOT`: one per transport of the process).
    slot: u32,
    /// The subnet id of this transport's port.
    my_subnet: u64,
    /// The subnets of this process's transports in lower slots (read from its own modex on
    /// first use: after the host's fence).
    own_lower: Option<Vec<Option<u64>>>,
}

/// Pairing of the transports of two processes, one per port each (symmetric by
/// construction): slot `slot` of a process whose slots serve subnets `own` pairs with the
/// `k`-th slot of the peer (subnets `peer`) on its subnet, where it is itself the `k`-th of its
/// process's slots on that subnet, in slot order; `None` when the peer has fewer slots on it.
/// With `cross` (OPENIB_ALLOW_CROSS_SUBNET) every slot counts whatever its subnet (slot k pairs
/// with slot k). Open MPI's openib BTL pairs its ports by subnet in the same spirit.
pub fn paired_slot(
    own: &[Option<u64>],
    slot: usize,
    peer: &[Option<u64>],
    cross: bool,
) -> Option<usize> {
    let mine = *own.get(slot)?;
    let same = |x: &Option<u64>| cross || (x.is_some() && *x == mine);
    let k = own[..slot].iter().filter(|x| same(x)).count();
    peer.iter()
        .enumerate()
        .filter(|(_, x)| same(x))
        .nth(k)
        .map(|(j, _)| j)
}

/// The subnet id of the one port a peer's host value serves.
fn served_subnet(p: &Peer) -> Option<u64> {
    let i = p.proc_blob.ports.iter().next()?;
    p.node_blob.ports.get(i).map(|np| np.subnet_id)
}

impl OnDemand {
    /// The subnets of this process's transports in the slots below this one (read back
    /// from its own modex: after the host's fence).
    fn own_lower_subnets(&self, rt: &dyn Runtime, me: u32) -> Result<Vec<Option<u64>>, String> {
        (0..self.slot)
            .map(|s| match self.read_slot(rt, me, s)? {
                Some(p) => Ok(served_subnet(&p)),
                None => Err(format!(
                    "this process's own modex slot {s} cannot be read (a host opening one \
                     transport per port numbers them from 0 without gaps)"
                )),
            })
            .collect()
    }

    /// The transport of `peer` this one pairs with ([`paired_slot`]), rebuilt from its host
    /// value, or why it is unreachable.
    fn read_peer(
        &self,
        rt: &dyn Runtime,
        peer: u32,
        own_lower: &[Option<u64>],
    ) -> Result<Peer, String> {
        let mut values = Vec::new();
        for s in 0..MAX_HOST_SLOTS {
            match self.read_slot(rt, peer, s)? {
                Some(p) => values.push(p),
                None => break,
            }
        }
        if values.is_empty() {
            return Err(format!(
                "rank {peer} published no openib modex (it has no usable port, or does not \
                 use this transport)"
            ));
        }
        let subnets: Vec<Option<u64>> = values.iter().map(served_subnet).collect();
        let mut own = own_lower.to_vec();
        own.push(Some(self.my_subnet));
        let cross = self.pairing.allow_cross_subnet;
        match paired_slot(&own, own_lower.len(), &subnets, cross) {
            Some(j) => Ok(values.swap_remove(j)),
            None => Err(format!(
                "rank {peer} has no port to pair with this one ({}, on subnet {:#018x}, this \
                 process's port number {} on it): rank {peer} serves {}",
                self.pairing.node.port_names[self.pairing.my_index],
                self.my_subnet,
                own.iter()
                    .filter(|x| cross || **x == Some(self.my_subnet))
                    .count(),
                subnets
                    .iter()
                    .enumerate()
                    .map(|(s, x)| format!(
                        "slot {s} on subnet {}",
                        x.map_or("?".to_string(), |x| format!("{x:#018x}"))
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// `rank`'s value of slot `slot` (`None`: it published none), checked and rebuilt.
    fn read_slot(&self, rt: &dyn Runtime, peer: u32, slot: u32) -> Result<Option<Peer>, String> {
        let key = host_key(slot);
        let b = match rt.get(peer, &key, self.timeout) {
            Ok(b) => b,
            Err(crate::runtime::RuntimeError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(format!("rank {peer}'s modex ({key}) cannot be read: {e}")),
        };
        let nb =
            NodeBlob::decode(&b).map_err(|e| format!("rank {peer}'s modex is malformed: {e}"))?;
        let mut procs = nb
            .local_procs
            .as_ref()
            .map(|lp| lp.to_proc_blobs(&nb))
            .unwrap_or_default();
        if procs.len() != 1 {
            return Err(format!(
                "rank {peer}'s modex is malformed: it holds the parts of {} processes, not 1",
                procs.len()
            ));
        }
        let proc_blob = procs.remove(0);
        crate::modex::exchange::check(peer, &nb, &proc_blob).map_err(|e| e.to_string())?;
        Ok(Some(Peer {
            rank: peer,
            node: String::new(),
            leader: peer,
            node_blob: std::sync::Arc::new(nb),
            proc_blob,
            put_bytes: key.len() + b.len(),
        }))
    }
}

/// Every CPC's verdict on `port`, for messages: `udcm usable, rdmacm: why, ...`.
fn cpc_verdicts(
    port: &openib_ports::Port,
    has_ip: bool,
    host: &HostFacts,
    cfg: &CpcConfig,
) -> String {
    if !port.usable {
        // Every CPC would say "the port is not usable: <the port's reason>".
        return "none on an unusable port".into();
    }
    openib_cpc::evaluate(port, has_ip, host, cfg)
        .into_iter()
        .map(|(c, v)| match v {
            Ok(_) => format!("{c} usable"),
            Err(why) => format!("{c}: {why}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The view of port `i` of a node blob that port pairing reads.
fn port_view(nb: &NodeBlob, i: usize) -> PortView {
    PortView {
        index: i,
        subnet_id: nb.ports[i].subnet_id,
        link_layer: nb.ports[i].link_layer.wire(),
        mtu: openib_ports::Mtu::from_enum(nb.ports[i].mtu).unwrap_or(openib_ports::Mtu::MTU_256),
    }
}

/// The GID index connections route from: on RoCE the first IPv4-mapped RoCE v2 GID (the one
/// udcm advertises), else the configured index.
pub fn source_gid_index(port: &openib_ports::Port, configured: u32) -> u32 {
    if port.link_layer() == openib_ports::LinkLayer::Ethernet {
        let v2 = |g: &&openib_ports::RawGid| {
            g.gid.ipv4_mapped().is_some() && g.gid_type == openib_ports::GidType::RoceV2
        };
        if let Some(g) = port
            .raw
            .gids
            .iter()
            .find(v2)
            .or_else(|| port.raw.gids.iter().find(|g| g.gid.ipv4_mapped().is_some()))
        {
            return g.index;
        }
    }
    configured
}

/// `NAME:PRIORITY, ...` of a CPC list, for messages.
fn advert_text(a: &[Advert]) -> String {
    let mut v: Vec<String> = a
        .iter()
        .map(|x| format!("{}:{}", crate::modex::advert::cpc_name(x.index), x.priority))
        .collect();
    if v.is_empty() {
        v.push("none".into());
    }
    v.join(", ")
}

/// The CPC list this process decides its pairs with: its node's published list (`published`,
/// from node leader `leader`), the one its peers see, so both sides of a pair run the winner
/// rule over the same two lists whatever each process's own settings say.
///
/// Where this process's own list (`own`, from its OPENIB_CPC_INCLUDE, OPENIB_CPC_EXCLUDE and
/// OPENIB_CPC_PRIORITY settings) differs only in
/// priorities: a warning naming both, and the published list. Where it offers other CPCs than
/// the published list (its include/exclude differ): an error naming both lists, since its
/// services and modex parts follow its own list and cannot serve the published one.
pub fn pair_adverts(
    own: &[Advert],
    published: &[Advert],
    leader: u32,
) -> Result<Vec<Advert>, String> {
    let set = |a: &[Advert]| {
        let mut m: BTreeMap<u8, u8> = BTreeMap::new();
        for x in a {
            let p = m.entry(x.index).or_insert(x.priority);
            *p = (*p).max(x.priority);
        }
        m
    };
    let (o, p) = (set(own), set(published));
    if o == p {
        return Ok(published.to_vec());
    }
    if o.keys().eq(p.keys()) {
        tracing::warn!(
            own = %advert_text(own),
            published = %advert_text(published),
            leader,
            "this process's CPC priorities (OPENIB_CPC_PRIORITY) differ from those its node \
             leader published; using the published ones, which every peer uses too"
        );
        return Ok(published.to_vec());
    }
    tracing::warn!(
        own = %advert_text(own),
        published = %advert_text(published),
        leader,
        "this process offers other CPCs than its node leader published (OPENIB_CPC_INCLUDE / \
         OPENIB_CPC_EXCLUDE differ within the node): it connects to no peer"
    );
    Err(format!(
        "this process's CPC settings (OPENIB_CPC_INCLUDE/OPENIB_CPC_EXCLUDE/OPENIB_CPC_PRIORITY) \
         offer {}, but its node leader (rank {leader}) published {}: the processes of one node \
         must offer the same CPCs",
        advert_text(own),
        advert_text(published)
    ))
}

/// The port pair the transport (and `openib ping`) uses with one peer: this process serves
/// one port (`local`), the peer the ports of its proc blob (`remote`, one per process); the
/// first pair [`pair_ports`] makes of them, crossing subnets only with `allow_cross_subnet`
/// (setting OPENIB_ALLOW_CROSS_SUBNET). `openib check` reports with this same function.
pub fn transport_pair(
    local: &[PortView],
    remote: &[PortView],
    allow_cross_subnet: bool,
) -> Option<PortPair> {
    pair_ports(local, remote, allow_cross_subnet)
        .first()
        .copied()
}

/// The CPC for a pair and the peer's port index, or why there is none.
#[allow(clippy::too_many_arguments)]
fn plan(
    peer: &Peer,
    local_view: &[PortView],
    local_ads: &[Advert],
    forced: Option<CpcId>,
    allow_cross_subnet: bool,
    node: &NodeBuild,
    my_index: usize,
    refused: &[String],
) -> Result<(CpcId, usize), String> {
    let unusable_here = if refused.is_empty() {
        String::new()
    } else {
        format!("; unusable here: {}", refused.join("; "))
    };
    let nb = &peer.node_blob;
    let remote: Vec<PortView> = peer
        .proc_blob
        .ports
        .iter()
        .map(|i| PortView {
            index: i,
            subnet_id: nb.ports[i].subnet_id,
            link_layer: nb.ports[i].link_layer.wire(),
            mtu: openib_ports::Mtu::from_enum(nb.ports[i].mtu)
                .unwrap_or(openib_ports::Mtu::MTU_256),
        })
        .collect();
    let Some(pp) = transport_pair(local_view, &remote, allow_cross_subnet) else {
        let theirs: Vec<String> = peer
            .proc_blob
            .ports
            .iter()
            .map(|i| {
                format!(
                    "{} subnet {:#018x}",
                    port_name(nb, i),
                    nb.ports[i].subnet_id
                )
            })
            .collect();
        return Err(format!(
            "rank {} is unreachable: our port {} is on subnet {:#018x}, its ports are {}{}",
            peer.rank,
            node.port_names[my_index],
            node.blob.ports[my_index].subnet_id,
            theirs.join(", "),
            if allow_cross_subnet {
                " (different link layers never connect)"
            } else {
                " (OPENIB_ALLOW_CROSS_SUBNET is off)"
            }
        ));
    };
    let remote_ads: Vec<Advert> = nb.ports[pp.remote]
        .cpcs
        .iter()
        .map(|r| Advert {
            index: r.cpc,
            priority: r.priority,
        })
        .collect();
    let names = |a: &[Advert]| {
        a.iter()
            .map(|x| crate::modex::advert::cpc_name(x.index))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen = match forced {
        Some(c) => {
            if !local_ads.iter().any(|a| a.index == c.index()) {
                return Err(format!(
                    "--cpc {c} is not usable here (this port offers {}{unusable_here})",
                    names(local_ads)
                ));
            }
            if !remote_ads.iter().any(|a| a.index == c.index()) {
                return Err(format!(
                    "--cpc {c}: rank {} does not offer it (it offers {})",
                    peer.rank,
                    names(&remote_ads)
                ));
            }
            c
        }
        None => {
            let w = select(local_ads, &remote_ads).ok_or_else(|| {
                format!(
                    "no common CPC with rank {}: we offer {}, it offers {}{unusable_here}",
                    peer.rank,
                    names(local_ads),
                    names(&remote_ads)
                )
            })?;
            CpcId::from_index(w.index)
                .ok_or_else(|| format!("winner CPC index {} is unknown to this build", w.index))?
        }
    };
    if !matches!(chosen, CpcId::Udcm | CpcId::Oob | CpcId::Rdmacm) {
        return Err(format!("{chosen} has no connection path in this build"));
    }
    Ok((chosen, pp.remote))
}

fn add_peer(svc: &mut Services, cpc: CpcId, peer: &Peer, pi: usize) -> Result<(), String> {
    let nb = &peer.node_blob;
    let port = &nb.ports[pi];
    let slots: Vec<(usize, usize)> = ProcBlob::slots(nb, peer.proc_blob.ports).collect();
    let (j, rec) = port
        .cpcs
        .iter()
        .enumerate()
        .find(|(_, r)| r.cpc == cpc.index())
        .ok_or("the peer has no record for the CPC")?;
    let k = slots
        .iter()
        .position(|&(a, b)| a == pi && b == j)
        .ok_or("the peer's proc blob has no part for the CPC")?;
    let part = &peer.proc_blob.parts[k];
    match openib_cpc::pack::peer_address(cpc, port.lid, &rec.blob, part)? {
        PeerAddress::Udcm(a) => svc
            .udcm
            .as_mut()
            .ok_or("udcm is not open here")?
            .add_peer(peer.rank, a),
        PeerAddress::Oob(a) => svc
            .oob
            .as_mut()
            .ok_or("oob is not open here")?
            .add_peer(peer.rank, a),
        PeerAddress::Rdmacm(a) => svc
            .rdmacm
            .as_mut()
            .ok_or("rdmacm is not open here")?
            .add_peer(peer.rank, a),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modex::build::{build_node, proc_ports};

    #[test]
    fn host_keys_keep_oibh_for_the_first_slot() {
        assert_eq!(host_key(0), KEY_HOST);
        assert_eq!(host_key(1), "oibH1");
        assert_eq!(host_key(63), "oibH63");
    }

    #[test]
    fn ports_pair_by_subnet_in_slot_order() {
        let (a, b) = (Some(0xa), Some(0xb));
        // Same layout: slot i pairs with slot i.
        assert_eq!(paired_slot(&[a, a], 0, &[a, a], false), Some(0));
        assert_eq!(paired_slot(&[a, a], 1, &[a, a], false), Some(1));
        // The peer's first port is on another subnet: my slot 0 (subnet b) pairs with its 1.
        assert_eq!(paired_slot(&[b], 0, &[a, b], false), Some(1));
        assert_eq!(paired_slot(&[a, b], 1, &[b], false), Some(0));
        // No port of the peer on my subnet, or fewer than my place on it: unpaired.
        assert_eq!(paired_slot(&[a, a], 1, &[a, b], false), None);
        assert_eq!(paired_slot(&[b], 0, &[a], false), None);
        // An unknown subnet pairs with nothing; cross-subnet pairs slot k with slot k.
        assert_eq!(paired_slot(&[None], 0, &[None], false), None);
        assert_eq!(paired_slot(&[a, b], 1, &[b, a], true), Some(1));
        assert_eq!(paired_slot(&[a], 3, &[a], false), None);
    }

    proptest::proptest! {
        /// Symmetric: whatever the two layouts, if slot i of A pairs with slot j of B, slot j
        /// of B pairs with slot i of A (both sides pick the same pair, or the CPC handshakes
        /// never meet), and no two slots of A take the same slot of B.
        #[test]
        fn pairing_is_symmetric_and_one_to_one(
            a in proptest::collection::vec(proptest::option::weighted(0.9, 0u64..3), 0..6),
            b in proptest::collection::vec(proptest::option::weighted(0.9, 0u64..3), 0..6),
            cross in proptest::bool::ANY,
        ) {
            let mut taken = std::collections::BTreeSet::new();
            for i in 0..a.len() {
                if let Some(j) = paired_slot(&a, i, &b, cross) {
                    proptest::prop_assert_eq!(paired_slot(&b, j, &a, cross), Some(i));
                    proptest::prop_assert!(taken.insert(j));
                }
            }
        }
    }

    fn node(fixture: &str, include: Option<&str>) -> (NodeBuild, Discovery) {
        node_with(fixture, include, None)
    }

    fn node_with(
        fixture: &str,
        include: Option<&str>,
        priority: Option<&str>,
    ) -> (NodeBuild, Discovery) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture);
        let topo = Topology::from_fixture_file(&path).unwrap();
        let d = derive(&topo, &DeriveConfig::default());
        let host = HostFacts {
            rdmacm: Ok(()),
            ucm: false,
            kernel: "test".into(),
        };
        let cfg = CpcConfig::parse(include, None, priority).unwrap();
        (build_node(&d, &topo, 0, &host, &cfg).unwrap(), d)
    }

    fn peer_of(n: &NodeBuild, d: &Discovery, rank: u32) -> Peer {
        let ports = proc_ports(n, d);
        Peer {
            rank,
            node: "other".into(),
            leader: rank,
            node_blob: std::sync::Arc::new(n.blob.clone()),
            proc_blob: crate::modex::build::placeholder_proc(&n.blob, ports),
            put_bytes: 0,
        }
    }

    fn local(n: &NodeBuild) -> (Vec<PortView>, Vec<Advert>) {
        let p = &n.blob.ports[0];
        (
            vec![PortView {
                index: 0,
                subnet_id: p.subnet_id,
                link_layer: p.link_layer.wire(),
                mtu: openib_ports::Mtu::from_enum(p.mtu).unwrap(),
            }],
            p.cpcs
                .iter()
                .map(|r| Advert {
                    index: r.cpc,
                    priority: r.priority,
                })
                .collect(),
        )
    }

    #[test]
    fn winner_unreachable_and_no_common_cpc() {
        let (a, _) = node("ib-dual-port.json", None);
        let (view, ads) = local(&a);
        let (b, bd) = node("ib-dual-port.json", None);
        assert_eq!(
            plan(&peer_of(&b, &bd, 1), &view, &ads, None, false, &a, 0, &[]).unwrap(),
            (CpcId::Udcm, 0)
        );
        assert_eq!(
            plan(
                &peer_of(&b, &bd, 1),
                &view,
                &ads,
                Some(CpcId::Rdmacm),
                false,
                &a,
                0,
                &[]
            )
            .unwrap()
            .0,
            CpcId::Rdmacm
        );

        // A peer on other subnets is unreachable, and the error shows both sides' subnets.
        let (far, fd) = node("ib-two-subnets.json", None);
        let e = plan(&peer_of(&far, &fd, 2), &view, &ads, None, false, &a, 0, &[]).unwrap_err();
        assert!(
            e.contains("unreachable")
                && e.contains("0xfe80000000000000")
                && e.contains("0xfec0000000000001")
                && e.contains("OPENIB_ALLOW_CROSS_SUBNET is off"),
            "{e}"
        );
        // With OPENIB_ALLOW_CROSS_SUBNET the transport pairs them (as `check` reports).
        assert_eq!(
            plan(&peer_of(&far, &fd, 2), &view, &ads, None, true, &a, 0, &[]).unwrap(),
            (CpcId::Udcm, 0)
        );

        // Disjoint CPC lists: both lists and the local refusals are in the error.
        let (only_u, _) = node("ib-dual-port.json", Some("udcm"));
        let (view_u, ads_u) = local(&only_u);
        let (only_r, rd) = node("ib-dual-port.json", Some("rdmacm"));
        let refused =
            vec!["rdmacm: excluded by configuration (not in OPENIB_CPC_INCLUDE=udcm)".to_string()];
        let e = plan(
            &peer_of(&only_r, &rd, 3),
            &view_u,
            &ads_u,
            None,
            false,
            &only_u,
            0,
            &refused,
        )
        .unwrap_err();
        assert!(
            e.contains("no common CPC with rank 3")
                && e.contains("we offer udcm")
                && e.contains("it offers rdmacm"),
            "{e}"
        );
        assert!(e.contains("OPENIB_CPC_INCLUDE=udcm"), "{e}");
        // Forcing a CPC the peer lacks names what it offers.
        let e = plan(
            &peer_of(&only_r, &rd, 3),
            &view_u,
            &ads_u,
            Some(CpcId::Udcm),
            false,
            &only_u,
            0,
            &refused,
        )
        .unwrap_err();
        assert!(
            e.contains("does not offer it") && e.contains("rdmacm"),
            "{e}"
        );
    }

    /// Two processes of one node with different OPENIB_CPC_PRIORITY: rank 0 (the node leader,
    /// defaults) and rank 1 (rdmacm:90). Each decides the pair from the lists both see (the
    /// node's published one), so both pick the same CPC; with its own list rank 1 would pick
    /// rdmacm while rank 0 picks udcm (the hang this guards against).
    #[test]
    fn both_sides_pick_the_same_cpc_when_local_priorities_differ() {
        let (leader, ld) = node("ib-dual-port.json", None);
        let (other, _) = node_with("ib-dual-port.json", None, Some("rdmacm:90"));
        let (view, leader_ads) = local(&leader);
        let (_, own_ads) = local(&other);
        assert_ne!(own_ads, leader_ads, "the two processes' own lists differ");
        // Rank 1's per-process parts are laid out as the published node blob says (its
        // records in the same order, whatever the priorities), or peers misread its addresses.
        let layout = |n: &NodeBuild| -> Vec<(u8, u8)> {
            n.blob.ports[0]
                .cpcs
                .iter()
                .map(|r| (r.cpc, r.proc_len))
                .collect()
        };
        assert_eq!(layout(&other), layout(&leader));

        // Rank 0 about rank 1 (whose node blob, as published, is rank 0's).
        let from_0 = plan(
            &peer_of(&leader, &ld, 1),
            &view,
            &leader_ads,
            None,
            false,
            &leader,
            0,
            &[],
        )
        .unwrap();
        // Rank 1 about rank 0, with the list the exchange gives it.
        let ads_1 = pair_adverts(&own_ads, &leader_ads, 0).unwrap();
        let from_1 = plan(
            &peer_of(&leader, &ld, 0),
            &view,
            &ads_1,
            None,
            false,
            &other,
            0,
            &[],
        )
        .unwrap();
        assert_eq!(from_0.0, from_1.0, "the two sides must agree");
        assert_eq!(from_0.0, CpcId::Udcm);
        // What rank 1's own list alone would pick: the disagreement.
        let own = plan(
            &peer_of(&leader, &ld, 0),
            &view,
            &own_ads,
            None,
            false,
            &other,
            0,
            &[],
        )
        .unwrap();
        assert_eq!(own.0, CpcId::Rdmacm);

        // Differing include lists: an error naming both lists, not a silent disagreement.
        let (only_u, _) = node("ib-dual-port.json", Some("udcm,oob"));
        let (_, ads_u) = local(&only_u);
        let e = pair_adverts(&ads_u, &leader_ads, 0).unwrap_err();
        assert!(
            e.contains("udcm:63")
                && e.contains("oob:50")
                && e.contains("rank 0")
                && e.contains("rdmacm:30")
                && e.contains("OPENIB_CPC_INCLUDE"),
            "{e}"
        );
    }

    /// The fallback rule: both sides order the common CPCs alike; only the initiator moves
    /// to the next one, the answering side expects it; stale and last failures.
    #[test]
    fn a_failed_winner_falls_back_through_the_common_cpcs_alike() {
        let (a, _) = node("ib-dual-port.json", None);
        let (_, ads_a) = local(&a);
        let (b, _) = node_with("ib-dual-port.json", None, Some("oob:10,rdmacm:70"));
        let (_, ads_b) = local(&b);
        let order = fallback_order(&ads_a, &ads_b);
        assert_eq!(order, fallback_order(&ads_b, &ads_a), "both sides agree");
        assert_eq!(order, vec![CpcId::Rdmacm, CpcId::Udcm, CpcId::Oob]);
        assert_eq!(
            order[0],
            CpcId::from_index(select(&ads_a, &ads_b).unwrap().index).unwrap(),
            "the winner first"
        );

        let o = [CpcId::Udcm, CpcId::Oob, CpcId::Rdmacm];
        assert_eq!(
            after_failure(true, CpcId::Udcm, CpcId::Udcm, &o),
            Next::Retry(CpcId::Oob)
        );
        assert_eq!(
            after_failure(false, CpcId::Udcm, CpcId::Udcm, &o),
            Next::Expect(CpcId::Oob)
        );
        assert_eq!(
            after_failure(true, CpcId::Oob, CpcId::Oob, &o),
            Next::Retry(CpcId::Rdmacm)
        );
        assert_eq!(
            after_failure(true, CpcId::Rdmacm, CpcId::Rdmacm, &o),
            Next::Report
        );
        assert_eq!(
            after_failure(false, CpcId::Rdmacm, CpcId::Rdmacm, &o),
            Next::Report
        );
        // A late failure of a CPC the pair left changes nothing.
        assert_eq!(
            after_failure(true, CpcId::Udcm, CpcId::Oob, &o),
            Next::Stale
        );
        assert_eq!(
            after_failure(false, CpcId::Udcm, CpcId::Rdmacm, &o),
            Next::Stale
        );
        // One common CPC: nothing to fall back to.
        assert_eq!(
            after_failure(true, CpcId::Udcm, CpcId::Udcm, &[CpcId::Udcm]),
            Next::Report
        );
        // xoob and ibcm have no connection path: never in the order.
        let x = [
            Advert {
                index: 2,
                priority: 200,
            },
            Advert {
                index: 3,
                priority: 200,
            },
            Advert {
                index: 5,
                priority: 1,
            },
        ];
        assert_eq!(fallback_order(&x, &x), vec![CpcId::Udcm]);
    }
}
