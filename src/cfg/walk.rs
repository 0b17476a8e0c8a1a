//! Stepping configuration sets byte by byte, and the mask walk over the token trie.
//!
//! Port of `CompiledCfg._step` (grammarmask/cfg/compiled.py, the specification). A configuration is
//! `(E, lexer state, fresh)`: the Earley set after the lexemes closed so far, the lexer state (see
//! `lexer.rs`), and whether the output ends exactly at a lexeme boundary. A byte moves the lexer
//! state; where a pending lexeme accepts, a configuration where it closes there is added (the parser
//! advances over its terminal; an ignore terminal leaves the parser as it is).
//!
//! A [`Walk`] names the Earley sets it meets by small local ids and memoises, for its duration, the
//! parser's answers (advance by a terminal, the fresh lexer state after a close), so that a mask
//! walk over a trie of 10^5 tokens asks the parser once per distinct close. Sets are named by their
//! signature, not their address: two sets with one signature have one future (the [`Sigs`] rule
//! state keys and the mask cache already stand on), so configurations that reach equal sets along
//! different lexings are one configuration. Named by address they were kept apart, and a text whose
//! lexemes split two ways at each of many places (Java's `true`, a literal and a name) doubled the
//! configurations at each: 4,096 after a dozen `return true;`.
//!
//! [`Sigs`]: super::earley::Sigs

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::earley::{Ctx, ESet};
use super::inside::{Inside, Insides, Kept};
use super::lexer::MAX_LOOPS;
use super::lexer::{Interner, LexCache, Lexer, NONE};
use super::loops::{Block, Loops};
use super::replay::Ask;
use super::{CfgError, Limits};
use crate::trie::{Stretches, TokenTrie};

/// A configuration inside a walk: (local set id, lexer state id, fresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WConf {
    pub set: u32,
    pub lex: u32,
    pub fresh: bool,
}

/// The trie a mask walk goes over: its labels (`reps[label]`: a byte of the label's class; `cols`:
/// the lexer's class of each label) and the subtrees spelled with the lexer's loop sets.
pub struct OnTrie<'a> {
    pub trie: &'a TokenTrie,
    pub reps: &'a [u8],
    pub cols: &'a [u8],
    pub loops: &'a Loops,
}

/// One stepping session over the grammar's tables (under the compiled grammar's lock).
pub struct Walk<'a> {
    pub cx: Ctx<'a>,
    pub lc: &'a mut LexCache,
    limits: &'a Limits,
    pub sets: Vec<Arc<ESet>>,
    /// local ids by set signature
    ids: HashMap<u64, u32>,
    advanced: HashMap<(u32, u32), u32>,
    fresh: HashMap<(u32, u32), u32>,
    /// parser look-ups left to this walk (`Limits.cfg_walk_visits`; only mask walks count)
    visits: Option<usize>,
    /// the questions asked the parser afresh (not answered by the memos above) and their answers,
    /// in order, when kept ([`Walk::keep_trace`]: for [`super::replay::Replays`])
    pub trace: Option<Vec<(Ask, u32)>>,
}

impl<'a> Walk<'a> {
    pub fn new(cx: Ctx<'a>, lc: &'a mut LexCache, limits: &'a Limits, count_visits: bool) -> Self {
        Walk {
            cx,
            lc,
            limits,
            sets: Vec::new(),
            ids: HashMap::default(),
            advanced: HashMap::default(),
            fresh: HashMap::default(),
            visits: count_visits.then_some(limits.cfg_walk_visits),
            trace: None,
        }
    }

    /// Keep the questions this walk asks the parser from now on ([`Walk::trace`]).
    pub fn keep_trace(&mut self) {
        self.trace = Some(Vec::new());
    }

    /// Give this walk its whole budget of parser look-ups again (after a replay that found nothing:
    /// the mask walk that goes on in it is allowed what a fresh walk is).
    pub fn renew_visits(&mut self) {
        if self.visits.is_some() {
            self.visits = Some(self.limits.cfg_walk_visits);
        }
    }

