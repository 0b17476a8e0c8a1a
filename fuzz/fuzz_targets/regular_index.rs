//! The regular index on an arbitrary small vocabulary and automaton: construction refuses bad
//! tables with an error (never a panic), and along an arbitrary token stream every mask, next state
//! and forced byte run agrees with running the automaton over each token's bytes. One input in five
//! goes instead to the DFA of a regular expression over strings and small DFAs (`compose`, GBNF's
//! runs): malformed programs are errors, and a DFA made accepts what a backtracking matcher of the
//! program accepts, on every string of a, b, c up to 4 bytes.
#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;

use _engine::automata::compose::{compose, Piece, ALT, CAT, LIT, PIECE, REP, UNBOUNDED};
use _engine::regular::{Dfa, RegularIndex};
use _engine::vocab::Vocab;
use libfuzzer_sys::fuzz_target;

#[path = "input.rs"]
mod input;
use input::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    if inp.below(5) == 0 {
        composed(&mut inp);
        return;
    }
    // a vocabulary of up to 24 tokens over the bytes a..d (and one other byte), some special
    let n_tokens = 1 + inp.below(24);
    let tokens: Vec<Vec<u8>> = (0..n_tokens)
        .map(|_| {
            (0..inp.below(5))
                .map(|_| b"abcd\xc3"[inp.below(5)])
                .collect()
        })
        .collect();
    let specials: Vec<i64> = (0..inp.below(3))
        .map(|_| inp.below(n_tokens) as i64)
        .collect();
    let size = n_tokens + inp.below(40);
    let Ok(vocab) = Vocab::from_tokens(tokens.clone(), &specials, size) else {
        return;
    };
    let vocab = Arc::new(vocab);
    // an automaton of up to 6 states; row 0 is usually dead, and bad tables must be refused
    let n = 1 + inp.below(6);
    let mut table = vec![0u32; n * 256];
    for s in 0..n {
        for b in [b'a', b'b', b'c', b'd', 0xc3] {
            if s > 0 || inp.below(16) == 0 {
                let range = n + usize::from(inp.below(8) == 0); // sometimes one past the end
                table[s * 256 + usize::from(b)] = inp.below(range) as u32;
            }
        }
    }
    let accepting: Vec<bool> = (0..n)
        .map(|s| (s > 0 || inp.below(16) == 0) && inp.below(2) == 1)
        .collect();
    let start = inp.below(n + 1);
    let Ok(dfa) = Dfa::new(table, accepting, start) else {
        return;
    };
    let index = RegularIndex::new(Arc::clone(&vocab), dfa, 1 + inp.below(3));
    let run = |mut s: u32, bytes: &[u8]| {
        for &b in bytes {
            s = index.dfa().run(s, &[b]);
        }
        s
    };
    let mut state = i64::from(index.dfa().start());
    for _ in 0..8 {
        let words = index.mask(state).expect("a state the index gave out");
        for t in 0..size {
            let legal = words[t / 32] >> (t % 32) & 1 == 1;
            let want = match vocab.normal_bytes(t as i64) {
                Some(b) if state != 0 => run(state as u32, b) != 0,
                _ => false,
            };
            assert_eq!(legal, want, "token {t} in state {state}");
        }
        let forced = index.forced_bytes(state).expect("forced bytes");
        if !forced.is_empty() {
            assert_ne!(
                run(state as u32, &forced),
                0,
                "forced bytes lead to the dead state"
            );
        }
        let token = inp.below(size + 2) as i64 - 1; // -1 and size: out of range, never legal
        let next = index.next_state(state, token).expect("next state");
        let legal = token >= 0
            && (token as usize) < size
            && words[token as usize / 32] >> (token % 32) & 1 == 1;
        assert_eq!(next != 0, legal, "token {token} in state {state}");
        if next != 0 {
            state = i64::from(next);
        }
    }
    assert!(index.mask(-1).is_err() && index.mask(index.dfa().n_states() as i64).is_err());
});

/// A small DFA over a..c: (table, accepting, start); targets sometimes out of range.
type Small = (Vec<u32>, Vec<bool>, u32);

fn small_dfa(inp: &mut Input<'_>) -> Small {
    let n = 1 + inp.below(4);
    let mut table = vec![0u32; n * 256];
    for s in 1..n {
        for b in [b'a', b'b', b'c'] {
            let range = n + usize::from(inp.below(16) == 0);
            table[s * 256 + usize::from(b)] = inp.below(range) as u32;
        }
    }
    let accepting = (0..n).map(|s| s > 0 && inp.below(2) == 1).collect();
    (table, accepting, inp.below(n) as u32)
}

