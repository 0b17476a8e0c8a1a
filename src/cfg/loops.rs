//! The subtrees of the token trie spelled only with the bytes of one of the lexer's loop sets
//! ([`super::lexer::Lexer::loops`]: a name's letters, a quoted string's characters).
//!
//! A configuration whose lexer state takes a loop set ([`super::lexer::LexCache::takes`]) keeps
//! every token that goes on from a trie node with such bytes alone: the mask walk marks those
//! subtrees' tokens without stepping through their nodes. A name's state (SQL's, a Lark grammar's
//! identifiers) has no [`super::inside::Inside`] of its own (it closes at nearly every byte), so
//! its first mask walked all 266,000 nodes of tekken's byte trie; most of them lie in such subtrees.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use crate::lru::Lru;
use crate::trie::TokenTrie;
use crate::vocab::{lock, Vocab};

/// A byte set: bit `b % 64` of word `b / 64` for each byte `b`.
type Bytes = [u64; 4];

/// A trie's byte map and a byte set.
type RunKey = ([u8; 256], Bytes);

/// The [`Runs`] of a vocabulary's tries, by the trie's byte map and the byte set: every grammar
/// with names of the same letters shares them. Bounded by the vocabulary's store entries (each
/// holds two bits per node: 66 KB on tekken's byte trie).
#[derive(Debug)]
pub struct RunStore {
    kept: Mutex<Lru<RunKey, Arc<Runs>>>,
}

impl RunStore {
    pub fn new(entries: usize) -> Self {
        RunStore {
            kept: Mutex::new(Lru::new(entries)),
        }
    }
}

/// Per trie node, whether every node of its subtree below it has a label of one byte set, found
/// when a walk first asks and kept (two bits per node: known, and the answer). A node's answer is
/// its children's, so finding it visits only subtrees spelled with the set (which the walk then
/// passes over) up to the first child that is not: never more nodes than the walk would step
/// through without it. Atomic, as the vocabulary's grammars share it across threads (a race
/// finds an answer twice, the same).
#[derive(Debug)]
struct Runs {
    known: Vec<AtomicU64>,
    all: Vec<AtomicU64>,
}

