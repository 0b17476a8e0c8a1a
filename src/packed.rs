//! A set of token ids kept in the memory it needs: the mask words that are not zero, with their
//! positions, or every word when most are not zero.
//!
//! Most masks of a JSON document allow few tokens (a key being spelled, a literal, a punctuation
//! mark: under a hundred of tekken's 131k in three steps of four), yet a row of mask words is 16 KB
//! whatever it holds. Caches of rows then grow by 16 KB per first visit, and every fresh page of
//! them is a page fault. [`Packed`] keeps such a set in a few bytes and writes the row back when
//! asked. The sets that allow many tokens are few, and the same in many states and grammars (the
//! body of a string, a value's start): a vocabulary's [`Pool`] keeps one copy of each.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use rustc_hash::FxHasher;

use crate::vocab::lock;

thread_local! {
    /// Zeroed rows kept for [`Packed::zeroed_row`] (at most [`ROWS_KEPT`]).
    static ROWS: std::cell::RefCell<Vec<Vec<u32>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Rows a thread keeps for [`Packed::zeroed_row`].
const ROWS_KEPT: usize = 4;

/// The words of a token mask (bit `t % 32` of word `t / 32` is token `t`), packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packed {
    /// The words that are not zero, as (position, word), ascending by position.
    Sparse {
        n_words: usize,
        words: Box<[(u32, u32)]>,
    },
    /// Every word.
    Dense(Box<[u32]>),
}

impl Packed {
    /// `words` packed: sparse when that takes fewer bytes (8 per word that is not zero, against
    /// 4 per word).
    pub fn new(words: &[u32]) -> Self {
        Packed::sparse(words).unwrap_or_else(|| Packed::Dense(words.into()))
    }

    /// `words`, taken over: packed sparse when that takes fewer bytes, else kept as it is.
    pub fn from_vec(words: Vec<u32>) -> Self {
        Packed::sparse(&words).unwrap_or_else(|| Packed::Dense(words.into_boxed_slice()))
    }

    /// `words` as (position, word) pairs, when fewer than half of them are not zero. Every first
    /// visit packs its mask, most of whose words are zero: the words are read sixteen at a time,
    /// a block with none set passed over with one test, and the pairs gathered into their exact
    /// room (a collect of a filter tested each word and grew its vector by doubling: about
    /// 30,000 instructions a mask of tekken, a tenth of a JSON Schema step's by callgrind).
    fn sparse(words: &[u32]) -> Option<Self> {
        const BLOCK: usize = 16;
        let blocks = words.chunks_exact(BLOCK);
        let tail = blocks.remainder();
        let nonzero = |part: &[u32]| part.iter().filter(|&&w| w != 0).count();
        // (a block is found by an OR of its words, then counted: a row is known dense once half
        // its words are, before the rest is read; most first masks of a string's body are)
        let half = words.len().div_ceil(2);
        let mut set = nonzero(tail);
        if set >= half {
            return None;
        }
        let mut live: Vec<u32> = Vec::new();
        for (k, block) in blocks.enumerate() {
            if block.iter().fold(0, |a, &w| a | w) != 0 {
                set += nonzero(block);
                if set >= half {
                    return None;
                }
                live.push(k as u32);
            }
        }
        let mut pairs = Vec::with_capacity(set);
        let mut push = |from: usize, part: &[u32]| {
            for (i, &w) in part.iter().enumerate() {
                if w != 0 {
                    pairs.push(((from + i) as u32, w));
                }
            }
        };
        for k in live {
            let from = k as usize * BLOCK;
            push(from, &words[from..from + BLOCK]);
        }
        push(words.len() - tail.len(), tail);
        Some(Packed::Sparse {
            n_words: words.len(),
            words: pairs.into_boxed_slice(),
        })
    }

