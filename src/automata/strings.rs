//! The minimal DFA of a finite set of byte strings: a trie whose equal suffixes are merged in one
//! pass from the last node back (children are made after their parents), as
//! `grammarmask.automata.ops._small_trie_dfa` builds it and numbered as it numbers it (dead state
//! 0, then the merged classes in reverse order of making: the start is state 1). Linear in the
//! total length of the strings, for any number of them. And the minimal DFA of a chain of such
//! sets ([`chain`]: a case-insensitive keyword).

use super::minimize::minimize_reduced;
use super::Dfa;
use crate::classes::ByteClasses;
use crate::error::{Error, Result};
use rustc_hash::{FxHashMap as HashMap, FxHasher};
use std::hash::Hasher;

/// A trie in flat arrays (no allocation per node): node 1 is the root, node 0 stands for none.
struct Trie {
    first: Vec<u32>,
    last: Vec<u32>,
    /// The node's next sibling: children are linked in the order made (increasing byte).
    next: Vec<u32>,
    /// The byte of the edge into the node.
    label: Vec<u8>,
    fin: Vec<bool>,
}

impl Trie {
    fn of<S: AsRef<[u8]>>(strings: &[S]) -> Trie {
        let cap = 2 + strings.iter().map(|s| s.as_ref().len()).sum::<usize>();
        let mut t = Trie {
            first: Vec::with_capacity(cap),
            last: Vec::with_capacity(cap),
            next: Vec::with_capacity(cap),
            label: Vec::with_capacity(cap),
            fin: Vec::with_capacity(cap),
        };
        t.push(0);
        t.push(0);
        for s in strings {
            let mut node = 1usize;
            for &b in s.as_ref() {
                // the strings are sorted: a child that exists is the last one made
                let l = t.last[node] as usize;
                node = if l != 0 && t.label[l] == b {
                    l
                } else {
                    let c = t.push(b);
                    if l == 0 {
                        t.first[node] = c as u32;
                    } else {
                        t.next[l] = c as u32;
                    }
                    t.last[node] = c as u32;
                    c
                };
            }
            t.fin[node] = true;
        }
        t
    }

    fn push(&mut self, label: u8) -> usize {
        self.first.push(0);
        self.last.push(0);
        self.next.push(0);
        self.label.push(label);
        self.fin.push(false);
        self.first.len() - 1
    }

    /// The children of `node`: `(byte, child)` in increasing byte order.
    fn children(&self, node: usize) -> impl Iterator<Item = (u8, usize)> + '_ {
        std::iter::successors(Some(self.first[node] as usize).filter(|&c| c != 0), |&c| {
            Some(self.next[c] as usize).filter(|&c| c != 0)
        })
        .map(|c| (self.label[c], c))
    }
}

/// The minimal DFA of `strings` (sorted and distinct; the empty list gives the empty language).
pub fn from_strings<S: AsRef<[u8]>>(strings: &[S]) -> Dfa {
    if strings.is_empty() {
        return Dfa::empty();
    }
    let trie = Trie::of(strings);
    // one reverse pass: a node's class is its (final, [(byte, child's class)]) signature, found
    // by its hash among the classes made (a chain of those of equal hash)
    let n_nodes = trie.first.len();
    let mut rep = vec![0u32; n_nodes];
    let mut kept: Vec<usize> = Vec::new(); // a node per class; class c is kept[c - 1]
    let mut newest: HashMap<u64, u32> = HashMap::default(); // hash -> the last class made with it
    let mut older: Vec<u32> = Vec::new(); // class c -> an earlier class of its hash (0: none)
    let same = |rep: &[u32], i: usize, j: usize| {
        trie.fin[i] == trie.fin[j]
            && trie
                .children(i)
                .map(|(b, c)| (b, rep[c]))
                .eq(trie.children(j).map(|(b, c)| (b, rep[c])))
    };
    for i in (1..n_nodes).rev() {
        let mut h = FxHasher::default();
        h.write_u8(u8::from(trie.fin[i]));
        for (b, c) in trie.children(i) {
            h.write_u8(b);
            h.write_u32(rep[c]);
        }
        let h = h.finish();
        let mut c = newest.get(&h).copied().unwrap_or(0);
        while c != 0 && !same(&rep, kept[c as usize - 1], i) {
            c = older[c as usize - 1];
        }
        if c == 0 {
            kept.push(i);
            c = kept.len() as u32;
            older.push(newest.insert(h, c).unwrap_or(0));
        }
        rep[i] = c;
    }
    // rows: class c is row n - c (the root's class, made last, is row 1)
    let n = kept.len() + 1;
    let row = |c: u32| if c == 0 { 0 } else { (n - c as usize) as u32 };
    let mut accepting = vec![false; n];
    // the edges by byte (a counting sort), each byte's in increasing row order: rows increase as
    // the classes are read from the last made back
    let mut first = [0usize; 257]; // byte b's edges are edges[first[b]..first[b + 1]]
    for &node in &kept {
        for (b, _) in trie.children(node) {
            first[usize::from(b) + 1] += 1;
        }
    }
    for b in 0..256 {
        first[b + 1] += first[b];
    }
    let mut at = first;
    let mut edges = vec![(0u32, 0u32); first[256]]; // (from row, to row)
    for (i, &node) in kept.iter().enumerate().rev() {
        let r = row(i as u32 + 1);
        for (b, t) in trie.children(node) {
            edges[at[usize::from(b)]] = (r, row(rep[t]));
            at[usize::from(b)] += 1;
        }
        accepting[r as usize] = trie.fin[node];
    }
    // the table is made over the byte classes, read off the edges ([`classed_table`])
    let (table, map, k) = classed_table(n, &edges, &first);
    Dfa {
        table,
        k,
        map,
        accepting,
        start: row(rep[1]),
    }
}

