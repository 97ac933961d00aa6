//! The per-process data: the proc blob each process publishes, and the gathered section a node
//! leader may publish instead (flag G of the node blob), column by column.

use super::compress::Compression;
use super::error::{DecodeError, EncodeError};
use super::frame::{self, Kind};
use super::layout::{self as l, header as h, proc_blob as pb, procs as ps};
use super::node::NodeBlob;
use super::reader::{put_varint, unzigzag, varint_len, zigzag, Reader};

/// A set of node-blob port indices (0..255).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortSet([u64; 4]);

impl PortSet {
    pub const EMPTY: PortSet = PortSet([0; 4]);

    /// Ports `0..n`.
    pub fn all(n: usize) -> PortSet {
        let mut s = PortSet::EMPTY;
        for i in 0..n.min(256) {
            s.insert(i);
        }
        s
    }
    pub fn contains(&self, i: usize) -> bool {
        i < 256 && self.0[i / 64] >> (i % 64) & 1 == 1
    }
    pub fn insert(&mut self, i: usize) {
        if i < 256 {
            self.0[i / 64] |= 1 << (i % 64);
        }
    }
    pub fn remove(&mut self, i: usize) {
        if i < 256 {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..256).filter(|&i| self.contains(i))
    }
    /// Highest member, if any.
    pub fn max(&self) -> Option<usize> {
        (0..256).rev().find(|&i| self.contains(i))
    }
    /// Bit i is bit (i mod 8) of byte (i / 8): least significant bit first.
    pub fn to_bitmap(&self, nports: usize, out: &mut Vec<u8>) {
        for byte in 0..l::bitmap_len(nports) {
            out.push((0..8).fold(0u8, |b, bit| {
                b | (self.contains(byte * 8 + bit) as u8) << bit
            }));
        }
    }
    /// Parses a bitmap of `nports` ports; a bit set beyond them is an error.
    pub fn from_bitmap(
        bytes: &[u8],
        nports: usize,
        field: &'static str,
        offset: usize,
    ) -> Result<PortSet, DecodeError> {
        let mut s = PortSet::EMPTY;
        for (byte, &b) in bytes.iter().enumerate() {
            for bit in 0..8 {
                if b >> bit & 1 == 1 {
                    let i = byte * 8 + bit;
                    if i >= nports {
                        return Err(DecodeError::BitmapBeyondPorts {
                            field,
                            offset: offset + byte,
                            bit: i,
                            nports,
                        });
                    }
                    s.insert(i);
                }
            }
        }
        Ok(s)
    }
}

/// What one process publishes: the node-blob ports it uses, and for each used port (in node
/// order) and each CPC record of that port (in record order) the record's `proc_len` bytes.
/// Records with `proc_len` 0 have an empty part here and nothing on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcBlob {
    pub ports: PortSet,
    pub parts: Vec<Vec<u8>>,
}

