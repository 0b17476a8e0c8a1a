//! The token trie: every normal token's byte string (or byte-class string) as a prefix tree in flat
//! arrays, nodes in depth-first preorder so a walk is one forward scan that skips a dead subtree
//! with one jump (llguidance's toktrie does the same).
//!
//! Built under a byte -> class map: the identity map gives the byte trie; an automaton's
//! byte classes merge tokens with the same class sequence into one node (DESIGN §5).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::vocab::Vocab;

/// The class a map for [`TokenTrie::coarsen`] gives bytes no token of the trie may hold (every
/// state of the automaton it is walked with dies on them): their tokens are left out.
pub const DROPPED: u8 = u8::MAX;

/// A prefix tree in preorder. Node 0 is the root (the empty string).
///
/// For node `i`: `label[i]` is the class on the edge into it, `depth[i]` its length, nodes
/// `i + 1 .. end[i]` its subtree, and `tok_ids[tok_ptr[i] .. tok_ptr[i + 1]]` the tokens whose
/// class sequence is exactly its path.
#[derive(Debug, Clone, Default)]
pub struct TokenTrie {
    pub label: Vec<u8>,
    pub depth: Vec<u32>,
    pub end: Vec<u32>,
    pub tok_ptr: Vec<u32>,
    pub tok_ids: Vec<u32>,
    /// The longest token, in bytes (the deepest node).
    pub max_depth: usize,
    /// `deepest[i]`: the depth of the deepest node of `i`'s subtree (`i` included)
    pub deepest: Vec<u32>,
    /// the tokens by length: `by_len[len_ptr[d] .. len_ptr[d + 1]]` are the tokens of `d` classes
    pub by_len: Vec<u32>,
    pub len_ptr: Vec<u32>,
    /// `single[i]`: node `i`'s token when it has exactly one, else [`NO_TOKEN`] or [`MANY`] (a
    /// walk marks a node's token without reading `tok_ptr`, and without a branch on whether it has
    /// one: most nodes of a byte trie have one or none)
    pub single: Vec<u32>,
    /// the trie's tokens as mask words (bit `t % 32` of word `t / 32`), made when first asked
    all: OnceLock<Vec<u32>>,
    /// the root's children (node, label), ascending: a descent that starts at the root reads
    /// them here, not from `label` and `end`, where each is a whole subtree after the last (on
    /// tekken's byte trie, ~250 reads a cache line apart)
    pub roots: Vec<(u32, u8)>,
    /// which trie this is (a clone is the same): what a walk's memory of an earlier mask is
    /// kept by ([`Stretches`])
    pub id: TrieId,
}

/// A number no other trie made in the process has (drawn by `default`, so every constructor gets
/// one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrieId(u64);

impl Default for TrieId {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TrieId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Maps of at most this many classes are coarsened by one scan of the byte trie, through a dense
/// table of a row of `classes` cells per class node, while the table stays within
/// [`SCAN_TABLE_CELLS`] (16 MB); other maps group byte nodes class node by class node. (The CFG
/// engine's class tries have at most 32 classes. A map of 55 classes with a class trie of 139k
/// nodes passes the bound late in the scan: scan and grouping then took 22 ms, the grouping alone
/// 16-17. Under the bound the scan is faster: 29 classes, 54k nodes, 4.1 against 6.6 ms.)
const SCAN_CLASSES: usize = 32;
const SCAN_TABLE_CELLS: usize = 1 << 22;

/// [`TokenTrie::single`] of a node without tokens, and of one with several.
pub const NO_TOKEN: u32 = u32::MAX;
pub const MANY: u32 = u32::MAX - 1;

impl TokenTrie {
    /// The trie of `vocab`'s normal tokens with every byte `b` replaced by `map[b]`.
    ///
    /// A most-significant-digit radix sort of the token ids by class string, depth by depth: a node
    /// is a group of tokens sharing its path; sorting the group by the class at the next position
    /// splits it into the children (in class order). Groups are taken from a stack, children
    /// pushed in reverse, so nodes are numbered in preorder; `end` is filled by one pass after.
    pub fn build(vocab: &Vocab, map: &[u8; 256]) -> TokenTrie {
        let bytes = vocab.flat_bytes();
        let mut ids: Vec<u32> = vocab.normal_ids().collect();
        let span = |t: u32| vocab.span(t as usize);
        // the sort key at depth d: 0 for a token that ends there, else 1 + its class; then the id
        let key = |t: u32, d: usize| -> u64 {
            let sp = span(t);
            let k = if sp.len() == d {
                0
            } else {
                1 + u64::from(map[usize::from(bytes[sp.start + d])])
            };
            (k << 32) | u64::from(t)
        };
        let mut trie = TokenTrie {
            tok_ptr: vec![0],
            tok_ids: Vec::with_capacity(ids.len()),
            ..TokenTrie::default()
        };
        // (first, last) ids of a group, its depth, its class label
        let mut stack: Vec<(usize, usize, usize, u8)> = vec![(0, ids.len(), 0, 0)];
        let mut runs: Vec<(usize, usize, u8)> = Vec::new();
        let mut keys: Vec<u64> = Vec::new();
        while let Some((lo, hi, d, label)) = stack.pop() {
            trie.label.push(label);
            trie.depth.push(d as u32);
            trie.max_depth = trie.max_depth.max(d);
            // sort the group by (class at depth d, id) through a scratch of packed keys
            keys.clear();
            keys.extend(ids[lo..hi].iter().map(|&t| key(t, d)));
            if keys.len() > 1 {
                keys.sort_unstable();
            }
            for (slot, &k) in ids[lo..hi].iter_mut().zip(keys.iter()) {
                *slot = k as u32;
            }
            let mut i = 0;
            while i < keys.len() && keys[i] >> 32 == 0 {
                trie.tok_ids.push(keys[i] as u32); // tokens whose class string is exactly this path
                i += 1;
            }
            trie.tok_ptr.push(trie.tok_ids.len() as u32);
            runs.clear();
            while i < keys.len() {
                let class = keys[i] >> 32;
                let mut j = i + 1;
                while j < keys.len() && keys[j] >> 32 == class {
                    j += 1;
                }
                runs.push((lo + i, lo + j, (class - 1) as u8));
                i = j;
            }
            for &(a, b, class) in runs.iter().rev() {
                stack.push((a, b, d + 1, class));
            }
        }
        trie.finish();
        trie
    }

