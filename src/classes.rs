//! Byte classes of a dense byte automaton: bytes whose columns of the transition table are equal
//! behave alike in every state, so tokens can be compressed to class sequences (DESIGN §5).
//!
//! Classes are numbered in order of first appearance (byte 0 is class 0), as
//! `grammarmask.automata.DFA.byte_classes` numbers them.

use rustc_hash::FxHashMap as HashMap;

/// A row-major table of `u32` cells, read where it lies: a slice, or the native-order bytes Python
/// hands over ([`NeBytes`]), so a 256-column table is never copied into a `Vec` to be read once.
pub trait Cells {
    /// Number of cells.
    fn n_cells(&self) -> usize;
    /// Cell `i` (`i < n_cells()`).
    fn cell(&self, i: usize) -> u32;

    /// Row `r` of a table `out.len()` cells wide, into `out`.
    fn read_row(&self, r: usize, out: &mut [u32]) {
        let w = out.len();
        for (c, x) in out.iter_mut().enumerate() {
            *x = self.cell(r * w + c);
        }
    }
}

impl Cells for [u32] {
    fn n_cells(&self) -> usize {
        self.len()
    }

    #[inline]
    fn cell(&self, i: usize) -> u32 {
        self[i]
    }

    fn read_row(&self, r: usize, out: &mut [u32]) {
        let w = out.len();
        out.copy_from_slice(&self[r * w..(r + 1) * w]);
    }
}

/// `u32` cells stored as native-order bytes (any alignment; a trailing partial word is ignored).
pub struct NeBytes<'a>(pub &'a [u8]);

