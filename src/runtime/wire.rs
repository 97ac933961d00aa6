//! The embedded runtime's wire format: length-prefixed frames over a UNIX socket.
//!
//! Frame: `u32` little-endian payload length, then the payload: a `u8` message tag and the
//! message's fields, integers little-endian, strings and byte strings as a `u32` length plus
//! the bytes. A frame is at most [`MAX_FRAME`] bytes; decoding is bounded and never panics.

use super::Scope;
use std::io::{Read, Write};

/// Largest frame accepted (64 MiB): a whole job's modex fits many times over.
pub const MAX_FRAME: usize = 64 << 20;

/// One committed key-value pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub scope: Scope,
    pub key: String,
    pub value: Vec<u8>,
}

/// What a get found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetStatus {
    Found(Vec<u8>),
    Timeout,
    /// The owner died before putting the key.
    PeerFailed,
}

/// Client <-> server messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Client -> server, first message: who it is, with the job's secret token.
    Hello { rank: u32, token: Vec<u8> },
    /// Server -> client: the job's shape (node name of every rank, by rank).
    Welcome { nodes: Vec<String> },
    /// Client -> server: the puts since the last commit.
    Commit { entries: Vec<Entry> },
    /// Client -> server: deliver `payload` to rank `to` (fence traffic).
    Route { to: u32, payload: Vec<u8> },
    /// Server -> client: a routed payload from rank `from`.
    Routed { from: u32, payload: Vec<u8> },
    /// Client -> server: the value `key` of `rank`, waiting up to `timeout_ms`.
    Get {
        req: u64,
        rank: u32,
        key: String,
        timeout_ms: u64,
    },
    /// Server -> client: the answer to `Get { req, .. }`.
    GetReply { req: u64, status: GetStatus },
    /// Server -> client: `rank`'s connection closed without a goodbye (it died).
    PeerGone { rank: u32 },
    /// Server -> client: a message routed to `rank` was dropped because `rank` said goodbye
    /// and left (it finished; it is not failed).
    PeerExited { rank: u32 },
    /// Client -> server: orderly end.
    Bye,
}

/// A frame could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("truncated {what} at byte {offset}")]
    Truncated { what: &'static str, offset: usize },
    #[error("unknown message tag {tag}")]
    UnknownTag { tag: u8 },
    #[error("unknown {what} value {value} at byte {offset}")]
    BadValue {
        what: &'static str,
        value: u8,
        offset: usize,
    },
    #[error("{what} at byte {offset} is not UTF-8")]
    BadUtf8 { what: &'static str, offset: usize },
    #[error("{len} trailing bytes after the message")]
    Trailing { len: usize },
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("invalid {what} at byte {offset}")]
    Invalid { what: &'static str, offset: usize },
}

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn entries(&mut self, es: &[Entry]) {
        self.u32(es.len() as u32);
        for e in es {
            self.u8(scope_code(e.scope));
            self.str(&e.key);
            self.bytes(&e.value);
        }
    }
}

/// A bounded reader over one payload.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(WireError::Truncated {
                what,
                offset: self.pos,
            });
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
    pub fn str(&mut self, what: &'static str) -> Result<String, WireError> {
        let at = self.pos;
        String::from_utf8(self.bytes(what)?).map_err(|_| WireError::BadUtf8 { what, offset: at })
    }
    /// A count of items each at least `min_item` bytes long, checked against what is left, so
    /// a forged count cannot make us allocate more than the input could hold.
    pub fn count(&mut self, what: &'static str, min_item: usize) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.buf.len() - self.pos {
            return Err(WireError::Truncated { what, offset: at });
        }
        Ok(n)
    }
    pub fn entries(&mut self) -> Result<Vec<Entry>, WireError> {
        let n = self.count("entry count", 9)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let at = self.pos;
            let code = self.u8("scope")?;
            let scope = scope_from(code).ok_or(WireError::BadValue {
                what: "scope",
                value: code,
                offset: at,
            })?;
            out.push(Entry {
                scope,
                key: self.str("key")?,
                value: self.bytes("value")?,
            });
        }
        Ok(out)
    }
    /// The offset of the next byte (for error reports).
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn finish(&self) -> Result<(), WireError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            len => Err(WireError::Trailing { len }),
        }
    }
}

/// Wire code of a scope (never re-purpose one).
pub fn scope_code(s: Scope) -> u8 {
    match s {
        Scope::Local => 1,
        Scope::Remote => 2,
        Scope::Global => 3,
    }
}

pub fn scope_from(c: u8) -> Option<Scope> {
    match c {
        1 => Some(Scope::Local),
        2 => Some(Scope::Remote),
        3 => Some(Scope::Global),
        _ => None,
    }
}