    /// The trie of the same tokens under `map`, read off this byte trie (labels are bytes): a node
    /// of the result is the set of byte-trie nodes at its depth whose byte strings map to its class
    /// string, so its children are their children grouped by class. One pass over the byte trie's
    /// nodes instead of sorting every token again: the same trie as [`TokenTrie::build`] with
    /// `map` (preorder, children by class), several times faster (tekken: the radix sort reads
    /// every byte of every token at every depth's regrouping). A node's tokens come in the byte
    /// trie's order (by their bytes), not ascending: every reader of a node's tokens sets bits.
    /// Bytes `map` sends to [`DROPPED`] take their tokens out, with the byte trie's subtrees below
    /// them unread: a grammar of ASCII text reads a small part of the byte trie. Two ways, the same
    /// arrays: one forward scan for maps of few classes (`coarsen_by_scan`), else the
    /// grouping walk (`coarsen_by_groups`).
    pub fn coarsen(&self, map: &[u8; 256]) -> TokenTrie {
        if map
            .iter()
            .enumerate()
            .all(|(b, &c)| c == DROPPED || usize::from(c) == b)
        {
            return self.without_dropped(map);
        }
        let k = map
            .iter()
            .filter(|&&c| c != DROPPED)
            .map(|&c| usize::from(c) + 1)
            .max()
            .unwrap_or(0);
        let scanned = if k <= SCAN_CLASSES {
            self.coarsen_by_scan(map, k, SCAN_TABLE_CELLS)
        } else {
            None
        };
        scanned.unwrap_or_else(|| self.coarsen_by_groups(map))
    }

    /// [`TokenTrie::coarsen`] for a map that keeps every byte it does not drop: this byte trie
    /// without the dropped subtrees, copied in one pass (no two nodes merge). What a walk through
    /// a table of many byte classes takes instead of a class trie of its own (which merges few
    /// nodes then, and took 9.5 ms for 1,000 labels' 57 classes).
    fn without_dropped(&self, map: &[u8; 256]) -> TokenTrie {
        let n = self.n_nodes();
        let mut out = TokenTrie {
            label: Vec::with_capacity(n),
            depth: Vec::with_capacity(n),
            tok_ptr: Vec::with_capacity(n + 1),
            tok_ids: Vec::with_capacity(self.tok_ids.len()),
            ..TokenTrie::default()
        };
        out.tok_ptr.push(0);
        // for each node copied, the byte node it copies and its parent (the last node copied one
        // level up); for each byte node visited (copied, or the root of a dropped subtree), how
        // many were copied before it: `end` and `deepest` follow without a search
        let mut from: Vec<u32> = Vec::with_capacity(n);
        let mut parent: Vec<u32> = Vec::with_capacity(n);
        let mut copied_before = vec![0u32; n + 1];
        let mut at_depth = vec![0u32; self.max_depth + 1];
        let mut b = 0;
        while b < n {
            copied_before[b] = out.label.len() as u32;
            if b > 0 && map[usize::from(self.label[b])] == DROPPED {
                b = self.end[b] as usize;
                continue;
            }
            let d = self.depth[b] as usize;
            at_depth[d] = out.label.len() as u32;
            parent.push(if d == 0 { 0 } else { at_depth[d - 1] });
            from.push(b as u32);
            out.label.push(self.label[b]);
            out.depth.push(self.depth[b]);
            for &t in self.tokens(b) {
                out.tok_ids.push(t); // (most nodes hold one token or none: no memcpy call)
            }
            out.tok_ptr.push(out.tok_ids.len() as u32);
            b += 1;
        }
        let m = out.label.len();
        copied_before[n] = m as u32;
        // a node's subtree ends where the byte node after its source's subtree was visited (that
        // node is visited: its parent is an ancestor of the source, and kept)
        out.end = from
            .iter()
            .map(|&b| copied_before[self.end[b as usize] as usize])
            .collect();
        out.deepest = out.depth.clone();
        for i in (1..m).rev() {
            let p = parent[i] as usize;
            out.deepest[p] = out.deepest[p].max(out.deepest[i]);
        }
        out.max_depth = out.deepest.first().map_or(0, |&d| d as usize);
        out.fill_token_tables();
        out
    }

