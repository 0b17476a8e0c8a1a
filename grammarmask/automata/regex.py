"""Python ``re`` patterns to byte-level DFAs.

The pattern is parsed by the standard library's own parser (``re._parser``, through :mod:`.sre`),
so syntax, escapes, inline flags and ``re.VERBOSE`` are Python's. The parse tree is translated to a
byte-level Thompson NFA (:mod:`.nfa`) whose character sets are UTF-8 encoded (:mod:`.utf8`), then
determinised, trimmed and minimised. The language is exactly the set of UTF-8 encodings of the
strings ``s`` with ``re.fullmatch(pattern, s, flags)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from ..cache import UNKEPT_LITERAL_CHARS, automata, automaton, table_bytes
from ..errors import BudgetExceeded, GrammarError
from ..limits import active
from . import kernels
from .charsets import (
    RangeSet,
    ascii_ignorecase_set,
    category_set,
    complement,
    ignorecase_set,
    may_change_with_case,
    normalize,
)
from .dfa import DFA, minimize
from .direct import direct_dfa
from .nfa import A_BEGIN, A_BOL, A_DOLLAR, A_END, A_EOL, NFA, determinize
from .ops import add_dfa_to_nfa, from_strings
from .sre import C
from .sre import parse as _sre_parse
from .stack import stack_room
from .utf8 import MAX_CODEPOINT, utf8_sequences

__all__ = [
    "DEFAULT_MAX_STATES", "Tables", "char_class_dfa", "keep_tables", "patterns_made", "regex_to_dfa",
    "tables_of",
]  # fmt: skip

DEFAULT_MAX_STATES = 10_000
_COMPOSE_ROWS = 60_000  # the composer's arena (1 KiB a row): past it, the NFA path decides

_CATEGORY_ESCAPES = {
    C.CATEGORY_DIGIT: r"\d",
    C.CATEGORY_NOT_DIGIT: r"\D",
    C.CATEGORY_SPACE: r"\s",
    C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w",
    C.CATEGORY_NOT_WORD: r"\W",
}

# (regex of the construct in the pattern text, what to call it)
_UNSUPPORTED = {
    C.GROUPREF: (r"\\[1-9]|\(\?P=", "backreferences are not regular"),
    C.GROUPREF_EXISTS: (r"\(\?\(", "conditional groups are not regular"),
    C.ASSERT: (r"\(\?<?[=!]", "lookaround assertions are not supported"),
    C.ASSERT_NOT: (r"\(\?<?[=!]", "lookaround assertions are not supported"),
    C.POSSESSIVE_REPEAT: (r"[*+?}]\+", "possessive quantifiers are not supported"),
    C.ATOMIC_GROUP: (r"\(\?>", "atomic groups are not supported"),
}


# the flags as plain ints: ``int & re.IGNORECASE`` goes through the RegexFlag enum's own operators
# (a Python call each, ~1 us), paid per character node
_I, _A, _S, _M, _X = (int(f) for f in (re.IGNORECASE, re.ASCII, re.DOTALL, re.MULTILINE, re.VERBOSE))


def regex_to_dfa(pattern: str, flags: int = 0, *, max_states: int = DEFAULT_MAX_STATES) -> DFA:
    """The minimal DFA of the UTF-8 byte strings that ``re.fullmatch(pattern, ., flags)`` accepts.

    Raises
    ------
    GrammarError
        The pattern does not compile (position from ``re``), uses a construct that is not
        regular or not supported (backreferences, lookaround, conditionals, possessive or atomic
        groups, ``\\b``/``\\B``; column of the construct), or needs more than ``max_states``
        DFA states.
    """
    if not isinstance(pattern, str):
        raise GrammarError(f"expected a str pattern, got {type(pattern).__name__}")
    if len(pattern) <= UNKEPT_LITERAL_CHARS:  # only literals: not kept with the costly automata
        made = _short_plain_dfa(pattern, flags, max_states)
        if made is not None:
            return made
    key = _key(pattern, flags, max_states)
    work, depth = key[4:]

    def make() -> DFA:
        return _build(pattern, flags, max_states, work, depth)

    return automaton(key, make)


# a DFA as an installation's disk entry holds it: its dense int32 cells, its accepting flags (one byte
# a state) and its start, read back as read-only views, with none of the checks and copies of a DFA
# unpickled (24 of them took 0.4 ms that way, more than they saved)
Tables = tuple[bytes, bytes, int]


def _key(pattern: str, flags: int = 0, max_states: int = DEFAULT_MAX_STATES) -> tuple[Any, ...]:
    """The key under which :func:`regex_to_dfa` keeps ``pattern``'s DFA, under the limits now in
    force (their regex budgets, its last two items)."""
    limits = active()
    return ("regex_to_dfa", pattern, flags, max_states, limits.regex_subset_work, limits.regex_depth)


def patterns_made(seen: Mapping[Hashable, Any]) -> dict[str, DFA]:
    """The DFAs among ``seen`` (automata by their key, as :func:`grammarmask.cache.recording_automata`
    records them) that :func:`regex_to_dfa` made for a pattern with no flags and the defaults, by
    pattern."""
    return {key[1]: d for key, d in seen.items()
            if isinstance(key, tuple) and key[0] == "regex_to_dfa" and key == _key(key[1])}


def tables_of(dfas: Mapping[str, DFA]) -> dict[str, Tables]:
    """DFAs as tables, to keep on disk and hand to :func:`keep_tables`."""
    return {rx: (d.transitions.tobytes(), d.accepting.tobytes(), d.start) for rx, d in dfas.items()}


def keep_tables(tables: Mapping[str, Tables]) -> None:
    """Keep DFAs made earlier as :func:`regex_to_dfa` makes these patterns' (no flags, the default
    ``max_states``, the limits now in force), given as tables, in the process-wide cache where
    :func:`regex_to_dfa` finds them: DFAs an installation makes once and reads back (see
    :mod:`grammarmask.frontends.lark_bundled`, :mod:`grammarmask.frontends.jsonschema.common_dfas`)."""
    cache = automata()
    for pattern, (table, accepting, start) in tables.items():
        t = np.frombuffer(table, dtype=np.int32).reshape(-1, 256)
        dfa = DFA._trusted(t, np.frombuffer(accepting, dtype=np.bool_), start)
        cache.put(_key(pattern), dfa, table_bytes(dfa))


_FRAMES = 8  # Python frames one level of group nesting may take (re's parser, the NFA builder)


def check_depth(pattern: str, budget: int) -> None:
    """Refuse a pattern whose groups nest deeper than ``budget`` (``Limits.regex_depth``), before
    Python's own parser recurses on them; make room on the stack for the depth allowed."""
    depth, deepest, i, in_class = 0, 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":  # a class: no groups inside; a "]" first (after "^") is a literal
            in_class = True
            i += 2 if pattern.startswith("^", i + 1) else 1
            i += 1 if pattern.startswith("]", i) else 0
            continue
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
            if depth > budget:  # the first group past the budget
                line = pattern.count("\n", 0, i) + 1
                col = i - (pattern.rfind("\n", 0, i) + 1) + 1
                what = f"a group nested more than {budget} deep"
                raise BudgetExceeded("regex_depth", budget, what, where=f"line {line}, column {col}")
        elif ch == ")":
            depth = max(0, depth - 1)
        i += 1
    stack_room(_FRAMES * deepest)


