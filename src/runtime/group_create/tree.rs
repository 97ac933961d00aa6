//! The binomial tree over the sorted participants and its repair around dead ones (the
//! resilient fence's tree, `super::super::resilient`, over a participant list that may grow).

/// Binomial-tree parent of index `i` (> 0).
pub(super) fn parent(i: usize) -> usize {
    i & (i - 1)
}

/// Binomial-tree children of index `i` among `n`.
pub(super) fn children(i: usize, n: usize) -> impl Iterator<Item = usize> {
    let limit = if i == 0 {
        usize::MAX
    } else {
        i & i.wrapping_neg()
    };
    (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(move |&b| b < limit && i + b < n)
        .map(move |b| i + b)
}

/// The tree as one process sees it: positions are indices into `members` (ascending), `dead`
/// says which are dead (never `me`).
pub(super) struct Tree<'a, F: Fn(usize) -> bool> {
    pub n: usize,
    pub me: usize,
    pub dead: F,
    pub members: &'a [u32],
}

impl<F: Fn(usize) -> bool> Tree<'_, F> {
    fn live(&self, i: usize) -> bool {
        i == self.me || !(self.dead)(i)
    }

    /// The lowest live index (the root).
    pub fn lowest_live(&self) -> usize {
        (0..self.n).find(|&i| self.live(i)).unwrap_or(self.me)
    }

    /// The nearest live ancestor of `me`; with none, the root (unless `me` is the root).
    pub fn parent(&self) -> Option<u32> {
        let mut j = self.me;
        while j != 0 {
            j = parent(j);
            if self.live(j) {
                return Some(self.members[j]);
            }
        }
        let low = self.lowest_live();
        (low != self.me).then(|| self.members[low])
    }

    /// Live members whose effective parent is `me`, ascending: a dead child's children are
    /// adopted; the root also adopts the members all of whose ancestors are dead.
    pub fn children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack: Vec<usize> = children(self.me, self.n).collect();
        if self.me != 0 && self.me == self.lowest_live() {
            stack.push(0);
        }
        while let Some(i) = stack.pop() {
            if i == self.me {
                continue;
            }
            if self.live(i) {
                out.push(self.members[i]);
            } else {
                stack.extend(children(i, self.n));
            }
        }
        out.sort_unstable();
        out
    }
}
