"""XGrammar's structural-tag JSON (legacy ``structures`` and current ``format`` forms, which vLLM
passes through) to grammars; see :mod:`grammarmask.frontends.structural_tag` for what is supported."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..compose import Union
from ..errors import GrammarError
from ..grammar import Grammar
from .special_token import SpecialToken
from .structural_tag import (
    Tag,
    _loop,
    concat,
    free_text,
    literal,
    loads,
    tags_with_separator,
    triggered_tags,
)

__all__ = ["parse"]

_FORMATS = (
    "const_string", "json_schema", "grammar", "regex", "any_text", "sequence", "or", "optional", "plus",
    "star", "repeat", "tag", "triggered_tags", "tags_with_separator", "token", "dispatch",
)
_UNSUPPORTED = {
    "token_dispatch": "token-level dispatch",
    "token_triggered_tags": "token-level triggered tags",
    "any_tokens": "token-level any_tokens",
    "exclude_token": "token-level exclude_token",
}


def parse(spec: str | Mapping[str, Any]) -> Grammar:
    """The grammar of a structural-tag JSON document (dict or text)."""
    doc = loads(spec)
    if not isinstance(doc, Mapping):
        raise GrammarError(f"structural tag: expected a JSON object, got {type(doc).__name__}")
    kind = doc.get("type", "structural_tag")
    if kind != "structural_tag":
        raise GrammarError(f'structural tag: "type" must be "structural_tag", got {kind!r}')
    if "format" in doc:
        return _Parser().format(doc["format"], "format", ends=[])
    if "structures" in doc:
        return _legacy(doc)
    raise GrammarError('structural tag: expected a "format" object or "structures" and "triggers"')


def _legacy(doc: Mapping[str, Any]) -> Grammar:
    structures = _list(doc, "structures", "")
    triggers = _list(doc, "triggers", "")
    tags = []
    for i, s in enumerate(structures):
        where = f"structures[{i}]"
        if not isinstance(s, Mapping):
            raise GrammarError(f"structural tag: {where} must be an object")
        schema = s.get("schema", s.get("parameters", True))
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise GrammarError(f"structural tag: {where}.schema is not valid JSON: {e}") from None
        tags.append(Tag(_str(s, "begin", where), schema, _str(s, "end", where)))
    for i, t in enumerate(triggers):
        if not isinstance(t, str) or not t:
            raise GrammarError(f"structural tag: triggers[{i}] must be a non-empty string, got {t!r}")
    return triggered_tags(tags, triggers)


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    v = obj.get(key)
    if not isinstance(v, list):
        at = f"{where}.{key}" if where else key
        raise GrammarError(f"structural tag: {at} must be a list, got {type(v).__name__}")
    return v


def _str(obj: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    v = obj.get(key, default)
    if not isinstance(v, str):
        raise GrammarError(f"structural tag: {where}.{key} must be a string, got {v!r:.60}")
    return v


def _bool(obj: Mapping[str, Any], key: str, where: str) -> bool:
    v = obj.get(key, False)
    if not isinstance(v, bool):
        raise GrammarError(f"structural tag: {where}.{key} must be true or false, got {v!r}")
    return v


def _int(obj: Mapping[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if type(v) is not int:
        raise GrammarError(f"structural tag: {where}.{key} must be an integer, got {v!r}")
    return v


def _token(value: Any, where: str) -> SpecialToken:
    if isinstance(value, Mapping):  # {"type": "token", "token": ...}
        if value.get("type") != "token":
            raise GrammarError(f'structural tag: {where} must be a string or a {{"type": "token"}} object')
        value = value.get("token")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise GrammarError(f"structural tag: {where}: a token is a name or an id, got {value!r}")
    return SpecialToken(value)


class _Parser:
    """One ``format`` tree: each format object to a grammar. ``ends`` are the enclosing tag's end
    strings, excluded from unlimited formats (``any_text``, ``triggered_tags``) inside it."""

    def format(self, obj: Any, where: str, ends: list[str]) -> Grammar:
        if not isinstance(obj, Mapping):
            raise GrammarError(f"structural tag: {where} must be a format object, got {type(obj).__name__}")
        kind = obj.get("type")
        if kind in _UNSUPPORTED:
            raise GrammarError(f"structural tag: {where}: {_UNSUPPORTED[kind]} ({kind!r}) is not supported")
        if kind not in _FORMATS:
            known = ", ".join(_FORMATS)
            raise GrammarError(f"structural tag: {where}: unknown format type {kind!r} (supported: {known})")
        handler: Callable[[Mapping[str, Any], str, list[str]], Grammar] = getattr(self, f"_{kind}")
        return handler(obj, where, ends)

    def _const_string(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return literal(_str(obj, "value", where))

    def _json_schema(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        style = obj.get("style", "json")
        if style != "json":
            raise GrammarError(f"structural tag: {where}.style {style!r} is not supported (only \"json\")")
        if obj.get("any_order"):
            raise GrammarError(f"structural tag: {where}.any_order is not supported")
        if "json_schema" not in obj:
            raise GrammarError(f"structural tag: {where} has no json_schema")
        schema = obj["json_schema"]
        if isinstance(schema, str):
            schema = json.loads(schema)
        from .json_schema import JsonSchema

        return JsonSchema(schema)

    def _grammar(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        from .gbnf import Gbnf

        return Gbnf(_str(obj, "grammar", where))

    def _regex(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        from .regex import Regex

        return Regex(_str(obj, "pattern", where))

    def _any_text(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        for key in ("max_tokens", "max_chars"):
            if obj.get(key) is not None:
                raise GrammarError(f"structural tag: {where}.{key} is not supported")
        excludes = obj.get("excludes", [])
        if not isinstance(excludes, list) or not all(isinstance(e, str) for e in excludes):
            raise GrammarError(f"structural tag: {where}.excludes must be a list of strings")
        return free_text([*excludes, *ends])

    def _items(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> list[Grammar]:
        items = _list(obj, "elements", where)
        if not items:
            raise GrammarError(f"structural tag: {where}.elements is empty")
        return [self.format(x, f"{where}.elements[{i}]", ends) for i, x in enumerate(items)]

    def _sequence(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        items = _list(obj, "elements", where)
        # only the last element runs up to the enclosing end
        parts = [self.format(x, f"{where}.elements[{i}]", ends if i == len(items) - 1 else [])
                 for i, x in enumerate(items)]
        return concat(parts)

    def _or(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        alts = self._items(obj, where, ends)
        return alts[0] if len(alts) == 1 else Union(*alts)

    def _optional(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return _loop(self.format(obj.get("content"), f"{where}.content", ends), 0, 1)

    def _plus(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return _loop(self.format(obj.get("content"), f"{where}.content", ends), 1, None)

    def _star(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return _loop(self.format(obj.get("content"), f"{where}.content", ends), 0, None)

    def _repeat(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        lo, hi = _int(obj, "min", where), _int(obj, "max", where)
        if lo < 0 or hi < -1:
            raise GrammarError(f"structural tag: {where}: min must be >= 0 and max >= -1")
        return _loop(self.format(obj.get("content"), f"{where}.content", ends), lo, None if hi == -1 else hi)

    def tag(self, obj: Any, where: str) -> Tag:
        if not isinstance(obj, Mapping) or obj.get("type", "tag") != "tag":
            raise GrammarError(f'structural tag: {where} must be a {{"type": "tag"}} object')
        begin: str | SpecialToken = (
            obj["begin"] if isinstance(obj.get("begin"), str) else _token(obj.get("begin"), f"{where}.begin")
        )
        end_v = obj.get("end")
        end: str | SpecialToken | list[str]
        if isinstance(end_v, str):
            end = end_v
        elif isinstance(end_v, list) and end_v and all(isinstance(e, str) for e in end_v):
            end = list(end_v)
        else:
            end = _token(end_v, f"{where}.end")
        ends = [end] if isinstance(end, str) else end if isinstance(end, list) else []
        content = self.format(obj.get("content"), f"{where}.content", ends)
        return Tag(begin, content, end)

    def _tag(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        b, c, e = self.tag(obj, where).grammar()
        return concat([b, c, e])

    def _tags(self, obj: Mapping[str, Any], where: str) -> list[Tag]:
        return [self.tag(t, f"{where}.tags[{i}]") for i, t in enumerate(_list(obj, "tags", where))]

    def _triggered_tags(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        triggers = _list(obj, "triggers", where)
        excludes = obj.get("excludes", [])
        if not isinstance(excludes, Sequence) or isinstance(excludes, str):
            raise GrammarError(f"structural tag: {where}.excludes must be a list of strings")
        return triggered_tags(
            self._tags(obj, where), triggers, at_least_one=_bool(obj, "at_least_one", where),
            stop_after_first=_bool(obj, "stop_after_first", where), excludes=[*excludes, *ends],
        )

    def _tags_with_separator(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return tags_with_separator(
            self._tags(obj, where), _str(obj, "separator", where),
            at_least_one=_bool(obj, "at_least_one", where),
            stop_after_first=_bool(obj, "stop_after_first", where),
        )

    def _dispatch(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        """Free text until a rule's pattern, then the rule's format (again, with ``loop``): the
        triggered tags whose begins and triggers are the patterns and whose ends are empty."""
        tags, patterns = [], []
        for i, rule in enumerate(_list(obj, "rules", where)):
            at = f"{where}.rules[{i}]"
            if not (isinstance(rule, list) and len(rule) == 2 and isinstance(rule[0], str) and rule[0]):
                raise GrammarError(f"structural tag: {at} must be a [pattern, format] pair, got {rule!r:.60}")
            patterns.append(rule[0])
            tags.append(Tag(rule[0], self.format(rule[1], f"{at}[1]", []), ""))
        loop = obj.get("loop", True)
        if not isinstance(loop, bool):
            raise GrammarError(f"structural tag: {where}.loop must be true or false, got {loop!r}")
        excludes = obj.get("excludes", [])
        if not isinstance(excludes, list) or not all(isinstance(e, str) for e in excludes):
            raise GrammarError(f"structural tag: {where}.excludes must be a list of strings")
        return triggered_tags(tags, patterns, stop_after_first=not loop, excludes=[*excludes, *ends])

    def _token(self, obj: Mapping[str, Any], where: str, ends: list[str]) -> Grammar:
        return _token(obj.get("token"), f"{where}.token")