    /// [`TokenTrie::coarsen`] by one forward scan of the byte trie, which reads its arrays in order
    /// (skipping dropped subtrees) and gives each byte node its class node through a dense
    /// (class node, class) -> child table; the class nodes are then numbered in preorder from
    /// their subtree sizes (which give `end`, and `deepest` with them, without a search), and the
    /// tokens dealt to them in the byte trie's order. The grouping walk reads a node's children
    /// scattered over the trie, a cache miss or two each: arithmetic.lark's class trie over tekken
    /// took 3.3 ms that way, 1.6-2.1 so (3.2-3.8 before the ranks came from subtree sizes and the
    /// tokens from the nodes holding them). None when the table would pass `max_cells` cells.
    fn coarsen_by_scan(&self, map: &[u8; 256], k: usize, max_cells: usize) -> Option<TokenTrie> {
        const NONE: u32 = u32::MAX;
        let n = self.n_nodes();
        let k = k.max(1);
        // class nodes in order of creation (a parent before its children): child[c * k + class],
        // parent, depth, label, number of tokens
        let mut child: Vec<u32> = vec![NONE; k];
        let mut c_parent: Vec<u32> = vec![0];
        let mut c_depth: Vec<u32> = vec![0];
        let mut c_label: Vec<u8> = vec![0];
        let mut c_tokens: Vec<u32> = vec![self.tokens(0).len() as u32];
        // (class node, byte node) of each byte node holding tokens, in preorder: the tokens are
        // dealt from it afterwards, in order (writing each token's class node as it came, by
        // token id, was a random write per token and a third of the coarsening)
        let mut holders: Vec<(u32, u32)> = vec![(0, 0); n + 1];
        let mut n_holders = 1;
        // the class node of the last byte node met at each depth: in preorder, with dropped
        // subtrees skipped whole, a node's parent is the last node met one level up
        let mut at_depth: Vec<u32> = vec![0; self.max_depth + 1];
        let (label, depth, end, ptr) = (
            &self.label[..n],
            &self.depth[..n],
            &self.end[..n],
            &self.tok_ptr[..=n],
        );
        let mut b = 1;
        while b < n {
            let class = map[usize::from(label[b])];
            if class == DROPPED {
                b = end[b] as usize;
                continue;
            }
            let d = depth[b] as usize;
            let parent = at_depth[d - 1] as usize;
            let slot = parent * k + usize::from(class);
            let mut cn = child[slot];
            if cn == NONE {
                if child.len() + k > max_cells {
                    return None;
                }
                cn = c_depth.len() as u32;
                child[slot] = cn;
                child.resize(child.len() + k, NONE);
                c_parent.push(parent as u32);
                c_depth.push(c_depth[parent] + 1);
                c_label.push(class);
                c_tokens.push(0);
            }
            // (without a branch: whether a node holds tokens is a coin toss to the predictor)
            let held = ptr[b + 1] - ptr[b];
            c_tokens[cn as usize] += held;
            holders[n_holders] = (cn, b as u32);
            n_holders += usize::from(held != 0);
            at_depth[d] = cn;
            b += 1;
        }
        drop(child);
        let m = c_depth.len();
        // preorder ranks, children in class order: subtree sizes (children come after their
        // parents in creation order), then each node placed after its parent and the subtrees of
        // its siblings of smaller classes
        let mut size = vec![1u32; m];
        let mut deepest = c_depth.clone();
        for cn in (1..m).rev() {
            let p = c_parent[cn] as usize;
            size[p] += size[cn];
            deepest[p] = deepest[p].max(deepest[cn]);
        }
        // the class nodes by class (a counting sort: stable, so by creation within a class)
        let mut by_class = vec![0u32; m - 1];
        let mut start = vec![0u32; k + 1];
        for &c in &c_label[1..] {
            start[usize::from(c) + 1] += 1;
        }
        for c in 0..k {
            start[c + 1] += start[c];
        }
        for (cn, &c) in c_label.iter().enumerate().skip(1) {
            by_class[start[usize::from(c)] as usize] = cn as u32;
            start[usize::from(c)] += 1;
        }
        // each node's offset below its parent (siblings met in class order), then its rank
        let mut below = vec![1u32; m]; // the next free offset below each node
        let mut rank = vec![0u32; m];
        for &cn in &by_class {
            let p = c_parent[cn as usize] as usize;
            rank[cn as usize] = below[p];
            below[p] += size[cn as usize];
        }
        for cn in 1..m {
            rank[cn] += rank[c_parent[cn] as usize];
        }
        let mut out = TokenTrie {
            label: vec![0; m],
            depth: vec![0; m],
            end: vec![0; m],
            deepest: vec![0; m],
            tok_ptr: vec![0; m + 1],
            ..TokenTrie::default()
        };
        for cn in 0..m {
            let r = rank[cn] as usize;
            out.label[r] = c_label[cn];
            out.depth[r] = c_depth[cn];
            out.end[r] = rank[cn] + size[cn];
            out.deepest[r] = deepest[cn];
            out.tok_ptr[r + 1] = c_tokens[cn];
        }
        for r in 0..m {
            out.tok_ptr[r + 1] += out.tok_ptr[r];
        }
        out.max_depth = out.depth.iter().max().map_or(0, |&d| d as usize);
        // each class node's tokens, in the byte trie's order of their nodes
        out.tok_ids = vec![0; out.tok_ptr[m] as usize];
        let mut next: Vec<u32> = rank.iter().map(|&r| out.tok_ptr[r as usize]).collect();
        for &(cn, b) in &holders[..n_holders] {
            let mut at = next[cn as usize] as usize;
            for &t in self.tokens(b as usize) {
                out.tok_ids[at] = t;
                at += 1;
            }
            next[cn as usize] = at as u32;
        }
        out.fill_token_tables(); // `end` and `deepest` are made above, without a search
        Some(out)
    }

