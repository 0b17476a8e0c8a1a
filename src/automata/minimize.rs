//! Trimming and minimisation of a byte DFA, numbered as `grammarmask.automata.dfa.minimize` numbers
//! them: the trimmed states keep their order (dead state 0, then the live states by old id), and
//! the minimal DFA's states are ordered by the first trimmed state of each class.
//!
//! Minimisation is Hopcroft's partition refinement (Hopcroft 1971) over the table's byte classes:
//! O(k n log n) for n states and k classes, whatever the shape (the Python code needs a separate
//! pass for the long acyclic chains where Moore's rounds are slow).

use super::Dfa;
use crate::classes::{ByteClasses, Cells};

/// The minimal trimmed DFA of the language of `table` (`n * 256` cells, read in place), and its
/// byte classes.
pub fn minimize<C: Cells + ?Sized>(
    table: &C,
    accepting: &[bool],
    start: u32,
) -> (Dfa, ByteClasses) {
    minimize_classed(table, 256, &ByteClasses::identity().map, accepting, start)
}

/// [`minimize`] of a table read by classes that need not be the coarsest (`table[s * width + c]`,
/// `map[b]` the column of byte `b`): reduced to the coarsest first, so Hopcroft's splitters run
/// over as few columns as the language allows.
pub fn minimize_classed<C: Cells + ?Sized>(
    table: &C,
    width: usize,
    map: &[u8; 256],
    accepting: &[bool],
    start: u32,
) -> (Dfa, ByteClasses) {
    let classes = ByteClasses::of_classed_table(map, table, width);
    let red = classes.reduce_classed(map, table, width);
    minimize_reduced(&red, classes.count, &classes.map, accepting, start)
}

/// [`minimize`] of a table read by class: `red[s * k + c]`, `map[b]` the class of byte `b` (bytes
/// of a class must have equal columns; the classes need not be the coarsest).
pub fn minimize_reduced(
    red: &[u32],
    k: usize,
    map: &[u8; 256],
    accepting: &[bool],
    start: u32,
) -> (Dfa, ByteClasses) {
    let (tr, acc, start) = match trim(red, k, accepting, start as usize) {
        Some(t) => t,
        None => {
            let d = Dfa::empty();
            let classes = d.classes();
            return (d, classes);
        }
    };
    let n = acc.len();
    let block = hopcroft(&tr, k, &acc);
    // blocks ranked by their first state: the dead state's block is 0
    let mut rank = vec![u32::MAX; n];
    let mut reps: Vec<usize> = Vec::new();
    for (s, &b) in block.iter().enumerate() {
        if rank[b as usize] == u32::MAX {
            rank[b as usize] = reps.len() as u32;
            reps.push(s);
        }
    }
    if reps.len() == n {
        let d = Dfa {
            table: tr,
            k,
            map: *map,
            accepting: acc,
            start: start as u32,
        };
        let classes = d.classes();
        return (d, classes);
    }
    let mut out = vec![0u32; reps.len() * k];
    for (r, &s) in reps.iter().enumerate() {
        for c in 0..k {
            out[r * k + c] = rank[block[tr[s * k + c] as usize] as usize];
        }
    }
    let out_acc = reps.iter().map(|&s| acc[s]).collect();
    let out_start = rank[block[start] as usize];
    let d = Dfa {
        table: out,
        k,
        map: *map,
        accepting: out_acc,
        start: out_start,
    };
    let classes = d.classes();
    (d, classes)
}

