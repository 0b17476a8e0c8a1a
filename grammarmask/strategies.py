"""Hypothesis strategies for any grammar: valid documents, viable prefixes and legal token paths.

:func:`from_grammar` draws documents by *derivation from the grammar's IR*
(:mod:`grammarmask.derivation`): a context-free grammar (Lark, GBNF, JSON Schema) is expanded rule by
rule, a regular one (Regex, Choice, their compositions) walked through its DFA, both steered by each
rule's and state's shortest completion so that every draw ends within ``max_size`` bytes. Every
drawn document is checked with the compiled matcher, the exact recognizer. Hypothesis shrinks a
failure toward short, whitespace- and comment-free documents of plain bytes.

Grammars with no such IR (an intersection ``a & b`` of two context-free grammars, a multi-label
``Choice``, a grammar already compiled) fall back to a walk of the grammar's own byte mask, which
steers to completion once ``max_size`` bytes are out (forced bytes, a short breadth-first search,
then a greedy walk to the most constrained state) and discards walks that find none.

Examples
--------
>>> import re
>>> import grammarmask as gm
>>> from hypothesis import given
>>> from grammarmask.strategies import from_grammar
>>> @given(from_grammar(gm.Regex(r"[a-z]+(,[a-z]+)*")))
... def test_csv_words(doc):
...     assert re.fullmatch(r"[a-z]+(,[a-z]+)*", doc)
>>> test_csv_words()
"""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import assume
from hypothesis import strategies as st

from .errors import GrammarError, NoLegalContinuation
from .grammar import CompiledGrammar, Grammar, Matcher
from .testing import byte_vocabulary
from .vocab import Vocabulary

__all__ = ["byte_vocab", "from_grammar", "prefixes", "token_paths"]

_EOS = 0  # byte_vocabulary(): EOS is id 0 and byte b is id b + 1
# bytes that often close a construct: tried first when steering toward completion
_CLOSERS = b"\"')]}>\n;,."


@functools.lru_cache(maxsize=1)
def byte_vocab() -> Vocabulary:
    """The shared byte-level vocabulary the strategies compile grammars against (EOS = id 0)."""
    return byte_vocabulary()


def _compile(grammar: Grammar | CompiledGrammar) -> CompiledGrammar:
    if isinstance(grammar, CompiledGrammar):
        tb = grammar.vocab.token_bytes
        if (
            len(tb) < 257
            or grammar.vocab.eos_token_id != _EOS
            or any(tb[b + 1] != bytes([b]) for b in range(256))
        ):
            raise GrammarError("from_grammar/prefixes need a Grammar, or one compiled on byte_vocab()")
        return grammar
    if not isinstance(grammar, Grammar):
        raise GrammarError(f"expected a grammarmask Grammar, got {type(grammar).__name__}")
    return grammar.compile(byte_vocab())


def _legal_bytes(m: Matcher) -> list[int]:
    if m.is_finished():
        return []
    m.mask()  # raises NoLegalContinuation at an intersection's dead end
    return _legal_of(m.compiled, m.state)


def _byte_bits(compiled: CompiledGrammar, state: Any) -> npt.NDArray[np.uint8]:
    """Bit ``b`` set iff byte ``b`` is legal in ``state`` (byte vocabulary: byte ``b`` is id ``b + 1``)."""
    words = compiled.state_mask_words(state)
    return np.unpackbits(words.view(np.uint8), bitorder="little")[1:257]


def _legal_of(compiled: CompiledGrammar, state: Any) -> list[int]:
    return np.flatnonzero(_byte_bits(compiled, state)).tolist()  # type: ignore[no-any-return]


