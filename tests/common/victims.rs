//! The victims of the fail-stop tests (tests/common/fault_cases.rs, for tests/modex_fault.rs and
//! tests/pmix_faults.rs and tests/slurm.rs; tests/softroce_faults.rs).

/// One victim set per run: every rank in turn (0, the first root and node leader, included),
/// and pairs of ranks next to each other, apart, and with rank 0.
pub fn victims(np: u32, two: bool, run: usize) -> Vec<u32> {
    let n = np as usize;
    if !two {
        return vec![((run * 3) % n) as u32];
    }
    let a = (run * 5) % n;
    let b = match run % 3 {
        0 => (a + 1) % n,
        1 => (a + 4) % n,
        _ => 0,
    };
    let b = if b == a { (a + 2) % n } else { b };
    let mut v = vec![a as u32, b as u32];
    v.sort_unstable();
    v
}
