"""The exceptions grammarmask raises.

Every error derives from :class:`GrammarMaskError`; most also derive from the builtin a
caller would naturally catch::

    GrammarMaskError
    ├── GrammarError(ValueError)            bad grammar text, pattern, vocabulary or argument
    │   ├── UnsupportedSchemaError          a JSON Schema keyword that cannot be enforced
    │   └── BudgetExceeded                  an input needs more than a budget of ``Limits`` allows
    ├── TokenRejected(ValueError)           Matcher.advance got an illegal token (state unchanged)
    └── NoLegalContinuation(RuntimeError)   no token is legal (an intersection dead-ended)

Bad arguments. Input grammarmask cannot use raises one of these, never a stray builtin error from
deep inside and never a silent coercion:

- an integer token id the grammar does not allow here (out of range, special, padding, forbidden)
  is a :class:`TokenRejected`;
- any other unusable argument is a :class:`GrammarError` whose message starts with the function and
  names the argument (``Matcher.advance: token_id must be an int, got str 'a'``): a token id, count,
  size, row or seed that is not an integer (``None``, ``"98"``, ``98.9``, NaN, ``True``; Python and
  numpy integers are accepted), an integer out of its range (``Mask(size=-5)``, ``rng=-1``), a single
  string where a list is expected (``Choice("abc")``), a flag that is not a bool (``strict="no"``),
  an array of the wrong kind, shape, dtype or writeability (str or complex logits, a read-only
  ``fill_mask`` buffer), a grammar file that is not UTF-8, a schema value JSON cannot express (NaN).

A rejected argument leaves a :class:`~grammarmask.Matcher` exactly as it was.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceeded",
    "GrammarError",
    "GrammarMaskError",
    "NoLegalContinuation",
    "TokenRejected",
    "UnsupportedSchemaError",
]


class GrammarMaskError(Exception):
    """Root of every error raised by grammarmask."""


class GrammarError(GrammarMaskError, ValueError):
    """A grammar, pattern, schema or vocabulary is malformed, or an argument is unusable.

    ``line`` and ``column`` (1-based) point into the grammar text when known; ``context`` is
    the offending line with a caret under the column.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        text: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.context = _caret_context(text, line, column) if text is not None else ""
        where = f"line {line}, column {column}: " if line is not None and column is not None else ""
        full = where + message
        if self.context:
            full += "\n" + self.context
        super().__init__(full)


def _caret_context(text: str, line: int | None, column: int | None) -> str:
    if line is None or column is None:
        return ""
    lines = text.splitlines() or [""]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"    {src}\n    {' ' * (column - 1)}^"


class UnsupportedSchemaError(GrammarError):
    """A JSON Schema keyword the compiler cannot enforce exactly.

    ``keyword`` names it and ``pointer`` is the JSON pointer of the schema holding it.
    """

    def __init__(self, message: str, *, keyword: str, pointer: str) -> None:
        self.keyword = keyword
        self.pointer = pointer
        super().__init__(f"{message} (keyword {keyword!r} at {pointer or '/'})")


class BudgetExceeded(GrammarError):
    """A grammar, pattern or schema needs more than one of the budgets of :class:`~grammarmask.Limits`.

    ``budget`` names the ``Limits`` field, ``value`` is its value in force, ``what`` says what ran
    out and ``where`` points at what hit it (a JSON pointer, or a pattern position). The message
    ends with how to raise it: ``grammar.compile(vocab, limits=gm.Limits(<budget>=...))`` when it
    was hit in a compile, else (a front end reading its input at construction: regexes, Lark and
    GBNF text) ``with grammarmask.limits.in_force(gm.Limits(<budget>=...))`` around the constructor.
    The engine's step budgets pass ``compile_time=True``: they were set by the compile.
    """

    def __init__(
        self, budget: str, value: int, what: str, *, where: str = "", compile_time: bool | None = None
    ) -> None:
        self.budget = budget
        self.value = value
        self.what = what
        self.where = where
        at = f" at {where if len(where) <= 120 else where[:70] + ' ... ' + where[-45:]}" if where else ""
        from .limits import in_a_compile  # limits imports nothing; errors stays a leaf at import

        new = f"grammarmask.Limits({budget}=...)"
        if compile_time is None:  # a front end: is it reading its input inside a compile?
            compile_time = in_a_compile()
        how = (f"compile(vocab, limits={new})" if compile_time else
               f"'with grammarmask.limits.in_force({new}):' around the constructor")
        super().__init__(f"{what}{at}: over the {budget} budget ({value}); raise it with {how} if this input "
                         "is meant")


class TokenRejected(GrammarMaskError, ValueError):
    """``Matcher.advance`` was given a token the grammar does not allow; the matcher is unchanged."""

    def __init__(self, token_id: int, reason: str = "") -> None:
        self.token_id = token_id
        super().__init__(f"token {token_id} is not allowed here" + (f": {reason}" if reason else ""))


class NoLegalContinuation(GrammarMaskError, RuntimeError):
    """No token is legal: the grammar (or an intersection of grammars) cannot be continued."""
