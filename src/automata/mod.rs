//! Byte DFAs built at compile time: trimming and minimisation ([`minimize`]), products
//! ([`product`]), finite string sets ([`strings`]) and the subset construction ([`subset`]). These are the hot loops of
//! `grammarmask.automata` (`dfa.minimize`, `ops.product`/`union`/`difference`, `ops.from_strings`,
//! `nfa.determinize`);
//! the Python functions stay as their specification, and each result here equals theirs state for
//! state (same numbering), so either may fill the process-wide cache of automata.
//!
//! A DFA is a dense table of `n * 256` next states, state 0 dead (its row all zeros, not
//! accepting), as `grammarmask.automata.DFA` holds it.

pub mod compose;
pub mod minimize;
pub mod product;
pub mod strings;
pub mod subset;

use crate::classes::{dead_row_and_targets, ByteClasses, Cells};
use crate::error::{Error, Result};

/// A byte DFA read by byte class: `table[s * k + map[b]]` is the state after byte `b` in state
/// `s`; state 0 is dead. (The classes need not be the coarsest: a dense table has 256.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dfa {
    /// Row-major next states, `k` per state.
    pub table: Vec<u32>,
    /// Columns per state.
    pub k: usize,
    /// The column of each byte.
    pub map: [u8; 256],
    /// Whether each state is final.
    pub accepting: Vec<bool>,
    /// The initial state (0: the empty language).
    pub start: u32,
}

impl Dfa {
    /// A DFA with a column per byte.
    pub fn dense(table: Vec<u32>, accepting: Vec<bool>, start: u32) -> Dfa {
        Dfa {
            table,
            k: 256,
            map: ByteClasses::identity().map,
            accepting,
            start,
        }
    }

    /// The DFA of the empty language: the dead state alone.
    pub fn empty() -> Dfa {
        Dfa::dense(vec![0; 256], vec![false], 0)
    }

    /// Number of states, the dead one included.
    pub fn n_states(&self) -> usize {
        self.accepting.len()
    }

    /// The state after byte `b` in state `s`.
    pub fn next(&self, s: u32, b: u8) -> u32 {
        self.table[s as usize * self.k + usize::from(self.map[usize::from(b)])]
    }

    /// The dense table (`n * 256` cells) written into `out` as native-order int32 bytes.
    pub fn write_dense(&self, out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.n_states() * 1024);
        // each class's bytes together (a counting sort of the bytes by class), so a row costs its
        // live cells, not 256 gathers (a string set's rows have one or two)
        let mut at = vec![0usize; self.k + 1];
        for &c in &self.map {
            at[usize::from(c) + 1] += 1;
        }
        for c in 0..self.k {
            at[c + 1] += at[c];
        }
        let mut bytes = [0u8; 256];
        let mut fill = at.clone();
        for (b, &c) in self.map.iter().enumerate() {
            bytes[fill[usize::from(c)]] = b as u8;
            fill[usize::from(c)] += 1;
        }
        out.fill(0);
        for (row, src) in out
            .chunks_exact_mut(1024)
            .zip(self.table.chunks_exact(self.k))
        {
            for (c, &t) in src.iter().enumerate() {
                if t != 0 {
                    for &b in &bytes[at[c]..at[c + 1]] {
                        let i = 4 * usize::from(b);
                        row[i..i + 4].copy_from_slice(&t.to_ne_bytes());
                    }
                }
            }
        }
    }

    /// The same DFA with a column per byte.
    pub fn to_dense(&self) -> Dfa {
        let mut table = Vec::with_capacity(self.n_states() * 256);
        for s in 0..self.n_states() {
            let row = &self.table[s * self.k..(s + 1) * self.k];
            table.extend(self.map.iter().map(|&c| row[usize::from(c)]));
        }
        Dfa::dense(table, self.accepting.clone(), self.start)
    }

    /// The byte classes of the table (coarsest, numbered by first appearance).
    pub fn classes(&self) -> ByteClasses {
        ByteClasses::of_classed_table(&self.map, &self.table[..], self.k)
    }
}

/// Check a table handed over from Python: `n * 256` cells, every target a state, row 0 dead,
/// `start` a state. `what` names the table in the error.
pub fn check<C: Cells + ?Sized>(
    table: &C,
    accepting: &[bool],
    start: usize,
    what: &str,
) -> Result<()> {
    let n = accepting.len();
    if n == 0 || table.n_cells() != n * 256 {
        return Err(Error::new(format!(
            "{what}: {} cells is not 256 per state for {n} states",
            table.n_cells()
        )));
    }
    if let Some(problem) = dead_row_and_targets(table, 256, accepting) {
        return Err(Error::new(format!("{what}: {problem}")));
    }
    if start >= n {
        return Err(Error::new(format!(
            "{what}: start state {start} out of range"
        )));
    }
    Ok(())
}