impl ProcBlob {
    /// The (port index, record index) each entry of `parts` belongs to, for a process using `ports`.
    pub fn slots(node: &NodeBlob, ports: PortSet) -> impl Iterator<Item = (usize, usize)> + '_ {
        node.ports
            .iter()
            .enumerate()
            .filter(move |(i, _)| ports.contains(*i))
            .flat_map(|(i, p)| (0..p.cpcs.len()).map(move |j| (i, j)))
    }

    pub fn validate(&self, node: &NodeBlob) -> Result<(), EncodeError> {
        if let Some(m) = self.ports.max() {
            if m >= node.ports.len() {
                return Err(EncodeError::Invalid(format!(
                    "proc blob uses port index {m}; the node blob has {}",
                    node.ports.len()
                )));
            }
        }
        let slots: Vec<(usize, usize)> = Self::slots(node, self.ports).collect();
        if slots.len() != self.parts.len() {
            return Err(EncodeError::Invalid(format!(
                "proc blob has {} parts, its ports need {}",
                self.parts.len(),
                slots.len()
            )));
        }
        for ((i, j), part) in slots.into_iter().zip(&self.parts) {
            let want = node.ports[i].cpcs[j].proc_len as usize;
            if part.len() != want {
                return Err(EncodeError::Invalid(format!(
                    "part for port {i} CPC record {j}: {} bytes, proc_len is {want}",
                    part.len()
                )));
            }
        }
        Ok(())
    }

    /// Encodes the proc blob, which is read against `node`.
    pub fn encode(&self, node: &NodeBlob, cfg: Compression) -> Result<Vec<u8>, EncodeError> {
        self.validate(node)?;
        let n = node.ports.len();
        let mut out = Vec::with_capacity(
            1 + l::bitmap_len(n) + self.parts.iter().map(Vec::len).sum::<usize>(),
        );
        out.push(0);
        let mut flags = h::KIND_PROC;
        if self.ports == PortSet::all(n) {
            flags |= h::ALL_PORTS;
        } else {
            self.ports.to_bitmap(n, &mut out);
        }
        for p in &self.parts {
            out.extend_from_slice(p);
        }
        Ok(frame::encode(flags, out, cfg))
    }

    /// Decodes an untrusted proc blob against the node blob of its node.
    pub fn decode(bytes: &[u8], node: &NodeBlob) -> Result<ProcBlob, DecodeError> {
        frame::decode(bytes, Kind::Proc, |flags, r| {
            let n = node.ports.len();
            let ports = if flags & h::ALL_PORTS != 0 {
                PortSet::all(n)
            } else {
                let off = r.offset();
                let bm = r.take(pb::BITMAP.name, l::bitmap_len(n))?;
                let s = PortSet::from_bitmap(bm, n, pb::BITMAP.name, off)?;
                if s == PortSet::all(n) {
                    return Err(DecodeError::NonCanonical {
                        field: pb::BITMAP.name,
                        offset: off,
                        why: "a bitmap of every port must be written as flag A",
                    });
                }
                s
            };
            let mut parts = Vec::new();
            for (i, j) in Self::slots(node, ports) {
                let w = node.ports[i].cpcs[j].proc_len as usize;
                parts.push(r.take(pb::PART.name, w)?.to_vec());
            }
            Ok(ProcBlob { ports, parts })
        })
    }
}

/// The gathered section: the per-process data of all `count` local processes of the node, in
/// local-rank order, stored column by column: one column per (port, CPC record) holding the
/// record's `proc_len` bytes for each process that uses the port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalProcs {
    pub count: u32,
    /// `None`: every process uses every port. Else one set per process (not all of them full).
    pub ports: Option<Vec<PortSet>>,
    /// One per (port index, record index) in node order, including empty ones.
    pub columns: Vec<Vec<u8>>,
}

fn width_mask(w: usize) -> u64 {
    if w >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * w)) - 1
    }
}

/// A column value: `w` bytes read as a little-endian integer, like every integer of the format.
fn le_value(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64)
}

fn put_le_value(out: &mut Vec<u8>, v: u64, w: usize) {
    for i in 0..w {
        out.push((v >> (8 * i)) as u8);
    }
}

/// The signed wrapping difference `v - prev` in `w` bytes, zigzagged (< 2^(8w)).
fn delta_zz(v: u64, prev: u64, w: usize) -> u64 {
    let mask = width_mask(w);
    let d = v.wrapping_sub(prev) & mask;
    let signed = if w >= 8 {
        d as i64
    } else if d >> (8 * w - 1) == 1 {
        d as i64 - (1i64 << (8 * w))
    } else {
        d as i64
    };
    zigzag(signed)
}

/// Bytes the delta coding of `col` (values of width `w`) takes, coding byte excluded.
pub(crate) fn delta_len(col: &[u8], w: usize) -> usize {
    let mut vals = col.chunks_exact(w).map(le_value);
    let Some(mut prev) = vals.next() else {
        return 0;
    };
    let mut len = w;
    for v in vals {
        len += varint_len(delta_zz(v, prev, w));
        prev = v;
    }
    len
}

/// Whether the encoder codes this column as deltas (also what the decoder demands).
fn use_delta(col: &[u8], w: usize, delta: bool) -> bool {
    delta && w <= ps::MAX_DELTA_WIDTH && delta_len(col, w) < col.len()
}