/// The minimal DFA of the strings made of one spelling of each position in turn, `positions[p]`
/// the byte strings that may stand at position `p` (prefix-free: the UTF-8 spellings of a
/// letter's case-insensitive set, so `(?i:select)` is six positions). States are made in the
/// order `grammarmask.automata.regex._caseless_word` made them (dead 0, start 1, then per position
/// the state after it and those inside its multibyte spellings), the table over its byte classes
/// from the start; minimised over those classes, which keeps that numbering when the chain is
/// minimal as built (it is for case sets). A keyword took ~45 us through a dense table of 256
/// columns built in Python and minimised in Rust, most of it passes over the 256 columns.
pub fn chain<S: AsRef<[u8]>>(positions: &[Vec<S>]) -> Result<(Dfa, ByteClasses)> {
    let mut edges: Vec<(u8, u32, u32)> = Vec::new(); // (byte, from, to)
    let find = |edges: &[(u8, u32, u32)], s: u32, b: u8| {
        edges.iter().find(|e| e.0 == b && e.1 == s).map(|e| e.2)
    };
    let (mut n, mut at) = (1u32, 1u32);
    for (p, spellings) in positions.iter().enumerate() {
        n += 1;
        let next = n;
        for spelling in spellings {
            let prefix_free = || {
                Error::new(format!(
                    "dfa_chain: position {p}'s spellings are empty or not prefix-free"
                ))
            };
            let Some((&last, lead)) = spelling.as_ref().split_last() else {
                return Err(prefix_free());
            };
            let mut s = at;
            for &b in lead {
                s = match find(&edges, s, b) {
                    Some(t) if t == next => return Err(prefix_free()),
                    Some(t) => t,
                    None => {
                        n += 1;
                        edges.push((b, s, n));
                        n
                    }
                };
            }
            if find(&edges, s, last).is_some() {
                return Err(prefix_free());
            }
            edges.push((last, s, next));
        }
        at = next;
    }
    let n_states = n as usize + 1;
    edges.sort_unstable();
    let mut first = [0usize; 257];
    for &(b, _, _) in &edges {
        first[usize::from(b) + 1] += 1;
    }
    for b in 0..256 {
        first[b + 1] += first[b];
    }
    let pairs: Vec<(u32, u32)> = edges.iter().map(|&(_, f, t)| (f, t)).collect();
    let (table, map, k) = classed_table(n_states, &pairs, &first);
    let mut accepting = vec![false; n_states];
    accepting[at as usize] = true;
    Ok(minimize_reduced(&table, k, &map, &accepting, 1))
}

/// The table of `n` states over the coarsest byte classes of the edges `(from, to)` on byte `b`,
/// `edges[first[b]..first[b + 1]]` in increasing `from` order ([`edge_classes`]): a table of 256
/// columns, and classes found by reading it, cost ~1 us per state (with the flat trie, a 23-byte
/// JSON key's `dfa_from_strings` went from 20 to 5.6 us, 200 bytes from 235 to 21 us). Returns the
/// table, the byte -> class map and the number of classes.
fn classed_table(
    n: usize,
    edges: &[(u32, u32)],
    first: &[usize; 257],
) -> (Vec<u32>, [u8; 256], usize) {
    let (map, k) = edge_classes(edges, first);
    let mut table = vec![0u32; n * k];
    for b in 0..256 {
        let c = usize::from(map[b]);
        for &(r, t) in &edges[first[b]..first[b + 1]] {
            table[r as usize * k + c] = t;
        }
    }
    (table, map, k)
}

