"""Structural tags: free text until one of several trigger strings, then a tag (begin, a body grammar,
end), any number of times (tool calling); and XGrammar's / vLLM's structural-tag JSON, both formats.

A structural tag is a graph of parts run by the exact concatenation machinery of
:mod:`grammarmask.sequence`: free text (UTF-8 text holding no trigger and no excluded string), each
tag's begin, body and end, and edges saying which part may follow which. Where one part ends and the
next starts may be ambiguous and a token may straddle several parts; masks stay exact.

The JSON forms accepted by :meth:`StructuralTag.from_json` (a dict or its JSON text):

- legacy (XGrammar's first API, vLLM's ``structural_tag`` request):
  ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}``;
- current (XGrammar's ``format`` tree): ``{"type": "structural_tag", "format": {...}}`` with the
  formats ``const_string``, ``json_schema`` (style ``json``), ``grammar`` (GBNF/EBNF text),
  ``regex``, ``any_text`` (``excludes``), ``sequence``, ``or``, ``optional``, ``plus``, ``star``,
  ``repeat``, ``tag``, ``triggered_tags`` (whose tags may also begin with a token, an extension),
  ``tags_with_separator``, ``dispatch`` and ``token`` (a special token by name or id). A ``tag``'s end
  is excluded from an ``any_text``, ``triggered_tags`` or ``dispatch`` inside it, as in XGrammar.
  Every other format or option (the token-level ``any_tokens``,
  ``exclude_token``, ``token_triggered_tags``, ``token_dispatch``, ``max_tokens``, ``max_chars``,
  non-JSON ``style``, ``any_order``) is a :class:`GrammarError` naming it and where it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..automata import DFA, difference, literal_dfa, regex_to_dfa
from ..automata import concat as concat_dfa
from ..compose import Union
from ..engine import compile_dfa
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar, Wrapped
from ..sequence import Repeat, _SequenceCompiled, byte_extended
from ..sequence import Sequence as Concat
from ..vocab import Vocabulary
from .special_token import SpecialToken

__all__ = ["StructuralTag", "Tag", "free_text"]

Graph = tuple[tuple[int, ...], list[tuple[int, ...]], frozenset[int]]


class _Dfa(Grammar):
    """A regular language given as a byte DFA (free text, literals)."""

    def __init__(
        self, dfa: DFA, key: Hashable, label: str, specials: frozenset[str | int] = frozenset()
    ) -> None:
        self.dfa, self.key, self.label, self.specials = dfa, key, label, specials

    def __repr__(self) -> str:
        return self.label

    def cache_key(self) -> Hashable:
        return self.key

    def special_tokens(self) -> frozenset[str | int]:
        return self.specials

    def to_dfa(self) -> DFA:
        return self.dfa

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return compile_dfa(self.dfa, vocab)


def literal(text: str) -> Grammar:
    """Exactly ``text``."""
    return _Dfa(literal_dfa(text.encode("utf-8")), ("literal", text), f"literal({text!r})")


_EMPTY = literal("")


def free_text(excludes: Sequence[str] = ()) -> Grammar:
    """Any UTF-8 text that contains none of ``excludes`` (special tokens are never text)."""
    ex = sorted({e for e in excludes if e})
    any_text = regex_to_dfa(r"(?s).*")
    if not ex:
        return _Dfa(any_text, ("free", ()), "free_text()")
    bad = regex_to_dfa(r"(?s).*(?:" + "|".join(re.escape(e) for e in ex) + r").*")
    return _Dfa(difference(any_text, bad), ("free", tuple(ex)), f"free_text(excludes={ex!r})")


class _Graph(Grammar):
    """Parts joined by a graph (see :class:`grammarmask.sequence._SequenceCompiled`)."""

    def __init__(self, parts: Sequence[Grammar], graph: Graph, label: str) -> None:
        self.parts = tuple(parts)
        self.graph = (tuple(graph[0]), [tuple(f) for f in graph[1]], frozenset(graph[2]))
        self.label = label

    def __repr__(self) -> str:
        return self.label

    def cache_key(self) -> Hashable | None:
        keys = [p.cache_key() for p in self.parts]
        if any(k is None for k in keys):
            return None
        starts, following, final = self.graph
        kinds = tuple(type(p).__qualname__ for p in self.parts)
        return (kinds, tuple(keys), starts, tuple(following), tuple(sorted(final)))

    def special_tokens(self) -> frozenset[str | int]:
        return frozenset().union(*(p.special_tokens() for p in self.parts))

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        ext = byte_extended(vocab)
        compiled, dfas = [], []
        for p in self.parts:
            d = p.to_dfa()
            compiled.append(compile_dfa(d, ext) if d is not None else p.compile(ext))
            dfas.append(d)
        return _SequenceCompiled(vocab, ext, compiled, dfas, self.graph)


def _loop(x: Grammar, lo: int, hi: int | None) -> Grammar:
    """``x`` repeated ``lo`` to ``hi`` times (None: unbounded)."""
    if hi is not None and hi < lo:
        raise GrammarError(f"repeat: need min <= max (or max = -1), got {lo}..{hi}")
    return _EMPTY if hi == 0 else Repeat(x, lo, hi)


End = str | SpecialToken | Sequence[str]


@dataclass(frozen=True)
class Tag:
    """One tag: ``begin``, then ``content``, then ``end``.

    ``begin`` is text or a :class:`~grammarmask.SpecialToken`; ``content`` is any grammar (a dict is
    a JSON Schema; None is free text up to ``end``); ``end`` is text, a special token, or a list of
    alternative texts.
    """

    begin: str | SpecialToken
    content: Grammar | Mapping[str, Any] | bool | None
    end: End

    def ends(self) -> list[str]:
        if isinstance(self.end, str):
            return [self.end]
        if isinstance(self.end, SpecialToken):
            return []
        return list(self.end)

    def grammar(self) -> tuple[Grammar, Grammar, Grammar]:
        """The tag's begin, content and end as grammars."""
        return _piece(self.begin, "begin"), _content(self.content, self.ends()), _end(self.end)