    /// [`TokenTrie::coarsen`] for any map: each class node's byte nodes are grouped, their
    /// children bucketed by class into the class node's children.
    fn coarsen_by_groups(&self, map: &[u8; 256]) -> TokenTrie {
        let mut out = TokenTrie {
            tok_ptr: vec![0],
            tok_ids: Vec::with_capacity(self.tok_ids.len()),
            ..TokenTrie::default()
        };
        // the byte-trie nodes of each pending class node: pool[start .. start + len], ascending
        let mut pool: Vec<u32> = vec![0];
        let mut stack: Vec<(usize, usize, u32, u8)> = vec![(0, 1, 0, 0)];
        let mut kids: Vec<(u8, u32)> = Vec::new();
        let mut count = [0u32; 256]; // kids per class (zero between nodes)
        let mut touched: Vec<u8> = Vec::new();
        // where each touched class's kids go in `pool` (only touched classes' entries are read;
        // a fresh 256-entry array per class node, and its copy, cost most of a 139k-node trie)
        let mut first = [0usize; 256];
        let mut next = [0usize; 256];
        while let Some((start, len, d, label)) = stack.pop() {
            out.label.push(label);
            out.depth.push(d);
            out.max_depth = out.max_depth.max(d as usize);
            kids.clear();
            for &b in &pool[start..start + len] {
                let b = b as usize;
                out.tok_ids.extend_from_slice(self.tokens(b));
                let mut c = b + 1; // the children of byte node b: c, end[c], ... below end[b]
                while c < self.end[b] as usize {
                    let class = map[usize::from(self.label[c])];
                    if class == DROPPED {
                        c = self.end[c] as usize;
                        continue;
                    }
                    if count[usize::from(class)] == 0 {
                        touched.push(class);
                    }
                    count[usize::from(class)] += 1;
                    kids.push((class, c as u32));
                    c = self.end[c] as usize;
                }
            }
            out.tok_ptr.push(out.tok_ids.len() as u32);
            // the kids bucketed by class (a stable counting sort: each class's nodes stay ascending,
            // as the parents are ascending and a parent's children follow it in preorder)
            touched.sort_unstable();
            let mut at = pool.len();
            for &class in &touched {
                first[usize::from(class)] = at;
                next[usize::from(class)] = at;
                at += count[usize::from(class)] as usize;
            }
            pool.resize(at, 0);
            for &(class, c) in &kids {
                pool[next[usize::from(class)]] = c;
                next[usize::from(class)] += 1;
            }
            for &class in touched.iter().rev() {
                let n = count[usize::from(class)] as usize;
                stack.push((first[usize::from(class)], n, d + 1, class));
                count[usize::from(class)] = 0;
            }
            touched.clear();
        }
        out.finish();
        out
    }

    /// The trie of the tokens `keep` holds (the same paths, a subset of the nodes, in the same
    /// preorder), and for each of its nodes this trie's node with its path.
    pub fn subset(&self, keep: impl Fn(u32) -> bool) -> (TokenTrie, Vec<u32>) {
        let n = self.n_nodes();
        // each node's parent (the node one shallower on the path to it), then whether its subtree
        // holds a kept token (children come after their parent in preorder)
        let mut parent = vec![0u32; n];
        let mut path = vec![0u32; self.max_depth + 1];
        for (i, (p, &d)) in parent.iter_mut().zip(&self.depth).enumerate().skip(1) {
            *p = path[d as usize - 1];
            path[d as usize] = i as u32;
        }
        let mut live = vec![false; n];
        for i in (1..n).rev() {
            live[i] |= self.tokens(i).iter().any(|&t| keep(t));
            if live[i] {
                live[parent[i] as usize] = true;
            }
        }
        let mut out = TokenTrie {
            tok_ptr: vec![0],
            ..TokenTrie::default()
        };
        let mut node_of = Vec::new();
        for i in (0..n).filter(|&i| i == 0 || live[i]) {
            out.label.push(self.label[i]);
            out.depth.push(self.depth[i]);
            out.max_depth = out.max_depth.max(self.depth[i] as usize);
            out.tok_ids
                .extend(self.tokens(i).iter().copied().filter(|&t| keep(t)));
            out.tok_ptr.push(out.tok_ids.len() as u32);
            node_of.push(i as u32);
        }
        out.finish();
        (out, node_of)
    }

    /// The arrays read off the others: `end`, `deepest`, the tokens by length.
    fn finish(&mut self) {
        self.fill_end();
        let n = self.label.len();
        self.deepest = self.depth.clone();
        for i in (0..n).rev() {
            let mut c = i + 1; // the children of i: c, end[c], ... below end[i]
            while c < self.end[i] as usize {
                self.deepest[i] = self.deepest[i].max(self.deepest[c]);
                c = self.end[c] as usize;
            }
        }
        self.fill_token_tables();
    }

    /// `by_len`, `len_ptr` and `single`, read off the nodes' tokens, and `roots` (after `end`).
    fn fill_token_tables(&mut self) {
        let n = self.label.len();
        self.roots.clear();
        let mut c = 1;
        while c < n {
            self.roots.push((c as u32, self.label[c]));
            c = self.end[c] as usize;
        }
        let (depth, ptr, ids) = (&self.depth[..n], &self.tok_ptr[..=n], &self.tok_ids[..]);
        let mut count = vec![0u32; self.max_depth + 2];
        for (&d, w) in depth.iter().zip(ptr.windows(2)) {
            count[d as usize + 1] += w[1] - w[0];
        }
        for d in 0..=self.max_depth {
            count[d + 1] += count[d];
        }
        let mut at = count.clone();
        let mut by_len = vec![0; ids.len()];
        for (&d, w) in depth.iter().zip(ptr.windows(2)) {
            let mut to = at[d as usize] as usize;
            for &t in &ids[w[0] as usize..w[1] as usize] {
                by_len[to] = t;
                to += 1;
            }
            at[d as usize] = to as u32;
        }
        self.single = ptr
            .windows(2)
            .map(|w| match w[1] - w[0] {
                0 => NO_TOKEN,
                1 => ids[w[0] as usize],
                _ => MANY,
            })
            .collect();
        self.by_len = by_len;
        self.len_ptr = count;
        self.all = OnceLock::new();
    }

