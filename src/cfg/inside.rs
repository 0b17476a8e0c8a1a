//! What a lexer state allows by itself, and the cache that shares it between lexer states.
//!
//! From a configuration `(E, L)` a token's bytes either stay inside the lexemes `L` has in progress
//! or close one somewhere; the first kind depends on `L` alone. [`Inside`] holds it: the tokens that
//! stay inside, and the trie nodes where a lexeme closes (where the mask walk asks the parser).
//! Computing one is a walk over the whole trie (a JSON string takes almost every token: a few ms
//! on tekken's 131k tokens), so [`Insides`] shares them: a lexer state that takes every token alike
//! with one already computed reuses it ([`super::lexer::Lexer::first_difference`]: the lengths of a
//! `maxLength` string), and one that differs from it only in places is read off it
//! ([`Inside::diff`]: the spelling of an object's known keys).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::lexer::{LexCache, Lexer, MAX_LOOPS, NONE};
use super::loops::Loops;
use super::slice::{BodyChars, Slice, SliceCell};
use super::walk::{OnTrie, Walk};
use crate::lru::Lru;
use crate::packed::{Packed, Pool};
use crate::trie::TokenTrie;
use crate::vocab::lock;

/// What a lexer state allows by itself (the same for every Earley set it is paired with): the
/// tokens whose bytes stay inside the lexemes in progress, and the trie nodes where one of them
/// closes (with the [`super::lexer::LexStep`] there, whose closes the parser must judge).
#[derive(Debug)]
pub struct Inside {
    pub words: Arc<Packed>,
    pub closes: Vec<(u32, u32)>,
    /// trie nodes the walk that made it stepped through or passed over (whether it is worth
    /// shelving)
    pub walked: usize,
}

/// What the cache holds for a lexer state: its [`Inside`], or that it closes lexemes at so many
/// nodes that the mask walk takes its configurations whole instead, one pass over the trie: a
/// lexeme in progress can come to close at nearly every byte (a name: [`LexCache::busy`]), or its
/// walk met more than [`DENSE_CLOSES`] closes.
#[derive(Debug, Clone)]
pub enum Kept {
    Inside(Arc<Inside>),
    Dense,
}

/// Live classes of bytes at most of a lexer state walked by [`Inside::narrow`], and the nodes the
/// descent may step through before the trie is scanned instead.
const NARROW_CLASSES: usize = 4;
const NARROW_NODES: usize = 4096;

/// Bytes tried, in this order, to leave the declared names a string's state may still be spelling
/// ([`Insides::read_off_body`]): rare in keys (any byte is exact; a rare one finds the body first).
const RARE_BODY_BYTES: &[u8] = b"~^`|";

/// Closes past which a lexer state is [`Kept::Dense`].
pub const DENSE_CLOSES: usize = 2048;

impl Inside {
    /// The tokens of `trie` that lexer state `lex` takes without closing a lexeme, and the nodes
    /// where it can close one: one preorder scan following only the lexer.
    pub fn of(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        n_words: usize,
    ) -> Inside {
        Inside::onto(lc, lx, trie, reps, lex, Packed::zeroed_row(n_words), None)
    }

    /// [`Inside::of`], passing over the subtrees of `on`'s trie spelled by a loop set the lexer
    /// state there takes quietly ([`LexCache::takes_quietly`]): their tokens stay inside and no
    /// lexeme closes below, so they are marked without a step (an email pattern's first visit on
    /// tekken stepped through 36,000 nodes, most of them in runs of its letters).
    pub fn of_on(
        lc: &mut LexCache,
        lx: &Lexer,
        on: &OnTrie<'_>,
        lex: u32,
        n_words: usize,
    ) -> Inside {
        let words = Packed::zeroed_row(n_words);
        Inside::onto(lc, lx, on.trie, on.reps, lex, words, Some(on.loops))
    }

    /// [`Inside::of`] with the tokens of `words` taken besides (a string body's, which the walk of
    /// the other tokens does not visit: [`Slice::inside`]); `loops`: the loop sets' runs on `trie`
    /// ([`Inside::of_on`]).
    pub fn onto(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        mut words: Vec<u32>,
        loops: Option<&Loops>,
    ) -> Inside {
        let mut closes = Vec::new();
        let (walked, _) = walk_lexer(lc, lx, trie, reps, loops, lex, 0, &mut words, &mut closes);
        Inside {
            words: Arc::new(Packed::from_row(words)),
            closes,
            walked,
        }
    }

    /// [`Inside::of`] for a lexer state whose lexemes go on by at most [`NARROW_CLASSES`] classes
    /// of bytes from the start: a descent into the children of the nodes it stays alive at, each
    /// stepped through the lexer's own table ([`LexCache::step`]), instead of a scan of the trie
    /// with a table of its own (which pays only over many nodes). None when `lex` is wider, or the
    /// descent steps through more than `max_nodes` nodes.
    pub fn narrow(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        n_words: usize,
        max_nodes: usize,
    ) -> Option<Inside> {
        let pend = &lc.states.values[lex as usize].0;
        let live = (0..lx.n_classes())
            .filter(|&c| pend.iter().any(|&q| lx.next(q, c as u8) != 0))
            .take(NARROW_CLASSES + 1)
            .count();
        if live > NARROW_CLASSES {
            return None;
        }
        // (the few tokens collected: no row of n_words to zero and scan)
        let mut tokens = Vec::new();
        let mut closes = Vec::new();
        let mut walked = 0;
        // preorder: a node's children are pushed last first, so the first is stepped into next
        let mut todo: Vec<(usize, u32)> = vec![(0, lex)];
        let mut kids: Vec<(usize, u32)> = Vec::new();
        let mut visit = |i: usize, label: u8, at: u32, kids: &mut Vec<(usize, u32)>| {
            let st = lc.step(lx, at, reps[usize::from(label)]);
            if st != 0 {
                let step = &lc.steps[st];
                if !step.closes.is_empty() {
                    closes.push((i as u32, st as u32));
                }
                if step.next != NONE {
                    trie.push_tokens(i, &mut tokens);
                    kids.push((i, step.next));
                }
            }
        };
        while let Some((node, at)) = todo.pop() {
            if node == 0 {
                // (the root's children from their own table: read from the trie, each is a
                // subtree apart)
                walked += trie.roots.len();
                if walked > max_nodes {
                    return None;
                }
                for &(i, label) in &trie.roots {
                    visit(i as usize, label, at, &mut kids);
                }
            } else {
                let (mut i, end) = (node + 1, trie.end[node] as usize);
                while i < end {
                    walked += 1;
                    if walked > max_nodes {
                        return None;
                    }
                    visit(i, trie.label[i], at, &mut kids);
                    i = trie.end[i] as usize;
                }
            }
            todo.extend(kids.drain(..).rev());
        }
        // (a close is found when its parent is expanded, and parents in preorder: ascending)
        closes.sort_unstable_by_key(|c| c.0);
        Some(Inside {
            words: Arc::new(Packed::of_tokens(tokens, n_words)),
            closes,
            walked,
        })
    }

    /// [`Inside::of`] for `lex`, read off `reference`, what a lexer state that takes every token
    /// shorter than `from` classes alike allows: only the subtrees below depth `from` are walked
    /// again (a state of a `maxLength` string differs from the one a character before only in the
    /// tokens long enough to reach the bound).
    #[allow(clippy::too_many_arguments)]
    pub fn deep(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        reference: &Inside,
        from: usize,
        loops: Option<&Loops>,
    ) -> Inside {
        let mut words = reference.words.to_row();
        for &t in trie.tokens_from_len(from) {
            words[t as usize >> 5] &= !(1 << (t & 31));
        }
        let mut added = Vec::new();
        let (walked, _) = walk_lexer(lc, lx, trie, reps, loops, lex, from, &mut words, &mut added);
        let kept = reference
            .closes
            .iter()
            .copied()
            .filter(|c| (trie.depth[c.0 as usize] as usize) < from);
        Inside {
            words: Arc::new(Packed::from_row(words)),
            closes: merge(kept, added),
            walked,
        }
    }

