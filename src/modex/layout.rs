//! Every field of the wire format, declared once: its name (used in errors), and for the fields
//! of fixed-size groups, its offset and width inside the group. Encoder and decoder both read
//! these declarations; `docs/MODEX.md` draws them. All multi-byte integers are little-endian;
//! nothing is aligned; varints are unsigned LEB128, minimal length.

/// A field of a fixed-size group: `width` bytes at `at` from the start of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    pub name: &'static str,
    pub at: usize,
    pub width: usize,
}

impl Fixed {
    pub const fn end(&self) -> usize {
        self.at + self.width
    }
}

/// A field read on its own (a byte, a varint, a byte string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
}

/// The format version this code writes and the highest it reads.
pub const VERSION: u8 = 1;

/// Byte 0 of every blob: `VVVV KAGZ` (version in the high nibble, then four flag bits).
pub mod header {
    use super::Var;
    pub const BYTE: Var = Var { name: "header" };
    pub const VERSION_SHIFT: u32 = 4;
    /// Z: the body is compressed (a compression header follows byte 0).
    pub const COMPRESSED: u8 = 1 << 0;
    /// G: node blob only: the node leader's gathered local-process section is present.
    pub const LOCAL_PROCS: u8 = 1 << 1;
    /// A: proc blob only: the process uses every port of the node blob; the bitmap is omitted.
    pub const ALL_PORTS: u8 = 1 << 2;
    /// K: blob kind: 0 node blob, 1 proc blob.
    pub const KIND_PROC: u8 = 1 << 3;
    pub const FLAGS_MASK: u8 = 0x0f;
    /// Flags a node blob may carry.
    pub const NODE_FLAGS: u8 = COMPRESSED | LOCAL_PROCS;
    /// Flags a proc blob may carry (besides K).
    pub const PROC_FLAGS: u8 = COMPRESSED | ALL_PORTS;
}

/// The compression header, right after byte 0 when Z is set.
pub mod compression {
    use super::Var;
    pub const ALGORITHM: Var = Var {
        name: "compression.algorithm",
    };
    pub const LENGTH: Var = Var {
        name: "compression.decompressed_length",
    };
    pub const STREAM: Var = Var {
        name: "compression.stream",
    };
    /// Raw deflate (RFC 1951), no zlib or gzip wrapper.
    pub const DEFLATE: u8 = 1;
    /// No blob decompresses to more than this, whatever it claims.
    pub const MAX_DECOMPRESSED: u64 = 16 << 20;
    /// Deflate cannot expand more than 1032:1 (a 258-byte match in about 2 bits); a claim above
    /// this ratio to the stream length is a lie and is refused before anything is allocated.
    pub const MAX_RATIO: u64 = 1032;
}

/// Node blob body.
pub mod node {
    use super::{Fixed, Var};
    pub const DEVICE_COUNT: Var = Var {
        name: "node.device_count",
    };
    pub const PORT_COUNT: Var = Var {
        name: "node.port_count",
    };
    pub const EXTENSION_COUNT: Var = Var {
        name: "node.extension_count",
    };

    /// A device entry: what a peer needs to pick endpoint settings.
    pub mod device {
        use super::Fixed;
        pub const VENDOR_ID: Fixed = Fixed {
            name: "device.vendor_id",
            at: 0,
            width: 4,
        };
        pub const VENDOR_PART_ID: Fixed = Fixed {
            name: "device.vendor_part_id",
            at: 4,
            width: 4,
        };
        pub const TRANSPORT: Fixed = Fixed {
            name: "device.transport",
            at: 8,
            width: 1,
        };
        pub const LEN: usize = 9;
        pub const ENTRY: &str = "device";
        pub const ALL: [Fixed; 3] = [VENDOR_ID, VENDOR_PART_ID, TRANSPORT];
    }

    /// The fixed part of a port entry.
    pub mod port {
        use super::Fixed;
        pub const DEVICE: Fixed = Fixed {
            name: "port.device",
            at: 0,
            width: 1,
        };
        pub const PORT_NUM: Fixed = Fixed {
            name: "port.port_num",
            at: 1,
            width: 1,
        };
        pub const LINK_LAYER: Fixed = Fixed {
            name: "port.link_layer",
            at: 2,
            width: 1,
        };
        pub const MTU: Fixed = Fixed {
            name: "port.mtu",
            at: 3,
            width: 1,
        };
        pub const LID: Fixed = Fixed {
            name: "port.lid",
            at: 4,
            width: 2,
        };
        pub const APM_LID: Fixed = Fixed {
            name: "port.apm_lid",
            at: 6,
            width: 2,
        };
        pub const SUBNET_ID: Fixed = Fixed {
            name: "port.subnet_id",
            at: 8,
            width: 8,
        };
        pub const CPC_COUNT: Fixed = Fixed {
            name: "port.cpc_count",
            at: 16,
            width: 1,
        };
        pub const LEN: usize = 17;
        pub const ENTRY: &str = "port";
        pub const ALL: [Fixed; 8] = [
            DEVICE, PORT_NUM, LINK_LAYER, MTU, LID, APM_LID, SUBNET_ID, CPC_COUNT,
        ];
    }