    /// The trie's tokens as mask words.
    pub fn all_words(&self) -> &[u32] {
        self.all.get_or_init(|| {
            let top = self.tok_ids.iter().max().map_or(0, |&t| t as usize + 1);
            let mut all = vec![0; top.div_ceil(32)];
            for &t in &self.tok_ids {
                all[t as usize >> 5] |= 1 << (t & 31);
            }
            all
        })
    }

    /// The tokens of `d` classes or more.
    pub fn tokens_from_len(&self, d: usize) -> &[u32] {
        let from = self.len_ptr[d.min(self.max_depth + 1)] as usize;
        &self.by_len[from..]
    }

    /// `end[i]`: the first node after `i` in preorder that is no deeper than `i`.
    fn fill_end(&mut self) {
        let n = self.label.len();
        self.end = vec![n as u32; n];
        let mut open: Vec<usize> = Vec::new();
        for i in 0..n {
            while let Some(&top) = open.last() {
                if self.depth[top] >= self.depth[i] {
                    self.end[top] = i as u32;
                    open.pop();
                } else {
                    break;
                }
            }
            open.push(i);
        }
    }

    /// Number of nodes, the root included.
    pub fn n_nodes(&self) -> usize {
        self.label.len()
    }

    /// The tokens ending at node `i`.
    #[inline]
    pub fn tokens(&self, i: usize) -> &[u32] {
        &self.tok_ids[self.tok_ptr[i] as usize..self.tok_ptr[i + 1] as usize]
    }

    /// Push node `i`'s tokens onto `out` (what [`TokenTrie::mark`] sets).
    pub fn push_tokens(&self, i: usize, out: &mut Vec<u32>) {
        match self.single[i] {
            NO_TOKEN => {}
            MANY => out.extend_from_slice(self.tokens(i)),
            t => out.push(t),
        }
    }

    /// Set the bits of the tokens of the nodes below node `i` in `words` (its subtree, `i` left out:
    /// in preorder, nodes `i + 1 .. end[i]`, whose tokens are one stretch of `tok_ids`).
    #[inline]
    pub fn mark_below(&self, i: usize, words: &mut [u32]) {
        self.mark_nodes(i + 1, self.end[i] as usize, words);
    }

    /// Set the bits of the tokens of nodes `from .. to` in `words` (one stretch of `tok_ids`).
    #[inline]
    pub fn mark_nodes(&self, from: usize, to: usize, words: &mut [u32]) {
        let (a, b) = (self.tok_ptr[from] as usize, self.tok_ptr[to] as usize);
        for &t in &self.tok_ids[a..b] {
            words[t as usize >> 5] |= 1 << (t & 31);
        }
    }

    /// Set the bits of node `i`'s tokens in `words`. The mask walks' innermost step: whether a
    /// node has a token is a coin toss the branch predictor loses (half the nodes of a byte
    /// trie have one), so a lone token is marked without a branch on it (a JSON string's walk
    /// over tekken: 3.1 ms with the loop over `tokens`, 1.1 ms so).
    #[inline(always)]
    pub fn mark(&self, i: usize, words: &mut [u32]) {
        let t = self.single[i];
        let one = t < MANY;
        let at = if one { t } else { 0 };
        words[at as usize >> 5] |= u32::from(one) << (at & 31);
        if t == MANY {
            for &t in self.tokens(i) {
                words[t as usize >> 5] |= 1 << (t & 31);
            }
        }
    }
}

/// Stretches of a trie's nodes (preorder ranges) whose tokens a walk keeps, gathered as it goes
/// (in ascending order) and set in a mask at its end: one by one, or, when they hold most of the
/// trie's tokens, as the trie's tokens less those between them. SQL's first masks after a keyword
/// keep about 75,000 of tekken's 130,000 tokens; setting their bits one by one was a quarter of
/// the walk (perf).
///
/// Such a row is kept with its stretches: the next walk's stretches on the same trie are often
/// the same or nearly (over sql.lark's 200 cold steps, 11 lists of ~2,200 stretches came back
/// 2-4 times each), and then the kept row is changed where they differ instead (a write of
/// 55,000 cleared tokens, ~440,000 instructions, was a fifth of those masks).
#[derive(Debug, Default)]
pub struct Stretches {
    spans: Vec<(u32, u32)>,
    scratch: Vec<u32>,
    /// the trie, stretches and row of tokens of the last write made whole
    last_trie: Option<TrieId>,
    last: Vec<(u32, u32)>,
    last_row: Vec<u32>,
    /// where `spans` and `last` differ
    diff: Vec<(u32, u32)>,
    /// writes read off the last one (for tests)
    #[cfg(test)]
    pub read_off: usize,
}

impl Stretches {
    pub fn clear(&mut self) {
        self.spans.clear();
    }

    /// Keep the tokens of nodes `from .. to` (not before the stretches kept so far).
    #[inline]
    pub fn keep(&mut self, from: usize, to: usize) {
        debug_assert!(self.spans.last().is_none_or(|l| l.1 as usize <= from));
        match self.spans.last_mut() {
            Some(last) if last.1 as usize == from => last.1 = to as u32,
            _ => self.spans.push((from as u32, to as u32)),
        }
    }

