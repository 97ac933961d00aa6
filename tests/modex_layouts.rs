//! The layout measurement behind docs/PERFORMANCE.md ("Modex"): sizes and times of candidate
//! layouts on job shapes from 1 to 65,536 processes. Prints Markdown tables:
//!
//!     cargo test --release -p openib --test modex_layouts -- --ignored --nocapture
//!
//! The tables assert the claims docs/PERFORMANCE.md ("What the numbers decided") and
//! docs/MODEX.md make of them (sizes and ratios only, never times); the quick (non-ignored)
//! test checks some of them on a small shape.

use openib::modex::fixtures::{ib_template, synth_job};
use openib::modex::procs::encode_raw_columns;
use openib::modex::size::{kv_bytes, ompi_value_len, OMPI41_KEY, OMPI41_PORT_COMMON};
use openib::modex::synth::{SynthNode, Values};
use openib::modex::{Compression, LocalProcs, NodeBlob, ProcBlob, KEY_NODE, KEY_PROC};
use std::time::Instant;

const Z1: Compression = Compression {
    threshold: 0,
    level: 1,
};
const Z6: Compression = Compression {
    threshold: 0,
    level: 6,
};

fn deflate_len(b: &[u8], level: u8) -> usize {
    // Header byte + algorithm + length varint + stream, as the format would carry it.
    let s = miniz_oxide::deflate::compress_to_vec(b, level).len();
    (1 + 1 + 3 + s).min(b.len())
}

/// An Open MPI 4.1-style per-process record with realistic contents, for the deflate column.
fn ompi_record(n: &SynthNode, p: &ProcBlob) -> Vec<u8> {
    let mut v = vec![p.ports.len() as u8];
    let mut part = p.parts.iter();
    for (i, port) in n
        .node
        .ports
        .iter()
        .enumerate()
        .filter(|(i, _)| p.ports.contains(*i))
    {
        let d = n.node.devices[port.device as usize];
        v.extend_from_slice(&port.subnet_id.to_le_bytes());
        v.extend_from_slice(&port.lid.to_le_bytes());
        v.extend_from_slice(&port.apm_lid.to_le_bytes());
        v.push(port.mtu);
        v.extend_from_slice(&d.vendor_id.to_le_bytes());
        v.extend_from_slice(&d.vendor_part_id.to_le_bytes());
        v.push(d.transport);
        v.extend_from_slice(&[0, 0, i as u8]); // end marker, padding
        v.push(port.cpcs.len() as u8);
        for c in &port.cpcs {
            let mine = part.next().cloned().unwrap_or_default();
            let blob_len = openib::modex::advert::ompi_blob_len(c.cpc);
            v.extend_from_slice(&[c.cpc, c.priority, blob_len as u8]);
            let mut blob = vec![0u8; blob_len];
            for (k, b) in mine
                .iter()
                .chain(port.lid.to_le_bytes().iter())
                .enumerate()
                .take(blob_len)
            {
                blob[k] = *b;
            }
            v.extend_from_slice(&blob);
        }
    }
    v
}

/// Per-process rows after the node blob: the "row" layout of the gathered data.
fn gathered_rows(n: &SynthNode) -> Vec<u8> {
    let mut v = n.node.encode(Compression::OFF).unwrap();
    for p in &n.procs {
        for part in &p.parts {
            v.extend_from_slice(part);
        }
    }
    v
}

fn gathered(n: &SynthNode) -> NodeBlob {
    let mut g = n.node.clone();
    g.local_procs = Some(LocalProcs::gather(&n.node, &n.procs).unwrap());
    g
}

#[derive(Default, Clone, Copy)]
struct Row {
    ompi41: usize,
    ompi41_z: usize,
    per_proc: usize,
    rows: usize,
    rows_z: usize,
    cols: usize,
    cols_z: usize,
    delta: usize,
    delta_z: usize,
    floor: usize,
}

