//! Groups of processes built from a process set and a snapshot of the failure detector.
//!
//! Issue 7: reading the local failure detector never fails ([`Runtime::failed`]), and neither
//! does building a group from a process set, even after failures (as `MPI_Group_from_session_pset`
//! after `MPI_Session_get_proc_failed`). A [`Group`] is a value: the members the set named (ranks
//! outside the job are dropped and listed in [`Group::dropped`], not an error), and which of them
//! the detector snapshot says are dead. It never changes once built; build another from a newer
//! snapshot ([`Group::with_failed`]).
//!
//! [`Group::hash`] and [`Group::survivor_hash`] identify the member and survivor sets, so that two
//! processes can compare their groups with 8 bytes (the PMIx fence names its arrival marks with
//! the survivor hash).

use super::Runtime;

/// The processes a [`Group`] is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcSet<'a> {
    /// Every rank of the job.
    All,
    /// These ranks (any order, duplicates allowed; ranks outside the job are dropped).
    Ranks(&'a [u32]),
}

/// A set of ranks of a job of `size` processes and which of them are known dead.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    size: u32,
    /// Ascending, no duplicates, each `< size`.
    members: Vec<u32>,
    /// The members the detector snapshot names, ascending.
    failed: Vec<u32>,
    /// Requested ranks `>= size`, ascending, no duplicates.
    dropped: Vec<u32>,
}

impl Group {
    /// The group of `set` in a job of `size` processes, with `detector` the ranks known dead
    /// (any order; ranks outside the set are ignored). Never fails.
    pub fn new(size: u32, set: ProcSet<'_>, detector: &[u32]) -> Group {
        let (mut members, mut dropped): (Vec<u32>, Vec<u32>) = match set {
            ProcSet::All => ((0..size).collect(), Vec::new()),
            ProcSet::Ranks(r) => r.iter().partition(|&&r| r < size),
        };
        members.sort_unstable();
        members.dedup();
        dropped.sort_unstable();
        dropped.dedup();
        if !dropped.is_empty() {
            tracing::debug!(?dropped, size, "group: ranks outside the job dropped");
        }
        let mut failed: Vec<u32> = detector
            .iter()
            .copied()
            .filter(|r| members.binary_search(r).is_ok())
            .collect();
        failed.sort_unstable();
        failed.dedup();
        Group {
            size,
            members,
            failed,
            dropped,
        }
    }

    /// The group of `set` in `rt`'s job, with `rt`'s current detector snapshot: the ranks of
    /// [`Runtime::failed`] and of [`Runtime::agreed_failed`]. Never fails.
    pub fn of_runtime(rt: &dyn Runtime, set: ProcSet<'_>) -> Group {
        let mut dead = rt.failed();
        dead.extend(rt.agreed_failed());
        Group::new(rt.info().size, set, &dead)
    }

    /// The same members with `more` ranks known dead too (a newer detector snapshot).
    pub fn with_failed(&self, more: &[u32]) -> Group {
        let mut dead = self.failed.clone();
        dead.extend_from_slice(more);
        let mut g = Group::new(self.size, ProcSet::Ranks(&self.members), &dead);
        g.dropped = self.dropped.clone();
        g
    }

    /// The job size the group was built for.
    pub fn job_size(&self) -> u32 {
        self.size
    }
    /// Every member, ascending.
    pub fn members(&self) -> &[u32] {
        &self.members
    }
    /// The members not known dead, ascending.
    pub fn survivors(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|r| self.failed.binary_search(r).is_err())
            .collect()
    }
    /// The members known dead, ascending.
    pub fn failed(&self) -> &[u32] {
        &self.failed
    }
    /// Ranks the process set named that are not in the job (`>= size`), ascending.
    pub fn dropped(&self) -> &[u32] {
        &self.dropped
    }
    /// Whether `rank` is a member (dead or alive).
    pub fn contains(&self, rank: u32) -> bool {
        self.members.binary_search(&rank).is_ok()
    }
    /// Whether `rank` is a member not known dead.
    pub fn is_survivor(&self, rank: u32) -> bool {
        self.contains(rank) && self.failed.binary_search(&rank).is_err()
    }
    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }
    /// Whether the group has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
    /// A 64-bit FNV-1a hash of the member set (not of the failures): equal member sets hash
    /// equally whatever order or duplicates the process set had.
    pub fn hash(&self) -> u64 {
        set_hash(&self.members)
    }
    /// The hash of [`Self::survivors`]: two processes with the same members and the same view of
    /// the dead have equal survivor hashes.
    pub fn survivor_hash(&self) -> u64 {
        set_hash(&self.survivors())
    }
}