/// The table of the states reachable from `start` that reach an accepting state, renumbered in
/// their old order after the dead state 0; None when `start` is not such a state.
fn trim(
    red: &[u32],
    k: usize,
    accepting: &[bool],
    start: usize,
) -> Option<(Vec<u32>, Vec<bool>, usize)> {
    let n = accepting.len();
    let mut reach = vec![false; n];
    reach[start] = true;
    let mut stack = vec![start];
    while let Some(s) = stack.pop() {
        for &t in &red[s * k..(s + 1) * k] {
            if !reach[t as usize] {
                reach[t as usize] = true;
                stack.push(t as usize);
            }
        }
    }
    // co-reachability over the reversed edges of the reachable states
    let mut count = vec![0u32; n + 1];
    for s in (0..n).filter(|&s| reach[s]) {
        for &t in &red[s * k..(s + 1) * k] {
            count[t as usize + 1] += 1;
        }
    }
    for i in 0..n {
        count[i + 1] += count[i];
    }
    let mut fill = count.clone();
    let mut preds = vec![0u32; count[n] as usize];
    for s in (0..n).filter(|&s| reach[s]) {
        for &t in &red[s * k..(s + 1) * k] {
            preds[fill[t as usize] as usize] = s as u32;
            fill[t as usize] += 1;
        }
    }
    let mut live = vec![false; n];
    let mut stack: Vec<usize> = (1..n).filter(|&s| reach[s] && accepting[s]).collect();
    for &s in &stack {
        live[s] = true;
    }
    while let Some(t) = stack.pop() {
        for &p in &preds[count[t] as usize..count[t + 1] as usize] {
            if p != 0 && !live[p as usize] {
                live[p as usize] = true;
                stack.push(p as usize);
            }
        }
    }
    if !live[start] {
        return None;
    }
    let mut new_id = vec![0u32; n];
    let mut kept = vec![0usize];
    for s in (1..n).filter(|&s| live[s]) {
        new_id[s] = kept.len() as u32;
        kept.push(s);
    }
    let mut tr = vec![0u32; kept.len() * k];
    for (i, &s) in kept.iter().enumerate().skip(1) {
        for c in 0..k {
            tr[i * k + c] = new_id[red[s * k + c] as usize];
        }
    }
    let acc = kept.iter().map(|&s| s != 0 && accepting[s]).collect();
    Some((tr, acc, new_id[start] as usize))
}

