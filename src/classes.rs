//! Byte classes of a dense byte automaton: bytes whose columns of the transition table are equal
//! behave alike in every state, so tokens can be compressed to class sequences (DESIGN §5).
//!
//! Classes are numbered in order of first appearance (byte 0 is class 0), as
//! `grammarmask.automata.DFA.byte_classes` numbers them.

use std::collections::HashMap;

/// The byte -> class map of a table, the number of classes, and each class's first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteClasses {
    /// `map[b]` is byte `b`'s class.
    pub map: [u8; 256],
    /// The number of classes (1 to 256).
    pub count: usize,
    /// `reps[c]` is the smallest byte of class `c`.
    pub reps: Vec<u8>,
}

impl ByteClasses {
    /// The classes of `table` (row-major, `n_states` rows of 256 next states).
    pub fn of_table(table: &[u32], n_states: usize) -> ByteClasses {
        debug_assert_eq!(table.len(), n_states * 256);
        // a hash per column, built row by row (cache friendly), then exact checks per group
        let mut hash = [0u64; 256];
        for row in table.chunks_exact(256) {
            for (h, &t) in hash.iter_mut().zip(row) {
                *h = h
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(u64::from(t) + 1);
            }
        }
        let same = |a: usize, b: usize| table.chunks_exact(256).all(|row| row[a] == row[b]);
        let mut map = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        let mut groups: HashMap<u64, Vec<u8>> = HashMap::new(); // hash -> classes with that hash
        for b in 0..256usize {
            let group = groups.entry(hash[b]).or_default();
            let found = group
                .iter()
                .copied()
                .find(|&c| same(usize::from(reps[usize::from(c)]), b));
            map[b] = match found {
                Some(c) => c,
                None => {
                    // at most 256 classes, numbered 0..=255
                    let c = reps.len() as u8;
                    reps.push(b as u8);
                    group.push(c);
                    c
                }
            };
        }
        ByteClasses {
            map,
            count: reps.len(),
            reps,
        }
    }

    /// The table read by class: `out[s * count + c]` is the state after class `c` from `s`.
    pub fn reduce(&self, table: &[u32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(table.len() / 256 * self.count);
        for row in table.chunks_exact(256) {
            out.extend(self.reps.iter().map(|&b| row[usize::from(b)]));
        }
        out
    }

    /// The identity map (every byte its own class): the plain byte trie.
    pub fn identity() -> ByteClasses {
        let mut map = [0u8; 256];
        for (b, m) in map.iter_mut().enumerate() {
            *m = b as u8;
        }
        ByteClasses {
            map,
            count: 256,
            reps: (0..=255).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ByteClasses;

    #[test]
    fn classes_in_order_of_first_appearance() {
        // 2 states: dead, and one that loops on 'a'..='c' and dies elsewhere
        let mut table = vec![0u32; 512];
        for b in b'a'..=b'c' {
            table[256 + usize::from(b)] = 1;
        }
        let cl = ByteClasses::of_table(&table, 2);
        assert_eq!(cl.count, 2);
        assert_eq!(cl.map[0], 0);
        assert_eq!(cl.map[usize::from(b'b')], 1);
        assert_eq!(cl.map[usize::from(b'z')], 0);
        assert_eq!(cl.reps, vec![0, b'a']);
        assert_eq!(cl.reduce(&table), vec![0, 0, 0, 1]);
    }

    #[test]
    fn all_bytes_distinct() {
        let mut table = vec![0u32; 257 * 256];
        for b in 0..256 {
            table[256 + b] = b as u32 + 1;
        }
        let cl = ByteClasses::of_table(&table, 257);
        assert_eq!(cl.count, 256);
        assert_eq!(cl, ByteClasses::identity());
    }
}
