//! The engine's one error type. The bindings turn it into grammarmask's documented Python errors
//! (`GrammarError` for unusable input); a panic never crosses into Python (see `python.rs`).

use std::fmt;

/// Input the engine cannot use: a malformed table, an out-of-range state, a bad vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The engine's results.
pub type Result<T> = std::result::Result<T, Error>;
