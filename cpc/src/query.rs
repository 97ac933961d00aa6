//! Can a CPC run on a port, and if not, why: the answer is shown to the user as is.

use crate::CpcId;
use openib_ports::{LinkLayer, Port};

/// What a CPC's decision depends on besides the port itself: facts about the host, probed
/// once ([`HostFacts::probe`]) or given by a test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// librdmacm could be loaded (its error when not).
    pub rdmacm: Result<(), String>,
    /// The kernel offers the userspace IB CM (`/dev/infiniband/ucm*`, removed in Linux 5.3).
    pub ucm: bool,
    /// The running kernel's release, for messages.
    pub kernel: String,
}

impl HostFacts {
    /// Probes this machine.
    pub fn probe() -> HostFacts {
        Self::probe_in(std::path::Path::new("/dev/infiniband"))
    }

    /// [`HostFacts::probe`] with the verbs device directory at `dev_dir` (a fake one in tests).
    pub fn probe_in(dev_dir: &std::path::Path) -> HostFacts {
        let ucm = std::fs::read_dir(dev_dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("ucm"))
            })
            .unwrap_or(false);
        HostFacts {
            rdmacm: openib_sys::rdmacm().map(|_| ()).map_err(|e| e.to_string()),
            ucm,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }

    /// The most permissive facts: librdmacm present and ib_ucm present (for fixtures and
    /// tests). ibcm is still refused ([`Unusable::IbcmNotImplemented`]).
    pub fn everything() -> HostFacts {
        HostFacts {
            rdmacm: Ok(()),
            ucm: true,
            kernel: "any".into(),
        }
    }
}

/// Why a CPC cannot run on a port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unusable {
    #[error("the port is not usable: {reason}")]
    PortNotUsable { reason: String },
    #[error(
        "device {device} has no XRC support (IBV_DEVICE_XRC is not set; SoftRoCE never has it)"
    )]
    NoXrc { device: String },
    #[error("device {device} has XRC, but this build has no XRC connection path yet (it could not be tested without XRC hardware); use oob, udcm or rdmacm")]
    XrcNotImplemented { device: String },
    #[error("the kernel ({kernel}) has no userspace IB connection manager (/dev/infiniband/ucm*; Linux removed ib_ucm in 5.3)")]
    NoUcm { kernel: String },
    #[error("the kernel offers the userspace IB connection manager (/dev/infiniband/ucm*), but this build has no ibcm connection path (it could not be tested: SoftRoCE has no ib_ucm); use udcm, oob or rdmacm")]
    IbcmNotImplemented,
    #[error("ibcm needs an InfiniBand port; {port} is {link_layer}")]
    NotInfiniBand { port: String, link_layer: String },
    #[error("librdmacm is not available: {detail}")]
    NoRdmacm { detail: String },
    #[error("port {port} has no IP address on its network device{} (rdmacm resolves peers by IP; RoCE needs an address on the Ethernet device, IB needs IPoIB)", .netdev.as_ref().map(|n| format!(" {n}")).unwrap_or_default())]
    NoIpAddress {
        port: String,
        netdev: Option<String>,
    },
    #[error("excluded by configuration ({how})")]
    Excluded { how: String },
}

/// Whether `cpc` can run on `port` on a host with `host` facts. `has_ip` says whether the
/// port's network device has an IP address (rdmacm needs one).
pub fn query(cpc: CpcId, port: &Port, has_ip: bool, host: &HostFacts) -> Result<(), Unusable> {
    if let Some(reason) = &port.reason {
        return Err(Unusable::PortNotUsable {
            reason: reason.clone(),
        });
    }
    match cpc {
        CpcId::Oob | CpcId::Udcm => Ok(()),
        CpcId::Xoob => {
            if port.xrc {
                Err(Unusable::XrcNotImplemented {
                    device: port.device.clone(),
                })
            } else {
                Err(Unusable::NoXrc {
                    device: port.device.clone(),
                })
            }
        }
        CpcId::Ibcm => {
            if port.link_layer() == LinkLayer::Ethernet {
                Err(Unusable::NotInfiniBand {
                    port: port.name(),
                    link_layer: port.link_layer().name(),
                })
            } else if !host.ucm {
                Err(Unusable::NoUcm {
                    kernel: host.kernel.clone(),
                })
            } else {
                Err(Unusable::IbcmNotImplemented)
            }
        }
        CpcId::Rdmacm => match (&host.rdmacm, has_ip) {
            (Err(detail), _) => Err(Unusable::NoRdmacm {
                detail: detail.clone(),
            }),
            (Ok(()), false) => Err(Unusable::NoIpAddress {
                port: port.name(),
                netdev: port.raw.netdev.clone(),
            }),
            (Ok(()), true) => Ok(()),
        },
    }
}
