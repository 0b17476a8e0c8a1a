//! The lexer of the CFG engine: every terminal DFA of a grammar in one transition table over bytes,
//! and the lazily built lexer-state machine the mask walk and `advance` step through.
//!
//! Port of `grammarmask/cfg/lexer.py` (the specification). Global DFA state 0 is dead; every other
//! state belongs to one terminal (`term_of`). The table is stored by byte class (bytes whose columns
//! are equal in every state share one column): `states x classes` words instead of `states x 256`
//! (a 100,000-word enum's 200,000-state terminal: 23 MB at its 29 classes against 200 MB), and the
//! lexer-state machine below is built per class too.
//!
//! A *lexer state* is `(pend, shadows)`: the DFA states of the lexemes started at the last boundary
//! and still alive (one per candidate terminal), and the shadows of greedy lexemes already closed
//! whose DFA still runs: if a shadow reaches an accepting state again, lark's longest match would
//! have taken the longer lexeme, so the cut was illegal and the configuration dies. Lexer states and
//! shadow sets are interned to small ids; the transition of a lexer state by a byte class
//! ([`LexStep`]) is computed once and kept.

use std::collections::VecDeque;
use std::sync::OnceLock;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::CfgError;
use crate::classes::{dead_row_and_targets, ByteClasses, Cells};

/// No id (a dead transition, a lexeme that cannot go on).
pub const NONE: u32 = u32::MAX;

/// The most lexer states [`LexCache::takes`] follows a loop set through.
const FAMILY: usize = 64;

/// The flag of a state a [`LexCache::signature`] does not step out of.
const LEAF: u32 = 4;

/// The static tables: combined terminal DFAs, per-terminal facts.
#[derive(Debug)]
pub struct Lexer {
    /// the exact byte classes of the combined table
    classes: ByteClasses,
    /// `table[s * classes.count + c]`: the state after class `c` from `s`
    table: CellVec,
    /// [`ByteClasses::live_map`] of `table`
    live_map: ([u8; 256], usize),
    accepting: Vec<bool>,
    term_of: Vec<u32>,
    /// `reaccept[s]`: a non-empty path from `s` reaches an accepting state
    reaccept: Vec<bool>,
    /// `busy[s]`: a path from `s` reaches an accepting state from which many bytes lead to
    /// accepting states (its lexeme closes at nearly every byte: a name)
    busy: Vec<bool>,
    /// the classes a state steps back to itself by, for the few states that keep many bytes so
    /// (a name's letters, a quoted string's characters), largest first ([`LexCache::takes`])
    loops: Vec<[u64; 4]>,
    /// the start state of each terminal's DFA
    pub start: Vec<u32>,
    pub greedy: Vec<bool>,
    pub ignore: Vec<bool>,
    /// start states of the ignore terminals (sorted, no dead state)
    pub ignore_starts: Vec<u32>,
    /// each state's row as runs of classes to one state, made when [`Lexer::first_difference`]
    /// first reads it (made for the whole table at the first question, a schema's 290,000 cells
    /// took 0.3-0.8 ms of one mask, where a question reads a few rows)
    runs: Vec<OnceLock<Box<[Run]>>>,
}

/// A table of numbers in `u16` cells while every one fits, else in `u32` (half the bytes: a JSON
/// Schema with thirty bounded strings has 44,000 lexer states of 88 classes, 15 MB as `u32`). A
/// table changes kind once at most, so the branch in [`CellVec::get`] goes one way.
#[derive(Debug)]
enum CellVec {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl CellVec {
    fn new(cells: Vec<u32>) -> CellVec {
        if cells.iter().all(|&t| t <= u32::from(u16::MAX)) {
            CellVec::Narrow(cells.iter().map(|&t| t as u16).collect())
        } else {
            CellVec::Wide(cells)
        }
    }

    #[inline]
    fn get(&self, i: usize) -> u32 {
        match self {
            CellVec::Narrow(t) => u32::from(t[i]),
            CellVec::Wide(t) => t[i],
        }
    }

    /// Set cell `i` to `v` (the whole table made `u32` first if `v` does not fit `u16`).
    fn set(&mut self, i: usize, v: u32) {
        match self {
            CellVec::Narrow(t) => match u16::try_from(v) {
                Ok(v) => t[i] = v,
                Err(_) => {
                    let mut wide: Vec<u32> = t.iter().map(|&x| u32::from(x)).collect();
                    wide[i] = v;
                    *self = CellVec::Wide(wide);
                }
            },
            CellVec::Wide(t) => t[i] = v,
        }
    }

    /// Grow to `n` cells, the new ones 0.
    fn grow(&mut self, n: usize) {
        match self {
            CellVec::Narrow(t) => t.resize(n, 0),
            CellVec::Wide(t) => t.resize(n, 0),
        }
    }

    fn len(&self) -> usize {
        match self {
            CellVec::Narrow(t) => t.len(),
            CellVec::Wide(t) => t.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            CellVec::Narrow(t) => 2 * t.len(),
            CellVec::Wide(t) => 4 * t.len(),
        }
    }
}

/// A run of a row: from class `from` on (to the next run's), every class leads to state `to`.
#[derive(Debug, Clone, Copy)]
struct Run {
    from: u32,
    to: u32,
}

impl Lexer {
    /// Check and wrap the combined tables: `table[s * 256 + b]`, `accepting[s]`, `term_of[s]`
    /// (any value for the dead state 0), per terminal `start`, `greedy` and `ignore`.
    pub fn new(
        table: Vec<u32>,
        accepting: Vec<bool>,
        term_of: Vec<u32>,
        start: Vec<u32>,
        greedy: Vec<bool>,
        ignore: Vec<bool>,
    ) -> Result<Lexer, CfgError> {
        let identity = ByteClasses::identity().map;
        Self::classed(table, &identity, accepting, term_of, start, greedy, ignore)
    }

    /// [`Lexer::new`] with the table given by byte class: `table[s * width + pre[b]]` for byte `b`,
    /// `width` the table's columns (`table.len() / accepting.len()`). Any `pre` with values below
    /// `width` will do; the classes kept are the exact ones (equal columns merged).
    #[allow(clippy::too_many_arguments)]
    pub fn classed(
        table: Vec<u32>,
        pre: &[u8; 256],
        accepting: Vec<bool>,
        term_of: Vec<u32>,
        start: Vec<u32>,
        greedy: Vec<bool>,
        ignore: Vec<bool>,
    ) -> Result<Lexer, CfgError> {
        Self::from_cells(&table[..], pre, accepting, term_of, start, greedy, ignore)
    }

