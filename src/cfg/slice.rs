//! The tokens of a string's body, set aside once per vocabulary (llguidance's "slices" do the
//! same). A lexer state inside a string that comes back to itself after every character of the
//! body, closing nothing on the way, takes every token made of whole body characters: what it
//! allows by itself ([`super::inside::Inside`]) is those tokens plus a walk of the trie of the other
//! tokens (on tekken, a tenth of the byte trie's nodes).

use super::inside::Inside;
use super::lexer::{LexCache, Lexer, NONE};
use std::sync::Arc;

use crate::classes::ByteClasses;
use crate::trie::TokenTrie;
use crate::vocab::Vocab;

/// The body tokens of a vocabulary, and the trie of the rest.
#[derive(Debug)]
pub struct Slice {
    /// one bit per token made of whole body characters
    words: Vec<u32>,
    /// the trie of the other tokens, and for each of its nodes the byte trie's node of its path
    rest: TokenTrie,
    node_of: Vec<u32>,
}

/// The body's characters as runs of byte ranges (well-formed UTF-8): every character but `"`,
/// `\`, DEL and the C0 controls (strings that take DEL take these too; llama.cpp's json.gbnf does
/// not take it).
const BODY: &[&[(u8, u8)]] = &[
    &[(0x20, 0x21)],
    &[(0x23, 0x5B)],
    &[(0x5D, 0x7E)],
    &[(0xC2, 0xDF), (0x80, 0xBF)],
    &[(0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)],
    &[(0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)],
    &[(0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)],
];

/// Whether `bytes` are whole body characters ([`BODY`]; `str::from_utf8` takes exactly the
/// well-formed UTF-8 those ranges spell).
fn is_body(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|s| {
        s.chars()
            .all(|c| c >= ' ' && c != '"' && c != '\\' && c != '\x7f')
    })
}

impl Slice {
    /// The slice of `vocab`, made once and kept with it (its store).
    pub fn of(vocab: &Vocab) -> Arc<Slice> {
        vocab.store(|_| Slice::build(vocab, &vocab.trie(&ByteClasses::identity().map)))
    }

