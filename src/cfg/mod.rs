//! The CFG engine: a context-free grammar over byte-DFA terminals bound to a vocabulary, with the
//! Python engine's language semantics (`grammarmask/cfg`, the executable specification): lark's
//! dynamic lexer with greedy terminals (shadows), non-greedy terminals, ignore terminals, and
//! nondeterministic cuts (a state is a set of configurations).
//!
//! One job per module: [`tables`] the combined table made from the terminals' DFAs, [`lexer`] the
//! combined terminal DFAs and the lexer-state machine, [`earley`] the persistent Earley recognizer,
//! [`walk`] stepping configurations and the mask walk. This module holds the compiled grammar
//! ([`CfgEngine`]): immutable tables, plus the caches behind one lock.
//! States ([`State`]) are immutable values holding the Earley sets they need, so fork and rollback
//! are free and a dropped state frees its part of the chart.

pub mod complete;
pub mod earley;
pub mod inside;
pub mod lexer;
pub mod loops;
pub mod replay;
pub mod slice;
pub mod tables;
pub mod walk;

use std::collections::VecDeque;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::classes::ByteClasses;
use crate::lru::Lru;
use crate::packed::{Packed, Pool};
use crate::trie::TokenTrie;
use crate::vocab::{lock, Vocab};
use earley::{Ctx, ESet, Grammar, Sigs};
use inside::{Insides, Shelf};
use lexer::{LexCache, Lexer, NONE};
use loops::Loops;
use replay::Replays;
use slice::Slice;
use walk::{OnTrie, WConf, Walk};

/// Why the CFG engine refused: unusable input, or a budget of `grammarmask.Limits` ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CfgError {
    Grammar(String),
    Budget {
        budget: &'static str,
        value: usize,
        what: String,
    },
}

impl fmt::Display for CfgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CfgError::Grammar(m) => f.write_str(m),
            CfgError::Budget {
                budget,
                value,
                what,
            } => write!(f, "{what}: over the {budget} budget ({value})"),
        }
    }
}

impl std::error::Error for CfgError {}

/// The budgets and cache bounds of `grammarmask.Limits` this engine reads.
#[derive(Debug, Clone)]
pub struct Limits {
    pub earley_items_per_set: usize,
    pub earley_signatures: usize,
    pub earley_recent: usize,
    pub cfg_configs: usize,
    pub cfg_walk_visits: usize,
    pub cfg_masks: usize,
    /// what lexer states allow by themselves ([`inside::Inside`]: a mask's words each), kept per grammar
    pub cfg_insides: usize,
    /// bytes the mask walks kept for replays may hold ([`Replays`]), per grammar
    pub replay_bytes: usize,
    /// masks walk the token trie over the lexer's byte classes when there are at most this many
    /// classes and at most [`LIVE_BYTES_MAX`] live bytes, else the byte trie (shared by every grammar
    /// of the vocabulary: no trie to build)
    pub class_trie_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            earley_items_per_set: 100_000,
            earley_signatures: 200_000,
            earley_recent: 256,
            cfg_configs: 4096,
            cfg_walk_visits: 10_000,
            cfg_masks: 2048,
            cfg_insides: 2048,
            replay_bytes: 2048 * REPLAY_BYTES_PER_MASK,
            class_trie_max: 32,
        }
    }
}

/// `state`'s configurations in walk `w` (its sets named by local ids).
fn rooted(w: &mut Walk<'_>, state: &State) -> Vec<WConf> {
    state
        .confs
        .iter()
        .map(|k| WConf {
            set: w.local(&k.set),
            lex: k.lex,
            fresh: k.fresh,
        })
        .collect()
}

/// A configuration: the Earley set after the lexemes closed so far, the lexer state, whether the
/// output ends at a lexeme boundary.
#[derive(Debug, Clone)]
pub struct Conf {
    pub set: Arc<ESet>,
    pub lex: u32,
    pub fresh: bool,
}

/// A state's configurations by (set signature, lexer state, fresh), sorted.
pub type Key = Vec<(u64, u32, bool)>;

/// A matcher state: the configurations still possible (empty: the output left the language), and
/// a key naming its behaviour (equal keys: equal masks, answers and successors).
#[derive(Debug)]
pub struct State {
    confs: Vec<Conf>,
    key: Key,
    grammar: u64,
}

