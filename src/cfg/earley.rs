//! An incremental Earley recognizer over terminal ids with a persistent chart.
//!
//! Port of `grammarmask/cfg/earley.py` (the specification). Earley (1970), "An efficient
//! context-free parsing algorithm", CACM 13(2); nullable symbols as in Aycock & Horspool (2002),
//! "Practical Earley Parsing": an item predicting a nullable nonterminal is also advanced over it at
//! once, so completions never look back into the set being built. Right recursion uses Leo (1991):
//! a complete item whose origin set has exactly one item waiting on its left-hand side, and that
//! item becomes complete when advanced, completes the top of the deterministic reduction path
//! directly (memoised per set and symbol).
//!
//! An item `(A -> alpha . beta, j)` is stored as `dot << 32 | k`: `dot` numbers the dotted rules,
//! `k` is 0 for an item predicted in its own set, else its origin set is `origins[k - 1]`. Sets are
//! immutable once built and refer to their origin sets through `Arc`s, so a state that holds one set
//! holds the part of the chart it needs: fork and rollback are free, and a set nothing refers to is
//! freed (iteratively: a long chart does not recurse in `drop`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::lexer::Lexer;
use super::CfgError;
use crate::vocab::lock;

/// `next_sym` of a complete dotted rule.
pub(super) const END: i32 = i32::MIN;
pub(super) const SHIFT: u32 = 32;
pub(super) const SLOT: u64 = (1 << SHIFT) - 1;

/// The dotted-rule tables of a grammar, shared by every set built from it.
#[derive(Debug)]
pub struct Grammar {
    /// per dot: the symbol after it (`n >= 0` nonterminal, `~t` terminal, [`END`])
    pub(super) next_sym: Vec<i32>,
    pub(super) lhs: Vec<u32>,
    pub(super) start: u32,
    nullable: Vec<bool>,
    own_scan: Vec<Vec<(u32, u32)>>,
    own_wait: Vec<Vec<(u32, u32)>>,
    reach: Vec<Vec<u32>>,
    /// per nonterminal: whether it ends a rule (only then can a set have a Leo link for it)
    ends_rule: Vec<bool>,
    items_per_set: usize,
}

impl Grammar {
    /// The tables of rules `lhs[r] -> rhs[ptr[r] .. ptr[r + 1]]` (symbols as in `grammarmask.ir.Cfg`).
    pub fn new(
        n_nonterminals: usize,
        n_terminals: usize,
        rule_lhs: &[i64],
        rule_ptr: &[i64],
        rule_rhs: &[i64],
        start: i64,
        items_per_set: usize,
    ) -> Result<Grammar, CfgError> {
        let bad = |m: String| Err(CfgError::Grammar(format!("native CFG rules: {m}")));
        if rule_ptr.len() != rule_lhs.len() + 1 || rule_ptr.first() != Some(&0) {
            return bad("rule offsets do not match the rules".into());
        }
        if !(0..n_nonterminals as i64).contains(&start) {
            return bad(format!("start symbol {start} of {n_nonterminals}"));
        }
        let mut rules: Vec<(u32, Vec<i32>)> = Vec::with_capacity(rule_lhs.len());
        for (r, &l) in rule_lhs.iter().enumerate() {
            let (a, b) = (rule_ptr[r], rule_ptr[r + 1]);
            if a < 0 || b < a || b as usize > rule_rhs.len() {
                return bad(format!("rule {r} has bad offsets"));
            }
            if !(0..n_nonterminals as i64).contains(&l) {
                return bad(format!("rule {r}: left-hand side {l} of {n_nonterminals}"));
            }
            let mut rhs = Vec::with_capacity((b - a) as usize);
            for &s in &rule_rhs[a as usize..b as usize] {
                let ok = if s >= 0 {
                    s < n_nonterminals as i64
                } else {
                    !s < n_terminals as i64
                };
                if !ok {
                    return bad(format!("rule {r}: symbol {s} out of range"));
                }
                rhs.push(s as i32);
            }
            rules.push((l as u32, rhs));
        }
        let nullable = nullable_set(n_nonterminals, &rules);
        let mut ends_rule = vec![false; n_nonterminals];
        for (_, rhs) in &rules {
            if let Some(&y) = rhs.last().filter(|&&y| y >= 0) {
                ends_rule[y as usize] = true;
            }
        }
        let mut next_sym = Vec::new();
        let mut lhs = Vec::new();
        let mut starts: Vec<Vec<u32>> = vec![Vec::new(); n_nonterminals];
        for (l, rhs) in &rules {
            let base = next_sym.len() as u32;
            starts[*l as usize].push(base);
            for d in 0..=rhs.len() {
                next_sym.push(if d < rhs.len() { rhs[d] } else { END });
                lhs.push(*l);
            }
        }
        // own[z]: z's rules at their start or past a prefix of nullable symbols (Aycock-Horspool)
        let mut own_scan = vec![Vec::new(); n_nonterminals];
        let mut own_wait = vec![Vec::new(); n_nonterminals];
        for z in 0..n_nonterminals {
            for &d0 in &starts[z] {
                let mut d = d0;
                loop {
                    let s = next_sym[d as usize];
                    if s == END {
                        break;
                    }
                    if s < 0 {
                        own_scan[z].push((!s as u32, d));
                        break;
                    }
                    own_wait[z].push((s as u32, d));
                    if !nullable[s as usize] {
                        break;
                    }
                    d += 1;
                }
            }
        }
        let mut reach = Vec::with_capacity(n_nonterminals);
        for z in 0..n_nonterminals {
            let mut seen = vec![z as u32];
            let mut in_seen: HashSet<u32> = [z as u32].into_iter().collect();
            let mut todo = vec![z as u32];
            while let Some(y) = todo.pop() {
                for &(w, _) in &own_wait[y as usize] {
                    if in_seen.insert(w) {
                        seen.push(w);
                        todo.push(w);
                    }
                }
            }
            reach.push(seen);
        }
        Ok(Grammar {
            next_sym,
            lhs,
            start: start as u32,
            nullable,
            ends_rule,
            own_scan,
            own_wait,
            reach,
            items_per_set,
        })
    }
}

