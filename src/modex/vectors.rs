//! Byte-exact test vectors: decoded to the expected value and re-encoded to the same bytes, and
//! one vector per malformation with the error (kind, field, offset) it must give.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.split_whitespace())
        .collect();
    hex::decode(s).expect("a test vector is hex")
}

/// One ConnectX-5 (vendor 0x02c9, part 4119), two ACTIVE IB ports, LIDs 0x11 and 0x12, MTU 4096,
/// default subnet prefix, udcm on both (no node part, 3-byte per-process part).
const NODE_2P: &str = "
    10                                  // header: version 1, node blob, no flags
    01                                  // device_count 1
    c9020000 17100000 00                // device 0: vendor 0x02c9, part 0x1017, transport 0
    02                                  // port_count 2
    00 01 01 05 1100 0000 00000000000080fe 01
                                        // port 0: device 0, port 1, IB, MTU 5, lid 0x11, apm 0, subnet fe80::, 1 CPC
    05 3f 03 00                         // udcm (5), priority 63, proc_len 3, blob_len 0
    00 02 01 05 1200 0000 00000000000080fe 01
    05 3f 03 00
    00                                  // extension_count 0";

fn node_2p() -> NodeBlob {
    let port = |port_num, lid| NodePort {
        device: 0,
        port_num,
        link_layer: WireLinkLayer::InfiniBand,
        mtu: 5,
        lid,
        apm_lid: 0,
        subnet_id: 0xfe80_0000_0000_0000,
        cpcs: vec![CpcRecord {
            cpc: 5,
            priority: 63,
            proc_len: 3,
            blob: vec![],
        }],
    };
    NodeBlob {
        devices: vec![Device {
            vendor_id: 0x02c9,
            vendor_part_id: 4119,
            transport: 0,
        }],
        ports: vec![port(1, 0x11), port(2, 0x12)],
        local_procs: None,
        extensions: vec![],
    }
}

/// The same node with the gathered section of two processes whose UD QP numbers are
/// 0x000123/0x000124 (rank 0) and 0x000125/0x000126 (rank 1): delta-coded columns.
const NODE_2P_GATHERED: &str = "
    12                                  // header: version 1, node blob, flag G
    01 c9020000 17100000 00
    02
    00 01 01 05 1100 0000 00000000000080fe 01  05 3f 03 00
    00 02 01 05 1200 0000 00000000000080fe 01  05 3f 03 00
    02                                  // procs.count 2
    00                                  // ports mode 0: every process uses every port
    01 230100 04                        // port 0 udcm column: delta, first 0x000123, then +2 (zigzag 4)
    01 240100 04                        // port 1 udcm column: delta, first 0x000124, then +2
    00                                  // extension_count 0";

/// Rank 0's proc blob: all ports, its two QP numbers.
const PROC_ALL: &str = "1c 230100 240100";
/// A process that uses port 1 only (bitmap 0b10).
const PROC_PORT1: &str = "18 02 240100";

/// A RoCE port with rdmacm (IPv4 10.77.0.1 node part, 2-byte per-process TCP port), an
/// extension of kind 7, and a three-process gathered section whose second process excludes
/// the port (bitmaps) and whose ports are random (raw column).
const NODE_ROCE: &str = "
    12
    01 e4140000 15000000 00             // vendor 0x14e4, part 0x15
    01
    00 01 02 03 0000 0000 00004d0a00180400 01   // port 1, Ethernet, MTU 1024, subnet 0x0004_1800_0a4d_0000
    04 1e 02 04 0a4d0001                // rdmacm (4), priority 30, proc_len 2, blob 10.77.0.1
    03                                  // procs.count 3
    01 01 00 01                         // ports mode 1: bitmaps 0b1, 0b0, 0b1
    00 39a4 07c2                        // raw column: ports 0xa439, 0xc207
    01 07 02 beef";

fn node_roce() -> NodeBlob {
    let mut lp_ports = vec![PortSet::all(1), PortSet::EMPTY, PortSet::all(1)];
    lp_ports[1].remove(0);
    NodeBlob {
        devices: vec![Device {
            vendor_id: 0x14e4,
            vendor_part_id: 0x15,
            transport: 0,
        }],
        ports: vec![NodePort {
            device: 0,
            port_num: 1,
            link_layer: WireLinkLayer::Ethernet,
            mtu: 3,
            lid: 0,
            apm_lid: 0,
            subnet_id: 0x0004_1800_0a4d_0000,
            cpcs: vec![CpcRecord {
                cpc: 4,
                priority: 30,
                proc_len: 2,
                blob: vec![10, 77, 0, 1],
            }],
        }],
        local_procs: Some(LocalProcs {
            count: 3,
            ports: Some(lp_ports),
            columns: vec![vec![0x39, 0xa4, 0x07, 0xc2]],
        }),
        extensions: vec![Extension {
            kind: 7,
            data: vec![0xbe, 0xef],
        }],
    }
}

