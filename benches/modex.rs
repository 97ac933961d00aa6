//! The modex of a 65,536-process job (1,024 nodes x 64 processes, 2 InfiniBand ports, udcm):
//! encode every node's blob (gathered section, the default publication), decode them all (what
//! every process does with the allgathered data), and memcpy the same bytes in the same run,
//! so the decode cost reads as a ratio to the memory-bandwidth floor.
//!
//!     cargo bench -p openib --bench modex
//!
//! Results: docs/PERFORMANCE.md ("Modex").

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use openib::modex::fixtures::{ib_template, synth_job};
use openib::modex::synth::Values;
use openib::modex::{Compression, LocalProcs, NodeBlob};
use std::hint::black_box;

fn job(values: Values) -> Vec<NodeBlob> {
    synth_job(&ib_template(2, false), 1024, 64, values, false, 42)
        .into_iter()
        .map(|n| {
            let mut g = n.node.clone();
            g.local_procs = Some(LocalProcs::gather(&n.node, &n.procs).unwrap());
            g
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for values in [Values::Random, Values::Sequential] {
        let nodes = job(values);
        let blobs: Vec<Vec<u8>> = nodes
            .iter()
            .map(|n| n.encode(Compression::DEFAULT).unwrap())
            .collect();
        let total: usize = blobs.iter().map(Vec::len).sum();
        let flat: Vec<u8> = blobs.concat();
        let mut dst = vec![0u8; total];
        let mut g = c.benchmark_group(format!("modex_65536_procs_{}", values.name()));
        g.throughput(Throughput::Bytes(total as u64));
        g.bench_function("encode", |b| {
            b.iter(|| {
                for n in &nodes {
                    black_box(n.encode(Compression::DEFAULT).unwrap());
                }
            })
        });
        g.bench_function("decode", |b| {
            b.iter(|| {
                for blob in &blobs {
                    black_box(NodeBlob::decode(black_box(blob)).unwrap());
                }
            })
        });
        g.bench_function("decode_and_read_every_part", |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for blob in &blobs {
                    let n = NodeBlob::decode(black_box(blob)).unwrap();
                    let lp = n.local_procs.as_ref().unwrap();
                    for rank in 0..lp.count as usize {
                        for port in 0..n.ports.len() {
                            sum += lp.part(&n, rank, port, 0).map_or(0, |p| p[0] as u64);
                        }
                    }
                }
                black_box(sum)
            })
        });
        g.bench_function("decode_and_expand_procs", |b| {
            b.iter(|| {
                for blob in &blobs {
                    let n = NodeBlob::decode(black_box(blob)).unwrap();
                    black_box(n.local_procs.as_ref().unwrap().to_proc_blobs(&n));
                }
            })
        });
        g.bench_function("memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&flat));
                black_box(&mut dst);
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
