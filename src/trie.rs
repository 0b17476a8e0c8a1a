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
    pub fn build(vocab: &Vocab, map: &[u8; 256]) -> TokenTrie {
        let mapped: Vec<u8> = vocab
            .flat_bytes()
            .iter()
            .map(|&b| map[usize::from(b)])
            .collect();
        let seq = |t: u32| &mapped[vocab.span(t as usize)];
        let mut ids: Vec<u32> = vocab.normal_ids().collect();
        ids.sort_by(|&a, &b| seq(a).cmp(seq(b)).then(a.cmp(&b)));

        let mut trie = TokenTrie {
            label: vec![0],
            depth: vec![0],
            end: vec![0],
            tok_ptr: Vec::new(),
            tok_ids: Vec::with_capacity(ids.len()),
            max_depth: 0,
        };
        let mut counts: Vec<u32> = vec![0];
        let mut path: Vec<u32> = vec![0]; // path[d]: the node of depth d on the current path
        let mut prev: &[u8] = &[];
        // In sorted order a node's tokens are adjacent, and come before the tokens below it, so
        // nodes are created in preorder and tokens land grouped by node in node order.
        for &t in &ids {
            let s = seq(t);
            let lcp = prev.iter().zip(s).take_while(|(a, b)| a == b).count();
            while path.len() > lcp + 1 {
                if let Some(n) = path.pop() {
                    trie.end[n as usize] = trie.label.len() as u32;
                }
            }
            for (d, &c) in s.iter().enumerate().skip(lcp) {
                path.push(trie.label.len() as u32);
                trie.label.push(c);
                trie.depth.push(d as u32 + 1);
                trie.end.push(0);
                counts.push(0);
            }
            counts[path[s.len()] as usize] += 1;
            trie.tok_ids.push(t);
            trie.max_depth = trie.max_depth.max(s.len());
            prev = s;
        }
        let n = trie.label.len() as u32;
        for node in path {
            trie.end[node as usize] = n;
        }
        trie.tok_ptr.reserve(counts.len() + 1);
        trie.tok_ptr.push(0);
        let mut acc = 0u32;
        for c in counts {
            acc += c;
            trie.tok_ptr.push(acc);
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