/// The coarsest byte classes of a DFA whose edges `(from, to)` on byte `b` are
/// `edges[first[b]..first[b + 1]]` in increasing `from` order (the dead state's left out),
/// numbered by first appearance: bytes share a class iff they have the same edges. Returns the
/// byte -> class map and the number of classes.
fn edge_classes(edges: &[(u32, u32)], first: &[usize; 257]) -> ([u8; 256], usize) {
    let of = |b: usize| &edges[first[b]..first[b + 1]];
    let mut map = [0u8; 256];
    let mut reps: Vec<usize> = Vec::new(); // each class's first byte
    for (b, class) in map.iter_mut().enumerate() {
        // few classes (those of the bytes used, and one for the rest): a scan of them
        *class = match reps.iter().position(|&r| of(r) == of(b)) {
            Some(c) => c as u8,
            None => {
                reps.push(b);
                (reps.len() - 1) as u8
            }
        };
    }
    (map, reps.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::ByteClasses;

    fn accepts(d: &Dfa, w: &[u8]) -> bool {
        let mut s = d.start as usize;
        for &b in w {
            s = d.next(s as u32, b) as usize;
        }
        d.accepting[s]
    }

    #[test]
    fn a_chain_spells_one_string_of_each_position_in_turn() {
        // "ks" caseless: k, K and the Kelvin sign (three bytes); s, S and the long s (two)
        let k: Vec<&[u8]> = vec![b"K", b"k", "\u{212a}".as_bytes()];
        let s: Vec<&[u8]> = vec![b"S", b"s", "\u{17f}".as_bytes()];
        let (d, classes) = chain(&[k.clone(), s.clone()]).unwrap();
        // dead, start, after k, two inside the Kelvin sign, after s, one inside the long s
        assert_eq!(d.n_states(), 7);
        assert_eq!(classes.count, d.k);
        for a in &k {
            for b in &s {
                let w = [*a, *b].concat();
                assert!(accepts(&d, &w));
                assert!(!accepts(&d, &w[..w.len() - 1]));
                assert!(!accepts(&d, &[w.as_slice(), b"s"].concat()));
            }
        }
        // (spellings that share a state's future are merged: the chain is minimised)
        let (d, _) = chain(&[vec!["\u{e9}".as_bytes(), "\u{129}".as_bytes()]]).unwrap();
        assert_eq!(d.n_states(), 4);
        assert!(chain(&[vec![&b"a"[..], &b"ab"[..]]]).is_err());
        assert!(chain(&[vec![&b""[..]]]).is_err());
    }

    #[test]
    fn shared_suffixes_share_states() {
        let words: Vec<Vec<u8>> = ["cat", "cats", "hat", "hats"]
            .iter()
            .map(|w| w.as_bytes().to_vec())
            .collect();
        let d = from_strings(&words);
        // start, {c,h} -> "at", "t", final "s"-able, after "s": 5 live states + dead
        assert_eq!(d.n_states(), 6);
        assert_eq!(d.start, 1);
        for w in &words {
            assert!(accepts(&d, w));
        }
        for w in ["ca", "catss", "", "bat"] {
            assert!(!accepts(&d, w.as_bytes()), "{w}");
        }
    }

    #[test]
    fn the_classes_read_off_the_edges_are_the_tables_and_write_it() {
        let mut rng = crate::test_rng::Rng(0x5eed_5eed);
        for round in 0..200 {
            let pieces: &[&[u8]] = &[b"a", b"b", b"\x00", b"\xff", b"ab", b"z"];
            let words = rng.tokens(1 + round % 17, pieces, 4);
            let d = from_strings(&words);
            let dense = d.to_dense();
            let want = ByteClasses::of_table(&dense.table, dense.n_states());
            assert_eq!((d.map, d.k), (want.map, want.count), "{words:?}");
            let mut written = vec![7u8; d.n_states() * 1024];
            d.write_dense(&mut written);
            let cells: Vec<u32> = written
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(cells, dense.table);
            for w in &words {
                assert!(accepts(&d, w));
            }
        }
    }

    #[test]
    fn the_empty_string_and_the_empty_set() {
        let d = from_strings(&[Vec::new(), b"a".to_vec()]);
        assert!(accepts(&d, b"") && accepts(&d, b"a") && !accepts(&d, b"aa"));
        assert_eq!(from_strings::<Vec<u8>>(&[]), Dfa::empty());
    }
}