    /// [`Lexer::classed`] reading the table where it lies (the bytes Python handed over): the lexer
    /// keeps only its `states x classes` copy, never a 256-column one.
    #[allow(clippy::too_many_arguments)]
    pub fn from_cells<C: Cells + ?Sized>(
        table: &C,
        pre: &[u8; 256],
        accepting: Vec<bool>,
        term_of: Vec<u32>,
        start: Vec<u32>,
        greedy: Vec<bool>,
        ignore: Vec<bool>,
    ) -> Result<Lexer, CfgError> {
        let n = accepting.len();
        let n_terms = start.len();
        let bad = |m: String| Err(CfgError::Grammar(format!("native CFG lexer: {m}")));
        let cells = table.n_cells();
        let width = cells.checked_div(n).unwrap_or(0);
        if n == 0
            || n >= NONE as usize
            || width == 0
            || width > 256
            || cells != n * width
            || term_of.len() != n
        {
            return bad(format!(
                "{cells} transitions and {} terminal labels do not fit {n} states",
                term_of.len()
            ));
        }
        if let Some(b) = (0..256).find(|&b| usize::from(pre[b]) >= width) {
            return bad(format!(
                "byte {b} has class {} of a table with {width} columns",
                pre[b]
            ));
        }
        if greedy.len() != n_terms || ignore.len() != n_terms {
            return bad("per-terminal tables differ in length".into());
        }
        if let Some(problem) = dead_row_and_targets(table, width, &accepting) {
            return bad(problem);
        }
        if let Some(s) = (1..n).find(|&s| term_of[s] as usize >= n_terms) {
            return bad(format!("state {s} belongs to no terminal"));
        }
        if let Some(s) = start.iter().find(|&&s| s as usize >= n) {
            return bad(format!("start state {s} of {n}"));
        }
        let classes = ByteClasses::of_classed_table(pre, table, width);
        let table = classes.reduce_classed(pre, table, width);
        let sizes: Vec<usize> = classes.sizes().into_iter().map(usize::from).collect();
        let (reaccept, busy) = reaccepting(&table, classes.count, &sizes, &accepting);
        let loops = self_loops(&table, classes.count, &sizes);
        let live_map = classes.live_map(&table);
        let table = CellVec::new(table);
        let mut ignore_starts: Vec<u32> = (0..n_terms)
            .filter(|&t| ignore[t] && start[t] != 0)
            .map(|t| start[t])
            .collect();
        ignore_starts.sort_unstable();
        ignore_starts.dedup();
        Ok(Lexer {
            runs: (0..n).map(|_| OnceLock::new()).collect(),
            classes,
            table,
            live_map,
            accepting,
            term_of,
            reaccept,
            busy,
            loops,
            start,
            greedy,
            ignore,
            ignore_starts,
        })
    }

    /// The combined transition table by class (`table[s * n_classes + c]`), as `u32` (for tests:
    /// the engine reads cells through [`Lexer::next`]).
    #[cfg(test)]
    pub fn table(&self) -> Vec<u32> {
        (0..self.table.len()).map(|i| self.table.get(i)).collect()
    }

    /// Cells of the combined table (states x classes), and the bytes they take.
    pub fn table_cells(&self) -> (usize, usize) {
        (self.table.len(), self.table.bytes())
    }

    /// [`ByteClasses::live_map`] of the combined table: the classes every state leads to the dead
    /// state by are dropped.
    pub fn live_map(&self) -> ([u8; 256], usize) {
        self.live_map
    }

    /// The byte classes of the combined table.
    pub fn classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// Number of byte classes (the table's columns).
    pub fn n_classes(&self) -> usize {
        self.classes.count
    }

    /// The class of byte `b`.
    #[inline]
    pub fn class_of(&self, b: u8) -> u8 {
        self.classes.map[usize::from(b)]
    }

    /// Number of states, the dead state included.
    pub fn n_states(&self) -> usize {
        self.accepting.len()
    }

    /// The terminal state `q` belongs to.
    pub fn terminal_of(&self, q: u32) -> u32 {
        self.term_of[q as usize]
    }

    /// Number of terminals.
    pub fn n_terminals(&self) -> usize {
        self.start.len()
    }

    /// The loop sets: per set, bit `c` of word `c / 64` for each of its classes.
    pub fn loops(&self) -> &[[u64; 4]] {
        &self.loops
    }

    /// No loop sets (for tests: the walks step through every subtree).
    #[cfg(test)]
    pub fn forget_loops(&mut self) {
        self.loops.clear();
    }

    /// The state after class `c` from `s` (0: dead).
    #[inline]
    pub fn next(&self, s: u32, c: u8) -> u32 {
        self.table
            .get(s as usize * self.classes.count + usize::from(c))
    }

    /// Whether DFA state `q` accepts (a lexeme in it can close).
    pub fn accepts(&self, q: u32) -> bool {
        self.accepting[q as usize]
    }

    /// The states after each class from `s` (the tests' reference for [`Lexer::row_runs`]).
    #[cfg(test)]
    fn row(&self, s: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.classes.count).map(move |c| self.next(s, c as u8))
    }

    /// The state after byte `b` from `s`.
    #[inline]
    pub fn next_byte(&self, s: u32, b: u8) -> u32 {
        self.next(s, self.class_of(b))
    }

    /// The DFA states reachable from `roots`, numbered from 1 in the order a breadth-first search
    /// meets them (0: dead), each as whether it accepts and can accept again, and where each byte
    /// takes it (runs of bytes: `first byte << 24 | number`, ended by [`NONE`]); the roots'
    /// numbers first. With `depth`, a state `depth` bytes or more from the roots is a leaf (its
    /// flags alone, [`LEAF`]): no path of at most `depth` bytes steps out of it. None when longer
    /// than `max_len` ([`LexCache::signature`]).
    pub(super) fn encode(
        &self,
        roots: &[u32],
        max_len: usize,
        depth: Option<usize>,
    ) -> Option<Vec<u32>> {
        let mut ids: HashMap<u32, u32> = HashMap::default();
        // the states in the order met, with their distance from the roots
        let mut order: Vec<(u32, usize)> = Vec::new();
        let mut number = |q: u32, d: usize, order: &mut Vec<(u32, usize)>| -> u32 {
            if q == 0 {
                return 0;
            }
            *ids.entry(q).or_insert_with(|| {
                order.push((q, d));
                order.len() as u32
            })
        };
        let mut key: Vec<u32> = roots.iter().map(|&q| number(q, 0, &mut order)).collect();
        let mut i = 0;
        while i < order.len() {
            let (s, d) = order[i];
            i += 1;
            let flags =
                u32::from(self.accepting[s as usize]) | u32::from(self.reaccept[s as usize]) << 1;
            if depth.is_some_and(|depth| d >= depth) {
                key.push(flags | LEAF);
                continue;
            }
            key.push(flags);
            let mut last = NONE;
            for b in 0..=255u8 {
                let t = self.next(s, self.class_of(b));
                if t != last {
                    key.push(u32::from(b) << 24 | number(t, d + 1, &mut order));
                    last = t;
                }
            }
            key.push(NONE);
            if key.len() > max_len {
                // (so a state visited takes 3 words at least, and each numbers 256 more at most:
                // the numbers stay below 2^24, under the run's byte)
                return None;
            }
        }
        Some(key)
    }

    /// The length of the shortest byte string after which the lexer states of one lexeme in
    /// progress, in DFA state `a` or in `b` (of one terminal, no shadows), step differently: one
    /// dies and the other does not, or one can close and the other cannot (or closing leaves a
    /// shadow), or one can go on and the other cannot. `depth + 1` when no string of at most `depth`
    /// bytes tells them apart. Then every token shorter than the answer is taken from `a` exactly
    /// as from `b` ([`super::inside::Inside`]): a string of `maxLength` 1,000 has a DFA state per
    /// length, and all of them far from the bound take tokens alike. A breadth-first search over
    /// pairs of states (each pair once, at its least depth); when it meets more than `pairs` pairs
    /// the depth it got to is the answer (no more than the truth).
    pub fn first_difference(&self, a: u32, b: u32, depth: usize, pairs: usize) -> usize {
        let mut seen: HashSet<(u32, u32)> = HashSet::default();
        let mut level = vec![(a, b)];
        let mut next_level = Vec::new();
        let mut steps: Vec<(u32, u32)> = Vec::new();
        for at in 1..=depth {
            for &(x, y) in &level {
                self.pair_steps(x, y, &mut steps);
                for &(nx, ny) in &steps {
                    if self.tells_apart(nx, ny) {
                        return at;
                    }
                    if self.reaccept[nx as usize] && seen.insert((nx, ny)) {
                        if seen.len() > pairs {
                            return at;
                        }
                        next_level.push((nx, ny));
                    }
                }
            }
            std::mem::swap(&mut level, &mut next_level);
            next_level.clear();
            if level.is_empty() {
                break;
            }
        }
        depth + 1
    }

