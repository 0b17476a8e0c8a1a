//! The compile-time automata kernels (`crate::automata`) as functions of `grammarmask._engine`,
//! called by `grammarmask.automata` when the extension imports. A DFA crosses as
//! `(transitions, accepting, start)`: int32 cells in native order (`n * 256`), one byte per state
//! (non-zero: final), the start state. Each result also carries its byte classes (256 bytes, the
//! class of each byte in order of first appearance), their number, and the table read by class
//! (`n * classes` cells: what the CFG engine's lexer hand-over reads), so Python need not find them.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{guarded, guarded_sized, ne_words, to_u32s_ne, to_usize, whole_words};
use crate::automata::compose::{compose, Piece, Refusal};
use crate::automata::product::{product, Op, Operand};
use crate::automata::strings::{chain, from_strings};
use crate::automata::subset::{determinize, Nfa, Stop};
use crate::automata::{check, minimize::minimize, Dfa};
use crate::classes::{ByteClasses, NeBytes};
use crate::error::{Error, Result};

type DfaParts<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    u32,
    Bound<'py, PyBytes>,
    usize,
    Bound<'py, PyBytes>,
);

fn parts(py: Python<'_>, (d, classes): (Dfa, ByteClasses)) -> PyResult<DfaParts<'_>> {
    let table = PyBytes::new_with(py, 1024 * d.n_states(), |buf| {
        d.write_dense(buf);
        Ok(())
    })?;
    // the exact classes are unions of the columns of `d` (bytes of one column behave alike)
    let by_class = ne_words(py, &classes.reduce_classed(&d.map, &d.table[..], d.k))?;
    let accepting: Vec<u8> = d.accepting.iter().map(|&a| u8::from(a)).collect();
    Ok((
        table,
        PyBytes::new(py, &accepting),
        d.start,
        PyBytes::new(py, &classes.map),
        classes.count,
        by_class,
    ))
}

fn flags(accepting: &Bound<'_, PyBytes>) -> Vec<bool> {
    accepting.as_bytes().iter().map(|&a| a != 0).collect()
}

fn checked<'a>(
    table: &'a [u8],
    accepting: &[bool],
    start: i64,
    what: &str,
) -> Result<(NeBytes<'a>, u32)> {
    whole_words(table, what)?;
    let cells = NeBytes(table);
    let start = to_usize(start, &format!("{what}: start"))?;
    check(&cells, accepting, start, what)?;
    Ok((cells, start as u32))
}

/// `dfa_minimize(transitions, accepting, start)`: the minimal trimmed DFA of the language, numbered
/// as `grammarmask.automata.dfa.minimize` numbers it.
#[pyfunction]
pub fn dfa_minimize<'py>(
    py: Python<'py>,
    transitions: &Bound<'py, PyBytes>,
    accepting: &Bound<'py, PyBytes>,
    start: i64,
) -> PyResult<DfaParts<'py>> {
    let table = transitions.as_bytes();
    let accepting = flags(accepting);
    let d = guarded_sized(py, table.len(), move || {
        let (cells, start) = checked(table, &accepting, start, "dfa_minimize")?;
        Ok(minimize(&cells, &accepting, start))
    })?;
    parts(py, d)
}

/// `dfa_product(a..., b..., op, limit)`: the minimal DFA of `L(a) op L(b)`, `op` one of
/// `"and"`, `"or"`, `"minus"`; a `GrammarError` past `limit` states of the product.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dfa_product<'py>(
    py: Python<'py>,
    a_transitions: &Bound<'py, PyBytes>,
    a_accepting: &Bound<'py, PyBytes>,
    a_start: i64,
    b_transitions: &Bound<'py, PyBytes>,
    b_accepting: &Bound<'py, PyBytes>,
    b_start: i64,
    op: &str,
    limit: i64,
) -> PyResult<DfaParts<'py>> {
    let (ta, tb) = (a_transitions.as_bytes(), b_transitions.as_bytes());
    let (aa, ab) = (flags(a_accepting), flags(b_accepting));
    let op = op.to_owned();
    let states = (ta.len() / 1024).saturating_mul(tb.len() / 1024); // the product's most
    let d = guarded_sized(py, states.saturating_mul(1024), move || {
        let op = match op.as_str() {
            "and" => Op::Intersection,
            "or" => Op::Union,
            "minus" => Op::Difference,
            other => {
                return Err(Error::new(format!(
                    "dfa_product: op must be 'and', 'or' or 'minus', got {other:?}"
                )))
            }
        };
        let limit = to_usize(limit, "dfa_product: limit")?;
        let (ca, sa) = checked(ta, &aa, a_start, "dfa_product: a")?;
        let (cb, sb) = checked(tb, &ab, b_start, "dfa_product: b")?;
        let a = Operand {
            table: &ca,
            accepting: &aa,
            start: sa,
        };
        let b = Operand {
            table: &cb,
            accepting: &ab,
            start: sb,
        };
        product(&a, &b, op, limit)
    })?;
    parts(py, d)
}

