"""Regexes over the JSON text of strings: characters, literals, key sets, ``pattern`` and lengths.

Characters inside a string are sets of code points, encoded as the JSON text that decodes to them.
Constrained strings (a ``pattern``, a literal, a property name) use the forms ``json.dumps`` writes
(raw characters, the short escapes, ``\\u00XX`` for control characters, ``\\/`` for ``/``); plain
strings also accept every ``\\uXXXX`` escape, surrogate pairs counted as one character.

``pattern`` is JSON Schema's (ECMA 262) regex, which ``jsonschema`` runs with Python's ``re.search``.
Where the two dialects differ the translation takes what both accept (``\\d`` is ``[0-9]``, ``.``
excludes all four line terminators, ``$`` is the end of the string), so a string accepted here
passes both; constructs that are not regular or have no exact translation are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache, partial
from typing import Any

import numpy as np

from ...automata import DFA, difference, regex_to_dfa
from ...automata.charsets import category_set
from ...automata.ops import from_strings, repeat
from ...automata.regex import _literal_set
from ...automata.regex import parse as parse_regex
from ...automata.sre import C as sre_c
from ...automata.sre import parse as sre_parse
from ...cache import Lru, automaton
from ...errors import UnsupportedSchemaError
from ...ir.builder import Pat

__all__ = [
    "ANY_CHAR",
    "NOTHING",
    "encode_set",
    "key_not_in",
    "key_not_in_dfa",
    "key_not_in_terminal",
    "literal",
    "pattern_regex",
    "plain_bounds",
    "plain_string",
    "quoted_plain_dfa",
]

MAXC = 0x10FFFF
Ranges = list[tuple[int, int]]

NOTHING = r"[^\x00-\U0010ffff]"  # the empty language, without lookaround
ANY_CHAR = (
    r'(?:[^"\\\x00-\x1f\ud800-\udfff]|\\(?:["\\/bfnrt]|u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}'
    r"|[dD][0-7][0-9a-fA-F]{2}|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})))"
)
_SHORT = {0x22: '"', 0x5C: r"\\", 0x2F: r"\/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_ECMA_SPACE: Ranges = [
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
    (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
]  # fmt: skip


def _norm(r: Iterable[tuple[int, int]]) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(r):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(r: Ranges) -> Ranges:
    out: Ranges = []
    prev = 0
    for lo, hi in _norm(r):
        if lo > prev:
            out.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXC:
        out.append((prev, MAXC))
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    return _complement(_complement(a) + _complement(b))


def _py_set(kind: str) -> tuple[tuple[int, int], ...]:
    """Code points Python's ``re`` puts in ``\\d`` / ``\\w`` / ``\\s`` (str patterns), asked of ``re``
    once per installation (:func:`grammarmask.automata.charsets.category_set`: a scan of every code
    point took 130-150 ms of a process's first schema with ``\\d`` in a ``pattern``)."""
    return category_set(f"\\{kind}", False)


def _category(cat: Any, superset: bool) -> Ranges:
    """A category as code points: the intersection of both dialects, or their union if ``superset``."""
    name = str(cat).upper()
    neg = "NOT_" in name
    kind = "d" if "DIGIT" in name else "w" if "WORD" in name else "s" if "SPACE" in name else ""
    if not kind:
        raise ValueError(name)
    ecma = {"d": [(0x30, 0x39)], "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]}.get(
        kind, _ECMA_SPACE
    )
    py = list(_py_set(kind))
    # For a positive category the small set is the intersection; negated, the complement of the union.
    if neg:
        return _complement(_norm(ecma + py)) if not superset else _complement(_intersect(ecma, py))
    return _intersect(ecma, py) if not superset else _norm(ecma + py)


def _class_char(cp: int) -> str:
    if 0x30 <= cp <= 0x39 or 0x41 <= cp <= 0x5A or 0x61 <= cp <= 0x7A:
        return chr(cp)
    if 0x20 <= cp < 0x7F:  # lark turns \xNN into the raw character, so escape punctuation directly
        return "\\" + chr(cp)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _hex_digit(n: int) -> str:
    h = f"{n:x}"
    return f"[{h}{h.upper()}]" if h.isalpha() else h


def encode_set(r: Ranges) -> str | None:
    """Regex for the JSON text of one character from the set ``r`` (None if empty)."""
    return _encode_set(tuple(_norm(r)))


@lru_cache(maxsize=8192)  # key exclusions ask for "all but these few characters" over and over
def _encode_set(key: tuple[tuple[int, int], ...]) -> str | None:
    r = list(key)
    banned: Ranges = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0xD800, 0xDFFF)]
    raw = _intersect(r, _complement(banned))
    alts: list[str] = []
    if raw:
        alts.append(_class(raw, _norm(_complement(raw))))
    shorts = [short for cp, short in _SHORT.items() if _contains(r, cp)]
    escapes: list[str] = []
    if shorts:
        escapes.append(shorts[0] if len(shorts) == 1 else "[" + "".join(shorts) + "]")
    controls = [cp for lo, hi in r if lo < 0x20 for cp in range(lo, min(hi, 0x1F) + 1)]
    if len(controls) == 0x20:
        escapes.append(f"u00[01]{_HEXD}")
    else:
        for hi in (0, 1):
            lows = [cp & 0xF for cp in controls if cp >> 4 == hi]
            if lows:
                escapes.append(
                    f"u00{hi}"
                    + (
                        _hex_digit(lows[0])
                        if len(lows) == 1
                        else "(?:" + "|".join(_hex_digit(n) for n in lows) + ")"
                    )
                )
    if escapes:
        alts.append(r"\\" + (escapes[0] if len(escapes) == 1 else "(?:" + "|".join(escapes) + ")"))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


