"""The standard library's regex parser, its opcodes and its case-folding table, on every Python.

Python 3.11 moved ``sre_parse``, ``sre_constants`` and the compiler's extra case equivalences into
the ``re`` package (``re._parser``, ``re._constants``, ``re._casefix``; the old modules still import
there, with a DeprecationWarning); 3.10 has only the old names. Everything in grammarmask that reads
``re``'s parse trees imports them from here, and parses with :func:`parse`. On 3.10 the opcodes
3.11 added (possessive repeats, atomic groups, which 3.10's parser refuses as syntax) are stand-ins
that no parse tree holds.
"""

from __future__ import annotations

import re
import sys
import threading
import warnings
from typing import Any

if sys.version_info >= (3, 11):
    from re import _casefix, _parser  # type: ignore[attr-defined]
    from re import _constants as C  # type: ignore[attr-defined]

    EXTRA_CASES: dict[int, tuple[int, ...]] = _casefix._EXTRA_CASES
else:  # pragma: no cover (3.10)
    import sre_compile
    import sre_constants
    import sre_parse as _parser
    from types import SimpleNamespace

    class _Absent:
        """An opcode this Python's parser never emits."""

        def __init__(self, name: str) -> None:
            self.name = name

        def __repr__(self) -> str:
            return self.name

    C: Any = SimpleNamespace(
        **vars(sre_constants),
        POSSESSIVE_REPEAT=_Absent("POSSESSIVE_REPEAT"),
        ATOMIC_GROUP=_Absent("ATOMIC_GROUP"),
    )
    EXTRA_CASES = sre_compile._ignorecase_fixes  # type: ignore[attr-defined]

__all__ = ["EXTRA_CASES", "C", "parse"]

_WARNINGS_LOCK = threading.Lock()


def parse(pattern: str, flags: int = 0) -> Any:
    """``pattern``'s parse tree, as 3.11 and later parse it on every Python: global flags anywhere
    but at the start (``a(?i)b``) raise ``re.error`` there, where 3.10 only warns and applies them
    to the whole pattern (a grammar would then mean one thing on 3.10 and fail on 3.11)."""
    if sys.version_info >= (3, 11) or ("(?" if isinstance(pattern, str) else b"(?") not in pattern[1:]:
        return _parser.parse(pattern, flags)
    # (3.10) the warning turned into an error for the parse: warnings' filters are one global list,
    # so the lock keeps two threads' parses from restoring each other's (left in place, it would
    # turn a user's own warning into an error); a pattern without a group of flags past the start
    # never takes it
    with _WARNINGS_LOCK, warnings.catch_warnings():  # pragma: no cover (3.10)
        warnings.filterwarnings("error", "Flags not at the start", DeprecationWarning)
        try:
            return _parser.parse(pattern, flags)
        except DeprecationWarning as w:
            at = re.search(r"at position (\d+)$", str(w))
            raise re.error(
                "global flags not at the start of the expression", pattern, int(at.group(1)) if at else None
            ) from None
