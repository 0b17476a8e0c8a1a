//! The Python bindings (`grammarmask._engine`): thin wrappers that copy their inputs, release the
//! GIL for the work (but for small automata: [`guarded_sized`]), and turn every failure into a
//! documented grammarmask error. An engine error is a `grammarmask.GrammarError`; a panic (a bug)
//! is caught here and raised as a `grammarmask.GrammarMaskError`, never as PyO3's
//! `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::cfg::earley::Grammar as CfgRules;
use crate::cfg::inside::Shelf as CfgShelf;
use crate::cfg::lexer::Lexer as CfgLexer;
use crate::cfg::slice::Slice as CfgSlice;
use crate::cfg::tables::{combine, TerminalTable};
use crate::cfg::{
    CfgEngine, CfgError, Limits as CfgLimits, State as CfgState, REPLAY_BYTES_PER_MASK,
};
use crate::classes::NeBytes;
use crate::error::{Error, Result};
use crate::lru::Lru;
use crate::packed::Packed;
use crate::regular::{Dfa, RegularIndex};
use crate::vocab::{lock, Vocab};

mod array;
mod automata;
mod batch;
mod lark_syntax;

/// The extension's allocator: mimalloc, not the C library's malloc. A first visit builds and
/// drops thousands of small vectors (Earley sets, configuration sets, memo tables). Under glibc's
/// malloc, in a process that had let go of many small blocks (a document's states), one JSON
/// step's mask took 130-660 us, against 60-210 us here for the same work. Only the extension's
/// own allocations go through it: Python's and numpy's keep theirs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    answered(py, py.detach(|| catch_unwind(AssertUnwindSafe(f))))
}

/// Inputs below this many bytes are worked on with the GIL held. Letting the GIL go costs more
/// than such work, and taking it back waits for the end of any other thread's switch interval
/// (5 ms): while the disk cache's writer pickled, each small automaton of the compiles after it
/// waited so.
const DETACH_FROM: usize = 1 << 16;

/// [`guarded`] for work in proportion to `size` bytes of input: below [`DETACH_FROM`] the GIL
/// is kept.
fn guarded_sized<T: Send>(
    py: Python<'_>,
    size: usize,
    f: impl FnOnce() -> Result<T> + Send,
) -> PyResult<T> {
    if size >= DETACH_FROM {
        return guarded(py, f);
    }
    answered(py, catch_unwind(AssertUnwindSafe(f)))
}

/// The Python answer of `f`'s outcome in [`guarded`].
fn answered<T>(py: Python<'_>, got: std::thread::Result<Result<T>>) -> PyResult<T> {
    match got {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Error(message))) => Err(grammarmask_error(py, "GrammarError", message)),
        Err(payload) => Err(internal_error(py, &panic_message(payload.as_ref()))),
    }
}

