"""The three stages: a tokenizer-free :class:`Grammar`, a vocabulary-bound :class:`CompiledGrammar`, and
a per-sequence :class:`Matcher`.

A backend implements two things. Its ``Grammar`` subclass turns its input into a
``CompiledGrammar`` in ``_compile(vocab)``; its ``CompiledGrammar`` subclass answers four questions
about an immutable state value:

- ``initial_state()``: the state before any output;
- ``state_mask_words(state)``: packed uint32 words of the legal non-EOS tokens (may be cached; never
  mutated by callers);
- ``advance_state(state, token_id)``: the next state, or ``None`` if the token is illegal;
- ``is_accepting_state(state)``: whether the output so far is in the language (so EOS is legal).

An engine may also answer ``state_row(state)``, the mask, whether it allows any token and whether the
state accepts, in one call (the default asks the four methods and scans the row); masks of a batch
are filled through it.

Because states are immutable values, the generic :class:`Matcher` keeps a stack of them: ``fork`` and
``rollback`` are cheap and a rejected token leaves nothing to undo.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import as_int
from .cache import Lru, per_vocabulary, table_bytes
from .compile_cache import compile_through
from .engine import in_use as engine_in_use
from .engine import native_cfg
from .engine import resolve as resolve_engine
from .errors import GrammarError, GrammarMaskError, NoLegalContinuation, TokenRejected
from .limits import Limits, in_force
from .mask import Mask, pack_bool
from .vocab import Vocabulary

__all__ = ["CompiledGrammar", "Grammar", "Matcher", "ensure_compiled"]

State = Any
Words = npt.NDArray[np.uint32]

_FORCED_STATES = 2048  # forced bytes kept per compiled grammar, by state



class Grammar(ABC):
    """A language of byte strings, independent of any tokenizer. ``compile(vocab)`` binds it."""

    @abstractmethod
    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        """Build the vocabulary-bound form (called once per vocabulary; ``compile`` caches)."""

    def cache_key(self) -> Hashable | None:
        """A content key: grammars with equal keys compile to interchangeable results (None: no caching)."""
        return None

    def special_tokens(self) -> frozenset[str | int]:
        """The special tokens the grammar names (names or ids; :mod:`grammarmask.special_tokens`)."""
        return frozenset()

    def _cfg_maker(self) -> Callable[[], Any] | None:
        """A function that builds this grammar's :class:`~grammarmask.ir.Cfg` again, the same, under
        the limits in force now (None: none); a native compiled grammar given one lets go of its IR
        once compiled (:func:`grammarmask.engine.compile_cfg`)."""
        return None

    def where_named(self, token: str | int) -> str:
        """Where the grammar names the special token ``token``, for error messages."""
        return repr(self)

    def compile(
        self, vocab: Vocabulary, *, limits: Limits | None = None, engine: str | None = None
    ) -> CompiledGrammar:
        """Compile against ``vocab`` within ``limits`` (:class:`~grammarmask.Limits`; None: the
        defaults) with ``engine``: ``"native"`` (Rust), ``"python"`` (the executable specification)
        or None (native when the extension is importable; inside a compile, the outer one's).
        Equal grammars compiled twice on one vocabulary with equal limits and engine share the result;
        a JSON Schema, Lark or GBNF grammar's compiled form is also kept in the on-disk cache, for the
        next process (:mod:`grammarmask.compile_cache`).

        Raises
        ------
        GrammarError
            ``vocab`` is not a Vocabulary; ``engine`` is not one of those names, or is ``"native"``
            and the extension cannot be imported; or the grammar itself is malformed.
        """
        if not isinstance(vocab, Vocabulary):
            raise GrammarError(f"compile() needs a grammarmask.Vocabulary, got {type(vocab).__name__}")
        name = resolve_engine(engine)
        refs = self.special_tokens()
        if refs:  # compiled against the vocabulary with its special tokens spelled
            from .special_tokens import special_view

            vocab = special_view(vocab, refs, where=self.where_named)
        with in_force(limits) as lim, engine_in_use(name):
            key = self.cache_key()
            if key is None:
                compiled = _settled(self._compile(vocab))
            else:
                cache: Lru[Hashable, CompiledGrammar] = per_vocabulary(
                    vocab,
                    "compiled",
                    lambda: Lru(lim.compiled_per_vocabulary, lim.compiled_bytes_per_vocabulary),
                )
                # the CFG engine under "native" follows GRAMMARMASK_NATIVE_CFG, read at each compile
                compiled = cache.get_or_make(
                    (type(self).__qualname__, key, lim, name, name == "native" and native_cfg()),
                    lambda: _settled(compile_through(self, vocab, key, lim, name,
                                                     lambda: self._compile(vocab))),
                    compiled_bytes)
        if getattr(compiled, "_source", None) is None:  # what pickling needs to compile it again
            compiled._source = (self, vocab, lim, name)
        return compiled

    def to_dfa(self) -> Any:
        """The grammar as one byte DFA when it is regular and small, else None (used by ``&``)."""
        return None

    def after(self, end: Any = "</think>", *, start: Any = None) -> Grammar:
        """This grammar, applying only after the model's reasoning: free text up to ``end`` (text, or
        a :class:`~grammarmask.SpecialToken`), then this grammar. Same as
        ``gm.Reasoning(end, start=start) + self``."""
        from .frontends.reasoning import Reasoning

        return Reasoning(end, start=start) + self

    def __and__(self, other: Grammar) -> Grammar:
        if not isinstance(other, Grammar):
            return NotImplemented
        from .compose import And

        return And(self, other)

    def __or__(self, other: Grammar) -> Grammar:
        if not isinstance(other, Grammar):
            return NotImplemented
        from .compose import Union

        return Union(self, other)

    def __add__(self, other: Grammar) -> Grammar:
        if not isinstance(other, Grammar):
            return NotImplemented
        from .sequence import Sequence

        return Sequence(self, other)

    def repeat(self, min: int = 0, max: int | None = None) -> Grammar:  # noqa: A002 - the words users read
        """This grammar ``min`` to ``max`` times in a row (``max`` None: any number of times);
        see :class:`~grammarmask.sequence.Repeat`."""
        from .sequence import Repeat

        return Repeat(self, min, max)


class Wrapped(Grammar):
    """A grammar that is another grammar, ``self.grammar``, under its own name (structural tags,
    reasoning): the same language, cache key, special tokens, automaton and compiled form."""

    grammar: Grammar

    def cache_key(self) -> Hashable | None:
        key = self.grammar.cache_key()
        return None if key is None else (type(self.grammar).__qualname__, key)

    def special_tokens(self) -> frozenset[str | int]:
        return self.grammar.special_tokens()

    def to_dfa(self) -> Any:
        return self.grammar.to_dfa()

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return self.grammar.compile(vocab)


class CompiledGrammar(ABC):
    """A grammar bound to a vocabulary: immutable, thread-safe, shared by any number of matchers.

    It pickles as its grammar, vocabulary, limits and engine, and is compiled again when unpickled
    (in a worker process, say); its caches are not carried over.
    """

    vocab: Vocabulary
    _source: tuple[Grammar, Vocabulary, Limits, str] | None = None
    #: A native engine that fills rows of a batch itself, without the GIL (``grammarmask._engine.
    #: CfgGrammar``, whose states are this grammar's); None: :func:`~grammarmask.fill_masks` asks
    #: :meth:`state_row`.
    batch_engine: Any = None
    #: ``state_fill(state, words, row, eos)``: an engine's own :meth:`Matcher.fill_mask`, writing the
    #: mask (and bit ``eos`` when the state accepts) into row ``row`` of ``words`` in place, and
    #: answering whether the state allows a token or accepts; None (it writes nothing) when
    #: ``words`` or ``row`` is not of a kind it writes. None: the matcher copies :meth:`state_row`.
    state_fill: Callable[[Any, Any, int, int], bool | None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if self._source is None:
            raise TypeError(f"a {type(self).__name__} built outside Grammar.compile() cannot be pickled")
        grammar, vocab, limits, engine = self._source
        return (_compile_again, (grammar, vocab, limits, engine))

    @abstractmethod
    def initial_state(self) -> State:
        """The state before any output."""

    @abstractmethod
    def state_mask_words(self, state: State) -> Words:
        """Mask words of the legal non-EOS tokens in ``state`` (callers never mutate the array)."""

    @abstractmethod
    def advance_state(self, state: State, token_id: int) -> State | None:
        """The state after ``token_id`` (never EOS), or None when the token is illegal."""

    @abstractmethod
    def is_accepting_state(self, state: State) -> bool:
        """Whether the output so far is a complete sentence of the language."""

    def _settle(self) -> None:
        """Called by :meth:`Grammar.compile` once the compile is done (the compiled grammar kept in
        the caches, weighed, stored on disk): let go of what only the compile needed. This default
        keeps everything."""
        return None

    def state_row(self, state: State) -> tuple[Words, bool, bool]:
        """``(state_mask_words(state), whether it allows any token, is_accepting_state(state))``: what
        a row of a batch needs, in one call (an engine that knows the emptiness of its masks answers
        without a scan of the row, as the native CFG engine does)."""
        words = self.state_mask_words(state)
        return words, bool(np.count_nonzero(words)), self.is_accepting_state(state)

    def forced_bytes(self, state: State) -> bytes:
        """The bytes every continuation from ``state`` must start with (b"" when there is a choice).

        This default derives them from the masks: while the output is incomplete and every legal
        token starts with the same byte, that byte is forced (a backend that knows its automaton may
        answer faster). Cached per state when states are hashable.
        """
        cache: Lru[Any, bytes] | None = self.__dict__.get("_forced_cache")
        if cache is None:  # made once per compiled grammar (a race only makes a spare one)
            cache = self.__dict__.setdefault("_forced_cache", Lru(_FORCED_STATES))
        try:
            return cache.get_or_make(state, lambda: _derive_forced_bytes(self, state))
        except TypeError:  # unhashable state: no caching
            return _derive_forced_bytes(self, state)

    def matcher(self) -> Matcher:
        """A fresh matcher at the start of the language."""
        return Matcher(self)


def _settled(compiled: CompiledGrammar) -> CompiledGrammar:
    """``compiled`` after :meth:`CompiledGrammar._settle` (stored on disk first, weighed after)."""
    compiled._settle()
    return compiled


def compiled_bytes(compiled: CompiledGrammar) -> int:
    """What a kept compiled grammar weighs in the compiled-grammar cache: the tables it holds when
    compiled (its terminals' or its DFA's, and the native engine's), not the mask caches that fill
    as it is used (bounded on their own: ``Limits.cfg_masks``, ``index_masks``, ...)."""
    n = 0
    held = getattr(compiled, "__dict__", {})
    cfg = held.get("cfg", held.get("_cfg"))  # the IR it holds, not one it would make again when asked
    for t in getattr(cfg, "terminals", ()):
        n += table_bytes(t.dfa)
    dfa = getattr(compiled, "dfa", None)
    if dfa is not None and hasattr(dfa, "transitions"):
        n += table_bytes(dfa)
    for part in ("engine", "index"):
        native = getattr(compiled, part, None)
        size = getattr(native, "table_bytes", None)  # the CFG engine's lexer: 2 or 4 bytes a cell
        words = getattr(native, "table_words", None)
        if isinstance(size, int):
            n += size
        elif isinstance(words, int):
            n += 4 * words
    return n


def _derive_forced_bytes(compiled: CompiledGrammar, state: State, limit: int = 256) -> bytes:
    starts_with, single = _first_byte_tables(compiled.vocab)
    tb = compiled.vocab.token_bytes
    out = bytearray()
    s = state
    while len(out) < limit and not compiled.is_accepting_state(s):
        words = compiled.state_mask_words(s)
        nz = np.flatnonzero(words)
        if nz.size == 0:
            break
        w = int(nz[0])
        bits = int(words[w])
        b = tb[w * 32 + (bits & -bits).bit_length() - 1][0]
        if (words & ~starts_with[b]).any() or single[b] < 0:
            break
        nxt = compiled.advance_state(s, single[b])
        if nxt is None:
            break
        out.append(b)
        s = nxt
    return bytes(out)


def _first_byte_tables(vocab: Vocabulary) -> tuple[npt.NDArray[np.uint32], list[int]]:
    """Per byte: mask words of the tokens starting with it, and its single-byte token id (or -1)."""

    def make() -> tuple[npt.NDArray[np.uint32], list[int]]:
        first = np.full(vocab.size, -1, np.int16)
        single = [-1] * 256
        for t, data in enumerate(vocab.token_bytes):
            if data:
                first[t] = data[0]
                if len(data) == 1 and single[data[0]] < 0:
                    single[data[0]] = t
        return np.stack([pack_bool(first == b) for b in range(256)]), single

    return per_vocabulary(vocab, "first_byte_tables", make)


def ensure_compiled(grammar: Grammar | CompiledGrammar, vocab: Vocabulary, *, caller: str) -> CompiledGrammar:
    """``grammar`` compiled for ``vocab`` (compiling it if needed); ``caller`` names the function in errors.

    Raises
    ------
    GrammarError
        Neither a Grammar nor a CompiledGrammar, or compiled for a different vocabulary.
    """
    if isinstance(grammar, CompiledGrammar):
        # a grammar naming special tokens is compiled for a view of the vocabulary: compare the bases
        mine, theirs = grammar.vocab.base or grammar.vocab, vocab.base or vocab
        if mine is not theirs and mine.fingerprint != theirs.fingerprint:
            raise GrammarError("the grammar was compiled for a different vocabulary than the one given")
        return grammar
    if isinstance(grammar, Grammar):
        return grammar.compile(vocab)
    raise GrammarError(f"{caller} needs a Grammar or CompiledGrammar, got {type(grammar).__name__}")


_FINISHED = object()


class Matcher:
    """One sequence's position in a compiled grammar.

    Lifecycle: ``mask()`` gives the legal next tokens; ``advance(token)`` moves on (EOS is legal
    exactly when ``is_accepting()``; after it ``is_finished()`` is true and nothing more is legal);
    ``fork()`` copies the position; ``rollback(n)`` undoes the last ``n`` tokens.

    Every method that rejects its input (an illegal token: ``TokenRejected``; a token id, count or
    row that is not an integer, or a bad buffer: ``GrammarError``) leaves the matcher unchanged.
    """

    __slots__ = ("_states", "compiled", "vocab")

    def __init__(self, compiled: CompiledGrammar, _states: list[State] | None = None) -> None:
        self.compiled = compiled
        self.vocab = compiled.vocab
        self._states: list[State] = _states if _states is not None else [compiled.initial_state()]

    def __repr__(self) -> str:
        status = "finished" if self.is_finished() else ("accepting" if self.is_accepting() else "open")
        return f"<Matcher {type(self.compiled).__name__} after {self.num_tokens} tokens, {status}>"

    @property
    def num_tokens(self) -> int:
        """Tokens advanced so far (EOS included)."""
        return len(self._states) - 1

    @property
    def state(self) -> State:
        """The current backend state (an immutable value)."""
        return self._states[-1]

    def is_finished(self) -> bool:
        """True once EOS was taken."""
        return self._states[-1] is _FINISHED

    def is_accepting(self) -> bool:
        """True when the output so far is in the language (EOS is legal now)."""
        s = self._states[-1]
        return s is not _FINISHED and self.compiled.is_accepting_state(s)

    def _words(self) -> Words:
        s = self._states[-1]
        if s is _FINISHED:
            return np.zeros(self.vocab.n_words, np.uint32)
        words, live, accepting = self.compiled.state_row(s)
        if accepting:
            words = words.copy()
            eos = self.vocab.eos_token_id
            words[eos >> 5] |= np.uint32(1 << (eos & 31))
        elif not live:
            self._dead_end()
        return words

    def _dead_end(self) -> None:
        raise NoLegalContinuation(
            f"no token can follow the output so far ({self.num_tokens} tokens): "
            "the grammar (or an intersection of grammars) has no legal continuation"
        )

    def mask(self) -> Mask:
        """The legal next tokens (EOS included when accepting; empty once finished).

        Raises
        ------
        NoLegalContinuation
            Nothing is legal and the output is not complete (an intersection dead-ended).
        """
        return Mask(self._words(), self.vocab.size)

    def fill_mask(self, words: npt.NDArray[Any], row: int = 0) -> None:
        """Write the mask into ``words[row]`` of a caller's ``[batch, n_words]`` int32/uint32 array.

        Raises
        ------
        GrammarError
            ``words`` is not a writeable numpy array of that shape and dtype, or ``row`` is not an
            integer in ``range(batch)``. Nothing is written.
        NoLegalContinuation
            As :meth:`mask`.
        """
        s = self._states[-1]
        fill = self.compiled.state_fill
        if fill is not None and s is not _FINISHED and type(row) is int:
            # the engine writes the row itself (it checks the array and leaves odd ones to the
            # checks below)
            done = fill(s, words, row, self.vocab.eos_token_id)
            if done is not None:
                if not done:
                    self._dead_end()
                return
        if not isinstance(words, np.ndarray):
            raise GrammarError(f"Matcher.fill_mask: words must be a numpy array, got {type(words).__name__}")
        if words.ndim != 2 or words.shape[1] != self.vocab.n_words:
            raise GrammarError(
                f"Matcher.fill_mask: words must be a [batch, {self.vocab.n_words}] array, got {words.shape}"
            )
        if words.dtype not in (np.int32, np.uint32):
            raise GrammarError(
                f"Matcher.fill_mask: words must be an int32 or uint32 array, got {words.dtype}"
            )
        if not words.flags.writeable:
            raise GrammarError("Matcher.fill_mask: words is read-only")
        r = row if type(row) is int else as_int(row, "Matcher.fill_mask: row")
        if not 0 <= r < words.shape[0]:
            raise GrammarError(f"Matcher.fill_mask: row {r} is outside the array's {words.shape[0]} rows")
        if s is _FINISHED:
            words[r] = 0
            return
        # the cached row copied as it is (an int32 destination takes the same bits), then the EOS
        # bit set in place: no copy of the row
        mask, live, accepting = self.compiled.state_row(s)
        if accepting:
            words[r] = mask
            eos = self.vocab.eos_token_id
            words.view(np.uint32)[r, eos >> 5] |= np.uint32(1 << (eos & 31))
        elif live:
            words[r] = mask
        else:
            self._dead_end()

    def advance(self, token_id: int) -> None:
        """Take one token.

        Raises
        ------
        TokenRejected
            The token is illegal here (out of range, a special or padding id, EOS before the output
            is complete, anything after EOS, or a token the grammar forbids). The state is unchanged.
        GrammarError
            ``token_id`` is not an integer (``None``, a str, a float, a bool; numpy integers are
            fine). The state is unchanged.
        """
        s = self._states[-1]
        t = token_id if type(token_id) is int else as_int(token_id, "Matcher.advance: token_id")
        if s is _FINISHED:
            raise TokenRejected(t, "the sequence already ended with EOS")
        if t == self.vocab.eos_token_id:
            if not self.compiled.is_accepting_state(s):
                raise TokenRejected(t, "EOS before the output is complete")
            self._states.append(_FINISHED)
            return
        if not 0 <= t < self.vocab.size:
            raise TokenRejected(t, f"outside the vocabulary (size {self.vocab.size})")
        if t in self.vocab.special_ids or t >= len(self.vocab.token_bytes):
            raise TokenRejected(t, "special and padding tokens are never legal")
        nxt = self.compiled.advance_state(s, t)
        if nxt is None:
            raise TokenRejected(t, f"{self.vocab.token_bytes[t]!r} does not continue the grammar")
        self._states.append(nxt)

    def advance_many(self, token_ids: Iterable[int]) -> None:
        """Take several tokens; on a rejection the matcher is left as it was before the call.

        Raises
        ------
        TokenRejected, GrammarError
            As :meth:`advance`, for the first token that fails.
        """
        n = len(self._states)
        try:
            for t in token_ids:
                self.advance(t)
        except GrammarMaskError:
            del self._states[n:]
            raise

    def try_advance(self, token_id: int) -> bool:
        """Advance if legal; return whether it was.

        Raises
        ------
        GrammarError
            ``token_id`` is not an integer (a misuse, not an illegal token). The state is unchanged.
        """
        try:
            self.advance(token_id)
        except TokenRejected:
            return False
        return True

    def fork(self) -> Matcher:
        """An independent copy at the same position (states are shared, not copied)."""
        return Matcher(self.compiled, list(self._states))

    def rollback(self, n_tokens: int = 1) -> None:
        """Undo the last ``n_tokens`` tokens (EOS counts as one).

        Raises
        ------
        GrammarError
            ``n_tokens`` is not an integer, is negative, or exceeds :attr:`num_tokens`. The state is
            unchanged.
        """
        n = n_tokens if type(n_tokens) is int else as_int(n_tokens, "Matcher.rollback: n_tokens")
        if not 0 <= n <= self.num_tokens:
            raise GrammarError(
                f"Matcher.rollback: cannot roll back n_tokens={n} tokens: only {self.num_tokens} were taken"
            )
        if n:
            del self._states[-n:]

    def reset(self) -> None:
        """Back to the start."""
        del self._states[1:]

    def forced_bytes(self) -> bytes:
        """The bytes every continuation must start with (b"" when there is a choice)."""
        s = self._states[-1]
        return b"" if s is _FINISHED else self.compiled.forced_bytes(s)

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces next: a greedy longest-match tokenization of ``forced_bytes()``
        (each token legal in turn), then EOS if the output is then complete and nothing else is legal.
        Empty when there is a choice. Appending them skips model calls without leaving the language.
        """
        probe = self.fork()
        out: list[int] = []
        trie = self.vocab.trie
        while not probe.is_finished():
            data = probe.forced_bytes()
            tok = _longest_token(trie, data, probe)
            if tok is None:
                break
            probe.advance(tok)
            out.append(tok)
        if not probe.is_finished() and probe.is_accepting():
            words = probe.compiled.state_mask_words(probe.state)
            if not words.any():
                out.append(self.vocab.eos_token_id)
        return out


def _longest_token(trie: Any, data: bytes, probe: Matcher) -> int | None:
    """The longest token whose bytes are a prefix of ``data`` and that ``probe`` accepts."""
    node, best = 0, []
    for i, b in enumerate(data):
        lo, hi = int(trie.child_lo[node]), int(trie.child_hi[node])
        j = lo + int(np.searchsorted(trie.byte[lo:hi], b))
        if j >= hi or trie.byte[j] != b:
            break
        node = j
        toks = trie.tokens[trie.tok_lo[node] : trie.tok_hi[node]]
        if toks.size:
            best.append((i, [int(t) for t in toks]))
    for _, toks in reversed(best):
        for t in toks:
            if probe.compiled.advance_state(probe.state, t) is not None:
                return t
    return None


def _compile_again(grammar: Grammar, vocab: Vocabulary, limits: Limits, engine: str) -> CompiledGrammar:
    """Unpickling a compiled grammar: the same compile in this process."""
    return grammar.compile(vocab, limits=limits, engine=engine)
