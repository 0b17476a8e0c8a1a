"""The native CFG engine's compiled grammar: a :class:`~grammarmask.ir.Cfg` bound to a vocabulary
through the Rust engine (``grammarmask._engine.CfgGrammar``, src/cfg/).

Same language, masks and answers as :class:`grammarmask.cfg.CompiledCfg`, its specification (lark's
dynamic lexer with greedy terminals and their shadows, non-greedy terminals, ignore terminals, a state
as a set of configurations); tests/test_native_cfg.py holds the two and a brute-force oracle equal at
every step. Python hands Rust flat arrays once per compile: the terminal DFAs as one transition table
read by byte class (global state 0 dead, terminal ``t`` owning a block of states, as in
:class:`grammarmask.cfg.lexer.LexerTables`; a column per class of bytes that every terminal treats
alike, with the byte -> class map beside) and the rules as flat int arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..grammar import CompiledGrammar
from ..ir.cfg import Cfg
from ..limits import Limits, active
from ..vocab import Vocabulary
from . import _engine, native_vocabulary

__all__ = ["CLASS_TRIE_MAX", "NativeCompiledCfg", "flat_tables"]

Words = npt.NDArray[np.uint32]

#: masks walk the token trie over the lexer's byte classes when the grammar has at most this many
#: (a trie per class map, read off the byte trie: 5-8 ms of CPU on tekken's 131k tokens, 18-20 ms when
#: it was sorted afresh; 5,927 nodes for arithmetic.lark and 96,020 for json.lark against the byte
#: trie's 266,313), else the byte trie every grammar of the vocabulary shares (JSONSchemaBench
#: grammars have 20-70 classes, mostly over 40, where a class trie saves a third of the nodes; each
#: compiled grammar holds its class trie, a few MB)
CLASS_TRIE_MAX = 40


def _read_only_words(data: bytes) -> Words:
    """The engine's mask bytes as the (read-only) uint32 array the engine API hands out."""
    return np.frombuffer(data, dtype=np.uint32)


def flat_tables(cfg: Cfg) -> dict[str, Any]:
    """The arguments of ``_engine.CfgGrammar`` that describe ``cfg``: the combined lexer table read
    by byte class (``transitions`` states x classes, ``classes`` the byte -> column map), made in
    Rust from each terminal's own table by class (:meth:`~grammarmask.automata.DFA.class_table`,
    src/cfg/tables.rs), and the rules as flat arrays. (numpy made a 256-column table that the
    engine read twice more to find its classes and reduce it: this hand-over and the engine's
    set-up took 0.75 ms, warm, at JSONSchemaBench's median grammar; now 0.26-0.30.)"""
    table, classes, accepting, term_of, starts = _engine.lexer_tables(
        [(*t.dfa.class_table(), t.dfa.start) for t in cfg.terminals])
    ptr = [0]
    rhs: list[int] = []
    for r in cfg.rules:
        rhs.extend(r.rhs)
        ptr.append(len(rhs))
    ignore = set(cfg.ignore)
    return {
        "transitions": table,
        "classes": classes,
        "accepting": accepting,
        "term_of": term_of,
        "starts": starts,
        "greedy": [bool(t.greedy) for t in cfg.terminals],
        "ignore": [i in ignore for i in range(len(cfg.terminals))],
        "rule_lhs": [r.lhs for r in cfg.rules],
        "rule_ptr": ptr,
        "rule_rhs": rhs,
        "start": cfg.start,
        "n_nonterminals": len(cfg.nonterminals),
    }


class NativeCompiledCfg(CompiledGrammar):
    """A :class:`~grammarmask.ir.Cfg` bound to a vocabulary by the Rust engine.

    State: an immutable, hashable ``grammarmask._engine.CfgState`` (the configurations still possible,
    holding the Earley sets they need: fork and rollback are free). Masks are computed in Rust without
    the GIL on first visit and cached (``Limits.cfg_masks`` of them, within ``Limits.cfg_mask_bytes``);
    the object may be shared by any number of threads. The budgets ``Limits.earley_items_per_set``,
    ``cfg_configs`` and ``cfg_walk_visits`` raise :class:`~grammarmask.BudgetExceeded` from ``advance``
    and masks.
    """

    def __init__(self, cfg: Cfg | None, vocab: Vocabulary, limits: Limits | None = None, *,
                 class_trie_max: int = CLASS_TRIE_MAX, remake: Callable[[], Cfg] | None = None,
                 tables: dict[str, Any] | None = None) -> None:
        """``tables``: :func:`flat_tables` of the grammar, already made (``cfg`` may then be None,
        with ``remake`` to make it when asked)."""
        if tables is None:
            if cfg is None:
                raise ValueError("NativeCompiledCfg needs a Cfg or its flat tables")
            tables = flat_tables(cfg)
        self._cfg: Cfg | None = cfg
        self._remake = remake
        self._tables: dict[str, Any] | None = tables
        self.vocab = vocab
        self.limits = limits = limits or active()
        # the mask cache holds whole rows: Limits.cfg_masks of them, within Limits.cfg_mask_bytes
        masks = min(limits.cfg_masks, limits.cfg_mask_bytes // (4 * vocab.n_words))
        self.engine = _engine.CfgGrammar(
            native_vocabulary(vocab),
            **tables,
            limits=(limits.earley_items_per_set, limits.earley_signatures, limits.earley_recent,
                    limits.cfg_configs, limits.cfg_walk_visits, masks),
            wrap=_read_only_words,
            class_trie_max=class_trie_max,
        )
        self._initial = self.engine.initial()
        # the hot calls go straight to the engine (no Python frame of ours around them)
        self.state_mask_words = self.engine.mask  # type: ignore[method-assign]
        self.state_row = self.engine.row  # type: ignore[method-assign]
        self.state_fill = self.engine.fill
        self.is_accepting_state = self.engine.is_accepting  # type: ignore[method-assign]
        self.batch_engine = self.engine

    @property
    def cfg(self) -> Cfg:
        """The grammar's IR: held, or made again by ``remake`` once the compile settled (the engine
        has its own tables; the IR's dense terminal tables took 0.9 MB per JSONSchemaBench schema,
        88 of the 183 MB that 100 compiled schemas held)."""
        cfg = self._cfg
        return cfg if cfg is not None else self._remake()  # type: ignore[misc]

    def flat(self) -> dict[str, Any] | None:
        """The :func:`flat_tables` the engine was built from, until the compile settled (None after)."""
        return self._tables

    def _settle(self) -> None:
        self._tables = None
        if self._remake is not None:
            self._cfg = None

    def initial_state(self) -> Any:
        return self._initial

    def state_mask_words(self, state: Any) -> Words:
        words: Words = self.engine.mask(state)
        return words

    def advance_state(self, state: Any, token_id: int) -> Any:
        return self.engine.advance(state, token_id)

    def is_accepting_state(self, state: Any) -> bool:
        return self.engine.is_accepting(state)

    def feed(self, state: Any, data: bytes) -> Any:
        """The state after ``data`` (falsy when ``data`` leaves the language's prefixes)."""
        return self.engine.feed(state, data)
