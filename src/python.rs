//! The Python bindings (`grammarmask._engine`): thin wrappers that copy their inputs, release the
//! GIL for the work, and turn every failure into a documented grammarmask error. An engine error is
//! a `grammarmask.GrammarError`; a panic (a bug) is caught here and raised as a
//! `grammarmask.GrammarMaskError`, never as PyO3's `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::error::{Error, Result};
use crate::lru::Lru;
use crate::regular::{Dfa, RegularIndex};
use crate::vocab::{lock, Vocab};

/// An instance of the exception class `name` of `grammarmask.errors` with `message`.
fn grammarmask_error(py: Python<'_>, name: &str, message: String) -> PyErr {
    let made = py
        .import("grammarmask.errors")
        .and_then(|m| m.getattr(name))
        .and_then(|cls| cls.call1((message.clone(),)));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyValueError::new_err(message), // grammarmask.errors itself failed to import
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Run `f` without the GIL, mapping its error and any panic to grammarmask's errors.
fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Error(message))) => Err(grammarmask_error(py, "GrammarError", message)),
        Err(payload) => Err(grammarmask_error(
            py,
            "GrammarMaskError",
            format!(
                "internal error in the native engine ({}); please report it",
                panic_message(payload.as_ref())
            ),
        )),
    }
}