impl State {
    fn new(grammar: u64, confs: Vec<Conf>) -> State {
        let mut key: Key = confs.iter().map(|c| (c.set.sig, c.lex, c.fresh)).collect();
        key.sort_unstable();
        key.dedup();
        State {
            confs,
            key,
            grammar,
        }
    }

    /// Number of configurations (0: the output left the language).
    pub fn len(&self) -> usize {
        self.confs.len()
    }

    /// Whether no configuration is left.
    pub fn is_empty(&self) -> bool {
        self.confs.is_empty()
    }

    /// The key naming this state's behaviour (masks are cached by it).
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether the output so far is a sentence: some configuration at a boundary accepts.
    pub fn accepting(&self) -> bool {
        self.confs.iter().any(|c| c.fresh && c.set.accepting)
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.grammar == other.grammar && self.key == other.key
    }
}

impl Eq for State {}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.grammar.hash(h);
        self.key.hash(h);
    }
}

/// What changes while the grammar is used: the lexer-state machine, signatures, recent sets, masks,
/// and what each lexer state allows by itself (as many as masks: each holds a mask's words).
struct Caches {
    lex: LexCache,
    sigs: Sigs,
    recent: VecDeque<Arc<ESet>>,
    masks: Lru<Key, Arc<[u32]>>,
    inside: Insides,
    replays: Replays,
}

/// Bytes per mask of `grammarmask.Limits.cfg_masks` the walks kept for replays may hold
/// ([`Replays`]: 4 MB a grammar by default; their masks are mostly the ones the mask cache holds).
pub const REPLAY_BYTES_PER_MASK: usize = 2048;

static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Live bytes past which the CFG engine walks the byte trie instead of a class trie.
const LIVE_BYTES_MAX: usize = 128;

/// A CFG bound to a vocabulary. Immutable tables; the caches sit behind one lock, held for a whole
/// `advance` or mask computation (different grammars run in parallel).
pub struct CfgEngine {
    vocab: Arc<Vocab>,
    /// the token trie over the lexer's byte classes, and a byte of each class
    trie: Arc<TokenTrie>,
    reps: Vec<u8>,
    /// the lexer's class of each label of the trie
    cols: Vec<u8>,
    /// the lexer's loop sets and the subtrees of the trie spelled with them
    loops: Loops,
    lexer: Lexer,
    grammar: Grammar,
    limits: Limits,
    caches: Mutex<Caches>,
    initial: Arc<State>,
    serial: u64,
    /// the costs shortest completions weigh lexemes and rules by ([`CfgEngine::set_completion_costs`])
    tails: OnceLock<complete::Tails>,
    /// the vocabulary's large token sets, shared by content ([`CfgEngine::share`])
    pool: Arc<Pool>,
}

impl fmt::Debug for CfgEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CfgEngine")
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

impl CfgEngine {
    /// Bind `grammar` over `lexer` to `vocab`.
    pub fn new(
        vocab: Arc<Vocab>,
        lexer: Lexer,
        grammar: Grammar,
        limits: Limits,
    ) -> Result<CfgEngine, CfgError> {
        // the lexer's classes are exact (equal columns merged); a class trie pays (its walks are
        // shorter) when it is cheap to read off the byte trie: few classes, and at most half of
        // the bytes live (ASCII text: tekken's tokens are mostly of other bytes), else the byte trie
        // every grammar of the vocabulary shares
        let (live_map, live) = lexer.live_map();
        // (the byte trie's walks are shared with the vocabulary's other grammars, its Shelf, and
        // its string bodies are set aside once, its Slice)
        let (classes, map, shared, others) =
            if lexer.n_classes() <= limits.class_trie_max && live <= LIVE_BYTES_MAX {
                (lexer.classes().clone(), live_map, None, Vec::new())
            } else {
                let shelf = vocab.store(Shelf::new);
                let slice = Slice::of(&vocab);
                let others = slice::other_bodies(&lexer)
                    .into_iter()
                    .filter_map(|excluded| Slice::excluding(&vocab, excluded))
                    .collect();
                (
                    ByteClasses::identity(),
                    ByteClasses::identity().map,
                    Some((shelf, slice)),
                    others,
                )
            };
        let trie = vocab.trie(&map);
        let loops = Loops::new(
            lexer.loops(),
            &lexer.classes().map,
            map,
            &classes.reps,
            &vocab,
        );
        let pool = vocab.store(Pool::new);
        let mut caches = Caches {
            lex: LexCache::new(&lexer),
            sigs: Sigs::new(limits.earley_signatures.max(1)),
            recent: VecDeque::new(),
            masks: Lru::new(limits.cfg_masks),
            inside: Insides::new(limits.cfg_insides, shared, others, Arc::clone(&pool)),
            replays: Replays::new(limits.replay_bytes),
        };
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let e0 = {
            let mut cx = Ctx {
                g: &grammar,
                lx: &lexer,
                sigs: &mut caches.sigs,
                recent: &mut caches.recent,
                recent_limit: limits.earley_recent,
            };
            ESet::initial(&mut cx)?
        };
        let lex = caches.lex.fresh(&lexer, &e0.pend, 0, e0.accepting);
        let confs = if lex == NONE {
            Vec::new()
        } else {
            vec![Conf {
                set: e0,
                lex,
                fresh: true,
            }]
        };
        let initial = Arc::new(State::new(serial, confs));
        Ok(CfgEngine {
            vocab,
            trie,
            cols: classes.reps.iter().map(|&b| lexer.class_of(b)).collect(),
            reps: classes.reps,
            loops,
            lexer,
            grammar,
            limits,
            caches: Mutex::new(caches),
            initial,
            serial,
            tails: OnceLock::new(),
            pool,
        })
    }

