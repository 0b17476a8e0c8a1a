//! The minimal DFA of a regular expression whose leaves are byte strings and small byte DFAs,
//! without a regex in between: GBNF's runs of regular items (`"{" ws`, a string with its escapes)
//! were printed as one Python regex and read back by `re`'s parser, whose tree was then turned into
//! a Thompson NFA in Python; that took 80% of a GBNF grammar's compile. Here the expression comes
//! as a small program (`grammarmask.ir.builder` writes it), each leaf DFA (a character class,
//! made once per process) is copied into a Thompson NFA as its states and byte ranges, and the NFA
//! goes through the same subset construction as a regex's ([`determinize`]).
//!
//! The program is a tree in prefix order, each node `[op, a, b, size, payload...]` with `size` the
//! node's length in words (so a node can be skipped or built again):
//! - [`LIT`]: the `a` bytes of the payload, one per word;
//! - [`PIECE`]: leaf DFA number `a`;
//! - [`CAT`] / [`ALT`]: the concatenation / union of the `a` child nodes of the payload;
//! - [`REP`]: the one child node repeated `a` to `b` times ([`UNBOUNDED`]: no upper bound).

use super::subset::{determinize, flatten, Nfa, Stop};
use super::Dfa;
use crate::classes::{ByteClasses, Cells};
use crate::error::{Error, Result};

/// `[LIT, n, 0, size, byte...]`: a byte string.
pub const LIT: u32 = 0;
/// `[PIECE, i, 0, 4]`: leaf DFA `i`.
pub const PIECE: u32 = 1;
/// `[CAT, n, 0, size, child...]`: the children one after another.
pub const CAT: u32 = 2;
/// `[ALT, n, 0, size, child...]`: any one of the children.
pub const ALT: u32 = 3;
/// `[REP, lo, hi, size, child]`: the child `lo` to `hi` times.
pub const REP: u32 = 4;
/// `hi` of a repetition without an upper bound.
pub const UNBOUNDED: u32 = u32::MAX;

/// Nodes nested deeper than this are not built here (the caller takes the regex path, which has
/// its own budget and words its refusal).
pub const MAX_DEPTH: usize = 200;

/// Why no DFA was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The NFA would pass this many states, or the program nests deeper than [`MAX_DEPTH`].
    Size(usize),
    /// The subset construction passed a bound.
    Stopped(Stop),
}

/// A leaf DFA as byte ranges: per state, `(lo, hi, target)` with `target` not dead.
pub struct Piece {
    ranges: Vec<Vec<(u32, u32, u32)>>,
    accepting: Vec<bool>,
    start: u32,
}

impl Piece {
    /// The ranges of a dense table (`n * 256` cells, checked by [`super::check`]).
    pub fn of_dense<C: Cells + ?Sized>(table: &C, accepting: &[bool], start: u32) -> Piece {
        let ranges = (0..accepting.len())
            .map(|s| {
                let mut row: Vec<(u32, u32, u32)> = Vec::new();
                for b in 0..256u32 {
                    let t = table.cell(s * 256 + b as usize);
                    if t == 0 {
                        continue;
                    }
                    match row.last_mut() {
                        Some(last) if last.1 + 1 == b && last.2 == t => last.1 = b,
                        _ => row.push((b, b, t)),
                    }
                }
                row
            })
            .collect();
        Piece {
            ranges,
            accepting: accepting.to_vec(),
            start,
        }
    }
}

/// The Thompson NFA under construction.
struct Arena<'a> {
    prog: &'a [u32],
    pieces: &'a [Piece],
    eps: Vec<Vec<u32>>,
    edges: Vec<Vec<(u32, u32, u32)>>,
    max_states: usize,
}

type Built = std::result::Result<(u32, u32), Failure>;

enum Failure {
    Malformed(String),
    Refused(Refusal),
}

