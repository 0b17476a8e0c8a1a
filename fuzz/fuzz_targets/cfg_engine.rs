//! The CFG engine on an arbitrary small grammar (terminal automata, rules, greedy and ignore flags)
//! and vocabulary: bad tables are refused with an error (never a panic), budgets end in an error,
//! and along an arbitrary token stream a token is in the mask exactly when advancing by it leaves a
//! live state (the mask's trie walk and `advance`'s byte stepping are separate code). Shortest
//! completions (arbitrary symbol costs, some infinite) answer without a panic, name only symbols of
//! the grammar, and cost what their symbols cost.
#![no_main]

use std::sync::Arc;

use _engine::cfg::complete::INF;
use _engine::cfg::earley::Grammar;
use _engine::cfg::lexer::Lexer;
use _engine::cfg::tables::{combine, TerminalTable};
use _engine::cfg::{CfgEngine, Limits};
use _engine::classes::NeBytes;
use _engine::vocab::Vocab;
use libfuzzer_sys::fuzz_target;

#[path = "input.rs"]
mod input;
use input::Input;

const BYTES: &[u8] = b"ab( ";

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    if inp.below(5) == 0 {
        combined_tables(&mut inp);
        return;
    }
    let n_tokens = 1 + inp.below(20);
    let tokens: Vec<Vec<u8>> = (0..n_tokens)
        .map(|_| {
            (0..inp.below(4))
                .map(|_| BYTES[inp.below(BYTES.len())])
                .collect()
        })
        .collect();
    let Ok(vocab) = Vocab::from_tokens(tokens, &[0], n_tokens + inp.below(8)) else {
        return;
    };
    let vocab = Arc::new(vocab);
    let size = vocab.size();
    // up to 3 terminals of up to 3 states each, in one combined table (state 0 dead)
    let n_terms = 1 + inp.below(3);
    let per = 1 + inp.below(3);
    let n = 1 + n_terms * per;
    let mut table = vec![0u32; n * 256];
    let mut accepting = vec![false; n];
    let mut term_of = vec![0u32; n];
    for t in 0..n_terms {
        for k in 0..per {
            let s = 1 + t * per + k;
            term_of[s] = t as u32;
            accepting[s] = inp.below(3) == 0;
            for &b in BYTES {
                if inp.below(2) == 0 {
                    // within the terminal's own block (sometimes anywhere: the lexer must cope)
                    let to = if inp.below(12) == 0 {
                        inp.below(n)
                    } else {
                        1 + t * per + inp.below(per)
                    };
                    table[s * 256 + usize::from(b)] = to as u32;
                }
            }
        }
    }
    let start: Vec<u32> = (0..n_terms).map(|t| (1 + t * per) as u32).collect();
    let greedy: Vec<bool> = (0..n_terms).map(|_| inp.below(2) == 0).collect();
    let ignore: Vec<bool> = (0..n_terms).map(|_| inp.below(5) == 0).collect();
    let Ok(lexer) = Lexer::new(table, accepting, term_of, start, greedy, ignore) else {
        return;
    };
    // up to 3 nonterminals and 5 rules of up to 3 symbols (n >= 0 nonterminal, !t terminal)
    let n_nts = 1 + inp.below(3);
    let n_rules = 1 + inp.below(5);
    let (mut lhs, mut ptr, mut rhs) = (Vec::new(), vec![0i64], Vec::new());
    for _ in 0..n_rules {
        lhs.push(inp.below(n_nts) as i64);
        for _ in 0..inp.below(4) {
            let sym = inp.below(n_nts + n_terms);
            rhs.push(if sym < n_nts {
                sym as i64
            } else {
                !((sym - n_nts) as i64)
            });
        }
        ptr.push(rhs.len() as i64);
    }
    let limits = Limits {
        earley_items_per_set: 200,
        cfg_configs: 64,
        cfg_walk_visits: 500,
        cfg_masks: 1 + inp.below(4),
        cfg_insides: inp.below(3),
        // none, a few walks (let go of as others come), or every walk
        replay_bytes: [0, 256, 1 << 20][inp.below(3)],
        ..Limits::default()
    };
    let Ok(grammar) = Grammar::new(
        n_nts,
        n_terms,
        &lhs,
        &ptr,
        &rhs,
        0,
        limits.earley_items_per_set,
    ) else {
        return;
    };
    let Ok(engine) = CfgEngine::new(Arc::clone(&vocab), lexer, grammar, limits) else {
        return;
    };
    let cost: Vec<u64> = (0..n_terms + n_nts)
        .map(|_| match inp.below(6) {
            0 => INF,
            c => c as u64 - 1,
        })
        .collect();
    let (tcost, ncost) = cost.split_at(n_terms);
    engine.set_completion_costs(tcost, ncost).unwrap();
    let sym_cost = |s: i32| {
        if s < 0 {
            tcost[!s as usize]
        } else {
            ncost[s as usize]
        }
    };
    let mut state = engine.initial();
    for _ in 0..6 {
        let confs = engine.configurations(&state).unwrap();
        for (i, _) in confs.iter().enumerate() {
            for t in std::iter::once(None).chain((0..n_terms as u32).map(Some)) {
                let Ok(got) = engine.completion(&state, i, t) else {
                    return; // a budget ran out advancing the set
                };
                if let Some((c, syms)) = got {
                    assert!(c < INF);
                    for &s in &syms {
                        assert!(if s < 0 {
                            (!s as usize) < n_terms
                        } else {
                            (s as usize) < n_nts
                        });
                    }
                    let total: u64 = syms.iter().map(|&s| sym_cost(s)).sum();
                    assert_eq!(total, c, "a completion costs what its symbols cost");
                }
            }
        }
        let Ok(words) = engine.mask(&state) else {
            return; // a budget ran out: an error, as documented
        };
        for t in 0..size {
            let legal = words[t / 32] >> (t % 32) & 1 == 1;
            let Ok(next) = engine.advance(&state, t as i64) else {
                return;
            };
            assert_eq!(
                legal,
                next.is_some(),
                "token {t}: mask and advance disagree"
            );
        }
        let token = inp.below(size) as i64;
        match engine.advance(&state, token) {
            Ok(Some(next)) => state = next,
            Ok(None) => {}
            Err(_) => return,
        }
    }
});

