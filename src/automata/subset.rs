//! The subset construction of a byte NFA with anchor assertions, as
//! `grammarmask.automata.nfa.determinize` does it (the same DFA states in the same order, then
//! [`minimize`]); see that module for the anchors: look-behind ones are decided by the context of
//! an epsilon closure (at the start, after a newline), look-ahead ones put a thread into a *mode*
//! that constrains the rest of the input. A DFA state is a set of configurations
//! `nfa_state * 4 + mode`.

use super::minimize::minimize_classed;
use super::Dfa;
use crate::classes::ByteClasses;
use rustc_hash::FxHashMap as HashMap;

const FREE: u32 = 0;
const NEXT_NL: u32 = 1;
const REST_NL: u32 = 2;
const END: u32 = 3;
const DEAD_MODE: u32 = u32::MAX;

/// Anchor kinds, numbered as in Python.
const A_BEGIN: u32 = 0;
const A_BOL: u32 = 1;
const A_END: u32 = 2;
const A_DOLLAR: u32 = 3;
const A_EOL: u32 = 4;

/// The mode of a thread in mode `m` that also satisfies the rest-of-input constraint `c`.
fn meet(m: u32, c: u32) -> u32 {
    match (m, c) {
        (m, FREE) => m,
        (FREE, c) => c,
        (NEXT_NL, NEXT_NL) => NEXT_NL,
        (NEXT_NL | REST_NL, REST_NL) | (REST_NL, NEXT_NL) => REST_NL,
        (END, END) => END,
        _ => DEAD_MODE,
    }
}

/// A Thompson NFA as flat lists: for state `q`, its epsilon targets `eps[eps_ptr[q]..eps_ptr[q+1]]`,
/// its byte edges `edges[edge_ptr[q]..edge_ptr[q+1]]` as `(lo, hi, target)`, its anchors
/// `asserts[assert_ptr[q]..assert_ptr[q+1]]` as `(kind, target)`.
pub struct Nfa<'a> {
    pub eps_ptr: &'a [u32],
    pub eps: &'a [u32],
    pub edge_ptr: &'a [u32],
    pub edges: &'a [(u32, u32, u32)],
    pub assert_ptr: &'a [u32],
    pub asserts: &'a [(u32, u32)],
}

/// Why the construction stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// More than this many DFA states.
    States(usize),
    /// The DFA states' NFA states summed to more than this (`Limits.regex_subset_work`).
    Work(usize),
}

/// Per-state lists as one list and the `n + 1` offsets of each state's items in it (an [`Nfa`]'s
/// layout).
pub fn flatten<T: Copy>(lists: &[Vec<T>]) -> (Vec<u32>, Vec<T>) {
    let mut ptr = Vec::with_capacity(lists.len() + 1);
    ptr.push(0u32);
    let mut out = Vec::new();
    for x in lists {
        out.extend_from_slice(x);
        ptr.push(out.len() as u32);
    }
    (ptr, out)
}

/// Scratch marks of the configurations in a closure: `stamp[c] == generation` for those in it.
struct Marks {
    stamp: Vec<u32>,
    generation: u32,
}

impl Marks {
    fn new(n_states: usize) -> Marks {
        Marks {
            stamp: vec![0; 4 * n_states],
            generation: 0,
        }
    }

    /// The stamps and a generation no configuration holds yet.
    fn fresh(&mut self) -> (&mut Vec<u32>, u32) {
        if self.generation == u32::MAX {
            self.stamp.fill(0);
            self.generation = 0;
        }
        self.generation += 1;
        (&mut self.stamp, self.generation)
    }
}