    /// Set the bits of the kept tokens of `trie` in `words`.
    pub fn write(&mut self, trie: &TokenTrie, words: &mut [u32]) {
        let (ptr, ids) = (&trie.tok_ptr, &trie.tok_ids);
        let at = |node: u32| ptr[node as usize] as usize;
        let kept: usize = self.spans.iter().map(|&(a, b)| at(b) - at(a)).sum();
        let dense = kept * 2 > ids.len();
        // (tokens, or words, set or cleared one by one)
        let cost = if dense {
            ids.len() - kept + 2 * words.len()
        } else {
            kept
        };
        if self.last_trie == Some(trie.id) && cost > 2 * words.len() {
            let budget = cost - 2 * words.len();
            if differ(&self.last, &self.spans, at, budget, &mut self.diff) {
                for &(a, b) in &self.diff {
                    for &t in &ids[at(a)..at(b)] {
                        self.last_row[t as usize >> 5] ^= 1 << (t & 31);
                    }
                }
                for (w, &r) in words.iter_mut().zip(&self.last_row) {
                    *w |= r;
                }
                std::mem::swap(&mut self.last, &mut self.spans);
                #[cfg(test)]
                {
                    self.read_off += 1;
                }
                return;
            }
        }
        if !dense {
            for &(a, b) in &self.spans {
                trie.mark_nodes(a as usize, b as usize, words);
            }
            return;
        }
        let all = &mut self.scratch;
        all.clear();
        all.extend_from_slice(trie.all_words());
        // the tokens of the nodes before each stretch and after the last one cleared
        let n = trie.n_nodes() as u32;
        let mut from = 0;
        for &(a, b) in self.spans.iter().chain(&[(n, n)]) {
            for &t in &ids[at(from)..at(a)] {
                all[t as usize >> 5] &= !(1 << (t & 31));
            }
            from = b;
        }
        for (w, &a) in words.iter_mut().zip(all.iter()) {
            *w |= a;
        }
        std::mem::swap(&mut self.last_row, &mut self.scratch);
        std::mem::swap(&mut self.last, &mut self.spans);
        self.last_trie = Some(trie.id);
    }
}

/// The node ranges in exactly one of `a` and `b` (each ascending, disjoint and apart), ascending,
/// into `out`; false as soon as their tokens (`at`: where a node's tokens begin) number more than
/// `budget`. The ends of both, merged, less those they share, are the ends of the ranges.
fn differ(
    a: &[(u32, u32)],
    b: &[(u32, u32)],
    at: impl Fn(u32) -> usize,
    budget: usize,
    out: &mut Vec<(u32, u32)>,
) -> bool {
    out.clear();
    let (mut ends_a, mut ends_b) = (
        a.iter().flat_map(|&(s, e)| [s, e]).peekable(),
        b.iter().flat_map(|&(s, e)| [s, e]).peekable(),
    );
    let (mut open, mut tokens) = (None, 0);
    loop {
        let x = match (ends_a.peek().copied(), ends_b.peek().copied()) {
            (Some(x), Some(y)) if x == y => {
                ends_a.next();
                ends_b.next();
                continue;
            }
            (Some(x), Some(y)) if x < y => {
                ends_a.next();
                x
            }
            (_, Some(y)) => {
                ends_b.next();
                y
            }
            (Some(x), None) => {
                ends_a.next();
                x
            }
            (None, None) => return true,
        };
        match open.take() {
            None => open = Some(x),
            Some(s) => {
                tokens += at(x) - at(s);
                if tokens > budget {
                    return false;
                }
                out.push((s, x));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Stretches, TokenTrie, DROPPED};
    use crate::classes::ByteClasses;
    use crate::test_rng::Rng;
    use crate::vocab::Vocab;

    fn vocab(tokens: &[&[u8]]) -> Vocab {
        Vocab::from_tokens(
            tokens.iter().map(|t| t.to_vec()).collect(),
            &[0],
            tokens.len(),
        )
        .unwrap()
    }

    /// The class strings of every node, read back from the preorder arrays.
    fn paths(trie: &TokenTrie) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = vec![vec![]];
        let mut stack: Vec<Vec<u8>> = vec![vec![]];
        for i in 1..trie.n_nodes() {
            let d = trie.depth[i] as usize;
            stack.truncate(d);
            let mut p = stack[d - 1].clone();
            p.push(trie.label[i]);
            stack.push(p.clone());
            out.push(p);
        }
        out
    }

    #[test]
    fn byte_trie_in_preorder_with_subtrees() {
        let v = vocab(&[b"", b"ab", b"a", b"b", b"abc", b"ab"]);
        let trie = TokenTrie::build(&v, &ByteClasses::identity().map);
        let p = paths(&trie);
        assert_eq!(
            p,
            vec![
                vec![],
                b"a".to_vec(),
                b"ab".to_vec(),
                b"abc".to_vec(),
                b"b".to_vec()
            ]
        );
        assert_eq!(trie.end, vec![5, 4, 4, 4, 5]);
        assert_eq!(trie.tokens(1), &[2]);
        assert_eq!(trie.tokens(2), &[1, 5]); // duplicates share a node
        assert_eq!(trie.tokens(3), &[4]);
        assert_eq!(trie.max_depth, 3);
    }

    #[test]
    fn classes_merge_tokens() {
        let v = vocab(&[b"", b"a", b"b", b"ab", b"ba", b"c"]);
        let mut map = [0u8; 256];
        map[usize::from(b'a')] = 1;
        map[usize::from(b'b')] = 1;
        map[usize::from(b'c')] = 2;
        let trie = TokenTrie::build(&v, &map);
        assert_eq!(trie.n_nodes(), 4); // root, [1], [1 1], [2]
        assert_eq!(trie.tokens(1), &[1, 2]);
        assert_eq!(trie.tokens(2), &[3, 4]);
        assert_eq!(trie.tokens(3), &[5]);
    }

    #[test]
    fn the_scan_and_the_grouping_coarsen_alike() {
        // random tokens over a dozen bytes, random maps of 1-64 classes with dropped bytes
        let mut x: u32 = 777;
        let mut rand = |m: u32| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 8) % m
        };
        let alphabet = b"abcxyz019 ,\"\xff";
        let mut toks: Vec<Vec<u8>> = Vec::new();
        for _ in 0..600 {
            let len = 1 + rand(7) as usize;
            toks.push((0..len).map(|_| alphabet[rand(13) as usize]).collect());
        }
        let refs: Vec<&[u8]> = toks.iter().map(|t| t.as_slice()).collect();
        let bytes = TokenTrie::build(&vocab(&refs), &ByteClasses::identity().map);
        for round in 0..40 {
            let k = 1 + rand(64);
            let mut map = [0u8; 256];
            for c in map.iter_mut() {
                *c = if round % 2 == 0 && rand(5) == 0 {
                    DROPPED
                } else {
                    rand(k) as u8
                };
            }
            let a = bytes
                .coarsen_by_scan(&map, k as usize, usize::MAX)
                .expect("no bound on the table");
            // past its bound the scan declines, and coarsen groups instead
            assert!(
                bytes
                    .coarsen_by_scan(&map, k as usize, k as usize)
                    .is_none()
                    || a.n_nodes() == 1
            );
            assert_same(&a, &bytes.coarsen_by_groups(&map));
        }
    }

