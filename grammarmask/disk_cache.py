"""An on-disk cache for the work a new process would otherwise redo: reading a tokenizer file into a
:class:`~grammarmask.Vocabulary` and building its token trie (about 4 s for tekken's 131k tokens,
against 0.05 s to read the cached result).

Where: ``$GRAMMARMASK_CACHE_DIR``, else ``$XDG_CACHE_HOME/grammarmask``, else
``~/.cache/grammarmask``; ``GRAMMARMASK_CACHE_DIR=off`` (or empty) turns the cache off. The directory
is made readable by its owner only, since entries are pickles and unpickling runs code.

An entry is named by a hash of everything its value depends on: the input's identity (a file's path,
size and modification time), the versions of the libraries that read it, and grammarmask's own
source files, so any change to grammarmask's code starts a fresh set of entries. Entries are written
to a temporary file and renamed into place, so processes sharing the directory never read half an
entry; an entry that cannot be read is ignored and written again. Nothing is evicted: delete the
directory to reclaim the space.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TypeVar

__all__ = ["code_hash", "directory", "load_or_make"]

T = TypeVar("T")
_OFF = ("", "off", "0", "none", "false")


def directory() -> Path | None:
    """The cache directory in force (see the module docstring), or None when the cache is off."""
    env = os.environ.get("GRAMMARMASK_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "grammarmask"


@functools.cache
def code_hash() -> str:
    """A hash of grammarmask's Python sources and native extension: entries made by other code are
    never read."""
    root = Path(__file__).resolve().parent
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".so", ".pyd") and p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def load_or_make(kind: str, key: Hashable, make: Callable[[], T]) -> T:
    """The value cached on disk under ``(kind, key)``, or ``make()``'s, stored for the next process.

    ``key`` must name everything the value depends on besides grammarmask's code (:func:`code_hash`
    is added here) and have a stable ``repr``. With the cache off, or a directory that cannot be
    written, this is ``make()``.
    """
    where = directory()
    if where is None:
        return make()
    digest = hashlib.blake2b(repr((kind, key, code_hash())).encode(), digest_size=20).hexdigest()
    path = where / f"{kind}-{digest}.pickle"
    with contextlib.suppress(Exception), open(path, "rb") as f:  # absent or unreadable: made again
        return pickle.load(f)  # type: ignore[no-any-return]
    value = make()
    with contextlib.suppress(OSError):
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return value
