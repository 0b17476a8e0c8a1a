"""Checks of public API arguments: integers that must really be integers, grammar files that must
be UTF-8 text.

Policy (documented in :mod:`grammarmask.errors`): an argument grammarmask cannot use raises
:class:`~grammarmask.errors.GrammarError` whose message starts with the function and names the
argument (``Matcher.advance: token_id must be an int, got str``). Nothing is coerced: ``98.9``,
``"98"``, ``True`` and ``None`` are refused where an integer is asked for; Python and numpy integers
(anything with ``__index__`` except a bool) are accepted.

Callers on hot paths test ``type(x) is int`` themselves and only call in here otherwise.
"""

from __future__ import annotations

import operator
import os
from typing import Any

import numpy as np

from .errors import GrammarError

__all__ = ["as_int", "as_int_list", "read_grammar_file"]


def as_int(value: object, what: str) -> int:
    """``value`` as an ``int``, or a ``GrammarError`` naming ``what`` (``"function: argument"``)."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise GrammarError(f"{what} must be an int, got bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise GrammarError(f"{what} must be an int, got {_describe(value)}") from None


def as_int_list(values: object, what: str) -> list[int]:
    """``values`` (an iterable of integers, or a 1-D integer array) as a list of ``int``.

    Raises ``GrammarError`` naming ``what`` and the position of the first value that is not an integer.
    """
    if isinstance(values, np.ndarray):
        if values.ndim == 1 and values.dtype.kind in "iu":
            out: list[int] = values.tolist()
            return out
        if values.ndim != 1:
            raise GrammarError(f"{what} must be 1-D, got shape {values.shape}")
    elif isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise GrammarError(f"{what} must be a sequence of ints, got {_describe(values)}")
    items = list(values)
    if set(map(type, items)) <= {int}:
        return items
    return [as_int(v, f"{what}[{i}]") for i, v in enumerate(items)]


def read_grammar_file(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of a grammar file, newlines translated as ``open()`` in text mode does.

    Raises ``GrammarError`` naming the file when it cannot be read, or when it is not UTF-8 (then
    with the offending byte, its offset in the file, and its line and column).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GrammarError(f"cannot read grammar file {name!r}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        column = len(data[line_start : e.start].decode("utf-8", "replace")) + 1
        raise GrammarError(
            f"grammar file {name!r} is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset "
            f"{e.start} ({e.reason})",
            line=line,
            column=column,
            text=data.decode("utf-8", "replace"),
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as open() in text mode


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    name = type(value).__name__
    if isinstance(value, (float, str, bytes)):
        return f"{name} {value!r}"[:80]
    return name
