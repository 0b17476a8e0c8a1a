//! The regular index: for a byte DFA over a vocabulary, per state, the legal tokens (packed mask
//! words) and the state after each token. The same contract as the Python engine's
//! `grammarmask.regular.index.DfaTokenIndex`, which stays as its executable specification.
//!
//! A token is legal in state `s` iff reading its bytes from `s` never reaches the dead state 0
//! (DFAs are trimmed, so a live state always has a completion). Masks are computed on first visit
//! by one preorder scan of the vocabulary's token trie under the DFA's byte classes, skipping the
//! subtree of every node whose class string dies, and kept in an LRU bounded by
//! `Limits.index_masks`. The next state of a token is the DFA run over its bytes (a token is at most
//! a few dozen bytes, so that is cheaper than any table).

use std::sync::{Arc, Mutex};

use crate::classes::{dead_row_and_targets, ByteClasses, Cells};
use crate::error::{Error, Result};
use crate::lru::Lru;
use crate::trie::{TokenTrie, DROPPED};
use crate::vocab::{lock, Vocab};

/// A byte DFA with dead state 0, stored by byte class: `table[s * classes.count + classes.map[b]]`
/// is the state after byte `b` in state `s` (a 200,000-state DFA over 29 classes: 23 MB, not the
/// 200 MB of 256 columns).
#[derive(Debug, Clone)]
pub struct Dfa {
    classes: ByteClasses,
    table: Vec<u32>,
    accepting: Vec<bool>,
    start: u32,
}

impl Dfa {
    /// Check and wrap a dense table (`table[s * 256 + b]`, as `grammarmask.automata.DFA` holds it).
    pub fn new(table: Vec<u32>, accepting: Vec<bool>, start: usize) -> Result<Dfa> {
        Self::classed(table, &ByteClasses::identity().map, accepting, start)
    }

    /// Check and wrap a table given by byte class: `table[s * width + pre[b]]`, `width` its columns
    /// (`table.len() / accepting.len()`), every `pre[b]` below it. The classes kept are exact (equal
    /// columns merged).
    pub fn classed(
        table: Vec<u32>,
        pre: &[u8; 256],
        accepting: Vec<bool>,
        start: usize,
    ) -> Result<Dfa> {
        Self::from_cells(&table[..], pre, accepting, start)
    }

    /// [`Dfa::classed`] reading the table where it lies (the bytes Python handed over): only the
    /// `states x classes` copy is kept, never a 256-column one.
    pub fn from_cells<C: Cells + ?Sized>(
        table: &C,
        pre: &[u8; 256],
        accepting: Vec<bool>,
        start: usize,
    ) -> Result<Dfa> {
        let n = accepting.len();
        let cells = table.n_cells();
        let width = cells.checked_div(n).unwrap_or(0);
        if n == 0 || n >= u32::MAX as usize || width == 0 || width > 256 || cells != n * width {
            return Err(Error::new(format!(
                "native DFA: {cells} transitions do not make {n} rows of 256 or of its byte classes"
            )));
        }
        if let Some(b) = (0..256).find(|&b| usize::from(pre[b]) >= width) {
            return Err(Error::new(format!(
                "native DFA: byte {b} has class {} of a table with {width} columns",
                pre[b]
            )));
        }
        if let Some(problem) = dead_row_and_targets(table, width, &accepting) {
            return Err(Error::new(format!("native DFA: {problem}")));
        }
        if start >= n {
            return Err(Error::new(format!(
                "native DFA: start state {start} out of range ({n} states)"
            )));
        }
        let classes = ByteClasses::of_classed_table(pre, table, width);
        let table = classes.reduce_classed(pre, table, width);
        Ok(Dfa {
            classes,
            table,
            accepting,
            start: start as u32,
        })
    }

    /// Number of states, the dead state included.
    pub fn n_states(&self) -> usize {
        self.accepting.len()
    }

    /// The start state.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Cells of the transition table (states x byte classes).
    pub fn table_words(&self) -> usize {
        self.table.len()
    }

    /// The byte classes of the table.
    pub fn classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// The state after byte `b` from `state` (`state` must be in range).
    #[inline]
    pub fn next(&self, state: u32, b: u8) -> u32 {
        self.table
            [state as usize * self.classes.count + usize::from(self.classes.map[usize::from(b)])]
    }

    /// The state after `data` from `state` (0 once dead; `state` must be in range).
    #[inline]
    pub fn run(&self, mut state: u32, data: &[u8]) -> u32 {
        for &b in data {
            state = self.next(state, b);
            if state == 0 {
                return 0;
            }
        }
        state
    }
}

