//! The minimal DFA of a finite set of byte strings: a trie whose equal suffixes are merged in one
//! pass from the last node back (children are made after their parents), as
//! `grammarmask.automata.ops._small_trie_dfa` builds it and numbered as it numbers it (dead state
//! 0, then the merged classes in reverse order of making: the start is state 1). Linear in the
//! total length of the strings, for any number of them.

use super::Dfa;
use rustc_hash::FxHashMap as HashMap;

/// The minimal DFA of `strings` (sorted and distinct; the empty list gives the empty language).
pub fn from_strings(strings: &[Vec<u8>]) -> Dfa {
    if strings.is_empty() {
        return Dfa::empty();
    }
    // the trie: node 1 is the root; children in the order they were made (increasing byte)
    let mut children: Vec<Vec<(u8, u32)>> = vec![Vec::new(), Vec::new()];
    let mut last_child: Vec<Option<(u8, u32)>> = vec![None, None];
    let mut fin = vec![false, false];
    for s in strings {
        let mut node = 1usize;
        for &b in s {
            // the strings are sorted: a child that exists is the last one made
            node = match last_child[node] {
                Some((lb, t)) if lb == b => t as usize,
                _ => {
                    let t = children.len() as u32;
                    children[node].push((b, t));
                    last_child[node] = Some((b, t));
                    children.push(Vec::new());
                    last_child.push(None);
                    fin.push(false);
                    t as usize
                }
            };
        }
        fin[node] = true;
    }
    // one reverse pass: a node's class is its (final, [(byte, child's class)]) signature
    let n_nodes = children.len();
    let mut rep = vec![0u32; n_nodes];
    let mut classes: HashMap<(bool, Vec<(u8, u32)>), u32> = HashMap::default();
    let mut kept: Vec<usize> = Vec::new(); // a node per class; class c is kept[c - 1]
    for i in (1..n_nodes).rev() {
        let key = (
            fin[i],
            children[i]
                .iter()
                .map(|&(b, t)| (b, rep[t as usize]))
                .collect(),
        );
        let next = kept.len() as u32 + 1;
        let r = *classes.entry(key).or_insert(next);
        if r == next {
            kept.push(i);
        }
        rep[i] = r;
    }
    // rows: class c is row n - c (the root's class, made last, is row 1)
    let n = kept.len() + 1;
    let row = |c: u32| if c == 0 { 0 } else { (n - c as usize) as u32 };
    let mut table = vec![0u32; n * 256];
    let mut accepting = vec![false; n];
    for (i, &node) in kept.iter().enumerate() {
        let r = row(i as u32 + 1) as usize;
        for &(b, t) in &children[node] {
            table[r * 256 + usize::from(b)] = row(rep[t as usize]);
        }
        accepting[r] = fin[node];
    }
    Dfa::dense(table, accepting, row(rep[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(d: &Dfa, w: &[u8]) -> bool {
        let mut s = d.start as usize;
        for &b in w {
            s = d.next(s as u32, b) as usize;
        }
        d.accepting[s]
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
    fn the_empty_string_and_the_empty_set() {
        let d = from_strings(&[Vec::new(), b"a".to_vec()]);
        assert!(accepts(&d, b"") && accepts(&d, b"a") && !accepts(&d, b"aa"));
        assert_eq!(from_strings(&[]), Dfa::empty());
    }
}