    /// [`Inside::of`] for `lex`, read off `reference`, what lexer state `ref_lex` allows: the two
    /// are walked side by side, and a subtree where both reach the same lexer state (or the same
    /// step) is the same in both, so only where they differ is visited. A key of an object whose
    /// keys are known: its lexer state while a key is being spelled differs from the one at the
    /// key's start only along the spellings of the known keys, a few hundred nodes of the trie.
    /// None when the two differ at more than `max_nodes` nodes (a fresh walk is then as cheap).
    #[allow(clippy::too_many_arguments)]
    pub fn diff(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        ref_lex: u32,
        reference: &Inside,
        max_nodes: usize,
    ) -> Option<Inside> {
        let mut visited = 0;
        let mut words = reference.words.to_row();
        let mut added = Vec::new();
        let mut dropped = Vec::new();
        // the lexer states of `lex` and `ref_lex` at each depth of the path (NONE: dead)
        let mut xs: Vec<u32> = vec![NONE; trie.max_depth + 1];
        let mut ys: Vec<u32> = vec![NONE; trie.max_depth + 1];
        xs[0] = lex;
        ys[0] = ref_lex;
        // the root's children from their own table ([`TokenTrie::roots`]): most are passed over
        for &(root, label) in &trie.roots {
            let b = reps[usize::from(label)];
            let (sx, sy) = (
                step_or_dead(lc, lx, lex, b),
                step_or_dead(lc, lx, ref_lex, b),
            );
            if steps_alike(lc, sx, sy) {
                continue; // the same from here on
            }
            let mut i = root as usize;
            let stop = trie.end[i] as usize;
            while i < stop {
                let d = trie.depth[i] as usize;
                let b = reps[usize::from(trie.label[i])];
                let (sx, sy) = (
                    step_or_dead(lc, lx, xs[d - 1], b),
                    step_or_dead(lc, lx, ys[d - 1], b),
                );
                if steps_alike(lc, sx, sy) {
                    i = trie.end[i] as usize; // the same from here on
                    continue;
                }
                let (px, py) = (&lc.steps[sx], &lc.steps[sy]);
                visited += 1;
                if visited > max_nodes {
                    return None;
                }
                if !py.closes.is_empty() {
                    dropped.push(i as u32);
                }
                if !px.closes.is_empty() {
                    added.push((i as u32, sx as u32));
                }
                let (nx, ny) = (px.next, py.next);
                if (nx == NONE) != (ny == NONE) {
                    for &t in trie.tokens(i) {
                        words[t as usize >> 5] ^= 1 << (t & 31); // taken by exactly one of them
                    }
                }
                if nx == NONE && ny == NONE {
                    i = trie.end[i] as usize;
                    continue;
                }
                xs[d] = nx;
                ys[d] = ny;
                i += 1;
            }
        }
        // the reference's closes where the walk did not go, and this state's where it did
        let kept = reference
            .closes
            .iter()
            .copied()
            .filter(|c| dropped.binary_search(&c.0).is_err());
        let closes = merge(kept, added);
        Some(Inside {
            words: Arc::new(Packed::from_row(words)),
            closes,
            walked: visited,
        })
    }

    /// [`Inside::of`] for `lex` from `parts`, what each of its lexemes in progress allows alone
    /// ([`Insides`] says why that is exact): words ORed, close nodes merged, the steps at them
    /// read off the trie. None when a step cannot be read (parts of another lexer state).
    pub fn union(
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        parts: &[Arc<Inside>],
    ) -> Option<Inside> {
        let mut words = parts.first()?.words.to_row();
        let mut nodes: Vec<u32> = Vec::new();
        for part in parts {
            part.words.or_into(&mut words);
            nodes.extend(part.closes.iter().map(|c| c.0));
        }
        nodes.sort_unstable();
        nodes.dedup();
        let closes = steps_at(lc, lx, trie, reps, lex, &nodes)?;
        Some(Inside {
            words: Arc::new(Packed::from_row(words)),
            closes,
            walked: 0,
        })
    }

    /// Bytes held (for cache bounds).
    pub fn bytes(&self) -> usize {
        self.words.bytes() + 8 * self.closes.len()
    }
}

/// The step of lexer state `at` by byte `b` ([`LexCache::step`]); 0, dead, when `at` is [`NONE`].
fn step_or_dead(lc: &mut LexCache, lx: &Lexer, at: u32, b: u8) -> usize {
    if at == NONE {
        0
    } else {
        lc.step(lx, at, b)
    }
}

/// Whether steps `sx` and `sy` of [`Inside::diff`]'s two lexer states lead alike below their node:
/// the same step, or the same next state and the same closes.
fn steps_alike(lc: &LexCache, sx: usize, sy: usize) -> bool {
    let (px, py) = (&lc.steps[sx], &lc.steps[sy]);
    sx == sy || (px.next == py.next && px.closes == py.closes)
}

/// The preorder scan of [`Inside::of`] and [`Inside::deep`]: from lexer state `lex`, following only
/// the lexer, marks in `words` the tokens of at least `from` classes that stay inside a lexeme and
/// lists in `closes` the nodes at least `from` deep where one closes (subtrees with nothing that
/// deep are skipped). With `loops` (the runs of the lexer's loop sets on `trie`), a subtree below
/// a node whose lexer state takes quietly a loop set that spells all of it is marked whole, not
/// stepped through ([`Inside::of_on`]). Returns the nodes it stepped through or passed over, and
/// those it stepped through.
///
/// This is the engine's hottest loop (a JSON string's state steps through all 266,000 nodes of
/// tekken's trie), so the steps it takes are read from [`Rows`], one dense row per lexer state met.
#[allow(clippy::too_many_arguments)]
fn walk_lexer(
    lc: &mut LexCache,
    lx: &Lexer,
    trie: &TokenTrie,
    reps: &[u8],
    loops: Option<&Loops>,
    lex: u32,
    from: usize,
    words: &mut [u32],
    closes: &mut Vec<(u32, u32)>,
) -> (usize, usize) {
    let mut scan = Scan::new(trie, lx, reps);
    let start = (lex, 1, trie.n_nodes());
    scan.walk(lc, lx, trie, reps, loops, start, from, words, closes);
    (scan.walked + scan.passed, scan.walked)
}

/// The state of a preorder scan of a trie ([`walk_lexer`]), which may walk several subtrees in
/// ascending order, each from a lexer state of its own ([`Slice::inside`]).
pub(super) struct Scan {
    rows: Rows,
    /// per loop set, the first node past the last asked about whose label is not in it (`runs_below`)
    runs: [usize; MAX_LOOPS],
    /// the row of the lexer state at each depth of the path
    levels: Vec<u32>,
    /// nodes stepped through, and nodes passed over (marked whole)
    pub walked: usize,
    pub passed: usize,
    /// the lexer state the last walk started from, and its row
    last: (u32, u32),
}

impl Scan {
    /// A scan of `trie`, whose labels stand for the bytes `reps` in `lx`'s classes.
    pub(super) fn new(trie: &TokenTrie, lx: &Lexer, reps: &[u8]) -> Self {
        Scan {
            rows: Rows::take(lx, reps),
            runs: [0; MAX_LOOPS],
            levels: vec![0; trie.max_depth + 1],
            walked: 0,
            passed: 0,
            last: (NONE, 0),
        }
    }

    /// Walk nodes `start.1 .. start.2` (a subtree, or the whole trie from node 1), from lexer
    /// state `start.0` at the parent of the first ([`walk_lexer`] says what is marked and listed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn walk(
        &mut self,
        lc: &mut LexCache,
        lx: &Lexer,
        trie: &TokenTrie,
        reps: &[u8],
        loops: Option<&Loops>,
        start: (u32, usize, usize),
        from: usize,
        words: &mut [u32],
        closes: &mut Vec<(u32, u32)>,
    ) {
        let (lex, mut i, n) = start;
        let (rows, runs) = (&mut self.rows, &mut self.runs);
        let levels = &mut self.levels[..];
        // (counted in locals: the hottest loop of the engine keeps them in registers)
        let (mut walked, mut passed) = (0, 0);
        let (label, depth, end, deepest) = (
            &trie.label[..],
            &trie.depth[..],
            &trie.end[..],
            &trie.deepest[..],
        );
        if i < n {
            if self.last.0 != lex {
                self.last = (lex, rows.row(lex));
            }
            levels[depth[i] as usize - 1] = self.last.1;
        }
        while i < n {
            if from > 0 && (deepest[i] as usize) < from {
                i = end[i] as usize; // nothing that deep below
                continue;
            }
            walked += 1;
            let d = depth[i] as usize;
            let c = label[i];
            let row = levels[d - 1];
            let mut e =
                rows.table[row as usize * rows.width + usize::from(rows.col[usize::from(c)])];
            if e == 0 {
                e = rows.fill(lc, lx, row, c, reps[usize::from(c)]);
            }
            if e & ALIVE == 0 {
                i = end[i] as usize;
                continue;
            }
            let next = match e >> 2 {
                0 => NONE,
                r => r - 1,
            };
            if d >= from {
                if e & CLOSES != 0 {
                    let st = lc.step(lx, rows.lexes[row as usize], reps[usize::from(c)]);
                    closes.push((i as u32, st as u32));
                }
                if next != NONE {
                    trie.mark(i, words);
                }
            }
            if next == NONE {
                i = end[i] as usize;
                continue;
            }
            let below = end[i] as usize;
            if let Some(loops) = loops.filter(|_| d >= from && below > i + 1) {
                let quiet = rows.quiet(lc, lx, next);
                if quiet != 0 && runs_below(loops, label, runs, quiet, i, below) {
                    trie.mark_below(i, words);
                    passed += below - i - 1;
                    i = below;
                    continue;
                }
            }
            levels[d] = next;
            i += 1;
        }
        self.walked += walked;
        self.passed += passed;
    }
}

