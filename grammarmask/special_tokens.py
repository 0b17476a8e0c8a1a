"""Special tokens in grammars: how a grammar names a control token (``<tool_call>``,
``<|python_tag|>``) so that it is legal exactly where the grammar says.

Inside the engines a named special token is a byte string no text can contain: ``0xFF``, its name's
UTF-8, ``0xFE`` (:func:`grammarmask.vocab.special_spelling`). A grammar that names the token matches
that spelling as a literal; every other grammar matches only UTF-8 text, so the token stays illegal
there. When a grammar names special tokens, :meth:`Grammar.compile` compiles it against
:func:`special_view` of the vocabulary: the same ids and size, with every named special token (EOS
aside) given its spelling, and the few normal tokens whose bytes contain ``0xFF`` (never legal in
UTF-8 text anyway) left out, so that no normal token can spell part of a special one. Every engine,
the oracle and composition then work unchanged; vocabularies and grammars that name no special token
are untouched.

References are names (``"<tool_call>"``, exactly as the tokenizer spells them: tekken's
``"[TOOL_CALLS]"``) or ids; an unknown name, an id that is not a named special token, or the EOS
token (legal exactly where the grammar is complete, never named) is a :class:`GrammarError` naming
the reference and the grammar.

Syntax in grammar text (Lark and GBNF, as llguidance and llama.cpp write it): ``<name>`` outside
strings, regexes and comments names the special token ``<name>``; ``<[NAME]>`` names ``[NAME]``;
``<[123]>`` names token id 123.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .cache import per_vocabulary
from .errors import GrammarError
from .vocab import SPECIAL_START, Vocabulary, special_spelling

if TYPE_CHECKING:
    from .automata import DFA

__all__ = ["Ref", "parse_ref", "resolve", "special_view", "spelling_dfa", "unknown_name"]

Ref = str | int  # a special token's name, or its id

# <name> as llguidance/llama.cpp write it: no whitespace or angle brackets inside
REF_PATTERN = re.compile(r"<(\[[^\s<>\[\]]+\]|[^\s<>]+)>")


def parse_ref(text: str) -> Ref:
    """``"<tool_call>"`` -> ``"<tool_call>"``; ``"<[TOOL_CALLS]>"`` -> ``"[TOOL_CALLS]"``;
    ``"<[12]>"`` -> ``12`` (the text of one :data:`REF_PATTERN` match)."""
    inner = text[1:-1]
    if inner.startswith("[") and inner.endswith("]"):
        body = inner[1:-1]
        return int(body) if body.isdigit() else inner
    return text


def unknown_name(vocab: Vocabulary, name: str, *, where: str) -> GrammarError:
    """The error for a name no special token of ``vocab`` has, with the closest names."""
    names = sorted(set(vocab.special_token_names.values()))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    bare = name.strip("<>[]|")
    close += [n for n in names if n.strip("<>[]|") == bare and n not in close]
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    if not names:
        hint = " (it records no special token names: use a from_* loader or pass special_token_names)"
    return GrammarError(f"{where}: {name!r} is not a special token of {vocab!r}{hint}")


def resolve(vocab: Vocabulary, ref: Ref, *, where: str) -> str:
    """The name of the special token ``ref`` refers to in ``vocab``.

    Raises
    ------
    GrammarError
        An unknown name; an id outside the vocabulary, of a normal token, or of a special token with
        no name; the EOS token.
    """
    base = vocab.base or vocab
    names = base.special_token_names
    if isinstance(ref, str):
        ids = [i for i, n in names.items() if n == ref]
        if not ids:
            raise unknown_name(base, ref, where=where)
        if ids == [base.eos_token_id]:
            raise _eos_error(ref, where)
        return ref
    if not 0 <= ref < base.size:
        raise GrammarError(f"{where}: token id {ref} is outside the vocabulary (size {base.size})")
    if ref == base.eos_token_id:
        raise _eos_error(f"<[{ref}]>", where)
    if ref in names:
        return names[ref]
    if ref in base.special_ids:
        raise GrammarError(f"{where}: token id {ref} is a special token with no name in {base!r}")
    raise GrammarError(
        f"{where}: token id {ref} is not a special token (it is the text "
        f"{base.token_bytes[ref]!r}): write its text instead"
    )


def _eos_error(name: str, where: str) -> GrammarError:
    return GrammarError(
        f"{where}: {name} is the EOS token, which a grammar cannot name: EOS is legal exactly where "
        "the output is complete"
    )


def special_view(vocab: Vocabulary, refs: Iterable[Ref], *, where: Callable[[Ref], str]) -> Vocabulary:
    """``vocab`` with its named special tokens spelled (module docstring), after checking that every
    reference in ``refs`` resolves (made once per vocabulary; a view is its own view).

    Raises
    ------
    GrammarError
        A reference does not resolve (see :func:`resolve`); ``where(ref)`` says where it is named.
    """
    base = vocab.base or vocab
    for r in sorted(refs, key=str):
        resolve(base, r, where=where(r))
    if vocab.base is not None:
        return vocab
    return per_vocabulary(base, "special_tokens.view", lambda: _make_view(base))


def _make_view(base: Vocabulary) -> Vocabulary:
    tokens = list(base.token_bytes)
    spelled = {i for i in base.special_token_names if i != base.eos_token_id}
    for i, b in enumerate(tokens):
        if SPECIAL_START in b:
            tokens[i] = b""  # a normal token no UTF-8 text contains: never legal, and now never a prefix
    gap = set(range(len(tokens), max(spelled, default=-1) + 1)) - spelled  # ids past the token list
    tokens += [b""] * (max(spelled, default=-1) + 1 - len(tokens))
    for i in spelled:
        tokens[i] = special_spelling(base.special_token_names[i])
    view = Vocabulary(
        tokens,
        eos_token_id=base.eos_token_id,
        special_token_ids=(base.special_ids | gap) - spelled,
        size=base.size,
        name=base.name,
        special_token_names=base.special_token_names,
    )
    view.base = base
    return view


def require_view(vocab: Vocabulary, where: str) -> None:
    """Refuse to compile a part that names special tokens against a vocabulary that does not spell
    them (a wrapper grammar that does not pass on ``special_tokens()``): the tokens would silently
    never be legal."""
    if vocab.base is None:
        raise GrammarError(
            f"{where} names special tokens but was compiled inside a grammar that does not report them "
            "(its special_tokens() must include its parts')"
        )


def spelling_dfa(name: str) -> DFA:
    """The byte DFA of the special token ``name``'s spelling."""
    from .automata import literal_dfa

    return literal_dfa(special_spelling(name))