    fn lx(&self) -> &'a Lexer {
        self.cx.lx
    }

    /// The local id of `set` (of the first set met with its signature).
    pub fn local(&mut self, set: &Arc<ESet>) -> u32 {
        let key = set.sig;
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(Arc::clone(set));
        self.ids.insert(key, id);
        id
    }

    /// The set after closing terminal `t` in local set `s` ([`NONE`]: the parser refuses it).
    pub fn advance(&mut self, s: u32, t: u32) -> Result<u32, CfgError> {
        if let Some(&hit) = self.advanced.get(&(s, t)) {
            return Ok(hit);
        }
        let out = if self.lx().ignore[t as usize] {
            s
        } else if !self.sets[s as usize].allows(t) {
            NONE
        } else {
            if let Some(v) = self.visits.as_mut() {
                if *v == 0 {
                    return Err(CfgError::Budget {
                        budget: "cfg_walk_visits",
                        value: self.limits.cfg_walk_visits,
                        what: "one mask needs to visit more parser states than allowed (tokens that can \
                               be cut into lexemes in very many ways)"
                            .into(),
                    });
                }
                *v -= 1;
            }
            let set = Arc::clone(&self.sets[s as usize]);
            match set.advance(&mut self.cx, t)? {
                Some(n) => self.local(&n),
                None => NONE,
            }
        };
        self.advanced.insert((s, t), out);
        if let Some(trace) = self.trace.as_mut() {
            trace.push((Ask::Advance(s, t), out));
        }
        Ok(out)
    }

    /// The lexer state at a boundary after local set `s` with shadow set `sh` ([`NONE`]: dead).
    pub fn fresh_lex(&mut self, s: u32, sh: u32) -> u32 {
        if let Some(&hit) = self.fresh.get(&(s, sh)) {
            return hit;
        }
        let set = &self.sets[s as usize];
        let lex = self.lc.fresh(self.cx.lx, &set.pend, sh, set.accepting);
        self.fresh.insert((s, sh), lex);
        if let Some(trace) = self.trace.as_mut() {
            trace.push((Ask::Fresh(s, sh), lex));
        }
        lex
    }

    /// `out` := the configurations after `byte` from `confs` (deduplicated).
    pub fn step(
        &mut self,
        confs: &[WConf],
        byte: u8,
        out: &mut Vec<WConf>,
    ) -> Result<(), CfgError> {
        out.clear();
        let lx = self.lx();
        for c in confs {
            let st = self.lc.step(lx, c.lex, byte);
            if st == 0 {
                continue;
            }
            let next = self.lc.steps[st].next;
            if next != NONE {
                push_unique(
                    out,
                    WConf {
                        set: c.set,
                        lex: next,
                        fresh: false,
                    },
                );
            }
            for i in 0..self.lc.steps[st].closes.len() {
                let (t, sh) = self.lc.steps[st].closes[i];
                let s2 = self.advance(c.set, t)?;
                if s2 == NONE {
                    continue;
                }
                let lex = self.fresh_lex(s2, sh);
                if lex != NONE {
                    push_unique(
                        out,
                        WConf {
                            set: s2,
                            lex,
                            fresh: true,
                        },
                    );
                }
            }
        }
        if out.len() > self.limits.cfg_configs {
            return Err(CfgError::Budget {
                budget: "cfg_configs",
                value: self.limits.cfg_configs,
                what: "the output can be cut into lexemes in more ways than allowed (terminals that match \
                       the same text in many splits, as in GBNF's 'root ::= root root | \"a\"+')"
                    .into(),
            });
        }
        Ok(())
    }

    /// Mask words of the tokens of `trie` that leave `root` non-empty, what each lexer state
    /// allows by itself read from `insides` (and kept there when it had to be walked).
    ///
    /// A token is legal iff its configuration set stays non-empty, and a set steps configuration by
    /// configuration, so the mask is the union over `root`'s configurations. From one configuration
    /// `(E, L)` a token's bytes either stay inside the lexemes `L` has in progress (the parser is
    /// not asked: those tokens depend on `L` alone, [`Inside`]) or close one at some trie node, after
    /// which the walk goes on from the configurations the close makes, over that node's subtree
    /// only. So a first visit of a state inside a JSON string walks the few hundred subtrees where
    /// the string can end, not the whole trie. A lexer state whose lexemes close at many nodes (a
    /// name closes at every byte) gains nothing from this: its configurations are walked whole.
    pub fn mask(
        &mut self,
        on: &OnTrie<'_>,
        root: &[WConf],
        insides: &mut Insides,
        words: &mut [u32],
    ) -> Result<(), CfgError> {
        let trie = on.trie;
        let mut lexes: Vec<u32> = root.iter().map(|c| c.lex).collect();
        lexes.sort_unstable();
        lexes.dedup();
        let n_words = words.len();
        // what each lexer state allows by itself (kept for the next visit), or None: taken whole
        // (a busy lexer state: its lexemes close at many nodes)
        let found: Vec<Option<Arc<Inside>>> = lexes
            .iter()
            .map(|&l| match insides.get(self, on, l, n_words) {
                Kept::Inside(ins) => Some(ins),
                Kept::Dense => None,
            })
            .collect();
        for ins in found.iter().flatten() {
            ins.words.or_into(words);
        }
        let kept = |c: &WConf| &found[lexes.binary_search(&c.lex).unwrap_or(0)];
        let mut sub = Subtrees::take(trie.max_depth, self.lx().n_classes());
        let mut whole: Vec<WConf> = Vec::new();
        let mut closes: Vec<(u32, u32)> = Vec::new();
        for c in root {
            match kept(c) {
                Some(ins) => {
                    for &(node, st) in &ins.closes {
                        let id = sub.closed(self, c.set, st)?;
                        if id != NONE {
                            closes.push((node, id));
                        }
                    }
                }
                None => whole.push(*c),
            }
        }
        if closes.windows(2).any(|p| p[0].0 >= p[1].0) {
            closes.sort_by_key(|c| c.0);
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(closes.len());
            for (node, id) in closes {
                match merged.last_mut() {
                    Some(last) if last.0 == node => last.1 = sub.join(last.1, id),
                    _ => merged.push((node, id)),
                }
            }
            closes = merged;
        }
        let whole = if whole.is_empty() {
            None
        } else {
            whole.sort_unstable();
            Some(sub.intern(whole))
        };
        let done = sub.walk(self, on, whole, &closes, words);
        sub.give_back();
        done
    }
}