/// The steps of the lexer states one walk meets, by the lexer's class of the trie label:
/// `table[row * width + col[label]]` is 0 until computed, else [`DEAD`], or [`ALIVE`] with the row
/// of the lexer state after it plus one (from bit 2 on; 0: the lexemes cannot go on) and
/// [`CLOSES`] when one can close there. A row is a cell a class, not a byte: a bounded string's
/// walk meets hundreds of lexer states (a state per length, and the states inside its escapes and
/// characters), and rows of 256 `u64` cells (2 KB, against 88 `u32` for a JSON Schema's lexer) left
/// L2 for memory and were copied as the table grew. The rows' memory is kept per thread between
/// walks ([`ROWS`]).
struct Rows {
    table: Vec<u32>,
    /// cells a row: the lexer's classes
    width: usize,
    /// the lexer's class of each trie label
    col: [u8; 256],
    lexes: Vec<u32>,
    row_of: rustc_hash::FxHashMap<u32, u32>,
    /// per row, [`LexCache::takes_quietly`] of its lexer state ([`QUIET_UNKNOWN`] until asked)
    quiet: Vec<u16>,
}

impl Default for Rows {
    fn default() -> Self {
        Rows {
            table: Vec::new(),
            width: 0,
            col: [0; 256],
            lexes: Vec::new(),
            row_of: Default::default(),
            quiet: Vec::new(),
        }
    }
}

const QUIET_UNKNOWN: u16 = 1 << 8;

/// Whether a loop set among `quiet` (bit `k`: set `k`) spells the whole subtree below trie node
/// `i`, nodes `i + 1 .. below` in preorder: whether the first node after `i` with a label outside
/// the set comes at `below` or later. `runs[k]` is set `k`'s first such node at or after the last
/// node asked about, found by a scan of the labels; a preorder walk asks about ascending nodes, so
/// each label is scanned once per set at most (a byte compare a node, against a lexer step to
/// walk it), and no table per vocabulary is made first (as [`Loops::block`] makes for the mask walk:
/// a pass over whole subtrees, which for a new loop set cost more than the walk saved).
fn runs_below(
    loops: &Loops,
    label: &[u8],
    runs: &mut [usize; MAX_LOOPS],
    mut quiet: u8,
    i: usize,
    below: usize,
) -> bool {
    while quiet != 0 {
        let k = quiet.trailing_zeros() as usize;
        if runs[k] <= i {
            let inside = loops.labels(k);
            let mut j = i + 1;
            while j < label.len() && inside[usize::from(label[j])] {
                j += 1;
            }
            runs[k] = j;
        }
        if runs[k] >= below {
            return true;
        }
        quiet &= quiet - 1;
    }
    false
}

const DEAD: u32 = 1;
const ALIVE: u32 = 2;
const CLOSES: u32 = 1;

thread_local! {
    /// A [`Rows`] kept per thread between walks, emptied, its memory kept (below [`ROWS_KEPT`]).
    static ROWS: std::cell::Cell<Option<Rows>> = const { std::cell::Cell::new(None) };
}

/// Cells (4 MB) past which a walk's [`Rows`] are let go rather than kept for the thread's next.
const ROWS_KEPT: usize = 1 << 20;

impl Drop for Scan {
    fn drop(&mut self) {
        let rows = std::mem::take(&mut self.rows);
        if rows.table.capacity() <= ROWS_KEPT {
            ROWS.set(Some(rows));
        }
    }
}

impl Rows {
    /// This thread's kept rows, emptied, for a walk of labels `reps` with `lx`.
    fn take(lx: &Lexer, reps: &[u8]) -> Rows {
        let mut rows = ROWS.take().unwrap_or_default();
        rows.table.clear();
        rows.lexes.clear();
        rows.row_of.clear();
        rows.quiet.clear();
        rows.width = lx.n_classes();
        for (col, &b) in rows.col.iter_mut().zip(reps) {
            *col = lx.class_of(b);
        }
        rows
    }

    /// The row of lexer state `lex` (made empty when new).
    fn row(&mut self, lex: u32) -> u32 {
        if let Some(&r) = self.row_of.get(&lex) {
            return r;
        }
        let r = self.lexes.len() as u32;
        self.lexes.push(lex);
        self.quiet.push(QUIET_UNKNOWN);
        self.table.resize(self.table.len() + self.width, 0);
        self.row_of.insert(lex, r);
        r
    }

    /// The loop sets the lexer state of row `row` takes quietly.
    fn quiet(&mut self, lc: &mut LexCache, lx: &Lexer, row: u32) -> u8 {
        let known = &mut self.quiet[row as usize];
        if *known == QUIET_UNKNOWN {
            let quiet = lc.takes_quietly(lx, self.lexes[row as usize]);
            // (a set inside another one taken spells no subtree the other does not: not scanned;
            // the loop sets are distinct)
            let sets = lx.loops();
            let taken = |k: usize| quiet & (1 << k) != 0;
            let within = |k: usize, j: usize| (0..4).all(|w| sets[k][w] & !sets[j][w] == 0);
            let maximal = (0..sets.len())
                .filter(|&k| {
                    taken(k) && !(0..sets.len()).any(|j| j != k && taken(j) && within(k, j))
                })
                .fold(0u8, |m, k| m | 1 << k);
            *known = u16::from(maximal);
        }
        *known as u8
    }

    /// Compute the entry of row `row` by trie label `c` (byte `byte`).
    fn fill(&mut self, lc: &mut LexCache, lx: &Lexer, row: u32, c: u8, byte: u8) -> u32 {
        let st = lc.step(lx, self.lexes[row as usize], byte);
        let e = if st == 0 {
            DEAD
        } else {
            let (next, closes) = (lc.steps[st].next, !lc.steps[st].closes.is_empty());
            let next = if next == NONE { 0 } else { self.row(next) + 1 };
            ALIVE | next << 2 | if closes { CLOSES } else { 0 }
        };
        let col = usize::from(self.col[usize::from(c)]);
        self.table[row as usize * self.width + col] = e;
        e
    }
}

/// The closes of lexer state `lex` at trie nodes `nodes` (ascending: preorder), each with the
/// [`super::lexer::LexStep`] there: a walk down to them only. None when one of them cannot be
/// reached from `lex` (the nodes came from another lexer state with `lex`'s signature: never).
fn steps_at(
    lc: &mut LexCache,
    lx: &Lexer,
    trie: &TokenTrie,
    reps: &[u8],
    lex: u32,
    nodes: &[u32],
) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::with_capacity(nodes.len());
    let mut levels: Vec<u32> = vec![0; trie.max_depth + 1];
    levels[0] = lex;
    let mut i = 1;
    // the end of the root's child subtree `i` is in (its children read from their own table)
    let mut root_end = 0;
    for &node in nodes {
        let node = node as usize;
        if node >= root_end {
            let k = trie
                .roots
                .partition_point(|r| r.0 as usize <= node)
                .checked_sub(1)?;
            i = trie.roots[k].0 as usize;
            root_end = trie.end[i] as usize;
        }
        loop {
            if node < i || i >= trie.n_nodes() {
                return None; // passed it
            }
            if node >= trie.end[i] as usize {
                i = trie.end[i] as usize; // not in this subtree
                continue;
            }
            let d = trie.depth[i] as usize;
            let st = lc.step(lx, levels[d - 1], reps[usize::from(trie.label[i])]);
            let next = lc.steps[st].next;
            if i == node {
                if st == 0 || lc.steps[st].closes.is_empty() {
                    return None;
                }
                out.push((i as u32, st as u32));
            } else if st == 0 || next == NONE {
                return None; // the path to it dies
            }
            if st == 0 || next == NONE {
                i = trie.end[i] as usize;
            } else {
                levels[d] = next;
                i += 1;
            }
            if i > node {
                break;
            }
        }
    }
    Some(out)
}

/// Two lists of closes in preorder (by node), as one.
fn merge(a: impl Iterator<Item = (u32, u32)>, b: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(b.len());
    let mut a = a.peekable();
    for x in b {
        while let Some(&y) = a.peek() {
            if y.0 >= x.0 {
                break;
            }
            out.push(y);
            a.next();
        }
        out.push(x);
    }
    out.extend(a);
    out
}

/// What lexer states allow by themselves ([`Inside`]), kept per lexer state (as many as masks:
/// each holds a mask's words), with the last ones computed as candidates to share, and the
/// vocabulary's [`Shelf`] when the grammar walks the byte trie.
pub struct Insides {
    by_lex: Lru<u32, Kept>,
    /// the lexer states last computed, newest first, with their shapes ([`LexCache::shape`])
    recent: VecDeque<(u32, (Vec<u32>, u32))>,
    /// the lexer states last computed of each shape, newest first ([`Insides::alike`]): a string
    /// of bounded length has a lexer state per length, and the next one of its lengths met may
    /// come after many other lexer states (a document's other values)
    by_shape: Lru<(Vec<u32>, u32), Vec<u32>>,
    /// the string body's characters in the lexer's classes, made at the first lexer state that
    /// may be inside a string ([`Slice::body_run`], [`Slice::takes`])
    body: Option<BodyChars>,
    /// the lexer states last met that take body characters in a row, with how many
    /// ([`Slice::body_run`]), newest first: candidates to read a string's next length off
    /// ([`Insides::read_off_run`])
    runs: VecDeque<(u32, usize)>,
    shelf: Option<Arc<Shelf>>,
    slice: Option<Arc<Slice>>,
    /// the slices of the grammar's other string bodies ([`super::slice::other_bodies`]), with
    /// their characters in the lexer's classes once asked
    others: Vec<(SliceCell, Option<BodyChars>)>,
    pool: Arc<Pool>,
}

