"""Terminals that are the intersection of several regexes (``pattern``/``format`` with lengths, ...).

A JSON string whose ``pattern`` (or ``format``) and ``minLength``/``maxLength`` do not fold into one
regex becomes a named terminal whose language is the intersection of the regexes, each over the whole
JSON text of the string, quotes included.

- In the Lark text (``JsonSchema.to_lark()``, what ``lark`` parses), the terminal is written
  ``/(?=P1)(?=P2)...Pn/``. Every string ``Pi`` is ``"body"`` whose body has no unescaped quote, so a
  lookahead ``Pi`` can only end at the closing quote: the terminal matches exactly ``P1 & ... & Pn``.
  Number parts (``not: {type: integer}`` with bounds) get a guard ``(?![0-9.eE+-])`` instead.
- For grammarmask's own compile, the terminal's DFA is the product of the parts' DFAs (exact),
  built here: :func:`intersection_terminal` is a ``Pat`` that prints the first form and builds this.

A part written ``!P`` (a quoted-string regex) is a complement: the strings NOT in ``P``, written
``(?!P)`` for lark (``P`` ends at the closing quote, so the negative lookahead covers the whole string)
and a difference automaton here. At least one part is positive.

Products are refused (the caller raises ``UnsupportedSchemaError``) past
``Limits.json_schema_product_states`` states.
"""

from __future__ import annotations

import functools

from ...automata import DFA, difference, product, regex_to_dfa
from ...cache import automaton
from ...errors import GrammarError
from ...ir.builder import Pat
from .strings import quoted_plain_dfa

__all__ = ["TooLarge", "intersection_dfa", "intersection_terminal", "lark_regex", "ordered"]



class TooLarge(Exception):
    """The product automaton exceeds its state budget."""


def lark_regex(parts: tuple[str, ...]) -> str:
    """The Python regex, with lookaheads, that ``lark`` runs for the intersection of ``parts``.

    A string part ends at its closing quote; a number part is followed by a character that cannot
    continue a number (a guard), so each lookahead covers the whole lexeme.
    """
    def one(p: str) -> str:
        if p.startswith("!"):
            return f"(?!{p[1:]})"
        return f"(?={p})" if p.startswith('"') else f"(?=(?:{p})(?![0-9.eE+-]))"

    return "".join(one(p) for p in parts[:-1]) + parts[-1]


def ordered(parts: set[str]) -> tuple[str, ...]:
    """The parts in a fixed order with a positive one last (the one lark consumes)."""
    return tuple(sorted(parts, key=lambda p: (not p.startswith("!"), p)))


def intersection_dfa(parts: tuple[str, ...], max_states: int) -> DFA:
    """The DFA of the intersection (exact), kept in the process-wide cache of automata; raises
    TooLarge past ``max_states`` states."""
    return automaton(("intersection", parts, max_states), lambda: _intersection_dfa(parts, max_states))


def _intersection_dfa(parts: tuple[str, ...], max_states: int) -> DFA:
    try:
        pos = [quoted_plain_dfa(p, max_states) or regex_to_dfa(p, max_states=max_states)
               for p in parts if not p.startswith("!")]
        neg = [regex_to_dfa(p[1:], max_states=max_states) for p in parts if p.startswith("!")]
        pos.sort(key=lambda d: d.n_states)
        out = pos[0]
        for d in pos[1:]:
            out = product(out, d, max_states=max_states)
        for d in neg:
            out = difference(out, d, max_states=max_states)
    except GrammarError as e:  # too many states while determinising or in the product
        why = str(e)
    else:
        return out
    # raised outside the handler: ``e``'s traceback holds the frames of the failed construction,
    # and a raise inside the handler would tie them into a reference cycle that outlives the call
    raise TooLarge(why)


def intersection_terminal(parts: tuple[str, ...], max_states: int) -> Pat:
    """The terminal for the intersection of ``parts``: lark's lookahead regex, the exact product DFA."""
    return Pat(lark_regex(parts), functools.partial(intersection_dfa, parts, max_states))