thread_local! {
    /// A [`Subtrees`] kept per thread between masks, its tables cleared but their memory kept: a
    /// first visit interns a few hundred configuration sets, and growing its maps and vectors
    /// afresh each time (rehashes, reallocations) was a fifth of a JSON value's start.
    static SUBTREES: std::cell::Cell<Option<Subtrees>> = const { std::cell::Cell::new(None) };
}

/// Configuration sets, and transition cells (4 MiB), a kept [`Subtrees`] may have held (past
/// either, its memory is let go: a walk over many sets of a wide lexer would otherwise leave
/// tens of MB with each thread).
const SUBTREES_KEPT: usize = 1 << 14;
const SUBTREES_KEPT_CELLS: usize = 1 << 20;

/// Walks of trie subtrees from configuration sets, sharing for one mask the interned sets and
/// their steps (each distinct (set, byte class) is stepped once however many subtrees meet it).
struct Subtrees {
    sets: Interner<Vec<WConf>>,
    /// `trans[id * width + c]`: 0 unknown, 1 dead, else 2 + the id of the set after a byte of the
    /// lexer's class `c`
    trans: Vec<u32>,
    /// the lexer's classes
    width: usize,
    levels: Vec<u32>,
    scratch: Vec<WConf>,
    joined: HashMap<(u32, u32), u32>,
    /// the set the closes of a lexer step make from an Earley set ([`Subtrees::closed`])
    made: HashMap<(u32, u32), u32>,
    /// per set, the loop sets it takes ([`TAKES_KNOWN`] once known: [`Subtrees::takes`])
    takes: Vec<u8>,
    /// the nodes whose tokens the walk keeps
    kept: Stretches,
}

