//! The lexer of the CFG engine: every terminal DFA of a grammar in one transition table over bytes,
//! and the lazily built lexer-state machine the mask walk and `advance` step through.
//!
//! Port of `grammarmask/cfg/lexer.py` (the specification). Global DFA state 0 is dead; every other
//! state belongs to one terminal (`term_of`). A *lexer state* is `(pend, shadows)`: the DFA states of
//! the lexemes started at the last boundary and still alive (one per candidate terminal), and the
//! shadows of greedy lexemes already closed whose DFA still runs: if a shadow reaches an accepting
//! state again, lark's longest match would have taken the longer lexeme, so the cut was illegal and
//! the configuration dies. Lexer states and shadow sets are interned to small ids; the transition of
//! a lexer state by a byte ([`LexStep`]) is computed once and kept.

use std::collections::{HashMap, VecDeque};

use super::CfgError;

/// No id (a dead transition, a lexeme that cannot go on).
pub const NONE: u32 = u32::MAX;

/// The static tables: combined terminal DFAs, per-terminal facts.
#[derive(Debug)]
pub struct Lexer {
    table: Vec<u32>,
    accepting: Vec<bool>,
    term_of: Vec<u32>,
    /// `reaccept[s]`: a non-empty path from `s` reaches an accepting state
    reaccept: Vec<bool>,
    /// the start state of each terminal's DFA
    pub start: Vec<u32>,
    pub greedy: Vec<bool>,
    pub ignore: Vec<bool>,
    /// start states of the ignore terminals (sorted, no dead state)
    pub ignore_starts: Vec<u32>,
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
        let n = accepting.len();
        let n_terms = start.len();
        let bad = |m: String| Err(CfgError::Grammar(format!("native CFG lexer: {m}")));
        if n == 0 || n >= NONE as usize || table.len() != n * 256 || term_of.len() != n {
            return bad(format!(
                "{} transitions and {} terminal labels do not fit {n} states",
                table.len(),
                term_of.len()
            ));
        }
        if greedy.len() != n_terms || ignore.len() != n_terms {
            return bad("per-terminal tables differ in length".into());
        }
        if table[..256].iter().any(|&t| t != 0) || accepting[0] {
            return bad("state 0 must be the dead state".into());
        }
        if let Some(t) = table.iter().find(|&&t| t as usize >= n) {
            return bad(format!("transition to state {t} of {n}"));
        }
        if let Some(s) = (1..n).find(|&s| term_of[s] as usize >= n_terms) {
            return bad(format!("state {s} belongs to no terminal"));
        }
        if let Some(s) = start.iter().find(|&&s| s as usize >= n) {
            return bad(format!("start state {s} of {n}"));
        }
        let reaccept = reaccepting(&table, &accepting);
        let mut ignore_starts: Vec<u32> = (0..n_terms)
            .filter(|&t| ignore[t] && start[t] != 0)
            .map(|t| start[t])
            .collect();
        ignore_starts.sort_unstable();
        ignore_starts.dedup();
        Ok(Lexer {
            table,
            accepting,
            term_of,
            reaccept,
            start,
            greedy,
            ignore,
            ignore_starts,
        })
    }

    /// The combined transition table (`table[s * 256 + b]`).
    pub fn table(&self) -> &[u32] {
        &self.table
    }

    /// Number of states, the dead state included.
    pub fn n_states(&self) -> usize {
        self.accepting.len()
    }

    /// Number of terminals.
    pub fn n_terminals(&self) -> usize {
        self.start.len()
    }

    #[inline]
    fn next(&self, s: u32, b: u8) -> u32 {
        self.table[s as usize * 256 + usize::from(b)]
    }
}

/// Per state: whether a non-empty path reaches an accepting state (a backward search).
fn reaccepting(table: &[u32], accepting: &[bool]) -> Vec<bool> {
    let n = accepting.len();
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for s in 1..n {
        for b in 0..256 {
            let t = table[s * 256 + b];
            if t != 0 {
                preds[t as usize].push(s as u32);
            }
        }
    }
    let mut reaches = accepting.to_vec();
    reaches[0] = false;
    let mut todo: Vec<u32> = (1..n as u32).filter(|&s| reaches[s as usize]).collect();
    while let Some(s) = todo.pop() {
        for &p in &preds[s as usize] {
            if !reaches[p as usize] {
                reaches[p as usize] = true;
                todo.push(p);
            }
        }
    }
    (0..n)
        .map(|s| s != 0 && (0..256).any(|b| reaches[table[s * 256 + b] as usize]))
        .collect()
}

