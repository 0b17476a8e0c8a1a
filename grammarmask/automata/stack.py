"""Room on Python's stack for a recursion bounded by a budget.

The parsers grammarmask relies on (Python's ``re`` parser, ``json``, ``jsonschema``) and some of its
own front-end passes recurse on the nesting of their input. The input's nesting is checked against
a budget of :class:`~grammarmask.Limits` first; :func:`stack_room` then makes sure Python's
recursion limit leaves room for that many frames above the current depth, raising it if needed
(never lowering it, so threads compiling at once cannot take room from each other).
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

__all__ = ["stack_room"]

_ROOM = 400  # frames beyond the budgeted recursion: the calls one level's own work makes
_LOCK = threading.Lock()


def _frames() -> int:
    n = 0
    f: FrameType | None = sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def stack_room(frames: int) -> None:
    """Make Python's recursion limit at least ``frames`` (plus a margin) above the current depth."""
    need = _frames() + frames + _ROOM
    if sys.getrecursionlimit() < need:
        with _LOCK:
            if sys.getrecursionlimit() < need:
                sys.setrecursionlimit(need)
