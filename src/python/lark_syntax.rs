//! `lark_tokens` of `grammarmask._engine`: the tokens of Lark grammar text (`crate::lark_tokens`),
//! for `grammarmask.frontends.lark_syntax`.

use pyo3::prelude::*;

use super::guarded;
use crate::lark_tokens::placed;

/// A token as the reader takes it: kind (its index in lark_syntax's `_ORDER`), start and end (in
/// characters), line, column, end line, end column (from 1, as lark counts them).
type Row = (u8, usize, usize, usize, usize, usize, usize);

/// `lark_tokens(text)`: the tokens of `text` but whitespace, comments and line continuations, with
/// their positions; None when `re` must cut the text (a non-ASCII space or digit may stand in it)
/// or no token matches somewhere (lark's parser then words the error).
#[pyfunction]
pub fn lark_tokens(py: Python<'_>, text: &str) -> PyResult<Option<Vec<Row>>> {
    let text = text.to_owned(); // (the work runs without the GIL)
    guarded(py, move || {
        Ok(placed(&text).ok().map(|toks| {
            toks.iter()
                .map(|p| {
                    let t = p.token;
                    (
                        t.kind as u8,
                        t.start,
                        t.end,
                        p.line,
                        p.column,
                        p.end_line,
                        p.end_column,
                    )
                })
                .collect()
        }))
    })
}