/// Automata of more byte classes than this walk the byte trie without their dead bytes, through
/// their class map, instead of a class trie of their own: with many classes few tokens merge
/// (1,000 labels: 57 classes, a class trie of 136k nodes), and the class trie took 9.5 ms to
/// build where the copy takes a fraction of it.
const CLASS_TRIE_MAX: usize = 32;

/// Legal tokens and next states of a [`Dfa`] over a [`Vocab`]; shareable between threads.
#[derive(Debug)]
pub struct RegularIndex {
    vocab: Arc<Vocab>,
    dfa: Dfa,
    trie: Arc<TokenTrie>,
    /// The table's column of each label of `trie`: the identity on a class trie, the byte classes
    /// on a trie of bytes.
    cols: [u8; 256],
    /// Per state, its only live byte, or -1 when it has none or several.
    single: Vec<i16>,
    masks: Mutex<Lru<u32, Arc<[u32]>>>,
    zeros: Arc<[u32]>,
}

impl RegularIndex {
    /// Index `dfa` over `vocab`, keeping at most `cache_masks` masks. Everything that depends only
    /// on the grammar (byte classes, the reduced table, the class trie) is built here.
    pub fn new(vocab: Arc<Vocab>, dfa: Dfa, cache_masks: usize) -> RegularIndex {
        let classes = &dfa.classes;
        let live = classes.live_map(&dfa.table).0;
        let identity = ByteClasses::identity().map;
        let (trie, cols) = if classes.count > CLASS_TRIE_MAX {
            // the byte trie without the bytes every state dies on, walked through the class map
            let kept: [u8; 256] =
                std::array::from_fn(|b| if live[b] == DROPPED { DROPPED } else { b as u8 });
            (vocab.trie(&kept), classes.map)
        } else {
            (vocab.trie(&live), identity)
        };
        let sizes = classes.sizes();
        let single = dfa
            .table
            .chunks_exact(classes.count)
            .map(|row| {
                let mut live = row.iter().enumerate().filter(|(_, &t)| t != 0);
                match (live.next(), live.next()) {
                    (Some((c, _)), None) if sizes[c] == 1 => i16::from(classes.reps[c]),
                    _ => -1,
                }
            })
            .collect();
        let zeros: Arc<[u32]> = vec![0u32; vocab.n_words()].into();
        RegularIndex {
            vocab,
            dfa,
            trie,
            cols,
            single,
            masks: Mutex::new(Lru::new(cache_masks)),
            zeros,
        }
    }

    /// The automaton.
    pub fn dfa(&self) -> &Dfa {
        &self.dfa
    }

    /// Number of byte classes.
    pub fn n_classes(&self) -> usize {
        self.dfa.classes.count
    }

    /// Nodes of the trie walked per mask (at most).
    pub fn n_trie_nodes(&self) -> usize {
        self.trie.n_nodes()
    }

    fn check(&self, state: i64) -> Result<u32> {
        match u32::try_from(state) {
            Ok(s) if (s as usize) < self.dfa.n_states() => Ok(s),
            _ => Err(Error::new(format!(
                "state {state} is not a state of this grammar (it has {})",
                self.dfa.n_states()
            ))),
        }
    }

    /// Packed words (bit `t % 32` of word `t / 32`) of the normal tokens legal in `state`
    /// (cached: at most `cache_masks` of them are kept).
    pub fn mask(&self, state: i64) -> Result<Arc<[u32]>> {
        let s = self.check(state)?;
        if s == 0 {
            return Ok(Arc::clone(&self.zeros));
        }
        if let Some(hit) = lock(&self.masks).get(&s) {
            return Ok(Arc::clone(hit));
        }
        let words: Arc<[u32]> = self.compute(s).into();
        lock(&self.masks).put(s, Arc::clone(&words));
        Ok(words)
    }

    /// The words of [`RegularIndex::mask`], computed afresh (for a caller that keeps its own cache).
    pub fn mask_uncached(&self, state: i64) -> Result<Vec<u32>> {
        let s = self.check(state)?;
        Ok(if s == 0 {
            vec![0; self.vocab.n_words()]
        } else {
            self.compute(s)
        })
    }

    /// `state` checked against the automaton (for callers that cache by state themselves).
    pub fn state(&self, state: i64) -> Result<u32> {
        self.check(state)
    }