_HEXD = "[0-9a-fA-F]"


def _ranges_text(r: Ranges) -> str:
    return "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in r)


def _class(r: Ranges, comp: Ranges) -> str:
    """A character class for ``r``, written negated when that is shorter."""
    if len(r) == 1 and r[0][0] == r[0][1]:
        return re.escape(chr(r[0][0])) if 0x20 <= r[0][0] < 0x7F else f"[{_ranges_text(r)}]"
    pos, neg = f"[{_ranges_text(r)}]", f"[^{_ranges_text(comp)}]"
    return neg if len(neg) < len(pos) and comp else pos


def _contains(r: Ranges, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in r)


def literal(s: str) -> str:
    """Regex for the JSON text (without quotes) of the string ``s``."""
    return "".join(_char(c) for c in s)


@lru_cache(maxsize=4096)
def _char(c: str) -> str:
    return encode_set([(ord(c), ord(c))]) or ""


@lru_cache(maxsize=65536)
def _char_forms(c: str) -> tuple[bytes, ...] | None:
    """The UTF-8 texts ``_char(c)`` matches (a character and its escapes), or None if not finite."""
    spelled = _char(c)
    found = _literal_set(parse_regex(spelled), 0) if spelled else None
    return None if found is None else tuple(sorted(x.encode("utf-8") for x in found))


_MAX_FORMS = 64  # spellings of one word kept in the trie (each "/" or control character doubles them)


def words_terminal(words: Iterable[str]) -> tuple[Pat | None, list[str]]:
    """One terminal for the quoted JSON texts of many strings (an enum), compiled as a trie
    (:func:`~grammarmask.automata.ops.from_strings`) instead of a terminal per string; and the
    words left out (more than ``_MAX_FORMS`` spellings, or a character with no finite spelling)."""
    kept: list[str] = []
    rest: list[str] = []
    for w in words:
        (kept if _few_spellings(w) else rest).append(w)
    if not kept:
        return None, rest
    regex = '"(?:' + "|".join(literal(w) for w in kept) + ')"'
    return Pat(regex, partial(words_dfa, tuple(kept))), rest


def _few_spellings(w: str) -> bool:
    """Whether ``w``'s JSON text has at most ``_MAX_FORMS`` spellings, all finite."""
    n = 1
    for ch in w:
        forms = _char_forms(ch)
        n = n * len(forms) if forms is not None else _MAX_FORMS + 1
        if n > _MAX_FORMS:
            return False
    return True


#: DFAs of recent enums (16, within 64 MiB of tables: a 100,000-word enum's is 200 MB, and the
#: newest is kept even alone over the bound)
_WORDS_DFAS: Lru[tuple[str, ...], DFA] = Lru(16, max_bytes=64 << 20)


def words_dfa(words: tuple[str, ...]) -> DFA:
    """The DFA of ``words_terminal``'s regex: every spelling of every word, quoted, in a trie."""
    return _WORDS_DFAS.get_or_make(words, lambda: _words_dfa(words), lambda d: int(d.transitions.nbytes))


def _words_dfa(words: tuple[str, ...]) -> DFA:

    def spellings(w: str) -> list[bytes]:
        out = [b'"']
        for ch in w:
            out = [x + y for x in out for y in _char_forms(ch) or ()]
        return [x + b'"' for x in out]

    return from_strings(x for w in words for x in spellings(w))