/// Values interned to dense ids.
#[derive(Debug)]
pub struct Interner<K> {
    ids: HashMap<K, u32>,
    pub values: Vec<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Interner<K> {
    pub fn new() -> Self {
        Interner {
            ids: HashMap::new(),
            values: Vec::new(),
        }
    }

    pub fn intern(&mut self, k: K) -> u32 {
        if let Some(&id) = self.ids.get(&k) {
            return id;
        }
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
    /// `trans[lex * 256 + b]`: 1 + the index of its [`LexStep`] in `steps` (0: not computed yet)
    trans: Vec<u32>,
    pub steps: Vec<LexStep>,
    shadow_step: HashMap<(u32, u8), u32>,
    finish: HashMap<(u32, u32), bool>,
}

impl Default for LexCache {
    fn default() -> Self {
        Self::new()
    }
}

impl LexCache {
    pub fn new() -> Self {
        let mut shadows = Interner::new();
        shadows.intern(Vec::new());
        LexCache {
            shadows,
            states: Interner::new(),
            trans: Vec::new(),
            steps: vec![LexStep {
                next: NONE,
                closes: Vec::new(),
            }],
            shadow_step: HashMap::new(),
            finish: HashMap::new(),
        }
    }

    /// The id of lexer state `(pend, shadows)`.
    pub fn state(&mut self, pend: Vec<u32>, shadows: u32) -> u32 {
        let id = self.states.intern((pend, shadows));
        let need = (id as usize + 1) * 256;
        if self.trans.len() < need {
            self.trans.resize(need, 0);
        }
        id
    }

    /// The shadows after `byte`; [`NONE`] when one of them accepts (the earlier cut was illegal).
    pub fn step_shadows(&mut self, lx: &Lexer, sh: u32, byte: u8) -> u32 {
        if sh == 0 {
            return 0;
        }
        if let Some(&hit) = self.shadow_step.get(&(sh, byte)) {
            return hit;
        }
        let mut out = Vec::new();
        let mut dead = false;
        for &h in &self.shadows.values[sh as usize] {
            let n = lx.next(h, byte);
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
            self.shadows.intern(out)
        };
        self.shadow_step.insert((sh, byte), id);
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
        let mut seen: HashMap<(u32, u32), ()> = HashMap::new();
        seen.insert((q, sh), ());
        let mut todo = VecDeque::from([(q, sh)]);
        let mut found = false;
        'bfs: while let Some((s, h)) = todo.pop_front() {
            for b in 0..=255u8 {
                let n = lx.next(s, b);
                if n == 0 {
                    continue;
                }
                let h2 = self.step_shadows(lx, h, b);
                if h2 == NONE {
                    continue;
                }
                if lx.accepting[n as usize] {
                    found = true;
                    break 'bfs;
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
    pub fn step(&mut self, lx: &Lexer, lex: u32, byte: u8) -> usize {
        let slot = lex as usize * 256 + usize::from(byte);
        let hit = self.trans[slot];
        if hit != 0 {
            return hit as usize - 1;
        }
        let made = self.make_step(lx, lex, byte);
        let idx = match made {
            None => 0,
            Some(s) => {
                self.steps.push(s);
                self.steps.len() - 1
            }
        };
        self.trans[slot] = idx as u32 + 1;
        idx
    }

    fn make_step(&mut self, lx: &Lexer, lex: u32, byte: u8) -> Option<LexStep> {
        let (pend, sh) = self.states.values[lex as usize].clone();
        let sh2 = self.step_shadows(lx, sh, byte);
        if sh2 == NONE {
            return None;
        }
        let mut pend2: Vec<u32> = pend
            .iter()
            .map(|&q| lx.next(q, byte))
            .filter(|&q| q != 0)
            .collect();
        if pend2.is_empty() {
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
                    self.shadows.intern(v)
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
        let mut c = LexCache::new();
        assert!(c.can_finish(&lx, 2, 0, true));
        assert!(!c.can_finish(&lx, 4, 0, true));
        assert!(c.can_finish(&lx, 4, 0, false));
        // a shadow in state 2 of /a+/ accepts on the next 'a': lexeme /a+/ from 1 cannot finish
        let sh = c.shadows.intern(vec![2]);
        assert!(!c.can_finish(&lx, 1, sh, true));
        assert_eq!(c.step_shadows(&lx, sh, b'a'), NONE);
        assert_eq!(c.step_shadows(&lx, sh, b'b'), 0);
    }

    #[test]
    fn greedy_close_leaves_a_shadow() {
        for greedy in [true, false] {
            let lx = lexer(greedy);
            let mut c = LexCache::new();
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