    /// One preorder scan of the trie from `state`, jumping over dead subtrees.
    fn compute(&self, state: u32) -> Vec<u32> {
        let tr = &*self.trie;
        let k = self.dfa.classes.count;
        let red = &self.dfa.table;
        let mut words = vec![0u32; self.vocab.n_words()];
        let mut at = vec![0u32; tr.max_depth + 1]; // at[d]: the DFA state at depth d of the path
        at[0] = state;
        let n = tr.n_nodes();
        let mut i = 1;
        while i < n {
            let d = tr.depth[i] as usize;
            let s = red[at[d - 1] as usize * k + usize::from(self.cols[usize::from(tr.label[i])])];
            if s == 0 {
                i = tr.end[i] as usize;
                continue;
            }
            at[d] = s;
            tr.mark(i, &mut words);
            i += 1;
        }
        words
    }

    /// The state after token `token` from `state`, 0 when the token is illegal there (special,
    /// padding, empty or out-of-range ids included).
    pub fn next_state(&self, state: i64, token: i64) -> Result<u32> {
        let s = self.check(state)?;
        Ok(match self.vocab.normal_bytes(token) {
            Some(data) if s != 0 => self.dfa.run(s, data),
            _ => 0,
        })
    }

    /// Whether `state` is final.
    pub fn is_accepting(&self, state: i64) -> Result<bool> {
        let s = self.check(state)?;
        Ok(self.dfa.accepting[s as usize])
    }

    /// The bytes while the DFA has exactly one live out-byte and the state is not accepting.
    pub fn forced_bytes(&self, state: i64) -> Result<Vec<u8>> {
        let mut s = self.check(state)?;
        let mut out = Vec::new();
        // a trimmed DFA has no cycle of forced, non-accepting states; the bound is a guard
        while s != 0 && !self.dfa.accepting[s as usize] && out.len() < self.dfa.n_states() {
            let b = self.single[s as usize];
            if b < 0 {
                break;
            }
            out.push(b as u8);
            s = self.dfa.next(s, b as u8);
        }
        Ok(out)
    }

    /// Masks held in the cache.
    pub fn masks_cached(&self) -> usize {
        lock(&self.masks).len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Dfa, RegularIndex};
    use crate::vocab::Vocab;

    /// The DFA of `(ab|cd)*` with states: 1 start/accepting, 2 after a, 3 after c.
    fn ab_cd() -> Dfa {
        let mut t = vec![0u32; 4 * 256];
        t[256 + usize::from(b'a')] = 2;
        t[256 + usize::from(b'c')] = 3;
        t[2 * 256 + usize::from(b'b')] = 1;
        t[3 * 256 + usize::from(b'd')] = 1;
        Dfa::new(t, vec![false, true, false, false], 1).unwrap()
    }

    fn vocab() -> Arc<Vocab> {
        let toks: Vec<Vec<u8>> = [
            &b""[..],
            b"a",
            b"b",
            b"ab",
            b"abc",
            b"abcd",
            b"cdab",
            b"x",
            b"ba",
            b"d",
        ]
        .iter()
        .map(|t| t.to_vec())
        .collect();
        Arc::new(Vocab::from_tokens(toks, &[0], 40).unwrap())
    }

    fn legal(words: &[u32]) -> Vec<u32> {
        (0..words.len() as u32 * 32)
            .filter(|&t| words[(t >> 5) as usize] >> (t & 31) & 1 == 1)
            .collect()
    }

    #[test]
    fn masks_match_direct_runs() {
        let v = vocab();
        let dfa = ab_cd();
        let idx = RegularIndex::new(Arc::clone(&v), dfa.clone(), 2);
        for s in 0..4i64 {
            let want: Vec<u32> = v
                .normal_ids()
                .filter(|&t| dfa.run(s as u32, v.normal_bytes(i64::from(t)).unwrap()) != 0)
                .collect();
            let want = if s == 0 { vec![] } else { want };
            assert_eq!(legal(&idx.mask(s).unwrap()), want, "state {s}");
        }
        assert!(idx.masks_cached() <= 2);
        assert_eq!(legal(&idx.mask(1).unwrap()), vec![1, 3, 4, 5, 6]);
    }

    #[test]
    fn next_state_forced_bytes_and_errors() {
        let idx = RegularIndex::new(vocab(), ab_cd(), 8);
        assert_eq!(idx.next_state(1, 3).unwrap(), 1); // "ab"
        assert_eq!(idx.next_state(1, 4).unwrap(), 3); // "abc"
        assert_eq!(idx.next_state(1, 2).unwrap(), 0); // "b"
        assert_eq!(idx.next_state(1, 0).unwrap(), 0); // special
        assert_eq!(idx.next_state(1, 39).unwrap(), 0); // padding
        assert_eq!(idx.next_state(1, -3).unwrap(), 0);
        assert_eq!(idx.forced_bytes(2).unwrap(), b"b");
        assert_eq!(idx.forced_bytes(1).unwrap(), b"");
        assert!(idx.is_accepting(1).unwrap());
        assert!(idx.mask(4).is_err());
        assert!(idx.next_state(-1, 1).is_err());
    }

