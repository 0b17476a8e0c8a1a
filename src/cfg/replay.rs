//! Masks known by the parser's answers: a mask walk's questions to the parser and their answers,
//! kept with the mask they led to, and asked again of a new state.
//!
//! A mask walk ([`super::walk::Walk::mask`]) reads the Earley sets only through two questions:
//! which set follows a set after a terminal (none, one met before in the walk, or a new one), and
//! which lexer state starts after a set. Everything else it reads (the trie, the lexer, what a
//! lexer state allows by itself) depends on the grammar alone. So the walk is a function of its
//! root's configurations (local set ids, lexer states) and of the answers: a state whose root
//! looks the same and whose sets answer the questions one walk asked as they answered it has that
//! walk's mask (the walk, run on it, would ask the same questions in the same order, get the same
//! answers, and mark the same tokens). Asking them costs the Earley work alone, not the walk over
//! the trie: lark's JSON grammar asks ~30 questions of a state whose walk passes ~1,000 trie
//! nodes, and of its 674 masks on the harness's documents, 560 were walks already made from
//! another state (deeper in the nesting, or after another key).
//!
//! The walks made from one root are kept as a decision tree ([`Tree`]): a node holds a question,
//! its children are reached by the answers met, and a leaf holds a mask. Finding a mask asks one
//! question per level, however many walks the tree holds. Only questions a walk asked afresh are
//! kept (its answers to questions asked before are its own memo), so a replay asks them of a
//! fresh walk. A mask walk that follows a replay that found nothing goes on in the replay's walk:
//! its trace begins with the replay's questions, which, asked first of a fresh walk, leave its
//! memos as they left the replay's.

use std::sync::Arc;

use super::walk::{WConf, Walk};
use super::CfgError;
use crate::lru::Lru;
use crate::packed::Packed;

/// A question a mask walk asks the parser: the set after local set `.0` closes terminal `.1`
/// ([`Walk::advance`]), or the lexer state at a boundary after local set `.0` with shadow `.1`
/// ([`Walk::fresh_lex`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ask {
    Advance(u32, u32),
    Fresh(u32, u32),
}

impl Ask {
    /// The answer `w` gives (a local set id or [`super::lexer::NONE`]; a lexer state id), or None
    /// when the question names a set `w` has not met (a replay that has already parted ways).
    fn of(self, w: &mut Walk<'_>) -> Result<Option<u32>, CfgError> {
        let (Ask::Advance(s, _) | Ask::Fresh(s, _)) = self;
        if s as usize >= w.sets.len() {
            return Ok(None);
        }
        Ok(Some(match self {
            Ask::Advance(s, t) => w.advance(s, t)?,
            Ask::Fresh(s, sh) => w.fresh_lex(s, sh),
        }))
    }
}

#[derive(Debug)]
enum Node {
    /// a question, and the node each answer met leads to
    Ask(Ask, Vec<(u32, u32)>),
    /// the mask of the walk that got here
    Leaf(Arc<Packed>),
}

/// The walks made from one root, by their questions and answers.
#[derive(Debug, Default)]
struct Tree {
    /// node 0 is the first question (or the leaf of a walk that asked none)
    nodes: Vec<Node>,
    /// bytes held, about (a node's, and its leaf's mask)
    bytes: usize,
}

/// Bytes a node holds, about (itself, its answers' vector, the allocator's share).
const NODE_BYTES: usize = 64;

impl Tree {
    /// The mask of a walk this tree holds whose every question `w` answers as it did.
    fn replay(&self, w: &mut Walk<'_>) -> Result<Option<Arc<Packed>>, CfgError> {
        let mut at = 0;
        loop {
            match self.nodes.get(at) {
                None => return Ok(None),
                Some(Node::Leaf(mask)) => return Ok(Some(Arc::clone(mask))),
                Some(Node::Ask(ask, next)) => {
                    let Some(answer) = ask.of(w)? else {
                        return Ok(None);
                    };
                    match next.iter().find(|&&(a, _)| a == answer) {
                        Some(&(_, child)) => at = child as usize,
                        None => return Ok(None),
                    }
                }
            }
        }
    }

