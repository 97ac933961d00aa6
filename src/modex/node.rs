//! The node blob: what is the same for every process of a node, published once per node by the
//! node leader (the lowest local rank). See `docs/MODEX.md` for the byte diagram.

use super::compress::Compression;
use super::error::{DecodeError, EncodeError};
use super::frame::{self, Kind};
use super::layout::{self as l, header as h, node as n};
use super::procs::LocalProcs;
use super::reader::{get_le, get_u8, put_le, put_varint, Reader};

/// One RDMA device of the node: what a peer needs to pick endpoint settings (Open MPI keys its
/// device parameter table on vendor id and vendor part id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    /// `IBV_TRANSPORT_*`: 0 InfiniBand (also RoCE), 1 iWARP, ...
    pub transport: u8,
}

/// Link layer as carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireLinkLayer {
    InfiniBand = 1,
    Ethernet = 2,
}

impl WireLinkLayer {
    pub fn from_wire(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::InfiniBand),
            2 => Some(Self::Ethernet),
            _ => None,
        }
    }
    pub fn wire(self) -> u8 {
        self as u8
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::InfiniBand => "InfiniBand",
            Self::Ethernet => "Ethernet",
        }
    }
}

/// One CPC's record on one port: the node-wide part of its data, and the width of the part each
/// process adds (in its proc blob or in the gathered section).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CpcRecord {
    /// The CPC's stable wire index (`openib_cpc::CpcId::index`); never 0.
    pub cpc: u8,
    pub priority: u8,
    /// Bytes of per-process data this CPC adds per process on this port (0..=254).
    pub proc_len: u8,
    /// The node-wide part (e.g. the port's IP address for rdmacm).
    pub blob: Vec<u8>,
}

/// One ACTIVE port of the node, before any per-process include/exclude.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodePort {
    /// Index into [`NodeBlob::devices`].
    pub device: u8,
    /// The port number on its device (1-based), for diagnostics and duplicate detection.
    pub port_num: u8,
    pub link_layer: WireLinkLayer,
    /// Active MTU as the verbs enum, 1 (256) ..= 5 (4096).
    pub mtu: u8,
    pub lid: u16,
    pub apm_lid: u16,
    pub subnet_id: u64,
    pub cpcs: Vec<CpcRecord>,
}

/// A tagged extension a later version may add; this version keeps unknown ones as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Extension {
    pub kind: u32,
    pub data: Vec<u8>,
}

/// The node blob.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeBlob {
    pub devices: Vec<Device>,
    pub ports: Vec<NodePort>,
    /// The node leader's gathered per-process section (flag G), if it publishes one.
    pub local_procs: Option<LocalProcs>,
    /// Strictly increasing `kind`s.
    pub extensions: Vec<Extension>,
}

fn invalid(s: String) -> EncodeError {
    EncodeError::Invalid(s)
}

impl NodeBlob {
    /// Checks everything the decoder checks, so that `encode` only writes decodable blobs.
    pub fn validate(&self) -> Result<(), EncodeError> {
        if self.devices.is_empty() || self.devices.len() > l::MAX_DEVICES {
            return Err(EncodeError::TooMany {
                what: "devices (1 at least)",
                count: self.devices.len(),
                max: l::MAX_DEVICES,
            });
        }
        if self.ports.is_empty() || self.ports.len() > l::MAX_PORTS {
            return Err(EncodeError::TooMany {
                what: "ports (1 at least)",
                count: self.ports.len(),
                max: l::MAX_PORTS,
            });
        }
        for (i, p) in self.ports.iter().enumerate() {
            if p.device as usize >= self.devices.len() {
                return Err(invalid(format!(
                    "port {i}: device index {} but {} device(s)",
                    p.device,
                    self.devices.len()
                )));
            }
            if p.port_num == 0 {
                return Err(invalid(format!("port {i}: port numbers start at 1")));
            }
            if self.ports[..i]
                .iter()
                .any(|q| q.device == p.device && q.port_num == p.port_num)
            {
                return Err(invalid(format!(
                    "port {i}: duplicate port (device {}, port {})",
                    p.device, p.port_num
                )));
            }
            if !(1..=5).contains(&p.mtu) {
                return Err(invalid(format!("port {i}: bad MTU enum {}", p.mtu)));
            }
            if p.cpcs.len() > 255 {
                return Err(EncodeError::TooMany {
                    what: "CPC records on a port",
                    count: p.cpcs.len(),
                    max: 255,
                });
            }
            for (j, c) in p.cpcs.iter().enumerate() {
                if c.cpc == 0 {
                    return Err(invalid(format!("port {i}: CPC index 0 is not a CPC")));
                }
                if p.cpcs[..j].iter().any(|d| d.cpc == c.cpc) {
                    return Err(invalid(format!("port {i}: duplicate CPC index {}", c.cpc)));
                }
                if c.proc_len == n::cpc::PROC_LEN_RESERVED {
                    return Err(invalid(format!("port {i}: proc_len 255 is reserved")));
                }
                if c.blob.len() > u32::MAX as usize {
                    return Err(EncodeError::TooMany {
                        what: "CPC blob bytes",
                        count: c.blob.len(),
                        max: u32::MAX as usize,
                    });
                }
            }
        }
        if self.extensions.windows(2).any(|w| w[0].kind >= w[1].kind) {
            return Err(invalid(
                "extension kinds must be strictly increasing".into(),
            ));
        }
        if self.extensions.len() > 255 {
            return Err(EncodeError::TooMany {
                what: "extensions",
                count: self.extensions.len(),
                max: 255,
            });
        }
        if let Some(lp) = &self.local_procs {
            lp.validate(self)?;
        }
        Ok(())
    }