/// Computed lexer states kept as candidates, and the pairs of DFA states one comparison of
/// [`Lexer::first_difference`] may visit.
const CANDIDATES: usize = 8;
const ALIKE_PAIRS: usize = 2048;
/// Lexer states that take body characters in a row compared with a new one
/// ([`Insides::read_off_run`]): the last lengths of the strings of bounded length met.
const RUN_CANDIDATES: usize = 4;
/// Shapes whose last lexer states are kept as candidates ([`Insides::alike`]).
const SHAPES: usize = 256;
/// A candidate is read off ([`Inside::deep`]) only when at most this share of the tokens (1 / it)
/// are as long as where it takes tokens differently, and taken without comparing the others when
/// at most [`FEW_LONG`] are.
const DEEP_SHARE: usize = 4;
const FEW_LONG: usize = 1024;
/// Trie nodes a walk of [`Inside::diff`] may visit before it gives up for a fresh walk (a fresh
/// walk of a JSON string's state visits about 200,000 on tekken). Over 200 JSONSchemaBench schemas'
/// instances on tekken, the 608 diffs that succeeded visited 386 nodes or fewer but two (1,344 at
/// most), and the 62 that gave up at 4,096 took 71 us each, paid on a first visit before its fresh
/// walk: at 1,536 every one of those diffs succeeds and a failed one costs 60 % less.
const DIFF_NODES: usize = 1536;

/// What lexer states allow by themselves, shared by every grammar of a vocabulary that walks its
/// byte trie, under their [`LexCache::signature`]: the tokens they take, and the nodes where a
/// lexeme closes (None: more than [`DENSE_CLOSES`]). Every JSON Schema has strings, and a fresh
/// walk of a string's lexer state takes a few ms on tekken; with this, the first schema pays it.
/// Bounded by `Limits.shared_lexer_walks` (128 by default; each entry holds a mask's words and its
/// key: 10 MB at most on tekken's 131k tokens).
#[derive(Debug)]
pub struct Shelf {
    kept: Mutex<Lru<Vec<u32>, Arc<Shelved>>>,
    hits: AtomicUsize,
}

#[derive(Debug)]
struct Shelved {
    words: Arc<Packed>,
    nodes: Option<Vec<u32>>,
}

/// The longest signature shelved (a lexer state with shadows reaching more DFA states than that is
/// shared within its grammar only).
const SIGNATURE_LEN: usize = 16_384;
/// Trie nodes a walk must have stepped through to be shelved (a string's: about 200,000 on tekken).
const SHELVE_NODES: usize = 10_000;

impl Shelf {
    /// An empty shelf of at most `entries` walks.
    pub fn new(entries: usize) -> Self {
        Shelf {
            kept: Mutex::new(Lru::new(entries)),
            hits: AtomicUsize::new(0),
        }
    }

    /// Entries held, and the lexer states served from them so far.
    pub fn stats(&self) -> (usize, usize) {
        (lock(&self.kept).len(), self.hits.load(Ordering::Relaxed))
    }
}

impl Insides {
    /// At most `limit` lexer states kept; `shared`: the vocabulary's shelf and slice, when the
    /// byte trie is walked; `others`: the slices of the grammar's other string bodies; `pool`: the
    /// vocabulary's sets of tokens, which the kept ones join.
    pub fn new(
        limit: usize,
        shared: Option<(Arc<Shelf>, Arc<Slice>)>,
        others: Vec<SliceCell>,
        pool: Arc<Pool>,
    ) -> Self {
        let (shelf, slice) = shared.unzip();
        Insides {
            by_lex: Lru::new(limit),
            recent: VecDeque::new(),
            by_shape: Lru::new(SHAPES),
            body: None,
            runs: VecDeque::new(),
            shelf,
            slice,
            others: others.into_iter().map(|s| (s, None)).collect(),
            pool,
        }
    }

    /// What lexer state `lex` allows by itself: cached; else, one more length of a string of
    /// bounded length, an earlier length's ([`Insides::read_off_run`]); else a candidate's of the
    /// same shape that takes every token alike (or all but the longest: [`Inside::deep`]); else inside a string's
    /// body, the body tokens and a walk of the rest ([`Slice`]); else the shelf's, from another
    /// grammar; else read off the candidate most like it ([`Inside::diff`]); else walked afresh.
    /// Kept for the next visit, and shelved.
    pub fn get(&mut self, w: &mut Walk<'_>, on: &OnTrie<'_>, lex: u32, n_words: usize) -> Kept {
        let (trie, reps) = (on.trie, on.reps);
        if let Some(hit) = self.by_lex.get(&lex) {
            return hit.clone();
        }
        let lx = w.cx.lx;
        if w.lc.busy(lx, lex) {
            self.by_lex.put(lex, Kept::Dense);
            return Kept::Dense;
        }
        let shape = w.lc.shape(lx, lex);
        // inside a string's body: how many body characters in a row (asked once, used twice)
        let run = self.body_run(w, lex);
        // one more length of a string of bounded length: its body tokens, and the others as the
        // last length met that takes them alike
        if let Some(made) = run.and_then(|n| self.read_off_run(w, on, lex, n)) {
            return self.keep(lex, shape, Arc::new(made));
        }
        // a candidate of the same shape that takes the tokens alike, or all but the longest
        if let Some((from, reference)) = self.alike(w.lc, lx, lex, &shape, trie) {
            if from > trie.max_depth {
                self.by_lex.put(lex, Kept::Inside(Arc::clone(&reference)));
                return Kept::Inside(reference);
            }
            let made = Inside::deep(w.lc, lx, trie, reps, lex, &reference, from, Some(on.loops));
            return self.keep(lex, shape, Arc::new(made));
        }
        // several lexemes in progress: what each allows by itself, together (below)
        if w.lc.states.values[lex as usize].0.len() > 1 {
            if let Some(kept) = self.union(w, on, lex, n_words) {
                return kept;
            }
        }
        // inside a string's body (of bounded length too): the vocabulary's body tokens and a walk
        // of the rest, cheaper than a signature and the shelf (and not worth shelving)
        if let Some(slice) = &self.slice {
            let body = self.body.get_or_insert_with(|| slice.chars(lx));
            if let Some(n) = run {
                let made = slice.inside_run(w.lc, lx, reps, lex, n, body);
                return self.keep(lex, shape, Arc::new(made));
            }
            // (several lexemes in progress, all in a string's body)
            if w.lc.states.values[lex as usize].0.len() > 1 && Slice::takes(w.lc, lx, lex, body) {
                let made = slice.inside(w.lc, lx, reps, lex);
                return self.keep(lex, shape, Arc::new(made));
            }
        }
        // inside another string's body (a Lark grammar's '[^']*'): the same, with its own slice
        if run.is_none() {
            if let Some(made) = self.other_body(w, on.reps, lex) {
                return self.keep(lex, shape, Arc::new(made));
            }
        }
        // lexemes that go on by few bytes (a known key being spelled): a descent along them is
        // cheaper than a signature, a comparison with a candidate or a scan of the trie
        if let Some(made) = Inside::narrow(w.lc, lx, trie, reps, lex, n_words, NARROW_NODES) {
            return self.keep(lex, shape, Arc::new(made));
        }
        // a string's state that parts from the string's body only along some spellings (a key
        // that must not be one of the declared names): read off the body's, which the slice gives
        if let Some(made) = self.read_off_body(w, on, lex, n_words) {
            return self.keep(lex, shape, Arc::new(made));
        }
        let key = match &self.shelf {
            Some(_) => w.lc.signature(lx, lex, trie.max_depth, SIGNATURE_LEN),
            None => None,
        };
        if let (Some(shelf), Some(key)) = (&self.shelf, &key) {
            let hit = lock(&shelf.kept).get(key).cloned();
            match hit.as_deref().map(|h| (h, &h.nodes)) {
                Some((_, None)) => {
                    shelf.hits.fetch_add(1, Ordering::Relaxed);
                    self.by_lex.put(lex, Kept::Dense);
                    return Kept::Dense;
                }
                Some((h, Some(nodes))) => {
                    if let Some(closes) = steps_at(w.lc, lx, trie, reps, lex, nodes) {
                        shelf.hits.fetch_add(1, Ordering::Relaxed);
                        let made = Inside {
                            words: h.words.clone(),
                            closes,
                            walked: 0,
                        };
                        return self.keep(lex, shape, Arc::new(made));
                    }
                }
                None => {}
            }
        }
        let made = match self.diff_from_candidate(w, trie, reps, lex, &shape) {
            Some(made) => made,
            None => Inside::of_on(w.lc, lx, on, lex, n_words),
        };
        let made = Arc::new(made);
        let kept = self.keep(lex, shape, Arc::clone(&made));
        // (a walk of few nodes is cheaper to repeat than to keep: keys of objects being spelled)
        if let (Some(shelf), Some(key), true) = (&self.shelf, key, made.walked >= SHELVE_NODES) {
            let shelved = match kept {
                Kept::Dense => Shelved {
                    words: Arc::new(Packed::Dense(Box::new([]))),
                    nodes: None,
                },
                Kept::Inside(_) => Shelved {
                    words: made.words.clone(),
                    nodes: Some(made.closes.iter().map(|c| c.0).collect()),
                },
            };
            lock(&shelf.kept).put(key, Arc::new(shelved));
        }
        kept
    }