/// Arbitrary terminal tables by class (maps, cells and starts sometimes out of range): `combine`
/// refuses them with an error or makes a table the lexer takes.
fn combined_tables(inp: &mut Input<'_>) {
    let n_terms = inp.below(4);
    let mut parts: Vec<([u8; 256], usize, Vec<u8>, Vec<u8>, u32)> = Vec::new();
    for _ in 0..n_terms {
        let width = inp.below(4); // 0 is refused
        let n = inp.below(4); // 0 is refused
        let mut map = [0u8; 256];
        for m in map.iter_mut().take(8) {
            *m = inp.below(width + 1) as u8; // == width is refused
        }
        let cells = n * width + usize::from(inp.below(8) == 0);
        let table: Vec<u8> = (0..cells)
            .flat_map(|i| {
                let to = if i < width {
                    0
                } else {
                    inp.below(n + 1) as u32
                };
                to.to_ne_bytes()
            })
            .collect();
        let accepting: Vec<u8> = (0..n)
            .map(|s| u8::from(s > 0 && inp.below(2) == 0))
            .collect();
        parts.push((map, width, table, accepting, inp.below(n + 1) as u32));
    }
    let terms: Vec<TerminalTable<'_>> = parts
        .iter()
        .map(|(map, width, table, accepting, start)| TerminalTable {
            map,
            width: *width,
            table: NeBytes(table),
            accepting,
            start: *start,
        })
        .collect();
    let Ok(got) = combine(&terms) else {
        return;
    };
    let n = got.accepting.len();
    assert_eq!(got.table.len(), n * got.count);
    let term_of: Vec<u32> = got.term_of.iter().map(|&t| t.max(0) as u32).collect();
    let flags = |_| false;
    let lexer = Lexer::classed(
        got.table,
        &got.map,
        got.accepting.iter().map(|&a| a != 0).collect(),
        term_of,
        got.starts,
        (0..n_terms).map(flags).collect(),
        (0..n_terms).map(flags).collect(),
    );
    assert!(lexer.is_ok(), "{:?}", lexer.err());
}