PLACEHOLDER = "GRAMMARMASK_SPECIAL_{}"


def past_lark_literal(text: str, i: int) -> int | None:
    """Where a "string", /regex/ or // comment of Lark text that starts at ``i`` ends (the index
    after it; an unterminated string or regex ends at its line's end), or None if none starts there.
    The scanners of Lark text (special-token references, group nesting) skip these."""
    c = text[i]
    n = len(text)
    if c == '"' or (c == "/" and text[i + 1 : i + 2] != "/"):
        j = i + 1
        while j < n and text[j] != c and text[j] != "\n":
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if c == "/":  # a // comment
        j = text.find("\n", i)
        return n if j < 0 else j
    return None


_NOT_REF = re.compile(r'[^"/<]*')


def rewrite_lark_refs(text: str) -> tuple[str, dict[str, Ref], dict[Ref, tuple[int, int]]]:
    """Lark text with each special-token reference (``<name>``, ``<[NAME]>``, ``<[12]>`` outside
    strings, regexes and ``//`` comments) replaced by a declared placeholder terminal; returns the new
    text, placeholder -> reference, and where each reference first is (line, column). Text with no
    reference comes back unchanged."""
    out: list[str] = []
    refs: dict[str, Ref] = {}
    where: dict[Ref, tuple[int, int]] = {}
    seen: dict[Ref, str] = {}
    if not isinstance(text, str):
        return text, {}, {}  # the front end words the error
    i, n, last = 0, len(text), 0
    skip = _NOT_REF.match
    while i < n:
        # past characters that start neither a reference nor a literal
        i = skip(text, i).end()  # type: ignore[union-attr]  # (matches everywhere)
        if i >= n:
            break
        c = text[i]
        if (end := past_lark_literal(text, i)) is not None:
            i = end
        elif c == "<" and (m := REF_PATTERN.match(text, i)) is not None:
            ref = parse_ref(m.group(0))
            name = seen.get(ref)
            if name is None:
                name = seen[ref] = PLACEHOLDER.format(len(seen))
                refs[name] = ref
                where[ref] = (text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i))
            out += [text[last:i], name]
            i = last = m.end()
        else:
            i += 1
    if not refs:
        return text, {}, {}
    out.append(text[last:])
    out.append("\n" + "".join(f"%declare {name}\n" for name in refs))
    return "".join(out), refs, where
