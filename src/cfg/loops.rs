//! The subtrees of the token trie spelled only with the bytes of one of the lexer's loop sets
//! ([`super::lexer::Lexer::loops`]: a name's letters, a quoted string's characters).
//!
//! A configuration whose lexer state takes a loop set ([`super::lexer::LexCache::takes`]) keeps
//! every token that goes on from a trie node with such bytes alone: the mask walk marks those
//! subtrees' tokens without stepping through their nodes. A name's state (SQL's, a Lark grammar's
//! identifiers) has no [`super::inside::Inside`] of its own (it closes at nearly every byte), so
//! its first mask walked all 266,000 nodes of tekken's byte trie; most of them lie in such subtrees.

use std::sync::{Arc, Mutex, OnceLock};

use crate::lru::Lru;
use crate::trie::TokenTrie;
use crate::vocab::{lock, Vocab};

/// A byte set: bit `b % 64` of word `b / 64` for each byte `b`.
type Bytes = [u64; 4];

/// A trie's byte map and a byte set.
type RunKey = ([u8; 256], Bytes);

/// The [`Runs`] of a vocabulary's tries, by the trie's byte map and the byte set: every grammar
/// with names of the same letters shares them. At most an eighth of the vocabulary's store
/// entries are kept (`Limits.shared_lexer_walks`: 16 of the default 128), each holding a bit and
/// a chain end per node (1.1 MB on tekken's byte trie; the blocks no walk asked are not made).
#[derive(Debug)]
pub struct RunStore {
    kept: Mutex<Lru<RunKey, Arc<Runs>>>,
}

impl RunStore {
    /// A store for a vocabulary of `entries` store entries.
    pub fn new(entries: usize) -> Self {
        RunStore {
            kept: Mutex::new(Lru::new((entries / 8).max(1))),
        }
    }
}

/// Per trie node, whether every node of its subtree below it has a label of one byte set: made
/// for the subtree of one of the root's children at a time, when a walk first asks about one of
/// its nodes (most of them a name's walk never enters: it dies on the first byte of most of
/// tekken's tokens), in one pass over it (~4 instructions a node, against ~40 to step one). A
/// subtree of more than [`SPLIT_NODES`] nodes is not one block: its node is answered alone, by a
/// scan of the labels below it that stops at the first outside the set, and its children's
/// subtrees are blocks in turn (tekken's words after a space are 160,000 of its 266,000 nodes:
/// as one block, SQL's first mask made it to ask about the space alone, 0.7-1.0 ms).
#[derive(Debug)]
struct Runs {
    /// the first node of each block, ascending
    starts: Vec<u32>,
    /// per block, its runs
    blocks: Vec<OnceLock<BlockRuns>>,
    /// the nodes whose subtree is split into blocks, ascending
    split: Vec<u32>,
    /// per split node, its bit (a word, so that it reads as a block of one node)
    split_below: Vec<OnceLock<[u64; 1]>>,
}

/// The runs of one block.
#[derive(Debug)]
struct BlockRuns {
    /// a bit per node: every node below it has a label of the set
    below: Vec<u64>,
    /// per node whose label is in the set and whose subtree below is spelled with it (0 for the
    /// others): the end of the stretch of nodes made of its subtree and those of its next
    /// siblings of the same kind
    chain: Vec<u32>,
}

/// The most nodes of one block (below, the subtree is split: [`Runs`]).
const SPLIT_NODES: usize = 1 << 14;

/// The chain of a split node: none (its stretch is not kept at once; the walk steps into it).
const NO_CHAIN: [u32; 1] = [0];

impl Runs {
    /// The blocks of `trie`: the subtrees of the root's children, split where more than `split`
    /// nodes.
    fn new(trie: &TokenTrie, split: usize) -> Self {
        let (mut starts, mut split_nodes) = (Vec::new(), Vec::new());
        let mut i = 1;
        while i < trie.n_nodes() {
            let end = trie.end[i] as usize;
            if end - i <= split.max(1) {
                starts.push(i as u32);
                i = end;
            } else {
                split_nodes.push(i as u32);
                i += 1; // into its children
            }
        }
        Runs {
            blocks: starts.iter().map(|_| OnceLock::new()).collect(),
            starts,
            split_below: split_nodes.iter().map(|_| OnceLock::new()).collect(),
            split: split_nodes,
        }
    }

    /// The block of node `i` (not the root), `inside` giving the labels of the set.
    fn block(&self, trie: &TokenTrie, inside: &[bool; 256], i: usize) -> Block<'_> {
        if let Ok(s) = self.split.binary_search(&(i as u32)) {
            let bits = self.split_below[s].get_or_init(|| {
                let end = trie.end[i] as usize;
                let first_out = (i + 1..end).find(|&j| !inside[usize::from(trie.label[j])]);
                [u64::from(first_out.is_none())]
            });
            return Block {
                start: i,
                end: i + 1,
                bits,
                chain: &NO_CHAIN,
            };
        }
        let b = self.starts.partition_point(|&s| s as usize <= i) - 1;
        let start = self.starts[b] as usize;
        let runs = self.blocks[b].get_or_init(|| block(trie, inside, start));
        Block {
            start,
            end: trie.end[start] as usize,
            bits: &runs.below,
            chain: &runs.chain,
        }
    }
}

/// The [`Runs`] of one block (the subtree of `start`: nodes `start .. end`), or of a split node alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Block<'a> {
    start: usize,
    end: usize,
    bits: &'a [u64],
    chain: &'a [u32],
}

