"""Lexer-level token walks: which tokens a lexer state lets through, vectorised over the token trie.

A :class:`Entry` answers, for a lexer state (pending lexemes, shadows) entered at a set of trie nodes,
without looking at the parser:

- ``inside``: mask words of the tokens (below those nodes) that stay inside a pending lexeme, which can
  still be finished afterwards, with no shadow accepting on the way;
- ``groups``: the places where a pending lexeme may close mid-token, grouped by (closing DFA state,
  shadows at that point); each group lists its trie nodes and the tokens that end exactly there.

What happens after a close depends on the parser (does it accept the terminal, which terminals come
next); the caller asks it once per group, then continues with the group's child entry: the same walk
started at the group's nodes with the next lexer state. Entries are pure functions of their key, so
they are cached and shared by every parser state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .lexer import LexerTables

__all__ = ["Entry", "TokenWalker"]

Words = npt.NDArray[np.uint32]
Group = tuple[int, tuple[int, ...], npt.NDArray[np.int64], Words]


class Entry:
    """The lexer-level walk of one lexer state from a set of trie nodes (see the module docstring)."""

    __slots__ = ("pend", "shadows", "inside", "groups", "children")

    def __init__(self, pend: tuple[int, ...], shadows: tuple[int, ...], inside: Words,
                 groups: list[Group]) -> None:
        self.pend = pend
        self.shadows = shadows
        self.inside = inside
        self.groups = groups
        self.children: dict[tuple[int, tuple[int, ...], tuple[int, ...]], Entry] = {}


class TokenWalker:
    """Builds :class:`Entry` objects for one grammar's lexer tables and one vocabulary's trie."""

    def __init__(self, lex: LexerTables, trie: Any, n_words: int) -> None:
        self.lex = lex
        self.trie = trie
        self.n_words = n_words
        self.table = lex.table
        self.acc = lex.accepting
        self.reaccept = np.asarray(lex.reaccept, dtype=bool)
        self.child_lo = trie.child_lo.astype(np.int64)
        self.child_hi = trie.child_hi.astype(np.int64)
        self.byte = trie.byte.astype(np.int64)
        self.tok_lo = trie.tok_lo.astype(np.int64)
        self.tok_hi = trie.tok_hi.astype(np.int64)
        self.tokens = trie.tokens.astype(np.int64)
        self.empty = np.zeros(n_words, dtype=np.uint32)

    def words_of_nodes(self, nodes: npt.NDArray[np.int64]) -> Words:
        """Mask words of the tokens that end exactly at ``nodes``."""
        if nodes.size == 0:
            return self.empty
        lo = self.tok_lo[nodes]
        cnt = self.tok_hi[nodes] - lo
        keep = cnt > 0
        lo, cnt = lo[keep], cnt[keep]
        if lo.size == 0:
            return self.empty
        total = int(cnt.sum())
        idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
        ids = self.tokens[idx]
        bits = np.zeros(self.n_words * 32, dtype=bool)
        bits[ids] = True
        return np.packbits(bits, bitorder="little").view(np.uint32)

    def entry(self, pend: tuple[int, ...], shadows: tuple[int, ...],
              nodes: npt.NDArray[np.int64]) -> Entry:
        """Walk the trie below ``nodes`` from lexer state (``pend``, ``shadows``)."""
        p = len(pend)
        lex = self.lex
        q = np.tile(np.asarray(pend + shadows, dtype=np.int64), (nodes.size, 1))
        n = nodes.astype(np.int64)
        inside_nodes: list[npt.NDArray[np.int64]] = []
        closes: dict[tuple[int, tuple[int, ...]], list[npt.NDArray[np.int64]]] = {}
        while n.size:
            lo = self.child_lo[n]
            cnt = self.child_hi[n] - lo
            total = int(cnt.sum())
            if total == 0:
                break
            rep = np.repeat(np.arange(n.size), cnt)
            child = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
            q2 = self.table[q[rep], self.byte[child][:, None]].astype(np.int64)
            if q2.shape[1] > p:
                sh = q2[:, p:]
                ok = ~self.acc[sh].any(axis=1)
                sh[~self.reaccept[sh]] = 0
                q2, child = q2[ok], child[ok]
            pe = q2[:, :p]
            live = (pe != 0).any(axis=1)
            q2, child, pe = q2[live], child[live], pe[live]
            if not child.size:
                break
            has_sh = (q2[:, p:] != 0).any(axis=1) if q2.shape[1] > p else np.zeros(child.size, bool)
            cont = self.reaccept[pe].any(axis=1)
            if has_sh.any():
                for i in np.nonzero(has_sh & cont)[0]:
                    shs = tuple(sorted(set(int(x) for x in q2[i, p:] if x)))
                    cont[i] = any(lex.can_finish(int(s), shs, nonempty=True) for s in pe[i] if s)
            inside_nodes.append(child[cont])
            acc_p = self.acc[pe]
            if acc_p.any():
                self._collect_closes(closes, acc_p, pe, q2[:, p:], child)
            q, n = q2, child
        groups: list[Group] = []
        for (qq, shs), parts in closes.items():
            gn = np.concatenate(parts)
            groups.append((qq, shs, gn, self.words_of_nodes(gn)))
        inside = self.words_of_nodes(np.concatenate(inside_nodes)) if inside_nodes else self.empty
        return Entry(pend, shadows, inside, groups)

    def _collect_closes(self, closes: dict[tuple[int, tuple[int, ...]], list[npt.NDArray[np.int64]]],
                        acc_p: npt.NDArray[np.bool_], pe: npt.NDArray[np.int64],
                        sh: npt.NDArray[np.int64], child: npt.NDArray[np.int64]) -> None:
        for j in range(acc_p.shape[1]):
            rows = np.nonzero(acc_p[:, j])[0]
            if not rows.size:
                continue
            qs = pe[rows, j]
            if sh.shape[1] == 0 or not sh[rows].any():
                for qq in np.unique(qs):
                    closes.setdefault((int(qq), ()), []).append(child[rows[qs == qq]])
                continue
            keys = np.concatenate([qs[:, None], np.sort(sh[rows], axis=1)], axis=1)
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            for u in range(uniq.shape[0]):
                shs = tuple(sorted(set(int(x) for x in uniq[u, 1:] if x)))
                closes.setdefault((int(uniq[u, 0]), shs), []).append(child[rows[inv == u]])