    /// The set of tokens `ids` (in any order, repeats allowed) in a row of `n_words` words: what a
    /// walk that marks few tokens collects instead of a row it would zero and scan.
    pub fn of_tokens(mut ids: Vec<u32>, n_words: usize) -> Self {
        ids.sort_unstable();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for t in ids {
            let (at, bit) = (t >> 5, 1 << (t & 31));
            match pairs.last_mut() {
                Some(last) if last.0 == at => last.1 |= bit,
                _ => pairs.push((at, bit)),
            }
        }
        if 2 * pairs.len() >= n_words {
            let mut words = vec![0; n_words];
            for (at, w) in pairs {
                words[at as usize] = w;
            }
            return Packed::Dense(words.into_boxed_slice());
        }
        Packed::Sparse {
            n_words,
            words: pairs.into_boxed_slice(),
        }
    }

    /// Words of the row.
    pub fn n_words(&self) -> usize {
        match self {
            Packed::Sparse { n_words, .. } => *n_words,
            Packed::Dense(w) => w.len(),
        }
    }

    /// Write the set into the row `out` (of [`Packed::n_words`] words): its words, the others
    /// zero. (A dense set is copied, not ORed into a row zeroed first: one pass over 16 KB, not
    /// two, at every step whose mask is most of tekken.)
    pub fn write_into(&self, out: &mut [u32]) {
        match self {
            Packed::Dense(w) if w.len() == out.len() => out.copy_from_slice(w),
            _ => {
                out.fill(0);
                self.or_into(out);
            }
        }
    }

    /// OR the set into the row `out` (of [`Packed::n_words`] words).
    pub fn or_into(&self, out: &mut [u32]) {
        match self {
            Packed::Sparse { words, .. } => {
                for &(i, w) in words.iter() {
                    out[i as usize] |= w;
                }
            }
            Packed::Dense(w) => {
                for (o, &x) in out.iter_mut().zip(w.iter()) {
                    *o |= x;
                }
            }
        }
    }

    /// A row of `n_words` zero words: one this thread has kept, when it has one
    /// ([`Packed::from_row`] keeps them). A first visit makes and packs a few such rows (16 KB on
    /// tekken), and each made anew had glibc's malloc consolidate its lists of small free chunks
    /// (malloc and free were a sixth of a JSONSchemaBench mask phase, by perf).
    pub fn zeroed_row(n_words: usize) -> Vec<u32> {
        ROWS.with_borrow_mut(|rows| match rows.iter().position(|r| r.len() == n_words) {
            Some(i) => rows.swap_remove(i),
            None => vec![0; n_words],
        })
    }

    /// `row` packed ([`Packed::from_vec`]); when sparse, the row is zeroed again (only its words
    /// that are not zero) and kept for this thread's next [`Packed::zeroed_row`].
    pub fn from_row(mut row: Vec<u32>) -> Self {
        match Packed::sparse(&row) {
            Some(packed) => {
                if let Packed::Sparse { words, .. } = &packed {
                    for &(i, _) in words.iter() {
                        row[i as usize] = 0;
                    }
                }
                ROWS.with_borrow_mut(|rows| {
                    if rows.len() < ROWS_KEPT {
                        rows.push(row);
                    }
                });
                packed
            }
            None => Packed::Dense(row.into_boxed_slice()),
        }
    }

    /// The row, in a row of [`Packed::zeroed_row`].
    pub fn to_row(&self) -> Vec<u32> {
        let mut out = Packed::zeroed_row(self.n_words());
        match self {
            Packed::Sparse { .. } => self.or_into(&mut out),
            Packed::Dense(w) => out.copy_from_slice(w),
        }
        out
    }

