//! Optional compression of a blob body: raw deflate (RFC 1951) via the pure-Rust miniz_oxide.
//!
//! On the wire (flag Z set): `algorithm (u8) | decompressed length (varint) | stream` right after
//! the header byte. The claimed length is capped (absolute cap, and at most 1032 times the
//! stream length, deflate's largest possible ratio) before the output buffer is allocated, and
//! the stream must decompress to exactly that many bytes and end exactly at the blob's end.

use super::error::DecodeError;
use super::layout::compression as c;
use super::reader::{put_varint, Reader};
use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

/// When and how encoders compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// Bodies of at least this many bytes are compressed (and kept compressed only if smaller).
    /// `usize::MAX` disables compression.
    pub threshold: usize,
    /// Deflate level 1 (fastest) ..= 10.
    pub level: u8,
}

impl Compression {
    /// The defaults chosen by measurement (docs/PERFORMANCE.md, "Modex"): on the gathered
    /// column layout deflate saves 0-48% of a node blob but costs every reader 4-60 us per blob
    /// to inflate, more than moving the saved bytes takes; so only bodies of 64 KiB and more
    /// (far beyond 1,024 processes x 4 ports x 2 CPCs on one node, 12 KB) are tried, at level 1.
    pub const DEFAULT: Compression = Compression {
        threshold: 64 << 10,
        level: 1,
    };
    pub const OFF: Compression = Compression {
        threshold: usize::MAX,
        level: 1,
    };
}

impl Default for Compression {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The compression header plus stream for `body`, if compressing pays under `cfg`.
pub fn maybe_compress(body: &[u8], cfg: Compression) -> Option<Vec<u8>> {
    if body.len() < cfg.threshold || body.len() as u64 > c::MAX_DECOMPRESSED {
        return None;
    }
    let stream = miniz_oxide::deflate::compress_to_vec(body, cfg.level.clamp(1, 10));
    let mut out = Vec::with_capacity(stream.len() + 6);
    out.push(c::DEFLATE);
    put_varint(&mut out, body.len() as u64);
    out.extend_from_slice(&stream);
    (out.len() < body.len()).then_some(out)
}

/// Reads the compression header and stream from `r` (which must end with the stream) and
/// returns the decompressed body and the header length.
pub fn decompress_body(r: &mut Reader<'_>) -> Result<(Vec<u8>, usize), DecodeError> {
    let start = r.offset();
    let algo_off = r.offset();
    let algo = r.u8(c::ALGORITHM)?;
    if algo != c::DEFLATE {
        return Err(DecodeError::UnknownAlgorithm {
            field: c::ALGORITHM.name,
            offset: algo_off,
            value: algo,
        });
    }
    let len_off = r.offset();
    let claimed = r.varint(c::LENGTH, u64::MAX)?;
    let stream_off = r.offset();
    let header_len = stream_off - start + 1; // + the header byte before it
    let stream = r.rest();
    let cap = c::MAX_DECOMPRESSED.min((stream.len() as u64).saturating_mul(c::MAX_RATIO));
    if claimed > cap {
        return Err(DecodeError::DecompressedTooLarge {
            field: c::LENGTH.name,
            offset: len_off,
            claimed,
            cap,
        });
    }
    let mut out = vec![0u8; claimed as usize];
    let mut state = Box::<DecompressorOxide>::default();
    let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, consumed, written) = decompress(&mut state, stream, &mut out, 0, flags);
    let fail = |why: String| {
        Err(DecodeError::Decompress {
            field: c::STREAM.name,
            offset: stream_off,
            why,
        })
    };
    match status {
        TINFLStatus::Done => {}
        TINFLStatus::HasMoreOutput => {
            return fail(format!(
                "the stream holds more than the claimed {claimed} bytes"
            ))
        }
        TINFLStatus::FailedCannotMakeProgress | TINFLStatus::NeedsMoreInput => {
            return fail("the stream is truncated".into())
        }
        other => return fail(format!("invalid deflate data ({other:?})")),
    }
    if written as u64 != claimed {
        return fail(format!(
            "the stream holds {written} bytes, the header claims {claimed}"
        ));
    }
    if consumed != stream.len() {
        return Err(DecodeError::TrailingBytes {
            field: c::STREAM.name,
            offset: stream_off + consumed,
            count: stream.len() - consumed,
        });
    }
    Ok((out, header_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_caps() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let z = maybe_compress(
            &body,
            Compression {
                threshold: 1,
                level: 1,
            },
        )
        .unwrap();
        let (back, hl) = decompress_body(&mut Reader::new(&z)).unwrap();
        assert_eq!(back, body);
        assert_eq!(hl, 1 + 1 + 2);
        // A lie about the length: refused before allocation.
        let mut lie = vec![c::DEFLATE];
        put_varint(&mut lie, 1 << 40);
        lie.extend_from_slice(&z[3..]);
        assert!(matches!(
            decompress_body(&mut Reader::new(&lie)),
            Err(DecodeError::DecompressedTooLarge { .. })
        ));
        // Claimed too short / too long.
        let mut short = vec![c::DEFLATE];
        put_varint(&mut short, 9_999);
        short.extend_from_slice(&z[3..]);
        assert!(matches!(
            decompress_body(&mut Reader::new(&short)),
            Err(DecodeError::Decompress { .. })
        ));
        let mut long = vec![c::DEFLATE];
        put_varint(&mut long, 10_001);
        long.extend_from_slice(&z[3..]);
        assert!(matches!(
            decompress_body(&mut Reader::new(&long)),
            Err(DecodeError::Decompress { .. })
        ));
        // Trailing garbage after the stream.
        let mut trail = z.clone();
        trail.push(0);
        assert!(matches!(
            decompress_body(&mut Reader::new(&trail)),
            Err(DecodeError::TrailingBytes { .. })
        ));
        // Incompressible data is not compressed.
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let noise: Vec<u8> = (0..5000).map(|_| rng.u8(..)).collect();
        assert!(maybe_compress(
            &noise,
            Compression {
                threshold: 1,
                level: 1
            }
        )
        .is_none());
        assert!(maybe_compress(&body, Compression::OFF).is_none());
    }
}