fn measure(job: &[SynthNode]) -> Row {
    let mut r = Row::default();
    for n in job {
        for p in &n.procs {
            let rec = ompi_record(n, p);
            debug_assert_eq!(rec.len(), ompi_value_len(&n.node, p, OMPI41_PORT_COMMON));
            r.ompi41 += kv_bytes(OMPI41_KEY, rec.len());
            r.ompi41_z += kv_bytes(OMPI41_KEY, deflate_len(&rec, 1));
        }
        r.per_proc += kv_bytes(KEY_NODE, n.node.encode(Compression::OFF).unwrap().len());
        if n.procs.len() > 1 {
            for p in &n.procs {
                r.per_proc +=
                    kv_bytes(KEY_PROC, p.encode(&n.node, Compression::OFF).unwrap().len());
            }
        } else {
            r.per_proc += gathered(n).encode(Compression::OFF).unwrap().len()
                - n.node.encode(Compression::OFF).unwrap().len();
        }
        let rows = gathered_rows(n);
        r.rows += kv_bytes(KEY_NODE, rows.len());
        r.rows_z += kv_bytes(KEY_NODE, deflate_len(&rows, 1));
        let g = gathered(n);
        let cols = encode_raw_columns(&g).unwrap();
        r.cols += kv_bytes(KEY_NODE, cols.len());
        r.cols_z += kv_bytes(KEY_NODE, deflate_len(&cols, 1));
        let delta = g.encode(Compression::OFF).unwrap();
        r.delta += kv_bytes(KEY_NODE, delta.len());
        r.delta_z += kv_bytes(KEY_NODE, g.encode(Z1).unwrap().len());
        r.floor += openib::modex::size::floor_node_bytes(n);
    }
    r
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(v);
    }
    (best, out.unwrap())
}