    /// What lexer state `lex` allows by itself when it takes the characters of one of the
    /// grammar's other string bodies in a row: that body's tokens (as many characters as it takes)
    /// and a walk of the rest ([`Slice::inside_run`]).
    fn other_body(&mut self, w: &mut Walk<'_>, reps: &[u8], lex: u32) -> Option<Inside> {
        let lx = w.cx.lx;
        self.others.iter_mut().find_map(|(made, chars)| {
            let slice = made.get()?; // (not yet made: walked as any other lexer state)
            let body = chars.get_or_insert_with(|| slice.chars(lx));
            let n = slice.body_run(w.lc, lx, lex, body)?;
            Some(slice.inside_run(w.lc, lx, reps, lex, n, body))
        })
    }

    /// How many body characters lexer state `lex` takes in a row ([`Slice::body_run`]), when the
    /// grammar walks the vocabulary's byte trie (with its [`Slice`]).
    fn body_run(&mut self, w: &mut Walk<'_>, lex: u32) -> Option<usize> {
        let slice = self.slice.as_ref()?;
        let lx = w.cx.lx;
        let body = self.body.get_or_insert_with(|| slice.chars(lx));
        slice.body_run(w.lc, lx, lex, body)
    }

    /// What lexer state `lex` allows when it takes `n` body characters in a row ([`Slice::body_run`]:
    /// a string of `maxLength` at one of its lengths), read off a lexer state met before that
    /// takes body characters in a row too ([`RUN_CANDIDATES`] of the last) when no string as long
    /// as the longest token that is not a body token tells the two apart
    /// ([`Lexer::first_difference`]): the body tokens of at most `n` characters ([`Slice`]), the
    /// other tokens as the candidate takes them, and the candidate's close nodes, stepped to from
    /// `lex` ([`steps_at`]). Each new length of a name of `maxLength` 80 was a walk of the other
    /// tokens' trie (3,900 nodes on tekken) or a comparison with an earlier length as deep as the
    /// trie (the pairs of the two DFA states' paths up to the bound) and a walk of the longest
    /// tokens: 80-140 us, against a comparison only as deep as those tokens (20 bytes).
    fn read_off_run(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'_>,
        lex: u32,
        n: usize,
    ) -> Option<Inside> {
        let slice = Arc::clone(self.slice.as_ref()?);
        let lx = w.cx.lx;
        // (body_run took `lex`: one lexeme in progress, no shadows)
        let q = w.lc.states.values[lex as usize].0[0];
        let depth = slice.rest_depth();
        let reference = self
            .runs
            .iter()
            .take(RUN_CANDIDATES)
            .find_map(|&(cand, m)| {
                // (two runs of different lengths part after the shorter one and a character more,
                // `a` by `a`: none that near its bound is compared)
                if m != n && m.min(n) < depth {
                    return None;
                }
                let Some(Kept::Inside(ins)) = self.by_lex.peek(&cand) else {
                    return None;
                };
                let p = *w.lc.states.values[cand as usize].0.first()?;
                (lx.first_difference(q, p, depth, ALIKE_PAIRS) > depth).then(|| Arc::clone(ins))
            });
        self.runs.push_front((lex, n));
        self.runs.truncate(RUN_CANDIDATES);
        let reference = reference?;
        let nodes: Vec<u32> = reference.closes.iter().map(|c| c.0).collect();
        let closes = steps_at(w.lc, lx, on.trie, on.reps, lex, &nodes)?;
        Some(Inside {
            words: Arc::new(Packed::from_vec(
                slice.with_rest_of(n, &reference.words.to_vec()),
            )),
            closes,
            walked: 0,
        })
    }

    /// [`Inside::diff`] of `lex` (one lexeme in progress, no shadows) from the string body it
    /// reaches on a byte that spells no declared name ([`RARE_BODY_BYTES`]), when that body takes
    /// the [`Slice`]: a key of an object with declared keys and others allowed walks only where
    /// its spelling still follows a declared one (a few hundred nodes), not the whole trie.
    fn read_off_body(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'_>,
        lex: u32,
        n_words: usize,
    ) -> Option<Inside> {
        let (trie, reps) = (on.trie, on.reps);
        let slice = self.slice.as_ref()?;
        let lx = w.cx.lx;
        let (pend, sh) = &w.lc.states.values[lex as usize];
        if pend.len() != 1 || *sh != 0 {
            return None;
        }
        let chars = self.body.get_or_insert_with(|| slice.chars(lx));
        let body = RARE_BODY_BYTES.iter().find_map(|&b| {
            let st = w.lc.step(lx, lex, b);
            let next = w.lc.steps[st].next;
            let taken = st != 0 && next != NONE && next != lex && w.lc.steps[st].closes.is_empty();
            (taken && Slice::takes(w.lc, lx, next, chars)).then_some(next)
        })?;
        let Kept::Inside(reference) = self.get(w, on, body, n_words) else {
            return None;
        };
        Inside::diff(w.lc, lx, trie, reps, lex, body, &reference, DIFF_NODES)
    }

    /// What lexer state `lex` (several lexemes in progress) allows by itself, from what each of
    /// its lexemes allows alone (with the same shadows): [`Inside::union`]. A token stays inside
    /// `lex`'s lexemes iff it stays inside one of them (a lexeme that can still finish after the
    /// token could at every byte before, shadows stepping alike), and a lexeme closes at a node
    /// iff one of them does (it could finish on the way there). The start of an object's key (a
    /// DFA per known key and a string's) is then a string's lexer state, shelved by an earlier
    /// schema, and a few keys'. None when the steps cannot be read (never: a fresh walk then).
    fn union(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'_>,
        lex: u32,
        n_words: usize,
    ) -> Option<Kept> {
        let (pend, sh) = w.lc.states.values[lex as usize].clone();
        let mut parts = Vec::with_capacity(pend.len());
        for q in pend {
            let alone = w.lc.state(vec![q], sh);
            match self.get(w, on, alone, n_words) {
                Kept::Dense => {
                    self.by_lex.put(lex, Kept::Dense);
                    return Some(Kept::Dense);
                }
                Kept::Inside(ins) => parts.push(ins),
            }
        }
        let made = Inside::union(w.lc, w.cx.lx, on.trie, on.reps, lex, &parts)?;
        let shape = w.lc.shape(w.cx.lx, lex);
        Some(self.keep(lex, shape, Arc::new(made)))
    }

    /// [`Inside::diff`] from the candidate most alike (the most DFA states in common, then the most
    /// terminals; the newest of those): the start of a key and a key being spelled differ in few
    /// places.
    fn diff_from_candidate(
        &self,
        w: &mut Walk<'_>,
        trie: &TokenTrie,
        reps: &[u8],
        lex: u32,
        shape: &(Vec<u32>, u32),
    ) -> Option<Inside> {
        let pend = &w.lc.states.values[lex as usize].0;
        let mut best: Option<((usize, usize), u32)> = None;
        for (cand, (terms, _)) in &self.recent {
            let shared = terms
                .iter()
                .filter(|t| shape.0.binary_search(t).is_ok())
                .count();
            let same = w.lc.states.values[*cand as usize]
                .0
                .iter()
                .filter(|q| pend.binary_search(q).is_ok())
                .count();
            if shared > 0 && best.is_none_or(|b| (same, shared) > b.0) {
                best = Some(((same, shared), *cand));
            }
        }
        let (_, cand) = best?;
        let Some(Kept::Inside(reference)) = self.by_lex.peek(&cand) else {
            return None;
        };
        Inside::diff(w.lc, w.cx.lx, trie, reps, lex, cand, reference, DIFF_NODES)
    }