impl Grammar {
    /// Number of nonterminals.
    pub fn n_nonterminals(&self) -> usize {
        self.nullable.len()
    }
}

/// Nonterminals deriving the empty string (least fixed point).
fn nullable_set(n: usize, rules: &[(u32, Vec<i32>)]) -> Vec<bool> {
    let mut nullable = vec![false; n];
    let mut changed = true;
    while changed {
        changed = false;
        for (l, rhs) in rules {
            if !nullable[*l as usize] && rhs.iter().all(|&s| s >= 0 && nullable[s as usize]) {
                nullable[*l as usize] = true;
                changed = true;
            }
        }
    }
    nullable
}

/// Interned structural signatures of sets: equal signatures mean equal future behaviour (what a
/// set is read for later, not how it was reached: see [`ESet::sig`] and [`ESet::osig`]). Ids are
/// never reused; past `limit` entries the oldest are forgotten (only sharing is lost).
///
/// Kept by the signature's 64-bit hash, computed once: a table keyed by the signatures themselves
/// hashed every stored signature again each time it doubled (the mask of arithmetic.lark that met
/// the doubling past 57,000 signatures spent 5.7 M of its 7.7 M instructions rehashing). The
/// table grows by generations: a full one is kept as it is and a new one of twice its room begun,
/// so no insertion moves what is held (one table that doubled in place moved every entry: a mask
/// step of arithmetic.lark that met the doubling past 2^17 signatures took 1.1 ms, 0.2 ms without
/// it); a look-up asks the generations newest first. A signature whose hash another one holds is
/// kept whole in `collided`.
#[derive(Debug)]
pub struct Sigs {
    /// a hash is in one generation at most
    gens: Vec<Generation>,
    collided: HashMap<Box<[u64]>, u64>,
    /// signatures held (in the generations and in `collided`)
    held: usize,
    next: u64,
    limit: usize,
    hash: fn(&[u64]) -> u64,
}

/// Signatures of [`Sigs`] by hash: hash -> (signature, id).
type Generation = HashMap<u64, (Box<[u64]>, u64)>;

/// Room of the first generation of [`Sigs`].
const FIRST_GENERATION: usize = 1024;

fn fx_hash(key: &[u64]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(key)
}

impl Sigs {
    pub fn new(limit: usize) -> Self {
        Sigs::with_hash(limit, fx_hash)
    }

    fn with_hash(limit: usize, hash: fn(&[u64]) -> u64) -> Self {
        Sigs {
            gens: Vec::new(),
            collided: HashMap::default(),
            held: 0,
            next: 0,
            limit,
            hash,
        }
    }

    /// The id of `key` (copied only when it is new: most sets a walk builds were seen before).
    fn intern(&mut self, key: &[u64]) -> u64 {
        let h = (self.hash)(key);
        let held_hash = self.gens.iter().rev().find_map(|g| g.get(&h));
        if let Some((kept, id)) = held_hash {
            if **kept == *key {
                return *id;
            }
            if let Some(&id) = self.collided.get(key) {
                return id;
            }
        }
        let mut taken = held_hash.is_some();
        if self.held >= self.limit {
            self.forget_oldest();
            taken = self.gens.iter().any(|g| g.contains_key(&h));
        }
        let id = self.next;
        self.next += 1;
        self.held += 1;
        if taken {
            self.collided.insert(key.into(), id);
            return id;
        }
        let most = (self.limit / 8).max(FIRST_GENERATION);
        let room = match self.gens.last() {
            Some(g) if g.len() < g.capacity() => None,
            Some(g) => Some((2 * g.capacity()).min(most)),
            None => Some(FIRST_GENERATION),
        };
        if let Some(room) = room {
            self.gens
                .push(HashMap::with_capacity_and_hasher(room, Default::default()));
        }
        if let Some(g) = self.gens.last_mut() {
            g.insert(h, (key.into(), id));
        }
        id
    }

    /// Forget the oldest generations until fewer than `limit` signatures are held (only sharing
    /// is lost: a signature met again gets a new id). A generation holds at most an eighth of the
    /// limit, so no step frees the whole table at once.
    fn forget_oldest(&mut self) {
        while self.held >= self.limit && self.gens.len() > 1 {
            let oldest = self.gens.remove(0);
            self.held -= oldest.len();
        }
        if self.held >= self.limit {
            self.gens.clear();
            self.collided.clear();
            self.held = 0;
        }
    }
}

/// Items grouped by a symbol (the terminal they scan, or the nonterminal they wait for), in two
/// flat arrays: a set holds two of these, where a map of vectors cost an allocation per symbol.
#[derive(Debug, Default)]
pub struct Groups {
    /// (symbol, end) ascending by symbol: the symbol's items are `items[previous end..end]`
    index: Vec<(u32, u32)>,
    /// the items, grouped by symbol, in the order they were added
    items: Vec<u64>,
}

impl Groups {
    /// The groups of `pairs` (symbol, item), which are sorted by symbol (stably) in place.
    fn from_pairs(pairs: &mut [(u32, u64)]) -> Self {
        if pairs.is_empty() {
            return Groups::default();
        }
        pairs.sort_by_key(|&(k, _)| k);
        let symbols = 1 + pairs.windows(2).filter(|w| w[0].0 != w[1].0).count();
        let mut index: Vec<(u32, u32)> = Vec::with_capacity(symbols);
        for (i, &(k, _)) in pairs.iter().enumerate() {
            match index.last_mut() {
                Some(last) if last.0 == k => last.1 = i as u32 + 1,
                _ => index.push((k, i as u32 + 1)),
            }
        }
        Groups {
            index,
            items: pairs.iter().map(|&(_, it)| it).collect(),
        }
    }