/// Prints the tables of docs/PERFORMANCE.md, "Modex", and asserts what the docs claim of them:
///
/// - at 64 ppn (2 IB ports, udcm) the default layout is at least 10x below Open MPI 4.1 (the
///   issue's target), within 10% above the floor of distinct values with random QP numbers and
///   below it with sequential ones; the layout saves over 94% of ompi-4.1 where deflating each
///   ompi-4.1 record saves under 40%; a key per process (node+proc blobs) stays between 5x and
///   10x below ompi-4.1 ("short of 10x") and costs over twice the gathered layout;
/// - raw columns cost what rows do plus 4 bytes per node of framing; delta coding never costs
///   more than raw columns ("kept only when strictly shorter") and pays on sequential QPNs;
/// - every 64-ppn shape of the second table is 13.5x-42.5x below ompi-4.1, at most 15% above
///   the floor with random QPNs, and dropping a port per odd rank costs at most the 1-byte
///   bitmap per process more;
/// - compressed encodings are kept only when smaller; even one deflate stream over all of
///   ompi-4.1's records is bigger than the default layout uncompressed;
/// - deflate on single node blobs saves at most 5% with random QPNs and at least 15% with
///   sequential ones, and every measured blob is below the 64 KiB compression threshold.
#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn layout_tables() {
    let seed = 42;
    println!("### Sizes by layout: bytes per process (amortized, keys included), 1,024 nodes, 2 IB ports, udcm\n");
    for values in [Values::Random, Values::Sequential] {
        println!("QP numbers: {}\n", values.name());
        println!("| ppn | procs | ompi-4.1 | ompi-4.1+deflate | node+proc blobs | gathered rows | rows+deflate | gathered columns | columns+deflate | **columns+delta** | delta+deflate | floor |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for ppn in [1, 2, 4, 8, 16, 32, 64] {
            let nodes = 1024;
            let job = synth_job(&ib_template(2, false), nodes, ppn, values, false, seed);
            let r = measure(&job);
            check_sizes(&r, values, nodes, ppn);
            let np = (nodes * ppn) as f64;
            let f = |v: usize| format!("{:.2}", v as f64 / np);
            println!(
                "| {ppn} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** | {} | {} |",
                nodes * ppn,
                f(r.ompi41),
                f(r.ompi41_z),
                f(r.per_proc),
                f(r.rows),
                f(r.rows_z),
                f(r.cols),
                f(r.cols_z),
                f(r.delta),
                f(r.delta_z),
                f(r.floor)
            );
        }
        println!();
    }

    println!("### Ports and CPCs at 64 processes per node (1,024 nodes, 65,536 processes), bytes per process\n");
    println!("| ports | CPCs | QPNs | ompi-4.1 | openib (default) | ratio | floor | node+proc blobs | hetero bitmaps (odd ranks drop port 0) |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for nports in [1, 2, 4] {
        for rdmacm in [false, true] {
            for values in [Values::Random, Values::Sequential] {
                let t = ib_template(nports, rdmacm);
                let job = synth_job(&t, 1024, 64, values, false, seed);
                let r = measure(&job);
                let het = measure(&synth_job(&t, 1024, 64, values, true, seed));
                let np = 65536.0;
                let row = format!("{nports} ports, rdmacm {rdmacm}, {} QPNs", values.name());
                let ratio = r.ompi41 as f64 / r.delta as f64;
                // Rounded to the table's one decimal.
                assert!(
                    (13.45..42.55).contains(&ratio),
                    "{row}: {ratio:.2}x, the docs say 13.5x-42.5x"
                );
                if values == Values::Random {
                    assert!(
                        r.delta * 100 <= r.floor * 115,
                        "{row}: {} vs floor {}",
                        r.delta,
                        r.floor
                    );
                }
                // Odd ranks publish no part for the port they drop; the bitmaps cost at most 1
                // byte per process.
                assert!(
                    het.delta <= r.delta + 65536,
                    "{row}: hetero {} vs {}",
                    het.delta,
                    r.delta
                );
                println!(
                    "| {nports} | {} | {} | {:.2} | {:.2} | {:.1}x | {:.2} | {:.2} | {:.2} |",
                    if rdmacm { "udcm+rdmacm" } else { "udcm" },
                    values.name(),
                    r.ompi41 as f64 / np,
                    r.delta as f64 / np,
                    r.ompi41 as f64 / r.delta as f64,
                    r.floor as f64 / np,
                    r.per_proc as f64 / np,
                    het.delta as f64 / np,
                );
            }
        }
    }
    println!();

    println!("### Time for the whole 65,536-process job (1,024 nodes x 64, 2 ports, random QPNs), best of 5\n");
    let job = synth_job(
        &ib_template(2, false),
        1024,
        64,
        Values::Random,
        false,
        seed,
    );
    let blobs: Vec<NodeBlob> = job.iter().map(gathered).collect();
    println!("| layout | job bytes | encode ms | decode ms |");
    println!("|---|---:|---:|---:|");
    let (te, enc) = best_of(5, || {
        blobs
            .iter()
            .map(|b| b.encode(Compression::OFF).unwrap())
            .collect::<Vec<_>>()
    });
    let (td, _) = best_of(5, || {
        enc.iter()
            .map(|b| NodeBlob::decode(b).unwrap())
            .collect::<Vec<_>>()
    });
    let total: usize = enc.iter().map(Vec::len).sum();
    let default_total = total;
    println!(
        "| columns+delta (default, no compression) | {total} | {:.2} | {:.2} |",
        te * 1e3,
        td * 1e3
    );
    let (te, enc) = best_of(5, || {
        blobs
            .iter()
            .map(|b| encode_raw_columns(b).unwrap())
            .collect::<Vec<_>>()
    });
    let total: usize = enc.iter().map(Vec::len).sum();
    println!(
        "| columns raw (forced; encode only) | {total} | {:.2} | - |",
        te * 1e3
    );
    for (name, cfg) in [
        ("columns+delta, deflate level 1", Z1),
        ("columns+delta, deflate level 6", Z6),
    ] {
        let (te, enc) = best_of(5, || {
            blobs
                .iter()
                .map(|b| b.encode(cfg).unwrap())
                .collect::<Vec<_>>()
        });
        let (td, _) = best_of(5, || {
            enc.iter()
                .map(|b| NodeBlob::decode(b).unwrap())
                .collect::<Vec<_>>()
        });
        let total: usize = enc.iter().map(Vec::len).sum();
        assert!(total <= default_total, "{name}: {total} > {default_total}");
        println!(
            "| {name} (kept only when smaller) | {total} | {:.2} | {:.2} |",
            te * 1e3,
            td * 1e3
        );
    }
    let recs: Vec<Vec<u8>> = job
        .iter()
        .flat_map(|n| n.procs.iter().map(|p| ompi_record(n, p)))
        .collect();
    let total: usize = recs.iter().map(Vec::len).sum();
    let (tz, z) = best_of(3, || {
        recs.iter()
            .map(|r| miniz_oxide::deflate::compress_to_vec(r, 1))
            .collect::<Vec<_>>()
    });
    let zt: usize = z.iter().map(Vec::len).sum();
    println!("| ompi-4.1 records (values only), deflate level 1 per record | {total} -> {zt} | {:.2} | - |", tz * 1e3);
    let all: Vec<u8> = recs.concat();
    let (tz, z) = best_of(3, || miniz_oxide::deflate::compress_to_vec(&all, 1));
    assert!(
        default_total < z.len(),
        "the layout ({default_total} B) beats deflating all ompi-4.1 records ({} B)",
        z.len()
    );
    println!("| ompi-4.1 records, deflate level 1 over the whole job (not possible in a modex) | {total} -> {} | {:.2} | - |", z.len(), tz * 1e3);
    println!();

    println!("### Compression threshold: deflate level 1 on single node blobs (default layout)\n");
    println!("| shape | blob bytes | deflated | saved | deflate us | inflate us |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (nports, rdmacm, ppn, values) in [
        (2, false, 1, Values::Random),
        (2, false, 16, Values::Random),
        (2, false, 64, Values::Random),
        (2, false, 64, Values::Sequential),
        (4, true, 64, Values::Random),
        (4, true, 256, Values::Random),
        (4, true, 256, Values::Sequential),
        (4, true, 1024, Values::Sequential),
    ] {
        let t = ib_template(nports, rdmacm);
        let n = &synth_job(&t, 1, ppn, values, true, seed)[0];
        let g = gathered(n);
        let plain = g.encode(Compression::OFF).unwrap();
        let (tz, z) = best_of(20, || miniz_oxide::deflate::compress_to_vec(&plain[1..], 1));
        let (ti, _) = best_of(20, || miniz_oxide::inflate::decompress_to_vec(&z).unwrap());
        let zlen = deflate_len(&plain, 1);
        let row = format!("{nports} ports, {ppn} ppn, {} QPNs", values.name());
        // Below the default threshold: compression is a safety valve, not a default path.
        assert!(plain.len() < 64 * 1024, "{row}: {} B", plain.len());
        match values {
            // Saves at most 5% (as the table rounds: under 5.5%).
            Values::Random => assert!(zlen * 1000 > plain.len() * 945, "{row}: {zlen}"),
            // Saves at least 15% (PERFORMANCE.md: 15-48%; the synthetic values are seeded draws,
            // and the 4-port 256-ppn row sits at 15.5-16% depending on the generator).
            Values::Sequential => assert!(zlen * 1000 <= plain.len() * 850, "{row}: {zlen}"),
        }
        println!(
            "| {nports} ports{}, {ppn} ppn, {} QPNs, hetero | {} | {} | {:.0}% | {:.1} | {:.1} |",
            if rdmacm { " udcm+rdmacm" } else { " udcm" },
            values.name(),
            plain.len(),
            zlen,
            100.0 * (1.0 - zlen as f64 / plain.len() as f64),
            tz * 1e6,
            ti * 1e6
        );
    }
}

