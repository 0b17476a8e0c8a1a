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
//! walk over a trie of 10^5 tokens asks the parser once per distinct close.

use std::collections::HashMap;
use std::sync::Arc;

use super::earley::{Ctx, ESet};
use super::lexer::{Interner, LexCache, Lexer, NONE};
use super::{CfgError, Limits};
use crate::trie::TokenTrie;

/// A configuration inside a walk: (local set id, lexer state id, fresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WConf {
    pub set: u32,
    pub lex: u32,
    pub fresh: bool,
}

/// One stepping session over the grammar's tables (under the compiled grammar's lock).
pub struct Walk<'a> {
    pub cx: Ctx<'a>,
    pub lc: &'a mut LexCache,
    limits: &'a Limits,
    pub sets: Vec<Arc<ESet>>,
    ids: HashMap<*const ESet, u32>,
    advanced: HashMap<(u32, u32), u32>,
    fresh: HashMap<(u32, u32), u32>,
    /// parser look-ups left to this walk (`Limits.cfg_walk_visits`; only mask walks count)
    visits: Option<usize>,
}

impl<'a> Walk<'a> {
    pub fn new(cx: Ctx<'a>, lc: &'a mut LexCache, limits: &'a Limits, count_visits: bool) -> Self {
        Walk {
            cx,
            lc,
            limits,
            sets: Vec::new(),
            ids: HashMap::new(),
            advanced: HashMap::new(),
            fresh: HashMap::new(),
            visits: count_visits.then_some(limits.cfg_walk_visits),
        }
    }

    fn lx(&self) -> &'a Lexer {
        self.cx.lx
    }

    /// The local id of `set`.
    pub fn local(&mut self, set: &Arc<ESet>) -> u32 {
        let key = Arc::as_ptr(set);
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(Arc::clone(set));
        self.ids.insert(key, id);
        id
    }

    /// The set after closing terminal `t` in local set `s` ([`NONE`]: the parser refuses it).
    fn advance(&mut self, s: u32, t: u32) -> Result<u32, CfgError> {
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

    /// Mask words of the tokens of `trie` that leave `root` non-empty: one preorder scan of the trie,
    /// stepping the configuration set of each node from its parent's and skipping the subtree of
    /// every node where it dies. The trie is over the lexer's byte classes (bytes whose columns of
    /// the combined lexer table are equal step every lexer state alike): `reps[c]` is a byte of class
    /// `c`. Configuration sets are interned for the walk and their steps kept
    /// in a table, so each distinct (set, byte) is stepped once however many tokens pass through it.
    pub fn mask(
        &mut self,
        trie: &TokenTrie,
        reps: &[u8],
        root: &[WConf],
        words: &mut [u32],
    ) -> Result<(), CfgError> {
        let mut sets: Interner<Vec<WConf>> = Interner::new();
        let mut root = root.to_vec();
        root.sort_unstable();
        sets.intern(root);
        // trans[id * 256 + b]: 0 unknown, 1 dead, else 2 + the id of the set after b
        let mut trans: Vec<u32> = vec![0; 256];
        let mut levels: Vec<u32> = vec![0; trie.max_depth + 1];
        let mut scratch = Vec::new();
        let n = trie.n_nodes();
        let mut i = 1;
        while i < n {
            let d = trie.depth[i] as usize;
            let c = trie.label[i];
            let b = reps[usize::from(c)];
            let slot = levels[d - 1] as usize * 256 + usize::from(c);
            let mut next = trans[slot];
            if next == 0 {
                self.step(&sets.values[levels[d - 1] as usize], b, &mut scratch)?;
                next = if scratch.is_empty() {
                    1
                } else {
                    scratch.sort_unstable();
                    let id = sets.intern(std::mem::take(&mut scratch));
                    if trans.len() < (id as usize + 1) * 256 {
                        trans.resize((id as usize + 1) * 256, 0);
                    }
                    id + 2
                };
                trans[slot] = next;
            }
            if next == 1 {
                i = trie.end[i] as usize;
                continue;
            }
            levels[d] = next - 2;
            for &t in trie.tokens(i) {
                words[t as usize >> 5] |= 1 << (t & 31);
            }
            i += 1;
        }
        Ok(())
    }
}

#[inline]
fn push_unique(out: &mut Vec<WConf>, c: WConf) {
    if !out.contains(&c) {
        out.push(c);
    }
}