    /// Keep the walk that asked `trace` (questions with their answers, in order) and made `mask`.
    /// A walk that parts from the tree's at a question rather than an answer
    /// (one lexer state's [`super::inside::Kept`] made anew another way) is not kept.
    fn insert(&mut self, trace: &[(Ask, u32)], mask: &Arc<Packed>) {
        let before = self.nodes.len();
        let mut at = 0;
        let mut i = 0;
        // down the path the trace shares with the tree
        while at < self.nodes.len() {
            match &self.nodes[at] {
                Node::Leaf(_) => return, // the same walk (a trace that ends here)
                Node::Ask(ask, next) => {
                    let Some(&(asked, answer)) = trace.get(i) else {
                        return;
                    };
                    if *ask != asked {
                        return;
                    }
                    match next.iter().find(|&&(a, _)| a == answer) {
                        Some(&(_, child)) => {
                            at = child as usize;
                            i += 1;
                        }
                        None => {
                            let child = self.nodes.len() as u32;
                            if let Node::Ask(_, next) = &mut self.nodes[at] {
                                next.push((answer, child));
                            }
                            at = child as usize;
                            i += 1;
                            break;
                        }
                    }
                }
            }
        }
        // the rest of the trace, a new branch (from node `at`, the next one made)
        debug_assert_eq!(at, self.nodes.len());
        for &(asked, answer) in &trace[i..] {
            let child = self.nodes.len() as u32 + 1;
            self.nodes.push(Node::Ask(asked, vec![(answer, child)]));
        }
        self.nodes.push(Node::Leaf(Arc::clone(mask)));
        self.bytes += (self.nodes.len() - before) * NODE_BYTES + mask.bytes();
    }
}

/// The trees of a grammar's mask walks, by root: at most `limit` bytes in all (the trees used
/// least recently are let go first).
#[derive(Debug)]
pub struct Replays {
    trees: Lru<Vec<WConf>, Tree>,
    bytes: usize,
    limit: usize,
    /// masks found by a replay, and masks walked (for tests and diagnostics)
    pub hits: usize,
    pub walks: usize,
}

impl Replays {
    /// Trees of at most `limit` bytes in all (0: none kept).
    pub fn new(limit: usize) -> Self {
        Replays {
            trees: Lru::new(usize::MAX),
            bytes: 0,
            limit,
            hits: 0,
            walks: 0,
        }
    }

    /// The mask of a walk kept from `root` whose questions `w` answers as that walk's sets did
    /// (`w`: fresh, its root `root`).
    pub fn find(
        &mut self,
        w: &mut Walk<'_>,
        root: &[WConf],
    ) -> Result<Option<Arc<Packed>>, CfgError> {
        let Some(tree) = self.trees.get(&root.to_vec()) else {
            return Ok(None);
        };
        let found = tree.replay(w)?;
        self.hits += usize::from(found.is_some());
        Ok(found)
    }

    /// Keep the walk from `root` that asked `trace` afresh and made `mask`.
    pub fn keep(&mut self, root: &[WConf], trace: &[(Ask, u32)], mask: &Arc<Packed>) {
        self.walks += 1;
        if (trace.len() + 1) * NODE_BYTES + mask.bytes() > self.limit {
            return;
        }
        let key = root.to_vec();
        let mut tree = self.trees.take(&key).unwrap_or_default();
        self.bytes -= tree.bytes;
        tree.insert(trace, mask);
        self.bytes += tree.bytes;
        self.trees.put(key, tree);
        while self.bytes > self.limit {
            match self.trees.pop_oldest() {
                Some(old) => self.bytes -= old.bytes,
                None => break,
            }
        }
    }
}
