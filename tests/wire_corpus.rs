//! The protocol decoders' fuzz corpus as tests: every seed (fuzz/corpus/{transport_msg,
//! runtime_msg,fence_msg,gc_msg}) and every input kept in fuzz/regressions/ goes through its
//! decoder contract (`openib::wire_oracle`), which panics on a broken promise. The seeds are
//! valid messages, except `gc_msg`'s last ones: malformed messages the decoder must reject.
//!
//! Regenerate the seed corpus (small, checked in) with
//!     cargo test -p openib --test wire_corpus -- --ignored write_seed_corpus

#[cfg(not(feature = "wire-oracle"))]
compile_error!(
    "tests/wire_corpus.rs needs the cargo feature `wire-oracle` (the package's dev-dependency on itself turns it on)"
);

use openib::wire_oracle::{
    check_fence_msg, check_gc_msg, check_runtime_msg, check_transport_input, fence_seeds,
    gc_msg_malformed, gc_msg_seeds, runtime_seeds, transport_corpus,
};
use std::path::{Path, PathBuf};

type Check = fn(&[u8]) -> bool;
type Seeds = fn() -> Vec<Vec<u8>>;
/// How many of a target's seeds (the last ones) are malformed, to be rejected.
type Rejected = fn() -> usize;

fn none() -> usize {
    0
}

fn gc_rejected() -> usize {
    gc_msg_malformed().len()
}

const TARGETS: [(&str, Check, Seeds, Rejected); 4] = [
    (
        "transport_msg",
        check_transport_input,
        transport_corpus,
        none,
    ),
    ("runtime_msg", check_runtime_msg, runtime_seeds, none),
    ("fence_msg", check_fence_msg, fence_seeds, none),
    ("gc_msg", check_gc_msg, gc_msg_seeds, gc_rejected),
];

fn files(rel: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn seed_corpus_and_regressions_keep_the_contract() {
    for (target, check, seeds, rejected) in TARGETS {
        let corpus = files(&format!("fuzz/corpus/{target}"));
        assert_eq!(
            corpus,
            seeds(),
            "{target}: the checked-in corpus is not the seeds (regenerate it)"
        );
        let valid = corpus.len() - rejected();
        for (i, b) in corpus.iter().enumerate() {
            assert_eq!(
                check(b),
                i < valid,
                "{target}: seed {i} is {}: {b:?}",
                if i < valid { "rejected" } else { "accepted" }
            );
        }
        for b in files(&format!("fuzz/regressions/{target}")) {
            check(&b);
        }
    }
}

#[test]
#[ignore = "writes the seed corpus (fuzz/corpus, or $SEED_CORPUS_DIR)"]
fn write_seed_corpus() {
    let root = std::env::var("SEED_CORPUS_DIR").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .display()
            .to_string()
    });
    for (target, _, seeds, _) in TARGETS {
        let d = Path::new(&root).join(target);
        std::fs::create_dir_all(&d).unwrap();
        for (i, b) in seeds().iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:02}")), b).unwrap();
        }
    }
}