    /// Every array of `a` equal to `b`'s.
    fn assert_same(a: &TokenTrie, b: &TokenTrie) {
        assert_eq!((&a.label, &a.depth, &a.end), (&b.label, &b.depth, &b.end));
        assert_eq!(
            (&a.tok_ptr, &a.tok_ids, &a.by_len, &a.len_ptr),
            (&b.tok_ptr, &b.tok_ids, &b.by_len, &b.len_ptr)
        );
        assert_eq!(
            (a.max_depth, &a.deepest, &a.single),
            (b.max_depth, &b.deepest, &b.single)
        );
    }

    #[test]
    fn a_map_that_only_drops_bytes_copies_the_rest_of_the_byte_trie() {
        let mut rng = Rng(4242);
        let pieces: Vec<&[u8]> = vec![
            b"a", b"b", b"c", b"x", b"y", b"z", b"0", b"1", b"9", b" ", b",", b"\"", b"\xff",
        ];
        let toks = rng.tokens(600, &pieces, 7);
        let refs: Vec<&[u8]> = toks.iter().map(|t| t.as_slice()).collect();
        let bytes = TokenTrie::build(&vocab(&refs), &ByteClasses::identity().map);
        for _ in 0..20 {
            let mut map = ByteClasses::identity().map;
            for c in map.iter_mut() {
                if rng.below(3) == 0 {
                    *c = DROPPED;
                }
            }
            assert_same(&bytes.coarsen(&map), &bytes.coarsen_by_groups(&map)); // the copy, grouped
        }
    }