def _piece(x: str | SpecialToken, what: str) -> Grammar:
    if isinstance(x, SpecialToken):
        return x
    if isinstance(x, str):
        return literal(x)
    raise GrammarError(f"a tag's {what} must be a str or a SpecialToken, got {type(x).__name__}")


def _end(end: End) -> Grammar:
    if isinstance(end, (str, SpecialToken)):
        return _piece(end, "end")
    ends = list(end)
    if not ends or not all(isinstance(e, str) for e in ends):
        raise GrammarError(f"a tag's end must be a str, a SpecialToken or a list of str, got {end!r}")
    alts = [literal(e) for e in dict.fromkeys(ends)]
    return alts[0] if len(alts) == 1 else Union(*alts)


def _content(content: Grammar | Mapping[str, Any] | bool | None, ends: list[str]) -> Grammar:
    if content is None:
        return free_text(ends)
    if isinstance(content, Grammar):
        return content
    if isinstance(content, (Mapping, bool)):
        from .json_schema import JsonSchema

        return JsonSchema(dict(content) if isinstance(content, Mapping) else content)
    raise GrammarError(
        f"a tag's content must be a Grammar, a JSON Schema dict or None, got {type(content).__name__}"
    )


def _as_tag(t: Tag | tuple[Any, Any, Any]) -> Tag:
    if isinstance(t, Tag):
        return t
    if isinstance(t, tuple) and len(t) == 3:
        return Tag(*t)
    raise GrammarError(f"a tag must be a Tag or a (begin, content, end) tuple, got {t!r:.80}")


def triggered_tags(
    tags: Sequence[Tag],
    triggers: Sequence[str] | None = None,
    *,
    at_least_one: bool = False,
    stop_after_first: bool = False,
    excludes: Sequence[str] = (),
) -> Grammar:
    """Free text until a trigger, then one of ``tags``, then free text again (module docstring)."""
    if not tags:
        raise GrammarError("structural tag: no tags given")
    text_begins = [t.begin for t in tags if isinstance(t.begin, str)]
    trig = list(dict.fromkeys(text_begins if triggers is None else triggers))
    if not all(isinstance(x, str) and x for x in trig):
        raise GrammarError(f"structural tag: triggers must be non-empty strings, got {trig!r}")
    for begin in text_begins:
        if not any(begin.startswith(x) for x in trig):
            raise GrammarError(
                f"structural tag: the tag begin {begin!r} starts with none of the triggers {trig!r}"
            )
    # Parts: free text alone (the output's end), and per tag "free text then begin" (one automaton
    # when both are regular, so no token-crossing work at the trigger), body, end; with at_least_one
    # also the bare begin that opens the output.
    text = free_text([*trig, *excludes])
    parts: list[Grammar] = [text]
    following: list[tuple[int, ...]] = [()]
    opened, bare, ends = [], [], []
    for t in tags:
        b, c, e = t.grammar()
        k = len(parts)
        parts += [_then(text, b), c, e]
        following += [(k + 1,), (k + 2,), ()]
        opened.append(k)
        ends.append(k + 2)
        if at_least_one:
            bare.append(len(parts))
            parts.append(b)
            following.append((k + 1,))
    for end in ends:
        following[end] = () if stop_after_first else (*opened, 0)
    if at_least_one:
        starts = tuple(bare)
        final = set(ends) if stop_after_first else {0}
    else:
        starts = (*opened, 0)
        final = {0, *ends} if stop_after_first else {0}
    label = f"triggered_tags({len(tags)} tags, triggers={trig!r})"
    return _Graph(parts, (starts, following, frozenset(final)), label)


