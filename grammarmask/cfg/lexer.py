"""All terminal DFAs of a grammar in one transition table, plus the lexer-level questions about them.

Global state 0 is dead; terminal ``t`` owns states ``offset[t] .. offset[t] + n_t - 1`` (its local dead
state maps to 0). A *lexer state* is a pair of sorted tuples of global states: ``pend`` (the lexemes
started at the last boundary and still alive, one per candidate terminal) and ``shadows`` (greedy
lexemes already closed whose DFA still runs: if one of them reaches an accepting state again, lark's
longest match would have taken the longer lexeme, so the cut was illegal and the path dies).
"""

from __future__ import annotations

import hashlib
from collections import deque

import numpy as np
import numpy.typing as npt

from ..ir.cfg import Cfg

__all__ = ["LexerTables"]


class _Rows(dict[int, list[int]]):
    """``rows[s]`` is ``table[s].tolist()`` (with ``live``: the bytes where it is not 0), made on first
    use (big grammars have 10^4+ states, and converting them all up front cost more than the rest of
    the lexer tables)."""

    def __init__(self, table: npt.NDArray[np.int32], *, live: bool = False) -> None:
        super().__init__()
        self.table = table
        self.live_only = live

    def __missing__(self, s: int) -> list[int]:
        row: list[int] = (np.flatnonzero(self.table[s]) if self.live_only else self.table[s]).tolist()
        self[s] = row
        return row