def _group(alts: list[str]) -> str:
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


_DOT = encode_set(_complement(_LINE_TERMINATORS)) or ""
_ANY_CANON = encode_set([(0, MAXC)]) or ""


def key_not_in(words: Iterable[str]) -> str:
    """Regex for the JSON text of any string (canonical forms) that is not one of ``words``."""
    trie: dict[str, Any] = {}
    keys = tuple(sorted(set(words)))
    for w in keys:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[""] = True

    # When no key has a character with an escaped form, escapes never continue the trie: leaving it
    # by an escape is "any trie path, then an escape", written once instead of at every node.
    plain = all(ord(c) >= 0x20 and c not in '"\\/' for w in keys for c in w)

    def walk(node: dict[str, Any]) -> tuple[str | None, str, str | None]:
        """Three regexes of the trie below ``node`` (one pass: a schema's keys are read once):
        paths followed by one character that leaves the trie (the rest is free), or None; all
        paths; paths that are not words, or None."""
        deviate: list[str] = []
        paths: list[str] = []
        prefixes: list[str] = []
        kids = sorted(k for k in node if k)
        for k in kids:
            d, p, q = walk(node[k])
            lit = _char(k)
            if d is not None:
                deviate.append(lit + d)
            paths.append(lit + p)
            if q is not None:
                prefixes.append(lit + q)
        other = _other_char("".join(kids), plain)
        if other:
            deviate.append(other)
        paths.append("")
        if "" not in node:
            prefixes.append("")
        return (_group(deviate) if deviate else None, _group(paths),
                _group(prefixes) if prefixes else None)

    d, all_paths, p = walk(trie)
    parts = []
    if plain:
        esc = encode_set(_ESCAPED) or ""
        d = _group([x for x in (d, all_paths + esc) if x])
    if d is not None:
        parts.append(f"{d}{_ANY_CANON}*")
    if p is not None:
        parts.append(p)
    return _group(parts) if parts else NOTHING


@lru_cache(maxsize=8192)  # a key trie's nodes mostly go on by one character, asked over and over
def _other_char(kids: str, plain: bool) -> str | None:
    """Regex for one character that is none of ``kids`` (and, if ``plain``, not one with an escaped
    form: see :func:`key_not_in`); None if there is none."""
    out = _complement([(ord(k), ord(k)) for k in kids])
    if plain:  # raw characters only; "/" is raw-only here and its escape joins the shared part
        out = _intersect(out, _complement(_ESCAPED))
    return encode_set(out)


_ESCAPED: Ranges = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x2F, 0x2F)]  # characters with an escape


def key_not_in_terminal(words: Iterable[str]) -> Pat:
    """The terminal of any quoted JSON string (canonical forms) that is not one of ``words``: the
    regex of :func:`key_not_in`, whose DFA is built as a difference instead (same language, linear
    in the total key length where the regex's subset construction is not)."""
    keys = tuple(sorted(set(words)))
    regex = f'"{key_not_in(keys)}"'
    if any(0xD800 <= ord(c) <= 0xDFFF for w in keys for c in w):
        return Pat(regex)
    return Pat(regex, partial(key_not_in_dfa, keys))


def key_not_in_dfa(words: tuple[str, ...]) -> DFA:
    """The DFA of ``"`` ``key_not_in(words)`` ``"``: any quoted string (canonical forms) minus the
    quoted JSON texts of ``words``, as a product automaton (linear in the total key length). Built
    once for every compile of a schema with the same declared keys, while the process-wide cache of
    automata keeps it."""
    return automaton(("key_not_in", words), lambda: _key_not_in_dfa(words))


def _key_not_in_dfa(words: tuple[str, ...]) -> DFA:
    anything = regex_to_dfa(f'"{_ANY_CANON}*"')
    if not words:
        return anything
    if all(map(_few_spellings, words)):  # the trie of their spellings: no regex written and parsed
        taken = _words_dfa(words)
    else:
        taken = regex_to_dfa('"(?:' + "|".join(literal(w) for w in words) + ')"', max_states=1_000_000)
    return difference(anything, taken)


# ---- pattern translation ---------------------------------------------------------------------------


class _Refuse(Exception):
    pass