impl Nfa<'_> {
    fn n_states(&self) -> usize {
        self.eps_ptr.len() - 1
    }

    /// The epsilon closure of `kernel` (configurations) in a look-behind context, sorted.
    fn closure(
        &self,
        kernel: &[u32],
        at_start: bool,
        prev_nl: bool,
        marks: &mut Marks,
    ) -> Vec<u32> {
        let seen = marks.fresh();
        let mut out: Vec<u32> = Vec::with_capacity(2 * kernel.len());
        let add = |c: u32, seen: &mut [u32], gen: u32, out: &mut Vec<u32>| {
            if seen[c as usize] != gen {
                seen[c as usize] = gen;
                out.push(c);
            }
        };
        let (seen, gen) = (&mut seen.0[..], seen.1);
        for &c in kernel {
            add(c, seen, gen, &mut out);
        }
        let mut next = 0;
        while next < out.len() {
            let c = out[next];
            next += 1;
            let (q, m) = ((c >> 2) as usize, c & 3);
            for &t in &self.eps[self.eps_ptr[q] as usize..self.eps_ptr[q + 1] as usize] {
                add((t << 2) | m, seen, gen, &mut out);
            }
            for &(kind, t) in
                &self.asserts[self.assert_ptr[q] as usize..self.assert_ptr[q + 1] as usize]
            {
                let modes: &[u32] = match kind {
                    A_BEGIN if at_start => &[FREE],
                    A_BOL if at_start || prev_nl => &[FREE],
                    A_BEGIN | A_BOL => &[],
                    A_END => &[END],
                    A_DOLLAR => &[END, REST_NL],
                    A_EOL => &[END, NEXT_NL],
                    _ => &[],
                };
                for &c2 in modes {
                    // look-behind anchors keep the mode (FREE is the identity of meet)
                    let m2 = meet(m, c2);
                    if m2 != DEAD_MODE {
                        add((t << 2) | m2, seen, gen, &mut out);
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Check the lists: pointers monotone and in range, every target a state, anchors known.
    pub fn check(&self, start: usize, final_state: usize) -> Result<(), String> {
        let n = self.n_states();
        let ptrs = [
            (self.eps_ptr, self.eps.len(), "eps"),
            (self.edge_ptr, self.edges.len(), "edges"),
            (self.assert_ptr, self.asserts.len(), "asserts"),
        ];
        for (ptr, len, what) in ptrs {
            if ptr.len() != n + 1
                || ptr[0] != 0
                || ptr[n] as usize != len
                || ptr.windows(2).any(|w| w[0] > w[1])
            {
                return Err(format!("nfa: {what} pointers do not describe {n} states"));
            }
        }
        let bad_target = self.eps.iter().any(|&t| t as usize >= n)
            || self
                .edges
                .iter()
                .any(|&(lo, hi, t)| lo > hi || hi > 255 || t as usize >= n)
            || self
                .asserts
                .iter()
                .any(|&(k, t)| k > A_EOL || t as usize >= n);
        if bad_target || start >= n || final_state >= n || n >= 1 << 30 {
            return Err("nfa: an edge, anchor or state out of range".to_owned());
        }
        Ok(())
    }
}

/// The minimal DFA of `nfa` from `start` to `final_state` (and its byte classes); [`Stop`] past
/// `max_states` DFA states or `max_work` summed NFA states (None: no bound).
pub fn determinize(
    nfa: &Nfa<'_>,
    start: u32,
    final_state: u32,
    max_states: usize,
    max_work: Option<usize>,
) -> Result<(Dfa, ByteClasses), Stop> {
    let mut work = 0usize;
    let mut index: HashMap<Vec<u32>, u32> = HashMap::default();
    index.insert(Vec::new(), 0);
    let mut marks = Marks::new(nfa.n_states());
    let init = nfa.closure(&[start << 2], true, false, &mut marks);
    let (fin_free, fin_end) = ((final_state << 2) | FREE, (final_state << 2) | END);
    let accepts =
        |set: &[u32]| set.binary_search(&fin_free).is_ok() || set.binary_search(&fin_end).is_ok();
    let mut accepting = vec![false, accepts(&init)];
    index.insert(init.clone(), 1);
    let mut todo: Vec<(Vec<u32>, u32)> = vec![(init, 1)];
    let mut rows: Vec<(u32, u32, u32, u32)> = Vec::new(); // (state, lo, hi, target)
    let mut closures: HashMap<(Vec<u32>, bool), Vec<u32>> = HashMap::default();
    let mut events: Vec<(u32, u32, bool)> = Vec::new(); // (bound, target config, enters)
    let mut active: HashMap<u32, u32> = HashMap::default();
    while let Some((cur, sid)) = todo.pop() {
        events.clear();
        for &c in &cur {
            let (q, m) = ((c >> 2) as usize, c & 3);
            if m == END {
                continue;
            }
            for &(lo, hi, t) in &nfa.edges[nfa.edge_ptr[q] as usize..nfa.edge_ptr[q + 1] as usize] {
                let (lo, hi, tc) = if m == FREE {
                    (lo, hi, t << 2)
                } else if lo <= 10 && 10 <= hi {
                    // NEXT_NL / REST_NL: only a newline may follow
                    (10, 10, (t << 2) | if m == NEXT_NL { FREE } else { END })
                } else {
                    continue;
                };
                events.push((lo, tc, true));
                events.push((hi + 1, tc, false));
            }
        }
        if events.is_empty() {
            continue;
        }
        // every bound, with 10 and 11 among them: a newline's closure differs (prev_nl)
        let mut bounds: Vec<u32> = events.iter().map(|e| e.0).chain([10, 11]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        events.sort_unstable_by_key(|e| e.0);
        active.clear();
        let mut e = 0;
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            while e < events.len() && events[e].0 == a {
                let (_, t, enters) = events[e];
                let cnt = active.entry(t).or_insert(0);
                if enters {
                    *cnt += 1;
                } else {
                    *cnt -= 1;
                    if *cnt == 0 {
                        active.remove(&t);
                    }
                }
                e += 1;
            }
            if active.is_empty() || a > 255 {
                continue;
            }
            let mut kernel: Vec<u32> = active.keys().copied().collect();
            kernel.sort_unstable();
            let key = (kernel, a == 10);
            let closed = match closures.get(&key) {
                Some(c) => c.clone(),
                None => {
                    let c = nfa.closure(&key.0, false, a == 10, &mut marks);
                    closures.insert(key, c.clone());
                    c
                }
            };
            let tid = match index.get(&closed) {
                Some(&t) => t,
                None => {
                    let t = index.len();
                    if t > max_states {
                        return Err(Stop::States(max_states));
                    }
                    work += closed.len();
                    if max_work.is_some_and(|w| work > w) {
                        return Err(Stop::Work(max_work.unwrap_or(0)));
                    }
                    accepting.push(accepts(&closed));
                    index.insert(closed.clone(), t as u32);
                    todo.push((closed, t as u32));
                    t as u32
                }
            };
            rows.push((sid, a, b - 1, tid));
        }
    }
    // the table by byte intervals, cut at every bound a row has: each row covers whole intervals,
    // so they are byte classes (not the coarsest, which minimisation finds), and no 256-column
    // table is written and read back
    let mut cuts = vec![false; 257];
    for &(_, lo, hi, _) in &rows {
        cuts[lo as usize] = true;
        cuts[hi as usize + 1] = true;
    }
    let mut map = [0u8; 256];
    let mut k = 0usize;
    for (b, class) in map.iter_mut().enumerate() {
        if b == 0 || cuts[b] {
            k += 1;
        }
        *class = (k - 1) as u8;
    }
    let n = index.len();
    let mut red = vec![0u32; n * k];
    for (s, lo, hi, t) in rows {
        for c in usize::from(map[lo as usize])..=usize::from(map[hi as usize]) {
            red[s as usize * k + c] = t;
        }
    }
    Ok(minimize_classed(&red[..], k, &map, &accepting, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Builder {
        eps: Vec<Vec<u32>>,
        edges: Vec<Vec<(u32, u32, u32)>>,
        asserts: Vec<Vec<(u32, u32)>>,
    }

    impl Builder {
        fn new(n: usize) -> Builder {
            Builder {
                eps: vec![vec![]; n],
                edges: vec![vec![]; n],
                asserts: vec![vec![]; n],
            }
        }

        fn run(&self, start: u32, fin: u32) -> Dfa {
            let (ep, e) = flatten(&self.eps);
            let (gp, g) = flatten(&self.edges);
            let (ap, a) = flatten(&self.asserts);
            let nfa = Nfa {
                eps_ptr: &ep,
                eps: &e,
                edge_ptr: &gp,
                edges: &g,
                assert_ptr: &ap,
                asserts: &a,
            };
            nfa.check(start as usize, fin as usize).unwrap();
            determinize(&nfa, start, fin, 1000, None).unwrap().0
        }
    }

    fn matches(d: &Dfa, w: &[u8]) -> bool {
        let mut s = d.start;
        for &b in w {
            s = d.next(s, b);
        }
        d.accepting[s as usize]
    }

    #[test]
    fn a_star_b() {
        // 0 -eps-> 1, 1 -a-> 1, 1 -b-> 2 (final)
        let mut b = Builder::new(3);
        b.eps[0].push(1);
        b.edges[1].push((97, 97, 1));
        b.edges[1].push((98, 98, 2));
        let d = b.run(0, 2);
        assert!(matches(&d, b"b") && matches(&d, b"aaab"));
        assert!(!matches(&d, b"") && !matches(&d, b"ba") && !matches(&d, b"aa"));
        assert_eq!(d.n_states(), 3);
    }

    #[test]
    fn dollar_may_stand_before_a_final_newline() {
        // "a$\n" (as re.fullmatch reads it): 0 -a-> 1, 1 -$-> 2, 2 -\n-> 3 (final)
        let mut b = Builder::new(4);
        b.edges[0].push((97, 97, 1));
        b.asserts[1].push((A_DOLLAR, 2));
        b.edges[2].push((10, 10, 3));
        let d = b.run(0, 3);
        assert!(matches(&d, b"a\n"));
        assert!(!matches(&d, b"a") && !matches(&d, b"a\n\n"));
        // "a$": "a" only
        let mut b = Builder::new(3);
        b.edges[0].push((97, 97, 1));
        b.asserts[1].push((A_DOLLAR, 2));
        let d = b.run(0, 2);
        assert!(matches(&d, b"a") && !matches(&d, b"a\n"));
    }

    #[test]
    fn the_state_bound_stops_the_construction() {
        // (a|b)*a(a|b)(a|b)(a|b): 16 DFA states
        let mut b = Builder::new(6);
        b.edges[0].push((97, 98, 0));
        b.edges[0].push((97, 97, 1));
        for q in 1..5 {
            b.edges[q].push((97, 98, q as u32 + 1));
        }
        let (ep, e): (Vec<u32>, Vec<u32>) = (vec![0; 7], vec![]);
        let gp: Vec<u32> = {
            let mut p = vec![0u32];
            for x in &b.edges {
                p.push(p.last().unwrap() + x.len() as u32);
            }
            p
        };
        let g: Vec<(u32, u32, u32)> = b.edges.concat();
        let nfa = Nfa {
            eps_ptr: &ep,
            eps: &e,
            edge_ptr: &gp,
            edges: &g,
            assert_ptr: &ep,
            asserts: &[],
        };
        assert_eq!(
            determinize(&nfa, 0, 5, 5, None).unwrap_err(),
            Stop::States(5)
        );
        assert_eq!(
            determinize(&nfa, 0, 5, 100, Some(3)).unwrap_err(),
            Stop::Work(3)
        );
        assert!(determinize(&nfa, 0, 5, 100, None).is_ok());
    }
}