/// The Nerode class of every state of a complete DFA (`tr[s * k + c]`): Hopcroft's algorithm.
/// A split block keeps its id for the larger part; the smaller part gets a new id and is the
/// splitter added for every class, which is right whether or not the old block was waiting.
fn hopcroft(tr: &[u32], k: usize, acc: &[bool]) -> Vec<u32> {
    let n = acc.len();
    // predecessors by class and target: preds of t by c at pre[ptr[c*(n+1)+t] .. ptr[c*(n+1)+t+1]]
    let mut ptr = vec![0u32; k * (n + 1) + 1];
    for s in 0..n {
        for c in 0..k {
            ptr[c * (n + 1) + tr[s * k + c] as usize + 1] += 1;
        }
    }
    for i in 0..ptr.len() - 1 {
        ptr[i + 1] += ptr[i];
    }
    let mut fill = ptr.clone();
    let mut pre = vec![0u32; n * k];
    for s in 0..n {
        for c in 0..k {
            let at = c * (n + 1) + tr[s * k + c] as usize;
            pre[fill[at] as usize] = s as u32;
            fill[at] += 1;
        }
    }
    // the partition: elems grouped by block, block b at elems[first[b]..end[b]]
    let mut elems: Vec<u32> = (0..n as u32).filter(|&s| !acc[s as usize]).collect();
    let n_rejecting = elems.len();
    elems.extend((0..n as u32).filter(|&s| acc[s as usize]));
    let mut loc = vec![0u32; n];
    for (i, &s) in elems.iter().enumerate() {
        loc[s as usize] = i as u32;
    }
    let mut block: Vec<u32> = (0..n).map(|s| u32::from(acc[s])).collect();
    let mut first = vec![0u32, n_rejecting as u32];
    let mut end = vec![n_rejecting as u32, n as u32];
    if n_rejecting == n {
        first.pop();
        end.pop();
    }
    let mut marked = vec![0u32; first.len()];
    let mut waiting: Vec<(u32, u32)> = Vec::new();
    if first.len() == 2 {
        let small = if n_rejecting <= n - n_rejecting { 0 } else { 1 };
        waiting.extend((0..k as u32).map(|c| (small, c)));
    }
    let mut touched: Vec<u32> = Vec::new();
    let mut splitter: Vec<u32> = Vec::new();
    while let Some((a, c)) = waiting.pop() {
        splitter.clear();
        splitter.extend_from_slice(&elems[first[a as usize] as usize..end[a as usize] as usize]);
        let base = c as usize * (n + 1);
        for &t in &splitter {
            let t = t as usize;
            for &s in &pre[ptr[base + t] as usize..ptr[base + t + 1] as usize] {
                let b = block[s as usize] as usize;
                let at = loc[s as usize];
                let edge = first[b] + marked[b];
                if at < edge {
                    continue; // marked already
                }
                let other = elems[edge as usize];
                elems.swap(at as usize, edge as usize);
                loc[other as usize] = at;
                loc[s as usize] = edge;
                marked[b] += 1;
                if marked[b] == 1 {
                    touched.push(b as u32);
                }
            }
        }
        for b in touched.drain(..) {
            let b = b as usize;
            let m = marked[b];
            marked[b] = 0;
            let size = end[b] - first[b];
            if m == size {
                continue;
            }
            let nb = first.len() as u32;
            // the smaller part becomes the new block
            let (lo, hi) = if m <= size - m {
                let r = (first[b], first[b] + m);
                first[b] += m;
                r
            } else {
                let r = (first[b] + m, end[b]);
                end[b] = first[b] + m;
                r
            };
            first.push(lo);
            end.push(hi);
            marked.push(0);
            for &s in &elems[lo as usize..hi as usize] {
                block[s as usize] = nb;
            }
            waiting.extend((0..k as u32).map(|d| (nb, d)));
        }
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Moore's refinement, the slow obvious way: the reference for [`hopcroft`].
    fn moore(tr: &[u32], k: usize, acc: &[bool]) -> Vec<u32> {
        let n = acc.len();
        let mut block: Vec<u32> = acc.iter().map(|&a| u32::from(a)).collect();
        loop {
            let mut ids = std::collections::HashMap::new();
            let next: Vec<u32> = (0..n)
                .map(|s| {
                    let key: Vec<u32> = std::iter::once(block[s])
                        .chain((0..k).map(|c| block[tr[s * k + c] as usize]))
                        .collect();
                    let len = ids.len() as u32;
                    *ids.entry(key).or_insert(len)
                })
                .collect();
            let count = |v: &[u32]| v.iter().collect::<std::collections::HashSet<_>>().len();
            if count(&next) == count(&block) {
                return next;
            }
            block = next;
        }
    }

    fn same_partition(a: &[u32], b: &[u32]) -> bool {
        (0..a.len()).all(|i| (0..a.len()).all(|j| (a[i] == a[j]) == (b[i] == b[j])))
    }

    fn random_dfa(rng: &mut Rng, n: usize, k: usize) -> (Vec<u32>, Vec<bool>) {
        let mut tr = vec![0u32; n * k];
        for s in 1..n {
            for c in 0..k {
                tr[s * k + c] = if rng.below(3) == 0 {
                    0
                } else {
                    rng.below(n) as u32
                };
            }
        }
        let acc = (0..n).map(|s| s != 0 && rng.below(3) == 0).collect();
        (tr, acc)
    }

    #[test]
    fn hopcroft_finds_moores_classes() {
        let mut rng = Rng(0x1234_5678);
        for _ in 0..300 {
            let n = 1 + rng.below(30);
            let k = 1 + rng.below(4);
            let (tr, acc) = random_dfa(&mut rng, n, k);
            let got = hopcroft(&tr, k, &acc);
            assert!(same_partition(&got, &moore(&tr, k, &acc)), "{tr:?} {acc:?}");
        }
    }

    #[test]
    fn a_chain_of_equal_tails_collapses() {
        // a(b|c) with the two tails as separate states: 4 live states become 3
        let mut table = vec![0u32; 5 * 256];
        table[256 + usize::from(b'a')] = 2;
        table[2 * 256 + usize::from(b'b')] = 3;
        table[2 * 256 + usize::from(b'c')] = 4;
        let acc = [false, false, false, true, true];
        let (d, _) = minimize(&table[..], &acc, 1);
        assert_eq!(d.n_states(), 4);
        assert_eq!(d.start, 1);
        assert_eq!(d.accepting, vec![false, false, false, true]);
        assert_eq!(d.next(1, b'a'), 2);
        assert_eq!(d.next(2, b'b'), 3);
        assert_eq!(d.next(2, b'c'), 3);
    }

    #[test]
    fn unreachable_and_dead_end_states_go() {
        // 1 -a-> 2 (final), 1 -b-> 3 (a dead end), 4 unreachable and final
        let mut table = vec![0u32; 5 * 256];
        table[256 + usize::from(b'a')] = 2;
        table[256 + usize::from(b'b')] = 3;
        table[3 * 256 + usize::from(b'b')] = 3;
        let acc = [false, false, true, false, true];
        let (d, _) = minimize(&table[..], &acc, 1);
        assert_eq!(d.n_states(), 3);
        assert_eq!(d.next(1, b'b'), 0);
        let (empty, _) = minimize(&table[..], &acc, 3);
        assert_eq!(empty, Dfa::empty());
    }
}