    /// Whether states `nx` and `ny`, stepped to alike from a pair [`Lexer::first_difference`]
    /// compares, differ at once: a dead one, or a different acceptance, future or terminal, or a
    /// close that would leave its own state as a shadow.
    fn tells_apart(&self, nx: u32, ny: u32) -> bool {
        let (i, j) = (nx as usize, ny as usize);
        nx == 0
            || ny == 0
            || self.accepting[i] != self.accepting[j]
            || self.reaccept[i] != self.reaccept[j]
            || self.term_of[i] != self.term_of[j]
            || (self.accepting[i] && self.greedy[self.term_of[i] as usize] && self.reaccept[i])
    }

    /// The pairs of states `x` and `y` step to by one class where they step apart, in class order,
    /// a pair that consecutive classes repeat once (`out`, cleared first): their rows taken a run
    /// of classes at a time, not a class at a time (a string's state has about ten runs over the
    /// fifty classes of a JSON Schema's lexer, and a bounded string's states are compared a
    /// thousand pairs at a time: schema-person's first masks inside its `maxLength` name, p99 over
    /// five new processes 206-209 -> 182-186 us).
    fn pair_steps(&self, x: u32, y: u32, out: &mut Vec<(u32, u32)>) {
        out.clear();
        let (rx, ry) = (self.row_runs(x), self.row_runs(y));
        let (mut i, mut j) = (0, 0);
        let mut last = (0, 0);
        while i < rx.len() && j < ry.len() {
            let pair = (rx[i].to, ry[j].to);
            if pair.0 != pair.1 && pair != last {
                out.push(pair);
                last = pair;
            }
            // on to the next run of either row (the one that ends first; both where they end alike)
            let end_x = rx.get(i + 1).map_or(u32::MAX, |r| r.from);
            let end_y = ry.get(j + 1).map_or(u32::MAX, |r| r.from);
            i += usize::from(end_x <= end_y);
            j += usize::from(end_y <= end_x);
        }
    }

    /// State `s`'s row as runs of classes leading to one state (made at the first ask, read from
    /// the cells themselves and allocated once at its size: a bounded string's first comparisons
    /// make a few hundred rows at once, and pushing them a class at a time was half of such a mask).
    fn row_runs(&self, s: u32) -> &[Run] {
        self.runs[s as usize].get_or_init(|| {
            let n = self.classes.count;
            let at = s as usize * n;
            match &self.table {
                CellVec::Narrow(t) => runs_of(&t[at..at + n]),
                CellVec::Wide(t) => runs_of(&t[at..at + n]),
            }
        })
    }
}

/// A row of cells (at most 256) as runs of classes leading to one state: one pass into a buffer
/// on the stack, then one allocation at the size.
fn runs_of<T: Copy + PartialEq + Into<u32>>(row: &[T]) -> Box<[Run]> {
    let mut buf = [Run { from: 0, to: 0 }; 256];
    let mut k = 0;
    if let Some(&first) = row.first() {
        buf[0].to = first.into();
        k = 1;
        let mut last = first;
        for (c, &to) in row.iter().enumerate().skip(1) {
            if to != last {
                buf[k] = Run {
                    from: c as u32,
                    to: to.into(),
                };
                k += 1;
                last = to;
            }
        }
    }
    buf[..k].into()
}

/// Per state: whether a non-empty path reaches an accepting state, and whether some path (the
/// empty one too) reaches an accepting state from which many bytes (`sizes[c]` in class `c`) lead
/// to accepting states: a lexeme that closes at nearly every byte (a name), whose lexer states the
/// mask walk takes whole. Backward searches over
/// the edges, predecessors in one flat array: no vector per state.
/// Bytes a state must step back to itself by for its set to be a loop set ([`Lexer`]'s `loops`),
/// and the most loop sets kept.
const LOOP_BYTES: usize = 16;
pub const MAX_LOOPS: usize = 7;

