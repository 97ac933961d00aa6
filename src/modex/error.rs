//! The typed errors of the modex codec.
//!
//! Every decode error names the field (as declared in [`super::layout`]) and the byte offset at
//! which the malformation was found. Offsets count from the first byte of the blob; for a
//! compressed blob, errors found inside the decompressed body are wrapped in
//! [`DecodeError::InDecompressed`] and their offsets count from the first decompressed byte.

/// A peer's blob is malformed. Never a panic: every malformation the decoder can meet is here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated: {field} at offset {offset} needs {needed} byte(s), {available} left")]
    Truncated {
        field: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },

    #[error("{count} trailing byte(s) after {field}, at offset {offset}")]
    TrailingBytes {
        field: &'static str,
        offset: usize,
        count: usize,
    },

    #[error("unknown version {version} in {field} at offset {offset} (this decoder reads version {supported})")]
    UnknownVersion {
        field: &'static str,
        offset: usize,
        version: u8,
        supported: u8,
    },

    #[error("{field} at offset {offset}: reserved or foreign flag bits {bits:#04x} are set")]
    BadFlags {
        field: &'static str,
        offset: usize,
        bits: u8,
    },

    #[error("{field} at offset {offset}: this is a {found} blob, expected a {expected} blob")]
    WrongKind {
        field: &'static str,
        offset: usize,
        found: &'static str,
        expected: &'static str,
    },

    #[error(
        "{field} at offset {offset}: length {len} runs past the end ({available} byte(s) left)"
    )]
    LengthPastEnd {
        field: &'static str,
        offset: usize,
        len: u64,
        available: usize,
    },

    #[error(
        "{field} at offset {offset}: bit {bit} is set but the node blob has only {nports} port(s)"
    )]
    BitmapBeyondPorts {
        field: &'static str,
        offset: usize,
        bit: usize,
        nports: usize,
    },

    #[error("{field} at offset {offset}: zero {what} (at least one is required)")]
    Zero {
        field: &'static str,
        offset: usize,
        what: &'static str,
    },

    #[error("{field} at offset {offset}: duplicate port (device index {device}, port {port} already listed)")]
    DuplicatePort {
        field: &'static str,
        offset: usize,
        device: u8,
        port: u8,
    },

    #[error("{field} at offset {offset}: duplicate CPC index {cpc} on one port")]
    DuplicateCpc {
        field: &'static str,
        offset: usize,
        cpc: u8,
    },

    #[error("{field} at offset {offset}: bad MTU enum {value} (1 = 256 ... 5 = 4096)")]
    BadMtu {
        field: &'static str,
        offset: usize,
        value: u8,
    },

    #[error("{field} at offset {offset}: bad link layer {value} (1 = InfiniBand, 2 = Ethernet)")]
    BadLinkLayer {
        field: &'static str,
        offset: usize,
        value: u8,
    },

    #[error("{field} at offset {offset}: value {value} out of range ({why})")]
    OutOfRange {
        field: &'static str,
        offset: usize,
        value: u64,
        why: &'static str,
    },

    #[error("{field} at offset {offset}: varint longer than {max_bytes} byte(s) or above {max}")]
    VarintOverflow {
        field: &'static str,
        offset: usize,
        max_bytes: usize,
        max: u64,
    },

    #[error("{field} at offset {offset}: non-canonical encoding ({why})")]
    NonCanonical {
        field: &'static str,
        offset: usize,
        why: &'static str,
    },

    #[error("{field} at offset {offset}: unknown compression algorithm {value} (1 = deflate)")]
    UnknownAlgorithm {
        field: &'static str,
        offset: usize,
        value: u8,
    },

    #[error(
        "{field} at offset {offset}: claimed decompressed length {claimed} is over the cap {cap}"
    )]
    DecompressedTooLarge {
        field: &'static str,
        offset: usize,
        claimed: u64,
        cap: u64,
    },

    #[error("{field} at offset {offset}: decompression failed: {why}")]
    Decompress {
        field: &'static str,
        offset: usize,
        why: String,
    },

    #[error("in the decompressed body (offsets count from its first byte; the compression header is {header_len} byte(s)): {source}")]
    InDecompressed {
        header_len: usize,
        source: Box<DecodeError>,
    },
}

impl DecodeError {
    /// The field the error names.
    pub fn field(&self) -> &'static str {
        use DecodeError::*;
        match self {
            Truncated { field, .. }
            | TrailingBytes { field, .. }
            | UnknownVersion { field, .. }
            | BadFlags { field, .. }
            | WrongKind { field, .. }
            | LengthPastEnd { field, .. }
            | BitmapBeyondPorts { field, .. }
            | Zero { field, .. }
            | DuplicatePort { field, .. }
            | DuplicateCpc { field, .. }
            | BadMtu { field, .. }
            | BadLinkLayer { field, .. }
            | OutOfRange { field, .. }
            | VarintOverflow { field, .. }
            | NonCanonical { field, .. }
            | UnknownAlgorithm { field, .. }
            | DecompressedTooLarge { field, .. }
            | Decompress { field, .. } => field,
            InDecompressed { source, .. } => source.field(),
        }
    }

    /// The byte offset the error names (inside the decompressed body for
    /// [`DecodeError::InDecompressed`]).
    pub fn offset(&self) -> usize {
        use DecodeError::*;
        match self {
            Truncated { offset, .. }
            | TrailingBytes { offset, .. }
            | UnknownVersion { offset, .. }
            | BadFlags { offset, .. }
            | WrongKind { offset, .. }
            | LengthPastEnd { offset, .. }
            | BitmapBeyondPorts { offset, .. }
            | Zero { offset, .. }
            | DuplicatePort { offset, .. }
            | DuplicateCpc { offset, .. }
            | BadMtu { offset, .. }
            | BadLinkLayer { offset, .. }
            | OutOfRange { offset, .. }
            | VarintOverflow { offset, .. }
            | NonCanonical { offset, .. }
            | UnknownAlgorithm { offset, .. }
            | DecompressedTooLarge { offset, .. }
            | Decompress { offset, .. } => *offset,
            InDecompressed { source, .. } => source.offset(),
        }
    }

    /// A short stable name of the malformation, for JSON output and tests.
    pub fn kind(&self) -> &'static str {
        use DecodeError::*;
        match self {
            Truncated { .. } => "truncated",
            TrailingBytes { .. } => "trailing_bytes",
            UnknownVersion { .. } => "unknown_version",
            BadFlags { .. } => "bad_flags",
            WrongKind { .. } => "wrong_kind",
            LengthPastEnd { .. } => "length_past_end",
            BitmapBeyondPorts { .. } => "bitmap_beyond_ports",
            Zero { .. } => "zero",
            DuplicatePort { .. } => "duplicate_port",
            DuplicateCpc { .. } => "duplicate_cpc",
            BadMtu { .. } => "bad_mtu",
            BadLinkLayer { .. } => "bad_link_layer",
            OutOfRange { .. } => "out_of_range",
            VarintOverflow { .. } => "varint_overflow",
            NonCanonical { .. } => "non_canonical",
            UnknownAlgorithm { .. } => "unknown_algorithm",
            DecompressedTooLarge { .. } => "decompressed_too_large",
            Decompress { .. } => "decompression_failed",
            InDecompressed { source, .. } => source.kind(),
        }
    }
}

/// A value handed to an encoder cannot be put on the wire (the decoder would reject it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what}: {count} is over the format's limit of {max}")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error("{0}")]
    Invalid(String),
}
