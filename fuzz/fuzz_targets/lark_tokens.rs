//! The tokens of arbitrary Lark grammar text: cut whole or refused, never a panic. Tokens lie end to
//! end over the text, none empty; a refusal says where no token matches, or that `re` must decide.
#![no_main]

use _engine::lark_tokens::{tokens, Stop};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let n = text.chars().count();
    match tokens(&text) {
        Ok(toks) => {
            let mut at = 0;
            for t in &toks {
                assert!(t.start == at && t.end > t.start && t.end <= n);
                at = t.end;
            }
            assert_eq!(at, n);
        }
        Err(Stop::NoToken(at)) => assert!(at < n),
        Err(Stop::Unicode) => assert!(!text.is_ascii()),
    }
});