/// The flag of a set's [`Subtrees::takes`] once computed.
const TAKES_KNOWN: u8 = 0x80;

impl Subtrees {
    fn new(max_depth: usize, width: usize) -> Self {
        Subtrees {
            sets: Interner::new(),
            trans: Vec::new(),
            width,
            levels: vec![0; max_depth + 1],
            scratch: Vec::new(),
            joined: HashMap::default(),
            made: HashMap::default(),
            takes: Vec::new(),
            kept: Stretches::default(),
        }
    }

    /// This thread's kept instance, emptied, or a new one ([`SUBTREES`]).
    fn take(max_depth: usize, width: usize) -> Self {
        let Some(mut sub) = SUBTREES.take() else {
            return Subtrees::new(max_depth, width);
        };
        sub.sets.clear();
        sub.trans.clear();
        sub.width = width;
        sub.levels.clear();
        sub.levels.resize(max_depth + 1, 0);
        sub.scratch.clear();
        sub.joined.clear();
        sub.made.clear();
        sub.takes.clear();
        sub.kept.clear();
        sub
    }

    /// Keep this instance for the thread's next mask (unless it grew large).
    fn give_back(self) {
        if self.sets.values.capacity() <= SUBTREES_KEPT
            && self.trans.capacity() <= SUBTREES_KEPT_CELLS
        {
            SUBTREES.set(Some(self));
        }
    }

    /// The id of the set of configurations the closes of lexer step `st` make from local Earley set
    /// `set` ([`NONE`]: none; memoised: a name's step closes it at every byte).
    fn closed(&mut self, w: &mut Walk<'_>, set: u32, st: u32) -> Result<u32, CfgError> {
        if let Some(&id) = self.made.get(&(set, st)) {
            return Ok(id);
        }
        let mut confs = Vec::new();
        for i in 0..w.lc.steps[st as usize].closes.len() {
            let (t, sh) = w.lc.steps[st as usize].closes[i];
            let s2 = w.advance(set, t)?;
            if s2 == NONE {
                continue;
            }
            let lex = w.fresh_lex(s2, sh);
            if lex != NONE {
                push_unique(
                    &mut confs,
                    WConf {
                        set: s2,
                        lex,
                        fresh: true,
                    },
                );
            }
        }
        confs.sort_unstable();
        let id = if confs.is_empty() {
            NONE
        } else {
            self.intern(confs)
        };
        self.made.insert((set, st), id);
        Ok(id)
    }

    /// The id of the union of sets `a` and `b` (memoised).
    fn join(&mut self, a: u32, b: u32) -> u32 {
        if a == b {
            return a;
        }
        let key = (a.min(b), a.max(b));
        if let Some(&id) = self.joined.get(&key) {
            return id;
        }
        let mut u = self.sets.values[a as usize].clone();
        for &x in &self.sets.values[b as usize] {
            push_unique(&mut u, x);
        }
        u.sort_unstable();
        let id = self.intern(u);
        self.joined.insert(key, id);
        id
    }

    fn intern(&mut self, confs: Vec<WConf>) -> u32 {
        let id = self.sets.intern(confs);
        self.room_for(id);
        id
    }

    /// [`Subtrees::intern`] of a borrowed set (copied only when new).
    fn intern_slice(&mut self, confs: &[WConf]) -> u32 {
        let id = self.sets.intern_ref(confs);
        self.room_for(id);
        id
    }