    /// `k`'s items, if any.
    pub fn get(&self, k: u32) -> Option<&[u64]> {
        let i = self.index.binary_search_by_key(&k, |&(s, _)| s).ok()?;
        let start = if i == 0 { 0 } else { self.index[i - 1].1 };
        Some(&self.items[start as usize..self.index[i].1 as usize])
    }

    pub fn contains_key(&self, k: u32) -> bool {
        self.index.binary_search_by_key(&k, |&(s, _)| s).is_ok()
    }

    /// The symbols, ascending.
    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.iter().map(|&(s, _)| s)
    }

    /// Every item, grouped by symbol.
    pub fn items(&self) -> &[u64] {
        &self.items
    }
}

/// [`ESet::build`]'s working sets, kept per thread between builds.
#[derive(Default)]
struct BuildScratch {
    items: HashSet<u64>,
    /// the slots of the origins, once there are more than [`FEW_ORIGINS`] (else `origins` is
    /// searched: most sets have a handful, and hashing each item's origin cost more)
    slot_of: HashMap<*const ESet, u32>,
    origins: Vec<Arc<ESet>>,
    /// bit `z`: nonterminal `z` predicted (those set are listed in `pred`, which clears them)
    predicted: Vec<u64>,
    pred: Vec<u32>,
    agenda: Vec<(u32, Arc<ESet>)>,
    parts: Vec<(u64, u64)>,
    key: Vec<u64>,
    scan: Vec<(u32, u64)>,
    waiting: Vec<(u32, u64)>,
    pend: Vec<u32>,
}

/// Origins of a set found by searching them, before a map of their slots is made.
const FEW_ORIGINS: usize = 16;

/// Items a thread's scratch keeps room for between builds.
const SCRATCH_KEPT: usize = 1 << 14;

thread_local! {
    static LEO_PATH: std::cell::Cell<LeoPath> = const { std::cell::Cell::new(Vec::new()) };
    static SCRATCH: std::cell::Cell<BuildScratch> = std::cell::Cell::new(BuildScratch::default());
}

impl BuildScratch {
    /// This thread's scratch, emptied (a fresh one after a huge set: its memory is not kept, nor
    /// its buckets walked by every later clear()).
    fn take() -> Self {
        let mut s = SCRATCH.take();
        if s.items.capacity() > SCRATCH_KEPT {
            return BuildScratch::default();
        }
        s.items.clear();
        s.slot_of.clear();
        s.origins.clear();
        for &z in &s.pred {
            s.predicted[z as usize / 64] = 0;
        }
        s.pred.clear();
        s.agenda.clear();
        s.parts.clear();
        s.key.clear();
        s.scan.clear();
        s.waiting.clear();
        s.pend.clear();
        s
    }

    /// Keep the scratch for this thread's next build.
    fn give_back(self) {
        SCRATCH.set(self);
    }
}

/// A complete item `(dot, origin)`.
type Item = (u32, Arc<ESet>);
/// The links of a Leo path being followed: (set, nonterminal completed into it, the item it gives).
type LeoPath = Vec<(Arc<ESet>, u32, Item)>;
/// Leo's topmost complete item of a path, and what stands for the path's top in signatures
/// ([`origin_part`]).
type Leo = Option<(Item, u64)>;

/// `E_k`: an immutable Earley set.
#[derive(Debug)]
pub struct ESet {
    pub index: u32,
    pub(super) origins: Vec<Arc<ESet>>,
    pub(super) waiting: Groups,
    pub(super) scan: Groups,
    /// whether the terminals read so far form a sentence
    pub accepting: bool,
    /// structural signature of the set's future as the current set (see [`Sigs`]): its items still
    /// to scan a terminal, what it holds as an origin ([`ESet::osig`]), whether it accepts
    pub sig: u64,
    /// structural signature of what later sets can read of this one as their items' origin: the
    /// items waiting for a nonterminal (completions and Leo's paths read nothing else), the
    /// predictions, and whether it is `E_0` (the start symbol completes into `E_0` alone)
    pub osig: u64,
    /// the lexer start states of the lexemes that may begin after this set (sorted)
    pub pend: Vec<u32>,
    /// [`ESet::leo_item`]'s answers, by nonterminal
    leo: Mutex<HashMap<u32, Leo>>,
    next: Mutex<HashMap<u32, Weak<ESet>>>,
    /// the costs of finishing after each nonterminal completed here (`super::complete`), made on
    /// the first completion asked through this set
    pub(super) completion: OnceLock<Arc<super::complete::Costs>>,
}

/// What building one set needs besides its kernel.
pub struct Ctx<'a> {
    pub g: &'a Grammar,
    pub lx: &'a Lexer,
    pub sigs: &'a mut Sigs,
    /// sets built recently, held so that speculative sets asked again soon are not rebuilt
    pub recent: &'a mut VecDeque<Arc<ESet>>,
    pub recent_limit: usize,
}

/// What an item whose rule `a` began in `origin` keeps of that origin in a signature: the origin is
/// read only when the item completes, and completing `a` there follows Leo's deterministic path
/// (when `origin` has one) to its top, so the top stands in (its nonterminal and its set's `osig`,
/// under tag 2), else `origin.osig`. Without it every element of a right-recursive list (`items:
/// "," item more`, `more: items |`, which JSON Schema's array and property machines are) had a
/// signature of its own, the chain of origins below it, and its every step was a first visit.
fn origin_part(sigs: &mut Sigs, g: &Grammar, origin: &Arc<ESet>, a: u32) -> u64 {
    if !g.ends_rule[a as usize] {
        return origin.osig;
    }
    // (the memo's answer read in place: most are asked before, and the item is not wanted here)
    let known = lock(&origin.leo)
        .get(&a)
        .map(|leo| leo.as_ref().map(|&(_, part)| part));
    let part = match known {
        Some(part) => part,
        None => origin.leo_item(g, sigs, a).map(|(_, part)| part),
    };
    part.unwrap_or(origin.osig)
}

