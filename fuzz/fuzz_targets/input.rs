//! The fuzzer's bytes read as small numbers (0 once they run out), shared by the targets.

pub struct Input<'a>(std::slice::Iter<'a, u8>);

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input(data.iter())
    }
    pub fn byte(&mut self) -> u8 {
        self.0.next().copied().unwrap_or(0)
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }
}