/// A program node of depth at most `depth` (prefix order, sizes filled in).
fn node(inp: &mut Input<'_>, pieces: usize, depth: usize, out: &mut Vec<u32>) {
    let at = out.len();
    let op = if depth == 0 {
        inp.below(2) as u32
    } else {
        inp.below(5) as u32
    };
    match op {
        LIT => {
            let n = inp.below(3);
            out.extend([LIT, n as u32, 0, 4 + n as u32]);
            out.extend((0..n).map(|_| u32::from(b"abc"[inp.below(3)])));
        }
        PIECE => out.extend([PIECE, inp.below(pieces + 1) as u32, 0, 4]),
        CAT | ALT => {
            let n = inp.below(4);
            out.extend([op, n as u32, 0, 0]);
            for _ in 0..n {
                node(inp, pieces, depth - 1, out);
            }
        }
        _ => {
            let lo = inp.below(3) as u32;
            let hi = match inp.below(4) {
                0 => UNBOUNDED,
                k => lo + k as u32 - 1,
            };
            out.extend([REP, lo, hi, 0]);
            node(inp, pieces, depth - 1, out);
        }
    }
    if op == CAT || op == ALT || op == REP {
        out[at + 3] = (out.len() - at) as u32;
    }
}

/// The positions where node `at` of `prog` can end a match of `s` begun at `i` (backtracking).
fn ends(prog: &[u32], at: usize, pieces: &[Small], s: &[u8], i: usize) -> BTreeSet<usize> {
    let (op, a, b) = (prog[at], prog[at + 1], prog[at + 2]);
    let mut out = BTreeSet::new();
    match op {
        LIT => {
            let lit: Vec<u8> = prog[at + 4..at + 4 + a as usize]
                .iter()
                .map(|&x| x as u8)
                .collect();
            if s[i..].starts_with(&lit) {
                out.insert(i + lit.len());
            }
        }
        PIECE => {
            let (table, accepting, start) = &pieces[a as usize];
            let mut q = *start as usize;
            if accepting[q] {
                out.insert(i);
            }
            for (j, &byte) in s[i..].iter().enumerate() {
                q = table[q * 256 + usize::from(byte)] as usize;
                if q == 0 {
                    break;
                }
                if accepting[q] {
                    out.insert(i + j + 1);
                }
            }
        }
        CAT | ALT => {
            let mut kids = Vec::new();
            let mut c = at + 4;
            for _ in 0..a {
                kids.push(c);
                c += prog[c + 3] as usize;
            }
            if op == ALT {
                for k in kids {
                    out.extend(ends(prog, k, pieces, s, i));
                }
            } else {
                let mut cur = BTreeSet::from([i]);
                for k in kids {
                    cur = cur
                        .iter()
                        .flat_map(|&p| ends(prog, k, pieces, s, p))
                        .collect();
                }
                out = cur;
            }
        }
        _ => {
            let child = at + 4;
            let mut cur = BTreeSet::from([i]);
            let cap = if b == UNBOUNDED {
                a as usize + s.len() + 1
            } else {
                b as usize
            };
            if a == 0 {
                out.insert(i);
            }
            for k in 1..=cap {
                cur = cur
                    .iter()
                    .flat_map(|&p| ends(prog, child, pieces, s, p))
                    .collect();
                if k >= a as usize {
                    out.extend(cur.iter().copied());
                }
            }
        }
    }
    out
}

fn composed(inp: &mut Input<'_>) {
    let smalls: Vec<Small> = (0..inp.below(3)).map(|_| small_dfa(inp)).collect();
    let mut prog = Vec::new();
    node(inp, smalls.len(), 3, &mut prog);
    if inp.below(8) == 0 && !prog.is_empty() {
        let k = inp.below(prog.len());
        prog[k] = inp.below(12) as u32; // a corrupted word: an error or another program
    }
    let pieces: Vec<Piece> = smalls
        .iter()
        .map(|(t, a, s)| Piece::of_dense(&t[..], a, *s))
        .collect();
    let got = compose(&prog, &pieces, 400, 200, Some(4000));
    let Ok(Ok((dfa, _))) = got else {
        return; // a malformed program (an error) or past a bound (a refusal): neither a panic
    };
    // the program was well formed: every piece it names exists and is in range
    let mut words: Vec<Vec<u8>> = vec![vec![]];
    for len in 1..=4 {
        let mut next = Vec::new();
        for w in words.iter().filter(|w| w.len() == len - 1) {
            for &b in b"abc" {
                let mut x = w.clone();
                x.push(b);
                next.push(x);
            }
        }
        words.extend(next);
    }
    for w in words {
        let mut q = dfa.start;
        for &b in &w {
            q = dfa.next(q, b);
        }
        let want = ends(&prog, 0, &smalls, &w, 0).contains(&w.len());
        assert_eq!(dfa.accepting[q as usize], want, "{w:?} in {prog:?}");
    }
}