impl ESet {
    /// `E_0`: the predictions of the start symbol.
    pub fn initial(cx: &mut Ctx<'_>) -> Result<Arc<ESet>, CfgError> {
        ESet::build(cx, 0, None, Some(cx.g.start))
    }

    /// The terminals this set can scan next.
    pub fn allows(&self, t: u32) -> bool {
        self.scan.contains_key(t)
    }

    /// The set of `index` whose kernel is the items of `from.0` in `from.1`, advanced over the
    /// symbol they scan (none: `E_0`), with the predictions of `predict`.
    fn build(
        cx: &mut Ctx<'_>,
        index: u32,
        from: Option<(&Arc<ESet>, &[u64])>,
        predict: Option<u32>,
    ) -> Result<Arc<ESet>, CfgError> {
        let g = cx.g;
        // the working sets live in this thread's scratch (cleared, their memory kept): a mask walk
        // builds thousands of speculative sets, and allocating them afresh was a third of its time
        let mut scratch = BuildScratch::take();
        let BuildScratch {
            items,
            slot_of,
            origins,
            predicted,
            pred,
            agenda,
            parts,
            key,
            scan,
            waiting,
            pend,
        } = &mut scratch;
        let words = g.n_nonterminals().div_ceil(64);
        if predicted.len() < words {
            predicted.resize(words, 0);
        }
        let is_predicted =
            |predicted: &[u64], z: u32| predicted[z as usize / 64] >> (z % 64) & 1 != 0;
        let predict_ = |x: u32,
                        predicted: &mut [u64],
                        pred: &mut Vec<u32>,
                        scan: &mut Vec<(u32, u64)>,
                        waiting: &mut Vec<(u32, u64)>| {
            for &z in &g.reach[x as usize] {
                let (w, bit) = (z as usize / 64, 1u64 << (z % 64));
                if predicted[w] & bit == 0 {
                    predicted[w] |= bit;
                    pred.push(z);
                    for &(t, d) in &g.own_scan[z as usize] {
                        scan.push((t, u64::from(d) << SHIFT));
                    }
                    for &(w, d) in &g.own_wait[z as usize] {
                        waiting.push((w, u64::from(d) << SHIFT));
                    }
                }
            }
        };
        if let Some(x) = predict {
            predict_(x, predicted, pred, scan, waiting);
        }
        if let Some((src, kernel)) = from {
            agenda.extend(kernel.iter().map(|&it| {
                let k = (it & SLOT) as usize;
                let o = if k != 0 {
                    Arc::clone(&src.origins[k - 1])
                } else {
                    Arc::clone(src)
                };
                ((it >> SHIFT) as u32 + 1, o)
            }));
        }
        let mut accepting = false;
        let mut budget = g.items_per_set;
        while let Some((dot, origin)) = agenda.pop() {
            if budget == 0 {
                scratch.give_back();
                return Err(CfgError::Budget {
                    budget: "earley_items_per_set",
                    value: g.items_per_set,
                    what: format!(
                        "an Earley set needs more items than allowed (a highly ambiguous grammar?) at lexeme {index}"
                    ),
                });
            }
            budget -= 1;
            let known = if origins.len() <= FEW_ORIGINS {
                origins
                    .iter()
                    .position(|o| Arc::ptr_eq(o, &origin))
                    .map(|j| j as u32 + 1)
            } else {
                slot_of.get(&Arc::as_ptr(&origin)).copied()
            };
            let k = match known {
                Some(k) => k,
                None => {
                    origins.push(Arc::clone(&origin));
                    let k = origins.len() as u32;
                    if origins.len() == FEW_ORIGINS + 1 {
                        for (j, o) in origins.iter().enumerate() {
                            slot_of.insert(Arc::as_ptr(o), j as u32 + 1);
                        }
                    } else if origins.len() > FEW_ORIGINS {
                        slot_of.insert(Arc::as_ptr(&origin), k);
                    }
                    k
                }
            };
            let it = u64::from(dot) << SHIFT | u64::from(k);
            if !items.insert(it) {
                continue;
            }
            let sym = g.next_sym[dot as usize];
            if sym == END {
                let x = g.lhs[dot as usize];
                if x == g.start && origin.index == 0 {
                    accepting = true;
                }
                if let Some(((ld, lo), _)) = origin.leo_item(cx.g, cx.sigs, x) {
                    agenda.push((ld, lo));
                    continue;
                }
                if let Some(w) = origin.waiting.get(x) {
                    for &it2 in w {
                        let k2 = (it2 & SLOT) as usize;
                        let o2 = if k2 != 0 {
                            Arc::clone(&origin.origins[k2 - 1])
                        } else {
                            Arc::clone(&origin)
                        };
                        agenda.push(((it2 >> SHIFT) as u32 + 1, o2));
                    }
                }
            } else if sym >= 0 {
                let y = sym as u32;
                waiting.push((y, it));
                if !is_predicted(predicted, y) {
                    predict_(y, predicted, pred, scan, waiting);
                }
                if g.nullable[y as usize] {
                    agenda.push((dot + 1, origin));
                }
            } else {
                scan.push((!sym as u32, it));
            }
        }
        let accepting = accepting || (index == 0 && g.nullable[g.start as usize]);
        // The signatures name the future, not the past. A later set reads an origin only through
        // the items waiting there for the nonterminal it completes (and `index == 0`), so an
        // origin stands in an item's key by its `osig`; complete items are read by nothing after
        // the set is built (they made `accepting`). Two sets that differ only in what they
        // finished (after `1` or after `true` in a JSON array) then have one signature, and the
        // states above them one mask. Parts: (0 waiting | 1 scanning, dot, origin's part).
        for &it in items.iter() {
            let d = it >> SHIFT;
            let sym = g.next_sym[d as usize];
            if sym != END {
                let origin = &origins[(it & SLOT) as usize - 1];
                let o = origin_part(cx.sigs, g, origin, g.lhs[d as usize]);
                parts.push((u64::from(sym < 0) << 32 | d, o));
            }
        }
        parts.sort_unstable();
        pred.sort_unstable();
        let waiting_end = parts.partition_point(|&(d, _)| d >> 32 == 0);
        // osig: tag 0, E_0 or not, the waiting parts, the predictions
        key.extend([0, u64::from(index == 0), waiting_end as u64]);
        for &(d, s) in &parts[..waiting_end] {
            key.extend([d, s]);
        }
        key.extend(pred.iter().map(|&p| u64::from(p)));
        let osig = cx.sigs.intern(key);
        // sig: tag 1, the osig, accepting, the scanning parts
        key.clear();
        key.extend([1, osig, u64::from(accepting)]);
        for &(d, s) in &parts[waiting_end..] {
            key.extend([d, s]);
        }
        let sig = cx.sigs.intern(key);
        let scan = Groups::from_pairs(scan);
        let waiting = Groups::from_pairs(waiting);
        let lx = cx.lx;
        pend.extend(
            scan.keys()
                .map(|t| lx.start[t as usize])
                .chain(lx.ignore_starts.iter().copied())
                .filter(|&q| q != 0),
        );
        pend.sort_unstable();
        pend.dedup();
        // (each moved out at its size, one allocation apiece, the scratch's room kept)
        let mut kept_origins = Vec::with_capacity(origins.len());
        kept_origins.append(origins);
        let set = Arc::new(ESet {
            index,
            origins: kept_origins,
            waiting,
            scan,
            accepting,
            sig,
            osig,
            pend: pend.to_vec(),
            leo: Mutex::new(HashMap::default()),
            next: Mutex::new(HashMap::default()),
            completion: OnceLock::new(),
        });
        scratch.give_back();
        if cx.recent_limit > 0 {
            if cx.recent.len() >= cx.recent_limit {
                cx.recent.pop_front();
            }
            cx.recent.push_back(Arc::clone(&set));
        }
        Ok(set)
    }