    /// Encodes the blob; compressed when `cfg` says it pays.
    pub fn encode(&self, cfg: Compression) -> Result<Vec<u8>, EncodeError> {
        self.validate()?;
        let mut out = Vec::with_capacity(self.encoded_len_hint());
        out.push(0); // byte 0, written by frame::encode
        out.push(self.devices.len() as u8);
        for d in &self.devices {
            let mut g = [0u8; n::device::LEN];
            put_le(&mut g, n::device::VENDOR_ID, d.vendor_id as u64);
            put_le(&mut g, n::device::VENDOR_PART_ID, d.vendor_part_id as u64);
            put_le(&mut g, n::device::TRANSPORT, d.transport as u64);
            out.extend_from_slice(&g);
        }
        out.push(self.ports.len() as u8);
        for p in &self.ports {
            let mut g = [0u8; n::port::LEN];
            put_le(&mut g, n::port::DEVICE, p.device as u64);
            put_le(&mut g, n::port::PORT_NUM, p.port_num as u64);
            put_le(&mut g, n::port::LINK_LAYER, p.link_layer.wire() as u64);
            put_le(&mut g, n::port::MTU, p.mtu as u64);
            put_le(&mut g, n::port::LID, p.lid as u64);
            put_le(&mut g, n::port::APM_LID, p.apm_lid as u64);
            put_le(&mut g, n::port::SUBNET_ID, p.subnet_id);
            put_le(&mut g, n::port::CPC_COUNT, p.cpcs.len() as u64);
            out.extend_from_slice(&g);
            for c in &p.cpcs {
                let mut g = [0u8; n::cpc::LEN];
                put_le(&mut g, n::cpc::INDEX, c.cpc as u64);
                put_le(&mut g, n::cpc::PRIORITY, c.priority as u64);
                put_le(&mut g, n::cpc::PROC_LEN, c.proc_len as u64);
                out.extend_from_slice(&g);
                put_varint(&mut out, c.blob.len() as u64);
                out.extend_from_slice(&c.blob);
            }
        }
        let mut flags = 0;
        if let Some(lp) = &self.local_procs {
            flags |= h::LOCAL_PROCS;
            lp.encode_into(self, &mut out);
        }
        put_varint(&mut out, self.extensions.len() as u64);
        for e in &self.extensions {
            put_varint(&mut out, e.kind as u64);
            put_varint(&mut out, e.data.len() as u64);
            out.extend_from_slice(&e.data);
        }
        Ok(frame::encode(flags, out, cfg))
    }

    fn encoded_len_hint(&self) -> usize {
        let ports: usize = self
            .ports
            .iter()
            .map(|p| n::port::LEN + p.cpcs.iter().map(|c| 5 + c.blob.len()).sum::<usize>())
            .sum();
        let procs = self.local_procs.as_ref().map_or(0, |lp| {
            lp.columns.iter().map(|c| c.len() + 1).sum::<usize>() + 8
        });
        8 + self.devices.len() * n::device::LEN + ports + procs
    }

    /// Decodes an untrusted node blob.
    pub fn decode(bytes: &[u8]) -> Result<NodeBlob, DecodeError> {
        frame::decode(bytes, Kind::Node, |flags, r| {
            let mut blob = decode_devices_and_ports(r)?;
            if flags & h::LOCAL_PROCS != 0 {
                blob.local_procs = Some(LocalProcs::decode_from(r, &blob)?);
            }
            blob.extensions = decode_extensions(r)?;
            Ok(blob)
        })
    }

    /// Number of CPC records over all ports.
    pub fn record_count(&self) -> usize {
        self.ports.iter().map(|p| p.cpcs.len()).sum()
    }
}