    /// The state before any output.
    pub fn initial(&self) -> Arc<State> {
        Arc::clone(&self.initial)
    }

    /// Whether `state` is a state of this grammar.
    pub fn owns(&self, state: &State) -> bool {
        state.grammar == self.serial
    }

    fn check(&self, state: &State) -> Result<(), CfgError> {
        if !self.owns(state) {
            return Err(CfgError::Grammar(
                "native CFG: the state belongs to another compiled grammar".into(),
            ));
        }
        Ok(())
    }

    /// Run `f` with a walk over the caches (under the lock) and `state`'s configurations.
    fn with_walk<T>(
        &self,
        state: &State,
        count_visits: bool,
        f: impl FnOnce(&mut Walk<'_>, Vec<WConf>, &mut Insides, &mut Replays) -> Result<T, CfgError>,
    ) -> Result<T, CfgError> {
        self.check(state)?;
        let mut guard = lock(&self.caches);
        let c = &mut *guard;
        let cx = Ctx {
            g: &self.grammar,
            lx: &self.lexer,
            sigs: &mut c.sigs,
            recent: &mut c.recent,
            recent_limit: self.limits.earley_recent,
        };
        let mut w = Walk::new(cx, &mut c.lex, &self.limits, count_visits);
        let root = rooted(&mut w, state);
        f(&mut w, root, &mut c.inside, &mut c.replays)
    }

    /// The state after `data` (empty when `data` leaves the language's prefixes).
    pub fn feed(&self, state: &State, data: &[u8]) -> Result<Arc<State>, CfgError> {
        self.with_walk(state, false, |w, root, _, _| {
            let mut cur = root;
            let mut nxt = Vec::new();
            for &b in data {
                w.step(&cur, b, &mut nxt)?;
                std::mem::swap(&mut cur, &mut nxt);
                if cur.is_empty() {
                    break;
                }
            }
            let confs = cur
                .iter()
                .map(|c| Conf {
                    set: Arc::clone(&w.sets[c.set as usize]),
                    lex: c.lex,
                    fresh: c.fresh,
                })
                .collect();
            Ok(Arc::new(State::new(self.serial, confs)))
        })
    }

    /// The state after token `token`, None when it is illegal (or special, empty, out of range).
    pub fn advance(&self, state: &State, token: i64) -> Result<Option<Arc<State>>, CfgError> {
        let Some(data) = self.vocab.normal_bytes(token) else {
            self.check(state)?;
            return Ok(None);
        };
        let next = self.feed(state, data)?;
        Ok(if next.is_empty() { None } else { Some(next) })
    }

    /// Mask words of the legal normal tokens in `state` (cached by the state's key).
    pub fn mask(&self, state: &State) -> Result<Arc<[u32]>, CfgError> {
        self.check(state)?;
        if let Some(hit) = lock(&self.caches).masks.get(&state.key) {
            return Ok(Arc::clone(hit));
        }
        let mut words = vec![0u32; self.vocab.n_words()];
        self.mask_packed(state, &mut Vec::new())?
            .or_into(&mut words);
        let words: Arc<[u32]> = words.into();
        lock(&self.caches)
            .masks
            .put(state.key.clone(), Arc::clone(&words));
        Ok(words)
    }

    /// The mask of `state`, packed and shared ([`CfgEngine::share`]): the mask of a walk made
    /// before from another state that answers the walk's questions alike ([`Replays`]), else
    /// walked (in `scratch`, a buffer of the caller's: no fresh 16 KB rows) and kept for replays.
    /// Not cached by the state's key (the caller keeps its own).
    pub fn mask_packed(
        &self,
        state: &State,
        scratch: &mut Vec<u32>,
    ) -> Result<Arc<Packed>, CfgError> {
        self.check(state)?;
        scratch.clear();
        scratch.resize(self.vocab.n_words(), 0);
        if state.is_empty() {
            return Ok(self.share(scratch));
        }
        let on = OnTrie {
            trie: &self.trie,
            reps: &self.reps,
            cols: &self.cols,
            loops: &self.loops,
        };
        // one walk for the replay and, when no kept walk answers alike, the mask walk: its trace
        // holds every question asked afresh, the replay's first, so a state that answers them
        // alike has this mask (asked in this order, they leave a walk's memos as they left this
        // one's before the mask walk began)
        self.with_walk(state, true, |w, root, insides, replays| {
            w.keep_trace();
            if let Some(mask) = replays.find(w, &root)? {
                return Ok(mask);
            }
            w.renew_visits();
            w.mask(&on, &root, insides, scratch)?;
            let mask = self.share(scratch);
            if let Some(trace) = w.trace.take() {
                replays.keep(&root, &trace, &mask);
            }
            Ok(mask)
        })
    }

    /// Masks found by replaying a walk made from another state, and masks walked
    /// ([`CfgEngine::mask_packed`]).
    pub fn masks_replayed(&self) -> (usize, usize) {
        let c = lock(&self.caches);
        (c.replays.hits, c.replays.walks)
    }

    /// Set the costs shortest completions use: per terminal its shortest lexeme's length, per
    /// nonterminal its shortest derivation's ([`complete::INF`] or more: none). Once per grammar;
    /// later calls keep the first costs.
    pub fn set_completion_costs(
        &self,
        terminal: &[u64],
        nonterminal: &[u64],
    ) -> Result<(), CfgError> {
        if terminal.len() != self.lexer.n_terminals()
            || nonterminal.len() != self.grammar.n_nonterminals()
        {
            return Err(CfgError::Grammar(format!(
                "native CFG completions: {} terminal and {} nonterminal costs for {} and {}",
                terminal.len(),
                nonterminal.len(),
                self.lexer.n_terminals(),
                self.grammar.n_nonterminals()
            )));
        }
        let tails =
            complete::Tails::new(&self.grammar, terminal, nonterminal).ok_or_else(|| {
                CfgError::Grammar("native CFG completions: a symbol without a cost".into())
            })?;
        let _ = self.tails.set(tails);
        Ok(())
    }

    /// Per configuration of `state`: whether it is at a lexeme boundary, and the DFA states of the
    /// lexemes in progress (global states of the combined lexer table).
    pub fn configurations(&self, state: &State) -> Result<Vec<(bool, Vec<u32>)>, CfgError> {
        self.check(state)?;
        let c = lock(&self.caches);
        Ok(state
            .confs
            .iter()
            .map(|k| (k.fresh, c.lex.states.values[k.lex as usize].0.clone()))
            .collect())
    }

    /// The cheapest way to acceptance from configuration `i` of `state`, its pending lexeme closed
    /// as terminal `terminal` (None: from the configuration's set as it is, at a boundary or after
    /// an ignored lexeme): its cost and the symbols to derive (see [`complete::finish`]). None when
    /// the terminal does not fit or nothing finishes. Needs [`CfgEngine::set_completion_costs`].
    pub fn completion(
        &self,
        state: &State,
        i: usize,
        terminal: Option<u32>,
    ) -> Result<Option<(u64, Vec<i32>)>, CfgError> {
        self.check(state)?;
        let Some(tails) = self.tails.get() else {
            return Err(CfgError::Grammar(
                "native CFG completions: costs not set (set_completion_costs)".into(),
            ));
        };
        let Some(conf) = state.confs.get(i) else {
            return Err(CfgError::Grammar(format!(
                "native CFG completions: configuration {i} of {}",
                state.confs.len()
            )));
        };
        let set = match terminal {
            None => Arc::clone(&conf.set),
            Some(t) => {
                if t as usize >= self.lexer.n_terminals() {
                    return Err(CfgError::Grammar(format!(
                        "native CFG completions: terminal {t} of {}",
                        self.lexer.n_terminals()
                    )));
                }
                let mut guard = lock(&self.caches);
                let c = &mut *guard;
                let mut cx = Ctx {
                    g: &self.grammar,
                    lx: &self.lexer,
                    sigs: &mut c.sigs,
                    recent: &mut c.recent,
                    recent_limit: self.limits.earley_recent,
                };
                match conf.set.advance(&mut cx, t)? {
                    Some(s) => s,
                    None => return Ok(None),
                }
            }
        };
        Ok(complete::finish(&set, &self.grammar, tails))
    }

    /// `mask` packed, or an equal set already held by a grammar of the vocabulary.
    pub fn share(&self, mask: &[u32]) -> Arc<Packed> {
        self.pool.share(Packed::new(mask))
    }

    /// Words of a mask (32 tokens each).
    pub fn n_words(&self) -> usize {
        self.vocab.n_words()
    }

    /// Masks held in the cache.
    pub fn masks_cached(&self) -> usize {
        lock(&self.caches).masks.len()
    }

    /// Lexer states made so far (a diagnostic).
    pub fn lexer_states(&self) -> usize {
        lock(&self.caches).lex.states.len()
    }

    /// Byte classes of the lexer (the columns of its table; the labels of the token trie the masks
    /// walk when there are at most `Limits::class_trie_max` of them, else the trie is over bytes).
    pub fn n_classes(&self) -> usize {
        self.lexer.n_classes()
    }

    /// Nodes of the token trie the masks walk.
    pub fn n_trie_nodes(&self) -> usize {
        self.trie.n_nodes()
    }

    /// Number of terminals.
    pub fn n_terminals(&self) -> usize {
        self.lexer.n_terminals()
    }

    /// Cells of the combined lexer table (states x byte classes).
    pub fn table_words(&self) -> usize {
        self.lexer.table_cells().0
    }

    /// Bytes of the combined lexer table (2 a cell when every state number fits `u16`, else 4).
    pub fn table_bytes(&self) -> usize {
        self.lexer.table_cells().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// `start: NAME ("," NAME)*` with NAME = /[ab]+/ (greedy) and an ignored " ", as flat tables.
    fn engine(tokens: &[&[u8]]) -> CfgEngine {
        named_engine(tokens, b"ab")
    }

    /// [`engine`] with NAME's letters `letters`.
    fn named_engine(tokens: &[&[u8]], letters: &[u8]) -> CfgEngine {
        // terminals: 0 NAME (states 1 -> 2 loop), 1 "," (3 -> 4), 2 " " (5 -> 6)
        let mut table = vec![0u32; 7 * 256];
        for &b in letters {
            table[256 + usize::from(b)] = 2;
            table[2 * 256 + usize::from(b)] = 2;
        }
        table[3 * 256 + usize::from(b',')] = 4;
        table[5 * 256 + usize::from(b' ')] = 6;
        let lexer = Lexer::new(
            table,
            vec![false, false, true, false, true, false, true],
            vec![0, 0, 0, 1, 1, 2, 2],
            vec![1, 3, 5],
            vec![true, true, true],
            vec![false, false, true],
        )
        .unwrap();
        // start -> NAME rest ; rest -> "," NAME rest | (empty)
        let grammar = Grammar::new(
            2,
            3,
            &[0, 1, 1],
            &[0, 2, 5, 5],
            &[!0, 1, !1, !0, 1],
            0,
            1000,
        )
        .unwrap();
        let mut toks: Vec<Vec<u8>> = vec![b"".to_vec()];
        toks.extend(tokens.iter().map(|t| t.to_vec()));
        let n = toks.len();
        let vocab = Arc::new(Vocab::from_tokens(toks, &[0], n).unwrap());
        CfgEngine::new(vocab, lexer, grammar, Limits::default()).unwrap()
    }

    /// Nested lists of names: `v -> NAME | "[" items "]" | "[" "]"`, `items -> v | items "," v`,
    /// spaces ignored; NAME of the letters `ab`.
    fn lists_engine(tokens: &[Vec<u8>], limits: Limits) -> CfgEngine {
        // terminals: 0 NAME (1 -> 2 loop), 1 "[" (3 -> 4), 2 "]" (5 -> 6), 3 "," (7 -> 8), 4 " "
        let mut table = vec![0u32; 11 * 256];
        for b in [b'a', b'b'] {
            table[256 + usize::from(b)] = 2;
            table[2 * 256 + usize::from(b)] = 2;
        }
        for (s, b) in [(3, b'['), (5, b']'), (7, b','), (9, b' ')] {
            table[s * 256 + usize::from(b)] = s as u32 + 1;
        }
        let accepting = (0..11).map(|s| s > 0 && s % 2 == 0).collect();
        let term_of = (0..11u32).map(|s| s.saturating_sub(1) / 2).collect();
        let lexer = Lexer::new(
            table,
            accepting,
            term_of,
            vec![1, 3, 5, 7, 9],
            vec![true; 5],
            vec![false, false, false, false, true],
        )
        .unwrap();
        let grammar = Grammar::new(
            2,
            5,
            &[0, 0, 0, 1, 1],
            &[0, 1, 4, 6, 7, 10],
            &[!0, !1, 1, !2, !1, !2, 0, 1, !3, 0],
            0,
            1000,
        )
        .unwrap();
        let mut toks = vec![Vec::new()];
        toks.extend(tokens.iter().cloned());
        let n = toks.len();
        let vocab = Arc::new(Vocab::from_tokens(toks, &[0], n).unwrap());
        CfgEngine::new(vocab, lexer, grammar, limits).unwrap()
    }

    #[test]
    fn replayed_masks_are_the_masks_walked() {
        // states deeper in the nesting ask a walk's questions alike and get its mask replayed;
        // each mask must be the one walked without replays (and what advancing allows)
        let mut rng = Rng(0x5eed_4e91_a7ed);
        let pieces: [&[u8]; 7] = [b"a", b"b", b"[", b"[", b"]", b",", b" "];
        let toks = rng.tokens(300, &pieces, 4);
        let replayed = lists_engine(&toks, Limits::default());
        let walked = lists_engine(
            &toks,
            Limits {
                cfg_masks: 0,    // no mask cache
                replay_bytes: 0, // no replays
                ..Limits::default()
            },
        );
        for _ in 0..40 {
            let (mut a, mut b) = (replayed.initial(), walked.initial());
            for _ in 0..60 {
                let legal_a = legal(&replayed, &a);
                assert_eq!(legal_a, legal(&walked, &b));
                let live: Vec<u32> = (1..replayed.vocab.size() as u32)
                    .filter(|&t| replayed.advance(&a, i64::from(t)).unwrap().is_some())
                    .collect();
                assert_eq!(legal_a, live);
                let Some(&t) = legal_a.get(rng.below(legal_a.len().max(1))) else {
                    break;
                };
                a = replayed.advance(&a, i64::from(t)).unwrap().unwrap();
                b = walked.advance(&b, i64::from(t)).unwrap().unwrap();
            }
        }
        let (hits, walks) = replayed.masks_replayed();
        assert!(hits > 50, "{hits} replayed, {walks} walked");
        assert_eq!(walked.masks_replayed().0, 0);
    }

    fn legal(e: &CfgEngine, s: &State) -> Vec<u32> {
        let words = e.mask(s).unwrap();
        (0..e.vocab.size() as u32)
            .filter(|&t| words[t as usize >> 5] >> (t & 31) & 1 == 1)
            .collect()
    }

    #[test]
    fn greedy_names_need_a_separator() {
        let e = engine(&[b"a", b"b", b",", b" ", b"ab", b"a,", b",,"]);
        let s0 = e.initial();
        assert_eq!(legal(&e, &s0), vec![1, 2, 4, 5, 6]);
        assert!(!s0.accepting());
        let s1 = e.advance(&s0, 1).unwrap().unwrap();
        assert!(s1.accepting());
        assert_eq!(legal(&e, &s1), vec![1, 2, 3, 4, 5, 6]);
        let s2 = e.advance(&s1, 4).unwrap().unwrap(); // "a " : a NAME closed, then an ignored space
        assert_eq!(legal(&e, &s2), vec![3, 4]); // "a a" would be two NAMEs with no comma
        assert!(e.advance(&s2, 1).unwrap().is_none());
        assert!(e.advance(&s1, 7).unwrap().is_none()); // ",,"
        assert!(e.advance(&s1, 0).unwrap().is_none()); // special
        assert!(e.advance(&s1, 99).unwrap().is_none());
        assert!(e.feed(&s0, b"a, b").unwrap().accepting());
        assert!(e.feed(&s0, b"a b").unwrap().is_empty());
    }

    #[test]
    fn subtrees_of_names_kept_whole_give_the_masks_walked() {
        // NAME of 26 letters: a loop set, so a name's state keeps the subtrees of letters unwalked
        let letters: Vec<u8> = (b'a'..=b'z').collect();
        let mut rng = Rng(0x5eed_100b_0002);
        let pieces: [&[u8]; 6] = [b"a", b"q", b"z", b",", b" ", b"-"];
        let toks = rng.tokens(2000, &pieces, 7);
        let toks: Vec<&[u8]> = toks.iter().map(|t| &t[..]).collect();
        let kept = named_engine(&toks, &letters);
        assert_eq!(kept.lexer.loops().len(), 1);
        let mut walked = named_engine(&toks, &letters);
        walked.lexer.forget_loops();
        walked.loops = Loops::new(
            &[],
            &walked.lexer.classes().map,
            [0; 256],
            &[],
            &walked.vocab,
        );
        for _ in 0..30 {
            let (mut a, mut b) = (kept.initial(), walked.initial());
            for _ in 0..8 {
                let legal_a = legal(&kept, &a);
                assert_eq!(legal_a, legal(&walked, &b));
                let Some(&t) = legal_a.get(rng.below(legal_a.len().max(1))) else {
                    break;
                };
                a = kept.advance(&a, i64::from(t)).unwrap().unwrap();
                b = walked.advance(&b, i64::from(t)).unwrap().unwrap();
            }
        }
        assert!(kept.loops.blocks_made() > 0);
    }

    #[test]
    fn completions_follow_the_cheapest_rules() {
        let e = engine(&[b"a", b",", b" "]);
        let s0 = e.initial();
        assert!(e.completion(&s0, 0, None).is_err()); // no costs yet
        assert!(e.set_completion_costs(&[1, 1], &[1, 1]).is_err()); // three terminals
                                                                    // NAME 1 byte, "," 1, " " 1; start -> NAME rest costs 1, rest -> (empty) costs 0
        e.set_completion_costs(&[1, 1, 1], &[1, 0]).unwrap();
        assert_eq!(e.completion(&s0, 0, None).unwrap(), Some((1, vec![!0, 1])));
        let s1 = e.feed(&s0, b"a,").unwrap();
        assert_eq!(e.configurations(&s1).unwrap(), vec![(true, vec![1, 5])]);
        assert_eq!(e.completion(&s1, 0, None).unwrap(), Some((1, vec![!0, 1])));
        // "a" pending: closed as NAME it is a sentence; as "," it does not fit
        let s2 = e.feed(&s0, b"a").unwrap();
        let (i, _) = e
            .configurations(&s2)
            .unwrap()
            .into_iter()
            .enumerate()
            .find(|(_, (fresh, _))| !fresh)
            .unwrap();
        assert_eq!(e.completion(&s2, i, Some(0)).unwrap(), Some((0, vec![])));
        assert_eq!(e.completion(&s2, i, Some(1)).unwrap(), None);
        assert!(e.completion(&s2, 9, None).is_err());
        assert!(e.completion(&s2, 0, Some(7)).is_err());
    }

    #[test]
    fn states_are_values_of_their_grammar() {
        let e = engine(&[b"a"]);
        let other = engine(&[b"a"]);
        let s = e.initial();
        let a = e.advance(&s, 1).unwrap().unwrap();
        let b = e.advance(&s, 1).unwrap().unwrap();
        assert_eq!(a, b);
        assert_ne!(*a, *s);
        assert!(other.mask(&s).is_err());
    }
}