/// `dfa_classes(transitions)`: the byte classes of a table of `n * 256` int32 cells (256 bytes, the
/// class of each byte in order of first appearance) and their number.
#[pyfunction]
pub fn dfa_classes<'py>(
    py: Python<'py>,
    transitions: &Bound<'py, PyBytes>,
) -> PyResult<(Bound<'py, PyBytes>, usize)> {
    let table = transitions.as_bytes();
    let classes = guarded_sized(py, table.len(), move || {
        whole_words(table, "dfa_classes")?;
        if table.len() % 1024 != 0 {
            return Err(Error::new(format!(
                "dfa_classes: {} cells is not 256 per state",
                table.len() / 4
            )));
        }
        Ok(ByteClasses::of_classed_table(
            &ByteClasses::identity().map,
            &NeBytes(table),
            256,
        ))
    })?;
    Ok((PyBytes::new(py, &classes.map), classes.count))
}

/// The byte strings one after another in `data`, of `lengths` (uint32, native order); `what`
/// names the caller in the errors.
fn split<'a>(data: &'a [u8], lengths: &[u8], what: &str) -> Result<Vec<&'a [u8]>> {
    let lengths = to_u32s_ne(lengths, &format!("{what}: lengths"))?;
    let mut strings = Vec::with_capacity(lengths.len());
    let mut at = 0usize;
    for len in lengths {
        let end = at
            .checked_add(len as usize)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| {
                Error::new(format!("{what}: the lengths add up to more than the data"))
            })?;
        strings.push(&data[at..end]);
        at = end;
    }
    if at != data.len() {
        return Err(Error::new(format!(
            "{what}: the lengths add up to less than the data"
        )));
    }
    Ok(strings)
}

/// `dfa_from_strings(data, lengths)`: the minimal DFA of a set of byte strings, given sorted and
/// distinct, one after another in `data`, with their lengths as uint32 (native order).
#[pyfunction]
pub fn dfa_from_strings<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    lengths: &Bound<'py, PyBytes>,
) -> PyResult<DfaParts<'py>> {
    let (data, lengths) = (data.as_bytes(), lengths.as_bytes());
    // the table's size, about 1 KB a byte of the strings
    let d = guarded_sized(py, data.len().saturating_mul(1024), move || {
        let strings = split(data, lengths, "dfa_from_strings")?;
        if strings.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::new(
                "dfa_from_strings: the strings must be sorted and distinct",
            ));
        }
        let d = from_strings(&strings);
        let classes = ByteClasses::of_map(d.map, d.k); // from_strings' classes are the coarsest
        Ok((d, classes))
    })?;
    parts(py, d)
}

/// `dfa_chain(data, lengths, counts)`: the minimal DFA of a chain of positions, each a prefix-free
/// set of byte strings (`crate::automata::strings::chain`): the strings one after another in
/// `data`, their lengths as uint32 (native order), and per position how many of them are its own
/// (uint32).
#[pyfunction]
pub fn dfa_chain<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    lengths: &Bound<'py, PyBytes>,
    counts: &Bound<'py, PyBytes>,
) -> PyResult<DfaParts<'py>> {
    let (data, lengths, counts) = (data.as_bytes(), lengths.as_bytes(), counts.as_bytes());
    let d = guarded_sized(py, data.len().saturating_mul(1024), move || {
        let counts = to_u32s_ne(counts, "dfa_chain: counts")?;
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let n_strings = (lengths.len() / 4) as u64;
        if total != n_strings {
            let how = if total > n_strings { "more" } else { "less" };
            return Err(Error::new(format!(
                "dfa_chain: the counts add up to {how} than the lengths"
            )));
        }
        let strings = split(data, lengths, "dfa_chain")?;
        let mut rest = strings.as_slice();
        let mut positions = Vec::with_capacity(counts.len());
        for &count in &counts {
            let (own, after) = rest.split_at(count as usize);
            positions.push(own.to_vec());
            rest = after;
        }
        chain(&positions)
    })?;
    parts(py, d)
}

