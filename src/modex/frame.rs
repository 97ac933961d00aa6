//! Byte 0 (version, kind, flags) and the optional compression around a blob's body.

use super::compress::{decompress_body, maybe_compress, Compression};
use super::error::DecodeError;
use super::layout::{header as h, VERSION};
use super::reader::Reader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Node,
    Proc,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Proc => "proc",
        }
    }
    fn allowed(self) -> u8 {
        match self {
            Kind::Node => h::NODE_FLAGS,
            Kind::Proc => h::PROC_FLAGS | h::KIND_PROC,
        }
    }
}

/// What byte 0 (and the compression header, if any) say, without decoding the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    pub version: u8,
    pub kind: Kind,
    /// The four flag bits as they are.
    pub flags: u8,
    pub compressed: bool,
    /// Body bytes after decompression (equal to the wire body when not compressed).
    pub body_len: usize,
}

/// Reads byte 0 and returns (kind, flags), checking version and the flags `expected` allows.
pub fn read_header(r: &mut Reader<'_>, expected: Option<Kind>) -> Result<(Kind, u8), DecodeError> {
    let off = r.offset();
    let b = r.u8(h::BYTE)?;
    let version = b >> h::VERSION_SHIFT;
    if version != VERSION {
        return Err(DecodeError::UnknownVersion {
            field: h::BYTE.name,
            offset: off,
            version,
            supported: VERSION,
        });
    }
    let flags = b & h::FLAGS_MASK;
    let kind = if flags & h::KIND_PROC != 0 {
        Kind::Proc
    } else {
        Kind::Node
    };
    if let Some(e) = expected {
        if e != kind {
            return Err(DecodeError::WrongKind {
                field: h::BYTE.name,
                offset: off,
                found: kind.name(),
                expected: e.name(),
            });
        }
    }
    let bad = flags & !kind.allowed();
    if bad != 0 {
        return Err(DecodeError::BadFlags {
            field: h::BYTE.name,
            offset: off,
            bits: bad,
        });
    }
    Ok((kind, flags))
}

/// Decodes a blob of kind `kind`: byte 0, decompression if flagged, then `body` over the body
/// reader. `body` must consume the whole body (it is checked here).
pub fn decode<T>(
    bytes: &[u8],
    kind: Kind,
    body: impl FnOnce(u8, &mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut r = Reader::new(bytes);
    let (_, flags) = read_header(&mut r, Some(kind))?;
    if flags & h::COMPRESSED != 0 {
        let (plain, header_len) = decompress_body(&mut r)?;
        let wrap = |e: DecodeError| DecodeError::InDecompressed {
            header_len,
            source: Box::new(e),
        };
        let mut br = Reader::new(&plain);
        let v = body(flags, &mut br).map_err(wrap)?;
        br.finish("body").map_err(wrap)?;
        Ok(v)
    } else {
        let v = body(flags, &mut r)?;
        r.finish("body")?;
        Ok(v)
    }
}

/// Inspects byte 0 and the compression header.
pub fn info(bytes: &[u8]) -> Result<FrameInfo, DecodeError> {
    let mut r = Reader::new(bytes);
    let (kind, flags) = read_header(&mut r, None)?;
    let compressed = flags & h::COMPRESSED != 0;
    let body_len = if compressed {
        decompress_body(&mut r)?.0.len()
    } else {
        r.remaining()
    };
    Ok(FrameInfo {
        version: VERSION,
        kind,
        flags,
        compressed,
        body_len,
    })
}

/// Finishes a blob: `buf[0]` is a placeholder for byte 0 and the body follows it. The body is
/// compressed when `cfg` says it pays.
pub fn encode(flags: u8, mut buf: Vec<u8>, cfg: Compression) -> Vec<u8> {
    let b0 = (VERSION << h::VERSION_SHIFT) | flags;
    if let Some(z) = buf.get(1..).and_then(|body| maybe_compress(body, cfg)) {
        buf.truncate(1);
        buf.extend_from_slice(&z);
        buf[0] = b0 | h::COMPRESSED;
        return buf;
    }
    if buf.is_empty() {
        buf.push(0);
    }
    buf[0] = b0;
    buf
}
