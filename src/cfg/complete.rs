//! Shortest completions: the cheapest way from a lexeme boundary after an Earley set to acceptance.
//!
//! Port of the chart half of `grammarmask/completion.py` (`_CfgSolver`, the specification; the
//! lexeme half, spelling and the check by feeding stay in Python). With `len(X)` the cost of
//! nonterminal `X`'s shortest derivation (each terminal costing its shortest lexeme; computed in
//! Python by `Cfg.shortest_derivations` and handed over once), the cost of finishing after `X` is
//! complete in set `E_j` is
//!
//! `C(E_j, X) = min(0 if j = 0 and X is the start symbol,
//!                  min over items (B -> alpha . X beta, i) in E_j of len(beta) + C(E_i, B))`.
//!
//! Items predicted in `E_j` itself make this a shortest-path problem among the nonterminals of one
//! set (Dijkstra); older sets' tables are memoised on the sets, which are immutable, so a step
//! computes only the sets it added. Ties are broken by symbol and item order (sorted), so answers
//! do not depend on hash order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::earley::{ESet, Grammar, END, SHIFT, SLOT};

/// No derivation (as `grammarmask.automata.dfa.UNREACHABLE`).
pub const INF: u64 = 1 << 40;

/// How `C(E, X)` is reached: None (accept: `X` is the start symbol in `E_0`), or the item
/// `(dot, k)` of `E` that `X` completes into (`k`: its origin slot, 0 for `E` itself).
pub type Back = Option<(u32, u32)>;

/// `X -> (C(E, X), back pointer)` for one set.
pub type Costs = HashMap<u32, (u64, Back)>;

/// Per dot: the cost of the symbols from the dot to the end of its rule (the last entry, past the
/// last dot, is 0).
#[derive(Debug)]
pub struct Tails(Vec<u64>);

impl Tails {
    /// The tails of `g`'s dotted rules, from the cost of each terminal and nonterminal.
    pub fn new(g: &Grammar, terminal: &[u64], nonterminal: &[u64]) -> Option<Tails> {
        let mut tail = vec![0u64; g.next_sym.len() + 1];
        for d in (0..g.next_sym.len()).rev() {
            let sym = g.next_sym[d];
            tail[d] = if sym == END {
                0
            } else {
                let c = if sym < 0 {
                    *terminal.get(!sym as usize)?
                } else {
                    *nonterminal.get(sym as usize)?
                };
                INF.min(c.saturating_add(tail[d + 1]))
            };
        }
        Some(Tails(tail))
    }
}

fn origin(e: &Arc<ESet>, k: u32) -> &Arc<ESet> {
    if k == 0 {
        e
    } else {
        &e.origins[k as usize - 1]
    }
}

fn split(it: u64) -> (u32, u32) {
    ((it >> SHIFT) as u32, (it & SLOT) as u32)
}

/// The items of `lists`, sorted (a deterministic order for ties).
fn sorted_items(lists: &[&[u64]]) -> Vec<u64> {
    let mut out: Vec<u64> = lists.concat();
    out.sort_unstable();
    out
}

/// `C(e, .)`, computing the tables of `e` and of the origin sets that lack one (iteratively:
/// the chart may be as long as the output).
pub fn table(e: &Arc<ESet>, g: &Grammar, tails: &Tails) -> Arc<Costs> {
    if let Some(t) = e.completion.get() {
        return Arc::clone(t);
    }
    let mut stack = vec![Arc::clone(e)];
    while let Some(x) = stack.last().cloned() {
        if x.completion.get().is_some() {
            stack.pop();
            continue;
        }
        let before = stack.len();
        stack.extend(
            x.origins
                .iter()
                .filter(|o| o.completion.get().is_none())
                .cloned(),
        );
        if stack.len() > before {
            continue;
        }
        let _ = x.completion.set(Arc::new(compute(&x, g, tails)));
        stack.pop();
    }
    Arc::clone(e.completion.get().expect("the table was just made"))
}

/// `C(e, .)` from the tables of `e`'s origin sets (all made).
fn compute(e: &Arc<ESet>, g: &Grammar, tails: &Tails) -> Costs {
    let tail = &tails.0;
    let mut heap: BinaryHeap<Reverse<(u64, u32, u64, Back)>> = BinaryHeap::new();
    let mut inner: HashMap<u32, Vec<(u32, u32)>> = HashMap::default(); // B -> (dot, X) predicted here
    let mut serial = 0u64;
    if e.index == 0 {
        heap.push(Reverse((0, g.start, serial, None)));
    }
    for x in e.waiting.keys() {
        let mut items = e.waiting.get(x).unwrap_or_default().to_vec();
        items.sort_unstable();
        for it in items {
            let (d, k) = split(it);
            let b = g.lhs[d as usize];
            if k == 0 {
                inner.entry(b).or_default().push((d, x));
                continue;
            }
            let o = origin(e, k);
            let got = o.completion.get().and_then(|t| t.get(&b).map(|v| v.0));
            if let Some(c) = got.filter(|&c| c < INF) {
                serial += 1;
                let cost = tail[d as usize + 1].saturating_add(c);
                heap.push(Reverse((cost, x, serial, Some((d, k)))));
            }
        }
    }
    let mut out: Costs = HashMap::default();
    while let Some(Reverse((cost, x, _, back))) = heap.pop() {
        if cost >= INF || out.contains_key(&x) {
            continue;
        }
        out.insert(x, (cost, back));
        if let Some(next) = inner.get(&x) {
            for &(d, z) in next {
                if !out.contains_key(&z) {
                    serial += 1;
                    let c = tail[d as usize + 1].saturating_add(cost);
                    heap.push(Reverse((c, z, serial, Some((d, 0)))));
                }
            }
        }
    }
    out
}

/// The cheapest way from a lexeme boundary after `e` to acceptance: its cost and the symbols to
/// derive (terminals `~t`, nonterminals `n` to expand by their shortest derivation). None when
/// there is none.
pub fn finish(e: &Arc<ESet>, g: &Grammar, tails: &Tails) -> Option<(u64, Vec<i32>)> {
    if e.accepting {
        return Some((0, Vec::new()));
    }
    let tail = &tails.0;
    let own = table(e, g, tails);
    let mut best: Option<(u64, u32, u32)> = None;
    for it in sorted_items(&[e.scan.items(), e.waiting.items()]) {
        let (d, k) = split(it);
        let o = origin(e, k);
        let t = if k == 0 {
            Arc::clone(&own)
        } else {
            table(o, g, tails)
        };
        let Some(&(c, _)) = t.get(&g.lhs[d as usize]) else {
            continue;
        };
        let cost = tail[d as usize].saturating_add(c);
        if best.is_none_or(|(b, _, _)| cost < b) {
            best = Some((cost, d, k));
        }
    }
    let (cost, mut d, k) = best.filter(|b| b.0 < INF)?;
    let mut o = Arc::clone(origin(e, k));
    let mut syms = Vec::new();
    loop {
        let mut at = d as usize;
        while g.next_sym[at] != END {
            syms.push(g.next_sym[at]);
            at += 1;
        }
        let t = table(&o, g, tails);
        let &(_, back) = t.get(&g.lhs[d as usize])?;
        let Some((d2, k2)) = back else { break };
        o = Arc::clone(origin(&o, k2));
        d = d2 + 1;
    }
    Some((cost, syms))
}