    /// Keep `made`, just computed for `lex` (of `shape`): cached (as [`Kept::Dense`] past
    /// [`DENSE_CLOSES`]), and a candidate for the next ones.
    pub fn keep(&mut self, lex: u32, shape: (Vec<u32>, u32), mut made: Arc<Inside>) -> Kept {
        if let Some(m) = Arc::get_mut(&mut made) {
            m.words = self.pool.share_arc(Arc::clone(&m.words));
        }
        let kept = if made.closes.len() > DENSE_CLOSES {
            Kept::Dense
        } else {
            self.remember(lex, shape);
            Kept::Inside(made)
        };
        self.by_lex.put(lex, kept.clone());
        kept
    }

    /// Keep `lex` (just computed) as a candidate for the next ones.
    fn remember(&mut self, lex: u32, shape: (Vec<u32>, u32)) {
        let mut alike = self.by_shape.peek(&shape).cloned().unwrap_or_default();
        alike.insert(0, lex);
        alike.truncate(CANDIDATES);
        self.by_shape.put(shape.clone(), alike);
        self.recent.push_front((lex, shape));
        self.recent.truncate(CANDIDATES);
    }

    /// The candidate of `shape` (among the last computed of that shape) whose lexemes in progress
    /// take the most tokens alike with `lex`'s (compared one by one, in state order, which is
    /// terminal order: the shapes are equal), with the least length of token they may take
    /// differently ([`Lexer::first_difference`]; more than the trie's depth: none) and its
    /// [`Inside`]; only for lexer states without shadows, and only when few tokens are that long
    /// ([`DEEP_SHARE`]).
    fn alike(
        &self,
        lc: &LexCache,
        lx: &Lexer,
        lex: u32,
        shape: &(Vec<u32>, u32),
        trie: &TokenTrie,
    ) -> Option<(usize, Arc<Inside>)> {
        let depth = trie.max_depth;
        let pend = |lex: u32| match &lc.states.values[lex as usize] {
            (pend, 0) => Some(pend),
            _ => None,
        };
        let qs = pend(lex)?;
        let mut best: Option<(usize, Arc<Inside>)> = None;
        for cand in self.by_shape.peek(shape).into_iter().flatten() {
            let Some(ps) = pend(*cand) else { continue };
            let Some(Kept::Inside(hit)) = self.by_lex.peek(cand) else {
                continue;
            };
            let from = qs
                .iter()
                .zip(ps)
                .map(|(&q, &p)| lx.first_difference(q, p, depth, ALIKE_PAIRS))
                .min()
                .unwrap_or(depth + 1);
            // (read off a candidate only where few tokens reach the difference: else a walk of
            // most of the trie again, dearer than the other ways of [`Insides::get`])
            let long = trie.tokens_from_len(from).len();
            if long <= trie.by_len.len() / DEEP_SHARE && best.as_ref().is_none_or(|b| from > b.0) {
                best = Some((from, Arc::clone(hit)));
                // (each comparison searches the pairs of states up to the difference: tens of us
                // for a bounded string's states, whose difference is at the bound)
                if long <= FEW_LONG {
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::ByteClasses;
    use crate::test_rng::Rng;
    use crate::vocab::Vocab;

    const ALPHABET: &[u8] = b"ab\"";

    /// A terminal over `ALPHABET`: per state, its successor (local index) by each byte and whether
    /// it accepts.
    type Term = (Vec<[Option<usize>; 3]>, Vec<bool>);

    /// A random terminal of `k` states (its start never accepting; a quarter of the moves dead).
    fn random_term(rng: &mut Rng, k: usize) -> Term {
        let (mut rows, mut accepting) = (Vec::new(), Vec::new());
        for s in 0..k {
            accepting.push(s != 0 && rng.below(3) == 0);
            rows.push([0; 3].map(|_| (rng.below(4) != 0).then(|| rng.below(k))));
        }
        (rows, accepting)
    }

    /// The lexer of `terms` in this order, and where each term's states start.
    fn assemble(terms: &[&Term], greedy: Vec<bool>) -> (Lexer, Vec<usize>) {
        let n = 1 + terms.iter().map(|t| t.1.len()).sum::<usize>();
        let mut table = vec![0u32; n * 256];
        let (mut accepting, mut term_of, mut start) = (vec![false; n], vec![0u32; n], Vec::new());
        let mut off = 1;
        for (t, (rows, acc)) in terms.iter().enumerate() {
            start.push(off as u32);
            for (s, row) in rows.iter().enumerate() {
                term_of[off + s] = t as u32;
                accepting[off + s] = acc[s];
                for (&b, &to) in ALPHABET.iter().zip(row) {
                    if let Some(to) = to {
                        table[(off + s) * 256 + usize::from(b)] = (off + to) as u32;
                    }
                }
            }
            off += rows.len();
        }
        let offsets = start.iter().map(|&s| s as usize).collect();
        let m = terms.len();
        let lx = Lexer::new(table, accepting, term_of, start, greedy, vec![false; m]);
        (lx.unwrap(), offsets)
    }

    /// A lexer of three random terminals over `ALPHABET` (4 to 7 states each, random greediness)
    fn lexer(rng: &mut Rng) -> Lexer {
        let sizes: Vec<usize> = (0..3).map(|_| 4 + rng.below(4)).collect();
        let terms: Vec<Term> = sizes.iter().map(|&k| random_term(rng, k)).collect();
        let greedy = (0..3).map(|_| rng.below(2) == 0).collect();
        assemble(&terms.iter().collect::<Vec<_>>(), greedy).0
    }

    /// Every string over `ALPHABET` of 1 to 6 bytes as a vocabulary, and its byte trie.
    fn trie() -> TokenTrie {
        let mut toks: Vec<Vec<u8>> = vec![Vec::new()];
        let mut layer: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..6 {
            layer = layer
                .iter()
                .flat_map(|p| ALPHABET.iter().map(move |&b| [p.as_slice(), &[b]].concat()))
                .collect();
            toks.extend(layer.iter().cloned());
        }
        let n = toks.len();
        let vocab = Vocab::from_tokens(toks, &[0], n).unwrap();
        TokenTrie::build(&vocab, &ByteClasses::identity().map)
    }

    /// The lexer states of every DFA state alone, then those `walks` random walks of fewer than
    /// `most` of `bytes` reach from the terminals' starts together (a walk stops before its
    /// lexemes die).
    fn lexer_states(
        lc: &mut LexCache,
        lx: &Lexer,
        rng: &mut Rng,
        walks: usize,
        most: usize,
        bytes: &[u8],
    ) -> Vec<u32> {
        let mut lexes: Vec<u32> = (1..lx.n_states() as u32)
            .map(|q| lc.state(vec![q], 0))
            .collect();
        for _ in 0..walks {
            let mut lex = lc.state(lx.start.clone(), 0);
            for _ in 0..rng.below(most) {
                let st = lc.step(lx, lex, bytes[rng.below(bytes.len())]);
                if st == 0 || lc.steps[st].next == NONE {
                    break;
                }
                lex = lc.steps[st].next;
            }
            lexes.push(lex);
        }
        lexes
    }

    /// Per close node, the closes there (terminal, shadow set after).
    type Closes = Vec<(u32, Vec<(u32, u32)>)>;

    /// An [`Inside`] as what it means: its words, and per close node the closes there.
    fn meaning(lc: &LexCache, ins: &Inside) -> (Vec<u32>, Closes) {
        let closes = ins
            .closes
            .iter()
            .map(|&(node, st)| (node, lc.steps[st as usize].closes.clone()));
        (ins.words.to_vec(), closes.collect())
    }

    #[test]
    fn shared_insides_are_the_fresh_ones() {
        let trie = trie();
        let reps: Vec<u8> = (0..=255).collect();
        let words = (trie.tok_ids.len() + 1).div_ceil(32);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut alike, mut deep, mut diffs) = (0, 0, 0);
        for _ in 0..24 {
            let lx = lexer(&mut rng);
            let mut lc = LexCache::new(&lx);
            // single lexemes in progress at every DFA state, and the lexer states a few random
            // bytes away from two or three lexemes started together
            let lexes = lexer_states(&mut lc, &lx, &mut rng, 20, 4, ALPHABET);
            let fresh: Vec<Inside> = lexes
                .iter()
                .map(|&l| Inside::of(&mut lc, &lx, &trie, &reps, l, words))
                .collect();
            for (i, &a) in lexes.iter().enumerate() {
                let want = meaning(&lc, &fresh[i]);
                // (every lexer state here is narrow: three bytes in all)
                let got = Inside::narrow(&mut lc, &lx, &trie, &reps, a, words, usize::MAX).unwrap();
                assert_eq!(meaning(&lc, &got), want, "descent from lexer state {a}");
                assert_eq!(
                    got.walked, fresh[i].walked,
                    "the nodes a scan steps through"
                );
                if got.walked > 1 {
                    let cut = Inside::narrow(&mut lc, &lx, &trie, &reps, a, words, got.walked - 1);
                    assert!(cut.is_none(), "the node budget holds");
                }
                for (j, &b) in lexes.iter().enumerate() {
                    let got = Inside::diff(&mut lc, &lx, &trie, &reps, a, b, &fresh[j], usize::MAX)
                        .unwrap();
                    assert_eq!(meaning(&lc, &got), want, "diff of lexer state {a} from {b}");
                    diffs += 1;
                    // one lexeme in progress each, of one terminal: tokens shorter than the first
                    // difference are taken alike, so only the deeper subtrees need walking again
                    let (pa, pb) = (
                        &lc.states.values[a as usize].0,
                        &lc.states.values[b as usize].0,
                    );
                    if i >= lx.n_states() - 1
                        || j >= lx.n_states() - 1
                        || lx.terminal_of(pa[0]) != lx.terminal_of(pb[0])
                    {
                        continue;
                    }
                    let from = lx.first_difference(pa[0], pb[0], trie.max_depth, 64);
                    if from > trie.max_depth {
                        assert_eq!(meaning(&lc, &fresh[j]).0, want.0, "{a} and {b} alike");
                        alike += 1;
                    } else if from >= 1 {
                        let got =
                            Inside::deep(&mut lc, &lx, &trie, &reps, a, &fresh[j], from, None);
                        assert_eq!(meaning(&lc, &got), want, "{a} from {b} below depth {from}");
                        deep += 1;
                    }
                }
            }
        }
        // the cases the walks take are all met
        assert!(
            alike > 50 && deep > 500 && diffs > 10_000,
            "{alike} {deep} {diffs}"
        );
    }

    #[test]
    fn shelved_insides_serve_other_grammars() {
        // lexer states of one grammar, and the same ones in another grammar that has the
        // terminals in another order beside one more: equal signatures, and what one shelves
        // (tokens, close nodes) is, with the other's steps found by `steps_at`, its fresh walk
        let trie = trie();
        let reps: Vec<u8> = (0..=255).collect();
        let words = (trie.tok_ids.len() + 1).div_ceil(32);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (mut served, mut told_apart, mut unions) = (0, 0, 0);
        for _ in 0..24 {
            let terms: Vec<Term> = (0..4)
                .map(|_| {
                    let k = 2 + rng.below(5);
                    random_term(&mut rng, k)
                })
                .collect();
            let (a, at) = assemble(&[&terms[0], &terms[1], &terms[2]], vec![true; 3]);
            let (b, bt) = assemble(&[&terms[3], &terms[2], &terms[0], &terms[1]], vec![true; 4]);
            // term i of `a` is term `pos[i]` of `b`
            let pos = [2, 3, 1];
            let (mut la, mut lb) = (LexCache::new(&a), LexCache::new(&b));
            let mut pairs = Vec::new();
            for _ in 0..30 {
                // two or three terminals' lexemes started together, some bytes in, and a shadow
                let picked: Vec<usize> = (0..3).filter(|_| rng.below(3) != 0).collect();
                if picked.is_empty() {
                    continue;
                }
                let state = |t: usize, off: &[usize], s: usize| (off[t] + s) as u32;
                let local: Vec<(usize, usize)> = picked
                    .iter()
                    .map(|&t| (t, rng.below(terms[t].1.len())))
                    .collect();
                let mut pa: Vec<u32> = local.iter().map(|&(t, s)| state(t, &at, s)).collect();
                let mut pb: Vec<u32> = local.iter().map(|&(t, s)| state(pos[t], &bt, s)).collect();
                pa.sort_unstable();
                pb.sort_unstable();
                let (sa, sb) = if rng.below(3) == 0 {
                    let (t, s) = (rng.below(3), rng.below(2));
                    (
                        la.shadows.intern(vec![state(t, &at, s)]),
                        lb.shadows.intern(vec![state(pos[t], &bt, s)]),
                    )
                } else {
                    (0, 0)
                };
                pairs.push((la.state(pa, sa), lb.state(pb, sb)));
            }
            for &(x, y) in &pairs {
                let key = la.signature(&a, x, trie.max_depth, SIGNATURE_LEN);
                assert!(key.is_some() && key == lb.signature(&b, y, trie.max_depth, SIGNATURE_LEN));
                let got = Inside::of(&mut la, &a, &trie, &reps, x, words);
                let want = Inside::of(&mut lb, &b, &trie, &reps, y, words);
                let nodes: Vec<u32> = got.closes.iter().map(|c| c.0).collect();
                let closes = steps_at(&mut lb, &b, &trie, &reps, y, &nodes).unwrap();
                let served_ = Inside {
                    words: got.words.clone(),
                    closes,
                    walked: 0,
                };
                assert_eq!(meaning(&lb, &served_), meaning(&lb, &want));
                served += 1;
                // and from what each of its lexemes allows alone
                let (pend, sh) = lb.states.values[y as usize].clone();
                let parts: Vec<Arc<Inside>> = pend
                    .iter()
                    .map(|&q| {
                        let alone = lb.state(vec![q], sh);
                        Arc::new(Inside::of(&mut lb, &b, &trie, &reps, alone, words))
                    })
                    .collect();
                let joined = Inside::union(&mut lb, &b, &trie, &reps, y, &parts).unwrap();
                assert_eq!(meaning(&lb, &joined), meaning(&lb, &want));
                unions += usize::from(parts.len() > 1);
            }
            // and lexer states of one grammar with equal signatures allow the same, with unequal
            // ones told apart
            for &(x, _) in &pairs {
                for &(y, _) in &pairs {
                    let same = la.signature(&a, x, trie.max_depth, SIGNATURE_LEN)
                        == la.signature(&a, y, trie.max_depth, SIGNATURE_LEN);
                    let fx = Inside::of(&mut la, &a, &trie, &reps, x, words);
                    let fy = Inside::of(&mut la, &a, &trie, &reps, y, words);
                    let nodes = |f: &Inside| f.closes.iter().map(|c| c.0).collect::<Vec<_>>();
                    if same {
                        assert_eq!(
                            (fx.words.clone(), nodes(&fx)),
                            (fy.words.clone(), nodes(&fy))
                        );
                    } else {
                        told_apart += 1;
                    }
                }
            }
        }
        assert!(
            served > 400 && told_apart > 1000 && unions > 200,
            "{served} {told_apart} {unions}"
        );
    }

    /// A lexer of a quoted string of `[a-t]`, an address `[a-t]+@[a-r]+` (loop sets of 20 and 18
    /// bytes, neither closing on the way) and a name `[a-t]+` (closing after every letter).
    fn looping_lexer() -> Lexer {
        // states: 1 -"-> 2 -[a-t]-> 2 -"-> 3 | 4 -[a-t]-> 5 -[a-t]-> 5 -@-> 6 -[a-r]-> 7 -[a-r]-> 7
        // | 8 -[a-t]-> 9 -[a-t]-> 9
        let mut table = vec![0u32; 10 * 256];
        let mut edge = |from: usize, bytes: &[u8], to: u32| {
            for &b in bytes {
                table[from * 256 + usize::from(b)] = to;
            }
        };
        let (body, domain): (Vec<u8>, Vec<u8>) = ((b'a'..=b't').collect(), (b'a'..=b'r').collect());
        edge(1, b"\"", 2);
        edge(2, &body, 2);
        edge(2, b"\"", 3);
        edge(4, &body, 5);
        edge(5, &body, 5);
        edge(5, b"@", 6);
        edge(6, &domain, 7);
        edge(7, &domain, 7);
        edge(8, &body, 9);
        edge(9, &body, 9);
        let mut accepting = vec![false; 10];
        for s in [3, 7, 9] {
            accepting[s] = true;
        }
        let term_of = vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2];
        Lexer::new(
            table,
            accepting,
            term_of,
            vec![1, 4, 8],
            vec![true; 3],
            vec![false; 3],
        )
        .unwrap()
    }

    #[test]
    fn walks_passing_over_quiet_runs_allow_what_full_walks_do() {
        let lx = looping_lexer();
        assert_eq!(lx.loops().len(), 2);
        let mut rng = Rng(0x5eed_100b_0003);
        let pieces: [&[u8]; 8] = [b"a", b"k", b"ks", b"r", b"t", b"\"", b"@", b"z"];
        let toks = rng.tokens(3000, &pieces, 8);
        let n = toks.len();
        let vocab = Vocab::from_tokens(toks, &[0], n).unwrap();
        let identity = ByteClasses::identity().map;
        let trie = TokenTrie::build(&vocab, &identity);
        let reps: Vec<u8> = (0..=255).collect();
        let loops = Loops::new(lx.loops(), &lx.classes().map, identity, &reps, &vocab);
        let words = vocab.n_words();
        let mut lc = LexCache::new(&lx);
        // every DFA state alone, the three starts together, and the states a few bytes on
        let lexes = lexer_states(&mut lc, &lx, &mut rng, 40, 5, b"ak\"@r");
        let (mut quiet, mut passed) = (0, 0);
        // what the deep walks below read off
        let reference = Inside::of(&mut lc, &lx, &trie, &reps, lexes[0], words);
        for &lex in &lexes {
            let full = Inside::of(&mut lc, &lx, &trie, &reps, lex, words);
            let runs = Inside::onto(
                &mut lc,
                &lx,
                &trie,
                &reps,
                lex,
                vec![0; words],
                Some(&loops),
            );
            assert_eq!(
                meaning(&lc, &runs),
                meaning(&lc, &full),
                "lexer state {lex}"
            );
            assert_eq!(
                runs.walked, full.walked,
                "the nodes covered, stepped or passed over"
            );
            quiet += usize::from(lc.takes_quietly(&lx, lex) != 0);
            let (mut w, mut c) = (vec![0; words], Vec::new());
            let (covered, stepped) = walk_lexer(
                &mut lc,
                &lx,
                &trie,
                &reps,
                Some(&loops),
                lex,
                0,
                &mut w,
                &mut c,
            );
            passed += covered - stepped;
            // read off another state from a depth on: the deeper subtrees alike with and without
            for from in [1, 3] {
                let a = Inside::deep(&mut lc, &lx, &trie, &reps, lex, &reference, from, None);
                let b = Inside::deep(
                    &mut lc,
                    &lx,
                    &trie,
                    &reps,
                    lex,
                    &reference,
                    from,
                    Some(&loops),
                );
                assert_eq!(
                    meaning(&lc, &b),
                    meaning(&lc, &a),
                    "lexer state {lex} from {from}"
                );
            }
        }
        // the name's letters are taken, not quietly: it closes after each
        let name = lc.state(vec![9], 0);
        assert!(lc.takes(&lx, name) != 0 && lc.takes_quietly(&lx, name) == 0);
        assert!(
            quiet > 0 && passed > 0,
            "{quiet} quiet lexer states, {passed} nodes passed over"
        );
    }

    #[test]
    fn equal_signatures_allow_the_same() {
        // many tiny terminals, so that lexer states often have equal signatures: those must take
        // the same tokens and close at the same nodes (what the shelf relies on), and every
        // difference in acceptance or in the byte a transition is on must show in the signature
        let trie = trie();
        let reps: Vec<u8> = (0..=255).collect();
        let words = (trie.tok_ids.len() + 1).div_ceil(32);
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let (mut equal, mut unequal, mut truncated) = (0, 0, 0);
        for round in 0..9 {
            let terms: Vec<Term> = (0..40)
                .map(|_| {
                    if round % 3 == 2 {
                        // 'a' goes on, '"' ends it, 'b' leads into 8 more 'a's after which
                        // it can end or not: told apart only by whether a state can accept again
                        let k = 2 + rng.below(4);
                        let end = k + 9;
                        let mut rows: Vec<[Option<usize>; 3]> = (0..k)
                            .map(|s| [Some(s + 1), Some(k + 1), Some(end)])
                            .collect();
                        rows.push([None, Some(k + 1), Some(end)]);
                        rows.extend((k + 1..k + 8).map(|t| [Some(t + 1), None, None]));
                        rows.push([None, None, (rng.below(2) == 0).then_some(end)]);
                        rows.push([None, None, None]);
                        let mut acc = vec![false; end + 1];
                        acc[end] = true;
                        return (rows, acc);
                    }
                    if round % 3 == 1 {
                        // a counted string: 'a' and 'b' go on, '"' ends it, at most k bytes
                        // (longer than the trie's tokens or not: alike only within 6 bytes)
                        let k = 3 + rng.below(10);
                        let mut rows: Vec<[Option<usize>; 3]> = (0..k)
                            .map(|s| [Some(s + 1), Some(s + 1), Some(k + 1)])
                            .collect();
                        rows.push([None, None, Some(k + 1)]);
                        rows.push([None, None, None]);
                        let mut acc = vec![false; k + 2];
                        acc[k + 1] = true;
                        return (rows, acc);
                    }
                    let k = 1 + rng.below(2);
                    let rows = (0..k)
                        .map(|_| [0; 3].map(|_| (rng.below(3) == 0).then(|| rng.below(k))))
                        .collect();
                    (rows, (0..k).map(|_| rng.below(2) == 0).collect())
                })
                .collect();
            let (lx, off) = assemble(&terms.iter().collect::<Vec<_>>(), vec![true; 40]);
            let mut lc = LexCache::new(&lx);
            let mut lexes: Vec<u32> = (1..lx.n_states() as u32)
                .map(|q| lc.state(vec![q], 0))
                .collect();
            for _ in 0..40 {
                let mut pend = vec![off[rng.below(40)] as u32, off[rng.below(40)] as u32];
                pend.sort_unstable();
                pend.dedup();
                lexes.push(lc.state(pend, 0));
            }
            // per lexer state: its signature, and its words and close nodes
            type Seen = (Option<Vec<u32>>, (Vec<u32>, Vec<u32>));
            let seen: Vec<Seen> = lexes
                .iter()
                .map(|&l| {
                    let f = Inside::of(&mut lc, &lx, &trie, &reps, l, words);
                    let nodes = f.closes.iter().map(|c| c.0).collect();
                    (
                        lc.signature(&lx, l, trie.max_depth, SIGNATURE_LEN),
                        (f.words.to_vec(), nodes),
                    )
                })
                .collect();
            let whole: Vec<Option<Vec<u32>>> = lexes
                .iter()
                .map(|&l| lx.encode(&lc.states.values[l as usize].0, usize::MAX, None))
                .collect();
            for (i, (x, fx)) in seen.iter().enumerate() {
                for (j, (y, fy)) in seen.iter().enumerate() {
                    if x == y {
                        assert_eq!(fx, fy);
                        equal += 1;
                        truncated += usize::from(whole[i] != whole[j]);
                    } else if fx == fy {
                        unequal += 1; // allowed: the key is exact, not minimal
                    }
                }
            }
        }
        assert!(
            equal > 1000 && unequal > 0 && truncated > 100,
            "{equal} {unequal} {truncated}"
        );
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::classes::ByteClasses;
    use crate::vocab::Vocab;

    /// `GM_VOCAB=/path cargo test --release speed -- --ignored --nocapture`: fresh walks of a JSON
    /// string's inner state over a real vocabulary (u32 count, then per token u32 length + bytes).
    #[test]
    #[ignore]
    fn walk_a_string_state() {
        let Ok(path) = std::env::var("GM_VOCAB") else {
            return;
        };
        let data = std::fs::read(path).unwrap();
        let u = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let mut toks = Vec::new();
        let mut at = 4;
        for _ in 0..u(0) {
            let n = u(at);
            toks.push(data[at + 4..at + 4 + n].to_vec());
            at += 4 + n;
        }
        let n = toks.len();
        let vocab = Vocab::from_tokens(toks, &[], n).unwrap();
        let trie = TokenTrie::build(&vocab, &ByteClasses::identity().map);
        // 1: start, 2: inner, 3: after a backslash, 4: closed
        let mut table = vec![0u32; 5 * 256];
        table[256 + usize::from(b'"')] = 2;
        for b in 0x20..=255usize {
            table[2 * 256 + b] = 2;
        }
        table[2 * 256 + usize::from(b'"')] = 4;
        table[2 * 256 + usize::from(b'\\')] = 3;
        for &b in b"\\\"/bfnrt" {
            table[3 * 256 + usize::from(b)] = 2;
        }
        let lx = Lexer::new(
            table,
            vec![false, false, false, false, true],
            vec![0; 5],
            vec![1],
            vec![true],
            vec![false],
        )
        .unwrap();
        let reps: Vec<u8> = (0..=255).collect();
        let words = n.div_ceil(32);
        let mut times = Vec::new();
        for _ in 0..15 {
            let mut lc = LexCache::new(&lx);
            let lex = lc.state(vec![2], 0);
            let t = std::time::Instant::now();
            let ins = Inside::of(&mut lc, &lx, &trie, &reps, lex, words);
            times.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(ins.walked > 100_000);
        }
        let t = std::time::Instant::now();
        let slice =
            crate::cfg::slice::Slice::build(&vocab, &trie, crate::cfg::slice::JSON_EXCLUDED);
        eprintln!("slice built in {:?}", t.elapsed());
        let mut sliced = Vec::new();
        for _ in 0..15 {
            let mut lc = LexCache::new(&lx);
            let lex = lc.state(vec![2], 0);
            let t = std::time::Instant::now();
            let body = crate::cfg::slice::BodyChars::of(&lx, crate::cfg::slice::JSON_EXCLUDED);
            assert!(crate::cfg::slice::Slice::takes(&mut lc, &lx, lex, &body));
            let ins = slice.inside(&mut lc, &lx, &reps, lex);
            sliced.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(ins.walked > 0);
        }
        sliced.sort_by(f64::total_cmp);
        eprintln!("sliced walk median {:.0} us, {} nodes walked", sliced[7], {
            let mut lc = LexCache::new(&lx);
            let lex = lc.state(vec![2], 0);
            slice.inside(&mut lc, &lx, &reps, lex).walked
        });
        times.sort_by(f64::total_cmp);
        eprintln!(
            "{} nodes: fresh walk median {:.0} us, min {:.0} us",
            trie.n_nodes(),
            times[7],
            times[0]
        );
    }
}
