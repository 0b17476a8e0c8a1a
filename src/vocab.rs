//! The native vocabulary: every token id's bytes, which ids are normal (neither special, nor empty,
//! nor padding), and the token tries of the byte-class maps in use. Built once per vocabulary and
//! shared (behind an `Arc`) by every grammar compiled against it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::lru::Lru;
use crate::trie::TokenTrie;

/// Token bytes (one flat buffer), the normal ids, the model's vocabulary size, and a bounded cache
/// of token tries by class map.
#[derive(Debug)]
pub struct Vocab {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    normal: Vec<bool>,
    size: usize,
    tries: Mutex<Lru<[u8; 256], Arc<TokenTrie>>>,
    /// the byte trie (every other trie is read off it), kept apart from the LRU
    bytes_trie: Mutex<Option<Arc<TokenTrie>>>,
    /// what the engines share between grammars of this vocabulary, one store per type
    /// ([`Vocab::store`])
    stores: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// entries a store may hold (`Limits.shared_lexer_walks`)
    pub store_entries: usize,
}

/// Tries kept per vocabulary unless the caller says otherwise (`Limits.class_tries_per_vocabulary`).
pub const DEFAULT_TRIES: usize = 8;
/// Entries of each store unless the caller says otherwise (`Limits.shared_lexer_walks`).
pub const DEFAULT_STORE_ENTRIES: usize = 128;

impl Vocab {
    /// A vocabulary of `size` ids whose first `lengths.len()` have the bytes `data` cut at `lengths`.
    ///
    /// Ids in `specials` and tokens with no bytes are never legal; ids from `lengths.len()` to
    /// `size` are padding.
    pub fn new(
        data: Vec<u8>,
        lengths: &[u32],
        specials: &[i64],
        size: usize,
        tries: usize,
        store_entries: usize,
    ) -> Result<Vocab> {
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        offsets.push(0usize);
        let mut acc = 0usize;
        for &n in lengths {
            acc += n as usize;
            offsets.push(acc);
        }
        if acc != data.len() {
            return Err(Error::new(format!(
                "native vocabulary: the token lengths add up to {acc} bytes, but {} were given",
                data.len()
            )));
        }
        if size < lengths.len() {
            return Err(Error::new(format!(
                "native vocabulary: size {size} is smaller than the {} tokens given",
                lengths.len()
            )));
        }
        if size >= u32::MAX as usize {
            return Err(Error::new(format!(
                "native vocabulary: size {size} is too large"
            )));
        }
        let mut normal: Vec<bool> = lengths.iter().map(|&n| n > 0).collect();
        for &s in specials {
            match usize::try_from(s) {
                Ok(s) if s < size => {
                    if s < normal.len() {
                        normal[s] = false;
                    }
                }
                _ => {
                    return Err(Error::new(format!(
                        "native vocabulary: special token id {s} is outside the vocabulary (size {size})"
                    )))
                }
            }
        }
        Ok(Vocab {
            bytes: data,
            offsets,
            normal,
            size,
            tries: Mutex::new(Lru::new(tries.max(1))),
            bytes_trie: Mutex::new(None),
            stores: Mutex::new(HashMap::new()),
            store_entries,
        })
    }

    /// A vocabulary from one byte string per id (tests and tools).
    pub fn from_tokens(tokens: Vec<Vec<u8>>, specials: &[i64], size: usize) -> Result<Vocab> {
        let lengths: Vec<u32> = tokens.iter().map(|t| t.len() as u32).collect();
        Vocab::new(
            tokens.concat(),
            &lengths,
            specials,
            size,
            DEFAULT_TRIES,
            DEFAULT_STORE_ENTRIES,
        )
    }

    /// The model's vocabulary size (padding included).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Words in a packed mask: `ceil(size / 32)`.
    pub fn n_words(&self) -> usize {
        self.size.div_ceil(32)
    }

    /// Number of ids that have bytes (the tokenizer's tokens; the rest is padding).
    pub fn n_tokens(&self) -> usize {
        self.normal.len()
    }

    /// Every token's bytes, one after another.
    pub fn flat_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where token `t`'s bytes lie in [`Vocab::flat_bytes`] (`t < n_tokens()`).
    #[inline]
    pub fn span(&self, t: usize) -> Range<usize> {
        self.offsets[t]..self.offsets[t + 1]
    }

    /// The bytes of a normal token, None for special, empty, padding or out-of-range ids.
    #[inline]
    pub fn normal_bytes(&self, t: i64) -> Option<&[u8]> {
        let t = usize::try_from(t).ok()?;
        if *self.normal.get(t)? {
            Some(&self.bytes[self.span(t)])
        } else {
            None
        }
    }