fn decode_devices_and_ports(r: &mut Reader<'_>) -> Result<NodeBlob, DecodeError> {
    let off = r.offset();
    let ndev = r.u8(n::DEVICE_COUNT)? as usize;
    if ndev == 0 {
        return Err(DecodeError::Zero {
            field: n::DEVICE_COUNT.name,
            offset: off,
            what: "devices",
        });
    }
    let mut devices = Vec::with_capacity(ndev);
    for _ in 0..ndev {
        let g: [u8; n::device::LEN] = r.array(n::device::ENTRY)?;
        devices.push(Device {
            vendor_id: get_le(&g, n::device::VENDOR_ID) as u32,
            vendor_part_id: get_le(&g, n::device::VENDOR_PART_ID) as u32,
            transport: get_u8(&g, n::device::TRANSPORT),
        });
    }
    let off = r.offset();
    let nports = r.u8(n::PORT_COUNT)? as usize;
    if nports == 0 {
        return Err(DecodeError::Zero {
            field: n::PORT_COUNT.name,
            offset: off,
            what: "ports",
        });
    }
    let mut ports: Vec<NodePort> = Vec::with_capacity(nports.min(r.remaining() / n::port::LEN));
    for _ in 0..nports {
        let at = r.offset();
        let g: [u8; n::port::LEN] = r.array(n::port::ENTRY)?;
        let f = |x: l::Fixed| at + x.at;
        let device = get_u8(&g, n::port::DEVICE);
        if device as usize >= ndev {
            return Err(DecodeError::OutOfRange {
                field: n::port::DEVICE.name,
                offset: f(n::port::DEVICE),
                value: device as u64,
                why: "device index beyond the device count",
            });
        }
        let port_num = get_u8(&g, n::port::PORT_NUM);
        if port_num == 0 {
            return Err(DecodeError::OutOfRange {
                field: n::port::PORT_NUM.name,
                offset: f(n::port::PORT_NUM),
                value: 0,
                why: "port numbers start at 1",
            });
        }
        if ports
            .iter()
            .any(|q| q.device == device && q.port_num == port_num)
        {
            return Err(DecodeError::DuplicatePort {
                field: n::port::PORT_NUM.name,
                offset: f(n::port::PORT_NUM),
                device,
                port: port_num,
            });
        }
        let ll = get_u8(&g, n::port::LINK_LAYER);
        let link_layer = WireLinkLayer::from_wire(ll).ok_or(DecodeError::BadLinkLayer {
            field: n::port::LINK_LAYER.name,
            offset: f(n::port::LINK_LAYER),
            value: ll,
        })?;
        let mtu = get_u8(&g, n::port::MTU);
        if !(1..=5).contains(&mtu) {
            return Err(DecodeError::BadMtu {
                field: n::port::MTU.name,
                offset: f(n::port::MTU),
                value: mtu,
            });
        }
        let ncpc = get_u8(&g, n::port::CPC_COUNT) as usize;
        let mut cpcs: Vec<CpcRecord> =
            Vec::with_capacity(ncpc.min(r.remaining() / (n::cpc::LEN + 1)));
        let mut seen = [false; 256];
        for _ in 0..ncpc {
            let at = r.offset();
            let g: [u8; n::cpc::LEN] = r.array(n::cpc::ENTRY)?;
            let cpc = get_u8(&g, n::cpc::INDEX);
            if cpc == 0 {
                return Err(DecodeError::OutOfRange {
                    field: n::cpc::INDEX.name,
                    offset: at + n::cpc::INDEX.at,
                    value: 0,
                    why: "CPC index 0 is not a CPC",
                });
            }
            if seen[cpc as usize] {
                return Err(DecodeError::DuplicateCpc {
                    field: n::cpc::INDEX.name,
                    offset: at + n::cpc::INDEX.at,
                    cpc,
                });
            }
            let proc_len = get_u8(&g, n::cpc::PROC_LEN);
            if proc_len == n::cpc::PROC_LEN_RESERVED {
                return Err(DecodeError::OutOfRange {
                    field: n::cpc::PROC_LEN.name,
                    offset: at + n::cpc::PROC_LEN.at,
                    value: proc_len as u64,
                    why: "proc_len 255 is reserved",
                });
            }
            let len_off = r.offset();
            let len = r.varint(n::cpc::BLOB_LEN, u32::MAX as u64)?;
            let mut sub = r.sub(n::cpc::BLOB, len, len_off)?;
            let blob = sub.rest().to_vec();
            seen[cpc as usize] = true;
            cpcs.push(CpcRecord {
                cpc,
                priority: get_u8(&g, n::cpc::PRIORITY),
                proc_len,
                blob,
            });
        }
        ports.push(NodePort {
            device,
            port_num,
            link_layer,
            mtu,
            lid: get_le(&g, n::port::LID) as u16,
            apm_lid: get_le(&g, n::port::APM_LID) as u16,
            subnet_id: get_le(&g, n::port::SUBNET_ID),
            cpcs,
        });
    }
    Ok(NodeBlob {
        devices,
        ports,
        local_procs: None,
        extensions: Vec::new(),
    })
}

fn decode_extensions(r: &mut Reader<'_>) -> Result<Vec<Extension>, DecodeError> {
    let count = r.varint(n::EXTENSION_COUNT, 255)?;
    let mut out: Vec<Extension> = Vec::new();
    for _ in 0..count {
        let off = r.offset();
        let kind = r.varint(n::extension::TYPE, u32::MAX as u64)? as u32;
        if out.last().is_some_and(|e| e.kind >= kind) {
            return Err(DecodeError::NonCanonical {
                field: n::extension::TYPE.name,
                offset: off,
                why: "extension kinds must be strictly increasing",
            });
        }
        let len_off = r.offset();
        let len = r.varint(n::extension::LEN, u32::MAX as u64)?;
        let data = r.sub(n::extension::DATA, len, len_off)?.rest().to_vec();
        out.push(Extension { kind, data });
    }
    Ok(out)
}