fn to_u32s_ne(data: &[u8], what: &str) -> Result<Vec<u32>> {
    if data.len() % 4 != 0 {
        return Err(Error::new(format!(
            "{what}: {} bytes is not a whole number of 32-bit words",
            data.len()
        )));
    }
    Ok(data
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn to_usize(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::new(format!("{what} must be >= 0, got {v}")))
}

/// The native form of a `grammarmask.Vocabulary`, shared by every grammar compiled against it.
///
/// `Vocabulary(data, lengths, specials, size, tries=8)`: `data` is every token's bytes one after
/// another, `lengths` each token's length as uint32 (native order), `specials` the ids never legal,
/// `size` the model's vocabulary size, `tries` how many token tries (one per byte-class map) to keep.
#[pyclass(frozen, name = "Vocabulary", module = "grammarmask._engine")]
pub struct PyVocab {
    inner: Arc<Vocab>,
}

#[pymethods]
impl PyVocab {
    #[new]
    #[pyo3(signature = (data, lengths, specials, size, tries = 8))]
    fn new(
        py: Python<'_>,
        data: &Bound<'_, PyBytes>,
        lengths: &Bound<'_, PyBytes>,
        specials: Vec<i64>,
        size: i64,
        tries: i64,
    ) -> PyResult<Self> {
        let data = data.as_bytes().to_vec();
        let lengths = lengths.as_bytes().to_vec();
        let inner = guarded(py, move || {
            let lengths = to_u32s_ne(&lengths, "native vocabulary: lengths")?;
            let size = to_usize(size, "native vocabulary: size")?;
            let tries = to_usize(tries, "native vocabulary: tries")?;
            Vocab::new(data, &lengths, &specials, size, tries)
        })?;
        Ok(PyVocab {
            inner: Arc::new(inner),
        })
    }

    /// The model's vocabulary size.
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    /// Words in a packed mask.
    #[getter]
    fn n_words(&self) -> usize {
        self.inner.n_words()
    }

    /// Drop the cached token tries (the next grammar builds its own; for benchmarks).
    fn clear_tries(&self) {
        self.inner.clear_tries()
    }

    /// Token tries held (at most the ``tries`` given).
    #[getter]
    fn tries_cached(&self) -> usize {
        self.inner.tries_cached()
    }
}

/// The regular index of a byte DFA over a native vocabulary (see `regular.rs`). Immutable and
/// thread-safe: masks are computed without the GIL and cached in a bounded LRU.
///
/// `RegularIndex(vocab, transitions, accepting, start, cache_masks, wrap=None)`: `transitions` the
/// DFA's `(n, 256)` int32 table as bytes (native order), `accepting` one byte per state; `mask`
/// answers `wrap(words as bytes)` (the bytes themselves without `wrap`), keeping `cache_masks` of
/// them: that LRU is the index's only mask cache.
#[pyclass(frozen, name = "RegularIndex", module = "grammarmask._engine")]
pub struct PyRegularIndex {
    inner: Arc<RegularIndex>,
    /// The answers of `mask` by state: `wrap(bytes)`, made once and handed out shared.
    masks: Mutex<Lru<u32, Py<PyAny>>>,
    wrap: Option<Py<PyAny>>,
}

#[pymethods]
impl PyRegularIndex {
    #[new]
    #[pyo3(signature = (vocab, transitions, accepting, start, cache_masks, wrap = None))]
    fn new(
        py: Python<'_>,
        vocab: &Bound<'_, PyVocab>,
        transitions: &Bound<'_, PyBytes>,
        accepting: &Bound<'_, PyBytes>,
        start: i64,
        cache_masks: i64,
        wrap: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let vocab = Arc::clone(&vocab.get().inner);
        let table: Vec<u8> = transitions.as_bytes().to_vec();
        let accepting: Vec<bool> = accepting.as_bytes().iter().map(|&a| a != 0).collect();
        let inner = guarded(py, move || {
            // the int32 table in native order (a negative entry becomes huge and is refused)
            let table = to_u32s_ne(&table, "native DFA: transitions")?;
            let start = to_usize(start, "native DFA: start")?;
            let cache = to_usize(cache_masks, "native DFA: cache_masks")?;
            let dfa = Dfa::new(table, accepting, start)?;
            Ok((RegularIndex::new(vocab, dfa, 0), cache)) // this wrapper keeps the one mask cache
        })?;
        let (inner, cache) = inner;
        Ok(PyRegularIndex {
            inner: Arc::new(inner),
            masks: Mutex::new(Lru::new(cache)),
            wrap,
        })
    }

    /// The legal normal tokens in `state`: `wrap(words)`, the packed uint32 words (native order) as
    /// bytes. Computed without the GIL on first visit; the same object while it stays cached.
    fn mask(&self, py: Python<'_>, state: i64) -> PyResult<Py<PyAny>> {
        let s = match self.inner.state(state) {
            Ok(s) => s,
            Err(Error(message)) => return Err(grammarmask_error(py, "GrammarError", message)),
        };
        if let Some(hit) = lock(&self.masks).get(&s) {
            return Ok(hit.clone_ref(py));
        }
        let idx = Arc::clone(&self.inner);
        let words = guarded(py, move || idx.mask_uncached(state))?;
        let bytes = PyBytes::new_with(py, words.len() * 4, |buf| {
            for (out, w) in buf.chunks_exact_mut(4).zip(words.iter()) {
                out.copy_from_slice(&w.to_ne_bytes());
            }
            Ok(())
        })?;
        let made: Py<PyAny> = match &self.wrap {
            Some(wrap) => wrap.call1(py, (bytes,))?,
            None => bytes.into_any().unbind(),
        };
        lock(&self.masks).put(s, made.clone_ref(py));
        Ok(made)
    }

    /// The state after `token` from `state`; 0 when the token is illegal there.
    fn next_state(&self, py: Python<'_>, state: i64, token: i64) -> PyResult<u32> {
        let idx = Arc::clone(&self.inner);
        guarded(py, move || idx.next_state(state, token))
    }

    /// Whether `state` is final.
    fn is_accepting(&self, py: Python<'_>, state: i64) -> PyResult<bool> {
        let idx = Arc::clone(&self.inner);
        guarded(py, move || idx.is_accepting(state))
    }

    /// The bytes while the DFA has exactly one live out-byte and the state is not accepting.
    fn forced_bytes<'py>(&self, py: Python<'py>, state: i64) -> PyResult<Bound<'py, PyBytes>> {
        let idx = Arc::clone(&self.inner);
        let out = guarded(py, move || idx.forced_bytes(state))?;
        Ok(PyBytes::new(py, &out))
    }

    /// The start state.
    #[getter]
    fn start(&self) -> u32 {
        self.inner.dfa().start()
    }

    /// Number of DFA states (the dead state included).
    #[getter]
    fn n_states(&self) -> usize {
        self.inner.dfa().n_states()
    }

    /// Number of byte classes.
    #[getter]
    fn n_classes(&self) -> usize {
        self.inner.n_classes()
    }

    /// Nodes of the class trie (the most one mask walks).
    #[getter]
    fn n_trie_nodes(&self) -> usize {
        self.inner.n_trie_nodes()
    }

    /// Masks held in the cache.
    #[getter]
    fn masks_cached(&self) -> usize {
        lock(&self.masks).len()
    }
}

/// grammarmask's native engine.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVocab>()?;
    m.add_class::<PyRegularIndex>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