    /// The ids of the normal tokens, ascending.
    pub fn normal_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.normal
            .iter()
            .enumerate()
            .filter(|(_, &n)| n)
            .map(|(t, _)| t as u32)
    }

    /// The token trie under the byte -> class map `map` (built once, then cached while in use): the
    /// byte trie is built once per vocabulary and kept; a class trie is read off it
    /// ([`TokenTrie::coarsen`]: tekken, 131k tokens, in a few ms instead of sorting them again).
    pub fn trie(&self, map: &[u8; 256]) -> Arc<TokenTrie> {
        let bytes = self.bytes_trie();
        if *map == crate::classes::ByteClasses::identity().map {
            return bytes;
        }
        if let Some(hit) = lock(&self.tries).get(map) {
            return Arc::clone(hit);
        }
        let trie = Arc::new(bytes.coarsen(map)); // outside the lock: a race builds a spare
        lock(&self.tries).put(*map, Arc::clone(&trie));
        trie
    }

    /// Nodes of the byte trie, which this builds if it is not yet (a vocabulary's preprocessing:
    /// every grammar's trie is it or read off it).
    pub fn byte_trie_nodes(&self) -> usize {
        self.bytes_trie().n_nodes()
    }

    /// The byte trie (built on first use).
    fn bytes_trie(&self) -> Arc<TokenTrie> {
        if let Some(t) = lock(&self.bytes_trie).as_ref() {
            return Arc::clone(t);
        }
        let identity = crate::classes::ByteClasses::identity().map;
        let made = Arc::new(TokenTrie::build(self, &identity)); // outside the lock, as above
        Arc::clone(lock(&self.bytes_trie).get_or_insert(made))
    }

    /// Drop the cached class tries (benchmarks measure a compile that builds its own); the byte
    /// trie, built once per vocabulary like the Python engine's `Vocabulary.trie`, is kept.
    pub fn clear_tries(&self) {
        let limit = lock(&self.tries).limit();
        *lock(&self.tries) = Lru::new(limit);
    }

    /// Drop every store (benchmarks measure a grammar that makes what it shares itself); the next
    /// grammar makes them again.
    pub fn clear_stores(&self) {
        lock(&self.stores).clear();
    }

    /// The store of type `T` every grammar of this vocabulary shares (made by `make` on first use,
    /// bounded by itself to [`Vocab::store_entries`], and kept with the vocabulary).
    pub fn store<T: Send + Sync + 'static>(&self, make: impl Fn(usize) -> T) -> Arc<T> {
        let any = Arc::clone(
            lock(&self.stores)
                .entry(TypeId::of::<T>())
                .or_insert_with(|| Arc::new(make(self.store_entries))),
        );
        // the entry of `T`'s type id holds a `T`: the fallback is never taken
        any.downcast::<T>()
            .unwrap_or_else(|_| Arc::new(make(self.store_entries)))
    }

    /// Tries held in the cache.
    pub fn tries_cached(&self) -> usize {
        lock(&self.tries).len()
    }
}

/// The mutex's data even if a panic poisoned it (the caches stay consistent: a panic cannot
/// interrupt a `get` or `put` half way through a state it would leave broken for readers).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::Vocab;

    #[test]
    fn specials_empty_and_padding_are_not_normal() {
        let v =
            Vocab::from_tokens(vec![b"".to_vec(), b"a".to_vec(), b"b".to_vec()], &[2], 40).unwrap();
        assert_eq!(v.normal_ids().collect::<Vec<_>>(), vec![1]);
        assert_eq!(v.normal_bytes(1), Some(&b"a"[..]));
        assert_eq!(v.normal_bytes(2), None);
        assert_eq!(v.normal_bytes(3), None);
        assert_eq!(v.normal_bytes(-1), None);
        assert_eq!(v.n_words(), 2);
    }

    #[test]
    fn refuses_inconsistent_input() {
        assert!(Vocab::new(b"abc".to_vec(), &[1, 1], &[], 2, 1, 1).is_err());
        assert!(Vocab::new(b"ab".to_vec(), &[1, 1], &[], 1, 1, 1).is_err());
        assert!(Vocab::new(b"ab".to_vec(), &[1, 1], &[5], 2, 1, 1).is_err());
        assert!(Vocab::new(b"ab".to_vec(), &[1, 1], &[-1], 2, 1, 1).is_err());
    }

    #[test]
    fn tries_are_cached_and_bounded() {
        let v = Vocab::new(b"ab".to_vec(), &[1, 1], &[], 2, 1, 1).unwrap();
        let id = crate::classes::ByteClasses::identity().map;
        let a = v.trie(&id);
        assert!(std::sync::Arc::ptr_eq(&a, &v.trie(&id)));
        v.trie(&[0u8; 256]);
        assert_eq!(v.tries_cached(), 1);
        v.clear_tries();
        assert_eq!(v.tries_cached(), 0);
    }
}