def _finish(compiled: CompiledGrammar, state: Any, budget: int) -> bytes | None:
    """A short byte string taking ``state`` to a complete sentence, or None.

    First a breadth-first search over states (a small share of ``budget`` steps; closing punctuation
    tried first) finds very short completions; then a greedy "most constrained next" walk: at each
    step take a byte whose next state is complete, else the one leaving the fewest legal bytes,
    never revisiting a state (this closes strings, brackets and keywords)."""
    if compiled.is_accepting_state(state):
        return b""
    found = _bfs_finish(compiled, state, min(budget, 500))
    if found is not None:
        return found
    out = bytearray()
    seen: set[Any] = set()
    s = state
    tried = 0
    while not compiled.is_accepting_state(s):
        if len(out) > 256:
            return None
        forced = compiled.forced_bytes(s)
        cands = [forced[0]] if forced else _legal_of(compiled, s)
        best: tuple[int, int, Any] | None = None
        for b in cands:
            tried += 1
            if tried > budget:
                return None
            n = compiled.advance_state(s, b + 1)
            if n is None or _seen(seen, n):
                continue
            if compiled.is_accepting_state(n):
                best = (-1, b, n)
                break
            width = int(np.count_nonzero(_byte_bits(compiled, n)))
            if width and (best is None or width < best[0]):
                best = (width, b, n)
        if best is None:
            return None
        _, b, s = best
        _seen(seen, s, add=True)
        out.append(b)
    return bytes(out)


def _seen(seen: set[Any], state: Any, add: bool = False) -> bool:
    try:
        if add:
            seen.add(state)
        return state in seen
    except TypeError:  # an unhashable state
        return False


def _bfs_finish(compiled: CompiledGrammar, state: Any, budget: int) -> bytes | None:
    seen = {state}
    queue: deque[tuple[Any, bytes]] = deque([(state, b"")])
    tried = 0
    while queue:
        s, path = queue.popleft()
        forced = compiled.forced_bytes(s)
        if forced:
            cands = [forced[0]]
        else:
            legal = _legal_of(compiled, s)
            cands = [b for b in _CLOSERS if b in legal] + [b for b in legal if b not in _CLOSERS]
        for b in cands:
            tried += 1
            if tried > budget:
                return None
            n = compiled.advance_state(s, b + 1)
            if n is None:
                continue
            if compiled.is_accepting_state(n):
                return path + bytes([b])
            if not _seen(seen, n):
                _seen(seen, n, add=True)
                queue.append((n, path + bytes([b])))
    return None


@st.composite
def _derived(draw: Any, grammar: Grammar, max_size: int, encoding: str | None) -> Any:
    from .derivation import generator_for

    gen = generator_for(grammar)
    assert gen is not None
    got = gen.draw(draw, max_size, text=encoding is not None)
    assume(got is not None)  # rare: several draws in a row lexed differently (see derivation)
    assert got is not None
    if encoding is None:
        return got.data
    try:
        return got.data.decode(encoding)
    except UnicodeDecodeError:
        assume(False)
        raise AssertionError("unreachable") from None


@st.composite
def _walked(
    draw: Any, compiled: CompiledGrammar, max_size: int, encoding: str | None, finish_budget: int
) -> Any:
    m = compiled.matcher()
    out = bytearray()
    while True:
        if m.is_accepting():
            if len(out) >= max_size or not draw(st.booleans()):
                break
        elif len(out) >= max_size:
            rest = _finish(compiled, m.state, finish_budget)
            assume(rest is not None)  # no short completion found: hypothesis draws another walk
            out += rest or b""
            break
        try:
            legal = _legal_bytes(m)
        except NoLegalContinuation:
            assume(False)  # an intersection dead-ended: not a document
        if not legal:
            break
        b = legal[draw(st.integers(0, len(legal) - 1))]
        m.advance(b + 1)
        out.append(b)
    data = bytes(out)
    if encoding is None:
        return data
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        assume(False)
        raise AssertionError("unreachable") from None