impl LocalProcs {
    /// How many processes use node port `i`.
    pub fn users(&self, i: usize) -> usize {
        match &self.ports {
            None => self.count as usize,
            Some(v) => v.iter().filter(|s| s.contains(i)).count(),
        }
    }

    fn column_slots(node: &NodeBlob) -> impl Iterator<Item = (usize, usize)> + '_ {
        node.ports
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..p.cpcs.len()).map(move |j| (i, j)))
    }

    pub fn validate(&self, node: &NodeBlob) -> Result<(), EncodeError> {
        if self.count == 0 || self.count as u64 > ps::MAX_COUNT {
            return Err(EncodeError::TooMany {
                what: "local processes (1 at least)",
                count: self.count as usize,
                max: ps::MAX_COUNT as usize,
            });
        }
        let n = node.ports.len();
        if let Some(v) = &self.ports {
            if v.len() != self.count as usize {
                return Err(EncodeError::Invalid(format!(
                    "{} port sets for {} processes",
                    v.len(),
                    self.count
                )));
            }
            if v.iter().any(|s| s.max().is_some_and(|m| m >= n)) {
                return Err(EncodeError::Invalid(
                    "a process uses a port beyond the node's ports".into(),
                ));
            }
            if v.iter().all(|s| *s == PortSet::all(n)) {
                return Err(EncodeError::Invalid(
                    "every process uses every port: ports must be None".into(),
                ));
            }
        }
        let slots: Vec<(usize, usize)> = Self::column_slots(node).collect();
        if slots.len() != self.columns.len() {
            return Err(EncodeError::Invalid(format!(
                "{} columns, the node has {} CPC records",
                self.columns.len(),
                slots.len()
            )));
        }
        for ((i, j), col) in slots.into_iter().zip(&self.columns) {
            let want = self.users(i) * node.ports[i].cpcs[j].proc_len as usize;
            if col.len() != want {
                return Err(EncodeError::Invalid(format!(
                    "column for port {i} record {j}: {} bytes, want {want}",
                    col.len()
                )));
            }
        }
        Ok(())
    }

    /// Gathers the proc blobs of the node's processes (in local-rank order).
    pub fn gather(node: &NodeBlob, procs: &[ProcBlob]) -> Result<LocalProcs, EncodeError> {
        for p in procs {
            p.validate(node)?;
        }
        let n = node.ports.len();
        let all = PortSet::all(n);
        let ports = procs
            .iter()
            .any(|p| p.ports != all)
            .then(|| procs.iter().map(|p| p.ports).collect());
        let slots: Vec<(usize, usize)> = Self::column_slots(node).collect();
        let mut columns: Vec<Vec<u8>> = slots
            .iter()
            .map(|&(i, j)| {
                Vec::with_capacity(procs.len() * node.ports[i].cpcs[j].proc_len as usize)
            })
            .collect();
        // Column index of (i, 0).
        let mut first = Vec::with_capacity(n);
        let mut k = 0;
        for p in &node.ports {
            first.push(k);
            k += p.cpcs.len();
        }
        for p in procs {
            for ((i, j), part) in ProcBlob::slots(node, p.ports).zip(&p.parts) {
                columns[first[i] + j].extend_from_slice(part);
            }
        }
        let lp = LocalProcs {
            count: procs.len() as u32,
            ports,
            columns,
        };
        lp.validate(node)?;
        Ok(lp)
    }

    /// The per-process part of local rank `rank` for CPC record `rec` of node port `port`,
    /// read in place (what a peer connecting to that process needs); `None` if the process
    /// does not use the port or an index is out of range.
    pub fn part<'a>(
        &'a self,
        node: &NodeBlob,
        rank: usize,
        port: usize,
        rec: usize,
    ) -> Option<&'a [u8]> {
        if rank >= self.count as usize {
            return None;
        }
        let w = node.ports.get(port)?.cpcs.get(rec)?.proc_len as usize;
        let column = node.ports[..port]
            .iter()
            .map(|p| p.cpcs.len())
            .sum::<usize>()
            + rec;
        let pos = match &self.ports {
            None => rank,
            Some(v) => {
                if !v.get(rank)?.contains(port) {
                    return None;
                }
                v[..rank].iter().filter(|s| s.contains(port)).count()
            }
        };
        self.columns.get(column)?.get(pos * w..pos * w + w)
    }

    /// The proc blob of every local process, in local-rank order.
    pub fn to_proc_blobs(&self, node: &NodeBlob) -> Vec<ProcBlob> {
        let all = PortSet::all(node.ports.len());
        let slots: Vec<(usize, usize)> = Self::column_slots(node).collect();
        let mut cursor = vec![0usize; self.columns.len()];
        let mut first = Vec::new();
        let mut k = 0;
        for p in &node.ports {
            first.push(k);
            k += p.cpcs.len();
        }
        (0..self.count as usize)
            .map(|rank| {
                // (Indexing is checked: a hand-built, invalid section gives empty parts, not a panic.)
                let ports = self
                    .ports
                    .as_ref()
                    .map_or(all, |v| v.get(rank).copied().unwrap_or(PortSet::EMPTY));
                let parts = ProcBlob::slots(node, ports)
                    .map(|(i, j)| {
                        let c = first[i] + j;
                        let w = node.ports[slots[c].0].cpcs[slots[c].1].proc_len as usize;
                        let s = self
                            .columns
                            .get(c)
                            .and_then(|col| col.get(cursor[c]..cursor[c] + w));
                        cursor[c] += w;
                        s.map(<[u8]>::to_vec).unwrap_or_default()
                    })
                    .collect();
                ProcBlob { ports, parts }
            })
            .collect()
    }

    pub(crate) fn encode_into(&self, node: &NodeBlob, out: &mut Vec<u8>) {
        self.encode_into_with(node, out, true)
    }

    /// `delta: false` forces raw columns (used by the layout measurements).
    pub(crate) fn encode_into_with(&self, node: &NodeBlob, out: &mut Vec<u8>, delta: bool) {
        put_varint(out, self.count as u64);
        let n = node.ports.len();
        match &self.ports {
            None => out.push(ps::MODE_ALL_PORTS),
            Some(v) => {
                out.push(ps::MODE_BITMAPS);
                for s in v {
                    s.to_bitmap(n, out);
                }
            }
        }
        let slots: Vec<(usize, usize)> = Self::column_slots(node).collect();
        for (&(i, j), col) in slots.iter().zip(&self.columns) {
            let w = node.ports[i].cpcs[j].proc_len as usize;
            if w == 0 || col.is_empty() {
                continue;
            }
            if use_delta(col, w, delta) {
                out.push(ps::CODING_DELTA);
                let mut vals = col.chunks_exact(w).map(le_value);
                let mut prev = vals.next().unwrap_or(0);
                put_le_value(out, prev, w);
                for v in vals {
                    put_varint(out, delta_zz(v, prev, w));
                    prev = v;
                }
            } else {
                out.push(ps::CODING_RAW);
                out.extend_from_slice(col);
            }
        }
    }

    pub(crate) fn decode_from(
        r: &mut Reader<'_>,
        node: &NodeBlob,
    ) -> Result<LocalProcs, DecodeError> {
        let off = r.offset();
        let count = r.varint(ps::COUNT, ps::MAX_COUNT)?;
        if count == 0 {
            return Err(DecodeError::Zero {
                field: ps::COUNT.name,
                offset: off,
                what: "local processes",
            });
        }
        let n = node.ports.len();
        let bl = l::bitmap_len(n);
        let off = r.offset();
        let mode = r.u8(ps::PORTS_MODE)?;
        let ports = match mode {
            ps::MODE_ALL_PORTS => None,
            ps::MODE_BITMAPS => {
                let boff = r.offset();
                let bytes = r.take(ps::BITMAPS.name, count as usize * bl)?;
                let all = PortSet::all(n);
                let mut v = Vec::with_capacity(count as usize);
                for (k, b) in bytes.chunks_exact(bl).enumerate() {
                    v.push(PortSet::from_bitmap(b, n, ps::BITMAPS.name, boff + k * bl)?);
                }
                if v.iter().all(|s| *s == all) {
                    return Err(DecodeError::NonCanonical {
                        field: ps::BITMAPS.name,
                        offset: boff,
                        why: "every process uses every port: use ports mode 0",
                    });
                }
                Some(v)
            }
            other => {
                return Err(DecodeError::OutOfRange {
                    field: ps::PORTS_MODE.name,
                    offset: off,
                    value: other as u64,
                    why: "ports mode is 0 (all ports) or 1 (bitmaps)",
                })
            }
        };
        let mut lp = LocalProcs {
            count: count as u32,
            ports,
            columns: Vec::new(),
        };
        let users: Vec<usize> = (0..n).map(|i| lp.users(i)).collect();
        let slots: Vec<(usize, usize)> = Self::column_slots(node).collect();
        let mut columns = Vec::with_capacity(slots.len());
        for (i, j) in slots {
            let w = node.ports[i].cpcs[j].proc_len as usize;
            let m = users[i];
            if w == 0 || m == 0 {
                columns.push(Vec::new());
                continue;
            }
            let coff = r.offset();
            let coding = r.u8(ps::COLUMN_CODING)?;
            let col = match coding {
                ps::CODING_RAW => {
                    let col = r.take(ps::COLUMN_RAW.name, m * w)?.to_vec();
                    if use_delta(&col, w, true) {
                        return Err(DecodeError::NonCanonical {
                            field: ps::COLUMN_CODING.name,
                            offset: coff,
                            why: "this column is shorter delta-coded, and must be",
                        });
                    }
                    col
                }
                ps::CODING_DELTA if w <= ps::MAX_DELTA_WIDTH => {
                    let start = r.offset();
                    let first = r.take(ps::COLUMN_FIRST.name, w)?;
                    let mut col = Vec::with_capacity((m * w).min(w + r.remaining() * w));
                    col.extend_from_slice(first);
                    let mask = width_mask(w);
                    let mut prev = le_value(first);
                    for _ in 1..m {
                        let zz = r.varint(ps::COLUMN_DELTA, mask)?;
                        let v = prev.wrapping_add(unzigzag(zz) as u64) & mask;
                        put_le_value(&mut col, v, w);
                        prev = v;
                    }
                    if r.offset() - start >= col.len() {
                        return Err(DecodeError::NonCanonical {
                            field: ps::COLUMN_CODING.name,
                            offset: coff,
                            why: "this column is not shorter delta-coded: it must be raw",
                        });
                    }
                    col
                }
                other => {
                    return Err(DecodeError::OutOfRange {
                        field: ps::COLUMN_CODING.name,
                        offset: coff,
                        value: other as u64,
                        why: "column coding is 0 (raw) or 1 (delta, widths up to 8)",
                    })
                }
            };
            columns.push(col);
        }
        lp.columns = columns;
        Ok(lp)
    }
}

/// Encodes `node` with its gathered section's columns all raw (layout measurements only).
pub fn encode_raw_columns(node: &NodeBlob) -> Result<Vec<u8>, EncodeError> {
    node.validate()?;
    let mut body = node.clone();
    let lp = body.local_procs.take();
    let mut out = body.encode(Compression::OFF)?;
    // Re-splice: the node encoding without G ends with the extension list; rebuild with G.
    let ext_len = ext_tail_len(&body);
    let tail = out.split_off(out.len() - ext_len);
    if let Some(lp) = lp {
        out[0] |= h::LOCAL_PROCS;
        lp.encode_into_with(node, &mut out, false);
    }
    out.extend_from_slice(&tail);
    Ok(out)
}

fn ext_tail_len(node: &NodeBlob) -> usize {
    varint_len(node.extensions.len() as u64)
        + node
            .extensions
            .iter()
            .map(|e| varint_len(e.kind as u64) + varint_len(e.data.len() as u64) + e.data.len())
            .sum::<usize>()
}