    /// The row.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Packed::Sparse { n_words, .. } => {
                let mut out = vec![0; *n_words];
                self.or_into(&mut out);
                out
            }
            Packed::Dense(w) => w.to_vec(),
        }
    }

    /// Whether no token is in the set.
    pub fn is_empty(&self) -> bool {
        match self {
            Packed::Sparse { words, .. } => words.is_empty(),
            Packed::Dense(w) => w.iter().all(|&x| x == 0),
        }
    }

    /// Tokens in the set.
    pub fn count(&self) -> usize {
        let ones = |w: u32| w.count_ones() as usize;
        match self {
            Packed::Sparse { words, .. } => words.iter().map(|&(_, w)| ones(w)).sum(),
            Packed::Dense(w) => w.iter().map(|&x| ones(x)).sum(),
        }
    }

    /// Bytes held (for cache bounds).
    pub fn bytes(&self) -> usize {
        match self {
            Packed::Sparse { words, .. } => 8 * words.len(),
            Packed::Dense(w) => 4 * w.len(),
        }
    }
}

/// Sets of this many bytes or more are shared by content (smaller ones cost more to look up than
/// to keep twice).
pub const SHARED_BYTES: usize = 1024;

/// One copy of each large set in use, shared by every grammar of a vocabulary
/// ([`crate::vocab::Vocab::store`]); held weakly: a set lives as long as a cache holds it.
#[derive(Debug, Default)]
pub struct Pool {
    kept: Mutex<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    by_hash: HashMap<u64, Vec<Weak<Packed>>>,
    entries: usize,
    /// entries left after the last sweep of dropped sets
    swept: usize,
}

impl Pool {
    /// An empty pool (the argument, the vocabulary's store bound, is not needed: the pool holds
    /// only sets that caches hold).
    pub fn new(_entries: usize) -> Self {
        Pool::default()
    }

    /// `set`, or an equal one already in use.
    pub fn share(&self, set: Packed) -> Arc<Packed> {
        self.share_arc(Arc::new(set))
    }

    /// [`Pool::share`] for a set already behind an `Arc`.
    pub fn share_arc(&self, set: Arc<Packed>) -> Arc<Packed> {
        if set.bytes() < SHARED_BYTES {
            return set;
        }
        let key = set.sample_hash();
        let mut guard = lock(&self.kept);
        let kept = &mut *guard;
        let same = kept.by_hash.entry(key).or_default();
        if let Some(found) = same.iter().filter_map(Weak::upgrade).find(|s| **s == *set) {
            return found;
        }
        same.push(Arc::downgrade(&set));
        kept.entries += 1;
        // dropped sets are swept out once the entries have doubled since the last sweep
        if kept.entries > 2 * kept.swept + 64 {
            kept.by_hash.retain(|_, v| {
                v.retain(|w| w.strong_count() > 0);
                !v.is_empty()
            });
            kept.entries = kept.by_hash.values().map(Vec::len).sum();
            kept.swept = kept.entries;
        }
        set
    }

    /// Sets held (alive or not yet swept).
    pub fn len(&self) -> usize {
        lock(&self.kept).entries
    }