fn whole_words(data: &[u8], what: &str) -> Result<()> {
    if data.len() % 4 != 0 {
        return Err(Error::new(format!(
            "{what}: {} bytes is not a whole number of 32-bit words",
            data.len()
        )));
    }
    Ok(())
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

/// A byte -> class map given as 256 bytes (None: every byte its own class, a dense table).
fn class_map(classes: Option<&[u8]>, what: &str) -> Result<[u8; 256]> {
    match classes {
        None => Ok(crate::classes::ByteClasses::identity().map),
        Some(c) => c.try_into().map_err(|_| {
            Error::new(format!(
                "{what}: {} bytes is not a byte -> class map of 256",
                c.len()
            ))
        }),
    }
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
    #[pyo3(signature = (data, lengths, specials, size, tries = 8, shared_walks = 128))]
    fn new(
        py: Python<'_>,
        data: &Bound<'_, PyBytes>,
        lengths: &Bound<'_, PyBytes>,
        specials: Vec<i64>,
        size: i64,
        tries: i64,
        shared_walks: i64,
    ) -> PyResult<Self> {
        let data = data.as_bytes().to_vec();
        let lengths = lengths.as_bytes().to_vec();
        let inner = guarded(py, move || {
            let lengths = to_u32s_ne(&lengths, "native vocabulary: lengths")?;
            let size = to_usize(size, "native vocabulary: size")?;
            let tries = to_usize(tries, "native vocabulary: tries")?;
            let shared = to_usize(shared_walks, "native vocabulary: shared_walks")?;
            Vocab::new(data, &lengths, &specials, size, tries, shared)
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

    /// Drop the cached class tries (the next grammar builds its own; for benchmarks); the byte
    /// trie, once per vocabulary, is kept.
    fn clear_tries(&self) {
        self.inner.clear_tries()
    }

    /// Drop what the CFG grammars of this vocabulary share (lexer walks, loop runs, mask rows, the
    /// string bodies' slice) and the class tries; the byte trie is kept and the slice made again
    /// at once (both vocabulary preprocessing). For benchmarks of a first grammar.
    fn clear_shared(&self, py: Python<'_>) {
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            inner.clear_tries();
            inner.clear_stores();
            CfgSlice::of(&inner);
        })
    }

    /// Nodes of the byte trie, built by this if it is not yet (the vocabulary's preprocessing,
    /// done once; the GIL is released while it is built).
    #[getter]
    fn byte_trie_nodes(&self, py: Python<'_>) -> usize {
        let inner = Arc::clone(&self.inner);
        py.detach(move || inner.byte_trie_nodes())
    }

    /// Class tries held (at most the ``tries`` given; the byte trie, kept apart, not counted).
    #[getter]
    fn tries_cached(&self) -> usize {
        self.inner.tries_cached()
    }

    /// Tokens made of whole string-body characters (every character but a quote, a backslash, DEL or a
    /// control), which the CFG engine sets aside once per vocabulary; built by this if they are
    /// not yet (with the byte trie: the vocabulary's preprocessing; the GIL is released).
    #[getter]
    fn slice_tokens(&self, py: Python<'_>) -> usize {
        let inner = Arc::clone(&self.inner);
        py.detach(move || CfgSlice::of(&inner).tokens())
    }

    /// Whether the tokens of the string body of every character but the ASCII bytes `excluded`
    /// are set aside (a Lark grammar's `/'[^']*'/` leaves out b"'"; made once per vocabulary, in a
    /// thread of its own, when the first grammar with such a string is compiled).
    fn has_slice(&self, excluded: &[u8]) -> PyResult<bool> {
        let mut set: u128 = 0;
        for &b in excluded {
            if b >= 0x80 {
                return Err(PyValueError::new_err(format!(
                    "has_slice: {b:#04x} is not an ASCII byte"
                )));
            }
            set |= 1 << b;
        }
        Ok(CfgSlice::made(&self.inner, set))
    }

    /// What lexer states allow by themselves, walked on the byte trie and shared by the grammars
    /// of this vocabulary: ``(entries held, lexer states served from them so far)``.
    #[getter]
    fn shelf(&self) -> (usize, usize) {
        self.inner.store(CfgShelf::new).stats()
    }
}

/// The regular index of a byte DFA over a native vocabulary (see `regular.rs`). Immutable and
/// thread-safe: masks are computed without the GIL and cached in a bounded LRU.
///
/// `RegularIndex(vocab, transitions, accepting, start, cache_masks, wrap=None, classes=None)`:
/// `transitions` the DFA's int32 table as bytes (native order), `(n, 256)`, or `(n, k)` read by
/// byte class when `classes` (256 bytes, each below `k`) maps bytes to its columns; `accepting` one
/// byte per state; `mask` answers `wrap(words as bytes)` (the bytes themselves without `wrap`),
/// keeping `cache_masks` of them: that LRU is the index's only mask cache.
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
    #[pyo3(signature = (vocab, transitions, accepting, start, cache_masks, wrap = None, classes = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        vocab: &Bound<'_, PyVocab>,
        transitions: &Bound<'_, PyBytes>,
        accepting: &Bound<'_, PyBytes>,
        start: i64,
        cache_masks: i64,
        wrap: Option<Py<PyAny>>,
        classes: Option<Bound<'_, PyBytes>>,
    ) -> PyResult<Self> {
        let vocab = Arc::clone(&vocab.get().inner);
        // borrowed, not copied: the bytes object outlives the call
        let table: &[u8] = transitions.as_bytes();
        let classes: Option<&[u8]> = classes.as_ref().map(|c| c.as_bytes());
        let accepting: Vec<bool> = accepting.as_bytes().iter().map(|&a| a != 0).collect();
        let inner = guarded(py, move || {
            // the int32 table in native order, read in place (a negative entry becomes huge and is
            // refused); the DFA keeps its table by class
            whole_words(table, "native DFA: transitions")?;
            let pre = class_map(classes, "native DFA: classes")?;
            let start = to_usize(start, "native DFA: start")?;
            let cache = to_usize(cache_masks, "native DFA: cache_masks")?;
            let dfa = Dfa::from_cells(&NeBytes(table), &pre, accepting, start)?;
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
        let made = words_object(py, self.wrap.as_ref(), &Packed::Dense(words.into()))?;
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

    /// Cells of the transition table (states x byte classes, 4 bytes each).
    #[getter]
    fn table_words(&self) -> usize {
        self.inner.dfa().table_words()
    }

    /// Masks held in the cache.
    #[getter]
    fn masks_cached(&self) -> usize {
        lock(&self.masks).len()
    }
}

/// Run `f` without the GIL, mapping a CFG engine error to `GrammarError` or `BudgetExceeded` (with
/// `compile_time=True`: the engine's budgets were set by the compile) and a panic as in [`guarded`].
fn guarded_cfg<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> std::result::Result<T, CfgError> + Send,
) -> PyResult<T> {
    guarded(py, move || Ok(f()))?.map_err(|e| cfg_error(py, e))
}

/// The grammarmask error of a CFG engine error: a `GrammarError`, or a `BudgetExceeded`.
fn cfg_error(py: Python<'_>, e: CfgError) -> PyErr {
    match e {
        CfgError::Grammar(message) => grammarmask_error(py, "GrammarError", message),
        CfgError::Budget {
            budget,
            value,
            what,
        } => {
            let made = py
                .import("grammarmask.errors")
                .and_then(|m| m.getattr("BudgetExceeded"))
                .and_then(|cls| {
                    let kw = pyo3::types::PyDict::new(py);
                    kw.set_item("compile_time", true)?;
                    cls.call((budget, value, what.clone()), Some(&kw))
                });
            match made {
                Ok(exc) => PyErr::from_value(exc),
                Err(_) => {
                    PyValueError::new_err(format!("{what}: over the {budget} budget ({value})"))
                }
            }
        }
    }
}

/// The error a caught panic becomes (a bug in the engine).
fn internal_error(py: Python<'_>, message: &str) -> PyErr {
    grammarmask_error(
        py,
        "GrammarMaskError",
        format!("internal error in the native engine ({message}); please report it"),
    )
}

fn to_i32s_ne(data: &[u8], what: &str) -> Result<Vec<i32>> {
    Ok(to_u32s_ne(data, what)?
        .into_iter()
        .map(|w| w as i32)
        .collect())
}

/// A state of a native CFG: an immutable value (hashable; equal states behave alike). Falsy when
/// the output left the language.
#[pyclass(frozen, name = "CfgState", module = "grammarmask._engine")]
pub struct PyCfgState {
    inner: Arc<CfgState>,
}

#[pymethods]
impl PyCfgState {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __bool__(&self) -> bool {
        !self.inner.is_empty()
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.hash(&mut h);
        h.finish()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<PyCfgState>() {
            Ok(o) => *self.inner == *o.get().inner,
            Err(_) => false,
        }
    }

    fn __repr__(&self) -> String {
        format!("<CfgState: {} configurations>", self.inner.len())
    }

    /// What names the state's behaviour within its grammar: per configuration (sorted, distinct)
    /// `(set signature, lexer state, fresh)`. Equal keys: equal masks, answers and successors; the
    /// key holds no part of the chart.
    #[getter]
    fn key(&self) -> Vec<(u64, u32, bool)> {
        self.inner.key().clone()
    }
}

/// `wrap(bytes)` (the bytes themselves without `wrap`): mask `words` as a bytes object of packed
/// uint32 words in native order, the form `mask` answers.
fn words_object(py: Python<'_>, wrap: Option<&Py<PyAny>>, words: &Packed) -> PyResult<Py<PyAny>> {
    let bytes = match words {
        Packed::Dense(dense) => ne_words(py, dense)?,
        Packed::Sparse { words: sparse, .. } => {
            PyBytes::new_with(py, words.n_words() * 4, |buf| {
                // (zeroed by PyO3)
                for &(i, w) in sparse.iter() {
                    let at = 4 * i as usize;
                    buf[at..at + 4].copy_from_slice(&w.to_ne_bytes());
                }
                Ok(())
            })?
        }
    };
    match wrap {
        Some(wrap) => wrap.call1(py, (bytes,)),
        None => Ok(bytes.into_any().unbind()),
    }
}

/// `cells` as a bytes object of uint32 words in native order.
fn ne_words<'py>(py: Python<'py>, cells: &[u32]) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, 4 * cells.len(), |buf| {
        for (out, c) in buf.chunks_exact_mut(4).zip(cells) {
            out.copy_from_slice(&c.to_ne_bytes());
        }
        Ok(())
    })
}