def _can_reach(table: npt.NDArray[np.int32], acc: npt.NDArray[np.bool_], src: npt.NDArray[np.intp],
               byte: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """Which states reach an accepting state in zero or more steps (a backward search over the edges
    ``src --byte-->``)."""
    dst = table[src, byte].astype(np.int64)
    order = np.argsort(dst, kind="stable")
    preds = src[order].astype(np.int64)
    lo = np.searchsorted(dst[order], np.arange(table.shape[0] + 1))
    seen: npt.NDArray[np.bool_] = acc.copy()
    seen[0] = False
    todo = np.nonzero(seen)[0]
    while todo.size:
        cnt = lo[todo + 1] - lo[todo]
        idx = np.repeat(lo[todo] - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
        nxt = np.unique(preds[idx])
        todo = nxt[~seen[nxt]]
        seen[todo] = True
    return seen


def reaccepting(table: npt.NDArray[np.int32], acc: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per state of a transition table with dead state 0: whether a non-empty path from it reaches
    an accepting state."""
    src, byte = np.nonzero(table)
    reaches = _can_reach(table, acc, src, byte)
    out = np.zeros(table.shape[0], dtype=bool)
    np.logical_or.at(out, src, reaches[table[src, byte]])
    out[0] = False
    return out


class LexerTables:
    """The combined terminal DFAs of ``cfg`` and cached reachability facts about them."""

    def __init__(self, cfg: Cfg) -> None:
        terms = cfg.terminals
        sizes = [t.dfa.n_states - 1 for t in terms]
        offsets = np.concatenate([[1], 1 + np.cumsum(sizes)]).astype(np.int64)
        total = int(offsets[-1])
        table = np.zeros((total, 256), dtype=np.int32)
        acc = np.zeros(total, dtype=bool)
        term_of = np.full(total, -1, dtype=np.int32)
        start = []
        for i, t in enumerate(terms):
            off = int(offsets[i]) - 1  # local state s >= 1 -> global off + s
            block = table[off + 1 : off + 1 + sizes[i]]  # filled in place: no 64-bit copy of a big DFA
            block[...] = t.dfa.transitions[1:]
            np.add(block, off, out=block, where=block != 0)
            acc[off + 1 : off + 1 + sizes[i]] = np.asarray(t.dfa.accepting)[1:]
            term_of[off + 1 : off + 1 + sizes[i]] = i
            start.append(off + t.dfa.start if t.dfa.start else 0)
        self.table: npt.NDArray[np.int32] = table
        self.accepting: npt.NDArray[np.bool_] = acc
        self.term_of = term_of
        self.start = start
        #: global state = offset[t] + local state (local 0, the dead state, maps to global 0)
        self.offset: list[int] = [int(offsets[i]) - 1 for i in range(len(terms))]
        self.dfas = [t.dfa for t in terms]
        self._dfa_keys: dict[int, bytes] = {}
        self.greedy = [t.greedy for t in terms]
        self.is_ignore = [i in cfg.ignore for i in range(len(terms))]
        self.ignore = tuple(cfg.ignore)
        #: rows[s][byte]: the transition table as Python lists, converted row by row on first use
        self.rows: _Rows = _Rows(table)
        #: live[s]: the bytes that keep state s alive, listed on first use
        self.live: _Rows = _Rows(table, live=True)
        self.acc_list: list[bool] = acc.tolist()
        self.term_list: list[int] = term_of.tolist()
        # reaccept[s]: a non-empty path from s reaches an accepting state (else a shadow in s is harmless).
        self.reaccept: list[bool] = reaccepting(table, acc).tolist()
        #: first_bits[s]: the bytes that keep state s alive, as an int bitset
        raw = np.packbits(table != 0, axis=1, bitorder="little").tobytes()
        self.first_bits: list[int] = [
            int.from_bytes(raw[i : i + 32], "little") for i in range(0, len(raw), 32)
        ]
        self._reach: dict[tuple[int, tuple[int, ...]], bool] = {}

    def __getstate__(self) -> dict[str, object]:
        """The tables without the caches, the combined transition table by byte classes (bytes no
        terminal tells apart share one column: tens of columns, not 256), for
        :mod:`grammarmask.compile_cache`."""
        state = dict(self.__dict__)
        for name in ("rows", "live"):
            del state[name]
        per_term = [d.byte_classes()[0] for d in self.dfas] or [np.zeros(256, dtype=np.int32)]
        _, first, classes = np.unique(np.stack(per_term).T, axis=0, return_index=True, return_inverse=True)
        classes = classes.ravel().astype(np.uint8)
        compact = np.ascontiguousarray(self.table[:, first])
        if np.array_equal(compact[:, classes], self.table):  # always, but the entry must be exact
            state["table"] = (classes, compact)
        state.update(_reach={}, _dfa_keys={})
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        if isinstance(self.table, tuple):
            classes, compact = self.table
            self.table = compact[:, classes]
        self.rows = _Rows(self.table)
        self.live = _Rows(self.table, live=True)

    def dfa_key(self, t: int) -> bytes:
        """A content hash of terminal ``t``'s DFA (equal DFAs in different grammars share walks)."""
        key = self._dfa_keys.get(t)
        if key is None:
            d = self.dfas[t]
            h = hashlib.blake2b(digest_size=16)
            h.update(np.ascontiguousarray(d.transitions, dtype=np.int32).tobytes())
            h.update(np.ascontiguousarray(d.accepting, dtype=np.bool_).tobytes())
            h.update(int(d.start).to_bytes(8, "little"))
            key = self._dfa_keys[t] = h.digest()
        return key

    def shadow_of(self, state: int) -> int:
        """The shadow a greedy lexeme closed in ``state`` leaves (0 if it can never matter)."""
        return state if self.reaccept[state] else 0

    def step_shadows(self, shadows: tuple[int, ...], byte: int) -> tuple[int, ...] | None:
        """Shadows after ``byte``; None when one of them accepts (the earlier cut was illegal)."""
        if not shadows:
            return shadows
        rows, acc, re_ = self.rows, self.acc_list, self.reaccept
        out = []
        for h in shadows:
            n = rows[h][byte]
            if n:
                if acc[n]:
                    return None
                if re_[n]:
                    out.append(n)
        return tuple(sorted(set(out)))

    def can_finish(self, q: int, shadows: tuple[int, ...], *, nonempty: bool) -> bool:
        """Whether lexeme state ``q`` can reach acceptance with no shadow accepting on the way.

        ``nonempty``: at least one more byte (an accepting ``q`` does not count by itself).
        """
        if not q:
            return False
        if not shadows:
            return bool(self.reaccept[q]) if nonempty else (self.acc_list[q] or self.reaccept[q])
        if not nonempty and self.acc_list[q]:
            return True
        key = (q, shadows)
        hit = self._reach.get(key)
        if hit is not None:
            return hit
        rows, acc = self.rows, self.acc_list
        seen = {key}
        todo = deque([key])
        found = False
        live = self.live
        while todo and not found:
            s, sh = todo.popleft()
            row = rows[s]
            for b in live[s]:
                n = row[b]
                sh2 = self.step_shadows(sh, b)
                if sh2 is None:
                    continue
                if acc[n]:
                    found = True
                    break
                k2 = (n, sh2)
                if k2 not in seen:
                    seen.add(k2)
                    todo.append(k2)
        self._reach[key] = found
        return found