    fn room_for(&mut self, id: u32) {
        if self.trans.len() < (id as usize + 1) * self.width {
            self.trans.resize((id as usize + 1) * self.width, 0);
            self.takes.resize(id as usize + 1, 0);
        }
    }

    /// The loop sets set `id` takes (bit `k`: [`LexCache::takes`] of one of its lexer states).
    /// Only busy lexer states are asked (a name's: [`LexCache::busy`]), whose configurations walk
    /// much of the trie; in the others' subtrees (strings after a close) the answers seldom pay
    /// for the asking.
    fn takes(&mut self, w: &mut Walk<'_>, id: u32) -> u8 {
        let known = self.takes[id as usize];
        if known != 0 {
            return known & !TAKES_KNOWN;
        }
        let mut t = 0;
        for c in &self.sets.values[id as usize] {
            if w.lc.busy(w.cx.lx, c.lex) {
                t |= w.lc.takes(w.cx.lx, c.lex);
            }
        }
        self.takes[id as usize] = t | TAKES_KNOWN;
        t
    }

    /// Whether set `id` at trie node `i` keeps every token below it: the set takes a loop set
    /// whose bytes alone spell the subtree below `i`. `blocks`: per loop set, the last block
    /// asked of it.
    fn keeps_below<'a>(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'a>,
        blocks: &mut [Block<'a>; MAX_LOOPS],
        id: u32,
        i: usize,
    ) -> bool {
        let t = self.takes(w, id);
        loop_sets(t).any(|k| block_of(on, blocks, k, i).run_below(i))
    }

    /// When node `i`, a child of a node of set `parent`, keeps every token of its subtree (its
    /// own included): the end of the stretch of nodes so kept, its subtree and those of the next
    /// siblings of the same kind. Such a node has a label of a loop set the parent's set takes,
    /// and that set spells its subtree below it (a configuration that takes the set lives on
    /// through its bytes, so the node's set has one that takes it: [`Subtrees::keeps_below`]
    /// asked of the parent, without stepping to the node). Most nodes of a name's walk are such
    /// children, most of them leaves, in long stretches of siblings.
    fn keeps_from<'a>(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'a>,
        blocks: &mut [Block<'a>; MAX_LOOPS],
        parent: u32,
        i: usize,
    ) -> Option<usize> {
        let t = self.takes(w, parent);
        loop_sets(t).find_map(|k| block_of(on, blocks, k, i).run_from(i))
    }