#[test]
fn node_vector_decodes_and_reencodes() {
    let b = hex(NODE_2P);
    assert_eq!(b.len(), 55);
    let v = NodeBlob::decode(&b).unwrap();
    assert_eq!(v, node_2p());
    assert_eq!(v.encode(Compression::DEFAULT).unwrap(), b);
}

#[test]
fn gathered_vector_decodes_and_reencodes() {
    let b = hex(NODE_2P_GATHERED);
    let v = NodeBlob::decode(&b).unwrap();
    let mut want = node_2p();
    let procs = vec![
        ProcBlob {
            ports: PortSet::all(2),
            parts: vec![vec![0x23, 1, 0], vec![0x24, 1, 0]],
        },
        ProcBlob {
            ports: PortSet::all(2),
            parts: vec![vec![0x25, 1, 0], vec![0x26, 1, 0]],
        },
    ];
    want.local_procs = Some(LocalProcs::gather(&want, &procs).unwrap());
    assert_eq!(v, want);
    assert_eq!(v.local_procs.as_ref().unwrap().to_proc_blobs(&v), procs);
    assert_eq!(v.encode(Compression::DEFAULT).unwrap(), b);
}

#[test]
fn proc_vectors_decode_and_reencode() {
    let node = node_2p();
    let b = hex(PROC_ALL);
    let p = ProcBlob::decode(&b, &node).unwrap();
    assert_eq!(
        p,
        ProcBlob {
            ports: PortSet::all(2),
            parts: vec![vec![0x23, 1, 0], vec![0x24, 1, 0]]
        }
    );
    assert_eq!(p.encode(&node, Compression::DEFAULT).unwrap(), b);
    let b = hex(PROC_PORT1);
    let p = ProcBlob::decode(&b, &node).unwrap();
    let mut one = PortSet::EMPTY;
    one.insert(1);
    assert_eq!(
        p,
        ProcBlob {
            ports: one,
            parts: vec![vec![0x24, 1, 0]]
        }
    );
    assert_eq!(p.encode(&node, Compression::DEFAULT).unwrap(), b);
}

#[test]
fn roce_vector_with_bitmaps_raw_column_and_extension() {
    let b = hex(NODE_ROCE);
    let v = NodeBlob::decode(&b).unwrap();
    assert_eq!(v, node_roce());
    assert_eq!(v.encode(Compression::DEFAULT).unwrap(), b);
    let procs = v.local_procs.as_ref().unwrap().to_proc_blobs(&v);
    assert_eq!(procs[1].parts, Vec::<Vec<u8>>::new());
    assert_eq!(procs[2].parts, vec![vec![0x07, 0xc2]]);
}

#[test]
fn compressed_vector_decodes() {
    // 40 identical ports' worth of records is very compressible: the encoder compresses it.
    let mut v = node_2p();
    v.devices = vec![v.devices[0]; 40];
    v.ports = (0..40u8)
        .flat_map(|d| {
            let mut a = node_2p().ports;
            for p in &mut a {
                p.device = d;
            }
            a
        })
        .collect();
    let cfg = Compression {
        threshold: 64,
        level: 1,
    };
    let b = v.encode(cfg).unwrap();
    assert_eq!(b[0], 0x11, "version 1, node, flag Z");
    assert_eq!(b[1], layout::compression::DEFLATE);
    let plain = v.encode(Compression::OFF).unwrap();
    assert!(b.len() * 3 < plain.len(), "{} vs {}", b.len(), plain.len());
    assert_eq!(NodeBlob::decode(&b).unwrap(), v);
    let info = frame::info(&b).unwrap();
    assert!(info.compressed);
    assert_eq!(info.body_len, plain.len() - 1);
    // An error inside the decompressed body is reported with its offset there.
    let mut bad = v.clone();
    bad.ports[0].mtu = 5;
    let mut body = bad.encode(Compression::OFF).unwrap();
    body[1 + 1 + 9 * 40 + 1 + layout::node::port::MTU.at] = 9;
    let z = compress::maybe_compress(&body[1..], cfg).unwrap();
    let mut blob = vec![0x11];
    blob.extend_from_slice(&z);
    let e = NodeBlob::decode(&blob).unwrap_err();
    assert_eq!(
        (e.kind(), e.field(), e.offset()),
        ("bad_mtu", "port.mtu", 1 + 9 * 40 + 1 + 3)
    );
    assert!(matches!(e, DecodeError::InDecompressed { .. }));
}