/// `dfa_determinize(eps_ptr, eps, edge_ptr, edges, assert_ptr, asserts, start, final, max_states,
/// max_work)`: the minimal DFA of a Thompson NFA given as uint32 lists (native order): per state,
/// its epsilon targets, its byte edges `(lo, hi, target)` and its anchors `(kind, target)`, each a
/// flat list with a pointer list of `n + 1` offsets (in items); `max_work` -1 for no bound.
/// Returns `(True, dfa parts)`, or `(False, "states")` / `(False, "work")` when a bound was passed
/// (the caller raises the error it documents).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dfa_determinize<'py>(
    py: Python<'py>,
    eps_ptr: &Bound<'py, PyBytes>,
    eps: &Bound<'py, PyBytes>,
    edge_ptr: &Bound<'py, PyBytes>,
    edges: &Bound<'py, PyBytes>,
    assert_ptr: &Bound<'py, PyBytes>,
    asserts: &Bound<'py, PyBytes>,
    start: i64,
    final_state: i64,
    max_states: i64,
    max_work: i64,
) -> PyResult<(bool, Py<PyAny>)> {
    let raw = [eps_ptr, eps, edge_ptr, edges, assert_ptr, asserts].map(|b| b.as_bytes());
    let got = guarded(py, move || {
        let [ep, e, gp, g, ap, a] = raw;
        let (ep, e, gp, ap) = (
            to_u32s_ne(ep, "nfa: eps_ptr")?,
            to_u32s_ne(e, "nfa: eps")?,
            to_u32s_ne(gp, "nfa: edge_ptr")?,
            to_u32s_ne(ap, "nfa: assert_ptr")?,
        );
        let g = to_u32s_ne(g, "nfa: edges")?;
        let a = to_u32s_ne(a, "nfa: asserts")?;
        if g.len() % 3 != 0 || a.len() % 2 != 0 {
            return Err(Error::new("nfa: edges come in threes and anchors in pairs"));
        }
        let g: Vec<(u32, u32, u32)> = g.chunks_exact(3).map(|c| (c[0], c[1], c[2])).collect();
        let a: Vec<(u32, u32)> = a.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        let nfa = Nfa {
            eps_ptr: &ep,
            eps: &e,
            edge_ptr: &gp,
            edges: &g,
            assert_ptr: &ap,
            asserts: &a,
        };
        let start = to_usize(start, "nfa: start")?;
        let final_state = to_usize(final_state, "nfa: final")?;
        nfa.check(start, final_state).map_err(Error::new)?;
        let max_states = to_usize(max_states, "nfa: max_states")?;
        let max_work = if max_work < 0 {
            None
        } else {
            Some(max_work as usize)
        };
        Ok(determinize(
            &nfa,
            start as u32,
            final_state as u32,
            max_states,
            max_work,
        ))
    })?;
    Ok(match got {
        Ok(d) => (true, parts(py, d)?.into_pyobject(py)?.into_any().unbind()),
        Err(Stop::States(_)) => (false, "states".into_pyobject(py)?.into_any().unbind()),
        Err(Stop::Work(_)) => (false, "work".into_pyobject(py)?.into_any().unbind()),
    })
}

/// `dfa_compose(program, pieces, max_nfa, max_states, max_work)`: the minimal DFA of a regular
/// expression over byte strings and leaf DFAs (`crate::automata::compose`: the program as uint32
/// words in native order; each piece `(transitions, accepting, start)`); `max_work` -1 for no
/// bound. Returns `(True, dfa parts)`, or `(False, "size")` / `(False, "states")` /
/// `(False, "work")` when a bound was passed (the caller then takes the regex path).
#[pyfunction]
pub fn dfa_compose<'py>(
    py: Python<'py>,
    program: &Bound<'py, PyBytes>,
    pieces: Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, i64)>,
    max_nfa: i64,
    max_states: i64,
    max_work: i64,
) -> PyResult<(bool, Py<PyAny>)> {
    let program = program.as_bytes();
    let raw: Vec<(&[u8], Vec<bool>, i64)> = pieces
        .iter()
        .map(|(t, a, s)| (t.as_bytes(), flags(a), *s))
        .collect();
    let size = program.len().saturating_mul(64) + raw.iter().map(|p| p.0.len()).sum::<usize>();
    let got = guarded_sized(py, size, move || {
        let prog = to_u32s_ne(program, "compose: program")?;
        let pieces = raw
            .iter()
            .enumerate()
            .map(|(i, (table, accepting, start))| {
                let (cells, start) =
                    checked(table, accepting, *start, &format!("compose: piece {i}"))?;
                Ok(Piece::of_dense(&cells, accepting, start))
            })
            .collect::<Result<Vec<Piece>>>()?;
        let max_nfa = to_usize(max_nfa, "compose: max_nfa")?;
        let max_states = to_usize(max_states, "compose: max_states")?;
        let max_work = usize::try_from(max_work).ok();
        compose(&prog, &pieces, max_nfa, max_states, max_work)
    })?;
    Ok(match got {
        Ok(d) => (true, parts(py, d)?.into_pyobject(py)?.into_any().unbind()),
        Err(r) => {
            let why = match r {
                Refusal::Size(_) => "size",
                Refusal::Stopped(Stop::States(_)) => "states",
                Refusal::Stopped(Stop::Work(_)) => "work",
            };
            (false, why.into_pyobject(py)?.into_any().unbind())
        }
    })
}
