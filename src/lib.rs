//! grammarmask's native engine. Exposed to Python as `grammarmask._engine` (with the `python`
//! feature, which maturin turns on); the pure-Python engine is its executable specification.
//!
//! One job per module: [`automata`] the compile-time automata (minimisation, products, string
//! sets), [`vocab`] the token bytes of a vocabulary, [`trie`] the token trie,
//! [`classes`] an automaton's byte classes, [`packed`] a token set in the memory it needs,
//! [`regular`] the regular index, [`cfg`] the CFG engine, [`lark_tokens`] the tokens of Lark
//! grammar text, [`lru`] the bounded cache, [`error`] the error type, and `python` the bindings.

pub mod automata;
pub mod cfg;
pub mod classes;
pub mod error;
pub mod lark_tokens;
pub mod lru;
pub mod packed;
pub mod regular;
pub mod trie;
pub mod vocab;

#[cfg(feature = "python")]
mod python;
#[cfg(test)]
mod test_rng;
