//! The bounded reader every decoder goes through, and the writer helpers of the encoders.
//!
//! A [`Reader`] never reads past its slice: every read checks the bytes left first and returns
//! [`DecodeError::Truncated`] naming the field and the offset. Offsets are absolute (a sub-reader
//! keeps its parent's base). Varints are LEB128, minimal length only, so that every accepted
//! byte string re-encodes to itself.

use super::error::DecodeError;
use super::layout::{Fixed, Var};

#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the outermost blob.
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// Absolute offset of the next byte.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                field,
                offset: self.offset(),
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array (a fixed-size group).
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.take(field, N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub fn u8(&mut self, f: Var) -> Result<u8, DecodeError> {
        Ok(self.take(f.name, 1)?[0])
    }

    /// A length-prefixed part: a reader over the next `len` bytes, whose offsets stay absolute.
    /// `len_offset` is where the length itself was read (named in the error).
    pub fn sub(&mut self, f: Var, len: u64, len_offset: usize) -> Result<Reader<'a>, DecodeError> {
        let available = self.remaining();
        if len > available as u64 {
            return Err(DecodeError::LengthPastEnd {
                field: f.name,
                offset: len_offset,
                len,
                available,
            });
        }
        let base = self.offset();
        let buf = self.take(f.name, len as usize)?;
        Ok(Reader { buf, pos: 0, base })
    }

    /// Unsigned LEB128, at most `max` and minimal length.
    pub fn varint(&mut self, f: Var, max: u64) -> Result<u64, DecodeError> {
        // Fast path: one byte (the common case for counts, lengths and small deltas).
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 && b as u64 <= max {
                self.pos += 1;
                return Ok(b as u64);
            }
        }
        let start = self.offset();
        let max_bytes = varint_len(max);
        let mut v: u64 = 0;
        for i in 0..max_bytes {
            let b = self.take(f.name, 1)?[0];
            let chunk = (b & 0x7f) as u64;
            let shift = 7 * i as u32;
            if shift >= 64 || (chunk << shift) >> shift != chunk {
                return Err(DecodeError::VarintOverflow {
                    field: f.name,
                    offset: start,
                    max_bytes,
                    max,
                });
            }
            v |= chunk << shift;
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return Err(DecodeError::NonCanonical {
                        field: f.name,
                        offset: start,
                        why: "varint has a redundant zero byte",
                    });
                }
                if v > max {
                    return Err(DecodeError::VarintOverflow {
                        field: f.name,
                        offset: start,
                        max_bytes,
                        max,
                    });
                }
                return Ok(v);
            }
        }
        Err(DecodeError::VarintOverflow {
            field: f.name,
            offset: start,
            max_bytes,
            max,
        })
    }

    /// Fails unless every byte was read.
    pub fn finish(&self, after: &'static str) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(DecodeError::TrailingBytes {
                field: after,
                offset: self.offset(),
                count: self.remaining(),
            });
        }
        Ok(())
    }
}

/// A field of a fixed-size group, as bytes (in bounds by the layout tests).
pub fn field(group: &[u8], f: Fixed) -> &[u8] {
    &group[f.at..f.end()]
}

pub fn get_u8(group: &[u8], f: Fixed) -> u8 {
    group[f.at]
}

/// Little-endian unsigned integer of the field's width (at most 8).
pub fn get_le(group: &[u8], f: Fixed) -> u64 {
    field(group, f)
        .iter()
        .rev()
        .fold(0u64, |a, &b| (a << 8) | b as u64)
}

pub fn put_le(group: &mut [u8], f: Fixed, v: u64) {
    for (i, b) in group[f.at..f.end()].iter_mut().enumerate() {
        *b = (v >> (8 * i)) as u8;
    }
}

/// Bytes a minimal LEB128 encoding of `v` takes.
pub const fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    if bits == 0 {
        1
    } else {
        bits.div_ceil(7)
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    const F: Var = Var { name: "t" };

    #[test]
    fn varints_are_minimal_and_bounded() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            let mut r = Reader::new(&b);
            assert_eq!(r.varint(F, u64::MAX).unwrap(), v);
            assert!(r.is_empty());
        }
        assert!(matches!(
            Reader::new(&[0x80, 0x00]).varint(F, u64::MAX),
            Err(DecodeError::NonCanonical { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x80]).varint(F, u64::MAX),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&[0x80, 0x02]).varint(F, 255),
            Err(DecodeError::VarintOverflow { .. })
        ));
        let eleven = [0xffu8; 11];
        assert!(matches!(
            Reader::new(&eleven).varint(F, u64::MAX),
            Err(DecodeError::VarintOverflow { .. })
        ));
        let mut top = vec![0xffu8; 9];
        top.push(0x02); // bit 64
        assert!(matches!(
            Reader::new(&top).varint(F, u64::MAX),
            Err(DecodeError::VarintOverflow { .. })
        ));
    }

    #[test]
    fn sub_readers_keep_absolute_offsets() {
        let b = [1u8, 2, 3, 4, 5];
        let mut r = Reader::new(&b);
        r.take("a", 1).unwrap();
        let mut s = r.sub(F, 3, 0).unwrap();
        assert_eq!(s.offset(), 1);
        s.take("b", 2).unwrap();
        let e = s.finish("b").unwrap_err();
        assert_eq!(
            e,
            DecodeError::TrailingBytes {
                field: "b",
                offset: 3,
                count: 1
            }
        );
        assert!(matches!(
            r.sub(F, 5, 0),
            Err(DecodeError::LengthPastEnd {
                len: 5,
                available: 1,
                ..
            })
        ));
    }

    #[test]
    fn zigzag_round_trips() {
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