    /// One link of Leo's deterministic reduction path for completing `x` into this set: its one
    /// item waiting for `x`, when `x` is the last symbol of its rule. The item may have been
    /// predicted here (`items: "," item more`, `more: items |`: completing `items` completes
    /// `more` here, then the list one level down), so a path of a right-recursive list through a
    /// unit rule stays one link per level, and whole.
    fn leo_link(self: &Arc<Self>, g: &Grammar, x: u32) -> Option<(u32, Arc<ESet>)> {
        let w = self.waiting.get(x)?;
        if w.len() != 1 {
            return None;
        }
        let d = (w[0] >> SHIFT) as u32;
        let slot = (w[0] & SLOT) as usize;
        let o = if slot == 0 {
            self
        } else {
            &self.origins[slot - 1]
        };
        if g.next_sym[d as usize + 1] != END || (g.lhs[d as usize] == g.start && o.index == 0) {
            return None;
        }
        Some((d, Arc::clone(o)))
    }

    /// Leo's topmost complete item for completing `x` into this set, if the path is deterministic
    /// (iterative: the path may be as long as the output), with its part of signatures. A path
    /// whose top is in the set it starts from is not taken (the set would hold itself).
    fn leo_item(self: &Arc<Self>, g: &Grammar, sigs: &mut Sigs, x: u32) -> Leo {
        if let Some(known) = self.leo_memo(x) {
            return known;
        }
        // (the path's list is this thread's, kept between calls: most paths are a link or two)
        let mut chain = LEO_PATH.take();
        let answer = self.leo_path(g, sigs, x, &mut chain);
        chain.clear();
        LEO_PATH.set(chain);
        answer
    }

    fn leo_path(
        self: &Arc<Self>,
        g: &Grammar,
        sigs: &mut Sigs,
        x: u32,
        chain: &mut LeoPath,
    ) -> Leo {
        let mut cur = Arc::clone(self);
        let mut sym = x;
        // links that stay in one set (unit rules predicted there) can go round a cycle of unit
        // rules: after more of them than there are nonterminals, the path has no top (no link is
        // taken: each item completes as without Leo)
        let mut in_set = 0;
        let tail: Leo = loop {
            if let Some(hit) = cur.leo_memo(sym) {
                break hit;
            }
            match cur.leo_link(g, sym) {
                Some((d, o)) => {
                    in_set = if Arc::ptr_eq(&o, &cur) { in_set + 1 } else { 0 };
                    if in_set > g.n_nonterminals() {
                        for (s, y, _) in chain.iter() {
                            s.keep_leo(*y, None);
                        }
                        return None;
                    }
                    let up = g.lhs[d as usize];
                    chain.push((Arc::clone(&cur), sym, (d + 1, Arc::clone(&o))));
                    cur = o;
                    sym = up;
                }
                None => {
                    cur.keep_leo(sym, None);
                    break None;
                }
            }
        };
        // the answer for each set of the path, the first (this set's for `x`) last; the top's
        // part of signatures is interned when an answer first holds it
        let mut answer = tail.clone();
        let mut top: Option<(Item, Option<u64>)> = tail.map(|(item, part)| (item, Some(part)));
        for (s, y, cand) in chain.drain(..).rev() {
            let (item, part) = top.get_or_insert((cand, None));
            answer = if Arc::ptr_eq(&item.1, &s) {
                None
            } else {
                let part = *part.get_or_insert_with(|| {
                    sigs.intern(&[2, u64::from(g.lhs[item.0 as usize]), item.1.osig])
                });
                Some(((item.0, Arc::clone(&item.1)), part))
            };
            s.keep_leo(y, answer.clone());
        }
        answer
    }