impl Block<'_> {
    /// Whether node `i` is in the block.
    #[inline]
    pub fn holds(&self, i: usize) -> bool {
        self.start <= i && i < self.end
    }

    /// Whether every node below node `i` (in the block) has a label of the set.
    #[inline]
    pub fn run_below(&self, i: usize) -> bool {
        let j = i - self.start;
        self.bits[j / 64] & (1 << (j % 64)) != 0
    }

    /// When node `i` (in the block) has a label of the set and the set spells its subtree below
    /// it: the end of the stretch of nodes made of its subtree and those of its next siblings of
    /// the same kind.
    #[inline]
    pub fn run_from(&self, i: usize) -> Option<usize> {
        let to = self.chain[i - self.start];
        (to != 0).then_some(to as usize)
    }
}

/// Per node of the subtree of `start` (a block's first node), bit `i - start`: every node below
/// node `i` has a label `inside` takes; and its chain ([`Block::run_from`]). One pass over the
/// nodes in reverse preorder, where a node comes after its whole subtree and its next siblings:
/// `ok[d]` holds whether the nodes of depth `d` met since the last shallower one (the children of
/// the next node of depth `d - 1`) are inside with such subtrees, `chained[d]` the chain of the
/// last of them (0: none). A word of bits is filled at a time, over slices of the block's nodes,
/// without branches on the labels (SQL's first masks made 66 blocks in 6.7 M instructions, about
/// 25 a node, before the chains).
fn block(trie: &TokenTrie, inside: &[bool; 256], start: usize) -> BlockRuns {
    let end = trie.end[start] as usize;
    let (depth, label, ends) = (
        &trie.depth[start..end],
        &trie.label[start..end],
        &trie.end[start..end],
    );
    let mut bits = vec![0u64; (end - start).div_ceil(64)];
    let mut chain = vec![0u32; end - start];
    let mut ok = vec![true; trie.max_depth + 2];
    let mut chained = vec![0u32; trie.max_depth + 2];
    for (w, word) in bits.iter_mut().enumerate().rev() {
        let lo = w * 64;
        let hi = (lo + 64).min(end - start);
        let mut acc = 0u64;
        for j in (lo..hi).rev() {
            let (d, l) = (depth[j] as usize, inside[usize::from(label[j])]);
            let below = std::mem::replace(&mut ok[d + 1], true);
            chained[d + 1] = 0;
            acc |= u64::from(below) << (j - lo);
            ok[d] &= below & l;
            // (the next sibling's chain goes on from this node's; else the stretch ends after it)
            let to = if chained[d] != 0 { chained[d] } else { ends[j] };
            chain[j] = if below & l { to } else { 0 };
            chained[d] = chain[j];
        }
        *word = acc;
    }
    BlockRuns { below: bits, chain }
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

    /// The [`Block`] of loop set `k` that holds trie node `i` (not the root).
    pub fn block(&self, k: usize, trie: &TokenTrie, i: usize) -> Block<'_> {
        let runs = self.runs[k].get_or_init(|| self.shared(k, trie));
        runs.block(trie, &self.inside[k], i)
    }

    /// Per trie label, whether loop set `k` holds its bytes.
    pub fn labels(&self, k: usize) -> &[bool; 256] {
        &self.inside[k]
    }

    /// Blocks made or found in the store so far (for tests: whether walks asked).
    #[cfg(test)]
    pub fn blocks_made(&self) -> usize {
        self.runs
            .iter()
            .flat_map(|r| r.get())
            .map(|r| r.blocks.iter().filter(|b| b.get().is_some()).count())
            .sum()
    }

    fn shared(&self, k: usize, trie: &TokenTrie) -> Arc<Runs> {
        let key = (self.map, self.bytes[k]);
        let mut kept = lock(&self.store.kept);
        if let Some(hit) = kept.get(&key) {
            return Arc::clone(hit);
        }
        let runs = Arc::new(Runs::new(trie, SPLIT_NODES));
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
            let pieces: Vec<&[u8]> = alphabet.chunks(1).collect();
            let toks = rng.tokens(300, &pieces, 6);
            let n = toks.len();
            let vocab = Vocab::from_tokens(toks, &[], n).unwrap();
            let identity = ByteClasses::identity();
            let trie = TokenTrie::build(&vocab, &identity.map);
            let mut inside = [false; 256];
            for &b in alphabet {
                inside[usize::from(b)] = rng.below(3) > 0;
            }
            // (blocks of a few nodes: the split subtrees answered alone; or whole subtrees)
            let split = if round % 2 == 0 {
                2 + rng.below(40)
            } else {
                usize::MAX
            };
            let runs = Runs::new(&trie, split);
            let mut held = 0;
            for i in 1..trie.n_nodes() {
                let end = trie.end[i] as usize;
                let want = (i + 1..end).all(|j| inside[usize::from(trie.label[j])]);
                let block = runs.block(&trie, &inside, i);
                let alone = runs.split.contains(&(i as u32));
                assert_eq!(alone, end - i > split, "node {i}, round {round}");
                assert!(block.holds(i) && !block.holds(block.end));
                assert!(alone || (block.holds(end - 1) && block.end - block.start <= split));
                assert_eq!(block.run_below(i), want, "node {i}, round {round}");
                // the chain: this node and its next siblings while each has a label of the set
                // and a subtree spelled with it
                let runs_at = |j: usize| {
                    inside[usize::from(trie.label[j])]
                        && (j + 1..trie.end[j] as usize).all(|x| inside[usize::from(trie.label[x])])
                };
                let chain = runs_at(i).then(|| {
                    let mut to = end;
                    while to < block.end && trie.depth[to] == trie.depth[i] && runs_at(to) {
                        to = trie.end[to] as usize;
                    }
                    to
                });
                // (a split node's stretch is not kept at once: it has none)
                let chain = chain.filter(|_| !alone);
                assert_eq!(block.run_from(i), chain, "node {i}, round {round}");
                held += usize::from(want && end > i + 1);
            }
            assert!(held > 0, "round {round}");
        }
    }
}
