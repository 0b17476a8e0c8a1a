//! Byte DFAs built at compile time: trimming and minimisation ([`minimize`]), products
//! ([`product`]) and finite string sets ([`strings`]). These are the hot loops of
//! `grammarmask.automata` (`dfa.minimize`, `ops.product`/`union`/`difference`, `ops.from_strings`);
//! the Python functions stay as their specification, and each result here equals theirs state for
//! state (same numbering), so either may fill the process-wide cache of automata.
//!
//! A DFA is a dense table of `n * 256` next states, state 0 dead (its row all zeros, not
//! accepting), as `grammarmask.automata.DFA` holds it.

pub mod minimize;
pub mod product;
pub mod strings;

use crate::classes::{ByteClasses, Cells};
use crate::error::{Error, Result};

/// A byte DFA: `table[s * 256 + b]` is the state after byte `b` in state `s`; state 0 is dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dfa {
    /// Row-major next states, 256 per state.
    pub table: Vec<u32>,
    /// Whether each state is final.
    pub accepting: Vec<bool>,
    /// The initial state (0: the empty language).
    pub start: u32,
}

impl Dfa {
    /// The DFA of the empty language: the dead state alone.
    pub fn empty() -> Dfa {
        Dfa {
            table: vec![0; 256],
            accepting: vec![false],
            start: 0,
        }
    }

    /// Number of states, the dead one included.
    pub fn n_states(&self) -> usize {
        self.accepting.len()
    }

    /// The DFA of a table read by class (`red[s * k + c]`, `map[b]` the class of byte `b`).
    pub fn expand(red: &[u32], k: usize, map: &[u8; 256], accepting: Vec<bool>, start: u32) -> Dfa {
        let n = accepting.len();
        let mut table = vec![0u32; n * 256];
        for (s, row) in table.chunks_exact_mut(256).enumerate() {
            let src = &red[s * k..(s + 1) * k];
            for (b, cell) in row.iter_mut().enumerate() {
                *cell = src[usize::from(map[b])];
            }
        }
        Dfa {
            table,
            accepting,
            start,
        }
    }

    /// The byte classes of the table.
    pub fn classes(&self) -> ByteClasses {
        ByteClasses::of_table(&self.table, self.n_states())
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
    if (0..256).any(|b| table.cell(b) != 0) || accepting[0] {
        return Err(Error::new(format!(
            "{what}: state 0 must be the dead state (row of zeros, not accepting)"
        )));
    }
    if let Some(i) = (0..table.n_cells()).find(|&i| table.cell(i) as usize >= n) {
        return Err(Error::new(format!(
            "{what}: state {} goes to {}, past the last state {}",
            i / 256,
            table.cell(i),
            n - 1
        )));
    }
    if start >= n {
        return Err(Error::new(format!(
            "{what}: start state {start} out of range"
        )));
    }
    Ok(())
}