    /// The memo of [`ESet::leo_item`] for `x`: None when not yet asked, else its answer.
    fn leo_memo(&self, x: u32) -> Option<Leo> {
        lock(&self.leo).get(&x).cloned()
    }

    fn keep_leo(&self, x: u32, leo: Leo) {
        lock(&self.leo).insert(x, leo);
    }

    /// `E_{k+1}` after terminal `t`, or None if no item scans `t`. Memoised through a weak
    /// reference: a speculative set nobody holds is freed.
    pub fn advance(
        self: &Arc<Self>,
        cx: &mut Ctx<'_>,
        t: u32,
    ) -> Result<Option<Arc<ESet>>, CfgError> {
        let Some(src) = self.scan.get(t) else {
            return Ok(None);
        };
        if let Some(hit) = lock(&self.next).get(&t).and_then(Weak::upgrade) {
            return Ok(Some(hit));
        }
        let nxt = ESet::build(cx, self.index + 1, Some((self, src)), None)?;
        lock(&self.next).insert(t, Arc::downgrade(&nxt));
        Ok(Some(nxt))
    }
}

impl Drop for ESet {
    /// Free the chain of origin sets this set alone held, without recursing once per set.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<ESet>> = std::mem::take(&mut self.origins);
        let leo = std::mem::take(&mut *lock(&self.leo));
        stack.extend(leo.into_values().flatten().map(|((_, s), _)| s));
        while let Some(a) = stack.pop() {
            if let Ok(mut inner) = Arc::try_unwrap(a) {
                stack.append(&mut inner.origins);
                let leo = std::mem::take(&mut *lock(&inner.leo));
                stack.extend(leo.into_values().flatten().map(|((_, s), _)| s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_each_symbols_items_in_the_order_added() {
        let mut pairs = vec![(5, 50), (2, 20), (5, 51), (9, 90), (2, 21), (5, 52)];
        let g = Groups::from_pairs(&mut pairs);
        assert_eq!(g.keys().collect::<Vec<_>>(), vec![2, 5, 9]);
        assert_eq!(g.get(2), Some(&[20, 21][..]));
        assert_eq!(g.get(5), Some(&[50, 51, 52][..]));
        assert_eq!(g.get(9), Some(&[90][..]));
        assert_eq!(g.get(3), None);
        assert!(g.contains_key(9) && !g.contains_key(0));
        assert_eq!(g.items(), &[20, 21, 50, 51, 52, 90]);
        let empty = Groups::from_pairs(&mut []);
        assert_eq!((empty.get(0), empty.keys().count()), (None, 0));
    }

    #[test]
    fn signatures_are_told_apart_when_their_hashes_collide() {
        // with the real hash, then with one under which every signature collides
        for hash in [fx_hash as fn(&[u64]) -> u64, |_: &[u64]| 7] {
            let mut sigs = Sigs::with_hash(100, hash);
            let keys: Vec<Vec<u64>> = (0..20).map(|i| vec![i % 7, i]).collect();
            let ids: Vec<u64> = keys.iter().map(|k| sigs.intern(k)).collect();
            assert_eq!(
                ids,
                (0..20).collect::<Vec<_>>(),
                "each new signature a new id"
            );
            for (k, &id) in keys.iter().zip(&ids) {
                assert_eq!(sigs.intern(k), id, "the same signature, the same id");
            }
            assert_eq!(sigs.held, 20);
            assert_eq!(
                sigs.gens.iter().map(|g| g.len()).sum::<usize>() + sigs.collided.len(),
                20
            );
        }
        // past a generation's room a new one is begun, and the older ones are still read
        let mut sigs = Sigs::new(1 << 20);
        let n = 8 * FIRST_GENERATION as u64;
        let ids: Vec<u64> = (0..n).map(|i| sigs.intern(&[i, i * 3])).collect();
        assert!(sigs.gens.len() >= 3);
        assert!((0..n).all(|i| sigs.intern(&[i, i * 3]) == ids[i as usize]));
        // past the limit the oldest generations are forgotten, a few at a time
        let mut sigs = Sigs::new(8 * FIRST_GENERATION);
        let n = 40 * FIRST_GENERATION as u64;
        let ids: Vec<u64> = (0..n).map(|i| sigs.intern(&[i])).collect();
        assert_eq!(ids, (0..n).collect::<Vec<_>>());
        assert!(sigs.held < 8 * FIRST_GENERATION && sigs.held > 4 * FIRST_GENERATION);
        assert_eq!(sigs.intern(&[n - 1]), n - 1, "the newest still held");
        assert_eq!(sigs.intern(&[0]), n, "the oldest forgotten: a new id");
        // past the limit with a single generation, the table starts again: ids are not reused
        let mut sigs = Sigs::with_hash(3, |_| 7);
        let ids: Vec<u64> = (0..5u64).map(|i| sigs.intern(&[i])).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(sigs.intern(&[0]), 5, "forgotten, so new");
        assert_eq!(sigs.intern(&[4]), 4, "still held");
    }

    /// A lexer with `n` one-byte terminals: terminal t is the byte b'a' + t.
    fn bytes_lexer(n: usize) -> Lexer {
        let states = 1 + 2 * n;
        let mut table = vec![0u32; states * 256];
        let mut acc = vec![false; states];
        let mut term = vec![0u32; states];
        let mut start = Vec::new();
        for t in 0..n {
            let s = 1 + 2 * t;
            table[s * 256 + usize::from(b'a') + t] = s as u32 + 1;
            acc[s + 1] = true;
            term[s] = t as u32;
            term[s + 1] = t as u32;
            start.push(s as u32);
        }
        Lexer::new(table, acc, term, start, vec![true; n], vec![false; n]).unwrap()
    }

    /// What a test's [`Ctx`] borrows besides the grammar and the lexer.
    struct Held {
        sigs: Sigs,
        recent: VecDeque<Arc<ESet>>,
    }

    impl Held {
        fn new(signatures: usize) -> Self {
            Held {
                sigs: Sigs::new(signatures),
                recent: VecDeque::new(),
            }
        }

        fn cx<'a>(&'a mut self, g: &'a Grammar, lx: &'a Lexer, recent_limit: usize) -> Ctx<'a> {
            Ctx {
                g,
                lx,
                sigs: &mut self.sigs,
                recent: &mut self.recent,
                recent_limit,
            }
        }
    }

    /// Recognise `terms` with the grammar; None when a terminal is refused.
    fn run(g: &Grammar, lx: &Lexer, terms: &[u32]) -> Option<bool> {
        let mut held = Held::new(1000);
        let mut cx = held.cx(g, lx, 4);
        let mut e = ESet::initial(&mut cx).unwrap();
        for &t in terms {
            e = e.advance(&mut cx, t).unwrap()?;
        }
        Some(e.accepting)
    }

    #[test]
    fn right_recursion_nullable_and_leo() {
        // s -> "a" s | "b" ; s is right recursive (Leo applies)
        let g = Grammar::new(1, 2, &[0, 0], &[0, 2, 3], &[!0, 0, !1], 0, 1000).unwrap();
        let lx = bytes_lexer(2);
        let mut long = vec![0u32; 5000];
        long.push(1);
        assert_eq!(run(&g, &lx, &long), Some(true));
        assert_eq!(run(&g, &lx, &[0, 0]), Some(false));
        assert_eq!(run(&g, &lx, &[1, 0]), None);
        // s -> a b a ; a -> "a" | ; b -> "b" b |
        let g = Grammar::new(
            3,
            2,
            &[0, 1, 1, 2, 2],
            &[0, 3, 4, 4, 6, 6],
            &[1, 2, 1, !0, !1, 2],
            0,
            1000,
        )
        .unwrap();
        assert_eq!(run(&g, &lx, &[]), Some(true));
        assert_eq!(run(&g, &lx, &[0, 1, 1, 0]), Some(true));
        assert_eq!(run(&g, &lx, &[1, 0]), Some(true));
        assert_eq!(run(&g, &lx, &[0, 0, 0]), None);
    }

    #[test]
    fn a_right_recursive_list_keeps_one_signature_per_position() {
        // s -> list "b" ; list -> "a" more ; more -> rest | ; rest -> "c" "a" more
        // (JSON Schema's array machine: `more` a unit rule predicted in the set after each item)
        let g = Grammar::new(
            4,
            3,
            &[0, 1, 2, 2, 3],
            &[0, 2, 4, 5, 5, 8],
            &[1, !1, !0, 2, 3, !2, !0, 2],
            0,
            1000,
        )
        .unwrap();
        let lx = bytes_lexer(3);
        let mut held = Held::new(1 << 16);
        let mut cx = held.cx(&g, &lx, 0);
        let mut e = ESet::initial(&mut cx).unwrap();
        let mut after_item = Vec::new();
        for k in 0..3000 {
            if k > 0 {
                e = e.advance(&mut cx, 2).unwrap().unwrap();
            }
            e = e.advance(&mut cx, 0).unwrap().unwrap();
            after_item.push((e.sig, e.osig));
        }
        // the first item (no "c" before it) and the second differ; every later one is the second
        assert_ne!(after_item[0], after_item[1]);
        assert!(after_item[1..].iter().all(|&x| x == after_item[1]));
        let end = e.advance(&mut cx, 1).unwrap().unwrap();
        assert!(end.accepting);
        // a path whose top is in the set it starts from is not taken, so no set holds itself:
        // s -> x "b" | x "c" ; x -> y ; y -> "a" (`x -> . y` is E_0's one item waiting for y)
        let g = Grammar::new(
            3,
            3,
            &[0, 0, 1, 2],
            &[0, 2, 4, 5, 6],
            &[1, !1, 1, !2, 2, !0],
            0,
            1000,
        )
        .unwrap();
        let lx = bytes_lexer(3);
        let mut held = Held::new(1000);
        let mut cx = held.cx(&g, &lx, 0);
        let e0 = ESet::initial(&mut cx).unwrap();
        let e1 = e0.advance(&mut cx, 0).unwrap().unwrap();
        assert!(e1.allows(1) && e1.allows(2));
        let gone = Arc::downgrade(&e0);
        drop((e0, e1));
        assert!(
            gone.upgrade().is_none(),
            "E_0 is freed with the sets that hold it"
        );
        // the start symbol in a cycle of unit rules: s -> y | "a" ; y -> s
        let g = Grammar::new(2, 1, &[0, 0, 1], &[0, 1, 2, 3], &[1, !0, 0], 0, 1000).unwrap();
        let lx = bytes_lexer(1);
        assert_eq!(run(&g, &lx, &[0]), Some(true));
        assert_eq!(run(&g, &lx, &[0, 0]), None);
    }

    /// Textbook Earley over `rules` ((lhs, rhs): a symbol `>= 0` a nonterminal, else `!terminal`):
    /// after each terminal of `terms`, None when no item scans it, else whether `start` derives
    /// the whole input. Sets of (rule, dot, origin) closed by predicting and completing until
    /// nothing changes: no Leo, no nullable shortcut, no signatures.
    fn textbook(rules: &[(u32, Vec<i32>)], start: u32, terms: &[u32]) -> Option<bool> {
        use std::collections::BTreeSet;
        let close = |sets: &mut Vec<BTreeSet<(usize, usize, usize)>>, i: usize| loop {
            let before = sets[i].len();
            let items: Vec<_> = sets[i].iter().copied().collect();
            for (r, d, o) in items {
                match rules[r].1.get(d) {
                    Some(&y) if y >= 0 => {
                        for (r2, rule) in rules.iter().enumerate() {
                            if rule.0 == y as u32 {
                                sets[i].insert((r2, 0, i));
                            }
                        }
                    }
                    Some(_) => {}
                    None => {
                        let x = rules[r].0 as i32;
                        let waiting: Vec<_> = sets[o]
                            .iter()
                            .filter(|&&(r2, d2, _)| rules[r2].1.get(d2) == Some(&x))
                            .copied()
                            .collect();
                        for (r2, d2, o2) in waiting {
                            sets[i].insert((r2, d2 + 1, o2));
                        }
                    }
                }
            }
            if sets[i].len() == before {
                break;
            }
        };
        let mut sets = vec![BTreeSet::new()];
        for (r, rule) in rules.iter().enumerate() {
            if rule.0 == start {
                sets[0].insert((r, 0, 0));
            }
        }
        close(&mut sets, 0);
        for (i, &t) in terms.iter().enumerate() {
            let next: BTreeSet<_> = sets[i]
                .iter()
                .filter(|&&(r, d, _)| rules[r].1.get(d) == Some(&!(t as i32)))
                .map(|&(r, d, o)| (r, d + 1, o))
                .collect();
            if next.is_empty() {
                return None;
            }
            sets.push(next);
            close(&mut sets, i + 1);
        }
        let n = terms.len();
        Some(
            sets[n]
                .iter()
                .any(|&(r, d, o)| o == 0 && rules[r].0 == start && d == rules[r].1.len()),
        )
    }

    #[test]
    fn random_grammars_agree_with_textbook_earley() {
        // small random grammars (ambiguous, nullable, left and right recursive), random inputs:
        // the persistent sets (Leo, nullable shortcut, origins by slot, signatures) recognise
        // what textbook Earley does, and some sets hold more origins than FEW_ORIGINS
        let lx = bytes_lexer(3);
        let mut rng = crate::test_rng::Rng(0x0123_4567_89ab_cdef);
        let mut most_origins = 0;
        for _ in 0..400 {
            let n_nt = 1 + rng.below(3);
            let mut rules: Vec<(u32, Vec<i32>)> =
                (0..n_nt as u32).map(|x| (x, Vec::new())).collect();
            for _ in 0..1 + rng.below(6) {
                let len = rng.below(4);
                let rhs = (0..len)
                    .map(|_| {
                        if rng.below(2) == 0 {
                            rng.below(n_nt) as i32
                        } else {
                            !(rng.below(3) as i32)
                        }
                    })
                    .collect();
                rules.push((rng.below(n_nt) as u32, rhs));
            }
            // (every nonterminal's first rule a terminal: the language is seldom empty)
            for (x, rule) in rules.iter_mut().take(n_nt).enumerate() {
                rule.1 = vec![!((x % 3) as i32)];
            }
            rules.sort_by_key(|r| r.0);
            let lhs: Vec<i64> = rules.iter().map(|r| i64::from(r.0)).collect();
            let mut ptr = vec![0i64];
            let mut rhs: Vec<i64> = Vec::new();
            for r in &rules {
                rhs.extend(r.1.iter().map(|&s| i64::from(s)));
                ptr.push(rhs.len() as i64);
            }
            let g = Grammar::new(n_nt, 3, &lhs, &ptr, &rhs, 0, 1_000_000).unwrap();
            for _ in 0..8 {
                let terms: Vec<u32> = (0..rng.below(40)).map(|_| rng.below(3) as u32).collect();
                let expected = textbook(&rules, 0, &terms);
                assert_eq!(run(&g, &lx, &terms), expected, "{rules:?} {terms:?}");
                let mut held = Held::new(1 << 16);
                let mut cx = held.cx(&g, &lx, 0);
                let mut e = ESet::initial(&mut cx).unwrap();
                for &t in &terms {
                    match e.advance(&mut cx, t).unwrap() {
                        Some(next) => e = next,
                        None => break,
                    }
                    most_origins = most_origins.max(e.origins.len());
                }
            }
        }
        assert!(
            most_origins > FEW_ORIGINS + 8,
            "{most_origins} origins at most"
        );
    }

    #[test]
    fn ambiguity_hits_the_item_budget() {
        // s -> s s | "a": n**2 / 2 items after n lexemes
        let g = Grammar::new(1, 1, &[0, 0], &[0, 2, 3], &[0, 0, !0], 0, 50).unwrap();
        let lx = bytes_lexer(1);
        let mut held = Held::new(10);
        let mut cx = held.cx(&g, &lx, 0);
        let mut e = ESet::initial(&mut cx).unwrap();
        let err = loop {
            match e.advance(&mut cx, 0) {
                Ok(Some(n)) => e = n,
                Ok(None) => panic!("refused"),
                Err(err) => break err,
            }
        };
        assert!(matches!(
            err,
            CfgError::Budget {
                budget: "earley_items_per_set",
                ..
            }
        ));
    }

    #[test]
    fn refuses_bad_rules() {
        assert!(Grammar::new(1, 1, &[0], &[0, 1], &[5], 0, 10).is_err());
        assert!(Grammar::new(1, 1, &[0], &[0, 1], &[!3], 0, 10).is_err());
        assert!(Grammar::new(1, 1, &[0], &[0, 2], &[0], 0, 10).is_err());
        assert!(Grammar::new(1, 1, &[0], &[0, 1], &[!0], 1, 10).is_err());
    }
}