def _then(a: Grammar, b: Grammar) -> Grammar:
    """``a`` then ``b``: one automaton when both are regular and it stays small, else a sequence."""
    da, db = a.to_dfa(), b.to_dfa()
    if da is not None and db is not None:
        try:
            specials = a.special_tokens() | b.special_tokens()  # the DFA spells them: still named
            return _Dfa(concat_dfa(da, db), ("then", a.cache_key(), b.cache_key()), f"({a!r} + {b!r})",
                        specials)
        except GrammarError:
            pass
    return Concat(a, b)


def tags_with_separator(
    tags: Sequence[Tag], separator: str, *, at_least_one: bool = False, stop_after_first: bool = False
) -> Grammar:
    """Tags separated by ``separator`` and nothing else (at least one tag when ``at_least_one``;
    one at most when ``stop_after_first``)."""
    if not tags:
        raise GrammarError("structural tag: tags_with_separator has no tags")
    parts: list[Grammar] = [_EMPTY, literal(separator)]
    following: list[tuple[int, ...]] = [(), ()]
    begins, ends = [], []
    for t in tags:
        b, c, e = t.grammar()
        k = len(parts)
        parts += [b, c, e]
        following += [(k + 1,), (k + 2,), () if stop_after_first else (1,)]
        begins.append(k)
        ends.append(k + 2)
    following[1] = tuple(begins)
    starts = tuple(begins) if at_least_one else (0, *begins)
    final = set(ends) if at_least_one else {0, *ends}
    return _Graph(parts, (starts, following, frozenset(final)), f"tags_with_separator({separator!r})")


class StructuralTag(Wrapped):
    """Free text until one of several triggers, then a tag's begin, body grammar and end, any
    number of times (tool calling); or any XGrammar structural-tag format (:meth:`from_json`).

    Parameters
    ----------
    tags
        :class:`Tag` objects or ``(begin, content, end)`` tuples: ``content`` a :class:`Grammar`,
        a JSON Schema dict, or None (free text up to the end).
    triggers
        Strings that start a tag: free text never contains them, and each text ``begin`` starts
        with one. None: the begins themselves. Special-token begins need no trigger (free text never
        holds a special token).
    at_least_one
        At least one tag, and no free text before the first.
    stop_after_first
        Nothing after the first tag.
    excludes
        Strings free text may not contain either.

    Examples
    --------
    Two tools, called as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``::

        tag = gm.StructuralTag(
            [(f'<tool_call>{{"name": "{n}", "arguments": ', schema, "}</tool_call>") for n, schema in tools],
            triggers=["<tool_call>"],
        )

    Raises
    ------
    GrammarError
        No tags; a trigger that is not a non-empty string; a text begin that starts with no trigger;
        a tag whose parts have the wrong types; and from :meth:`from_json`, anything unsupported
        (with its JSON path). Unknown special tokens fail at compile time.
    """

    def __init__(
        self,
        tags: Sequence[Tag | tuple[Any, Any, Any]],
        *,
        triggers: Sequence[str] | None = None,
        at_least_one: bool = False,
        stop_after_first: bool = False,
        excludes: Sequence[str] = (),
    ) -> None:
        if isinstance(tags, (str, bytes, Mapping)) or not isinstance(tags, Sequence):
            raise GrammarError(f"StructuralTag: tags must be a list of tags, got {type(tags).__name__}")
        if isinstance(triggers, str):
            raise GrammarError("StructuralTag: triggers must be a list of strings, got one str")
        self.grammar: Grammar = triggered_tags(
            [_as_tag(t) for t in tags], triggers, at_least_one=at_least_one,
            stop_after_first=stop_after_first, excludes=list(excludes),
        )

    @classmethod
    def from_grammar(cls, grammar: Grammar) -> StructuralTag:
        """Wrap an already-built grammar (used by :meth:`from_json`)."""
        self = cls.__new__(cls)
        self.grammar = grammar
        return self

    @classmethod
    def from_json(cls, spec: str | Mapping[str, Any]) -> StructuralTag:
        """XGrammar's or vLLM's structural-tag JSON (a dict or its text), legacy or ``format`` form.

        Raises
        ------
        GrammarError
            Not JSON, not ``"type": "structural_tag"``, a missing or mistyped field, or a format or
            option that is not supported: the message gives the JSON path.
        """
        from .structural_tag_json import parse

        return cls.from_grammar(parse(spec))

    def __repr__(self) -> str:
        return f"StructuralTag({self.grammar!r})"


def concat(parts: Sequence[Grammar]) -> Grammar:
    """The parts one after another (one part: itself; none: the empty string)."""
    if not parts:
        return _EMPTY
    return parts[0] if len(parts) == 1 else Concat(*parts)


def loads(spec: str | Mapping[str, Any]) -> Any:
    if isinstance(spec, (str, bytes)):
        try:
            return json.loads(spec)
        except ValueError as e:
            raise GrammarError(f"structural tag: not valid JSON: {e}") from None
    return spec
