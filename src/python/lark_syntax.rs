//! `lark_tokens` of `grammarmask._engine`: the tokens of Lark grammar text (`crate::lark_tokens`),
//! for `grammarmask.frontends.lark_syntax`.

use pyo3::prelude::*;

use super::guarded;
use crate::lark_tokens::{tokens, Kind};

/// A token as the reader takes it: kind (its index in lark_syntax's `_ORDER`), start and end (in
/// characters), line, column, end line, end column (from 1, as lark counts them).
type Row = (u8, usize, usize, usize, usize, usize, usize);

/// `lark_tokens(text)`: the tokens of `text` but whitespace, comments and line continuations, with
/// their positions; None when `re` must cut the text (a non-ASCII space or digit may stand in it)
/// or no token matches somewhere (lark's parser then words the error).
#[pyfunction]
pub fn lark_tokens(py: Python<'_>, text: &str) -> PyResult<Option<Vec<Row>>> {
    let text = text.to_owned();
    guarded(py, move || {
        let Ok(toks) = tokens(&text) else {
            return Ok(None);
        };
        let chars: Vec<char> = text.chars().collect();
        let (mut line, mut line_start) = (1, 0);
        let mut out = Vec::with_capacity(toks.len());
        for t in toks {
            let body = &chars[t.start..t.end];
            let newlines = body.iter().filter(|&&c| c == '\n').count();
            let column = t.start - line_start + 1;
            if let Some(last) = body.iter().rposition(|&c| c == '\n') {
                line_start = t.start + last + 1;
            }
            if !matches!(t.kind, Kind::Ws | Kind::Comment | Kind::Backslash) {
                let end_column = t.end - line_start + 1;
                out.push((
                    t.kind as u8,
                    t.start,
                    t.end,
                    line,
                    column,
                    line + newlines,
                    end_column,
                ));
            }
            line += newlines;
        }
        Ok(Some(out))
    })
}