def _in_set(items: list[tuple[Any, Any]], superset: bool) -> Ranges:
    neg = False
    out: Ranges = []
    for op, av in items:
        if op is sre_c.NEGATE:
            neg = True
        elif op is sre_c.LITERAL:
            out.append((av, av))
        elif op is sre_c.RANGE:
            out.append((av[0], av[1]))
        elif op is sre_c.CATEGORY:
            out += _category(av, superset != neg)
        else:
            raise _Refuse(f"class item {op}")
    return _complement(out) if neg else _norm(out)


def _translate(sub: Any) -> tuple[str, int, int | None]:
    """(regex over JSON text, min chars, max chars) of a parsed pattern sequence."""
    parts: list[str] = []
    lo: int = 0
    hi: int | None = 0
    a: int
    b: int | None
    for op, av in sub:
        if op is sre_c.LITERAL:
            r, a, b = encode_set([(av, av)]) or NOTHING, 1, 1
        elif op is sre_c.NOT_LITERAL:
            r, a, b = encode_set(_complement([(av, av)])) or NOTHING, 1, 1
        elif op is sre_c.IN:
            r, a, b = encode_set(_in_set(av, False)) or NOTHING, 1, 1
        elif op is sre_c.ANY:
            r, a, b = _DOT, 1, 1
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            rmin, rmax, body = av
            inner, ia, ib = _translate(body)
            top = None if rmax is sre_c.MAXREPEAT else rmax
            r = f"(?:{inner})" + (
                "*"
                if (rmin, top) == (0, None)
                else "+"
                if (rmin, top) == (1, None)
                else "?"
                if (rmin, top) == (0, 1)
                else f"{{{rmin},}}"
                if top is None
                else f"{{{rmin},{top}}}"
            )
            a, b = ia * rmin, (None if top is None or ib is None else ib * top)
            if top == 0:
                r, a, b = "", 0, 0
        elif op is sre_c.SUBPATTERN:
            if av[1] or av[2]:
                raise _Refuse("inline flags")
            inner, a, b = _translate(av[3])
            r = f"(?:{inner})"
        elif op is sre_c.BRANCH:
            branches = [_translate(s) for s in av[1]]
            r = "(?:" + "|".join(x[0] for x in branches) + ")"
            a = min(x[1] for x in branches)
            tops = [x[2] for x in branches]
            b = None if None in tops else max(t for t in tops if t is not None)
        else:
            raise _Refuse(f"{op}".lower())
        parts.append(r)
        lo += a
        hi = None if hi is None or b is None else hi + b
    return "".join(parts), lo, hi


_START = {sre_c.AT_BEGINNING, sre_c.AT_BEGINNING_STRING}
_END = {sre_c.AT_END, sre_c.AT_END_STRING}


def _branches(parsed: Any) -> list[Any]:
    items = list(parsed)
    if len(items) == 1 and items[0][0] is sre_c.BRANCH:
        return [list(b) for b in items[0][1][1]]
    if len(items) == 1 and items[0][0] is sre_c.SUBPATTERN and not (items[0][1][1] or items[0][1][2]):
        inner = list(items[0][1][3])
        if len(inner) == 1 and inner[0][0] is sre_c.BRANCH:
            return [list(b) for b in inner[0][1][1]]
    return [items]


def _anchored(seq: list[Any]) -> tuple[bool, bool, list[Any]]:
    start = bool(seq) and seq[0][0] is sre_c.AT and seq[0][1] in _START
    if start:
        seq = seq[1:]
    end = bool(seq) and seq[-1][0] is sre_c.AT and seq[-1][1] in _END
    if end:
        seq = seq[:-1]
    if len(seq) == 1 and seq[0][0] is sre_c.SUBPATTERN and not (seq[0][1][1] or seq[0][1][2]):
        s2, e2, inner = _anchored(list(seq[0][1][3]))
        if s2 or e2:
            return start or s2, end or e2, inner
    return start, end, seq


