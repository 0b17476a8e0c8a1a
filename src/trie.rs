//! The token trie: every normal token's byte string (or byte-class string) as a prefix tree in flat
//! arrays, nodes in depth-first preorder so a walk is one forward scan that skips a dead subtree
//! with one jump (llguidance's toktrie does the same).
//!
//! Built under a byte -> class map: the identity map gives the byte trie; an automaton's
//! byte classes merge tokens with the same class sequence into one node (DESIGN §5).

use crate::vocab::Vocab;

/// A prefix tree in preorder. Node 0 is the root (the empty string).
///
/// For node `i`: `label[i]` is the class on the edge into it, `depth[i]` its length, nodes
/// `i + 1 .. end[i]` its subtree, and `tok_ids[tok_ptr[i] .. tok_ptr[i + 1]]` the tokens whose
/// class sequence is exactly its path.
#[derive(Debug, Clone)]
pub struct TokenTrie {
    pub label: Vec<u8>,
    pub depth: Vec<u32>,
    pub end: Vec<u32>,
    pub tok_ptr: Vec<u32>,
    pub tok_ids: Vec<u32>,
    /// The longest token, in bytes (the deepest node).
    pub max_depth: usize,
}

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
            label: Vec::new(),
            depth: Vec::new(),
            end: Vec::new(),
            tok_ptr: vec![0],
            tok_ids: Vec::with_capacity(ids.len()),
            max_depth: 0,
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
        // end[i]: the first node after i (in preorder) that is no deeper than i
        let n = trie.label.len();
        trie.end = vec![n as u32; n];
        let mut open: Vec<usize> = Vec::new();
        for i in 0..n {
            while let Some(&top) = open.last() {
                if trie.depth[top] >= trie.depth[i] {
                    trie.end[top] = i as u32;
                    open.pop();
                } else {
                    break;
                }
            }
            open.push(i);
        }
        trie
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
}

#[cfg(test)]
mod tests {
    use super::TokenTrie;
    use crate::classes::ByteClasses;
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
}
