"""Lexer-level token walks: which tokens a lexeme lets through, vectorised over the token trie.

An :class:`Entry` answers, for ONE pending lexeme (a DFA state ``q`` of one terminal) plus the shadows
of greedy lexemes closed before it, entered at a :class:`Frontier` of the token trie, without looking
at the parser:

- ``inside``: mask words of the tokens that stay inside the lexeme, which can still be finished
  afterwards, with no shadow accepting on the way;
- ``groups``: the places where the lexeme may close mid-token, grouped by (closing DFA state, shadows
  there); each :class:`Group` lists its trie nodes and the tokens that end exactly there.

A configuration with several pending lexemes (several candidate terminals) is the union of one entry
per lexeme, so entries are shared by every lexer state that contains their lexeme. What happens after
a close depends on the parser (does it take the terminal, which terminals come next); the caller asks
it once per group and continues with the group's child entries, one per next terminal, all started at
the group's frontier: the children of the group's nodes whose byte no shadow rejects.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import weakref

import numpy as np
import numpy.typing as npt

from ..cache import per_vocabulary
from ..limits import Limits, active
from ..vocab import Vocabulary
from .lexer import LexerTables

__all__ = ["Entry", "Frontier", "Group", "TokenWalker"]

Words = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

_serials = itertools.count()


def _unique_rows(keys: I64) -> tuple[I64, I64]:
    """The distinct rows of ``keys`` (non-negative) and each row's index among them. One shadow
    column is the common case: two columns pack into one int64 (a 1-D unique is much faster)."""
    if keys.shape[1] == 2:
        m = int(keys[:, 1].max()) + 1
        u, inv = np.unique(keys[:, 0] * m + keys[:, 1], return_inverse=True)
        return np.stack([u // m, u % m], axis=1), inv.reshape(-1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    return uniq, inv.reshape(-1)


class Frontier:
    """Trie nodes one byte below a boundary, with the shadow states after that byte.

    ``nodes[i]`` is a child of a boundary node, ``byte[i]`` the byte into it, ``shadows[i]`` the shadow
    states after it (columns; 0 = dead); rows where a shadow accepted are already gone.
    """

    __slots__ = ("nodes", "byte", "shadows", "entries", "bits", "below", "__weakref__")

    def __init__(self, nodes: I64, byte: I64, shadows: I64, bits: int | None = None) -> None:
        self.nodes = nodes
        self.byte = byte
        self.shadows = shadows
        self.entries: dict[int, Entry] = {}
        #: the bytes present, as an int bitset (a lexeme whose first bytes miss it yields nothing here)
        self.bits = sum(1 << int(b) for b in np.unique(byte)) if bits is None else bits
        #: the few nodes all rows hang from when no shadow lives on (a dense walk can start there),
        #: else (); None until asked
        self.below: tuple[int, ...] | None = None


class Group:
    """The closes of one lexeme at DFA state ``q`` with shadows ``shadows``: at trie ``nodes`` (None
    when the walk that found them set ``frontier`` already)."""

    __slots__ = ("q", "shadows", "nodes", "at_words", "frontier", "after")

    def __init__(self, q: int, shadows: tuple[int, ...], nodes: I64 | None, at_words: Words) -> None:
        self.q = q
        self.shadows = shadows
        self.nodes = nodes
        self.at_words = at_words
        self.frontier: Frontier | None = None
        #: the shadows that live on after the close (set by the first caller that needs them)
        self.after: tuple[int, ...] | None = None


class Entry:
    """The walk of one lexeme from a frontier (see the module docstring)."""

    __slots__ = ("inside", "groups", "serial")

    def __init__(self, inside: Words, groups: list[Group]) -> None:
        self.inside = inside
        self.groups = groups
        #: a unique int naming this entry in cache keys (ints keep keys out of the garbage collector)
        self.serial = next(_serials)


def _shared_rows(vocab: Vocabulary) -> tuple[weakref.WeakValueDictionary[bytes, Words], threading.Lock]:
    """The vocabulary's table of live mask rows by token set (rows die with the walks that use them)."""
    return per_vocabulary(vocab, "cfg.rows", lambda: (weakref.WeakValueDictionary(), threading.Lock()))