/// Applies `edit` to the bytes of `vector` and checks the decode error.
fn node_err(vector: &str, edit: impl FnOnce(&mut Vec<u8>), want: (&str, &str, usize)) {
    let mut b = hex(vector);
    edit(&mut b);
    let e = NodeBlob::decode(&b).unwrap_err();
    assert_eq!((e.kind(), e.field(), e.offset()), want, "{e}");
    assert!(!e.to_string().is_empty());
}

fn proc_err(vector: &str, edit: impl FnOnce(&mut Vec<u8>), want: (&str, &str, usize)) {
    let mut b = hex(vector);
    edit(&mut b);
    let e = ProcBlob::decode(&b, &node_2p()).unwrap_err();
    assert_eq!((e.kind(), e.field(), e.offset()), want, "{e}");
}

const P0: usize = 12; // first port entry
const P1: usize = P0 + 21; // second port entry

#[test]
fn each_malformation_has_its_typed_error() {
    node_err(NODE_2P, |b| b.clear(), ("truncated", "header", 0));
    node_err(NODE_2P, |b| b.truncate(40), ("truncated", "port", P1));
    node_err(NODE_2P, |b| b.push(0), ("trailing_bytes", "body", 55));
    node_err(NODE_2P, |b| b[0] = 0x20, ("unknown_version", "header", 0));
    node_err(NODE_2P, |b| b[0] = 0x00, ("unknown_version", "header", 0));
    node_err(NODE_2P, |b| b[0] = 0x14, ("bad_flags", "header", 0));
    node_err(NODE_2P, |b| b[0] = 0x1c, ("wrong_kind", "header", 0));
    node_err(NODE_2P, |b| b[1] = 0, ("zero", "node.device_count", 1));
    node_err(NODE_2P, |b| b[11] = 0, ("zero", "node.port_count", 11));
    node_err(
        NODE_2P,
        |b| b[P1 + 1] = 1,
        ("duplicate_port", "port.port_num", P1 + 1),
    );
    node_err(NODE_2P, |b| b[P0 + 3] = 6, ("bad_mtu", "port.mtu", P0 + 3));
    node_err(NODE_2P, |b| b[P0 + 3] = 0, ("bad_mtu", "port.mtu", P0 + 3));
    node_err(
        NODE_2P,
        |b| b[P0 + 2] = 3,
        ("bad_link_layer", "port.link_layer", P0 + 2),
    );
    node_err(NODE_2P, |b| b[P0] = 1, ("out_of_range", "port.device", P0));
    node_err(
        NODE_2P,
        |b| b[P0 + 1] = 0,
        ("out_of_range", "port.port_num", P0 + 1),
    );
    node_err(
        NODE_2P,
        |b| b[P0 + 17] = 0,
        ("out_of_range", "cpc.index", P0 + 17),
    );
    node_err(
        NODE_2P,
        |b| b[P0 + 19] = 255,
        ("out_of_range", "cpc.proc_len", P0 + 19),
    );
    node_err(
        NODE_2P,
        |b| b[P0 + 20] = 0x7f,
        ("length_past_end", "cpc.blob", P0 + 20),
    );
    node_err(
        NODE_2P,
        |b| b[P0 + 20] = 0xff,
        ("non_canonical", "cpc.blob_len", P0 + 20),
    );
    node_err(
        NODE_2P,
        |b| *b.last_mut().unwrap() = 0x80,
        ("truncated", "node.extension_count", 55),
    );
    node_err(
        NODE_2P,
        |b| {
            // A second udcm record on port 0.
            b[P0 + 16] = 2;
            b.splice(P0 + 21..P0 + 21, [5, 1, 0, 0]);
        },
        ("duplicate_cpc", "cpc.index", P0 + 21),
    );
    node_err(
        NODE_2P,
        |b| *b.last_mut().unwrap() = 1,
        ("truncated", "extension.type", 55),
    );
    node_err(
        NODE_2P,
        |b| b.splice(54.., [2, 1, 0, 1, 0]).for_each(drop),
        ("non_canonical", "extension.type", 57),
    );
    node_err(
        NODE_2P,
        |b| b.splice(54.., [0x80, 0x00]).for_each(drop),
        ("non_canonical", "node.extension_count", 54),
    );
    // Gathered section.
    const PR: usize = 54; // procs.count
    node_err(NODE_2P_GATHERED, |b| b[PR] = 0, ("zero", "procs.count", PR));
    node_err(
        NODE_2P_GATHERED,
        |b| b[PR + 1] = 2,
        ("out_of_range", "procs.ports_mode", PR + 1),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| b[PR + 2] = 2,
        ("out_of_range", "procs.column.coding", PR + 2),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| {
            b.truncate(66);
            b[65] = 0x80;
        },
        ("truncated", "procs.column.delta", 66),
    );
    // A count that does not match the columns: the next column's coding byte is garbage.
    node_err(
        NODE_2P_GATHERED,
        |b| b[PR] = 3,
        ("out_of_range", "procs.column.coding", 62),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| {
            b.splice(PR + 2..PR + 7, [0, 0x23, 1, 0, 0x25, 1, 0])
                .for_each(drop)
        },
        ("non_canonical", "procs.column.coding", PR + 2),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| b.splice(PR + 1..PR + 2, [1, 3, 7]).for_each(drop),
        ("bitmap_beyond_ports", "procs.bitmaps", PR + 3),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| b.splice(PR + 1..PR + 2, [1, 3, 3]).for_each(drop),
        ("non_canonical", "procs.bitmaps", PR + 2),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| b[PR] = 0xff,
        ("non_canonical", "procs.count", PR),
    );
    node_err(
        NODE_2P_GATHERED,
        |b| b.splice(PR..PR + 1, [0x81, 0x80, 0x04]).for_each(drop),
        ("varint_overflow", "procs.count", PR),
    );
    // Delta over a 4-byte value that zigzags to 2^32 or more: out of the width.
    {
        let mut n = node_2p();
        n.ports.truncate(1);
        n.ports[0].cpcs[0].proc_len = 1;
        let lp = LocalProcs {
            count: 2,
            ports: None,
            columns: vec![vec![1, 2]],
        };
        n.local_procs = Some(lp);
        let mut b = n.encode(Compression::OFF).unwrap();
        let at = b.len() - 4; // coding byte of the only column: raw 01 02
        b.splice(at.., [1, 1, 0x80, 0x02, 0]);
        let e = NodeBlob::decode(&b).unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            ("varint_overflow", "procs.column.delta"),
            "{e}"
        );
    }
    // Compression header.
    node_err(
        NODE_2P,
        |b| b.splice(0..1, [0x11, 2, 0]).for_each(drop),
        ("unknown_algorithm", "compression.algorithm", 1),
    );
    node_err(
        NODE_2P,
        |b| {
            b.splice(0..1, [0x11, 1, 0x80, 0x80, 0x80, 0x80, 0x10])
                .for_each(drop)
        },
        (
            "decompressed_too_large",
            "compression.decompressed_length",
            2,
        ),
    );
    node_err(
        NODE_2P,
        |b| b.splice(0..1, [0x11, 1, 54]).for_each(drop),
        ("decompression_failed", "compression.stream", 3),
    );
    // Proc blob.
    proc_err(PROC_ALL, |b| b.truncate(5), ("truncated", "proc.part", 4));
    proc_err(PROC_ALL, |b| b.push(9), ("trailing_bytes", "body", 7));
    proc_err(PROC_ALL, |b| b[0] = 0x10, ("wrong_kind", "header", 0));
    proc_err(PROC_ALL, |b| b[0] = 0x1e, ("bad_flags", "header", 0));
    proc_err(
        PROC_PORT1,
        |b| b[1] = 4,
        ("bitmap_beyond_ports", "proc.bitmap", 1),
    );
    proc_err(
        PROC_PORT1,
        |b| b[1] = 3,
        ("non_canonical", "proc.bitmap", 1),
    );
}

#[test]
fn encoder_refuses_what_the_decoder_would() {
    let mut n = node_2p();
    n.ports[1].port_num = 1;
    assert!(n.encode(Compression::OFF).is_err());
    let mut n = node_2p();
    n.ports[0].mtu = 7;
    assert!(n.encode(Compression::OFF).is_err());
    let n = node_2p();
    let p = ProcBlob {
        ports: PortSet::all(2),
        parts: vec![vec![1, 2, 3]],
    };
    assert!(p.encode(&n, Compression::OFF).is_err());
    let lp = LocalProcs {
        count: 1,
        ports: Some(vec![PortSet::all(2)]),
        columns: vec![vec![0; 3], vec![0; 3]],
    };
    assert!(
        lp.validate(&n).is_err(),
        "all-full bitmaps must be written as mode 0"
    );
}
