//! A fixed stream of pseudo-random numbers for the crate's property tests (xorshift64).

pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    /// `n` draws of 1 to `most` of `pieces` each, sorted with duplicates merged: a vocabulary's
    /// tokens for the property tests.
    pub fn tokens(&mut self, n: usize, pieces: &[&[u8]], most: usize) -> Vec<Vec<u8>> {
        let mut toks: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                (0..1 + self.below(most))
                    .flat_map(|_| pieces[self.below(pieces.len())].to_vec())
                    .collect()
            })
            .collect();
        toks.sort();
        toks.dedup();
        toks
    }
}