    #[test]
    fn classed_tables_answer_as_dense_ones() {
        // `(ab|cd)*` by class: columns 0 other, 1 'a', 2 'b', 3 'c', 4 'd', and 5 for 'x' and 'y',
        // which a state 4 (after 'x' or 'y' from the start) only leaves by 'b'
        let mut pre = [0u8; 256];
        for (i, b) in b"abcd".iter().enumerate() {
            pre[usize::from(*b)] = i as u8 + 1;
        }
        pre[usize::from(b'x')] = 5;
        pre[usize::from(b'y')] = 5;
        let w = 6;
        let mut t = vec![0u32; 5 * w];
        t[w + 1] = 2; // 1 -a-> 2
        t[w + 3] = 3; // 1 -c-> 3
        t[w + 5] = 4; // 1 -x|y-> 4
        t[2 * w + 2] = 1; // 2 -b-> 1
        t[3 * w + 4] = 1; // 3 -d-> 1
        t[4 * w + 2] = 1; // 4 -b-> 1
        let classed = Dfa::classed(t, &pre, vec![false, true, false, false, false], 1).unwrap();
        let mut d = vec![0u32; 5 * 256];
        for s in 0..5u32 {
            for b in 0..=255u8 {
                d[s as usize * 256 + usize::from(b)] = classed.next(s, b);
            }
        }
        let dense = Dfa::new(d, vec![false, true, false, false, false], 1).unwrap();
        assert_eq!(classed.classes(), dense.classes());
        assert_eq!(classed.table, dense.table);
        let v = vocab();
        let a = RegularIndex::new(Arc::clone(&v), classed, 8);
        let b = RegularIndex::new(v, dense, 8);
        for s in 0..5i64 {
            assert_eq!(a.mask(s).unwrap(), b.mask(s).unwrap());
            assert_eq!(a.forced_bytes(s).unwrap(), b.forced_bytes(s).unwrap());
            for tok in 0..10 {
                assert_eq!(a.next_state(s, tok).unwrap(), b.next_state(s, tok).unwrap());
            }
        }
        assert_eq!(a.forced_bytes(2).unwrap(), b"b");
        assert_eq!(a.forced_bytes(4).unwrap(), b"b");
        assert_eq!(a.n_classes(), 6);
        // a class of two bytes is not forced: 1 -x|y-> 4 is a choice
        let mut t = vec![0u32; 3 * 2];
        t[2 + 1] = 2;
        let mut pre = [0u8; 256];
        pre[usize::from(b'x')] = 1;
        pre[usize::from(b'y')] = 1;
        let two = RegularIndex::new(
            vocab(),
            Dfa::classed(t, &pre, vec![false, false, true], 1).unwrap(),
            8,
        );
        assert_eq!(two.forced_bytes(1).unwrap(), b"");
        assert!(Dfa::classed(vec![0; 6], &[2; 256], vec![false, true, true], 1).is_err());
    }

    #[test]
    fn malformed_tables_are_refused() {
        assert!(Dfa::new(vec![0; 256], vec![false], 0).is_ok());
        assert!(Dfa::new(vec![0; 255], vec![false], 0).is_err());
        assert!(Dfa::new(vec![1; 512], vec![false, true], 1).is_err()); // dead row not zero
        assert!(Dfa::new(vec![0; 512], vec![true, true], 1).is_err());
        let mut t = vec![0; 512];
        t[300] = 7;
        assert!(Dfa::new(t, vec![false, true], 1).is_err());
        assert!(Dfa::new(vec![0; 512], vec![false, true], 2).is_err());
    }

    #[test]
    fn shared_between_threads() {
        let idx = Arc::new(RegularIndex::new(vocab(), ab_cd(), 1));
        let want: Vec<Vec<u32>> = (0..4).map(|s| idx.mask(s).unwrap().to_vec()).collect();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let idx = Arc::clone(&idx);
                std::thread::spawn(move || {
                    (0..200)
                        .map(|i| idx.mask(i % 4).unwrap().to_vec())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, got) in h.join().unwrap().into_iter().enumerate() {
                assert_eq!(got, want[i % 4]);
            }
        }
    }
}