/// Write the mask `words` of `state` into `row` (every word of it), and bit `eos` (inside the row)
/// when the state accepts: whether the state allows a token or accepts. A row of
/// `Matcher.fill_mask` and of a batch alike.
fn write_row(row: &mut [u32], words: &Packed, state: &CfgState, eos: Option<usize>) -> bool {
    words.write_into(row);
    let accepting = state.accepting();
    if let (true, Some(eos)) = (accepting, eos) {
        row[eos >> 5] |= 1 << (eos & 31);
    }
    accepting || !words.is_empty()
}

/// Masks a CFG grammar keeps whole, as the objects `mask` answers (16 KB each on tekken).
const RECENT_ROWS: usize = 8;

thread_local! {
    /// The row a CFG mask is computed in before it is copied into its bytes object: reused, so a
    /// first visit touches no fresh memory but that object's.
    static SCRATCH: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A context-free grammar bound to a native vocabulary (see `cfg/mod.rs`). Immutable and
/// thread-safe; masks are computed without the GIL.
///
/// `CfgGrammar(vocab, transitions, accepting, term_of, starts, greedy, ignore, rule_lhs, rule_ptr,
/// rule_rhs, start, n_nonterminals, limits, wrap=None, class_trie_max=32, classes=None)`: the
/// combined lexer table as int32 bytes (native order, `(n, 256)`, or `(n, k)` read by byte class
/// when `classes`, 256 bytes each below `k`, maps bytes to its columns), one accepting byte per
/// state, the terminal of each state (int32 bytes), per terminal its DFA's start state, greediness
/// and whether it is ignored; the rules
/// `rule_lhs[r] -> rule_rhs[rule_ptr[r]:rule_ptr[r + 1]]`; `limits` the six budgets
/// `(earley_items_per_set, earley_signatures, earley_recent, cfg_configs, cfg_walk_visits,
/// cfg_masks)`; masks walk a trie over the lexer's byte classes when there are at most
/// `class_trie_max` of them, else the byte trie.
#[pyclass(frozen, name = "CfgGrammar", module = "grammarmask._engine")]
pub struct PyCfgGrammar {
    inner: Arc<CfgEngine>,
    /// Every mask computed, by state key, packed (most allow few tokens: a few bytes, not a 16 KB
    /// row); the engine itself then keeps no mask cache.
    packed: Mutex<Lru<crate::cfg::Key, Arc<Packed>>>,
    /// The answers of `mask` for the last states asked: `wrap(bytes)`, handed out shared (the rows
    /// of a batch whose sequences are in one state).
    masks: Mutex<Lru<crate::cfg::Key, (Py<PyAny>, bool)>>,
    wrap: Option<Py<PyAny>>,
}

impl PyCfgGrammar {
    fn state(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<Arc<CfgState>> {
        match state.cast::<PyCfgState>() {
            Ok(s) => Ok(Arc::clone(&s.get().inner)),
            Err(_) => Err(grammarmask_error(
                py,
                "GrammarError",
                format!(
                    "native CFG: {} is not a state of this grammar",
                    state.repr().map(|r| r.to_string()).unwrap_or_default()
                ),
            )),
        }
    }

    /// The answer of `mask` for `s` and whether it allows any token: one of the last rows handed
    /// out, else rebuilt from the packed cache, else computed without the GIL.
    fn row_of(&self, py: Python<'_>, s: Arc<CfgState>) -> PyResult<(Py<PyAny>, bool)> {
        self.check_owned(py, &s)?;
        if let Some((hit, live)) = lock(&self.masks).get(s.key()) {
            return Ok((hit.clone_ref(py), *live));
        }
        let words = self.packed_of(py, &s)?;
        let made = words_object(py, self.wrap.as_ref(), &words)?;
        let live = !words.is_empty();
        lock(&self.masks).put(s.key().clone(), (made.clone_ref(py), live));
        Ok((made, live))
    }

    fn check_owned(&self, py: Python<'_>, s: &CfgState) -> PyResult<()> {
        if self.inner.owns(s) {
            return Ok(());
        }
        Err(grammarmask_error(
            py,
            "GrammarError",
            "native CFG: the state belongs to another compiled grammar".into(),
        ))
    }

    /// The mask of `s` (one of this grammar's), packed: from the cache, else computed without the
    /// GIL.
    fn packed_of(&self, py: Python<'_>, s: &CfgState) -> PyResult<Arc<Packed>> {
        match self.cached(s.key()) {
            Some(words) => Ok(words),
            None => guarded_cfg(py, || self.compute(s)),
        }
    }

    /// The mask of the state keyed `key`, packed, if it was computed and is still held.
    fn cached(&self, key: &crate::cfg::Key) -> Option<Arc<Packed>> {
        lock(&self.packed).get(key).map(Arc::clone)
    }

    /// Compute `s`'s mask (in this thread's scratch row: memory already mapped), pack it and keep it
    /// (call without the GIL).
    fn compute(&self, s: &CfgState) -> std::result::Result<Arc<Packed>, CfgError> {
        let words = SCRATCH.with_borrow_mut(|row| self.inner.mask_packed(s, row))?;
        lock(&self.packed).put(s.key().clone(), Arc::clone(&words));
        Ok(words)
    }

    fn wrap_state(py: Python<'_>, s: Arc<CfgState>) -> PyResult<Py<PyCfgState>> {
        Py::new(py, PyCfgState { inner: s })
    }
}

#[pymethods]
impl PyCfgGrammar {
    #[new]
    #[pyo3(signature = (vocab, transitions, accepting, term_of, starts, greedy, ignore, rule_lhs,
                        rule_ptr, rule_rhs, start, n_nonterminals, limits, wrap = None, class_trie_max = 32,
                        classes = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        vocab: &Bound<'_, PyVocab>,
        transitions: &Bound<'_, PyBytes>,
        accepting: &Bound<'_, PyBytes>,
        term_of: &Bound<'_, PyBytes>,
        starts: Vec<i64>,
        greedy: Vec<bool>,
        ignore: Vec<bool>,
        rule_lhs: Vec<i64>,
        rule_ptr: Vec<i64>,
        rule_rhs: Vec<i64>,
        start: i64,
        n_nonterminals: i64,
        limits: (i64, i64, i64, i64, i64, i64),
        wrap: Option<Py<PyAny>>,
        class_trie_max: i64,
        classes: Option<Bound<'_, PyBytes>>,
    ) -> PyResult<Self> {
        let vocab = Arc::clone(&vocab.get().inner);
        let table: &[u8] = transitions.as_bytes(); // borrowed, as in RegularIndex::new
        let classes: Option<&[u8]> = classes.as_ref().map(|c| c.as_bytes());
        let accepting: Vec<bool> = accepting.as_bytes().iter().map(|&a| a != 0).collect();
        let term_of = term_of.as_bytes().to_vec();
        let inner = guarded_cfg(py, move || {
            let grammar_err = |e: Error| CfgError::Grammar(e.0);
            whole_words(table, "native CFG lexer: transitions").map_err(grammar_err)?;
            let pre = class_map(classes, "native CFG lexer: classes").map_err(grammar_err)?;
            let term_of: Vec<u32> = to_i32s_ne(&term_of, "native CFG lexer: terminals")
                .map_err(grammar_err)?
                .into_iter()
                .map(|t| if t < 0 { 0 } else { t as u32 })
                .collect();
            let n_terms = starts.len();
            let starts = starts
                .into_iter()
                .map(|s| to_usize(s, "native CFG lexer: start").map(|s| s as u32))
                .collect::<Result<Vec<u32>>>()
                .map_err(grammar_err)?;
            let n_nt =
                to_usize(n_nonterminals, "native CFG: n_nonterminals").map_err(grammar_err)?;
            let lim = |v: i64, what: &str| to_usize(v, what).map_err(grammar_err);
            let cache = lim(limits.5, "Limits.cfg_masks")?;
            let limits = CfgLimits {
                earley_items_per_set: lim(limits.0, "Limits.earley_items_per_set")?,
                earley_signatures: lim(limits.1, "Limits.earley_signatures")?,
                earley_recent: lim(limits.2, "Limits.earley_recent")?,
                cfg_configs: lim(limits.3, "Limits.cfg_configs")?,
                cfg_walk_visits: lim(limits.4, "Limits.cfg_walk_visits")?,
                cfg_masks: 0, // this wrapper keeps the one mask cache
                cfg_insides: cache,
                replay_bytes: cache.saturating_mul(REPLAY_BYTES_PER_MASK),
                class_trie_max: lim(class_trie_max, "native CFG: class_trie_max")?,
            };
            // read in place: the lexer keeps its table by class, never a 256-column copy
            let lexer = CfgLexer::from_cells(
                &NeBytes(table),
                &pre,
                accepting,
                term_of,
                starts,
                greedy,
                ignore,
            )?;
            let rules = CfgRules::new(
                n_nt,
                n_terms,
                &rule_lhs,
                &rule_ptr,
                &rule_rhs,
                start,
                limits.earley_items_per_set,
            )?;
            Ok((CfgEngine::new(vocab, lexer, rules, limits)?, cache))
        })?;
        let (inner, cache) = inner;
        Ok(PyCfgGrammar {
            inner: Arc::new(inner),
            packed: Mutex::new(Lru::new(cache)),
            masks: Mutex::new(Lru::new(cache.min(RECENT_ROWS))),
            wrap,
        })
    }

    /// The state before any output.
    fn initial(&self, py: Python<'_>) -> PyResult<Py<PyCfgState>> {
        Self::wrap_state(py, self.inner.initial())
    }

    /// The state after `token`; None when the token is illegal there.
    fn advance(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        token: i64,
    ) -> PyResult<Option<Py<PyCfgState>>> {
        let s = self.state(py, state)?;
        let eng = Arc::clone(&self.inner);
        match guarded_cfg(py, move || eng.advance(&s, token))? {
            Some(n) => Ok(Some(Self::wrap_state(py, n)?)),
            None => Ok(None),
        }
    }

    /// The state after `data` (empty, hence falsy, when `data` leaves the language's prefixes).
    fn feed(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        data: &Bound<'_, PyBytes>,
    ) -> PyResult<Py<PyCfgState>> {
        let s = self.state(py, state)?;
        let data = data.as_bytes().to_vec();
        let eng = Arc::clone(&self.inner);
        let n = guarded_cfg(py, move || eng.feed(&s, &data))?;
        Self::wrap_state(py, n)
    }

    /// Whether the output so far is a sentence of the language.
    fn is_accepting(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.state(py, state)?.accepting())
    }

    /// The legal normal tokens in `state`: `wrap(words)`, the packed uint32 words (native order) as
    /// bytes. Computed without the GIL on first visit (then cached by the state's key).
    fn mask(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let s = self.state(py, state)?;
        Ok(self.row_of(py, s)?.0)
    }

    /// `(mask(state), whether it allows any token, is_accepting(state))` in one call: what a row of
    /// a batch needs (the emptiness is known without a scan of the row).
    fn row(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<(Py<PyAny>, bool, bool)> {
        let s = self.state(py, state)?;
        let accepting = s.accepting();
        let (words, live) = self.row_of(py, s)?;
        Ok((words, live, accepting))
    }

    /// Write the mask of `state` into row `row` of `words` (and bit `eos` when the state accepts;
    /// -1: none; past the row: GrammarError), a C-ordered `[batch, n_words]` int32/uint32 numpy
    /// array: whether the state allows a token or accepts. None when `words` or `row` is not of
    /// that kind: nothing is written (the caller says what is wrong).
    fn fill(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        words: &Bound<'_, PyAny>,
        row: &Bound<'_, PyAny>,
        eos: i64,
    ) -> PyResult<Option<bool>> {
        let s = self.state(py, state)?;
        self.check_owned(py, &s)?;
        let Ok(row) = row.extract::<i64>() else {
            return Ok(None); // (not an integer, or past 64 bits)
        };
        let n_words = self.inner.n_words();
        let eos = match usize::try_from(eos) {
            Ok(e) if e < 32 * n_words => Some(e),
            Ok(_) => {
                let message = format!("CfgGrammar.fill: EOS id {eos} is outside the row");
                return Err(grammarmask_error(py, "GrammarError", message));
            }
            Err(_) => None,
        };
        let packed = match self.cached(s.key()) {
            Some(words) => words,
            None if array::find(words, row, n_words).is_none() => return Ok(None),
            None => guarded_cfg(py, || self.compute(&s))?,
        };
        // (the row is found after the computation, which lets go of the GIL: it is borrowed only
        // while the GIL is held)
        let Some(mut dest) = array::find(words, row, n_words) else {
            return Ok(None);
        };
        Ok(Some(write_row(dest.words(), &packed, &s, eos)))
    }

    /// Masks held in the cache (packed).
    #[getter]
    fn masks_cached(&self) -> usize {
        lock(&self.packed).len()
    }

    /// Masks found by replaying a mask walk made from another state (src/cfg/replay.rs), and masks
    /// walked.
    #[getter]
    fn masks_replayed(&self) -> (usize, usize) {
        self.inner.masks_replayed()
    }

    /// Bytes the cached masks hold (packed), and rows held whole for the last states asked.
    #[getter]
    fn mask_bytes(&self) -> (usize, usize) {
        let packed = lock(&self.packed).values().map(|p| p.bytes()).sum();
        (packed, lock(&self.masks).len())
    }

    /// Set the costs of shortest completions (once per grammar): per terminal the length of its
    /// shortest lexeme, per nonterminal of its shortest derivation (`1 << 40` or more: none).
    fn set_completion_costs(
        &self,
        py: Python<'_>,
        terminal: Vec<u64>,
        nonterminal: Vec<u64>,
    ) -> PyResult<()> {
        let eng = Arc::clone(&self.inner);
        guarded_cfg(py, move || {
            eng.set_completion_costs(&terminal, &nonterminal)
        })
    }

    /// Per configuration of `state`: `(fresh, pend)`, whether it is at a lexeme boundary and the
    /// combined lexer table's states of the lexemes in progress.
    fn configurations(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(bool, Vec<u32>)>> {
        let s = self.state(py, state)?;
        let eng = Arc::clone(&self.inner);
        guarded_cfg(py, move || eng.configurations(&s))
    }

    /// The cheapest way to acceptance from configuration `i` of `state` with its pending lexeme
    /// closed as `terminal` (-1: from its Earley set as it is): `(cost, symbols)`, the symbols to
    /// derive (terminal `t` as `~t`), or None. Needs `set_completion_costs`.
    fn completion(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        i: usize,
        terminal: i64,
    ) -> PyResult<Option<(u64, Vec<i32>)>> {
        let s = self.state(py, state)?;
        let t = if terminal < 0 {
            None
        } else {
            Some(u32::try_from(terminal).unwrap_or(u32::MAX))
        };
        let eng = Arc::clone(&self.inner);
        guarded_cfg(py, move || eng.completion(&s, i, t))
    }

    /// Lexer states made so far.
    #[getter]
    fn lexer_states(&self) -> usize {
        self.inner.lexer_states()
    }

    /// Byte classes of the combined lexer table.
    #[getter]
    fn n_classes(&self) -> usize {
        self.inner.n_classes()
    }

    /// Nodes of the class trie the masks walk (the most one mask visits).
    #[getter]
    fn n_trie_nodes(&self) -> usize {
        self.inner.n_trie_nodes()
    }

    /// Cells of the combined lexer table (states x byte classes).
    #[getter]
    fn table_words(&self) -> usize {
        self.inner.table_words()
    }

    /// Bytes of the combined lexer table: 2 a cell when every state number fits 16 bits, else 4.
    #[getter]
    fn table_bytes(&self) -> usize {
        self.inner.table_bytes()
    }
}

/// One terminal's DFA by class, as `lexer_tables` takes it: the 256-byte class map, the number of
/// classes, the table (`n * classes` int32 cells, native order), one byte per state (non-zero:
/// final), the start state.
type TerminalParts<'py> = (
    Bound<'py, PyBytes>,
    i64,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    i64,
);

/// `lexer_tables(terminals)`: the combined lexer table of a grammar's terminal DFAs, each given by
/// class (`TerminalParts`), as `CfgGrammar` takes it: `(transitions, classes, accepting, term_of,
/// starts)` (src/cfg/tables.rs).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn lexer_tables<'py>(
    py: Python<'py>,
    terminals: Vec<TerminalParts<'py>>,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Vec<u32>,
)> {
    let mut maps: Vec<[u8; 256]> = Vec::with_capacity(terminals.len());
    let mut shapes: Vec<(usize, u32)> = Vec::with_capacity(terminals.len());
    let mut size = 0usize;
    for (t, (map, width, table, _, start)) in terminals.iter().enumerate() {
        let what = format!("native CFG lexer: terminal {t}");
        let err = |e: Error| grammarmask_error(py, "GrammarError", e.0);
        maps.push(class_map(Some(map.as_bytes()), &what).map_err(err)?);
        let width = to_usize(*width, &format!("{what}: classes")).map_err(err)?;
        let start = u32::try_from(*start)
            .map_err(|_| err(Error::new(format!("{what}: start {start} is not a state"))))?;
        shapes.push((width, start));
        size += table.as_bytes().len();
    }
    let terms: Vec<TerminalTable<'_>> = terminals
        .iter()
        .zip(&maps)
        .zip(&shapes)
        .map(
            |(((_, _, table, accepting, _), map), &(width, start))| TerminalTable {
                map,
                width,
                table: NeBytes(table.as_bytes()),
                accepting: accepting.as_bytes(),
                start,
            },
        )
        .collect();
    let got = guarded_sized(py, size, || combine(&terms))?;
    let term_of: Vec<u8> = got.term_of.iter().flat_map(|t| t.to_ne_bytes()).collect();
    Ok((
        ne_words(py, &got.table)?,
        PyBytes::new(py, &got.map),
        PyBytes::new(py, &got.accepting),
        PyBytes::new(py, &term_of),
        got.starts,
    ))
}

/// grammarmask's native engine.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVocab>()?;
    m.add_class::<PyRegularIndex>()?;
    m.add_class::<PyCfgGrammar>()?;
    m.add_class::<PyCfgState>()?;
    m.add_class::<batch::PyRowJob>()?;
    m.add_function(wrap_pyfunction!(automata::dfa_minimize, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_product, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_from_strings, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_chain, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_classes, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_determinize, m)?)?;
    m.add_function(wrap_pyfunction!(automata::dfa_compose, m)?)?;
    m.add_function(wrap_pyfunction!(lark_syntax::lark_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(lexer_tables, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