impl Arena<'_> {
    fn state(&mut self) -> std::result::Result<u32, Failure> {
        if self.eps.len() >= self.max_states {
            return Err(Failure::Refused(Refusal::Size(self.max_states)));
        }
        self.eps.push(Vec::new());
        self.edges.push(Vec::new());
        Ok((self.eps.len() - 1) as u32)
    }

    fn link(&mut self, from: u32, to: u32) {
        self.eps[from as usize].push(to);
    }

    /// The node at `at`: its header, checked against the program's length.
    fn header(&self, at: usize) -> std::result::Result<[u32; 4], Failure> {
        match self.prog.get(at..at + 4) {
            Some(h) if h[3] >= 4 && at + h[3] as usize <= self.prog.len() => {
                Ok([h[0], h[1], h[2], h[3]])
            }
            _ => Err(Failure::Malformed(format!(
                "compose: the node at word {at} does not fit in the program"
            ))),
        }
    }

    /// A fresh copy of the node at `at`: its start and final states.
    fn build(&mut self, at: usize, depth: usize) -> Built {
        if depth > MAX_DEPTH {
            return Err(Failure::Refused(Refusal::Size(self.max_states)));
        }
        let [op, a, b, size] = self.header(at)?;
        let end = at + size as usize;
        let children = |this: &Self, count: u32| -> std::result::Result<Vec<usize>, Failure> {
            let mut out = Vec::new();
            let mut c = at + 4;
            for _ in 0..count {
                if c >= end {
                    return Err(Failure::Malformed(format!(
                        "compose: node at word {at} has fewer than {count} children"
                    )));
                }
                out.push(c);
                c += this.header(c)?[3] as usize;
            }
            if c != end {
                return Err(Failure::Malformed(format!(
                    "compose: node at word {at}: its children do not fill its {size} words"
                )));
            }
            Ok(out)
        };
        match op {
            LIT => {
                if size as usize != 4 + a as usize {
                    return Err(Failure::Malformed(format!(
                        "compose: literal at word {at} is not {a} bytes long"
                    )));
                }
                let first = self.state()?;
                let mut cur = first;
                for i in 0..a as usize {
                    let byte = self.prog[at + 4 + i];
                    if byte > 255 {
                        return Err(Failure::Malformed(format!(
                            "compose: literal at word {at} holds {byte}, not a byte"
                        )));
                    }
                    let next = self.state()?;
                    self.edges[cur as usize].push((byte, byte, next));
                    cur = next;
                }
                Ok((first, cur))
            }
            PIECE => {
                let piece = self.pieces.get(a as usize).ok_or_else(|| {
                    Failure::Malformed(format!("compose: no piece {a} (at word {at})"))
                })?;
                let n = piece.accepting.len();
                if self.eps.len() + n + 1 > self.max_states {
                    return Err(Failure::Refused(Refusal::Size(self.max_states)));
                }
                let base = self.eps.len() as u32;
                for s in 0..n {
                    self.eps.push(Vec::new());
                    let row = piece.ranges[s]
                        .iter()
                        .map(|&(lo, hi, t)| (lo, hi, base + t))
                        .collect();
                    self.edges.push(row);
                }
                let fin = self.state()?;
                for (s, &acc) in piece.accepting.iter().enumerate() {
                    if acc {
                        self.link(base + s as u32, fin);
                    }
                }
                Ok((base + piece.start, fin))
            }
            CAT => {
                let first = self.state()?;
                let mut cur = first;
                for c in children(self, a)? {
                    let (s, f) = self.build(c, depth + 1)?;
                    self.link(cur, s);
                    cur = f;
                }
                Ok((first, cur))
            }
            ALT => {
                let (first, fin) = (self.state()?, self.state()?);
                for c in children(self, a)? {
                    let (s, f) = self.build(c, depth + 1)?;
                    self.link(first, s);
                    self.link(f, fin);
                }
                Ok((first, fin))
            }
            REP => {
                let child = children(self, 1)?[0];
                if b != UNBOUNDED && b < a {
                    return Err(Failure::Malformed(format!(
                        "compose: repetition at word {at} from {a} to {b} times"
                    )));
                }
                // lo copies in a row, then a loop (unbounded) or hi - lo nested options; every copy
                // takes states, so the state bound also bounds the copies
                let first = self.state()?;
                let mut cur = first;
                for _ in 0..a {
                    let (s, f) = self.build(child, depth + 1)?;
                    self.link(cur, s);
                    cur = f;
                }
                let fin = self.state()?;
                if b == UNBOUNDED {
                    let (s, f) = self.build(child, depth + 1)?;
                    self.link(cur, s);
                    self.link(f, s);
                    self.link(f, fin);
                    self.link(cur, fin);
                    return Ok((first, fin));
                }
                for _ in a..b {
                    let (s, f) = self.build(child, depth + 1)?;
                    self.link(cur, s);
                    self.link(cur, fin);
                    cur = f;
                }
                self.link(cur, fin);
                Ok((first, fin))
            }
            _ => Err(Failure::Malformed(format!(
                "compose: unknown operation {op} at word {at}"
            ))),
        }
    }
}