/// FNV-1a over the ranks' little-endian bytes (`ranks` ascending, no duplicates).
fn set_hash(ranks: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in ranks {
        for b in r.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_without_failures() {
        let g = Group::new(4, ProcSet::All, &[]);
        assert_eq!(g.members(), &[0, 1, 2, 3]);
        assert_eq!(g.survivors(), vec![0, 1, 2, 3]);
        assert!(g.failed().is_empty());
        assert!(g.dropped().is_empty());
        assert_eq!(g.len(), 4);
        assert!(g.contains(3) && !g.contains(4));
    }

    #[test]
    fn failures_outside_the_set_are_ignored() {
        let g = Group::new(8, ProcSet::Ranks(&[6, 2, 4, 2]), &[4, 5, 9]);
        assert_eq!(g.members(), &[2, 4, 6]);
        assert_eq!(g.failed(), &[4]);
        assert_eq!(g.survivors(), vec![2, 6]);
        assert!(g.contains(4) && !g.is_survivor(4) && g.is_survivor(6));
        assert!(!g.is_survivor(5), "5 is not a member");
    }

    #[test]
    fn out_of_range_ranks_are_dropped_not_an_error() {
        let g = Group::new(4, ProcSet::Ranks(&[9, 1, 4, 9, 0]), &[]);
        assert_eq!(g.members(), &[0, 1]);
        assert_eq!(g.dropped(), &[4, 9]);
        let empty = Group::new(0, ProcSet::All, &[0]);
        assert!(empty.is_empty() && empty.failed().is_empty());
    }

    #[test]
    fn every_member_failed_leaves_no_survivor() {
        let g = Group::new(3, ProcSet::All, &[2, 0, 1, 1]);
        assert_eq!(g.failed(), &[0, 1, 2]);
        assert!(g.survivors().is_empty());
    }

    #[test]
    fn hashes_compare_sets() {
        let a = Group::new(8, ProcSet::Ranks(&[3, 1, 2]), &[]);
        let b = Group::new(8, ProcSet::Ranks(&[1, 2, 3, 3]), &[2]);
        let c = Group::new(8, ProcSet::Ranks(&[1, 3]), &[]);
        assert_eq!(a.hash(), b.hash(), "same members, any order or duplicates");
        assert_ne!(a.hash(), c.hash());
        assert_ne!(a.survivor_hash(), b.survivor_hash());
        assert_eq!(b.survivor_hash(), c.survivor_hash(), "same survivors");
        assert_ne!(
            Group::new(1024, ProcSet::Ranks(&[0x0100]), &[]).hash(),
            Group::new(1024, ProcSet::Ranks(&[1]), &[]).hash()
        );
    }

    /// A runtime whose detector names rank 2 and whose fences agreed on rank 5.
    struct Detector(super::super::JobInfo);
    impl Runtime for Detector {
        fn info(&self) -> &super::super::JobInfo {
            &self.0
        }
        fn node_of(&self, _: u32) -> super::super::Result<String> {
            Ok("n".into())
        }
        fn put(&self, _: super::super::Scope, _: &str, _: &[u8]) -> super::super::Result<()> {
            Ok(())
        }
        fn commit(&self) -> super::super::Result<()> {
            Ok(())
        }
        fn fence(&self, _: bool, _: std::time::Duration) -> super::super::Result<()> {
            Ok(())
        }
        fn get(
            &self,
            rank: u32,
            key: &str,
            _: std::time::Duration,
        ) -> super::super::Result<Vec<u8>> {
            Err(super::super::RuntimeError::NotFound {
                rank,
                key: key.into(),
            })
        }
        fn failed(&self) -> Vec<u32> {
            vec![2]
        }
        fn agreed_failed(&self) -> Vec<u32> {
            vec![5]
        }
    }

    #[test]
    fn of_runtime_takes_the_detector_and_the_agreed_set() {
        let rt = Detector(super::super::JobInfo {
            rank: 0,
            size: 6,
            node: "n".into(),
            local_rank: 0,
            local_peers: (0..6).collect(),
            backend: "test".into(),
        });
        let g = Group::of_runtime(&rt, ProcSet::All);
        assert_eq!(g.job_size(), 6);
        assert_eq!(g.failed(), &[2, 5]);
        assert_eq!(g.survivors(), vec![0, 1, 3, 4]);
        let odd = Group::of_runtime(&rt, ProcSet::Ranks(&[1, 3, 5, 7]));
        assert_eq!(odd.failed(), &[5]);
        assert_eq!(odd.dropped(), &[7]);
    }

    #[test]
    fn a_newer_snapshot_only_adds_failures() {
        let g = Group::new(6, ProcSet::Ranks(&[0, 1, 2, 7]), &[1]);
        let h = g.with_failed(&[2, 5]);
        assert_eq!(h.members(), g.members());
        assert_eq!(h.failed(), &[1, 2]);
        assert_eq!(h.survivors(), vec![0]);
        assert_eq!(h.dropped(), &[7]);
    }
}
