//! The fuzz corpus as tests: every seed (fuzz/corpus/) and every crash ever found
//! (fuzz/regressions/, plus the inline cases below) goes through the decoder contract
//! (`openib::modex::oracle`), which panics on a broken promise.
//!
//! Regenerate the seed corpus (small, checked in) with
//!     cargo test -p openib --test modex_corpus -- --ignored write_seed_corpus

use openib::modex::fixtures::{ib_template, synth_job};
use openib::modex::oracle::{check_node, check_proc_input, proc_input};
use openib::modex::synth::Values;
use openib::modex::{Compression, LocalProcs, NodeBlob};
use std::path::{Path, PathBuf};

fn dir(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn files(rel: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir(rel)) else {
        return vec![];
    };
    let mut v: Vec<_> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn seed_corpus_and_regressions_keep_the_contract() {
    let mut n = 0;
    for rel in ["fuzz/corpus/node_blob", "fuzz/regressions/node_blob"] {
        for (_, b) in files(rel) {
            check_node(&b);
            n += 1;
        }
    }
    for rel in ["fuzz/corpus/proc_blob", "fuzz/regressions/proc_blob"] {
        for (_, b) in files(rel) {
            check_proc_input(&b);
            n += 1;
        }
    }
    assert!(n >= 10, "the seed corpus is missing ({n} files)");
    // The seeds are accepted (they are valid blobs), so the fuzzers start past the header.
    let accepted = files("fuzz/corpus/node_blob")
        .iter()
        .filter(|(_, b)| check_node(b).is_some())
        .count();
    assert!(accepted >= 5, "{accepted} node seeds accepted");
}

/// Inputs the fuzzers (and proptest) found, kept as regressions: each once broke the contract
/// or panicked before it was fixed. See docs/PERFORMANCE.md ("Modex", fuzzing) for the story.
#[test]
fn fuzz_found_regressions() {
    let cases: &[&[u8]] = &[];
    for c in cases {
        check_node(c);
        check_proc_input(c);
    }
}

fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut nodes = Vec::new();
    let mut procs = Vec::new();
    for (nports, rdmacm, ppn, values, hetero) in [
        (1, false, 1, Values::Random, false),
        (2, false, 4, Values::Sequential, false),
        (2, true, 3, Values::Random, true),
        (4, true, 8, Values::Sequential, true),
        (3, false, 2, Values::Random, false),
    ] {
        let job = synth_job(&ib_template(nports, rdmacm), 2, ppn, values, hetero, 5);
        let n = &job[1];
        let plain = n.node.encode(Compression::OFF).unwrap();
        nodes.push(plain.clone());
        let mut g = n.node.clone();
        g.local_procs = Some(LocalProcs::gather(&n.node, &n.procs).unwrap());
        nodes.push(g.encode(Compression::OFF).unwrap());
        for p in n.procs.iter().take(2) {
            procs.push(proc_input(
                &plain,
                &p.encode(&n.node, Compression::OFF).unwrap(),
            ));
        }
    }
    // A compressed one, and one with an extension.
    let job = synth_job(&ib_template(4, true), 1, 16, Values::Sequential, false, 9);
    let mut g = job[0].node.clone();
    g.local_procs = Some(LocalProcs::gather(&g, &job[0].procs).unwrap());
    g.extensions.push(openib::modex::Extension {
        kind: 3,
        data: vec![1, 2, 3],
    });
    nodes.push(
        g.encode(Compression {
            threshold: 0,
            level: 1,
        })
        .unwrap(),
    );
    let p = job[0].procs[0]
        .encode(&job[0].node, Compression::OFF)
        .unwrap();
    let node_z = job[0]
        .node
        .encode(Compression {
            threshold: 0,
            level: 1,
        })
        .unwrap();
    procs.push(proc_input(&node_z, &p));
    for n in &nodes {
        assert!(NodeBlob::decode(n).is_ok());
    }
    (nodes, procs)
}

/// Writes the seeds to `$SEED_CORPUS_DIR` (default `fuzz/corpus/`). scripts/test writes them to
/// a scratch directory and compares it with the checked-in corpus.
#[test]
#[ignore = "writes fuzz/corpus/ (or $SEED_CORPUS_DIR): run by hand to regenerate the seeds"]
fn write_seed_corpus() {
    let (nodes, procs) = seeds();
    let root = std::env::var("SEED_CORPUS_DIR")
        .unwrap_or_else(|_| dir("fuzz/corpus").display().to_string());
    for (sub, list) in [("node_blob", nodes), ("proc_blob", procs)] {
        let d = std::path::Path::new(&root).join(sub);
        std::fs::create_dir_all(&d).unwrap();
        for (i, b) in list.iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:02}")), b).unwrap();
        }
    }
}
