//! The tokens of a string's body, set aside once per vocabulary (llguidance's "slices" do the
//! same). A lexer state inside a string that comes back to itself after every character of the
//! body, closing nothing on the way, takes every token made of whole body characters: what it
//! allows by itself ([`super::inside::Inside`]) is those tokens plus a walk of the trie of the other
//! tokens (on tekken, a tenth of the byte trie's nodes) from where they leave the body ([`Front`]).
//! A string of bounded length is the same up
//! to its bound: its lexer state takes every body token of at most as many characters as it has
//! left ([`Slice::body_run`]). A body is every character but some ASCII ones: a JSON string's
//! leaves out the quote, the backslash, DEL and the controls ([`JSON_EXCLUDED`]), a Lark grammar's
//! `/'[^']*'/` the quote alone ([`other_bodies`]).

use super::inside::{Inside, Scan};
use super::lexer::{LexCache, Lexer, NONE};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap as HashMap;

use crate::classes::ByteClasses;
use crate::packed::Packed;
use crate::trie::TokenTrie;
use crate::vocab::{lock, Vocab};

/// A set of ASCII bytes: bit `b` for byte `b`.
pub type Ascii = u128;

/// The ASCII bytes a JSON string's body leaves out: `"`, `\`, DEL and the C0 controls (strings
/// that take DEL take these too; llama.cpp's json.gbnf does not take it).
pub const JSON_EXCLUDED: Ascii = ((1 << 0x20) - 1) | (1 << b'"') | (1 << b'\\') | (1 << 0x7F);

/// The body tokens of a vocabulary, and the trie of the rest.
#[derive(Debug)]
pub struct Slice {
    /// the ASCII bytes the body leaves out
    excluded: Ascii,
    /// one bit per token made of whole body characters
    words: Vec<u32>,
    /// the trie of the other tokens, and for each of its nodes the byte trie's node of its path
    rest: TokenTrie,
    node_of: Vec<u32>,
    /// the body tokens by their number of characters: `by_chars[chars_ptr[c] .. chars_ptr[c + 1]]`
    /// have `c`
    by_chars: Vec<u32>,
    chars_ptr: Vec<u32>,
    /// where the nodes of `rest` part from the body ([`Front`])
    front: Front,
}

/// Where the paths of a slice's other tokens part from the body. A node of the rest is on the
/// body when its path is body characters and then the first bytes of one, or none
/// ([`body_prefix`]). A lexer state that comes back to itself after every body character
/// ([`Slice::takes`]) is itself at the nodes on the body at the end of a character, and never
/// dies or closes at the others: so a walk of the rest from it need only start at the first node
/// off the body of each path (a JSON string's state walked 4,600 nodes of tekken's rest, of which
/// about 800 are such starts), and take the tokens of the nodes on the body unwalked.
#[derive(Debug, Default)]
struct Front {
    /// the first nodes off the body, in preorder, with the first bytes of a character their
    /// parent's path ends with (`.2` of them)
    starts: Vec<(u32, [u8; 3], u8)>,
    /// the tokens of the nodes on the body
    tokens: Vec<u32>,
}

impl Front {
    /// Where the nodes of `rest` part from the body that leaves out the ASCII bytes `excluded`.
    fn of(rest: &TokenTrie, excluded: Ascii) -> Front {
        let mut front = Front::default();
        // per depth, the first bytes of a character the path there ends with (None: off the body)
        let mut on: Vec<Option<([u8; 3], u8)>> = vec![None; rest.max_depth + 1];
        on[0] = Some(([0; 3], 0));
        for i in 1..rest.n_nodes() {
            let d = rest.depth[i] as usize;
            on[d] = None;
            let Some(parent) = on[d - 1] else {
                continue;
            };
            match body_prefix(parent, rest.label[i], excluded) {
                Some(here) => {
                    on[d] = Some(here);
                    front.tokens.extend_from_slice(rest.tokens(i));
                }
                None => front.starts.push((i as u32, parent.0, parent.1)),
            }
        }
        front
    }
}

/// The first bytes of a body character (`.1` of `.0`) that `partial` and then `b` end with, or
/// None when they are not a body character's first bytes nor a character and nothing more.
fn body_prefix(partial: ([u8; 3], u8), b: u8, excluded: Ascii) -> Option<([u8; 3], u8)> {
    let (mut bytes, n) = partial;
    if n == 0 && b < 0x80 {
        return (excluded & (1 << b) == 0).then_some(([0; 3], 0));
    }
    let first = if n == 0 { b } else { bytes[0] };
    let form = MULTI_BYTE
        .iter()
        .find(|f| (f[0].0..=f[0].1).contains(&first))?;
    let (lo, hi) = form[usize::from(n)];
    if !(lo..=hi).contains(&b) {
        return None;
    }
    if usize::from(n) + 1 == form.len() {
        return Some(([0; 3], 0));
    }
    bytes[usize::from(n)] = b;
    Some((bytes, n + 1))
}