    /// The fixed part of a CPC record; `BLOB_LEN` (varint) and the blob follow.
    pub mod cpc {
        use super::{Fixed, Var};
        pub const INDEX: Fixed = Fixed {
            name: "cpc.index",
            at: 0,
            width: 1,
        };
        pub const PRIORITY: Fixed = Fixed {
            name: "cpc.priority",
            at: 1,
            width: 1,
        };
        pub const PROC_LEN: Fixed = Fixed {
            name: "cpc.proc_len",
            at: 2,
            width: 1,
        };
        pub const LEN: usize = 3;
        pub const ENTRY: &str = "cpc";
        pub const ALL: [Fixed; 3] = [INDEX, PRIORITY, PROC_LEN];
        pub const BLOB_LEN: Var = Var {
            name: "cpc.blob_len",
        };
        pub const BLOB: Var = Var { name: "cpc.blob" };
        /// `proc_len` 255 is reserved (a future variable-length per-process part).
        pub const PROC_LEN_RESERVED: u8 = 255;
    }

    pub mod extension {
        use super::Var;
        pub const TYPE: Var = Var {
            name: "extension.type",
        };
        pub const LEN: Var = Var {
            name: "extension.len",
        };
        pub const DATA: Var = Var {
            name: "extension.data",
        };
    }
}

/// The gathered local-process section of a node blob (flag G).
pub mod procs {
    use super::Var;
    pub const COUNT: Var = Var {
        name: "procs.count",
    };
    pub const PORTS_MODE: Var = Var {
        name: "procs.ports_mode",
    };
    pub const BITMAPS: Var = Var {
        name: "procs.bitmaps",
    };
    pub const COLUMN_CODING: Var = Var {
        name: "procs.column.coding",
    };
    pub const COLUMN_RAW: Var = Var {
        name: "procs.column.values",
    };
    pub const COLUMN_FIRST: Var = Var {
        name: "procs.column.first",
    };
    pub const COLUMN_DELTA: Var = Var {
        name: "procs.column.delta",
    };
    /// Every process uses every port: no bitmaps.
    pub const MODE_ALL_PORTS: u8 = 0;
    /// One bitmap per process follows, in local-rank order.
    pub const MODE_BITMAPS: u8 = 1;
    /// Column coding: `count × width` bytes as they are.
    pub const CODING_RAW: u8 = 0;
    /// Column coding: the first value as it is, then each next one as the zigzag LEB128 varint of
    /// its wrapping difference to the previous one, values read as `width`-byte little-endian
    /// integers (CPCs store integers in their parts little-endian, as the whole format does).
    /// Width <= 8.
    pub const CODING_DELTA: u8 = 1;
    pub const MAX_DELTA_WIDTH: usize = 8;
    /// At most this many local processes in one gathered section.
    pub const MAX_COUNT: u64 = 65_536;
}

/// The proc blob body.
pub mod proc_blob {
    use super::Var;
    pub const BITMAP: Var = Var {
        name: "proc.bitmap",
    };
    pub const PART: Var = Var { name: "proc.part" };
}

/// The most ports (and devices) a node blob holds: the counts are one byte.
pub const MAX_PORTS: usize = 255;
pub const MAX_DEVICES: usize = 255;
/// Bitmap bytes for `nports` ports: ceil(nports / 8).
pub const fn bitmap_len(nports: usize) -> usize {
    nports.div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contiguous(all: &[Fixed], len: usize) {
        let mut at = 0;
        for f in all {
            assert_eq!(f.at, at, "{} must follow the previous field", f.name);
            assert!(f.width > 0);
            at = f.end();
        }
        assert_eq!(at, len);
    }

    #[test]
    fn fixed_groups_are_contiguous_and_sized() {
        contiguous(&node::device::ALL, node::device::LEN);
        contiguous(&node::port::ALL, node::port::LEN);
        contiguous(&node::cpc::ALL, node::cpc::LEN);
    }

    #[test]
    fn flag_bits_are_distinct() {
        use header::*;
        let bits = [COMPRESSED, LOCAL_PROCS, ALL_PORTS, KIND_PROC];
        assert_eq!(bits.iter().fold(0, |a, b| a | b), FLAGS_MASK);
        assert_eq!(NODE_FLAGS & PROC_FLAGS, COMPRESSED);
    }
}
