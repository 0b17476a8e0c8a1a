//! A grammar's combined lexer table, made from its terminals' DFAs read by byte class: what
//! `grammarmask.native.cfg.flat_tables` hands to [`super::lexer::Lexer`].
//!
//! Global state 0 is dead and terminal `t`'s states `1 ..` follow the states of the terminals before
//! it (its state `s` is global `offset[t] + s`). The columns are the classes of bytes that every
//! terminal treats alike: the common refinement of the terminals' own class maps, numbered by first
//! appearance. Each terminal's table is read at its own classes (a few columns: a literal has one
//! per distinct byte and one more), so no 256-column table is made, copied or read again: Python's
//! numpy hand-over of a JSONSchemaBench grammar (~20 terminals, ~290 states) made one and the
//! engine then found its classes and reduced it.

use crate::classes::{Cells, NeBytes};
use crate::error::{Error, Result};

/// One terminal's DFA by class: `table[s * width + map[b]]` is the state after byte `b` from `s`
/// (state 0 dead), `accepting[s]` non-zero for final states, `start` its start (0: empty language).
pub struct TerminalTable<'a> {
    pub map: &'a [u8; 256],
    pub width: usize,
    pub table: NeBytes<'a>,
    pub accepting: &'a [u8],
    pub start: u32,
}

/// The combined table: `table[s * count + c]`, `map` the byte -> column map of `count` columns,
/// `accepting` and `term_of` per global state (`term_of[0]` is -1), `starts` per terminal (0 for a
/// terminal whose language is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combined {
    pub table: Vec<u32>,
    pub map: [u8; 256],
    pub count: usize,
    pub accepting: Vec<u8>,
    pub term_of: Vec<i32>,
    pub starts: Vec<u32>,
}

/// The combined table of `terms`, checked: every map within its table's width, every table whole
/// rows with its dead state 0 and its targets within the terminal, every start a state.
pub fn combine(terms: &[TerminalTable<'_>]) -> Result<Combined> {
    let mut total = 1usize;
    for (t, term) in terms.iter().enumerate() {
        total = total
            .checked_add(check(t, term)? - 1)
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| Error::new("native CFG lexer: too many states"))?;
    }
    let (map, count) = refine(terms);
    let mut reps = vec![0u8; count];
    for b in (0..256).rev() {
        reps[usize::from(map[b])] = b as u8;
    }
    let mut table = vec![0u32; total * count];
    let mut accepting = vec![0u8; total];
    let mut term_of = vec![-1i32; total];
    let mut starts = Vec::with_capacity(terms.len());
    let mut offset = 0usize;
    for (t, term) in terms.iter().enumerate() {
        let n = term.accepting.len();
        let cols: Vec<usize> = reps
            .iter()
            .map(|&b| usize::from(term.map[usize::from(b)]))
            .collect();
        let add = offset as u32;
        for s in 1..n {
            let row = &mut table[(offset + s) * count..(offset + s + 1) * count];
            for (cell, &c) in row.iter_mut().zip(&cols) {
                let to = term.table.cell(s * term.width + c);
                *cell = if to == 0 { 0 } else { to + add };
            }
            accepting[offset + s] = u8::from(term.accepting[s] != 0);
            term_of[offset + s] = t as i32;
        }
        starts.push(if term.start == 0 { 0 } else { term.start + add });
        offset += n - 1;
    }
    Ok(Combined {
        table,
        map,
        count,
        accepting,
        term_of,
        starts,
    })
}

/// Terminal `t`'s number of states, or what is wrong with its table.
fn check(t: usize, term: &TerminalTable<'_>) -> Result<usize> {
    let bad = |m: String| Err(Error::new(format!("native CFG lexer: terminal {t}: {m}")));
    let n = term.accepting.len();
    let w = term.width;
    if n == 0 || w == 0 || w > 256 || term.table.n_cells() != n * w || term.table.0.len() % 4 != 0 {
        return bad(format!(
            "{} bytes of transitions do not fit {n} states of {w} columns",
            term.table.0.len()
        ));
    }
    if let Some(b) = (0..256).find(|&b| usize::from(term.map[b]) >= w) {
        return bad(format!("byte {b} has class {} of {w}", term.map[b]));
    }
    if term.accepting[0] != 0 || (0..w).any(|c| term.table.cell(c) != 0) {
        return bad("state 0 must be the dead state (row of zeros, not accepting)".into());
    }
    if let Some(to) = (w..n * w)
        .map(|i| term.table.cell(i))
        .find(|&to| to as usize >= n)
    {
        return bad(format!("transition to state {to} of {n}"));
    }
    if term.start as usize >= n {
        return bad(format!("start state {} of {n}", term.start));
    }
    Ok(n)
}