class TokenWalker:
    """Builds frontiers and entries for one grammar's lexer tables and one vocabulary's trie."""

    def __init__(self, lex: LexerTables, vocab: Vocabulary, limits: Limits | None = None) -> None:
        self.lex = lex
        self.limits = limits = limits or active()
        self.small = limits.walk_small_rows
        self.n_words = vocab.n_words
        self.table = lex.table
        self.acc = lex.accepting
        self.reaccept = np.asarray(lex.reaccept, dtype=bool)
        ta = vocab.trie
        self.child_lo, self.child_hi, self.byte = ta.child_lo, ta.child_hi, ta.byte
        self.tok_lo, self.tok_hi, self.tokens = ta.tok_lo, ta.tok_hi, ta.tokens
        self._rows, self._rows_lock = _shared_rows(vocab)
        self.empty = np.zeros(self.n_words, dtype=np.uint32)
        self.empty.setflags(write=False)
        #: frontiers by content: closes reached along different paths (whitespace after a keyword,
        #: after a comma, ...) often have the same frontier, and then share its walks
        self._frontiers: weakref.WeakValueDictionary[tuple[bytes, bytes], Frontier] = (
            weakref.WeakValueDictionary())

    def intern(self, fr: Frontier) -> Frontier:
        """The frontier already made with ``fr``'s nodes, bytes and shadows, else ``fr``."""
        key = (fr.nodes.tobytes(), fr.shadows.tobytes() + fr.shadows.shape[1].to_bytes(2, "little"))
        got = self._frontiers.get(key)
        if got is None:
            self._frontiers[key] = got = fr
        return got

    def words_of_nodes(self, nodes: I64) -> Words:
        """Mask words of the tokens that end exactly at ``nodes`` (``self.empty`` itself when none)."""
        if nodes.size == 0:
            return self.empty
        if nodes.size <= self.small:
            return self._words_small(nodes.tolist())
        lo = self.tok_lo[nodes]
        cnt = self.tok_hi[nodes] - lo
        keep = cnt > 0
        lo, cnt = lo[keep], cnt[keep]
        if lo.size == 0:
            return self.empty
        total = int(cnt.sum())
        idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
        return self._row(np.sort(self.tokens[idx]))

    def _words_small(self, nodes: list[int]) -> Words:
        tok_lo, tok_hi, tokens = self.tok_lo, self.tok_hi, self.tokens
        ids: list[int] = []
        for node in nodes:
            lo, hi = int(tok_lo[node]), int(tok_hi[node])
            if lo < hi:
                ids.extend(tokens[lo:hi].tolist())
        if not ids:
            return self.empty
        ids.sort()
        return self._row(np.asarray(ids, dtype=np.int64))

    def _row(self, ids: I64) -> Words:
        """The mask row with the (sorted, distinct) ``ids`` set, shared by every walk of the vocabulary
        that yields the same token set (walks of different lexemes and grammars often end at the same
        few tokens: one JSONSchemaBench run made 22k small rows of 1.3k distinct sets)."""
        raw = ids.tobytes()
        key = raw if len(raw) <= 256 else hashlib.blake2b(raw, digest_size=16).digest()
        with self._rows_lock:
            row: Words | None = self._rows.get(key)
        if row is not None and len(raw) > 256:  # a digest key: make sure it is this very set
            same = int(np.unpackbits(row.view(np.uint8)).sum()) == ids.size and \
                bool(((row[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).all())
            if not same:
                return self._new_row(ids)  # a digest collision: keep this row to itself
        if row is None:
            row = self._new_row(ids)
            with self._rows_lock:
                row = self._rows.setdefault(key, row)
        return row

    def _new_row(self, ids: I64) -> Words:
        bits = np.zeros(self.n_words * 32, dtype=bool)
        bits[ids] = True
        row: Words = np.packbits(bits, bitorder="little").view(np.uint32)
        row.setflags(write=False)
        return row

    def _children(self, n: I64) -> tuple[I64, I64]:
        lo = self.child_lo[n]
        cnt = self.child_hi[n] - lo
        total = int(cnt.sum())
        rep = np.repeat(np.arange(n.size), cnt)
        child = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
        return rep, child

    def _step_shadows(self, sh: I64, byte: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Shadows after ``byte`` per row, and which rows survive (no shadow accepted)."""
        if sh.shape[1] == 0:
            return sh, np.ones(sh.shape[0], dtype=bool)
        s2 = self.table[sh, byte[:, None]].astype(np.int64)
        ok: npt.NDArray[np.bool_] = np.asarray(~self.acc[s2].any(axis=1), dtype=bool)
        s2[~self.reaccept[s2]] = 0
        return s2, ok

    def frontier(self, nodes: I64, shadows: tuple[int, ...]) -> Frontier:
        """The frontier below ``nodes`` for a boundary with ``shadows`` (interned: see :meth:`intern`)."""
        if nodes.size <= self.small:
            return self.intern(self._frontier_small(nodes.tolist(), shadows))
        rep, child = self._children(nodes)
        byte = self.byte[child]
        sh = np.tile(np.asarray(shadows, dtype=np.int64), (child.size, 1))
        sh, ok = self._step_shadows(sh, byte)
        return self.intern(Frontier(child[ok], byte[ok], sh[ok]))

    def _frontier_small(self, nodes: list[int], shadows: tuple[int, ...]) -> Frontier:
        """:meth:`frontier` for a few nodes, in plain Python (same rows, same shadow columns)."""
        lex = self.lex
        rows, acc, re_ = lex.rows, lex.acc_list, lex.reaccept
        child_lo, child_hi, byte = self.child_lo, self.child_hi, self.byte
        out_n: list[int] = []
        out_b: list[int] = []
        out_s: list[list[int]] = []
        for node in nodes:
            for c in range(int(child_lo[node]), int(child_hi[node])):
                b = int(byte[c])
                cols = []
                for h in shadows:
                    x = rows[h][b]
                    if acc[x]:
                        break
                    cols.append(x if re_[x] else 0)
                else:
                    out_n.append(c)
                    out_b.append(b)
                    out_s.append(cols)
        sh = np.asarray(out_s, dtype=np.int64).reshape(len(out_n), len(shadows))
        bits = 0
        for b in out_b:
            bits |= 1 << b
        return Frontier(np.asarray(out_n, dtype=np.int64), np.asarray(out_b, dtype=np.int64), sh, bits)

    def entry(self, q0: int, fr: Frontier) -> Entry:
        """Walk the lexeme starting in DFA state ``q0`` from frontier ``fr``."""
        return self.entries((q0,), fr)[q0]

    def entries(self, qs: tuple[int, ...], fr: Frontier) -> dict[int, Entry]:
        """Walk the lexemes starting in DFA states ``qs`` (each of a different terminal) from ``fr``,
        all in one vectorised pass (the rows of different lexemes never mix: a row's DFA state names
        its terminal). Returns one entry per state of ``qs``."""
        term_of = self.lex.term_of
        if fr.nodes.size <= self.small:
            return self._entries_small(qs, fr)
        ns, qq, ss = [], [], []
        for q0 in qs:
            q = self.table[q0, fr.byte].astype(np.int64)
            live = q != 0
            if live.any():
                ns.append(fr.nodes[live])
                qq.append(q[live])
                ss.append(fr.shadows[live])
        inside_nodes: list[I64] = []
        inside_terms: list[I64] = []
        closes: dict[tuple[int, tuple[int, ...]], list[I64]] = {}
        if ns:
            n = np.concatenate(ns) if len(ns) > 1 else ns[0]
            q = np.concatenate(qq) if len(qq) > 1 else qq[0]
            sh = np.concatenate(ss) if len(ss) > 1 else ss[0]
            self._walk_rows(n, q, sh, inside_nodes, inside_terms, closes)
        by_term: dict[int, list[Group]] = {}
        for (qq_, shs), parts in closes.items():
            gn = np.concatenate(parts)
            by_term.setdefault(int(term_of[qq_]), []).append(Group(qq_, shs, gn, self.words_of_nodes(gn)))
        out: dict[int, Entry] = {}
        if inside_nodes:
            all_n = np.concatenate(inside_nodes)
            all_t = np.concatenate(inside_terms)
        for q0 in qs:
            t = int(term_of[q0])
            inside = self.empty
            if inside_nodes:
                sel = all_n[all_t == t] if len(qs) > 1 else all_n
                inside = self.words_of_nodes(sel)
            out[q0] = Entry(inside, by_term.get(t, []))
        return out

    def _entries_small(self, qs: tuple[int, ...], fr: Frontier) -> dict[int, Entry]:
        """:meth:`entries` from a frontier of a few rows, in plain Python."""
        rows, term_list = self.lex.rows, self.lex.term_list
        nodes, bytes_ = fr.nodes.tolist(), fr.byte.tolist()
        shs = [tuple(sorted({x for x in r if x})) for r in fr.shadows.tolist()]
        start = []
        for q0 in qs:
            row = rows[q0]
            for i, b in enumerate(bytes_):
                q = row[b]
                if q:
                    start.append((nodes[i], q, shs[i]))
        inside, terms, found = self._small_rows(start)
        by_term: dict[int, list[Group]] = {}
        for (qq_, sh), gn in found.items():
            arr = np.asarray(gn, dtype=np.int64)
            by_term.setdefault(term_list[qq_], []).append(Group(qq_, sh, arr, self._words_small(gn)))
        out: dict[int, Entry] = {}
        for q0 in qs:
            t = term_list[q0]
            sel = [n for n, tt in zip(inside, terms) if tt == t]
            out[q0] = Entry(self._words_small(sel) if sel else self.empty, by_term.get(t, []))
        return out

    def _walk_rows(self, n: I64, q: I64, sh: I64, inside_nodes: list[I64], inside_terms: list[I64],
                   closes: dict[tuple[int, tuple[int, ...]], list[I64]]) -> None:
        """Breadth first down the trie from rows (node, lexeme state, shadows), vectorised."""
        term_of = self.lex.term_of
        while n.size:
            if n.size <= self.small:
                self._small(n, q, sh, inside_nodes, inside_terms, closes)
                break
            cont = self.reaccept[q]
            if sh.shape[1] and sh.any():
                self._refine(cont, q, sh)
            inside_nodes.append(n[cont])
            inside_terms.append(term_of[q[cont]].astype(np.int64))
            acc = self.acc[q]
            if acc.any():
                self._collect(closes, q[acc], sh[acc], n[acc])
            go = self.reaccept[q]
            n, q, sh = n[go], q[go], sh[go]
            if not n.size:
                break
            rep, child = self._children(n)
            if not child.size:
                break
            byte = self.byte[child]
            q2 = self.table[q[rep], byte].astype(np.int64)
            sh2, ok = self._step_shadows(sh[rep], byte)
            ok &= q2 != 0
            n, q, sh = child[ok], q2[ok], sh2[ok]

    def _small(self, n: I64, q: I64, sh: I64, inside_nodes: list[I64], inside_terms: list[I64],
               closes: dict[tuple[int, tuple[int, ...]], list[I64]]) -> None:
        """The rest of the walk for a few rows, depth first in plain Python (narrow, deep subtrees)."""
        start = [(int(n[i]), int(q[i]), tuple(sorted({int(x) for x in sh[i] if x}))) for i in range(n.size)]
        inside, terms, found = self._small_rows(start)
        if inside:
            inside_nodes.append(np.asarray(inside, dtype=np.int64))
            inside_terms.append(np.asarray(terms, dtype=np.int64))
        for key, nodes in found.items():
            closes.setdefault(key, []).append(np.asarray(nodes, dtype=np.int64))

    def _small_rows(self, stack: list[tuple[int, int, tuple[int, ...]]]
                    ) -> tuple[list[int], list[int], dict[tuple[int, tuple[int, ...]], list[int]]]:
        """Depth-first walk from rows (node, lexeme state, shadows): inside nodes with their
        terminals, and close nodes by (state, shadows)."""
        lex = self.lex
        rows, acc, re_ = lex.rows, lex.acc_list, lex.reaccept
        term_list = lex.term_list
        child_lo, child_hi, byte, table = self.child_lo, self.child_hi, self.byte, self.table
        inside: list[int] = []
        terms: list[int] = []
        found: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        while stack:
            node, st, shs = stack.pop()
            if lex.can_finish(st, shs, nonempty=True):
                inside.append(node)
                terms.append(term_list[st])
            if acc[st]:
                found.setdefault((st, shs), []).append(node)
            if not re_[st]:
                continue
            lo, hi = int(child_lo[node]), int(child_hi[node])
            if hi - lo > 8:
                bs = byte[lo:hi]
                live = np.nonzero(table[st, bs])[0]
                cands = [(lo + int(i), int(bs[i])) for i in live]
            else:
                cands = [(c, int(byte[c])) for c in range(lo, hi)]
            row = rows[st]
            for c, b in cands:
                s2 = row[b]
                if not s2:
                    continue
                sh2 = lex.step_shadows(shs, b)
                if sh2 is not None:
                    stack.append((c, s2, sh2))
        return inside, terms, found

    def _refine(self, cont: npt.NDArray[np.bool_], q: I64, sh: I64) -> None:
        """Where shadows are alive, a lexeme continues only if it can finish before they accept."""
        rows = np.nonzero(cont & sh.any(axis=1))[0]
        if not rows.size:
            return
        keys = np.concatenate([q[rows, None], np.sort(sh[rows], axis=1)], axis=1)
        uniq, inv = _unique_rows(keys)
        ok = np.array([self.lex.can_finish(int(u[0]), tuple(sorted({int(x) for x in u[1:] if x})),
                                           nonempty=True) for u in uniq], dtype=bool)
        cont[rows] = ok[inv.reshape(-1)]

    @staticmethod
    def _collect(closes: dict[tuple[int, tuple[int, ...]], list[I64]], qs: I64, sh: I64, nodes: I64) -> None:
        if sh.shape[1] == 0 or not sh.any():
            for qq in np.unique(qs):
                closes.setdefault((int(qq), ()), []).append(nodes[qs == qq])
            return
        keys = np.concatenate([qs[:, None], np.sort(sh, axis=1)], axis=1)
        uniq, inv = _unique_rows(keys)
        for u in range(uniq.shape[0]):
            shs = tuple(sorted({int(x) for x in uniq[u, 1:] if x}))
            closes.setdefault((int(uniq[u, 0]), shs), []).append(nodes[inv == u])
