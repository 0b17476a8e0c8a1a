"""Choice: one of a fixed set of strings (labels, enum values), or several distinct ones joined.

Single-label mode is a regular language: the labels become one minimal DFA
(:func:`grammarmask.automata.from_strings`) compiled like any regex, so a step is a cached lookup in
the shared token index.

Multi-label mode (``separator="|"``) accepts ``l1 | l2 | ... | lk`` with distinct labels. "Distinct"
is not a small automaton (it remembers a set), so the state is ``(trie node, used labels)`` and the
mask is the no-repeat-free mask minus the tokens whose bytes would run into a used label. Those are
found by walking the vocabulary trie and the label trie together, visiting only label-trie nodes that
lie toward a used label or within one token's length of a label end (where the separator could start a
new label inside the same token); every token below a violating byte is removed at once through the
vocabulary trie's sorted ranges.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Hashable, Iterable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..automata import DFA, from_strings
from ..cache import Lru
from ..engine import compile_dfa
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..mask import words_from_ids
from ..regular.index import DfaTokenIndex
from ..vocab import Vocabulary

__all__ = ["Choice"]

Words = npt.NDArray[np.uint32]
LeadingSpace = Literal["none", "always", "optional"]


def _labels_of_type(labels: Any) -> Any:
    """The labels an :class:`enum.Enum` class (its members' values) or a ``typing.Literal[...]``
    stands for, as strings; anything else unchanged."""
    if isinstance(labels, type) and issubclass(labels, enum.Enum):
        return [m.value if isinstance(m.value, str) else str(m.value) for m in labels]
    if typing.get_origin(labels) is Literal:
        return [a if isinstance(a, str) else str(a) for a in typing.get_args(labels)]
    return labels


class Choice(Grammar):
    """Exactly one of ``labels`` (or, with ``separator``, several distinct labels joined by it).

    Parameters
    ----------
    labels
        The strings (non-empty, distinct, valid Unicode); or an :class:`enum.Enum` class (its
        members' values) or a ``typing.Literal[...]`` (its values), non-strings written with ``str``.
    separator
        Multi-label mode: outputs are ``label (separator label)*`` with no label repeated.
        The separator must not occur inside any label.
    leading_space
        ``"none"`` (default), ``"always"`` (every output starts with one space: how BPE tokenizers
        usually spell a word after a prompt), or ``"optional"``.
    max_labels
        Multi-label mode: at most this many labels.

    Raises
    ------
    GrammarError
        ``labels`` given as one string (not a list of them) or not iterable, an empty label list,
        an empty or duplicate label, a label that is not valid text, or a separator that occurs
        inside a label.
    """

    def __init__(
        self,
        labels: Iterable[str],
        *,
        separator: str | None = None,
        leading_space: LeadingSpace = "none",
        max_labels: int | None = None,
    ) -> None:
        labels = _labels_of_type(labels)
        if isinstance(labels, (str, bytes)):  # list("abc") would be the labels a, b, c
            raise GrammarError(
                f"Choice: labels must be a list of str, got a single {type(labels).__name__} {labels!r:.60}"
            )
        try:
            items = list(labels)
        except TypeError:
            raise GrammarError(f"Choice: labels must be a list of str, got {type(labels).__name__}") from None
        if not items:
            raise GrammarError("Choice needs at least one label, got an empty list")
        seen: dict[str, int] = {}
        encoded = []
        for i, lab in enumerate(items):
            if not isinstance(lab, str):
                raise GrammarError(f"label {i} is {type(lab).__name__}, expected str")
            if lab == "":
                raise GrammarError(f"label {i} is empty")
            if lab in seen:
                raise GrammarError(f"label {i} {lab!r} duplicates label {seen[lab]}")
            seen[lab] = i
            try:
                encoded.append(lab.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise GrammarError(f"label {i} {lab!r} is not valid Unicode text: {e.reason}") from None
        if separator is not None:
            if separator == "":
                raise GrammarError("the separator is empty")
            sep = separator.encode("utf-8")
            for i, lab_b in enumerate(encoded):
                if sep[:1] in lab_b:
                    raise GrammarError(
                        f"label {i} {items[i]!r} contains the separator's first character {separator[0]!r}"
                    )
        if leading_space not in ("none", "always", "optional"):
            raise GrammarError(f"leading_space must be 'none', 'always' or 'optional', got {leading_space!r}")
        if max_labels is not None and (separator is None or max_labels < 1):
            raise GrammarError("max_labels needs a separator and must be at least 1")
        self.labels = tuple(items)
        self.separator = separator
        self.leading_space = leading_space
        self.max_labels = max_labels

    def __repr__(self) -> str:
        return f"Choice({len(self.labels)} labels{', multi' if self.separator else ''})"

    def cache_key(self) -> Hashable:
        return (self.labels, self.separator, self.leading_space, self.max_labels)

    def _trie(self) -> _LabelTrie:
        return _LabelTrie.build(
            [lab.encode() for lab in self.labels],
            None if self.separator is None else self.separator.encode(),
            self.leading_space,
        )

    def to_dfa(self) -> DFA | None:
        if self.separator is not None:
            return None  # "no label repeated" is not a small automaton
        labels = [lab.encode() for lab in self.labels]
        spaced = [b" " + lab for lab in labels]
        if self.leading_space == "always":
            return from_strings(spaced)
        if self.leading_space == "optional":
            if any(lab.startswith(b" ") for lab in labels):
                raise GrammarError("leading_space='optional' is ambiguous with a label starting with a space")
            return from_strings(labels + spaced)
        return from_strings(labels)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        dfa = self.to_dfa()
        if dfa is not None:
            return compile_dfa(dfa, vocab)
        return _MultiCompiled(vocab, self._trie(), self.max_labels)


class _LabelTrie:
    """The labels as a DFA whose states 1..N are trie nodes (0 = dead, 1 = root).

    In multi-label mode, separator states follow: from a label end the separator's bytes lead
    through them back to the root.
    """

    def __init__(self) -> None:
        self.children: list[dict[int, int]] = [{}, {}]  # state -> byte -> state
        self.end_label: list[int] = [-1, -1]  # label id ending at a state
        self.sep_states: list[int] = []
        self.sep_first = -1  # first separator byte (multi-label mode)
        self.n_labels = 0
        self.subtree: list[int] = []
        self.end_dist: list[int] = []
        self.root = 1
        self.start = 1

    def _add(self) -> int:
        self.children.append({})
        self.end_label.append(-1)
        return len(self.children) - 1

    def _insert(self, at: int, data: bytes, label: int) -> None:
        node = at
        for b in data:
            nxt = self.children[node].get(b)
            if nxt is None:
                nxt = self._add()
                self.children[node][b] = nxt
            node = nxt
        self.end_label[node] = label

    @classmethod
    def build(cls, labels: list[bytes], sep: bytes | None, leading_space: LeadingSpace) -> _LabelTrie:
        t = cls()
        for i, lab in enumerate(labels):
            t._insert(t.root, lab, i)
        if leading_space != "none":
            # A separate entry state whose space edge leads to the root.
            entry = t._add()
            t.children[entry] = {} if leading_space == "always" else dict(t.children[t.root])
            if leading_space == "optional" and 0x20 in t.children[t.root]:
                raise GrammarError("leading_space='optional' is ambiguous with a label starting with a space")
            t.children[entry][0x20] = t.root
            t.start = entry
        n_nodes = len(t.children)
        if sep is not None:
            prev_states = [s for s in range(2, n_nodes) if t.end_label[s] >= 0]
            t.sep_first = sep[0]
            node: int | None = None
            for k, b in enumerate(sep):
                target = t.root if k == len(sep) - 1 else t._add()
                if k == 0:
                    for s in prev_states:
                        t.children[s][b] = target
                else:
                    assert node is not None
                    t.children[node][b] = target
                if k < len(sep) - 1:
                    t.sep_states.append(target)
                node = target
        t.n_labels = len(labels)
        t._finish(multi=sep is not None)
        return t

    def _finish(self, multi: bool) -> None:
        n = len(self.children)
        edges = np.array(
            [(s, b, d) for s, kids in enumerate(self.children) for b, d in kids.items()], dtype=np.int32
        ).reshape(-1, 3)
        trans = np.zeros((n, 256), dtype=np.int32)
        trans[edges[:, 0], edges[:, 1]] = edges[:, 2]
        self.transitions = trans
        self.accepting = np.array(self.end_label, dtype=np.int64) >= 0
        self.dfa = DFA(transitions=trans, accepting=self.accepting, start=self.start)
        if multi:
            self._subtree_tables()

    def _subtree_tables(self) -> None:
        """Multi-label mode: each state's set of labels below it (a bitset in a Python int) and its
        distance to the nearest label end."""
        n = len(self.children)
        self.subtree = [0] * n
        self.end_dist = [1 << 30] * n
        for s in reversed(self._topological()):
            bits = 1 << self.end_label[s] if self.end_label[s] >= 0 else 0
            dist = 0 if self.end_label[s] >= 0 else 1 << 30
            for c in self.children[s].values():
                if c != self.root and c not in self.sep_states:
                    bits |= self.subtree[c]
                    dist = min(dist, self.end_dist[c] + 1)
            self.subtree[s] = bits
            self.end_dist[s] = dist

    def _topological(self) -> list[int]:
        order, stack, seen = [], [self.start, self.root], set()
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            order.append(s)
            for c in self.children[s].values():
                if c != self.root and c not in self.sep_states and c not in seen:
                    stack.append(c)
        return order


class _MultiCompiled(CompiledGrammar):
    """State: ``(DFA state, bitset of used labels, labels completed)``."""

    _CACHE = 4096

    def __init__(self, vocab: Vocabulary, trie: _LabelTrie, max_labels: int | None) -> None:
        self.vocab = vocab
        self.trie = trie
        self.index = DfaTokenIndex(vocab, trie.dfa)
        self.max_labels = max_labels
        self._masks: Lru[tuple[int, int], Words] = Lru(self._CACHE)
        self.sorted_tokens = vocab.trie.sorted_tokens

    def initial_state(self) -> tuple[int, int, int]:
        return (self.trie.start, 0, 0)

    def forced_bytes(self, state: Any) -> bytes:
        s = state[0]
        out = bytearray()
        kids = self.trie.children
        while len(kids[s]) == 1 and self.trie.end_label[s] < 0:
            ((b, s),) = kids[s].items()
            out.append(b)
        return bytes(out)

    def is_accepting_state(self, state: Any) -> bool:
        s, used, _count = state
        lab = self.trie.end_label[s]
        return lab >= 0 and not (used >> lab) & 1

    def _full(self, count: int) -> bool:
        return self.max_labels is not None and count + 1 >= self.max_labels

    def advance_state(self, state: Any, token_id: int) -> Any:
        s, used, count = state
        t = self.trie
        for b in self.vocab.token_bytes[token_id]:
            lab = t.end_label[s]
            nxt = t.children[s].get(b)
            if nxt is None:
                return None
            if lab >= 0 and b == t.sep_first:
                # leaving a label end through the separator: the label is now used
                if (used >> lab) & 1 or self._full(count):
                    return None
                used |= 1 << lab
                count += 1
                if t.subtree[t.root] & ~used == 0:
                    return None  # every label used: nothing can follow the separator
            elif nxt != t.root and nxt not in t.sep_states and t.subtree[nxt] & ~used == 0:
                return None  # only used labels lie ahead
            s = nxt
        return (s, used, count)

    def state_mask_words(self, state: Any) -> Words:
        s, used, count = state
        base = self.index.mask_words(s)
        key = (s, used if self.max_labels is None else used | (count << self.trie.n_labels))
        hit = self._masks.get(key)
        if hit is not None:
            return hit
        bad = self._bad_tokens(s, used, count)
        words = base
        if bad.size:
            words = base & ~words_from_ids(bad, self.vocab.size)
        self._masks.put(key, words)
        return words

    def _bad_tokens(self, s0: int, used0: int, count0: int) -> npt.NDArray[np.int32]:
        """Tokens the index allows from ``s0`` that run into a used label (or past ``max_labels``)."""
        t, vt = self.trie, self.vocab.trie
        ranges: list[tuple[int, int]] = []
        stack = [(0, s0, used0, count0)]
        while stack:
            node, s, used, count = stack.pop()
            lo, hi = int(vt.child_lo[node]), int(vt.child_hi[node])
            if lo == hi:
                continue
            kid_bytes = vt.byte[lo:hi]
            lab = t.end_label[s]
            for b, nxt in t.children[s].items():
                j = lo + int(np.searchsorted(kid_bytes, b))
                if j >= hi or vt.byte[j] != b:
                    continue
                u, c, bad = used, count, False
                if lab >= 0 and b == t.sep_first:
                    u |= 1 << lab
                    bad = bool((used >> lab) & 1) or self._full(c) or t.subtree[t.root] & ~u == 0
                    c += 1
                elif nxt != t.root and nxt not in t.sep_states:
                    bad = t.subtree[nxt] & ~u == 0
                if bad:
                    ranges.append((int(vt.sub_lo[j]), int(vt.sub_hi[j])))
                    continue
                # Descend only where a violation can still happen within the remaining token length.
                if nxt in t.sep_states or nxt == t.root or t.subtree[nxt] & u:
                    stack.append((j, nxt, u, c))
                elif t.end_dist[nxt] + 1 <= int(vt.max_len_below[j]):
                    stack.append((j, nxt, u, c))  # the separator may start inside this token
        if not ranges:
            return np.zeros(0, np.int32)
        return np.concatenate([self.sorted_tokens[a:b] for a, b in ranges])
