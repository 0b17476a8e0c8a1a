"""``Reasoning``: free text up to the model's end-of-reasoning marker (``</think>``), for a grammar
that applies only after the reasoning (``gm.Reasoning() + grammar``, or ``grammar.after("</think>")``)."""

from __future__ import annotations

from ..errors import GrammarError
from ..grammar import Grammar, Wrapped
from .special_token import SpecialToken
from .structural_tag import concat, free_text, literal

__all__ = ["Reasoning"]

Marker = str | SpecialToken


def _marker(x: Marker, what: str) -> Grammar:
    if isinstance(x, SpecialToken):
        return x
    if isinstance(x, str) and x:
        return literal(x)
    raise GrammarError(f"Reasoning: {what} must be a non-empty str or a SpecialToken, got {x!r}")


class Reasoning(Wrapped):
    """Free text (any UTF-8 text without the marker) ending with ``end``; optionally opened by
    ``start``. Add the answer's grammar after it: ``gm.Reasoning("</think>") + gm.JsonSchema(s)``.

    Parameters
    ----------
    end
        The marker that ends the reasoning: text (``"</think>"``) or a :class:`SpecialToken` when the
        tokenizer has it as a special token. Text before it never contains it.
    start
        A marker the output must begin with (``"<think>"``), when the prompt does not already open
        the reasoning; None (the default) for none.

    Raises
    ------
    GrammarError
        A marker that is empty or neither a str nor a SpecialToken.
    """

    def __init__(self, end: Marker = "</think>", *, start: Marker | None = None) -> None:
        self.end, self.start = end, start
        excludes = [end] if isinstance(end, str) else []
        parts = [free_text(excludes), _marker(end, "end")]
        if start is not None:
            parts.insert(0, _marker(start, "start"))
        self.grammar = concat(parts)

    def __repr__(self) -> str:
        start = "" if self.start is None else f", start={self.start!r}"
        return f"Reasoning({self.end!r}{start})"