    /// Whether the pool holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Packed {
    /// A hash of every eighth word (the sets compared are large; equality is checked in full).
    fn sample_hash(&self) -> u64 {
        let mut h = FxHasher::default();
        match self {
            Packed::Sparse { n_words, words } => {
                (0u8, *n_words, words.len()).hash(&mut h);
                words.iter().step_by(8).for_each(|w| w.hash(&mut h));
            }
            Packed::Dense(words) => {
                (1u8, words.len()).hash(&mut h);
                words.iter().step_by(8).for_each(|w| w.hash(&mut h));
            }
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn a_packed_row_reads_back_as_the_row_it_was_made_from() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..500 {
            let n = 1 + rng.below(300);
            // from empty to full, through rows where a few words are set
            let density = rng.below(5);
            let row: Vec<u32> = (0..n)
                .map(|_| match density {
                    0 => 0,
                    1 if rng.below(20) == 0 => rng.below(1 << 32) as u32,
                    2 if rng.below(3) == 0 => 1 << rng.below(32),
                    3 => rng.below(1 << 32) as u32,
                    4 => u32::MAX,
                    _ => 0,
                })
                .collect();
            for p in [Packed::new(&row), Packed::from_vec(row.clone())] {
                assert_eq!(p.to_vec(), row, "case {case}");
                assert_eq!(p.n_words(), n);
                assert_eq!(p.is_empty(), row.iter().all(|&w| w == 0));
                let ones: usize = row.iter().map(|w| w.count_ones() as usize).sum();
                assert_eq!(p.count(), ones);
                assert!(p.bytes() <= 4 * n, "never more than the row: case {case}");
                let mut out: Vec<u32> = (0..n).map(|_| rng.below(1 << 32) as u32).collect();
                let want: Vec<u32> = out.iter().zip(&row).map(|(a, b)| a | b).collect();
                p.or_into(&mut out);
                assert_eq!(out, want, "case {case}");
                // written over a row of garbage: the row exactly, sparse or dense
                p.write_into(&mut out);
                assert_eq!(out, row, "case {case}");
            }
        }
    }

    #[test]
    fn a_set_of_token_ids_packs_as_its_row_does() {
        let mut rng = Rng(0x5eed_0f70_4e25_0003);
        for case in 0..300 {
            let n = 1 + rng.below(200);
            let ids: Vec<u32> = (0..rng.below(40 * n))
                .map(|_| rng.below(32 * n) as u32)
                .collect();
            let mut row = vec![0u32; n];
            for &t in &ids {
                row[t as usize >> 5] |= 1 << (t & 31);
            }
            // the same representation (a pool compares sets by it), whatever the order and repeats
            assert_eq!(Packed::of_tokens(ids, n), Packed::new(&row), "case {case}");
        }
    }

    #[test]
    fn a_row_with_few_words_set_is_kept_sparse() {
        let mut row = vec![0u32; 4104];
        row[17] = 5;
        row[4000] = 1 << 31;
        let p = Packed::new(&row);
        assert!(matches!(p, Packed::Sparse { .. }));
        assert_eq!(p.bytes(), 16);
        assert!(matches!(Packed::new(&[1u32; 10]), Packed::Dense(_)));
        // dense from half the words set on (the count may stop there), wherever they lie
        let mut rng = Rng(0x5eed_0f70_4e25_0004);
        for n in 1..300usize {
            for set in [n.div_ceil(2) - 1, n.div_ceil(2)] {
                let mut row = vec![0u32; n];
                let mut left = set;
                while left > 0 {
                    let i = rng.below(n);
                    if row[i] == 0 {
                        row[i] = 1 + rng.below(1 << 31) as u32;
                        left -= 1;
                    }
                }
                let dense = matches!(Packed::new(&row), Packed::Dense(_));
                assert_eq!(dense, 2 * set >= n, "{set} of {n} words set");
                assert_eq!(Packed::new(&row).to_vec(), row);
            }
        }
    }

    #[test]
    fn a_pool_keeps_one_copy_of_each_large_set_while_it_is_used() {
        let pool = Pool::new(0);
        let row = |seed: u32| -> Vec<u32> { (0..4104).map(|i| (i as u32) ^ seed).collect() };
        let a = pool.share(Packed::new(&row(1)));
        let b = pool.share(Packed::new(&row(1)));
        let c = pool.share(Packed::new(&row(2)));
        assert!(Arc::ptr_eq(&a, &b), "equal sets are one");
        assert!(!Arc::ptr_eq(&a, &c) && *a != *c);
        // a set differing from another only in a word the hash does not sample is not taken for it
        let mut near = row(1);
        near[3] ^= 1;
        let d = pool.share(Packed::new(&near));
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(d.to_vec(), near);
        // small sets are not pooled
        let mut small = vec![0u32; 4104];
        small[9] = 1;
        let (e, f) = (
            pool.share(Packed::new(&small)),
            pool.share(Packed::new(&small)),
        );
        assert!(!Arc::ptr_eq(&e, &f));
        // dropped sets are swept: the pool does not grow with sets no cache holds
        drop((a, b, c, d));
        for seed in 10..1000 {
            drop(pool.share(Packed::new(&row(seed))));
        }
        assert!(pool.len() < 200, "{} entries", pool.len());
    }
}