/// The coarsest byte map finer than every terminal's map, numbered by first appearance, and its
/// number of classes: two bytes share a class iff they share one in every terminal.
fn refine(terms: &[TerminalTable<'_>]) -> ([u8; 256], usize) {
    let mut map = [0u8; 256];
    let mut count = 1usize;
    for term in terms {
        // a class of the pair (class so far, the terminal's class), by first appearance
        let mut ids = vec![u16::MAX; count * term.width];
        let mut next = 0u16;
        for m in map.iter_mut().zip(term.map) {
            let id = &mut ids[usize::from(*m.0) * term.width + usize::from(*m.1)];
            if *id == u16::MAX {
                *id = next;
                next += 1;
            }
            *m.0 = *id as u8; // at most 256 classes, numbered 0..=255
        }
        count = usize::from(next);
    }
    (map, count)
}

#[cfg(test)]
mod tests {
    use super::{combine, TerminalTable};
    use crate::classes::{ByteClasses, NeBytes};
    use crate::test_rng::Rng;

    fn words(cells: &[u32]) -> Vec<u8> {
        cells.iter().flat_map(|c| c.to_ne_bytes()).collect()
    }

    /// A random DFA of `n` states over 256 bytes (state 0 dead), with few distinct columns.
    fn random_dense(rng: &mut Rng, n: usize) -> (Vec<u32>, Vec<u8>) {
        let kinds = 1 + rng.below(5);
        let kind: Vec<usize> = (0..256).map(|_| rng.below(kinds)).collect();
        let mut table = vec![0u32; n * 256];
        for s in 1..n {
            let row: Vec<u32> = (0..kinds).map(|_| rng.below(n) as u32).collect();
            for b in 0..256 {
                table[s * 256 + b] = row[kind[b]];
            }
        }
        let mut accepting: Vec<u8> = (0..n).map(|_| u8::from(rng.below(3) == 0)).collect();
        accepting[0] = 0;
        (table, accepting)
    }

    #[test]
    fn combined_by_class_equals_the_dense_concatenation() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..50 {
            let dfas: Vec<(Vec<u32>, Vec<u8>, u32)> = (0..1 + rng.below(5))
                .map(|_| {
                    let n = 1 + rng.below(6);
                    let (t, a) = random_dense(&mut rng, n);
                    (t, a, rng.below(n) as u32)
                })
                .collect();
            let classed: Vec<(ByteClasses, Vec<u8>)> = dfas
                .iter()
                .map(|(t, a, _)| {
                    let cl = ByteClasses::of_table(t, a.len());
                    let reduced = words(&cl.reduce(t));
                    (cl, reduced)
                })
                .collect();
            let terms: Vec<TerminalTable<'_>> = dfas
                .iter()
                .zip(&classed)
                .map(|((_, a, start), (cl, reduced))| TerminalTable {
                    map: &cl.map,
                    width: cl.count,
                    table: NeBytes(reduced),
                    accepting: a,
                    start: *start,
                })
                .collect();
            let got = combine(&terms).unwrap();
            // the dense concatenation, as Python's numpy hand-over made it
            let mut dense = vec![0u32; 256];
            let (mut acc, mut term_of, mut starts) = (vec![0u8], vec![-1i32], vec![]);
            for (t, (table, a, start)) in dfas.iter().enumerate() {
                let off = (acc.len() - 1) as u32;
                for s in 1..a.len() {
                    dense.extend(table[s * 256..(s + 1) * 256].iter().map(|&x| {
                        if x == 0 {
                            0
                        } else {
                            x + off
                        }
                    }));
                    acc.push(a[s]);
                    term_of.push(t as i32);
                }
                starts.push(if *start == 0 { 0 } else { start + off });
            }
            let n = acc.len();
            let want = ByteClasses::of_table(&dense, n);
            assert_eq!((got.map, got.count), (want.map, want.count));
            assert_eq!(got.table, want.reduce(&dense));
            assert_eq!(
                (got.accepting, got.term_of, got.starts),
                (acc, term_of, starts)
            );
        }
    }

    #[test]
    fn bad_tables_are_refused() {
        let map = [0u8; 256];
        let term = |table: &'static [u8], accepting: &'static [u8], start| TerminalTable {
            map: &map,
            width: 1,
            table: NeBytes(table),
            accepting,
            start,
        };
        let cases: [(TerminalTable<'_>, &str); 4] = [
            (term(&[0, 0, 0, 0], &[0, 0], 0), "do not fit"),
            (
                term(&[0, 0, 0, 0, 2, 0, 0, 0], &[0, 1], 1),
                "transition to state 2",
            ),
            (term(&[1, 0, 0, 0, 0, 0, 0, 0], &[0, 1], 1), "dead state"),
            (term(&[0, 0, 0, 0, 1, 0, 0, 0], &[0, 1], 2), "start state 2"),
        ];
        for (t, want) in cases {
            let err = combine(&[t]).unwrap_err();
            assert!(err.0.contains(want), "{err}");
        }
        let mut wide = [0u8; 256];
        wide[9] = 1;
        let err = combine(&[TerminalTable {
            map: &wide,
            width: 1,
            table: NeBytes(&[0, 0, 0, 0]),
            accepting: &[0],
            start: 0,
        }])
        .unwrap_err();
        assert!(err.0.contains("byte 9 has class 1 of 1"), "{err}");
    }

    #[test]
    fn no_terminals_is_the_dead_state_alone() {
        let got = combine(&[]).unwrap();
        assert_eq!((got.table, got.count), (vec![0], 1));
        assert_eq!((got.accepting, got.term_of), (vec![0], vec![-1]));
    }
}
