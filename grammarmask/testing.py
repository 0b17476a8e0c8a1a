"""Test helpers: the brute-force reference mask, and assertions users call on their own grammars.

The oracle is deliberately simple: a token is legal iff the output with the token's bytes appended is
still a prefix of some sentence, decided by a checker the caller trusts (``re``/``regex`` partial
matching, lark, a set of labels). Viability is prefix-closed (if ``w`` is not a viable prefix no
extension of it is), so the oracle may skip a subtree of the token trie once its root fails; it still
asks the checker about every token whose every prefix is viable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .errors import TokenRejected
from .grammar import CompiledGrammar, Grammar, Matcher
from .mask import Mask
from .vocab import Vocabulary

__all__ = [
    "assert_accepts",
    "assert_mask_exact",
    "assert_rejects",
    "reference_mask",
]

Viable = Callable[[bytes], bool]


def reference_mask(
    is_viable_prefix: Viable,
    vocab: Vocabulary,
    prefix: bytes,
    *,
    is_complete: Callable[[bytes], bool] | None = None,
) -> Mask:
    """The exact mask by brute force.

    Token ``t`` is legal iff ``is_viable_prefix(prefix + bytes(t))``; EOS is legal iff
    ``is_complete(prefix)`` (when given). Special and padding ids are never legal.
    """
    trie = vocab.trie
    legal = np.zeros(vocab.size, dtype=bool)
    stack = [(0, prefix)]
    while stack:
        node, text = stack.pop()
        for child in range(int(trie.child_lo[node]), int(trie.child_hi[node])):
            t = text + bytes([int(trie.byte[child])])
            if not is_viable_prefix(t):
                continue
            legal[trie.tokens[trie.tok_lo[child] : trie.tok_hi[child]]] = True
            stack.append((child, t))
    if is_complete is not None and is_complete(prefix):
        legal[vocab.eos_token_id] = True
    return Mask.from_bool(legal)


def _compiled(grammar: Grammar | CompiledGrammar, vocab: Vocabulary | None) -> CompiledGrammar:
    if isinstance(grammar, CompiledGrammar):
        return grammar
    if vocab is None:
        vocab = byte_vocabulary()
    return grammar.compile(vocab)


def byte_vocabulary(extra: Iterable[bytes] = ()) -> Vocabulary:
    """A toy vocabulary: EOS (id 0), the 256 single bytes, then ``extra`` multi-byte tokens."""
    tokens = [b""] + [bytes([b]) for b in range(256)] + list(extra)
    return Vocabulary.from_tokens(tokens, eos_token_id=0)


def _feed_bytes(m: Matcher, data: bytes) -> None:
    tb = m.vocab.token_bytes
    single = {b: i for i, b in enumerate(tb) if len(b) == 1}
    for byte in data:
        m.advance(single[bytes([byte])])


def assert_accepts(
    grammar: Grammar | CompiledGrammar, text: str | bytes, vocab: Vocabulary | None = None
) -> None:
    """Fail unless ``text`` is a complete sentence: fed byte by byte, every byte is legal and EOS is."""
    data = text.encode() if isinstance(text, str) else text
    m = _compiled(grammar, vocab).matcher()
    try:
        _feed_bytes(m, data)
    except TokenRejected as e:
        n = m.num_tokens
        raise AssertionError(f"rejected at byte {n} ({data[:n]!r} | {data[n : n + 20]!r}): {e}") from None
    if not m.is_accepting():
        raise AssertionError(f"{data!r} is only a prefix of the language, not a complete sentence")


def assert_rejects(
    grammar: Grammar | CompiledGrammar, text: str | bytes, vocab: Vocabulary | None = None
) -> None:
    """Fail if ``text`` is a complete sentence of the grammar."""
    data = text.encode() if isinstance(text, str) else text
    m = _compiled(grammar, vocab).matcher()
    try:
        _feed_bytes(m, data)
    except TokenRejected:
        return
    if m.is_accepting():
        raise AssertionError(f"{data!r} was accepted")


def assert_mask_exact(
    compiled: CompiledGrammar,
    token_ids: Iterable[int],
    is_viable_prefix: Viable,
    is_complete: Callable[[bytes], bool],
) -> None:
    """Walk ``token_ids`` and check the mask against :func:`reference_mask` before every step."""
    m = compiled.matcher()
    vocab = compiled.vocab
    out = b""
    for t in [*token_ids, None]:
        want = reference_mask(is_viable_prefix, vocab, out, is_complete=is_complete)
        got = m.mask()
        if got != want:
            extra = (got - want).token_ids()[:5].tolist()
            missing = (want - got).token_ids()[:5].tolist()
            raise AssertionError(
                f"mask differs from the oracle after {out!r}: "
                f"wrongly legal {extra}, wrongly illegal {missing}"
            )
        if t is None:
            break
        m.advance(t)
        out += vocab.token_bytes[t]