def nfa_states(max_states: int) -> int:
    """The NFA states a pattern may expand to when its DFA may have ``max_states``: past them it is
    refused as too large (its repetitions' characters counted first)."""
    return max(100_000, 50 * max_states)


def _build(pattern: str, flags: int, max_states: int, work: int | None = None,
           depth: int | None = None) -> DFA:
    """:func:`regex_to_dfa` without the cache (kept in the process-wide cache of automata);
    ``depth``: ``Limits.regex_depth`` (None: the limit in force)."""
    # (a short pattern's answer is kept: regex_to_dfa asked it already)
    plain = _short_plain_dfa if len(pattern) <= UNKEPT_LITERAL_CHARS else _plain_dfa
    made = plain(pattern, flags, max_states)
    if made is not None:  # fastest path: "(?:lit|lit|...)" without any syntax to parse
        return made
    word = _CASELESS_WORD.fullmatch(pattern) if not flags & ~_A else None
    if word is not None:  # a case-insensitive keyword (Lark's "select"i), without re's parser
        return _check_size(_caseless_word(word.group(1), bool(flags & _A)), max_states)
    # only here, before re's parser (which recurses on the groups): the fast paths above do not
    # recurse, and a kept DFA passed it under the same budget
    check_depth(pattern, active().regex_depth if depth is None else depth)
    tree = parse(pattern, flags)
    flags = int(tree.state.flags) | int(flags)
    if not flags & _I:
        strings = _literal_set(tree, 0)
        if strings is not None:  # fast path: a finite set of literals (e.g. a label alternation)
            return _check_size(from_strings(x.encode("utf-8") for x in strings), max_states)
    nfa = NFA(max_states=nfa_states(max_states))
    weight = _weight(tree, nfa.max_states)
    if weight > nfa.max_states:
        raise GrammarError(
            f"pattern too large: its repetitions expand to more than {nfa.max_states} characters"
        )
    # the composer wins where the subset construction pays per copy of a long counted repetition;
    # elsewhere (wide alternations: tries, number ranges; short repetitions of a few ASCII
    # characters, such as GBNF's ws{0,20}) the subset construction is as fast or faster
    raw = direct_dfa(tree, flags, _charset_dfa_of, min(_COMPOSE_ROWS, 20 * max_states)) if (
        _repeat_cost(tree, flags) > _COMPOSE_FROM) else None
    if raw is not None:  # composed without a subset construction (see .direct)
        return _check_size(minimize(DFA(*raw)), max_states)
    start, final = nfa.new_state(), nfa.new_state()
    try:
        _Builder(nfa, pattern).build(tree, flags, start, final)
    except RecursionError:
        raise GrammarError("pattern too deeply nested") from None
    return determinize(nfa, start, final, max_states=max_states, max_work=work)