    #[test]
    fn coarsening_the_byte_trie_builds_the_class_trie() {
        // tokens over a few bytes, duplicates, and maps that merge bytes in different ways
        let mut toks: Vec<Vec<u8>> = vec![b"".to_vec()];
        let mut x: u32 = 12345;
        for _ in 0..400 {
            let mut t = Vec::new();
            loop {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                t.push(b"abcdxyz,\"."[(x >> 16) as usize % 10]);
                if (x >> 8) % 4 == 0 || t.len() > 6 {
                    break;
                }
            }
            toks.push(t);
        }
        let refs: Vec<&[u8]> = toks.iter().map(|t| t.as_slice()).collect();
        let v = vocab(&refs);
        let bytes = TokenTrie::build(&v, &ByteClasses::identity().map);
        let mut maps = vec![[0u8; 256], ByteClasses::identity().map];
        let mut m = [3u8; 256];
        for (i, b) in b"abcdxyz,\"".iter().enumerate() {
            m[usize::from(*b)] = [1, 1, 2, 0, 1, 4, 4, 5, 2][i]; // classes out of byte order too
        }
        maps.push(m);
        for map in maps {
            let want = TokenTrie::build(&v, &map);
            let got = bytes.coarsen(&map);
            assert_eq!(got.label, want.label);
            assert_eq!(got.depth, want.depth);
            assert_eq!(got.end, want.end);
            assert_eq!(got.tok_ptr, want.tok_ptr);
            assert_eq!(got.max_depth, want.max_depth);
            assert_eq!(got.deepest, want.deepest);
            assert_eq!(got.len_ptr, want.len_ptr);
            for i in 0..got.n_nodes() {
                // the same tokens at each node; coarsen lists them by their bytes, not ascending
                let mut g = got.tokens(i).to_vec();
                g.sort_unstable();
                assert_eq!(g, want.tokens(i));
                assert_eq!(got.single[i], want.single[i]);
            }
        }
        // dropped bytes take their tokens out: the class trie of the tokens without them
        m[usize::from(b'x')] = DROPPED;
        m[usize::from(b'.')] = DROPPED;
        let got = bytes.coarsen(&m);
        assert!(got.n_nodes() < bytes.n_nodes());
        let p = paths(&got);
        let mut seen: Vec<(u32, Vec<u8>)> = (0..got.n_nodes())
            .flat_map(|i| {
                got.tokens(i)
                    .iter()
                    .map(|&t| (t, p[i].clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        seen.sort_unstable();
        let want: Vec<(u32, Vec<u8>)> = toks
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, t)| !t.contains(&b'x') && !t.contains(&b'.'))
            .map(|(i, t)| (i as u32, t.iter().map(|&b| m[usize::from(b)]).collect()))
            .collect();
        assert_eq!(seen, want);
        // the subtree depths and the tokens by length, read off the arrays directly
        for trie in [&bytes, &got] {
            for i in 0..trie.n_nodes() {
                let deepest = (i..trie.end[i] as usize)
                    .map(|j| trie.depth[j])
                    .max()
                    .unwrap();
                assert_eq!(trie.deepest[i], deepest);
            }
            for d in 0..=trie.max_depth + 1 {
                let mut want: Vec<u32> = (0..trie.n_nodes())
                    .filter(|&i| trie.depth[i] as usize >= d)
                    .flat_map(|i| trie.tokens(i).iter().copied())
                    .collect();
                let mut got = trie.tokens_from_len(d).to_vec();
                want.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, want, "tokens of {d} classes or more");
            }
        }
    }

    #[test]
    fn a_subset_is_the_trie_of_its_tokens() {
        let toks: Vec<&[u8]> = vec![b"", b"ab", b"abc", b"b", b"ba", b"abd", b"c", b"ab"];
        let v = vocab(&toks);
        let whole = TokenTrie::build(&v, &ByteClasses::identity().map);
        for keep in [|_: u32| true, |t: u32| t % 2 == 0, |t: u32| t == 5] {
            let (sub, node_of) = whole.subset(keep);
            let kept: Vec<Vec<u8>> = (0..toks.len() as u32)
                .filter(|&t| keep(t) && !toks[t as usize].is_empty())
                .map(|t| toks[t as usize].to_vec())
                .collect();
            // the same tokens, at the nodes of their paths
            let mut listed = Vec::new();
            for (i, &j) in node_of.iter().enumerate() {
                let j = j as usize;
                assert_eq!(
                    (sub.label[i], sub.depth[i]),
                    (whole.label[j], whole.depth[j])
                );
                for &t in sub.tokens(i) {
                    assert!(whole.tokens(j).contains(&t));
                    listed.push(toks[t as usize].to_vec());
                }
            }
            let mut want = kept.clone();
            want.sort();
            listed.sort();
            assert_eq!(listed, want);
            assert!(node_of.windows(2).all(|w| w[0] < w[1]), "preorder kept");
        }
    }

    #[test]
    fn every_token_listed_once() {
        let toks: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("{}", i * 7).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = toks.iter().map(|t| t.as_slice()).collect();
        let v = vocab(&refs);
        let trie = TokenTrie::build(&v, &ByteClasses::identity().map);
        let mut all = trie.tok_ids.clone();
        all.sort_unstable();
        assert_eq!(all, (1..300).collect::<Vec<u32>>()); // token 0 is the special EOS
    }

    #[test]
    fn stretches_set_the_tokens_of_their_nodes_sparse_dense_or_read_off_the_last() {
        let mut rng = Rng(0x5eed_7e1e_0001);
        let pieces: [&[u8]; 4] = [b"a", b"b", b"c", b" "];
        // two tries over one vocabulary: a row kept from one is not read on the other
        let toks = rng.tokens(400, &pieces, 5);
        let refs: Vec<&[u8]> = toks.iter().map(|t| t.as_slice()).collect();
        let v = vocab(&refs);
        let tries = [
            TokenTrie::build(&v, &ByteClasses::identity().map),
            TokenTrie::build(&v, &ByteClasses::identity().map).coarsen(&{
                let mut map = [0u8; 256];
                map[usize::from(b'c')] = 1;
                map[usize::from(b' ')] = 2;
                map
            }),
        ];
        let n_words = v.n_words();
        let mut stretches = Stretches::default();
        let mut dense_seen = [false; 2];
        // per trie, the last round's choices: (node, its stretch's end, kept)
        let mut choices: [Vec<(usize, usize, bool)>; 2] = [Vec::new(), Vec::new()];
        for round in 0..400 {
            let which = usize::from(rng.below(4) == 0);
            let trie = &tries[which];
            // a new draw of stretches over ascending nodes, each kept with a chance that makes
            // some rounds keep most tokens (written as the trie's tokens less the rest) and
            // others few; or, most rounds, the last draw on this trie with a few changed
            let chance = 1 + rng.below(9);
            if choices[which].is_empty() || rng.below(3) == 0 {
                choices[which].clear();
                let mut i = 1;
                while i < trie.n_nodes() {
                    let to = if rng.below(2) == 0 {
                        i + 1
                    } else {
                        trie.end[i] as usize
                    };
                    choices[which].push((i, to, rng.below(10) < chance));
                    i = to;
                }
            } else {
                for _ in 0..1 + rng.below(4) {
                    let k = rng.below(choices[which].len());
                    choices[which][k].2 ^= true;
                }
            }
            stretches.clear();
            let before: Vec<u32> = (0..n_words).map(|_| rng.below(1 << 16) as u32).collect();
            let mut want = before.clone();
            let mut kept = 0;
            for &(i, to, keep) in &choices[which] {
                if keep {
                    stretches.keep(i, to);
                    for j in i..to {
                        kept += trie.tokens(j).len();
                        for &t in trie.tokens(j) {
                            want[t as usize >> 5] |= 1 << (t & 31);
                        }
                    }
                }
            }
            dense_seen[usize::from(kept * 2 > trie.tok_ids.len())] = true;
            let mut words = before.clone();
            stretches.write(trie, &mut words);
            assert_eq!(words, want, "round {round}");
        }
        assert_eq!(dense_seen, [true, true]);
        assert!(stretches.read_off > 50, "{} read off", stretches.read_off);
    }
}