/// The characters of more than one byte as runs of byte ranges (well-formed UTF-8).
const MULTI_BYTE: &[&[(u8, u8)]] = &[
    &[(0xC2, 0xDF), (0x80, 0xBF)],
    &[(0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)],
    &[(0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)],
    &[(0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)],
];

/// The characters of the body that leaves out the ASCII bytes `excluded`, as runs of byte ranges:
/// the runs of the other ASCII bytes, one byte each, then the characters of more than one byte.
fn body_forms(excluded: Ascii) -> Vec<Vec<(u8, u8)>> {
    let mut forms: Vec<Vec<(u8, u8)>> = Vec::new();
    let mut b = 0u8;
    while b < 0x80 {
        if excluded & (1 << b) != 0 {
            b += 1;
            continue;
        }
        let lo = b;
        while b < 0x80 && excluded & (1 << b) == 0 {
            b += 1;
        }
        forms.push(vec![(lo, b - 1)]);
    }
    forms.extend(MULTI_BYTE.iter().map(|f| f.to_vec()));
    forms
}

/// Whether `bytes` are whole characters of the body that leaves out the ASCII bytes `excluded`:
/// well-formed UTF-8 (what `str::from_utf8` takes, as [`MULTI_BYTE`] spells it) with none of them
/// (a byte under 0x80 of well-formed UTF-8 is an ASCII character).
fn is_body(bytes: &[u8], excluded: Ascii) -> bool {
    let mut ascii = true;
    for &b in bytes {
        if b >= 0x80 {
            ascii = false;
        } else if excluded & (1 << b) != 0 {
            return false;
        }
    }
    ascii || std::str::from_utf8(bytes).is_ok()
}

/// A body's characters ([`body_forms`]) in one lexer's byte classes (per character form, per byte,
/// the distinct classes of its range with a byte of each: the lexer steps every byte of a class
/// alike), and the DFA states a body character leads to, as far as asked ([`Slice::body_run`]).
/// Stepping the ranges byte by byte, ~1,200 bytes per DFA state with a vector made per range,
/// took 2.6 M instructions to follow a string of `maxLength` 80 from its start.
#[derive(Debug)]
pub struct BodyChars {
    forms: Vec<Vec<Vec<(u8, u8)>>>,
    next: HashMap<u32, Option<u32>>,
}

/// DFA states whose step by a body character [`BodyChars`] keeps (then it forgets them all).
const BODY_NEXT: usize = 1 << 16;

