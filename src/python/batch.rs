//! The rows of a batch whose grammars are native CFGs, filled without the GIL by every thread that
//! asks (`grammarmask.fill_masks` hands the job to its caller and to a pool's workers).
//!
//! Why here and not one Python call per row: each row's Python part (the call, a bytes object, a
//! numpy copy that itself lets go of the GIL) made two threads hand the GIL to each other for every
//! row; on a small VM each hand-off waits for the other thread to be woken, and a cold batch of 64
//! rows took as long on two threads as on one (llguidance's, filled in Rust: 0.5-1.0 of one).
//! Here each thread lets go of the GIL once, takes rows from an atomic counter, and writes them
//! straight into the caller's array.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use pyo3::prelude::*;

use super::{
    cfg_error, grammarmask_error, internal_error, panic_message, write_row, PyCfgGrammar,
    PyCfgState,
};
use crate::cfg::{CfgError, State as CfgState};
use crate::vocab::lock;

/// One row: the grammar, the state whose mask it gets, its index in the array, the EOS id to set
/// when the state accepts.
struct Item {
    grammar: Py<PyCfgGrammar>,
    state: Arc<CfgState>,
    row: usize,
    eos: Option<usize>,
}

enum Failure {
    Engine(CfgError),
    Panic(String),
}

#[derive(Default)]
struct Progress {
    /// rows filled (or failed)
    done: usize,
    /// rows that allow no token and do not accept
    dead: Vec<usize>,
    /// the failure of the lowest row that failed
    failed: Option<(usize, Failure)>,
}

/// `RowJob(grammars, states, rows, eos, address, n_rows, n_words)`: fill row `rows[i]` of the
/// C-contiguous uint32 array of `n_rows` x `n_words` at `address` with the mask of `states[i]` in
/// `grammars[i]` (and bit `eos[i]` when it accepts; -1: none).
///
/// The caller keeps that array alive and does not touch those rows until `finish` returned;
/// `rows` ascend (so no two threads write one row). Threads call `run` (rows until none is left)
/// and the owner `finish` (rows, then the wait for every row taken). A thread that calls `run`
/// after the last row was taken writes nothing.
#[pyclass(frozen, name = "RowJob", module = "grammarmask._engine")]
pub struct PyRowJob {
    items: Vec<Item>,
    address: usize,
    n_words: usize,
    next: AtomicUsize,
    progress: Mutex<Progress>,
    finished: Condvar,
}

impl PyRowJob {
    /// Take and fill rows until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = self.items.get(i) else {
                return;
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| self.fill(item)));
            let mut p = lock(&self.progress);
            p.done += 1;
            let failure = match outcome {
                Ok(Ok(true)) => None,
                Ok(Ok(false)) => {
                    p.dead.push(item.row);
                    None
                }
                Ok(Err(e)) => Some(Failure::Engine(e)),
                Err(payload) => Some(Failure::Panic(panic_message(payload.as_ref()))),
            };
            if let Some(f) = failure {
                if p.failed.as_ref().is_none_or(|(row, _)| item.row < *row) {
                    p.failed = Some((item.row, f));
                }
            }
            if p.done == self.items.len() {
                self.finished.notify_all();
            }
        }
    }

    /// Write `item`'s row; whether it allows a token or accepts.
    fn fill(&self, item: &Item) -> std::result::Result<bool, CfgError> {
        let grammar = item.grammar.get();
        let words = match grammar.cached(item.state.key()) {
            Some(words) => words,
            None => grammar.compute(&item.state)?,
        };
        // SAFETY: the constructor checked that `item.row < n_rows` and that rows ascend, so this
        // row lies inside the caller's array and no other thread writes it; the caller keeps the
        // array alive until `finish` returned, and no row is taken after that.
        let row = unsafe {
            std::slice::from_raw_parts_mut(
                (self.address as *mut u32).add(item.row * self.n_words),
                self.n_words,
            )
        };
        Ok(write_row(row, &words, &item.state, item.eos))
    }
}

#[pymethods]
impl PyRowJob {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        grammars: Vec<Bound<'_, PyCfgGrammar>>,
        states: Vec<Bound<'_, PyCfgState>>,
        rows: Vec<usize>,
        eos: Vec<i64>,
        address: usize,
        n_rows: usize,
        n_words: usize,
    ) -> PyResult<Self> {
        let bad = |m: String| Err(grammarmask_error(py, "GrammarError", m));
        if grammars.len() != states.len() || rows.len() != states.len() || eos.len() != rows.len() {
            return bad(format!(
                "RowJob: {} grammars, {} states, {} rows and {} EOS ids",
                grammars.len(),
                states.len(),
                rows.len(),
                eos.len()
            ));
        }
        if address == 0 || address % std::mem::align_of::<u32>() != 0 {
            return bad(format!(
                "RowJob: {address:#x} is not the address of a uint32 array"
            ));
        }
        let mut items = Vec::with_capacity(rows.len());
        for (i, ((g, s), (&row, &e))) in grammars
            .iter()
            .zip(&states)
            .zip(rows.iter().zip(&eos))
            .enumerate()
        {
            let grammar = g.get();
            let state = Arc::clone(&s.get().inner);
            if !grammar.inner.owns(&state) {
                return bad(format!(
                    "RowJob: state {i} belongs to another compiled grammar"
                ));
            }
            if grammar.inner.n_words() != n_words {
                return bad(format!(
                    "RowJob: grammar {i} needs {} words per row, the array has {n_words}",
                    grammar.inner.n_words()
                ));
            }
            if row >= n_rows || (i > 0 && row <= rows[i - 1]) {
                return bad(format!(
                    "RowJob: rows must ascend below {n_rows}, got {row} at {i}"
                ));
            }
            let eos = match usize::try_from(e) {
                Ok(e) if e < 32 * n_words => Some(e),
                Ok(_) => return bad(format!("RowJob: EOS id {e} is outside the row")),
                Err(_) => None,
            };
            items.push(Item {
                grammar: g.clone().unbind(),
                state,
                row,
                eos,
            });
        }
        Ok(PyRowJob {
            items,
            address,
            n_words,
            next: AtomicUsize::new(0),
            progress: Mutex::new(Progress::default()),
            finished: Condvar::new(),
        })
    }

    /// Rows whose mask is not held yet (first visits: the work threads can share).
    #[getter]
    fn pending(&self) -> usize {
        self.items
            .iter()
            .filter(|it| {
                lock(&it.grammar.get().packed)
                    .peek(it.state.key())
                    .is_none()
            })
            .count()
    }

    /// Fill rows, without the GIL, until none is left to take (a pool worker's share).
    fn run(&self, py: Python<'_>) {
        py.detach(|| self.work());
    }

    /// Fill rows until none is left, then wait for the rows other threads took: the rows that
    /// allow no token and do not accept, ascending. Raises the engine error of the lowest row that
    /// failed (`BudgetExceeded`, `GrammarError`), or a `GrammarMaskError` for a bug.
    fn finish(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        let (dead, failed) = py.detach(|| {
            self.work();
            let mut p = lock(&self.progress);
            while p.done < self.items.len() {
                p = self
                    .finished
                    .wait(p)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            let mut dead = std::mem::take(&mut p.dead);
            dead.sort_unstable();
            (dead, p.failed.take())
        });
        match failed {
            None => Ok(dead),
            Some((_, Failure::Engine(e))) => Err(cfg_error(py, e)),
            Some((_, Failure::Panic(message))) => Err(internal_error(py, &message)),
        }
    }
}