def from_grammar(
    grammar: Grammar | CompiledGrammar,
    *,
    max_size: int = 32,
    encoding: str | None = "utf-8",
    finish_budget: int = 4_000,
) -> st.SearchStrategy[Any]:
    """Complete sentences of ``grammar`` (any backend), as ``str`` (or ``bytes`` with ``encoding=None``).

    Parameters
    ----------
    max_size
        The most bytes a document has. Derivations are steered by each rule's shortest completion,
        so every draw fits; when the grammar's shortest document is longer than ``max_size`` (a
        schema with many required keys), documents are as short as the grammar allows instead.
        Larger values give longer, more deeply nested documents; shrinking still goes to the shortest.
    encoding
        Decode documents with this codec (None: return ``bytes``). Draws that are not valid in it
        are drawn again.
    finish_budget
        Search steps the mask walk (used only for grammars without a derivable IR, see the module
        docstring) spends looking for a completion before it discards the walk.

    Raises
    ------
    GrammarError
        ``grammar`` is not a Grammar, or is compiled on another vocabulary than :func:`byte_vocab`;
        ``max_size`` is not an integer >= 0.

    Examples
    --------
    >>> import json
    >>> from hypothesis import given
    >>> import grammarmask as gm
    >>> from grammarmask.strategies import from_grammar
    >>> json_like = gm.Lark.from_file("grammars/json.lark")    # doctest: +SKIP
    >>> @given(from_grammar(json_like, max_size=40))            # doctest: +SKIP
    ... def test_parses(doc):
    ...     json.loads(doc)
    """
    if not isinstance(max_size, int) or max_size < 0:
        raise GrammarError(f"max_size must be an integer >= 0, got {max_size!r}")
    if isinstance(grammar, Grammar):
        from .derivation import generator_for

        if generator_for(grammar) is not None:
            return _derived(grammar, max_size, encoding)
    return _walked(_compile(grammar), max_size, encoding, finish_budget)


@st.composite
def _prefixes(draw: Any, compiled: CompiledGrammar, max_size: int) -> bytes:
    m = compiled.matcher()
    out = bytearray()
    while len(out) < max_size and draw(st.booleans()):
        try:
            legal = _legal_bytes(m)
        except NoLegalContinuation:
            break
        if not legal:
            break
        b = legal[draw(st.integers(0, len(legal) - 1))]
        m.advance(b + 1)
        out.append(b)
    return bytes(out)


def prefixes(grammar: Grammar | CompiledGrammar, *, max_size: int = 32) -> st.SearchStrategy[bytes]:
    """Viable prefixes of ``grammar`` (bytes that some sentence starts with), up to ``max_size`` bytes.

    Shrinks toward ``b""``. Useful to test a mask at arbitrary points of a document::

        @given(prefixes(g))
        def test_mask_exact(prefix): ...
    """
    if not isinstance(max_size, int) or max_size < 0:
        raise GrammarError(f"max_size must be an integer >= 0, got {max_size!r}")
    return _prefixes(_compile(grammar), max_size)


@st.composite
def _token_paths(draw: Any, compiled: CompiledGrammar, max_tokens: int, allow_eos: bool) -> list[int]:
    m = compiled.matcher()
    eos = compiled.vocab.eos_token_id
    path: list[int] = []
    while len(path) < max_tokens and not m.is_finished():
        try:
            ids = m.mask().token_ids().tolist()
        except NoLegalContinuation:
            break
        if eos in ids:
            ids.remove(eos)
            if allow_eos:
                ids.insert(0, eos)
        if not ids:
            break
        t = ids[draw(st.integers(0, len(ids) - 1))]
        m.advance(t)
        path.append(t)
    return path


def token_paths(
    compiled: CompiledGrammar, *, max_tokens: int = 16, allow_eos: bool = True
) -> st.SearchStrategy[list[int]]:
    """Legal token-id sequences through ``compiled``'s mask (a real vocabulary), up to ``max_tokens``.

    Each token is drawn from the mask before it, so every path is accepted by a fresh matcher; EOS
    (when ``allow_eos``) is the first choice wherever it is legal and ends the path. A path stops
    early where nothing is legal (an intersection's dead end).

    Examples
    --------
    >>> from hypothesis import given
    >>> import grammarmask as gm
    >>> from grammarmask.strategies import token_paths
    >>> vocab = gm.Vocabulary.from_tokens([b"", b"a", b"b", b"ab"], eos_token_id=0)
    >>> compiled = gm.Choice(["ab", "ba"]).compile(vocab)       # doctest: +SKIP
    >>> @given(token_paths(compiled))                           # doctest: +SKIP
    ... def test_rollback(path): ...
    """
    if not isinstance(compiled, CompiledGrammar):
        raise GrammarError(f"token_paths needs a CompiledGrammar, got {type(compiled).__name__}")
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise GrammarError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    return _token_paths(compiled, max_tokens, allow_eos)