def pattern_regex(
    pattern: str, pointer: str, min_len: int = 0, max_len: int | None = None
) -> tuple[str, bool]:
    """Regex for the JSON text of strings in which ``pattern`` is found (``re.search``).

    Returns (regex, lengths_enforced). Lengths are enforced when the pattern makes them redundant or
    when they fold into the pattern's one variable repetition; otherwise the caller must refuse.
    """
    try:
        parsed = sre_parse(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise UnsupportedSchemaError(
            f"pattern {pattern!r} is not a Python regex: {e}", keyword="pattern", pointer=pointer
        ) from None
    if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.ASCII | re.LOCALE):
        raise UnsupportedSchemaError(
            f"pattern {pattern!r} sets regex flags", keyword="pattern", pointer=pointer
        )
    try:
        alts = []
        widths = []
        for seq in _branches(parsed):
            start, end, body = _anchored(seq)
            r, a, b = _translate(body)
            pre, post = ("" if start else f"{_ANY_CANON}*"), ("" if end else f"{_ANY_CANON}*")
            alts.append(pre + r + post)
            widths.append((a, b if start and end else None))
    except (_Refuse, ValueError) as e:
        raise UnsupportedSchemaError(
            f"pattern {pattern!r} uses a construct with no exact regular translation ({e})",
            keyword="pattern",
            pointer=pointer,
        ) from None
    regex = _group(alts)
    lengths_ok = all(
        a >= min_len and (max_len is None or (b is not None and b <= max_len)) for a, b in widths
    )
    if not lengths_ok and len(alts) == 1 and (min_len or max_len is not None):
        folded = _fold_lengths(_branches(parsed)[0], min_len, max_len)
        if folded is not None:
            return folded, True
    return regex, lengths_ok


def _fold_lengths(seq: list[Any], min_len: int, max_len: int | None) -> str | None:
    """``^ fixed* (single-char class){m,n} fixed* $`` with the length bounds moved into {m,n}."""
    start, end, body = _anchored(seq)
    if not (start and end):
        return None
    fixed = 0
    var = None
    for i, (op, av) in enumerate(body):
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            inner = _translate(av[2])
            if var is not None or inner[1] != 1 or inner[2] != 1:
                return None
            var = i
        else:
            _, a, b = _translate([(op, av)])
            if a != b:
                return None
            fixed += a
    if var is None:
        return None
    rmin, rmax, item = body[var][1]
    top = None if rmax is sre_c.MAXREPEAT else rmax
    lo = max(rmin, min_len - fixed)
    hi = top if max_len is None else (max_len - fixed if top is None else min(top, max_len - fixed))
    if hi is not None and lo > hi:
        return NOTHING
    unit = _translate(item)[0]
    rep = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    left = _translate(body[:var])[0]
    right = _translate(body[var + 1 :])[0]
    return f"{left}(?:{unit}){rep}{right}"


def plain_string(min_len: int, max_len: int | None) -> str:
    """Regex for the JSON text of any string of min_len..max_len characters."""
    if (min_len, max_len) == (0, None):
        return f"{ANY_CHAR}*"
    rep = f"{{{min_len},}}" if max_len is None else f"{{{min_len},{max_len}}}"
    return f"{ANY_CHAR}{rep}"


_PLAIN = re.compile('"' + re.escape(ANY_CHAR) + r'(?:\*|\{(\d+),(\d*)\})"')


def plain_bounds(regex: str) -> tuple[int, int | None] | None:
    """``(lo, hi)`` if ``regex`` is a quoted :func:`plain_string` (``"`` + characters{lo,hi} + ``"``;
    ``hi`` None: no upper bound), else None. A regular-expression match: builds nothing."""
    m = _PLAIN.fullmatch(regex)
    if m is None:
        return None
    lo = int(m.group(1) or 0)
    return lo, None if m.group(1) is None or not m.group(2) else int(m.group(2))


def quoted_plain_dfa(regex: str, max_states: int = 10_000) -> DFA | None:
    """The DFA of ``regex`` if it is a quoted :func:`plain_string` (:func:`plain_bounds`), built
    straight from one character's DFA (automata.ops.repeat: a JSON character is prefix-free, so no
    subset construction: ~20 ms instead of ~0.4 s for {0,256}); None for any other regex. Past
    ``max_states`` states (the default is :func:`regex_to_dfa`'s) it raises GrammarError."""
    bounds = plain_bounds(regex)
    if bounds is None:
        return None
    return automaton(("quoted_plain", *bounds, max_states), lambda: _quoted_plain(*bounds, max_states))


def _quoted_plain(lo: int, hi: int | None, max_states: int) -> DFA:
    body = repeat(regex_to_dfa(ANY_CHAR), lo, hi, max_states=max_states - 2)
    t, acc = body.transitions, body.accepting
    n = body.n_states
    quote = ord('"')
    if t[acc, quote].any():  # pragma: no cover - a raw quote is no JSON character
        raise AssertionError("a string's characters include a raw quote")
    table = np.zeros((n + 2, 256), np.int32)
    table[:n] = t
    table[n, quote] = body.start  # the opening quote
    table[:n][acc, quote] = n + 1  # the closing one, where the characters may end
    accepting = np.zeros(n + 2, np.bool_)
    accepting[n + 1] = True
    return DFA(table, accepting, n)