    /// The number of body tokens.
    pub fn tokens(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The slice of `vocab`, whose byte trie is `trie`.
    pub fn build(vocab: &Vocab, trie: &TokenTrie) -> Slice {
        let mut words = vec![0u32; vocab.n_words()];
        let mut body = vec![false; vocab.size()];
        for t in vocab.normal_ids() {
            if vocab.normal_bytes(i64::from(t)).is_some_and(is_body) {
                body[t as usize] = true;
                words[t as usize >> 5] |= 1 << (t & 31);
            }
        }
        let (rest, node_of) = trie.subset(|t| !body[t as usize]);
        Slice {
            words,
            rest,
            node_of,
        }
    }

    /// Whether lexer state `lex` (no shadows) comes back to itself after every body character,
    /// its lexemes going on and closing nothing at every byte: then it takes every body token.
    pub fn takes(lc: &mut LexCache, lx: &Lexer, lex: u32) -> bool {
        if lc.states.values[lex as usize].1 != 0 {
            return false;
        }
        for chars in BODY {
            let mut at = vec![lex];
            for &(lo, hi) in chars.iter() {
                let mut next = Vec::new();
                for &s in &at {
                    for b in lo..=hi {
                        let st = lc.step(lx, s, b);
                        let step = &lc.steps[st];
                        if st == 0 || step.next == NONE || !step.closes.is_empty() {
                            return false;
                        }
                        next.push(step.next);
                    }
                }
                next.sort_unstable();
                next.dedup();
                at = next;
            }
            if at != [lex] {
                return false;
            }
        }
        true
    }

    /// [`Inside::of`] on the byte trie for a lexer state that [`Slice::takes`] the body: the body
    /// tokens, and a walk of the rest.
    pub fn inside(&self, lc: &mut LexCache, lx: &Lexer, reps: &[u8], lex: u32) -> Inside {
        let mut made = Inside::onto(lc, lx, &self.rest, reps, lex, self.words.clone());
        for c in &mut made.closes {
            c.0 = self.node_of[c.0 as usize];
        }
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// A JSON string's DFA (1 start, 2 body, 3 escape, 4 closed, 5..=11 inside a character), with
    /// `flips` of its transitions sent elsewhere at random.
    fn string_lexer(rng: &mut Rng, flips: usize) -> Lexer {
        let n = 12;
        let mut t = vec![0u32; n * 256];
        let mut set = |s: usize, lo: u8, hi: u8, to: u32| {
            for b in lo..=hi {
                t[s * 256 + usize::from(b)] = to;
            }
        };
        set(1, b'"', b'"', 2);
        for &(lo, hi) in &[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F)] {
            set(2, lo, hi, 2);
        }
        set(2, b'"', b'"', 4);
        set(2, b'\\', b'\\', 3);
        for &b in b"\"\\/bfnrt" {
            set(3, b, b, 2);
        }
        // 5: one continuation byte left, 6: two, 7: three; 8: after E0, 9: after ED, 10: after F0,
        // 11: after F4
        set(2, 0xC2, 0xDF, 5);
        set(5, 0x80, 0xBF, 2);
        set(2, 0xE1, 0xEC, 6);
        set(2, 0xEE, 0xEF, 6);
        set(6, 0x80, 0xBF, 5);
        set(2, 0xE0, 0xE0, 8);
        set(8, 0xA0, 0xBF, 5);
        set(2, 0xED, 0xED, 9);
        set(9, 0x80, 0x9F, 5);
        set(2, 0xF1, 0xF3, 7);
        set(7, 0x80, 0xBF, 6);
        set(2, 0xF0, 0xF0, 10);
        set(10, 0x90, 0xBF, 6);
        set(2, 0xF4, 0xF4, 11);
        set(11, 0x80, 0x8F, 6);
        for _ in 0..flips {
            // (half of them on the bytes of characters of several bytes)
            let b = if rng.below(2) == 0 {
                0x80 + rng.below(128)
            } else {
                rng.below(256)
            };
            let s = 2 + rng.below(n - 2);
            t[s * 256 + b] = rng.below(n) as u32;
        }
        let mut accepting = vec![false; n];
        accepting[4] = true;
        if flips > 0 && rng.below(3) == 0 {
            accepting[2 + rng.below(n - 2)] = true;
        }
        Lexer::new(t, accepting, vec![0; n], vec![1], vec![true], vec![false]).unwrap()
    }

    #[test]
    fn a_slice_walk_is_the_whole_walk() {
        // tokens of pieces of strings: body characters of 1 to 4 bytes, quotes, escapes, controls
        // and characters cut in two
        let pieces: Vec<&[u8]> = vec![
            b"a",
            b"b",
            b"\x7f",
            b"\"",
            b"\\",
            b"\n",
            "é".as_bytes(),
            "€".as_bytes(),
            "😀".as_bytes(),
            "\u{d7ff}".as_bytes(),
            "\u{800}".as_bytes(),
            "\u{40000}".as_bytes(),
            "\u{100000}".as_bytes(),
            b"\xc3",
            b"\x82\xac",
            b"\xed\xa0\x80",
            b"\xf4\x90",
        ];
        let mut rng = Rng(0x5eed_cafe_f00d_0001);
        let mut toks: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                (0..1 + rng.below(4))
                    .flat_map(|_| pieces[rng.below(pieces.len())].to_vec())
                    .collect()
            })
            .collect();
        toks.sort();
        toks.dedup();
        let n = toks.len();
        let vocab = Vocab::from_tokens(toks, &[], n).unwrap();
        let trie = TokenTrie::build(&vocab, &ByteClasses::identity().map);
        let slice = Slice::build(&vocab, &trie);
        let reps: Vec<u8> = (0..=255).collect();
        let (mut taken, mut refused) = (0, 0);
        for round in 0..400 {
            let flips = if round < 4 { 0 } else { 1 + rng.below(3) };
            let lx = string_lexer(&mut rng, flips);
            let mut lc = LexCache::new(&lx);
            for q in 1..lx.n_states() as u32 {
                let lex = lc.state(vec![q], 0);
                if !Slice::takes(&mut lc, &lx, lex) {
                    refused += 1;
                    continue;
                }
                taken += 1;
                let want = Inside::of(&mut lc, &lx, &trie, &reps, lex, vocab.n_words());
                let got = slice.inside(&mut lc, &lx, &reps, lex);
                assert_eq!(
                    (got.words, got.closes),
                    (want.words, want.closes),
                    "state {q}, round {round}"
                );
            }
        }
        assert!(taken > 20 && refused > 100, "{taken} {refused}");
    }
}