/// The claims of the first table on one row (`nodes` x `ppn`, 2 IB ports, udcm).
fn check_sizes(r: &Row, values: Values, nodes: usize, ppn: usize) {
    let row = format!("{ppn} ppn, {} QPNs", values.name());
    // Raw columns: the bytes of rows plus a count and coding bytes, 4 per node.
    assert!(r.cols >= r.rows && r.cols - r.rows <= 4 * nodes, "{row}");
    // Delta coding is kept only when strictly shorter.
    assert!(r.delta <= r.cols, "{row}");
    if values == Values::Sequential && ppn >= 2 {
        assert!(
            r.delta < r.cols,
            "{row}: delta coding pays on sequential QPNs"
        );
    }
    // Per-record deflate of ompi-4.1 saves under 40% (31% in the table).
    assert!(r.ompi41_z * 10 >= r.ompi41 * 6, "{row}");
    if ppn == 64 {
        assert!(r.delta * 10 <= r.ompi41, "{row}: the 10x target");
        // The layout saves over 94%.
        assert!(r.delta * 100 <= r.ompi41 * 6, "{row}");
        assert!(r.per_proc * 5 <= r.ompi41, "{row}: a key per process, 5x");
        assert!(
            r.per_proc * 10 > r.ompi41,
            "{row}: a key per process, short of 10x"
        );
        assert!(
            r.per_proc > 2 * r.delta,
            "{row}: gathering beats a key per process"
        );
        match values {
            Values::Random => assert!(
                r.delta * 100 <= r.floor * 110,
                "{row}: near the floor: {} vs {}",
                r.delta,
                r.floor
            ),
            Values::Sequential => assert!(r.delta < r.floor, "{row}: below the floor"),
        }
    }
}

#[test]
fn default_layout_claims_hold_on_a_small_job() {
    let job = synth_job(&ib_template(2, false), 8, 64, Values::Random, false, 1);
    let r = measure(&job);
    // Layout first: gathered columns beat the per-process copy by far more than deflate does.
    assert!(r.delta * 10 <= r.ompi41);
    assert!(
        r.delta * 5 < r.ompi41_z,
        "the layout beats per-record deflate by far"
    );
    assert!(r.delta <= r.per_proc);
    assert!(
        r.delta * 2 < r.per_proc,
        "gathering beats a key per process"
    );
    let seq = measure(&synth_job(
        &ib_template(2, false),
        8,
        64,
        Values::Sequential,
        false,
        1,
    ));
    assert!(
        seq.delta < seq.cols,
        "delta coding pays on sequential QP numbers"
    );
    assert!(seq.delta < seq.floor, "and beats the raw-value floor");
}