    /// Mark the tokens that leave some configuration made by a close alive: one preorder scan, a
    /// node's set stepped from its parent's and joined with the configurations a close makes there
    /// (`closes`, by node ascending), so a trie node is stepped once however many closes lie above
    /// it (a name closes at every byte). A node whose set is empty is passed over to the next close
    /// inside its subtree, or its subtree skipped. The set at the root is `whole` (configurations
    /// taken whole: no [`Inside`] of theirs is used). The trie's label `c` stands for the bytes
    /// of a class (`reps[c]` is one of them) that the lexer steps alike, those of its class
    /// `cols[c]`: the steps are kept by that class (on the byte trie, a set's children by bytes
    /// of one class are stepped once). Below a node whose set takes a loop set spelling all of
    /// its subtree ([`Loops`]), every token is kept and no node is stepped through; so are the
    /// children of such a set's node that the set spells whole, a stretch of siblings at a time
    /// ([`Subtrees::keeps_from`]). The nodes kept are written to `words` at the end
    /// ([`Stretches`]). On tekken, SQL's first masks after a keyword (a name's state: 13,000
    /// nodes passed, 130,000 kept under them) took 0.8-1.1 ms with the subtrees set token by
    /// token and each kept child stepped to, 0.5-0.7 ms so.
    fn walk(
        &mut self,
        w: &mut Walk<'_>,
        on: &OnTrie<'_>,
        whole: Option<u32>,
        closes: &[(u32, u32)],
        words: &mut [u32],
    ) -> Result<(), CfgError> {
        const DEAD: u32 = u32::MAX;
        let (trie, reps, cols) = (on.trie, on.reps, on.cols);
        let mut blocks = [Block::default(); MAX_LOOPS];
        let n = trie.n_nodes();
        let mut k = 0; // the next close
        self.levels.fill(DEAD);
        self.levels[0] = whole.unwrap_or(DEAD);
        let mut i = match (whole, closes.first()) {
            (Some(_), _) => 1,
            (None, Some(first)) => first.0 as usize,
            (None, None) => n,
        };
        while i < n {
            let (d, c) = (trie.depth[i] as usize, trie.label[i]);
            let node_end = trie.end[i];
            let parent = self.levels[d - 1];
            if parent != DEAD && self.takes[parent as usize] != TAKES_KNOWN {
                if let Some(below) = self.keeps_from(w, on, &mut blocks, parent, i) {
                    self.kept.keep(i, below);
                    // (closes in the stretch only add configurations to sets that keep every token)
                    while k < closes.len() && (closes[k].0 as usize) < below {
                        k += 1;
                    }
                    i = below;
                    continue;
                }
            }
            let mut cur = if parent == DEAD {
                DEAD
            } else {
                let slot = parent as usize * self.width + usize::from(cols[usize::from(c)]);
                let mut next = self.trans[slot];
                if next == 0 {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    w.step(
                        &self.sets.values[parent as usize],
                        reps[usize::from(c)],
                        &mut scratch,
                    )?;
                    next = if scratch.is_empty() {
                        1
                    } else {
                        scratch.sort_unstable();
                        self.intern_slice(&scratch) + 2
                    };
                    self.scratch = scratch; // its memory kept for the next step
                    self.trans[slot] = next;
                }
                if next == 1 {
                    DEAD
                } else {
                    next - 2
                }
            };
            if k < closes.len() && closes[k].0 as usize == i {
                cur = if cur == DEAD {
                    closes[k].1
                } else {
                    self.join(cur, closes[k].1)
                };
                k += 1;
            }
            if cur == DEAD {
                match closes.get(k) {
                    // a close below: the nodes between have empty sets
                    Some(&(next, _)) if next < node_end => {
                        let to = trie.depth[next as usize] as usize;
                        self.levels[d..to].fill(DEAD);
                        i = next as usize;
                    }
                    _ => i = node_end as usize,
                }
                continue;
            }
            self.levels[d] = cur;
            let below = node_end as usize;
            if self.takes[cur as usize] != TAKES_KNOWN
                && below > i + 1
                && self.keeps_below(w, on, &mut blocks, cur, i)
            {
                self.kept.keep(i, below);
                // (closes below only add configurations to a set that keeps every token)
                while k < closes.len() && (closes[k].0 as usize) < below {
                    k += 1;
                }
                i = below;
                continue;
            }
            self.kept.keep(i, i + 1);
            i += 1;
        }
        self.kept.write(trie, words);
        Ok(())
    }
}

/// The loop sets of bits `t` (bit `k`: set `k`).
fn loop_sets(mut t: u8) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (t != 0).then(|| {
            let k = t.trailing_zeros() as usize;
            t &= t - 1;
            k
        })
    })
}

/// The block of loop set `k` that holds trie node `i`, kept in `blocks[k]` for the next ask.
/// (Inlined always: a call per trie node, where the walk asks it, was 8 % of SQL's first masks.)
#[inline(always)]
fn block_of<'a, 'b>(
    on: &OnTrie<'a>,
    blocks: &'b mut [Block<'a>; MAX_LOOPS],
    k: usize,
    i: usize,
) -> &'b Block<'a> {
    if !blocks[k].holds(i) {
        blocks[k] = on.loops.block(k, on.trie, i);
    }
    &blocks[k]
}

#[inline]
fn push_unique(out: &mut Vec<WConf>, c: WConf) {
    if !out.contains(&c) {
        out.push(c);
    }
}