/// The distinct sets of classes states of `table` step back to themselves by, of at least
/// [`LOOP_BYTES`] bytes (`sizes[c]`: the bytes of class `c`), largest first, at most [`MAX_LOOPS`].
fn self_loops(table: &[u32], width: usize, sizes: &[usize]) -> Vec<[u64; 4]> {
    let mut found: Vec<(usize, [u64; 4])> = Vec::new();
    for (s, row) in table.chunks_exact(width).enumerate().skip(1) {
        let mut set = [0u64; 4];
        let mut bytes = 0;
        for (c, &t) in row.iter().enumerate() {
            if t as usize == s {
                set[c / 64] |= 1 << (c % 64);
                bytes += sizes[c];
            }
        }
        if bytes >= LOOP_BYTES && !found.iter().any(|f| f.1 == set) {
            found.push((bytes, set));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    found.truncate(MAX_LOOPS);
    found.into_iter().map(|f| f.1).collect()
}

fn reaccepting(
    table: &[u32],
    width: usize,
    sizes: &[usize],
    accepting: &[bool],
) -> (Vec<bool>, Vec<bool>) {
    let n = accepting.len();
    // predecessors grouped by target (counting sort): preds[lo[t] .. lo[t + 1]]
    let mut lo = vec![0u32; n + 1];
    for &t in &table[width..] {
        if t != 0 {
            lo[t as usize + 1] += 1;
        }
    }
    for i in 0..n {
        lo[i + 1] += lo[i];
    }
    let mut fill = lo.clone();
    let mut preds = vec![0u32; lo[n] as usize];
    for (s, row) in table.chunks_exact(width).enumerate().skip(1) {
        for &t in row {
            if t != 0 {
                preds[fill[t as usize] as usize] = s as u32;
                fill[t as usize] += 1;
            }
        }
    }
    // the states some path (the empty one too) leads from to a state of `targets`
    let backward = |targets: Vec<bool>| -> Vec<bool> {
        let mut reaches = targets;
        reaches[0] = false;
        let mut todo: Vec<u32> = (1..n as u32).filter(|&s| reaches[s as usize]).collect();
        while let Some(s) = todo.pop() {
            for &p in &preds[lo[s as usize] as usize..lo[s as usize + 1] as usize] {
                if !reaches[p as usize] {
                    reaches[p as usize] = true;
                    todo.push(p);
                }
            }
        }
        reaches
    };
    let reaches = backward(accepting.to_vec());
    let reaccept: Vec<bool> = (0..n)
        .map(|s| {
            s != 0
                && table[s * width..(s + 1) * width]
                    .iter()
                    .any(|&t| reaches[t as usize])
        })
        .collect();
    // an accepting state from which many bytes lead to accepting states again: the lexeme closes
    // at nearly every byte from there (a name's letters; not a number's digits, nor spaces)
    let busy = backward(
        (0..n)
            .map(|s| {
                accepting[s]
                    && table[s * width..(s + 1) * width]
                        .iter()
                        .zip(sizes)
                        .filter(|&(&t, _)| accepting[t as usize])
                        .map(|(_, &k)| k)
                        .sum::<usize>()
                        >= BUSY_BYTES
            })
            .collect(),
    );
    (reaccept, busy)
}

/// Bytes from an accepting state to accepting states past which its lexeme is busy.
const BUSY_BYTES: usize = 16;

/// Values interned to dense ids.
#[derive(Debug)]
pub struct Interner<K> {
    ids: HashMap<K, u32>,
    pub values: Vec<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Interner<K> {
    pub fn new() -> Self {
        Interner {
            ids: HashMap::default(),
            values: Vec::new(),
        }
    }

    pub fn intern(&mut self, k: K) -> u32 {
        if let Some(&id) = self.ids.get(&k) {
            return id;
        }
        self.insert(k)
    }

    /// [`Interner::intern`] of a borrowed value, copied in only when it is new (a mask walk asks
    /// for the same configuration sets over and over).
    pub fn intern_ref<Q>(&mut self, k: &Q) -> u32
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(&id) = self.ids.get(k) {
            return id;
        }
        self.insert(k.to_owned())
    }

    /// A new value's id.
    fn insert(&mut self, k: K) -> u32 {
        let id = self.values.len() as u32;
        self.values.push(k.clone());
        self.ids.insert(k, id);
        id
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Forget every value, keeping the memory.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.values.clear();
    }
}

impl<K: std::hash::Hash + Eq + Clone> Default for Interner<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// A lexer state after one byte: the lexer state that stays inside the lexeme (`next`, [`NONE`]
/// when no pending lexeme can still be finished), and the closes there: per terminal, the shadow set
/// after the close (the greedy lexeme itself added when it can accept again).
#[derive(Debug, Clone, Default)]
pub struct LexStep {
    pub next: u32,
    pub closes: Vec<(u32, u32)>,
}

/// The lazily built lexer-state machine (mutable: held under the compiled grammar's lock).
#[derive(Debug)]
pub struct LexCache {
    /// shadow sets (sorted states); id 0 is the empty set
    pub shadows: Interner<Vec<u32>>,
    /// lexer states `(pend, shadow set id)`
    pub states: Interner<(Vec<u32>, u32)>,
    /// `trans[lex * width + c]`: 1 + the index of its [`LexStep`] in `steps` after class `c` (0:
    /// not computed yet)
    trans: CellVec,
    /// the lexer's byte classes (the columns of `trans`)
    width: usize,
    pub steps: Vec<LexStep>,
    shadow_step: HashMap<(u32, u8), u32>,
    finish: HashMap<(u32, u32), bool>,
    /// per lexer state, the loop sets it is known about (high byte) and takes (low byte)
    /// ([`LexCache::takes`])
    taken: Vec<u16>,
    /// per DFA state asked, the loop sets it is known about (high byte) and keeps alive by
    /// itself (low byte) ([`LexCache::keeps`])
    keeps: HashMap<u32, u16>,
    /// per lexer state, the loop sets it is known about (high byte) and takes quietly (low byte)
    /// ([`LexCache::takes_quietly`])
    quiet: Vec<u16>,
    /// per shadow set met, the set standing for it ([`LexCache::shadow_set`])
    canonical: HashMap<u32, u32>,
    /// the first shadow set of each one-step behaviour: by class, whether it refuses the cut
    by_behaviour: HashMap<[u64; 4], u32>,
}

impl LexCache {
    /// The empty machine of lexer `lx`.
    pub fn new(lx: &Lexer) -> Self {
        let mut shadows = Interner::new();
        shadows.intern(Vec::new());
        LexCache {
            shadows,
            states: Interner::new(),
            trans: CellVec::Narrow(Vec::new()),
            width: lx.n_classes(),
            steps: vec![LexStep {
                next: NONE,
                closes: Vec::new(),
            }],
            shadow_step: HashMap::default(),
            finish: HashMap::default(),
            taken: Vec::new(),
            keeps: HashMap::default(),
            quiet: Vec::new(),
            canonical: HashMap::default(),
            // the empty set: every class lets the cut stand
            by_behaviour: HashMap::from_iter([([0; 4], 0)]),
        }
    }

    /// The id of shadow set `set` (sorted), or of the first one met that behaves alike: when after
    /// any byte each set either refuses the cut or is left empty (the lexeme closed can no longer
    /// go on), the two are the same to every later step. Whitespace of a bounded run closed after
    /// one, two or ten spaces leaves shadows of different DFA states that all refuse one more space
    /// or newline and vanish on anything else: the lexer states after them are one, and so are the
    /// walks and Earley sets that follow (a JSON document's gaps close at some 70 trie nodes).
    fn shadow_set(&mut self, lx: &Lexer, set: Vec<u32>) -> u32 {
        let id = self.shadows.intern(set);
        if let Some(&c) = self.canonical.get(&id) {
            return c;
        }
        let mut refused = [0u64; 4];
        let mut one_step = true;
        'classes: for c in 0..lx.n_classes() {
            for &h in &self.shadows.values[id as usize] {
                let n = lx.next(h, c as u8);
                if n == 0 {
                    continue;
                }
                if lx.accepting[n as usize] {
                    refused[c / 64] |= 1 << (c % 64);
                    continue 'classes;
                }
                if lx.reaccept[n as usize] {
                    one_step = false; // a shadow that goes on: compared as it is
                    break 'classes;
                }
            }
        }
        let c = if one_step {
            *self.by_behaviour.entry(refused).or_insert(id)
        } else {
            id
        };
        self.canonical.insert(id, c);
        c
    }

    /// The id of lexer state `(pend, shadows)`.
    pub fn state(&mut self, pend: Vec<u32>, shadows: u32) -> u32 {
        let id = self.states.intern((pend, shadows));
        let need = (id as usize + 1) * self.width;
        if self.trans.len() < need {
            self.trans.grow(need);
            self.taken.resize(id as usize + 1, 0);
            self.quiet.resize(id as usize + 1, 0);
        }
        id
    }

    /// The shadows after a byte of class `class`; [`NONE`] when one of them accepts (the earlier
    /// cut was illegal).
    pub fn step_shadows(&mut self, lx: &Lexer, sh: u32, class: u8) -> u32 {
        if sh == 0 {
            return 0;
        }
        if let Some(&hit) = self.shadow_step.get(&(sh, class)) {
            return hit;
        }
        let mut out = Vec::new();
        let mut dead = false;
        for &h in &self.shadows.values[sh as usize] {
            let n = lx.next(h, class);
            if n != 0 {
                if lx.accepting[n as usize] {
                    dead = true;
                    break;
                }
                if lx.reaccept[n as usize] {
                    out.push(n);
                }
            }
        }
        let id = if dead {
            NONE
        } else {
            out.sort_unstable();
            out.dedup();
            self.shadow_set(lx, out)
        };
        self.shadow_step.insert((sh, class), id);
        id
    }

    /// Whether lexeme state `q` can reach acceptance with no shadow of `sh` accepting on the way;
    /// `nonempty`: at least one more byte.
    pub fn can_finish(&mut self, lx: &Lexer, q: u32, sh: u32, nonempty: bool) -> bool {
        if q == 0 {
            return false;
        }
        let (acc, re) = (lx.accepting[q as usize], lx.reaccept[q as usize]);
        if sh == 0 {
            return if nonempty { re } else { acc || re };
        }
        if !nonempty && acc {
            return true;
        }
        if let Some(&hit) = self.finish.get(&(q, sh)) {
            return hit;
        }
        let mut seen: HashMap<(u32, u32), ()> = HashMap::default();
        seen.insert((q, sh), ());
        let mut todo = VecDeque::from([(q, sh)]);
        let mut found = false;
        'bfs: while let Some((s, h)) = todo.pop_front() {
            for c in 0..lx.n_classes() {
                let c = c as u8; // at most 256 classes: 0..=255
                let n = lx.next(s, c);
                if n == 0 {
                    continue;
                }
                let h2 = self.step_shadows(lx, h, c);
                if h2 == NONE {
                    continue;
                }
                if lx.accepting[n as usize] {
                    found = true;
                    break 'bfs;
                }
                if h2 == 0 {
                    // every shadow has died: none can accept any more, so the rest is reachability
                    // (a 100,000-word enum after a whitespace shadow: a search of its whole
                    // 200,000-state DFA, 0.6 s, became this one look-up)
                    if lx.reaccept[n as usize] {
                        found = true;
                        break 'bfs;
                    }
                    continue;
                }
                if seen.insert((n, h2), ()).is_none() {
                    todo.push_back((n, h2));
                }
            }
        }
        self.finish.insert((q, sh), found);
        found
    }

    /// The step of lexer state `lex` by `byte` (index into `steps`; 0 is the dead step).
    ///
    /// (Inlined: a step met before is a table read, and the walks that step node by node, such
    /// as [`super::inside::Inside::narrow`]'s descent, paid a call's register saves for it.)
    #[inline]
    pub fn step(&mut self, lx: &Lexer, lex: u32, byte: u8) -> usize {
        let class = lx.class_of(byte);
        let slot = lex as usize * self.width + usize::from(class);
        let hit = self.trans.get(slot);
        if hit != 0 {
            return hit as usize - 1;
        }
        self.new_step(lx, lex, class, slot)
    }

    /// [`LexCache::step`] the first time `lex` meets `class`: made and kept.
    #[inline(never)]
    fn new_step(&mut self, lx: &Lexer, lex: u32, class: u8, slot: usize) -> usize {
        let made = self.make_step(lx, lex, class);
        let idx = match made {
            None => 0,
            Some(s) => {
                self.steps.push(s);
                self.steps.len() - 1
            }
        };
        self.trans.set(slot, idx as u32 + 1);
        idx
    }

    fn make_step(&mut self, lx: &Lexer, lex: u32, class: u8) -> Option<LexStep> {
        // most steps of a new lexer state are dead: every lexeme in progress refuses the byte, which
        // is known before the shadows are stepped or anything is allocated
        let (pend, sh) = &self.states.values[lex as usize];
        let sh = *sh;
        if pend.iter().all(|&q| lx.next(q, class) == 0) {
            return None;
        }
        let mut pend2: Vec<u32> = pend
            .iter()
            .map(|&q| lx.next(q, class))
            .filter(|&q| q != 0)
            .collect();
        let sh2 = self.step_shadows(lx, sh, class);
        if sh2 == NONE {
            return None;
        }
        pend2.sort_unstable();
        pend2.dedup();
        let inside = pend2.iter().any(|&q| self.can_finish(lx, q, sh2, true));
        let mut closes = Vec::new();
        for &q in &pend2 {
            if lx.accepting[q as usize] {
                let t = lx.term_of[q as usize];
                let after = if lx.greedy[t as usize] && lx.reaccept[q as usize] {
                    let mut v = self.shadows.values[sh2 as usize].clone();
                    v.push(q);
                    v.sort_unstable();
                    v.dedup();
                    self.shadow_set(lx, v)
                } else {
                    sh2
                };
                closes.push((t, after));
            }
        }
        let next = if inside { self.state(pend2, sh2) } else { NONE };
        if next == NONE && closes.is_empty() {
            return None;
        }
        Some(LexStep { next, closes })
    }

    /// The loop sets of `lx` ([`Lexer::loops`]) lexer state `lex` takes (bit `k`: set `k`): every
    /// string of their bytes keeps one of its lexemes going. A name's state takes its letters (and
    /// so does the state of a keyword's first letters, which a name shares), a quoted string's
    /// its characters. Answered by one of its lexemes when that one alone lives on through them
    /// ([`LexCache::keeps_by_one`]), else followed through the lexer states such strings reach, at
    /// most [`FAMILY`] (each of which then takes the set too).
    pub fn takes(&mut self, lx: &Lexer, lex: u32) -> u8 {
        let all = (1u16 << lx.loops.len()) - 1;
        let mut known = self.taken[lex as usize];
        if known >> 8 == all {
            return (known & 0xFF) as u8;
        }
        for k in 0..lx.loops.len() {
            if known & (0x100 << k) != 0 {
                continue;
            }
            if self.keeps_by_one(lx, lex, k) {
                known |= 0x101 << k;
                self.taken[lex as usize] = known;
                continue;
            }
            match self.family(lx, lex, &lx.loops[k]) {
                Some((members, _)) => {
                    for m in members {
                        self.taken[m as usize] |= 0x101 << k;
                    }
                    known |= 0x101 << k;
                }
                None => {
                    known |= 0x100 << k;
                    self.taken[lex as usize] = known;
                }
            }
        }
        debug_assert_eq!(known >> 8, all);
        (known & 0xFF) as u8
    }

    /// Whether one busy lexeme `lex` has in progress (a name's: [`Lexer`]'s `busy`) lives on
    /// through every string of loop set `k`, and no shadow can cut it short (there are none): then
    /// `lex` takes the set. A keyword's first letters beside a name's are a new lexer state after
    /// each letter, and following them all ([`LexCache::family`]) made a step per letter of each
    /// (SQL's mask after `orders o`: 1,350 steps, 40 % of it); the name's DFA state alone answers.
    /// Other states are left to the family: a string's body is asked whether it takes its
    /// characters quietly ([`LexCache::takes_quietly`]), which follows the family anyway.
    fn keeps_by_one(&mut self, lx: &Lexer, lex: u32, k: usize) -> bool {
        let (pend, sh) = &self.states.values[lex as usize];
        if *sh != 0 {
            return false;
        }
        (0..pend.len()).any(|i| {
            let q = self.states.values[lex as usize].0[i];
            lx.busy[q as usize] && self.keeps(lx, q, k)
        })
    }

    /// Whether DFA state `q` lives on through every non-empty string of loop set `k`: each state
    /// such a string leads to can still accept after another byte (so the lexer state of `q` alone
    /// finds the lexeme going on, [`LexCache::make_step`]'s `inside`). Followed through at most
    /// [`FAMILY`] states; memoised for `q` (and, when it does, for the states it leads to).
    fn keeps(&mut self, lx: &Lexer, q: u32, k: usize) -> bool {
        let known = self.keeps.get(&q).copied().unwrap_or(0);
        if known & (0x100 << k) != 0 {
            return known & (1 << k) != 0;
        }
        let set = &lx.loops[k];
        let mut seen = vec![q];
        let mut at = 0;
        let mut lives = true;
        'search: while at < seen.len() {
            let r = seen[at];
            at += 1;
            for c in 0..lx.n_classes() {
                if set[c / 64] & (1 << (c % 64)) == 0 {
                    continue;
                }
                let n = lx.next(r, c as u8);
                if n == 0 || !lx.reaccept[n as usize] {
                    lives = false;
                    break 'search;
                }
                if !seen.contains(&n) {
                    if seen.len() == FAMILY {
                        lives = false;
                        break 'search;
                    }
                    seen.push(n);
                }
            }
        }
        let marked = if lives { &seen[..] } else { &seen[..1] };
        for &r in marked {
            *self.keeps.entry(r).or_insert(0) |= (0x100 | u16::from(lives)) << k;
        }
        lives
    }

    /// The loop sets lexer state `lex` takes ([`LexCache::takes`]) without a lexeme closing on the
    /// way (bit `k`: set `k`): no string of their bytes closes one. A string's body, or an email
    /// pattern's letters, are taken quietly; a name's letters are not (it can close after each).
    /// Below a trie node whose subtree such a set spells, every token stays inside and no lexeme
    /// closes, so a walk of what the state allows by itself marks the subtree's tokens unvisited.
    pub fn takes_quietly(&mut self, lx: &Lexer, lex: u32) -> u8 {
        let takes = self.takes(lx, lex);
        let mut known = self.quiet[lex as usize];
        for k in 0..lx.loops.len() {
            if takes & (1 << k) == 0 || known & (0x100 << k) != 0 {
                continue;
            }
            // (the family is found: `lex` takes the set; its members are closed under the set's
            // steps, so each takes it quietly when all of them do)
            if let Some((members, true)) = self.family(lx, lex, &lx.loops[k]) {
                for m in members {
                    self.quiet[m as usize] |= 0x101 << k;
                }
                known |= 0x101 << k;
            } else {
                known |= 0x100 << k;
                self.quiet[lex as usize] |= 0x100 << k;
            }
        }
        (known & 0xFF) as u8 & takes
    }

    /// The lexer states strings of classes `set` lead `lex` to, when none dies on one of them and
    /// there are at most [`FAMILY`], and whether no lexeme closes on the way.
    fn family(&mut self, lx: &Lexer, lex: u32, set: &[u64; 4]) -> Option<(Vec<u32>, bool)> {
        let mut members = vec![lex];
        let mut quiet = true;
        let mut at = 0;
        while at < members.len() {
            let m = members[at];
            at += 1;
            for c in 0..lx.n_classes() {
                if set[c / 64] & (1 << (c % 64)) == 0 {
                    continue;
                }
                let st = self.step(lx, m, lx.classes.reps[c]);
                let next = self.steps[st].next;
                if st == 0 || next == NONE {
                    return None;
                }
                quiet &= self.steps[st].closes.is_empty();
                if !members.contains(&next) {
                    if members.len() == FAMILY {
                        return None;
                    }
                    members.push(next);
                }
            }
        }
        Some((members, quiet))
    }

    /// Whether a lexeme `lex` has in progress can come to close at nearly every byte ([`Lexer`]'s
    /// `busy`: a name): then it closes at many trie nodes, and the mask walk takes it whole.
    pub fn busy(&self, lx: &Lexer, lex: u32) -> bool {
        self.states.values[lex as usize]
            .0
            .iter()
            .any(|&q| lx.busy[q as usize])
    }

    /// What lexer state `lex` allows by itself on a trie of tokens of at most `depth` bytes, as a
    /// key that is the same in every grammar: its lexemes in progress and its shadows, and the DFA
    /// states reachable from them, numbered in the order a breadth-first search meets them, each
    /// with whether it accepts (or can accept again) and where each byte takes it. Two lexer
    /// states with equal keys are the same machine up to the names of their states, so they take
    /// the same tokens and close lexemes at the same trie nodes ([`super::inside::Inside`]); which
    /// terminals close there is not in the key. Without shadows only the first `depth` bytes
    /// matter (whether a lexeme can go on is whether its state can accept again): a string of
    /// `maxLength` 1,000 has the key of one of 100 far from its bound. The search starts from the
    /// lexemes in progress, then the shadows, each group ordered by its members' own keys
    /// (terminals are numbered differently in different grammars). None when the key would be
    /// longer than `max_len`.
    pub fn signature(
        &self,
        lx: &Lexer,
        lex: u32,
        depth: usize,
        max_len: usize,
    ) -> Option<Vec<u32>> {
        let (pend, sh) = &self.states.values[lex as usize];
        let shadows = &self.shadows.values[*sh as usize];
        // (with shadows, whether a lexeme can finish depends on all of both machines)
        let depth = shadows.is_empty().then_some(depth);
        let mut roots = Vec::with_capacity(pend.len() + shadows.len());
        for group in [pend, shadows] {
            if group.len() == 1 {
                roots.push(group[0]);
                continue;
            }
            let mut keyed = Vec::with_capacity(group.len());
            for &q in group {
                keyed.push((lx.encode(&[q], max_len, depth)?, q));
            }
            keyed.sort_unstable();
            roots.extend(keyed.into_iter().map(|(_, q)| q));
        }
        let mut key = vec![pend.len() as u32, shadows.len() as u32];
        key.extend(lx.encode(&roots, max_len, depth)?);
        Some(key)
    }

    /// What lexer state `lex` is made of, to find lexer states like it: the terminals of its
    /// lexemes in progress and its shadow set.
    pub fn shape(&self, lx: &Lexer, lex: u32) -> (Vec<u32>, u32) {
        let (pend, sh) = &self.states.values[lex as usize];
        let mut terms: Vec<u32> = pend.iter().map(|&q| lx.term_of[q as usize]).collect();
        terms.sort_unstable();
        (terms, *sh)
    }

    /// The lexer state at a boundary whose candidate lexemes start in `pend`, after shadows `sh`;
    /// [`NONE`] when no lexeme can start there (and the parser cannot accept: `accepting`).
    pub fn fresh(&mut self, lx: &Lexer, pend: &[u32], sh: u32, accepting: bool) -> u32 {
        let ok = accepting || pend.iter().any(|&q| self.can_finish(lx, q, sh, false));
        if ok {
            self.state(pend.to_vec(), sh)
        } else {
            NONE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// [`Lexer::first_difference`] as it was written first: the rows compared a class at a time
    /// (the pairs judged by the same [`Lexer::tells_apart`]).
    fn first_difference_by_class(lx: &Lexer, a: u32, b: u32, depth: usize, pairs: usize) -> usize {
        let mut seen: HashSet<(u32, u32)> = HashSet::default();
        let mut level = vec![(a, b)];
        for at in 1..=depth {
            let mut next_level = Vec::new();
            for &(x, y) in &level {
                let mut last = (0, 0);
                for (nx, ny) in lx.row(x).zip(lx.row(y)) {
                    if nx == ny || (nx, ny) == last {
                        continue;
                    }
                    last = (nx, ny);
                    if lx.tells_apart(nx, ny) {
                        return at;
                    }
                    if lx.reaccept[nx as usize] && seen.insert((nx, ny)) {
                        if seen.len() > pairs {
                            return at;
                        }
                        next_level.push((nx, ny));
                    }
                }
            }
            level = next_level;
            if level.is_empty() {
                break;
            }
        }
        depth + 1
    }

    #[test]
    fn first_differences_by_runs_are_those_by_class() {
        let mut rng = Rng(0x5eed_d1ff_0001);
        let bytes: Vec<u8> = b"abcdefgh\"\\".to_vec();
        let mut compared = 0;
        for _ in 0..60 {
            // two terminals of 3 to 12 states each over ten bytes, a few moves dead
            let sizes = [3 + rng.below(10), 3 + rng.below(10)];
            let n = 1 + sizes[0] + sizes[1];
            let mut table = vec![0u32; n * 256];
            let (mut accepting, mut term_of) = (vec![false; n], vec![0u32; n]);
            let mut off = 1;
            for (t, &k) in sizes.iter().enumerate() {
                for s in off..off + k {
                    term_of[s] = t as u32;
                    accepting[s] = s != off && rng.below(3) == 0;
                    for &b in &bytes {
                        if rng.below(5) != 0 {
                            // runs of bytes to one state are likely: the next byte often follows
                            table[s * 256 + usize::from(b)] = (off + rng.below(k)) as u32;
                        }
                    }
                }
                off += k;
            }
            let greedy = vec![rng.below(2) == 0, rng.below(2) == 0];
            let Ok(lx) = Lexer::new(
                table,
                accepting,
                term_of,
                vec![1, 1 + sizes[0] as u32],
                greedy,
                vec![false; 2],
            ) else {
                continue;
            };
            for a in 1..n as u32 {
                for b in 1..n as u32 {
                    for (depth, pairs) in [(1, 64), (4, 64), (12, 8), (12, 2048)] {
                        assert_eq!(
                            lx.first_difference(a, b, depth, pairs),
                            first_difference_by_class(&lx, a, b, depth, pairs),
                            "states {a} and {b}, depth {depth}, pairs {pairs}"
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert!(compared > 1000);
    }

    /// Whether every string of at most `len` classes of loop set `k` keeps lexer state `lex`
    /// going ([`LexCache::takes`]' meaning, up to a length).
    fn lives_through(lc: &mut LexCache, lx: &Lexer, lex: u32, k: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        (0..lx.n_classes())
            .filter(|&c| lx.loops[k][c / 64] >> (c % 64) & 1 != 0)
            .all(|c| {
                let st = lc.step(lx, lex, lx.classes.reps[c]);
                let next = lc.steps[st].next;
                st != 0 && next != NONE && lives_through(lc, lx, next, k, len - 1)
            })
    }

    #[test]
    fn a_name_beside_keywords_takes_its_letters_without_following_them() {
        // terminal 0: /[a-z]+/ (1 -> 2, 2 loops); 1: "order" (3 -o-> 4 -r-> ... 8); 2: "odd"
        let mut table = vec![0u32; 13 * 256];
        for b in b'a'..=b'z' {
            table[256 + usize::from(b)] = 2;
            table[2 * 256 + usize::from(b)] = 2;
        }
        for (from, word) in [(3, &b"order"[..]), (9, &b"odd"[..])] {
            for (i, &b) in word.iter().enumerate() {
                table[(from + i) * 256 + usize::from(b)] = (from + i + 1) as u32;
            }
        }
        let mut accepting = vec![false; 13];
        for q in [2, 8, 12] {
            accepting[q] = true;
        }
        let term_of = vec![0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2];
        let lx = Lexer::new(
            table,
            accepting,
            term_of,
            vec![1, 3, 9],
            vec![true; 3],
            vec![false; 3],
        )
        .unwrap();
        assert_eq!(lx.loops.len(), 1, "the letters");
        let mut lc = LexCache::new(&lx);
        let after_o = lc.state(vec![2, 4, 10], 0);
        let made = lc.steps.len();
        assert_eq!(lc.takes(&lx, after_o), 1);
        assert_eq!(
            lc.steps.len(),
            made,
            "answered by the name's DFA state, no step made"
        );
        assert!(lives_through(&mut lc, &lx, after_o, 0, 4));
        // the keywords alone die on some letter; behind a shadow the name is not enough
        let words = lc.state(vec![4, 10], 0);
        assert_eq!(lc.takes(&lx, words), 0);
        let sh = lc.shadows.intern(vec![12]);
        let shadowed = lc.state(vec![2, 4], sh);
        assert!(!lc.keeps_by_one(&lx, shadowed, 0));
    }

    #[test]
    fn takes_answers_as_the_families_and_the_strings_do() {
        // random lexers over 'a'..='t' whose states loop on 'a'..='p' or step anywhere; `takes`
        // against a cache that answers by following families only, and against the strings
        let mut rng = Rng(0x5eed_7a6e_0002);
        let (mut by_one, mut by_family, mut compared) = (0, 0, 0);
        for _ in 0..80 {
            let sizes = [2 + rng.below(5), 2 + rng.below(5)];
            let n = 1 + sizes[0] + sizes[1];
            let mut table = vec![0u32; n * 256];
            let (mut accepting, mut term_of) = (vec![false; n], vec![0u32; n]);
            let mut off = 1;
            for (t, &k) in sizes.iter().enumerate() {
                for s in off..off + k {
                    term_of[s] = t as u32;
                    accepting[s] = s != off && rng.below(2) == 0;
                    let looping = rng.below(3) == 0;
                    for b in b'a'..=b't' {
                        let to = if looping && b <= b'p' {
                            s
                        } else if rng.below(4) != 0 {
                            off + rng.below(k)
                        } else {
                            0
                        };
                        table[s * 256 + usize::from(b)] = to as u32;
                    }
                }
                off += k;
            }
            let Ok(lx) = Lexer::new(
                table,
                accepting,
                term_of,
                vec![1, 1 + sizes[0] as u32],
                vec![rng.below(2) == 0, true],
                vec![false; 2],
            ) else {
                continue;
            };
            if lx.loops.is_empty() {
                continue;
            }
            let mut lc = LexCache::new(&lx);
            let mut families = LexCache::new(&lx);
            for _ in 0..12 {
                let mut pend: Vec<u32> = (0..1 + rng.below(3))
                    .map(|_| 1 + rng.below(n - 1) as u32)
                    .collect();
                pend.sort_unstable();
                pend.dedup();
                let shadows = if rng.below(3) == 0 {
                    vec![1 + rng.below(n - 1) as u32]
                } else {
                    Vec::new()
                };
                let sh = lc.shadows.intern(shadows.clone());
                let lex = lc.state(pend.clone(), sh);
                let sh_f = families.shadows.intern(shadows);
                let lex_f = families.state(pend, sh_f);
                let takes = lc.takes(&lx, lex);
                for k in 0..lx.loops.len() {
                    let set = lx.loops[k];
                    let family = families.family(&lx, lex_f, &set).is_some();
                    let bit = takes >> k & 1 != 0;
                    assert!(!family || bit, "a family found, the set not taken");
                    if bit {
                        assert!(lives_through(&mut lc, &lx, lex, k, 4), "taken, yet dies");
                        if lc.keeps_by_one(&lx, lex, k) {
                            by_one += 1;
                        } else {
                            by_family += 1;
                        }
                    }
                    compared += 1;
                }
            }
        }
        assert!(compared > 300, "{compared} answers compared");
        assert!(
            by_one > 20 && by_family > 20,
            "taken: {by_one} by one DFA state, {by_family} by a family"
        );
    }

    /// Terminal 0: /a+/ (states 1 -a-> 2 -a-> 2), terminal 1: "b" (3 -b-> 4).
    fn lexer(greedy: bool) -> Lexer {
        let mut table = vec![0u32; 5 * 256];
        table[256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'a')] = 2;
        table[3 * 256 + usize::from(b'b')] = 4;
        Lexer::new(
            table,
            vec![false, false, true, false, true],
            vec![0, 0, 0, 1, 1],
            vec![1, 3],
            vec![greedy, true],
            vec![false, false],
        )
        .unwrap()
    }

    #[test]
    fn reaccept_and_finish() {
        let lx = lexer(true);
        assert_eq!(lx.reaccept, vec![false, true, true, true, false]);
        let mut c = LexCache::new(&lx);
        assert!(c.can_finish(&lx, 2, 0, true));
        assert!(!c.can_finish(&lx, 4, 0, true));
        assert!(c.can_finish(&lx, 4, 0, false));
        // a shadow in state 2 of /a+/ accepts on the next 'a': lexeme /a+/ from 1 cannot finish
        let sh = c.shadows.intern(vec![2]);
        assert!(!c.can_finish(&lx, 1, sh, true));
        assert_eq!(c.step_shadows(&lx, sh, lx.class_of(b'a')), NONE);
        assert_eq!(c.step_shadows(&lx, sh, lx.class_of(b'b')), 0);
    }

    #[test]
    fn shadow_sets_that_behave_alike_after_one_byte_are_one() {
        // terminal 0: / {1,3}/ (1 -> 2 -> 3 -> 4 by spaces, 2..=4 accepting), greedy; terminal 1:
        // "x" (5 -x-> 6)
        let mut table = vec![0u32; 7 * 256];
        for q in 1..4 {
            table[q * 256 + usize::from(b' ')] = q as u32 + 1;
        }
        table[5 * 256 + usize::from(b'x')] = 6;
        let lx = Lexer::new(
            table,
            vec![false, false, true, true, true, false, true],
            vec![0, 0, 0, 0, 0, 1, 1],
            vec![1, 5],
            vec![true, true],
            vec![false, false],
        )
        .unwrap();
        let mut c = LexCache::new(&lx);
        // a run closed after one or two spaces refuses one more and vanishes on 'x': one set
        let (one, two) = (c.shadow_set(&lx, vec![2]), c.shadow_set(&lx, vec![3]));
        assert_eq!(one, two);
        assert_eq!(c.step_shadows(&lx, one, lx.class_of(b' ')), NONE);
        assert_eq!(c.step_shadows(&lx, one, lx.class_of(b'x')), 0);
        // at the bound nothing can go on: no shadow at all; "x" in progress refuses 'x' instead
        assert_eq!(c.shadow_set(&lx, vec![4]), 0);
        let x = c.shadow_set(&lx, vec![5]);
        assert!(x != one && x != 0);
        // so the lexer states after gaps of one and two spaces are one
        let start = c.state(vec![1, 5], 0);
        let s1 = c.step(&lx, start, b' ');
        let after1 = c.steps[s1].closes.clone();
        let s2 = c.step(&lx, c.steps[s1].next, b' ');
        assert_eq!(after1, c.steps[s2].closes);
        assert_eq!(after1, vec![(0, one)]);
    }

    #[test]
    fn a_shadow_that_goes_on_is_kept_as_it_is() {
        // /a+b/ (1 -a-> 2 -a-> 2 -b-> 3): a shadow in 2 steps to 2 on 'a', not to a refusal
        let mut table = vec![0u32; 4 * 256];
        table[256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'b')] = 3;
        let lx = Lexer::new(
            table,
            vec![false, false, false, true],
            vec![0, 0, 0, 0],
            vec![1],
            vec![true],
            vec![false],
        )
        .unwrap();
        let mut c = LexCache::new(&lx);
        let two = c.shadow_set(&lx, vec![2]);
        assert_eq!(two, c.shadows.intern(vec![2]));
        assert_eq!(c.step_shadows(&lx, two, lx.class_of(b'a')), two);
    }

    #[test]
    fn finishing_once_the_shadows_die_is_reachability() {
        // terminal 0: /a+b/ (1 -a-> 2 -a-> 2 -b-> 3); terminal 1: "a" (4 -a-> 5), greedy, so a
        // closed "a" leaves a shadow in 5 that never accepts again and dies on any byte
        let mut table = vec![0u32; 6 * 256];
        table[256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'b')] = 3;
        table[4 * 256 + usize::from(b'a')] = 5;
        let lx = Lexer::new(
            table,
            vec![false, false, false, true, false, true],
            vec![0, 0, 0, 0, 1, 1],
            vec![1, 4],
            vec![true, true],
            vec![false, false],
        )
        .unwrap();
        let mut c = LexCache::new(&lx);
        let dying = c.shadows.intern(vec![5]);
        assert_eq!(c.step_shadows(&lx, dying, lx.class_of(b'a')), 0);
        for q in [1, 2, 3] {
            assert_eq!(c.can_finish(&lx, q, dying, true), lx.reaccept[q as usize]);
        }
        // a shadow of /a+b/ itself in 2 accepts on 'b': a lexeme in 2 cannot finish beside it
        let alive = c.shadows.intern(vec![2]);
        assert!(!c.can_finish(&lx, 2, alive, true));
        assert!(c.can_finish(&lx, 1, 0, true));
    }

    #[test]
    fn greedy_close_leaves_a_shadow() {
        for greedy in [true, false] {
            let lx = lexer(greedy);
            let mut c = LexCache::new(&lx);
            let s = c.state(vec![1, 3], 0);
            let st = c.step(&lx, s, b'a');
            let step = c.steps[st].clone();
            assert_ne!(step.next, NONE);
            let (t, after) = step.closes[0];
            assert_eq!(t, 0);
            assert_eq!(c.shadows.values[after as usize].is_empty(), !greedy);
            assert_eq!(c.step(&lx, s, b'c'), 0);
        }
    }

    #[test]
    fn classed_tables_are_the_dense_tables() {
        // the lexer of `lexer(true)` given by a finer class map than its own (every byte of
        // 'a'..='e' its own column, the rest column 0): the same classes, table and answers
        let dense = lexer(true);
        let mut pre = [0u8; 256];
        for b in b'a'..=b'e' {
            pre[usize::from(b)] = b - b'a' + 1;
        }
        let mut table = vec![0u32; 5 * 6];
        table[6 + 1] = 2; // state 1 -a-> 2
        table[2 * 6 + 1] = 2;
        table[3 * 6 + 2] = 4; // state 3 -b-> 4
        let lx = Lexer::classed(
            table,
            &pre,
            vec![false, false, true, false, true],
            vec![0, 0, 0, 1, 1],
            vec![1, 3],
            vec![true, true],
            vec![false, false],
        )
        .unwrap();
        assert_eq!(lx.classes(), dense.classes());
        assert_eq!(lx.n_classes(), 3); // 'a', 'b', every other byte
        assert_eq!(lx.table(), dense.table());
        assert_eq!(lx.reaccept, dense.reaccept);
        for s in 0..5 {
            for b in 0..=255u8 {
                assert_eq!(lx.next_byte(s, b), dense.next_byte(s, b));
            }
        }
        // a class map that names a column the table does not have
        pre[0] = 6;
        let bad = Lexer::classed(
            vec![0; 5 * 6],
            &pre,
            vec![false; 5],
            vec![0; 5],
            vec![1],
            vec![true],
            vec![false],
        );
        assert!(bad.is_err());
    }

    #[test]
    fn tables_past_u16_states_keep_u32_cells() {
        // a chain of `n` 'a's, `n` states beside the dead one, in two columns (every other byte,
        // 'a'): `u16` cells up to 65,535 states, `u32` past it, the same answers either way
        for n in [65_534usize, 65_536, 70_000] {
            let mut pre = [0u8; 256];
            pre[usize::from(b'a')] = 1;
            let mut table = vec![0u32; (n + 1) * 2];
            for s in 1..n {
                table[s * 2 + 1] = s as u32 + 1;
            }
            let mut accepting = vec![false; n + 1];
            accepting[n] = true;
            let lx = Lexer::classed(
                table,
                &pre,
                accepting,
                vec![0; n + 1],
                vec![1],
                vec![true],
                vec![false],
            )
            .unwrap();
            let (cells, bytes) = lx.table_cells();
            assert_eq!(cells, (n + 1) * 2);
            assert_eq!(bytes, if n < 65_536 { 2 * cells } else { 4 * cells });
            let mut s = 1;
            for _ in 1..n {
                assert_eq!(lx.next_byte(s, b'b'), 0);
                s = lx.next_byte(s, b'a');
            }
            assert_eq!(s as usize, n);
            assert!(lx.accepts(s) && lx.next_byte(s, b'a') == 0);
            // 'a' alone leads anywhere
            assert_eq!(lx.live_map().1, 1);

            // the lexer-state machine along the chain: a step each, numbered past 65,535 when n
            // is, so its table of steps turns u32 on the way, and the steps known stay known
            let mut c = LexCache::new(&lx);
            let first = c.state(vec![1], 0);
            let mut lex = first;
            let mut taken = Vec::new();
            for _ in 1..n - 1 {
                let st = c.step(&lx, lex, b'a');
                assert_ne!(st, 0);
                taken.push((lex, st));
                lex = c.steps[st].next;
            }
            // (the last 'a' closes the lexeme, which nothing can go on from)
            assert_eq!(c.states.values[lex as usize].0, vec![n as u32 - 1]);
            assert_eq!(
                matches!(c.trans, CellVec::Wide(_)),
                c.steps.len() > usize::from(u16::MAX)
            );
            for &(lex, st) in taken.iter().step_by(997) {
                assert_eq!(c.step(&lx, lex, b'a'), st);
                assert_eq!(c.step(&lx, lex, b'b'), 0);
            }
        }
    }

    #[test]
    fn refuses_bad_tables() {
        assert!(Lexer::new(
            vec![0; 256],
            vec![false, false],
            vec![0, 0],
            vec![],
            vec![],
            vec![]
        )
        .is_err());
        let mut t = vec![0u32; 512];
        t[256] = 7;
        assert!(Lexer::new(
            t,
            vec![false, true],
            vec![0, 0],
            vec![1],
            vec![true],
            vec![false]
        )
        .is_err());
    }
}