impl Runs {
    fn new(trie: &TokenTrie) -> Self {
        let words = trie.n_nodes().div_ceil(64);
        Runs {
            known: (0..words).map(|_| AtomicU64::new(0)).collect(),
            all: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<bool> {
        let bit = 1 << (i % 64);
        (self.known[i / 64].load(Relaxed) & bit != 0)
            .then(|| self.all[i / 64].load(Relaxed) & bit != 0)
    }

    fn set(&self, i: usize, all: bool) {
        let bit = 1 << (i % 64);
        if all {
            self.all[i / 64].fetch_or(bit, Relaxed);
        }
        self.known[i / 64].fetch_or(bit, Relaxed);
    }

    /// Whether every node below node `i` (not the root) has a label `inside` takes: a depth-first
    /// search of the children not known yet, with a stack of (node, next child).
    fn below(&self, trie: &TokenTrie, inside: &[bool; 256], i: usize) -> bool {
        if let Some(hit) = self.get(i) {
            return hit;
        }
        let mut stack: Vec<(usize, usize)> = vec![(i, i + 1)];
        while let Some(&(node, first)) = stack.last() {
            let end = trie.end[node] as usize;
            let mut c = first;
            let mut answer = Some(true);
            while c < end {
                if !inside[usize::from(trie.label[c])] {
                    answer = Some(false);
                    break;
                }
                match self.get(c) {
                    Some(true) => c = trie.end[c] as usize,
                    Some(false) => {
                        answer = Some(false);
                        break;
                    }
                    None => {
                        answer = None; // that child first
                        break;
                    }
                }
            }
            match answer {
                Some(all) => {
                    self.set(node, all);
                    stack.pop();
                }
                None => {
                    if let Some(top) = stack.last_mut() {
                        top.1 = c;
                    }
                    stack.push((c, c + 1));
                }
            }
        }
        self.get(i) == Some(true)
    }
}

/// A grammar's loop sets on its trie: per set, the labels in it and its [`Runs`] (from the
/// vocabulary's store, on first use).
#[derive(Debug)]
pub struct Loops {
    bytes: Vec<Bytes>,
    inside: Vec<[bool; 256]>,
    runs: Vec<OnceLock<Arc<Runs>>>,
    /// the byte map of the trie walked
    map: [u8; 256],
    store: Arc<RunStore>,
}

impl Loops {
    /// The loop sets `class_sets` (sets of the lexer's classes; `class_of`: the lexer's class of
    /// each byte) on the trie of `vocab` under byte map `map`, whose label `l` stands for byte
    /// `reps[l]` (and the others of its class).
    pub fn new(
        class_sets: &[[u64; 4]],
        class_of: &[u8; 256],
        map: [u8; 256],
        reps: &[u8],
        vocab: &Vocab,
    ) -> Self {
        let bytes: Vec<Bytes> = class_sets
            .iter()
            .map(|set| {
                let mut b = [0u64; 4];
                for byte in 0..256 {
                    let c = usize::from(class_of[byte]);
                    if set[c / 64] & (1 << (c % 64)) != 0 {
                        b[byte / 64] |= 1 << (byte % 64);
                    }
                }
                b
            })
            .collect();
        let inside = bytes
            .iter()
            .map(|set| {
                let mut inside = [false; 256];
                for (label, &b) in reps.iter().enumerate() {
                    let b = usize::from(b);
                    inside[label] = set[b / 64] & (1 << (b % 64)) != 0;
                }
                inside
            })
            .collect();
        Loops {
            runs: bytes.iter().map(|_| OnceLock::new()).collect(),
            bytes,
            inside,
            map,
            store: vocab.store(RunStore::new),
        }
    }

    /// Whether every node below trie node `i` (not the root) has a label of loop set `k`.
    #[inline]
    pub fn run_below(&self, k: usize, trie: &TokenTrie, i: usize) -> bool {
        let runs = self.runs[k].get_or_init(|| self.shared(k, trie));
        runs.below(trie, &self.inside[k], i)
    }

    /// Nodes whose answer is known so far (for tests: whether walks asked).
    #[cfg(test)]
    pub fn answers_known(&self) -> usize {
        let ones = |r: &Runs| -> usize {
            r.known
                .iter()
                .map(|w| w.load(Relaxed).count_ones() as usize)
                .sum()
        };
        self.runs
            .iter()
            .flat_map(|r| r.get())
            .map(|r| ones(r))
            .sum()
    }

    fn shared(&self, k: usize, trie: &TokenTrie) -> Arc<Runs> {
        let key = (self.map, self.bytes[k]);
        let mut kept = lock(&self.store.kept);
        if let Some(hit) = kept.get(&key) {
            return Arc::clone(hit);
        }
        let runs = Arc::new(Runs::new(trie));
        kept.put(key, Arc::clone(&runs));
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::ByteClasses;
    use crate::test_rng::Rng;

    #[test]
    fn blocks_say_which_subtrees_are_spelled_with_the_set() {
        let mut rng = Rng(0x5eed_100b_0001);
        for round in 0..20 {
            // tokens of 1 to 6 bytes over "abcxyz,": the set is some of them
            let alphabet = b"abcxyz,";
            let mut toks: Vec<Vec<u8>> = (0..300)
                .map(|_| {
                    (0..1 + rng.below(6))
                        .map(|_| alphabet[rng.below(alphabet.len())])
                        .collect()
                })
                .collect();
            toks.sort();
            toks.dedup();
            let n = toks.len();
            let vocab = Vocab::from_tokens(toks, &[], n).unwrap();
            let identity = ByteClasses::identity();
            let trie = TokenTrie::build(&vocab, &identity.map);
            let mut inside = [false; 256];
            for &b in alphabet {
                inside[usize::from(b)] = rng.below(3) > 0;
            }
            let runs = Runs::new(&trie);
            let mut held = 0;
            // asked in a random order: answers found on the way for other nodes are kept
            for _ in 0..3 * trie.n_nodes() {
                let i = 1 + rng.below(trie.n_nodes() - 1);
                let end = trie.end[i] as usize;
                let want = (i + 1..end).all(|j| inside[usize::from(trie.label[j])]);
                assert_eq!(
                    runs.below(&trie, &inside, i),
                    want,
                    "node {i}, round {round}"
                );
                held += usize::from(want && end > i + 1);
            }
            for i in 1..trie.n_nodes() {
                if let Some(known) = runs.get(i) {
                    let end = trie.end[i] as usize;
                    let want = (i + 1..end).all(|j| inside[usize::from(trie.label[j])]);
                    assert_eq!(known, want, "node {i} kept, round {round}");
                }
            }
            assert!(held > 0, "round {round}");
        }
    }
}
