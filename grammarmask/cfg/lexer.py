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

from .ir import Cfg

__all__ = ["LexerTables"]


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
            tr = np.asarray(t.dfa.transitions, dtype=np.int64)
            glob = np.where(tr == 0, 0, tr + off)
            table[off + 1 : off + 1 + sizes[i]] = glob[1:]
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
        self.rows: list[list[int]] = table.tolist()
        self.acc_list: list[bool] = acc.tolist()
        self.term_list: list[int] = term_of.tolist()
        # reaccept[s]: a non-empty path from s reaches an accepting state (else a shadow in s is harmless).
        reaches = acc.copy()
        succ_any = np.zeros(total, dtype=bool)
        changed = True
        while changed:
            succ_any = reaches[table].any(axis=1)
            new = reaches | succ_any
            changed = bool((new != reaches).any())
            reaches = new
        succ_any = reaches[table].any(axis=1)
        succ_any[0] = False
        self.reaccept: list[bool] = succ_any.tolist()
        #: first_bits[s]: the bytes that keep state s alive, as an int bitset
        self.first_bits: list[int] = [
            int.from_bytes(np.packbits(row != 0, bitorder="little").tobytes(), "little") for row in table
        ]
        self._reach: dict[tuple[int, tuple[int, ...]], bool] = {}

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
        while todo and not found:
            s, sh = todo.popleft()
            row = rows[s]
            for b in range(256):
                n = row[b]
                if not n:
                    continue
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
