//! The product of two byte DFAs (intersection, union, difference), numbered as
//! `grammarmask.automata.ops._pair_dfa` numbers it: the pairs found breadth first, each level's new
//! pairs in increasing order of `a_state * b_states + b_state`, then [`minimize_reduced`].

use super::minimize::minimize_reduced;
use super::Dfa;
use crate::classes::{ByteClasses, Cells};
use crate::error::{Error, Result};
use rustc_hash::FxHashMap as HashMap;

/// Which words of the two languages the product accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `L(a) & L(b)`
    Intersection,
    /// `L(a) | L(b)`
    Union,
    /// `L(a) - L(b)`
    Difference,
}

impl Op {
    fn accepts(self, a: bool, b: bool) -> bool {
        match self {
            Op::Intersection => a && b,
            Op::Union => a || b,
            Op::Difference => a && !b,
        }
    }
}

/// One operand: a dense table (`n * 256` cells), accepting flags and start.
pub struct Operand<'a, C: Cells + ?Sized> {
    /// The transition table.
    pub table: &'a C,
    /// Whether each state is final.
    pub accepting: &'a [bool],
    /// The initial state.
    pub start: u32,
}

/// The minimal DFA of `a op b` and its byte classes; an error when more than `limit` pairs are reached (checked after
/// each breadth-first level, as the Python code does).
pub fn product<C: Cells + ?Sized>(
    a: &Operand<'_, C>,
    b: &Operand<'_, C>,
    op: Op,
    limit: usize,
) -> Result<(Dfa, ByteClasses)> {
    let keep_half_dead = op != Op::Intersection;
    let ident = ByteClasses::identity().map;
    let ca = ByteClasses::of_classed_table(&ident, a.table, 256);
    let cb = ByteClasses::of_classed_table(&ident, b.table, 256);
    // joint classes numbered by (a's class, b's class) in increasing order
    let mut keys: Vec<u16> = (0..256)
        .map(|x| u16::from(ca.map[x]) * 256 + u16::from(cb.map[x]))
        .collect();
    let byte_key = keys.clone();
    keys.sort_unstable();
    keys.dedup();
    let k = keys.len();
    let mut map = [0u8; 256];
    let mut reps = vec![usize::MAX; k];
    for x in 0..256 {
        let c = keys
            .binary_search(&byte_key[x])
            .expect("every byte's key is listed");
        map[x] = c as u8;
        if reps[c] == usize::MAX {
            reps[c] = x;
        }
    }
    let nb = b.accepting.len() as u64;
    let start = u64::from(a.start) * nb + u64::from(b.start);
    if start == 0 || (!keep_half_dead && (a.start == 0 || b.start == 0)) {
        let d = Dfa::empty();
        let classes = d.classes();
        return Ok((d, classes));
    }
    let mut ids: HashMap<u64, u32> = HashMap::default();
    ids.insert(0, 0);
    ids.insert(start, 1);
    let mut codes: Vec<u64> = vec![0, start];
    let mut rows: Vec<u64> = vec![0; k]; // pair codes, row by row in id order
    let mut frontier: Vec<u64> = vec![start];
    let mut fresh: Vec<u64> = Vec::new();
    while !frontier.is_empty() {
        for &code in &frontier {
            let (x, y) = ((code / nb) as usize, (code % nb) as usize);
            for &byte in &reps {
                let nx = u64::from(a.table.cell(x * 256 + byte));
                let ny = u64::from(b.table.cell(y * 256 + byte));
                let next = if !keep_half_dead && (nx == 0 || ny == 0) {
                    0
                } else {
                    nx * nb + ny
                };
                rows.push(next);
                if !ids.contains_key(&next) {
                    fresh.push(next);
                }
            }
        }
        fresh.sort_unstable();
        fresh.dedup();
        for &code in &fresh {
            ids.insert(code, codes.len() as u32);
            codes.push(code);
        }
        if codes.len() > limit {
            return Err(Error::new(format!(
                "automaton product too large: more than {limit} states"
            )));
        }
        frontier = std::mem::take(&mut fresh);
    }
    let red: Vec<u32> = rows.iter().map(|c| ids[c]).collect();
    let accepting: Vec<bool> = codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let (x, y) = ((c / nb) as usize, (c % nb) as usize);
            i != 0 && op.accepts(a.accepting[x], b.accepting[y])
        })
        .collect();
    Ok(minimize_reduced(&red, k, &map, &accepting, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::strings::from_strings;

    fn words(d: &Dfa, max_len: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut todo = vec![(d.start, Vec::new())];
        while let Some((s, w)) = todo.pop() {
            if s == 0 {
                continue;
            }
            if d.accepting[s as usize] {
                out.push(w.clone());
            }
            if w.len() < max_len {
                for b in 0..256usize {
                    let t = d.next(s, b as u8);
                    if t != 0 {
                        let mut v = w.clone();
                        v.push(b as u8);
                        todo.push((t, v));
                    }
                }
            }
        }
        out.sort();
        out
    }

    fn run(a: &Dfa, b: &Dfa, op: Op) -> Dfa {
        let (a, b) = (&a.to_dense(), &b.to_dense());
        let x = Operand {
            table: &a.table[..],
            accepting: &a.accepting,
            start: a.start,
        };
        let y = Operand {
            table: &b.table[..],
            accepting: &b.accepting,
            start: b.start,
        };
        product(&x, &y, op, 1000).unwrap().0
    }

    #[test]
    fn set_operations_on_string_sets() {
        let a = from_strings(&[b"ab".to_vec(), b"abc".to_vec(), b"b".to_vec()]);
        let b = from_strings(&[b"abc".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(
            words(&run(&a, &b, Op::Intersection), 5),
            vec![b"abc".to_vec(), b"b".to_vec()]
        );
        assert_eq!(words(&run(&a, &b, Op::Difference), 5), vec![b"ab".to_vec()]);
        let all = vec![
            b"ab".to_vec(),
            b"abc".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
        ];
        assert_eq!(words(&run(&a, &b, Op::Union), 5), all);
        let none = run(&a, &from_strings(&[b"zz".to_vec()]), Op::Intersection);
        assert_eq!(none, Dfa::empty());
    }

    #[test]
    fn the_state_limit_is_an_error() {
        let a = from_strings(&[b"abcdef".to_vec()]).to_dense();
        let x = Operand {
            table: &a.table[..],
            accepting: &a.accepting,
            start: a.start,
        };
        let err = product(&x, &x, Op::Intersection, 3).unwrap_err();
        assert!(err.0.contains("more than 3 states"), "{err}");
    }
}