/// Encodes the entries alone (the fence's allgather payloads reuse this).
pub fn encode_entries(out: &mut Vec<u8>, es: &[Entry]) {
    let mut e = Enc(std::mem::take(out));
    e.entries(es);
    *out = e.0;
}

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::new());
        match self {
            Msg::Hello { rank, token } => {
                e.u8(1);
                e.u32(*rank);
                e.bytes(token);
            }
            Msg::Welcome { nodes } => {
                e.u8(2);
                e.u32(nodes.len() as u32);
                for n in nodes {
                    e.str(n);
                }
            }
            Msg::Commit { entries } => {
                e.u8(3);
                e.entries(entries);
            }
            Msg::Route { to, payload } => {
                e.u8(4);
                e.u32(*to);
                e.bytes(payload);
            }
            Msg::Routed { from, payload } => {
                e.u8(5);
                e.u32(*from);
                e.bytes(payload);
            }
            Msg::Get {
                req,
                rank,
                key,
                timeout_ms,
            } => {
                e.u8(6);
                e.u64(*req);
                e.u32(*rank);
                e.str(key);
                e.u64(*timeout_ms);
            }
            Msg::GetReply { req, status } => {
                e.u8(7);
                e.u64(*req);
                match status {
                    GetStatus::Found(v) => {
                        e.u8(0);
                        e.bytes(v);
                    }
                    GetStatus::Timeout => e.u8(1),
                    GetStatus::PeerFailed => e.u8(2),
                }
            }
            Msg::PeerGone { rank } => {
                e.u8(8);
                e.u32(*rank);
            }
            Msg::Bye => e.u8(9),
            Msg::PeerExited { rank } => {
                e.u8(10);
                e.u32(*rank);
            }
        }
        e.0
    }

    pub fn decode(buf: &[u8]) -> Result<Msg, WireError> {
        let mut d = Dec::new(buf);
        let tag = d.u8("message tag")?;
        let m = match tag {
            1 => Msg::Hello {
                rank: d.u32("rank")?,
                token: d.bytes("token")?,
            },
            2 => {
                let n = d.count("node count", 4)?;
                let mut nodes = Vec::with_capacity(n);
                for _ in 0..n {
                    nodes.push(d.str("node name")?);
                }
                Msg::Welcome { nodes }
            }
            3 => Msg::Commit {
                entries: d.entries()?,
            },
            4 => Msg::Route {
                to: d.u32("destination")?,
                payload: d.bytes("payload")?,
            },
            5 => Msg::Routed {
                from: d.u32("source")?,
                payload: d.bytes("payload")?,
            },
            6 => Msg::Get {
                req: d.u64("request id")?,
                rank: d.u32("rank")?,
                key: d.str("key")?,
                timeout_ms: d.u64("timeout")?,
            },
            7 => {
                let req = d.u64("request id")?;
                let at = d.pos;
                let status = match d.u8("get status")? {
                    0 => GetStatus::Found(d.bytes("value")?),
                    1 => GetStatus::Timeout,
                    2 => GetStatus::PeerFailed,
                    v => {
                        return Err(WireError::BadValue {
                            what: "get status",
                            value: v,
                            offset: at,
                        })
                    }
                };
                Msg::GetReply { req, status }
            }
            8 => Msg::PeerGone {
                rank: d.u32("rank")?,
            },
            9 => Msg::Bye,
            10 => Msg::PeerExited {
                rank: d.u32("rank")?,
            },
            tag => return Err(WireError::UnknownTag { tag }),
        };
        d.finish()?;
        Ok(m)
    }
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, m: &Msg) -> std::io::Result<()> {
    let payload = m.encode();
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&payload);
    w.write_all(&buf)
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Msg>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            WireError::TooLarge {
                len,
                max: MAX_FRAME,
            },
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Msg::decode(&payload)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// One message of every kind (unit tests, and the fuzzers' seeds in `crate::wire_oracle`;
/// cargo feature `wire-oracle`).
#[cfg(any(test, feature = "wire-oracle"))]
pub fn examples() -> Vec<Msg> {
    let e = Entry {
        scope: Scope::Local,
        key: "ib.n".into(),
        value: vec![1, 2, 3],
    };
    vec![
        Msg::Hello {
            rank: 3,
            token: vec![9; 16],
        },
        Msg::Welcome {
            nodes: vec!["a".into(), "b".into()],
        },
        Msg::Commit {
            entries: vec![
                e.clone(),
                Entry {
                    scope: Scope::Global,
                    key: String::new(),
                    value: vec![],
                },
            ],
        },
        Msg::Route {
            to: 1,
            payload: vec![7],
        },
        Msg::Routed {
            from: 2,
            payload: vec![],
        },
        Msg::Get {
            req: 5,
            rank: 0,
            key: "k".into(),
            timeout_ms: 100,
        },
        Msg::GetReply {
            req: 5,
            status: GetStatus::Found(vec![1]),
        },
        Msg::GetReply {
            req: 6,
            status: GetStatus::Timeout,
        },
        Msg::GetReply {
            req: 7,
            status: GetStatus::PeerFailed,
        },
        Msg::PeerExited { rank: 4 },
        Msg::PeerGone { rank: 4 },
        Msg::Bye,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_every_prefix_is_rejected() {
        for m in examples() {
            let b = m.encode();
            assert_eq!(Msg::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(Msg::decode(&longer), Err(WireError::Trailing { len: 1 }));
        }
    }

    #[test]
    fn byte_exact_vector() {
        let b = Msg::Route {
            to: 0x0102_0304,
            payload: vec![0xaa],
        }
        .encode();
        assert_eq!(b, [4, 0x04, 0x03, 0x02, 0x01, 1, 0, 0, 0, 0xaa]);
    }

    #[test]
    fn forged_counts_do_not_allocate() {
        let b = [3u8, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(Msg::decode(&b), Err(WireError::Truncated { .. })));
        assert_eq!(Msg::decode(&[42]), Err(WireError::UnknownTag { tag: 42 }));
    }
}