impl Cells for NeBytes<'_> {
    fn n_cells(&self) -> usize {
        self.0.len() / 4
    }

    #[inline]
    fn cell(&self, i: usize) -> u32 {
        let b = &self.0[4 * i..4 * i + 4];
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    fn read_row(&self, r: usize, out: &mut [u32]) {
        let w = out.len();
        let bytes = &self.0[4 * r * w..4 * (r + 1) * w];
        for (x, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *x = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
}

/// What is wrong with a table of `accepting.len()` rows of `width` cells whose state 0 must be dead
/// (row of zeros, not accepting) and whose every cell must be a state; None when nothing is. Read
/// a row at a time. (The caller has checked the table's size.)
pub fn dead_row_and_targets<C: Cells + ?Sized>(
    table: &C,
    width: usize,
    accepting: &[bool],
) -> Option<String> {
    let n = accepting.len();
    let mut row = vec![0u32; width];
    for s in 0..n {
        table.read_row(s, &mut row);
        if s == 0 && (row.iter().any(|&t| t != 0) || accepting[0]) {
            return Some("state 0 must be the dead state (row of zeros, not accepting)".to_owned());
        }
        if let Some(&t) = row.iter().find(|&&t| t as usize >= n) {
            return Some(format!("transition to state {t} of {n}"));
        }
    }
    None
}

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
    /// The classes of a `map` of `count` classes numbered by first appearance (already the
    /// coarsest: nothing is checked).
    pub fn of_map(map: [u8; 256], count: usize) -> ByteClasses {
        let mut reps = vec![0u8; count];
        for b in (0..256).rev() {
            reps[usize::from(map[b])] = b as u8;
        }
        ByteClasses { map, count, reps }
    }

    /// The classes of `table` (row-major, `n_states` rows of 256 next states).
    pub fn of_table(table: &[u32], n_states: usize) -> ByteClasses {
        debug_assert_eq!(table.len(), n_states * 256);
        Self::of_classed_table(&Self::identity().map, table, 256)
    }

    /// The classes of the byte table `table[s * width + pre[b]]`: a table already read by a coarser
    /// or equal class map `pre` (values below `width`), whose equal columns are merged here. Exact
    /// whatever `pre` is: two bytes share a class iff every state sends them to the same state.
    pub fn of_classed_table<C: Cells + ?Sized>(
        pre: &[u8; 256],
        table: &C,
        width: usize,
    ) -> ByteClasses {
        debug_assert!(width > 0 && table.n_cells() % width == 0);
        debug_assert!(pre.iter().all(|&c| usize::from(c) < width));
        let rows = table.n_cells() / width;
        // a hash per column, built row by row (cache friendly)
        let mut row = vec![0u32; width];
        let mut hash = vec![0u64; width];
        for r in 0..rows {
            table.read_row(r, &mut row);
            for (h, &x) in hash.iter_mut().zip(&row) {
                *h = h
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(u64::from(x) + 1);
            }
        }
        // classes by hash, numbered by first appearance; then checked row by row: every column
        // equals its class's first (a collision, never seen, takes the exact path below)
        let mut map = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        let mut ids: HashMap<u64, u8> = HashMap::default();
        for b in 0..256usize {
            // at most 256 classes, numbered 0..=255
            map[b] = *ids.entry(hash[usize::from(pre[b])]).or_insert_with(|| {
                reps.push(b as u8);
                (reps.len() - 1) as u8
            });
        }
        let mut rep_col = vec![usize::MAX; width]; // column -> its class's first column
        for b in 0..256usize {
            rep_col[usize::from(pre[b])] = usize::from(pre[usize::from(reps[usize::from(map[b])])]);
        }
        let cols: Vec<(usize, usize)> = (0..width)
            .filter(|&c| rep_col[c] != usize::MAX && rep_col[c] != c)
            .map(|c| (c, rep_col[c]))
            .collect();
        let hashed_right = (0..rows).all(|r| {
            table.read_row(r, &mut row);
            cols.iter().all(|&(c, rc)| row[c] == row[rc])
        });
        if hashed_right {
            return ByteClasses {
                map,
                count: reps.len(),
                reps,
            };
        }
        Self::of_columns_exactly(pre, table, width)
    }

    /// [`ByteClasses::of_classed_table`] by comparing whole columns (column by column: slow on a
    /// large table, so only after a hash collision).
    fn of_columns_exactly<C: Cells + ?Sized>(
        pre: &[u8; 256],
        table: &C,
        width: usize,
    ) -> ByteClasses {
        let rows = table.n_cells() / width;
        let same = |a: usize, b: usize| {
            a == b || (0..rows).all(|r| table.cell(r * width + a) == table.cell(r * width + b))
        };
        let mut map = [0u8; 256];
        let mut reps: Vec<u8> = Vec::new();
        for b in 0..256usize {
            let col = usize::from(pre[b]);
            let found =
                (0..reps.len()).find(|&c| same(usize::from(pre[usize::from(reps[c])]), col));
            map[b] = match found {
                Some(c) => c as u8,
                None => {
                    reps.push(b as u8);
                    (reps.len() - 1) as u8
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
        self.reduce_classed(&Self::identity().map, table, 256)
    }

    /// [`ByteClasses::reduce`] of a table given as in [`ByteClasses::of_classed_table`].
    pub fn reduce_classed<C: Cells + ?Sized>(
        &self,
        pre: &[u8; 256],
        table: &C,
        width: usize,
    ) -> Vec<u32> {
        let cols: Vec<usize> = self
            .reps
            .iter()
            .map(|&b| usize::from(pre[usize::from(b)]))
            .collect();
        let rows = table.n_cells() / width;
        let mut out = Vec::with_capacity(rows * self.count);
        for r in 0..rows {
            out.extend(cols.iter().map(|&c| table.cell(r * width + c)));
        }
        out
    }

    /// Number of bytes in each class.
    pub fn sizes(&self) -> Vec<u16> {
        let mut out = vec![0u16; self.count];
        for &c in &self.map {
            out[usize::from(c)] += 1;
        }
        out
    }

    /// The map for a class trie walked with `table` (by class, `count` columns): this map, with
    /// the bytes every state dies on sent to [`crate::trie::DROPPED`] (no legal token holds one),
    /// and how many bytes are left. Only for fewer than 255 classes (class 255 is then unused).
    pub fn live_map(&self, table: &[u32]) -> ([u8; 256], usize) {
        let mut dead = vec![true; self.count];
        for row in table.chunks_exact(self.count) {
            for (d, &t) in dead.iter_mut().zip(row) {
                *d &= t == 0;
            }
        }
        let mut map = self.map;
        let mut live = 256;
        if self.count < usize::from(crate::trie::DROPPED) {
            for m in map.iter_mut() {
                if dead[usize::from(*m)] {
                    *m = crate::trie::DROPPED;
                    live -= 1;
                }
            }
        }
        (map, live)
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
    use super::{ByteClasses, NeBytes};

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
    fn bytes_every_state_dies_on_are_dropped() {
        // state 1 loops on 'a'..='c' and goes to 2 on 'x'; 2 dies on everything
        let mut table = vec![0u32; 3 * 256];
        for b in b'a'..=b'c' {
            table[256 + usize::from(b)] = 1;
        }
        table[256 + usize::from(b'x')] = 2;
        let cl = ByteClasses::of_table(&table, 3);
        let (map, live) = cl.live_map(&cl.reduce(&table));
        assert_eq!(live, 4);
        assert_eq!(map[usize::from(b'b')], cl.map[usize::from(b'b')]);
        assert_eq!(map[usize::from(b'x')], cl.map[usize::from(b'x')]);
        assert_eq!(map[usize::from(b'z')], crate::trie::DROPPED);
        // the identity (256 classes) drops nothing: class 255 is a byte there
        let id = ByteClasses::identity();
        assert_eq!(id.live_map(&id.reduce(&table)), (id.map, 256));
    }

    #[test]
    fn a_classed_table_is_merged_exactly() {
        // bytes 'a'..='c' loop, 'x' and 'y' die: given finer classes (each byte its own column) the
        // columns merge to the same classes as the dense table's
        let mut dense = vec![0u32; 512];
        for b in b'a'..=b'c' {
            dense[256 + usize::from(b)] = 1;
        }
        let want = ByteClasses::of_table(&dense, 2);
        // a pre-map with 5 columns: 0 the rest, 1 'a', 2 'b', 3 'c', 4 'x' and 'y'
        let mut pre = [0u8; 256];
        for (i, b) in [b'a', b'b', b'c'].iter().enumerate() {
            pre[usize::from(*b)] = i as u8 + 1;
        }
        pre[usize::from(b'x')] = 4;
        pre[usize::from(b'y')] = 4;
        let table = vec![0, 0, 0, 0, 0, 0, 1, 1, 1, 0];
        let got = ByteClasses::of_classed_table(&pre, &table[..], 5);
        assert_eq!(got, want);
        assert_eq!(got.reduce_classed(&pre, &table[..], 5), want.reduce(&dense));
        // the same table as native-order bytes, read in place
        let bytes: Vec<u8> = table.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            ByteClasses::of_classed_table(&pre, &NeBytes(&bytes), 5),
            want
        );
        assert_eq!(
            got.reduce_classed(&pre, &NeBytes(&bytes), 5),
            want.reduce(&dense)
        );
        assert_eq!(got.sizes(), vec![253, 3]);
    }

    #[test]
    fn the_hashed_classes_equal_the_exact_ones() {
        // the path taken after a hash collision gives what the hashed path gives
        let mut rng = crate::test_rng::Rng(99);
        for _ in 0..200 {
            let rows = 1 + rng.below(6);
            let width = 1 + rng.below(12);
            let table: Vec<u32> = (0..rows * width).map(|_| rng.below(3) as u32).collect();
            let mut pre = [0u8; 256];
            for p in pre.iter_mut() {
                *p = rng.below(width) as u8;
            }
            let hashed = ByteClasses::of_classed_table(&pre, &table[..], width);
            assert_eq!(
                hashed,
                ByteClasses::of_columns_exactly(&pre, &table[..], width)
            );
        }
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
