"""The hot loops of this package in Rust (``grammarmask._engine``, src/automata/), used whenever
the extension imports: minimisation (Hopcroft 1971 over byte classes), products, string sets,
byte classes and the subset construction.

Each returns the DFA the Python function beside it returns, state for state (the same numbering;
tests/test_automata_kernels.py holds them equal on random automata), so the process-wide cache of
automata may hold either's. The Python functions stay as the specification and for a checkout
whose extension was not built. Why: the numpy code pays ~20 array calls per automaton, and most
automata of a grammar are small, so a JSON Schema's terminals took 80% of its compile.
"""

from __future__ import annotations

from array import array
from itertools import accumulate, chain
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dfa  # a cycle (dfa imports this module first): its DFA is read when called

if TYPE_CHECKING:
    from .dfa import DFA
    from .nfa import NFA

try:
    from .. import _engine

    assert array("I").itemsize == 4  # the extension reads u32
except ImportError:  # a checkout whose extension was never built: the Python functions run
    _engine = None  # type: ignore[assignment]

__all__ = [
    "available", "byte_classes", "compose", "determinize", "from_positions", "from_strings", "minimize",
    "minimize_table",
    "product",
]  # fmt: skip


def available() -> bool:
    """Whether the Rust kernels are importable (else the callers run their Python code)."""
    return _engine is not None and hasattr(_engine, "dfa_minimize")


def _dfa(parts: tuple[bytes, bytes, int, bytes, int, bytes]) -> DFA:
    table, accepting, start, classes, k, by_class = parts
    # read-only views of the kernel's bytes, in the layout DFA checks for: no checks, no copies
    t = np.frombuffer(table, dtype=np.int32).reshape(-1, 256)
    d = dfa.DFA._trusted(t, np.frombuffer(accepting, dtype=np.bool_), int(start))
    # (DFA.byte_classes reads its classes off this when asked: most key DFAs are never asked)
    object.__setattr__(d, "_class_table", (classes, k, by_class, accepting))
    return d


def _args(d: DFA) -> tuple[bytes, bytes, int]:
    return d.transitions.tobytes(), d.accepting.tobytes(), d.start


def minimize(d: DFA) -> DFA:
    """:func:`grammarmask.automata.dfa.minimize`."""
    return minimize_table(*_args(d))


def minimize_table(table: bytes, accepting: bytes, start: int) -> DFA:
    """:func:`minimize` of a DFA given as its dense table's int32 cells (native order), one byte per
    state for accepting, and its start: for a table built as bytes, no numpy array made first."""
    return _dfa(_engine.dfa_minimize(table, accepting, start))


def product(a: DFA, b: DFA, op: str, limit: int) -> DFA:
    """``L(a) op L(b)`` for ``op`` in ``"and"``, ``"or"``, ``"minus"``, minimal; a
    :class:`~grammarmask.GrammarError` past ``limit`` states (:func:`grammarmask.automata.ops._pair_dfa`)."""
    return _dfa(_engine.dfa_product(*_args(a), *_args(b), op, limit))


def from_strings(uniq: list[bytes]) -> DFA:
    """The minimal DFA of sorted, distinct byte strings (:func:`grammarmask.automata.ops._small_trie_dfa`)."""
    lengths = array("I", map(len, uniq))  # not numpy: most sets are one JSON key
    return _dfa(_engine.dfa_from_strings(b"".join(uniq), lengths.tobytes()))


def from_positions(positions: list[tuple[bytes, ...]]) -> DFA:
    """The minimal DFA of one spelling of each position in turn, each position's spellings
    prefix-free (the UTF-8 spellings of a keyword letter's case set), numbered as built
    (:func:`grammarmask.automata.regex._caseless_word`)."""
    spellings = [s for p in positions for s in p]
    lengths, counts = array("I", map(len, spellings)), array("I", map(len, positions))
    return _dfa(_engine.dfa_chain(b"".join(spellings), lengths.tobytes(), counts.tobytes()))


def byte_classes(d: DFA) -> tuple[np.ndarray, int]:
    """:func:`grammarmask.automata.dfa.column_classes` of ``d``'s table: one pass over it in Rust."""
    classes, k = _engine.dfa_classes(d.transitions.tobytes())
    return np.frombuffer(classes, dtype=np.uint8).astype(np.int32), k


def determinize(nfa: NFA, start: int, final: int, max_states: int, max_work: int | None) -> DFA | str:
    """:func:`grammarmask.automata.nfa.determinize_python`'s DFA, or ``"states"`` / ``"work"`` when
    its bound was passed (the caller raises the error it documents)."""

    def flat(lists: list[list[Any]], width: int) -> tuple[bytes, bytes]:
        # array, not numpy: three small arrays per automaton, where numpy's calls cost more than
        # the lists' contents (~20% of a keyword's DFA)
        ptr = array("I", [0])
        ptr.extend(accumulate(map(len, lists)))
        flat_items = chain.from_iterable(lists)
        items = array("I", flat_items if width == 1 else chain.from_iterable(flat_items))
        return ptr.tobytes(), items.tobytes()

    _, got = _engine.dfa_determinize(*flat(nfa.eps, 1), *flat(nfa.edges, 3), *flat(nfa.asserts, 2),
                                     start, final, max_states, -1 if max_work is None else max_work)
    if isinstance(got, str):
        return got
    return _dfa(got)


def compose(program: array[int], pieces: list[DFA], max_nfa: int, max_states: int,
            max_work: int | None) -> DFA | str:
    """The minimal DFA of a regular expression over byte strings and the DFAs ``pieces``, written as
    ``program`` (uint32 words, src/automata/compose.rs), or ``"size"`` / ``"states"`` / ``"work"``
    when its NFA passed ``max_nfa`` states or the subset construction a bound (the caller then
    reads the expression as a regex). No Python function beside it: the regex path is its
    specification (tests/test_cfg_builder.py holds the two languages equal)."""
    _, got = _engine.dfa_compose(program.tobytes(), [_args(d) for d in pieces], max_nfa, max_states,
                                 -1 if max_work is None else max_work)
    if isinstance(got, str):
        return got
    return _dfa(got)