_LITERAL_SET_LIMIT = 100_000
# a literal: characters without regex meaning, or a backslash before a non-alphanumeric ASCII
# character (which re reads as that character itself, e.g. re.escape's output)
_LIT = r"(?:[^\\.^$*+?{}\[\]|()]|\\[^0-9A-Za-z])+"
# (one group around them at most: its parentheses are matched apart from an escaped one, "\)")
_PLAIN_ALT = re.compile(rf"(?P<open>\((?:\?:)?)?(?P<lits>{_LIT}(?:\|{_LIT})*)(?P<close>\))?")
_META = re.compile(r"[\\.^$*+?{}\[\]|()]")
_ALT_ITEM = re.compile(r"(?:[^\\|]|\\.)+", re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _plain_dfa(pattern: str, flags: int, max_states: int) -> DFA | None:
    """The DFA of a pattern that is only ``lit|lit|...`` (:func:`_plain_alternation`), else None."""
    plain = _plain_alternation(pattern, flags)
    return None if plain is None else _check_size(from_strings(x.encode("utf-8") for x in plain), max_states)


@functools.lru_cache(maxsize=512)
def _short_plain_dfa(pattern: str, flags: int, max_states: int) -> DFA | None:
    """:func:`_plain_dfa` of a short pattern, kept apart from the costly automata (whose cache such
    DFAs would flush: UNKEPT_LITERAL_CHARS): JSON keys ("name", "type", "id") and the patterns
    that are not plain (a schema's number and space patterns, asked of every schema again)."""
    return _plain_dfa(pattern, flags, max_states)


def _plain_alternation(pattern: str, flags: int) -> list[str] | None:
    """The literals of a pattern that is only ``lit|lit|...`` (optionally in one group): a JSON
    Schema's property names (``"port"``), a Lark grammar's keywords. Their DFA is made from the
    strings in Rust (~10-40 us), not through re's parser, an NFA and the subset construction
    (~100-180 us for a short key)."""
    if flags:  # re checks them (re.LOCALE with str, ASCII | UNICODE), and IGNORECASE, VERBOSE matter
        return None
    if _META.search(pattern) is None:  # one literal without escapes (a JSON key): 5 -> 0.5 us
        return None if _SURROGATE.search(pattern) else [pattern]
    m = _PLAIN_ALT.fullmatch(pattern)
    if m is None or (m["open"] is None) != (m["close"] is None):
        return None
    out = [_UNESCAPE.sub(r"\1", item) for item in _ALT_ITEM.findall(m["lits"])]
    if any(_SURROGATE.search(x) for x in out):
        return None
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")

# a case-insensitive word of ASCII letters, digits and underscores, as lark writes "word"i
_CASELESS_WORD = re.compile(r"\(\?i:([A-Za-z0-9_]+)\)")


def _caseless_word(word: str, ascii_only: bool) -> DFA:
    """The minimal DFA of ``(?i:word)``: a chain of the letters' case-insensitive sets (``re``'s own,
    per installation), each spelled in UTF-8 (the Kelvin sign for ``k``: three bytes). It is
    minimal as built: every state lies on the way to the one accepting state, a chain state and the
    states inside a multibyte spelling are told apart by what they read next, and two chain states
    by how far acceptance lies (the tests hold it equal to the DFA through re's parser). With the
    kernels it is built in Rust from the letters' spellings, ~15 us a keyword; a dense table of 256
    columns built here and minimised there took ~45 us (SQL's 29 keywords: 1.3 ms of a 9 ms
    compile), re's parser and the subset construction 55-90 us."""
    positions = [_spellings(ord(ch), ascii_only) for ch in word]
    return kernels.from_positions(positions) if kernels.available() else chain_python(positions)


def chain_python(positions: list[tuple[bytes, ...]]) -> DFA:
    """:func:`grammarmask.automata.kernels.from_positions` without the kernels, and not minimised:
    the DFA of one spelling of each position in turn, as built (minimal for case sets)."""
    edges: dict[tuple[int, int], int] = {}  # (state, byte) -> state; 0 dead, 1 the start
    n = at = 1
    for spellings in positions:
        n += 1
        nxt = n
        for spelling in spellings:
            *lead, last = spelling
            s = at
            for b in lead:  # a state per prefix of a multibyte spelling
                if (s, b) not in edges:
                    n += 1
                    edges[s, b] = n
                s = edges[s, b]
            edges[s, last] = nxt
        at = nxt
    table = np.zeros((n + 1, 256), dtype=np.int32)
    for (s, b), t in edges.items():
        table[s, b] = t
    accepting = np.zeros(n + 1, dtype=bool)
    accepting[at] = True
    table.setflags(write=False)
    accepting.setflags(write=False)
    return DFA._trusted(table, accepting, 1)  # (well-formed by construction)


@functools.lru_cache(maxsize=256)
def _spellings(code: int, ascii_only: bool) -> tuple[bytes, ...]:
    """The UTF-8 spellings of the characters ASCII character ``code`` matches case-insensitively,
    by code point."""
    return tuple(chr(c).encode("utf-8") for lo, hi in ascii_ignorecase_set(code, ascii_only)
                 for c in range(lo, hi + 1))


def _weight(seq: Any, cap: int) -> int:
    """Character nodes after expanding counted repetitions (a cheap lower bound on NFA size)."""
    total = 0
    for op, av in seq:
        if op is C.BRANCH:
            total += sum(_weight(alt, cap) for alt in av[1])
        elif op is C.SUBPATTERN:
            total += _weight(av[3], cap)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            copies = lo + 1 if hi is C.MAXREPEAT else hi
            total += min(copies, cap + 1) * max(_weight(sub, cap), 1 if copies else 0)
        else:
            total += 1
        if total > cap:
            return total
    return total


# the composer takes a tree with a counted repetition (count >= 16) of at least this cost (count x
# character nodes, x16 for characters past ASCII): below it the subset construction was as fast or
# faster (llama.cpp's json.gbnf in a fresh process: its ten terminals 12.8 -> 9.2 ms)
_COMPOSE_FROM = 32


def _repeat_cost(seq: Any, flags: int) -> int:
    """The largest ``count x width`` of a counted repetition (count >= 16) in a parse tree; width is
    the repeated part's character nodes, times 16 unless they are all ASCII (a wide class's UTF-8
    automaton is many states per copy)."""
    best = 0
    for op, av in seq:
        if op is C.BRANCH:
            best = max([best, *(_repeat_cost(alt, flags) for alt in av[1])])
        elif op is C.SUBPATTERN:
            best = max(best, _repeat_cost(av[3], (flags | av[1]) & ~av[2]))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            count = max(lo, 0 if hi is C.MAXREPEAT else hi)
            if count >= 16:
                width = _weight(sub, 1 << 20) * (1 if _ascii(sub, flags) else 16)
                best = max(best, count * max(width, 1))
            best = max(best, _repeat_cost(sub, flags))
    return best


def _ascii(seq: Any, flags: int) -> bool:
    """Whether a parse tree matches only ASCII characters, each by itself (no case folding)."""
    if flags & _I:
        return False
    for op, av in seq:
        if op is C.LITERAL:
            ok = av < 128
        elif op is C.IN:
            ok = all((o is C.LITERAL and a < 128) or (o is C.RANGE and a[1] < 128) for o, a in av)
        elif op is C.SUBPATTERN:
            ok = _ascii(av[3], (flags | av[1]) & ~av[2])
        elif op is C.BRANCH:
            ok = all(_ascii(alt, flags) for alt in av[1])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            ok = _ascii(av[2], flags)
        else:
            ok = False
        if not ok:
            return False
    return True


def _check_size(dfa: DFA, max_states: int) -> DFA:
    if dfa.n_states > max_states + 1:
        raise GrammarError(
            f"pattern too complex: its DFA needs more than {max_states} states "
            "(raise max_states, or simplify the pattern)"
        )
    return dfa


def _literal_set(seq: Any, depth: int) -> set[str] | None:
    """The finite set of strings a parse-tree sequence of literals, classes of literals, groups and
    alternations matches, or None if it uses anything else (or is too large)."""
    parts: list[set[str]] = []
    run: list[str] = []
    for op, av in seq:
        if op is C.LITERAL:
            run.append(chr(av))
            continue
        if op is C.IN and all(o is C.LITERAL for o, _ in av):
            alts: set[str] | None = {chr(c) for _, c in av}
        elif op is C.SUBPATTERN and not av[1] and not av[2] and depth < 50:
            alts = _literal_set(av[3], depth + 1)
        elif op is C.BRANCH and depth < 50:
            alts = set()
            for alt in av[1]:
                sub = _literal_set(alt, depth + 1)
                if sub is None:
                    return None
                alts |= sub
        else:
            return None
        if alts is None:
            return None
        if run:
            parts.append({"".join(run)})
            run = []
        parts.append(alts)
    if run:
        parts.append({"".join(run)})
    out = {""}
    for alts in parts:
        if len(out) * len(alts) > _LITERAL_SET_LIMIT:
            return None
        out = {a + b for a in out for b in alts}
    if _SURROGATE.search("".join(out)):
        return None  # lone surrogates have no UTF-8 encoding; leave them to the general path
    return out


def parse(pattern: str, flags: int = 0) -> Any:
    """Python's own parse of ``pattern`` (:func:`.sre.parse`) with ``re.error`` turned into
    :class:`GrammarError`."""
    if flags & (re.LOCALE | re.DEBUG):
        raise GrammarError("re.LOCALE and re.DEBUG are not supported")
    try:
        return _sre_parse(pattern, flags)
    except re.error as exc:
        line, col = exc.lineno, exc.colno
        if line is None or col is None:
            line, col = 1, 1
        raise GrammarError(f"invalid regex: {exc.msg}", line=line, column=col, text=pattern) from None
    except (RecursionError, OverflowError, ValueError) as exc:
        raise GrammarError(f"invalid regex: {exc}") from None


def _error_at(pattern: str, construct: str, message: str) -> GrammarError:
    pos = _find_outside_classes(pattern, construct)
    line = pattern.count("\n", 0, pos) + 1
    col = pos - (pattern.rfind("\n", 0, pos) + 1) + 1
    return GrammarError(message, line=line, column=col, text=pattern)


def _find_outside_classes(pattern: str, construct: str) -> int:
    """Offset of the first match of ``construct`` outside character classes (0 if none)."""
    rx = re.compile(construct)
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if not in_class and rx.match(pattern, i):
            return i
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            if pattern.startswith("^", i + 1):
                i += 1
            if pattern.startswith("]", i + 1):
                i += 1
        i += 1
    return 0


class _Builder:
    def __init__(self, nfa: NFA, pattern: str) -> None:
        self.nfa = nfa
        self.pattern = pattern

    def build(self, seq: Any, flags: int, start: int, end: int) -> None:
        """Add ``start --seq--> end`` for a sequence of parse-tree nodes."""
        items = list(seq)
        if not items:
            self.nfa.add_eps(start, end)
            return
        cur = start
        for i, (op, av) in enumerate(items):
            nxt = end if i == len(items) - 1 else self.nfa.new_state()
            self.node(op, av, flags, cur, nxt)
            cur = nxt

    def node(self, op: Any, av: Any, flags: int, start: int, end: int) -> None:
        if op in (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY):
            self.charset(_charset(op, av, flags), start, end)
        elif op is C.BRANCH:
            strings = None if flags & _I or len(av[1]) < 16 else _literal_set([(op, av)], 0)
            if strings is not None:  # many literal alternatives: embed their minimal trie DFA
                add_dfa_to_nfa(self.nfa, from_strings(x.encode("utf-8") for x in strings), start, end)
                return
            for alt in av[1]:
                self.build(alt, flags, start, end)
        elif op is C.SUBPATTERN:
            _, add, delete, sub = av
            self.build(sub, (flags | add) & ~delete, start, end)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            self.repeat(av, flags, start, end)
        elif op is C.AT:
            self.anchor(av, flags, start, end)
        elif op in _UNSUPPORTED:
            construct, message = _UNSUPPORTED[op]
            raise _error_at(self.pattern, construct, message)
        else:
            raise GrammarError(f"unsupported regex construct {op}")

    def repeat(self, av: Any, flags: int, start: int, end: int) -> None:
        lo, hi, sub = av
        nfa = self.nfa
        cur = start
        for _ in range(lo):
            nxt = nfa.new_state()
            self.build(sub, flags, cur, nxt)
            cur = nxt
        if hi is C.MAXREPEAT:
            loop = nfa.new_state()
            nfa.add_eps(cur, loop)
            body_end = nfa.new_state()
            self.build(sub, flags, loop, body_end)
            nfa.add_eps(body_end, loop)
            nfa.add_eps(loop, end)
            return
        nfa.add_eps(cur, end)
        for _ in range(hi - lo):
            nxt = nfa.new_state()
            self.build(sub, flags, cur, nxt)
            nfa.add_eps(nxt, end)
            cur = nxt

    def anchor(self, code: Any, flags: int, start: int, end: int) -> None:
        multiline = bool(flags & _M)
        if code is C.AT_BEGINNING_STRING or (code is C.AT_BEGINNING and not multiline):
            kind = A_BEGIN
        elif code is C.AT_BEGINNING:
            kind = A_BOL
        elif code is C.AT_END_STRING:
            kind = A_END
        elif code is C.AT_END:
            kind = A_EOL if multiline else A_DOLLAR
        else:
            raise _error_at(self.pattern, r"\\[bB]", r"word boundaries (\b, \B) are not supported")
        self.nfa.add_assert(start, kind, end)

    def charset(self, ranges: RangeSet, start: int, end: int) -> None:
        """Add ``start --one character of ranges--> end`` as UTF-8 byte edges.

        States are shared by the byte-range suffix still to read (as regex-automata's UTF-8
        compiler does), so e.g. every "two continuation bytes to go" point is one state: the
        subset construction then meets far fewer states than with a prefix tree.
        """
        nfa = self.nfa
        nodes: dict[tuple[tuple[int, int], ...], int] = {(): end}
        for seq in _sequences(ranges):
            suffix = seq[1:]
            i = 0
            while suffix[i:] not in nodes:  # the longest suffix with a state already
                i += 1
            n = nodes[suffix[i:]]
            for j in range(i - 1, -1, -1):  # states for the longer ones, shortest first
                lo, hi = suffix[j]
                n2 = nfa.new_state()
                nfa.add_range(n2, lo, hi, n)
                n = nodes[suffix[j:]] = n2
            nfa.add_range(start, seq[0][0], seq[0][1], n)


@functools.lru_cache(maxsize=4096)
def _sequences(ranges: RangeSet) -> tuple[tuple[tuple[int, int], ...], ...]:
    return tuple(utf8_sequences(ranges))


def char_class_dfa(ranges: tuple[tuple[int, int], ...], negate: bool = False) -> DFA:
    """The DFA of one character of the code point ``ranges`` (inclusive pairs), or of any other
    character when ``negate``: the language ``re`` gives the class ``[...]`` / ``[^...]`` of those
    ranges, without re's parser (surrogates have no UTF-8 spelling: never matched)."""
    exact = normalize(ranges)
    return _charset_dfa(complement(exact) if negate else exact)


def _charset_dfa_of(op: Any, av: Any, flags: int) -> DFA:
    """The minimal DFA of one character node (for :func:`.direct.direct_dfa`)."""
    return _charset_dfa(_charset(op, av, flags))


@functools.lru_cache(maxsize=4096)
def _charset_dfa(ranges: RangeSet) -> DFA:
    """One character of ``ranges``: the DFA of its non-ASCII part (shared by many classes) with
    the ASCII bytes added as edges from the start to the (unique) final state."""
    ascii_part = [(lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F]
    rest = tuple((max(lo, 0x80), hi) for lo, hi in ranges if hi >= 0x80)
    if not ascii_part:
        return _utf8_dfa(rest)
    base = _utf8_dfa(rest)
    if base.start == 0:
        t = np.zeros((3, 256), np.int32)
        acc = np.array([False, False, True])
        start, final = 1, 2
    else:
        t = base.transitions.copy()
        acc = base.accepting
        start, final = base.start, int(np.flatnonzero(acc)[0])
    for lo, hi in ascii_part:
        t[start, lo : hi + 1] = final
    return DFA(t, acc, start)


@functools.lru_cache(maxsize=4096)
def _utf8_dfa(ranges: RangeSet) -> DFA:
    nfa = NFA()
    start, end = nfa.new_state(), nfa.new_state()
    _Builder(nfa, "").charset(ranges, start, end)
    return determinize(nfa, start, end, max_states=1_000_000)


def _charset(op: Any, av: Any, flags: int) -> RangeSet:
    """The code points one character node matches under ``flags``."""
    if op is C.ANY:
        if flags & _S:
            return ((0, MAX_CODEPOINT),)
        return ((0, 9), (11, MAX_CODEPOINT))
    if op is C.LITERAL and not flags & _I:
        return ((av, av),)
    if op is C.LITERAL and av < 0x80:  # a keyword's letter under IGNORECASE
        return ascii_ignorecase_set(av, bool(flags & _A))
    items = [(C.LITERAL, av)] if op in (C.LITERAL, C.NOT_LITERAL) else list(av)
    return _class_set(tuple(items), op is C.NOT_LITERAL, flags & (_I | _A))


@functools.lru_cache(maxsize=4096)
def _class_set(items: tuple[tuple[Any, Any], ...], not_literal: bool, flags: int) -> RangeSet:
    ascii_only = bool(flags & _A)
    negate = not_literal
    ranges: list[tuple[int, int]] = []
    has_category = False
    for op, av in items:
        if op is C.NEGATE:
            negate = not negate
        elif op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(av)
        elif op is C.CATEGORY:
            has_category = True
            ranges.extend(category_set(_CATEGORY_ESCAPES[av], ascii_only))
        else:
            raise GrammarError(f"unsupported item {op} in a character class")
    exact = normalize(ranges)
    if negate:
        exact = complement(exact)
    if flags & _I and (has_category or may_change_with_case(normalize(ranges))):
        exact = ignorecase_set(exact, _class_source(items, not_literal), flags & _A)
    return exact


def _class_source(items: tuple[tuple[Any, Any], ...], negate: bool) -> str:
    """Re-serialise a class as pattern text (to let ``re`` decide case-insensitive membership)."""
    parts = []
    for op, av in items:
        if op is C.NEGATE:
            negate = not negate
        elif op is C.LITERAL:
            parts.append(_esc(av))
        elif op is C.RANGE:
            parts.append(f"{_esc(av[0])}-{_esc(av[1])}")
        else:
            parts.append(_CATEGORY_ESCAPES[av])
    if len(items) == 1 and items[0][0] is C.LITERAL and not negate:
        return _esc(items[0][1])
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _esc(c: int) -> str:
    return f"\\U{c:08x}"