/// The minimal DFA of `prog` over `pieces` (and its byte classes), or why it was not made: an
/// NFA of more than `max_nfa` states, a subset construction past `max_states` states or
/// `max_work` (as [`determinize`]). A malformed program is an [`Error`].
pub fn compose(
    prog: &[u32],
    pieces: &[Piece],
    max_nfa: usize,
    max_states: usize,
    max_work: Option<usize>,
) -> Result<std::result::Result<(Dfa, ByteClasses), Refusal>> {
    for (i, p) in pieces.iter().enumerate() {
        let n = p.accepting.len() as u32;
        let bad = p.start >= n || p.ranges.iter().flatten().any(|&(_, _, t)| t >= n);
        if bad {
            return Err(Error::new(format!("compose: piece {i} is malformed")));
        }
    }
    let mut arena = Arena {
        prog,
        pieces,
        eps: Vec::new(),
        edges: Vec::new(),
        max_states: max_nfa,
    };
    let (start, fin) = match arena.build(0, 0) {
        Ok(sf) => sf,
        Err(Failure::Malformed(m)) => return Err(Error::new(m)),
        Err(Failure::Refused(r)) => return Ok(Err(r)),
    };
    if arena.header(0).ok().map(|h| h[3] as usize) != Some(prog.len()) {
        return Err(Error::new("compose: the program holds more than one node"));
    }
    let (eps_ptr, eps) = flatten(&arena.eps);
    let (edge_ptr, edges) = flatten(&arena.edges);
    let assert_ptr = vec![0u32; arena.eps.len() + 1];
    let nfa = Nfa {
        eps_ptr: &eps_ptr,
        eps: &eps,
        edge_ptr: &edge_ptr,
        edges: &edges,
        assert_ptr: &assert_ptr,
        asserts: &[],
    };
    Ok(determinize(&nfa, start, fin, max_states, max_work).map_err(Refusal::Stopped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::strings::from_strings;

    fn matches(d: &Dfa, w: &[u8]) -> bool {
        let mut s = d.start;
        for &b in w {
            s = d.next(s, b);
        }
        d.accepting[s as usize]
    }

    fn lit(s: &[u8]) -> Vec<u32> {
        let mut v = vec![LIT, s.len() as u32, 0, 4 + s.len() as u32];
        v.extend(s.iter().map(|&b| u32::from(b)));
        v
    }

    fn node(op: u32, a: u32, b: u32, kids: &[Vec<u32>]) -> Vec<u32> {
        let body: Vec<u32> = kids.concat();
        let mut v = vec![op, a, b, 4 + body.len() as u32];
        v.extend(body);
        v
    }

    fn piece(strings: &[&[u8]]) -> Piece {
        let d = from_strings(strings).to_dense();
        Piece::of_dense(&d.table[..], &d.accepting, d.start)
    }

    fn run(prog: &[u32], pieces: &[Piece]) -> Dfa {
        compose(prog, pieces, 10_000, 10_000, None)
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn an_object_opening_then_optional_space() {
        // "{" ( "" | " " | "\n" [ \t]{0,2} )
        let ws = node(
            ALT,
            3,
            0,
            &[
                lit(b""),
                lit(b" "),
                node(
                    CAT,
                    2,
                    0,
                    &[lit(b"\n"), node(REP, 0, 2, &[vec![PIECE, 0, 0, 4]])],
                ),
            ],
        );
        let prog = node(CAT, 2, 0, &[lit(b"{"), ws]);
        let d = run(&prog, &[piece(&[b" ", b"\t"])]);
        for yes in [&b"{"[..], b"{ ", b"{\n", b"{\n\t", b"{\n \t"] {
            assert!(matches(&d, yes), "{yes:?}");
        }
        for no in [&b""[..], b"{  ", b"{\n\t\t\t", b" {", b"{\t"] {
            assert!(!matches(&d, no), "{no:?}");
        }
    }

    #[test]
    fn repetitions_bounded_unbounded_and_empty() {
        let ab = || vec![PIECE, 0, 0, 4];
        let pieces = [piece(&[b"a", b"bb"])];
        let plus = run(&node(REP, 1, UNBOUNDED, &[ab()]), &pieces);
        assert!(!matches(&plus, b"") && matches(&plus, b"abba") && !matches(&plus, b"ab"));
        let two_three = run(&node(REP, 2, 3, &[ab()]), &pieces);
        assert!(!matches(&two_three, b"a") && matches(&two_three, b"abb"));
        assert!(matches(&two_three, b"aaa") && !matches(&two_three, b"aaaa"));
        let none = run(&node(REP, 0, 0, &[ab()]), &pieces);
        assert!(matches(&none, b"") && !matches(&none, b"a"));
        let nothing = run(&node(ALT, 0, 0, &[]), &pieces);
        assert_eq!(nothing.start, 0);
    }

    #[test]
    fn malformed_programs_are_errors_and_large_ones_refused() {
        let pieces = [piece(&[b"a"])];
        let bad: [&[u32]; 6] = [
            &[],
            &[LIT, 2, 0, 5, 97],
            &[PIECE, 1, 0, 4],
            &[CAT, 2, 0, 8, PIECE, 0, 0, 4],
            &[9, 0, 0, 4],
            &[REP, 3, 2, 8, PIECE, 0, 0, 4],
        ];
        for prog in bad {
            assert!(compose(prog, &pieces, 100, 100, None).is_err(), "{prog:?}");
        }
        let trailing = [PIECE, 0, 0, 4, PIECE, 0, 0, 4];
        assert!(compose(&trailing, &pieces, 100, 100, None).is_err());
        let long = node(REP, 1000, 1000, &[vec![PIECE, 0, 0, 4]]);
        let got = compose(&long, &pieces, 100, 100, None).unwrap();
        assert_eq!(got.err(), Some(Refusal::Size(100)));
    }
}