impl BodyChars {
    /// The characters of the body that leaves out the ASCII bytes `excluded`, in `lx`'s classes.
    pub fn of(lx: &Lexer, excluded: Ascii) -> Self {
        let forms = body_forms(excluded)
            .iter()
            .map(|chars| {
                chars
                    .iter()
                    .map(|&(lo, hi)| {
                        let mut seen = [false; 256];
                        (lo..=hi)
                            .filter_map(|b| {
                                let c = lx.class_of(b);
                                (!std::mem::replace(&mut seen[usize::from(c)], true))
                                    .then_some((c, b))
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        BodyChars {
            forms,
            next: HashMap::default(),
        }
    }
}

/// A slice once made (a thread of its own makes it: [`Slice::excluding`]).
pub type SliceCell = Arc<OnceLock<Arc<Slice>>>;

/// A vocabulary's slices, by the ASCII bytes their body leaves out (its store holds them): each
/// made once, JSON's at once, the others in a thread of their own ([`Slice::excluding`]).
#[derive(Debug, Default)]
struct Slices(Mutex<HashMap<Ascii, SliceCell>>);

/// The most slices a vocabulary keeps besides JSON's (a few hundred KB to a MB each on tekken);
/// past it, a grammar's other bodies are walked as any lexer state is.
const OTHER_SLICES: usize = 8;

/// Bodies of a lexer other than a JSON string's, by the ASCII bytes they leave out: the loop sets
/// ([`Lexer::loops`]) that hold all but at most [`OTHER_EXCLUDED`] ASCII bytes (`/'[^']*'/`,
/// `/"[^"\\]*"/`; not a name's letters, whose states refuse most characters). Whether a lexer
/// state takes the body is asked when it is met ([`Slice::body_run`]: a comment's `/#[^\n]*/` is
/// found here, but its loop state accepts, which that refuses).
pub fn other_bodies(lx: &Lexer) -> Vec<Ascii> {
    let mut found = Vec::new();
    for set in lx.loops() {
        let in_set = |b: u8| {
            let c = usize::from(lx.class_of(b));
            set[c / 64] & (1 << (c % 64)) != 0
        };
        let excluded: Ascii = (0..0x80u8)
            .filter(|&b| !in_set(b))
            .fold(0, |e, b| e | 1 << b);
        if excluded.count_ones() <= OTHER_EXCLUDED
            && excluded != JSON_EXCLUDED
            && !found.contains(&excluded)
        {
            found.push(excluded);
        }
    }
    found
}

/// The most ASCII bytes a body other than JSON's leaves out ([`other_bodies`]).
const OTHER_EXCLUDED: u32 = 16;

impl Slice {
    /// The slice of a JSON string's body for `vocab`, made once and kept with it (its store).
    pub fn of(vocab: &Vocab) -> Arc<Slice> {
        let cell = Slice::cell(vocab, JSON_EXCLUDED).expect("the JSON body's slice is always kept");
        Arc::clone(cell.get_or_init(|| Slice::on_byte_trie(vocab, JSON_EXCLUDED)))
    }

    /// The slice of the body that leaves out the ASCII bytes `excluded`, once made: made once per
    /// vocabulary, by a thread of its own started by the first to ask (10-20 ms on tekken, which
    /// no compile waits for: a lexer state met before it is made is walked as any other). None
    /// when the vocabulary keeps [`OTHER_SLICES`] others already.
    pub fn excluding(vocab: &Arc<Vocab>, excluded: Ascii) -> Option<SliceCell> {
        let cell = Slice::cell(vocab, excluded)?;
        if cell.get().is_none() {
            let (vocab, made) = (Arc::clone(vocab), Arc::clone(&cell));
            // (a thread that could not start leaves the cell empty: the body is walked)
            let _ = std::thread::Builder::new()
                .name("grammarmask-slice".into())
                .spawn(move || {
                    made.get_or_init(|| Slice::on_byte_trie(&vocab, excluded));
                });
        }
        Some(cell)
    }

    /// Whether `vocab`'s slice of the body that leaves out the ASCII bytes `excluded` is made.
    pub fn made(vocab: &Vocab, excluded: Ascii) -> bool {
        let slices = vocab.store(|_| Slices::default());
        let kept = lock(&slices.0);
        kept.get(&excluded).is_some_and(|cell| cell.get().is_some())
    }

    /// The cell of the slice that leaves out `excluded` in `vocab`'s store, new if need be (None:
    /// [`OTHER_SLICES`] others are kept).
    fn cell(vocab: &Vocab, excluded: Ascii) -> Option<SliceCell> {
        let slices = vocab.store(|_| Slices::default());
        let mut kept = lock(&slices.0);
        if let Some(hit) = kept.get(&excluded) {
            return Some(Arc::clone(hit));
        }
        let others = kept.keys().filter(|&&e| e != JSON_EXCLUDED).count();
        if excluded != JSON_EXCLUDED && others >= OTHER_SLICES {
            return None;
        }
        let cell = Arc::new(OnceLock::new());
        kept.insert(excluded, Arc::clone(&cell));
        Some(cell)
    }

    /// [`Slice::build`] on `vocab`'s byte trie.
    fn on_byte_trie(vocab: &Vocab, excluded: Ascii) -> Arc<Slice> {
        let trie = vocab.trie(&ByteClasses::identity().map);
        Arc::new(Slice::build(vocab, &trie, excluded))
    }

    /// The characters of this slice's body in `lx`'s classes.
    pub fn chars(&self, lx: &Lexer) -> BodyChars {
        BodyChars::of(lx, self.excluded)
    }

    /// The number of body tokens.
    pub fn tokens(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The slice of `vocab`, whose byte trie is `trie`, of the body that leaves out the ASCII bytes
    /// `excluded`.
    pub fn build(vocab: &Vocab, trie: &TokenTrie, excluded: Ascii) -> Slice {
        let mut words = vec![0u32; vocab.n_words()];
        let mut body = vec![false; vocab.size()];
        // (chars, token) in token order, then by chars (a counting sort: tokens in order within)
        let mut counted: Vec<(u32, u32)> = Vec::new();
        for t in vocab.normal_ids() {
            let Some(bytes) = vocab.normal_bytes(i64::from(t)) else {
                continue;
            };
            if is_body(bytes, excluded) {
                body[t as usize] = true;
                words[t as usize >> 5] |= 1 << (t & 31);
                // (is_body: well-formed UTF-8, a character per byte that is no continuation byte)
                let chars = bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count();
                counted.push((chars as u32, t));
            }
        }
        let most = counted.iter().map(|c| c.0 as usize).max().unwrap_or(0);
        let mut chars_ptr = vec![0u32; most + 2];
        for &(c, _) in &counted {
            chars_ptr[c as usize + 1] += 1;
        }
        for c in 0..=most {
            chars_ptr[c + 1] += chars_ptr[c];
        }
        let mut by_chars = vec![0u32; counted.len()];
        let mut at = chars_ptr.clone();
        for (c, t) in counted {
            by_chars[at[c as usize] as usize] = t;
            at[c as usize] += 1;
        }
        let (rest, node_of) = trie.subset(|t| !body[t as usize]);
        let front = Front::of(&rest, excluded);
        Slice {
            excluded,
            words,
            rest,
            node_of,
            by_chars,
            chars_ptr,
            front,
        }
    }

    /// The most characters a body token has.
    fn most_chars(&self) -> usize {
        self.chars_ptr.len() - 2
    }

    /// Whether lexer state `lex` (no shadows) comes back to itself after every body character,
    /// its lexemes going on and closing nothing at every byte: then it takes every body token.
    /// `body`: [`BodyChars::of`] the lexer `lx`.
    pub fn takes(lc: &mut LexCache, lx: &Lexer, lex: u32, body: &BodyChars) -> bool {
        if lc.states.values[lex as usize].1 != 0 {
            return false;
        }
        let (mut at, mut next) = (Vec::new(), Vec::new());
        for form in &body.forms {
            at.clear();
            at.push(lex);
            for position in form {
                next.clear();
                for &s in &at {
                    for &(_, b) in position {
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
                std::mem::swap(&mut at, &mut next);
            }
            if at != [lex] {
                return false;
            }
        }
        true
    }

    /// How many body characters lexer state `lex` takes in a row, when it has one lexeme in
    /// progress and no shadows: every body character takes its DFA state to one same state, the
    /// lexeme going on (it can still finish) and closing nothing, and so on from there, until a
    /// state that every body character kills (`usize::MAX`: more than any body token has). A
    /// string of `maxLength` n is taken n characters from its start, whatever its `minLength`.
    /// None when `lex` is not such a state, or takes none. Followed in the lexer's DFA, not
    /// through lexer states (a string of `maxLength` 80 has 640 DFA states: 1.2 ms to make
    /// as many lexer states, their steps and signatures); `body` ([`BodyChars::of`] the lexer
    /// `lx`) keeps the DFA states met.
    pub fn body_run(
        &self,
        lc: &mut LexCache,
        lx: &Lexer,
        lex: u32,
        body: &mut BodyChars,
    ) -> Option<usize> {
        let (pend, sh) = &lc.states.values[lex as usize];
        let (&[q], 0) = (pend.as_slice(), *sh) else {
            return None;
        };
        if body.next.len() > BODY_NEXT {
            body.next.clear();
        }
        let mut at = q;
        for n in 0..=self.most_chars() {
            let to = match body.next.get(&at) {
                Some(&hit) => hit,
                None => {
                    let made = Slice::after_body_char(lc, lx, &body.forms, at);
                    body.next.insert(at, made);
                    made
                }
            };
            match to {
                Some(to) if to == at => return Some(usize::MAX),
                Some(to) => at = to,
                None if n == 0 => return None,
                None => return Slice::dies_on_body(lx, &body.forms, at).then_some(n),
            }
        }
        Some(usize::MAX)
    }

    /// The one DFA state every body character (`forms`: [`BodyChars`]) takes DFA state `q` to,
    /// with a lexeme that can still finish and does not close at any of its bytes (None: there is
    /// no such state).
    fn after_body_char(
        lc: &mut LexCache,
        lx: &Lexer,
        forms: &[Vec<Vec<(u8, u8)>>],
        q: u32,
    ) -> Option<u32> {
        let mut to = None;
        let (mut at, mut next) = (Vec::new(), Vec::new());
        for form in forms {
            at.clear();
            at.push(q);
            // (the sets are a few states: kept unsorted, each state judged once; a body's ASCII
            // characters are most of the lexer's classes, and almost all lead to one state)
            for position in form {
                next.clear();
                for &(class, _) in position {
                    for &s in &at {
                        let n = lx.next(s, class);
                        if next.contains(&n) {
                            continue;
                        }
                        // (as a lexer state's step: dead, closing, or unable to finish)
                        if n == 0 || lx.accepts(n) || !lc.can_finish(lx, n, 0, true) {
                            return None;
                        }
                        next.push(n);
                    }
                }
                std::mem::swap(&mut at, &mut next);
            }
            match (at.as_slice(), to) {
                (&[one], None) => to = Some(one),
                (&[one], Some(t)) if one == t => {}
                _ => return None,
            }
        }
        to
    }

    /// Whether every body character's first byte kills DFA state `q`.
    fn dies_on_body(lx: &Lexer, forms: &[Vec<Vec<(u8, u8)>>], q: u32) -> bool {
        forms
            .iter()
            .all(|form| form[0].iter().all(|&(class, _)| lx.next(q, class) == 0))
    }

    /// [`Inside::of`] on the byte trie for a lexer state that takes `n` body characters in a row
    /// ([`Slice::body_run`]): the body tokens of at most `n` characters, and a walk of the rest.
    pub fn inside_upto(
        &self,
        lc: &mut LexCache,
        lx: &Lexer,
        reps: &[u8],
        lex: u32,
        n: usize,
    ) -> Inside {
        let words = self.body_upto(n);
        let mut made = Inside::onto(lc, lx, &self.rest, reps, lex, words, None);
        self.onto_byte_trie(&mut made.closes);
        made
    }

    /// Close nodes of the rest's trie renamed as the byte trie's nodes of their paths.
    fn onto_byte_trie(&self, closes: &mut [(u32, u32)]) {
        for c in closes {
            c.0 = self.node_of[c.0 as usize];
        }
    }

    /// The longest token that is not a body token, in bytes: lexer states that no string of this
    /// many bytes tells apart take these tokens alike ([`Slice::with_rest_of`]).
    pub fn rest_depth(&self) -> usize {
        self.rest.max_depth
    }

    /// The words of a lexer state that takes `n` body characters in a row ([`Slice::body_run`])
    /// and the other tokens as `reference` takes them (the words of a lexer state that takes them
    /// alike): the body tokens of at most `n` characters, and `reference`'s tokens that are not
    /// body tokens.
    pub fn with_rest_of(&self, n: usize, reference: &[u32]) -> Vec<u32> {
        let mut words = self.body_upto(n);
        for ((w, &r), &b) in words.iter_mut().zip(reference).zip(&self.words) {
            *w |= r & !b;
        }
        words
    }

    /// The body tokens of at most `n` characters.
    fn body_upto(&self, n: usize) -> Vec<u32> {
        if n >= self.most_chars() {
            self.words.clone()
        } else {
            // the tokens of at most n characters set, or the longer ones cleared: the fewer
            let (short, long) = self.by_chars.split_at(self.chars_ptr[n + 1] as usize);
            if short.len() <= long.len() {
                let mut words = vec![0u32; self.words.len()];
                for &t in short {
                    words[t as usize >> 5] |= 1 << (t & 31);
                }
                words
            } else {
                let mut words = self.words.clone();
                for &t in long {
                    words[t as usize >> 5] &= !(1 << (t & 31));
                }
                words
            }
        }
    }

    /// [`Inside::of`] on the byte trie for a lexer state that [`Slice::takes`] the body: the body
    /// tokens, the tokens of the other tokens' nodes on the body, and walks of the rest from the
    /// nodes where it parts from the body ([`Front`]).
    pub fn inside(&self, lc: &mut LexCache, lx: &Lexer, reps: &[u8], lex: u32) -> Inside {
        let mut words = Packed::zeroed_row(self.words.len());
        words.copy_from_slice(&self.words);
        for &t in &self.front.tokens {
            words[t as usize >> 5] |= 1 << (t & 31);
        }
        let mut closes = Vec::new();
        let mut scan = Scan::new(&self.rest, lx, reps);
        // the lexer state after the first bytes of a character last met (starts come grouped)
        let mut after: ([u8; 3], u8, u32) = ([0; 3], 0, lex);
        for &(node, bytes, n) in &self.front.starts {
            if (bytes, n) != (after.0, after.1) {
                let mut s = lex;
                for &b in &bytes[..usize::from(n)] {
                    let st = lc.step(lx, s, b);
                    s = lc.steps[st].next; // (NONE once dead)
                    if s == NONE {
                        break;
                    }
                }
                after = (bytes, n, s);
            }
            if after.2 == NONE {
                continue; // (not met from a state that takes the body)
            }
            let node = node as usize;
            let start = (after.2, node, self.rest.end[node] as usize);
            scan.walk(
                lc,
                lx,
                &self.rest,
                reps,
                None,
                start,
                0,
                &mut words,
                &mut closes,
            );
        }
        self.onto_byte_trie(&mut closes);
        Inside {
            words: Arc::new(Packed::from_row(words)),
            closes,
            walked: scan.walked,
        }
    }

    /// [`Inside::of`] on the byte trie for a lexer state that takes `n` body characters in a row
    /// ([`Slice::body_run`]): [`Slice::inside`] when it comes back to itself after each, else
    /// [`Slice::inside_upto`].
    pub fn inside_run(
        &self,
        lc: &mut LexCache,
        lx: &Lexer,
        reps: &[u8],
        lex: u32,
        n: usize,
        body: &BodyChars,
    ) -> Inside {
        if n == usize::MAX && Slice::takes(lc, lx, lex, body) {
            self.inside(lc, lx, reps, lex)
        } else {
            self.inside_upto(lc, lx, reps, lex, n)
        }
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
        let mut set = |s: usize, lo: u8, hi: u8, to: usize| {
            for b in lo..=hi {
                t[s * 256 + usize::from(b)] = to as u32;
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
        utf8_chars(&mut set, 2, 2, [5, 6, 7, 8, 9, 10, 11]);
        flipped(rng, t, 2, 4, flips)
    }

    /// The lexer of one terminal with table `t` (start 1, accepting in state `closed`), with
    /// `flips` of the transitions of states `from..` sent elsewhere at random, and sometimes one
    /// of those states made accepting.
    fn flipped(rng: &mut Rng, mut t: Vec<u32>, from: usize, closed: usize, flips: usize) -> Lexer {
        let n = t.len() / 256;
        for _ in 0..flips {
            // (half of them on the bytes of characters of several bytes)
            let b = if rng.below(2) == 0 {
                0x80 + rng.below(128)
            } else {
                rng.below(256)
            };
            let s = from + rng.below(n - from);
            t[s * 256 + b] = rng.below(n) as u32;
        }
        let mut accepting = vec![false; n];
        accepting[closed] = true;
        if flips > 0 && rng.below(3) == 0 {
            accepting[from + rng.below(n - from)] = true;
        }
        Lexer::new(t, accepting, vec![0; n], vec![1], vec![true], vec![false]).unwrap()
    }

    /// A vocabulary of 3,000 draws of 1 to `most` of `pieces` each (duplicates merged), its byte
    /// trie and its slice.
    fn piece_vocab(rng: &mut Rng, pieces: &[&[u8]], most: usize) -> (Vocab, TokenTrie, Slice) {
        sliced(rng.tokens(3000, pieces, most))
    }

    /// The vocabulary of `toks` (sorted and distinct), its byte trie and its slice.
    fn sliced(toks: Vec<Vec<u8>>) -> (Vocab, TokenTrie, Slice) {
        sliced_excluding(toks, JSON_EXCLUDED)
    }

    fn sliced_excluding(toks: Vec<Vec<u8>>, excluded: Ascii) -> (Vocab, TokenTrie, Slice) {
        let n = toks.len();
        let vocab = Vocab::from_tokens(toks, &[], n).unwrap();
        let trie = TokenTrie::build(&vocab, &ByteClasses::identity().map);
        let slice = Slice::build(&vocab, &trie, excluded);
        (vocab, trie, slice)
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
        let (vocab, trie, slice) = piece_vocab(&mut rng, &pieces, 4);
        let reps: Vec<u8> = (0..=255).collect();
        let (mut taken, mut refused) = (0, 0);
        for round in 0..400 {
            let flips = if round < 4 { 0 } else { 1 + rng.below(3) };
            let lx = string_lexer(&mut rng, flips);
            let mut lc = LexCache::new(&lx);
            let body = BodyChars::of(&lx, JSON_EXCLUDED);
            for q in 1..lx.n_states() as u32 {
                let lex = lc.state(vec![q], 0);
                if !Slice::takes(&mut lc, &lx, lex, &body) {
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

    /// A SQL string `'[^']*'` (1 start, 2 body, 3 closed, 4..=10 inside a character), with
    /// `flips` of its transitions sent elsewhere at random.
    fn quoted_lexer(rng: &mut Rng, flips: usize) -> Lexer {
        let mut t = vec![0u32; 11 * 256];
        let mut set = |s: usize, lo: u8, hi: u8, to: usize| {
            for b in lo..=hi {
                t[s * 256 + usize::from(b)] = to as u32;
            }
        };
        set(1, b'\'', b'\'', 2);
        set(2, 0x00, 0x7F, 2);
        set(2, b'\'', b'\'', 3);
        utf8_chars(&mut set, 2, 2, [4, 5, 6, 7, 8, 9, 10]);
        flipped(rng, t, 2, 3, flips)
    }

    #[test]
    fn another_body_is_sliced_as_a_json_string_is() {
        // a body that leaves out the quote alone (quotes, controls and DEL are body characters):
        // found among the lexer's loop sets, and its slice's walk is the whole walk
        let pieces: Vec<&[u8]> = vec![
            b"a",
            b"'",
            b"\"",
            b"\\",
            b"\n",
            b"\x7f",
            "é".as_bytes(),
            "😀".as_bytes(),
            b"\xc3",
            b"\xed\xa0\x80",
        ];
        let mut rng = Rng(0x5eed_cafe_f00d_0004);
        let quote: Ascii = 1 << b'\'';
        assert_eq!(other_bodies(&quoted_lexer(&mut rng, 0)), vec![quote]);
        assert!(other_bodies(&string_lexer(&mut rng, 0)).is_empty());
        let toks = rng.tokens(3000, &pieces, 4);
        let (vocab, trie, slice) = sliced_excluding(toks, quote);
        assert!(slice.tokens() > 100 && slice.tokens() < vocab.size() - 100);
        let reps: Vec<u8> = (0..=255).collect();
        let (mut taken, mut refused) = (0, 0);
        for round in 0..300 {
            let flips = if round < 4 { 0 } else { 1 + rng.below(3) };
            let lx = quoted_lexer(&mut rng, flips);
            let mut lc = LexCache::new(&lx);
            let mut body = slice.chars(&lx);
            for q in 1..lx.n_states() as u32 {
                let lex = lc.state(vec![q], 0);
                let Some(n) = slice.body_run(&mut lc, &lx, lex, &mut body) else {
                    refused += 1;
                    continue;
                };
                taken += 1;
                let want = Inside::of(&mut lc, &lx, &trie, &reps, lex, vocab.n_words());
                let got = slice.inside_run(&mut lc, &lx, &reps, lex, n, &body);
                assert_eq!(
                    (got.words, got.closes),
                    (want.words, want.closes),
                    "state {q}, round {round}"
                );
            }
        }
        assert!(taken > 20 && refused > 100, "{taken} {refused}");
    }

    /// Wire the multi-byte UTF-8 characters (well-formed, as [`MULTI_BYTE`] spells them) from DFA state
    /// `from` to `to` through `inside`: one continuation byte left, two, three; after E0, after
    /// ED, after F0, after F4. `set(s, lo, hi, to)` sends bytes `lo..=hi` from `s` to `to`.
    fn utf8_chars(
        set: &mut impl FnMut(usize, u8, u8, usize),
        from: usize,
        to: usize,
        inside: [usize; 7],
    ) {
        let [one, two, three, e0, ed, f0, f4] = inside;
        set(from, 0xC2, 0xDF, one);
        set(one, 0x80, 0xBF, to);
        set(from, 0xE1, 0xEC, two);
        set(from, 0xEE, 0xEF, two);
        set(two, 0x80, 0xBF, one);
        set(from, 0xE0, 0xE0, e0);
        set(e0, 0xA0, 0xBF, one);
        set(from, 0xED, 0xED, ed);
        set(ed, 0x80, 0x9F, one);
        set(from, 0xF1, 0xF3, three);
        set(three, 0x80, 0xBF, two);
        set(from, 0xF0, 0xF0, f0);
        set(f0, 0x90, 0xBF, two);
        set(from, 0xF4, 0xF4, f4);
        set(f4, 0x80, 0x8F, two);
    }

    /// A JSON string of at least `min` and at most `max` characters: per count of characters `k`,
    /// a body state and its states inside a character (8 states per count), with `flips` of the
    /// transitions sent elsewhere at random.
    fn bounded_string_lexer(rng: &mut Rng, min: usize, max: usize, flips: usize) -> Lexer {
        const PER: usize = 8;
        let body = |k: usize| 3 + k * PER;
        let n = 3 + (max + 1) * PER;
        let mut t = vec![0u32; n * 256];
        let mut set = |s: usize, lo: u8, hi: u8, to: usize| {
            for b in lo..=hi {
                t[s * 256 + usize::from(b)] = to as u32;
            }
        };
        set(1, b'"', b'"', body(0)); // 1 start, 2 closed
        for k in 0..=max {
            let b = body(k);
            if k >= min {
                set(b, b'"', b'"', 2);
            }
            if k == max {
                continue;
            }
            let next = body(k + 1);
            for &(lo, hi) in &[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)] {
                set(b, lo, hi, next);
            }
            let inside: [usize; 7] = std::array::from_fn(|i| b + 1 + i);
            utf8_chars(&mut set, b, next, inside);
        }
        flipped(rng, t, 3, 2, flips)
    }

    #[test]
    fn a_length_takes_the_other_tokens_as_one_alike_to_their_depth() {
        // the lengths of a string of up to 40 characters, and tokens of at most four pieces (the
        // other tokens at most 16 bytes deep): lengths that no string that deep tells apart take
        // those alike, and each its own body tokens (what Insides::read_off_run reads off)
        let pieces: Vec<&[u8]> = vec![
            b"a",
            b"\"",
            b"\\",
            b"\n",
            "é".as_bytes(),
            "😀".as_bytes(),
            b"\xc3",
            b"\xed\xa0\x80",
        ];
        let mut rng = Rng(0x5eed_cafe_f00d_0003);
        // (and body tokens of up to 30 characters: lengths alike far from the bound take
        // different ones)
        let mut toks = rng.tokens(3000, &pieces, 4);
        toks.extend((5..=30).map(|n| vec![b'a'; n]));
        toks.sort();
        toks.dedup();
        let (vocab, trie, slice) = sliced(toks);
        let reps: Vec<u8> = (0..=255).collect();
        let depth = slice.rest_depth();
        let (mut alike, mut apart, mut shorter) = (0, 0, 0);
        for round in 0..12 {
            let flips = if round < 4 { 0 } else { 1 + rng.below(3) };
            let (min, max) = (rng.below(3), 30 + rng.below(11));
            let lx = bounded_string_lexer(&mut rng, min, max, flips);
            let mut lc = LexCache::new(&lx);
            let mut body = BodyChars::of(&lx, JSON_EXCLUDED);
            let mut runs = Vec::new();
            for q in 1..lx.n_states() as u32 {
                let lex = lc.state(vec![q], 0);
                if let Some(run) = slice.body_run(&mut lc, &lx, lex, &mut body) {
                    let fresh = Inside::of(&mut lc, &lx, &trie, &reps, lex, vocab.n_words());
                    runs.push((q, run, fresh));
                }
            }
            for (q, run, want) in &runs {
                for (p, _, other) in &runs {
                    if p == q || lx.first_difference(*q, *p, depth, usize::MAX) <= depth {
                        apart += 1;
                        continue;
                    }
                    alike += 1;
                    shorter += usize::from(*run < slice.most_chars());
                    let words = slice.with_rest_of(*run, &other.words.to_vec());
                    assert_eq!(
                        words,
                        want.words.to_vec(),
                        "{q} read off {p}, round {round}"
                    );
                    let nodes = |ins: &Inside| ins.closes.iter().map(|c| c.0).collect::<Vec<_>>();
                    assert_eq!(nodes(other), nodes(want), "the close nodes of {q} and {p}");
                }
            }
        }
        assert!(
            alike > 1000 && apart > 1000 && shorter > 100,
            "{alike} {apart} {shorter}"
        );
    }

    #[test]
    fn a_bounded_string_takes_the_body_tokens_up_to_its_bound() {
        let pieces: Vec<&[u8]> = vec![
            b"a",
            b"b",
            b"\x7f",
            b"\"",
            b"\\",
            "é".as_bytes(),
            "€".as_bytes(),
            "😀".as_bytes(),
            b"\xc3",
            b"\xed\xa0\x80",
        ];
        let mut rng = Rng(0x5eed_cafe_f00d_0002);
        let (vocab, trie, slice) = piece_vocab(&mut rng, &pieces, 7);
        let reps: Vec<u8> = (0..=255).collect();
        let (mut runs, mut refused, mut bounded) = (0, 0, 0);
        for round in 0..120 {
            let flips = if round < 8 { 0 } else { 1 + rng.below(3) };
            let (min, max) = (rng.below(3), 1 + rng.below(9));
            let lx = bounded_string_lexer(&mut rng, min.min(max), max, flips);
            let mut lc = LexCache::new(&lx);
            let mut body = BodyChars::of(&lx, JSON_EXCLUDED);
            for q in 1..lx.n_states() as u32 {
                let lex = lc.state(vec![q], 0);
                let Some(run) = slice.body_run(&mut lc, &lx, lex, &mut body) else {
                    refused += 1;
                    continue;
                };
                runs += 1;
                bounded += usize::from(run < slice.most_chars());
                let want = Inside::of(&mut lc, &lx, &trie, &reps, lex, vocab.n_words());
                let got = slice.inside_run(&mut lc, &lx, &reps, lex, run, &body);
                assert_eq!(
                    (got.words, got.closes),
                    (want.words, want.closes),
                    "state {q} run {run}, round {round}"
                );
            }
        }
        assert!(
            runs > 200 && bounded > 100 && refused > 100,
            "{runs} {bounded} {refused}"
        );
    }
}
