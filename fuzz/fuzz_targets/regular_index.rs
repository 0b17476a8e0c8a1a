//! The regular index on an arbitrary small vocabulary and automaton: construction refuses bad
//! tables with an error (never a panic), and along an arbitrary token stream every mask, next state
//! and forced byte run agrees with running the automaton over each token's bytes.
#![no_main]

use std::sync::Arc;

use _engine::regular::{Dfa, RegularIndex};
use _engine::vocab::Vocab;
use libfuzzer_sys::fuzz_target;

#[path = "input.rs"]
mod input;
use input::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    // a vocabulary of up to 24 tokens over the bytes a..d (and one other byte), some special
    let n_tokens = 1 + inp.below(24);
    let tokens: Vec<Vec<u8>> = (0..n_tokens)
        .map(|_| {
            (0..inp.below(5))
                .map(|_| b"abcd\xc3"[inp.below(5)])
                .collect()
        })
        .collect();
    let specials: Vec<i64> = (0..inp.below(3))
        .map(|_| inp.below(n_tokens) as i64)
        .collect();
    let size = n_tokens + inp.below(40);
    let Ok(vocab) = Vocab::from_tokens(tokens.clone(), &specials, size) else {
        return;
    };
    let vocab = Arc::new(vocab);
    // an automaton of up to 6 states; row 0 is usually dead, and bad tables must be refused
    let n = 1 + inp.below(6);
    let mut table = vec![0u32; n * 256];
    for s in 0..n {
        for b in [b'a', b'b', b'c', b'd', 0xc3] {
            if s > 0 || inp.below(16) == 0 {
                let range = n + usize::from(inp.below(8) == 0); // sometimes one past the end
                table[s * 256 + usize::from(b)] = inp.below(range) as u32;
            }
        }
    }
    let accepting: Vec<bool> = (0..n)
        .map(|s| (s > 0 || inp.below(16) == 0) && inp.below(2) == 1)
        .collect();
    let start = inp.below(n + 1);
    let Ok(dfa) = Dfa::new(table, accepting, start) else {
        return;
    };
    let index = RegularIndex::new(Arc::clone(&vocab), dfa, 1 + inp.below(3));
    let run = |mut s: u32, bytes: &[u8]| {
        for &b in bytes {
            s = index.dfa().run(s, &[b]);
        }
        s
    };
    let mut state = i64::from(index.dfa().start());
    for _ in 0..8 {
        let words = index.mask(state).expect("a state the index gave out");
        for t in 0..size {
            let legal = words[t / 32] >> (t % 32) & 1 == 1;
            let want = match vocab.normal_bytes(t as i64) {
                Some(b) if state != 0 => run(state as u32, b) != 0,
                _ => false,
            };
            assert_eq!(legal, want, "token {t} in state {state}");
        }
        let forced = index.forced_bytes(state).expect("forced bytes");
        if !forced.is_empty() {
            assert_ne!(
                run(state as u32, &forced),
                0,
                "forced bytes lead to the dead state"
            );
        }
        let token = inp.below(size + 2) as i64 - 1; // -1 and size: out of range, never legal
        let next = index.next_state(state, token).expect("next state");
        let legal = token >= 0
            && (token as usize) < size
            && words[token as usize / 32] >> (token % 32) & 1 == 1;
        assert_eq!(next != 0, legal, "token {token} in state {state}");
        if next != 0 {
            state = i64::from(next);
        }
    }
    assert!(index.mask(-1).is_err() && index.mask(index.dfa().n_states() as i64).is_err());
});
