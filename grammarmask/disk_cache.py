"""An on-disk cache for the work a new process would otherwise redo: reading a tokenizer file into a
:class:`~grammarmask.Vocabulary` and building its token trie (about 4 s for tekken's 131k tokens,
against 0.05 s to read the cached result), compiling a grammar it compiled before
(:mod:`grammarmask.compile_cache`: a front end's IR, the engine's tables), and what depends only on
the Python that runs, made once per installation (the JSON Schema metaschema checks, the Unicode
tables of ``re`` in :mod:`grammarmask.automata.charsets`).

Where: ``$GRAMMARMASK_CACHE_DIR``, else ``$XDG_CACHE_HOME/grammarmask``, else
``~/.cache/grammarmask``; ``GRAMMARMASK_CACHE_DIR=off`` (or empty) turns the cache off. The directory
is made readable by its owner only, since entries are pickles and unpickling runs code.

An entry is named by a hash of everything its value depends on: the input's identity (a file's path,
size and modification time; a Hugging Face tokenizer's JSON; a grammar's text or schema; a
vocabulary's content hash), the limits and engine in force, the versions of the libraries that read
it, and grammarmask's own source files, so any change to grammarmask's code starts a fresh set of
entries. Grammar entries are compressed (zlib), with each large byte DFA stored by its byte classes:
a 97 KB JSON Schema's entry is under 1 MB, not the 35 MB of its dense transition tables. Entries are
written to a temporary file and renamed into place, so processes sharing the directory never read
half an entry; an entry that cannot be read is ignored and written again.

The directory is kept under ``$GRAMMARMASK_CACHE_MAX_MB`` megabytes (default 1024; ``0``: no limit):
a read marks its entry used (its modification time), and every few stores (and at the exit of a
process that stored fewer) the least recently used entries (those of older grammarmask versions
first, as nothing reads them) are deleted until the directory is at most 80% of the limit. A server
compiling every schema it is sent stays bounded.

Grammar entries are written only for work that took at least ``$GRAMMARMASK_CACHE_MIN_MS``
milliseconds (default 25; ``0``: everything): writing one costs a few milliseconds (pickle and
zlib), more than a small schema takes to compile again, and a server compiling distinct schemas
would pay it on every request for entries it never reads (:func:`worth_storing`). They are written
by a background thread (:func:`store_later`), so the compile that made one returns without waiting.
"""

from __future__ import annotations

import atexit
import contextlib
import copyreg
import functools
import hashlib
import io
import os
import pickle
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["code_hash", "directory", "flush", "load", "load_or_make", "made_once", "max_bytes", "store",
           "store_later", "sweep"]

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


def _path(where: Path, kind: str, key: Hashable, packed: bool) -> Path:
    digest = hashlib.blake2b(repr((kind, key, code_hash())).encode(), digest_size=20).hexdigest()
    return where / f"{kind}-{digest}.pickle{'.z' if packed else ''}"


def load(kind: str, key: Hashable, *, packed: bool = False) -> Any:
    """The value stored under ``(kind, key)`` (see :func:`load_or_make`), or None when there is none,
    it cannot be read, or the cache is off."""
    where = directory()
    if where is None:
        return None
    path = _path(where, kind, key, packed)
    with _pending_lock:
        if path in _pending:  # still being written by store_later
            return _pending[path]
    with contextlib.suppress(Exception), open(path, "rb") as f:
        data = f.read()
        value = pickle.loads(zlib.decompress(data) if packed else data)
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
        return value
    return None


def store(kind: str, key: Hashable, value: Any, *, packed: bool = False) -> bool:
    """Store ``value`` under ``(kind, key)`` for later processes; ``packed``: compressed, byte DFAs by
    their byte classes. False when the cache is off, the directory cannot be written or the value
    cannot be pickled (nothing is stored then)."""
    where = directory()
    if where is None:
        return False
    return _write(where, kind, key, value, packed)


def store_later(kind: str, key: Hashable, value: Any, *, packed: bool = False) -> None:
    """:func:`store` in a background thread, so a compile does not wait for its entry to be pickled,
    compressed and written (10-40 ms for a large JSON Schema, a quarter of its compile). ``value``
    must not change afterwards. Until it is written, :func:`load` of the entry returns ``value``
    itself; :func:`flush` waits for every entry handed over, as the interpreter's exit does."""
    global _writer
    where = directory()
    if where is None:
        return
    path = _path(where, kind, key, packed)
    with _pending_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammarmask-disk-cache")
        try:
            _writer.submit(_write_pending, where, kind, key, value, packed, path)
        except RuntimeError:  # the interpreter is shutting down: no new threads, so write it now
            _write(where, kind, key, value, packed)
            return
        _pending[path] = value


def flush() -> None:
    """Wait until every entry handed to :func:`store_later` is written (or given up)."""
    with _pending_lock:
        writer = _writer
    if writer is not None:
        writer.submit(lambda: None).result()  # one worker: entries are written in order


_writer: ThreadPoolExecutor | None = None
_pending: dict[Path, Any] = {}  # entries handed to store_later and not yet written
_pending_lock = threading.Lock()


def _forget_writer() -> None:  # a forked child has no writer thread (and maybe a held lock): afresh
    global _writer, _pending_lock
    _writer = None
    _pending_lock = threading.Lock()
    _pending.clear()


os.register_at_fork(after_in_child=_forget_writer)


def _write_pending(where: Path, kind: str, key: Hashable, value: Any, packed: bool, path: Path) -> None:
    try:
        _write(where, kind, key, value, packed)
    finally:
        with _pending_lock:
            if _pending.get(path) is value:
                del _pending[path]


def _write(where: Path, kind: str, key: Hashable, value: Any, packed: bool) -> bool:
    try:
        data = _dumps(value, packed)
    except Exception:  # noqa: BLE001 - a value that does not pickle is simply not cached
        return False
    with contextlib.suppress(OSError):
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, _path(where, kind, key, packed))
            _after_store(where)
            return True
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return False


_SWEEP_EVERY = 16  # stores between two looks at the directory's size (see _after_store)
_DEFAULT_MAX_MB = 1024
_DEFAULT_MIN_MS = 25.0
_stores = 0


def _env_amount(name: str, default: float, unit: str) -> float:
    """``$name`` as a number >= 0, ``default`` when it is unset or empty."""
    env = os.environ.get(name, "").strip()
    if not env:
        return default
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if not value >= 0:
        from .errors import GrammarError

        raise GrammarError(f"{name} must be a number of {unit} >= 0, got {env!r}")
    return value


def worth_storing(seconds: float) -> bool:
    """Whether work that took ``seconds`` is worth an entry (``$GRAMMARMASK_CACHE_MIN_MS``, default
    25 ms: cheaper work is redone faster than it is written and read back)."""
    return seconds * 1e3 >= _env_amount("GRAMMARMASK_CACHE_MIN_MS", _DEFAULT_MIN_MS, "milliseconds")


def made_costly(make: Callable[[], T]) -> tuple[T, bool]:
    """``make()``'s value, and whether making it took long enough to be worth an entry
    (:func:`worth_storing`)."""
    started = time.perf_counter()
    value = make()
    return value, worth_storing(time.perf_counter() - started)


def max_bytes() -> int | None:
    """The size limit of the cache directory in force (``$GRAMMARMASK_CACHE_MAX_MB``), None for none."""
    mb = _env_amount("GRAMMARMASK_CACHE_MAX_MB", _DEFAULT_MAX_MB, "megabytes")
    return None if mb == 0 else int(mb * (1 << 20))



def _after_store(where: Path) -> None:
    """Every ``_SWEEP_EVERY``-th store looks at the directory's size; a process that stored fewer
    since its last look, at its exit. (The first store of a process looked too: a stat of every
    entry, each letting go of the GIL and taking it back, by the writer thread in the middle of the
    first masks of the grammar just compiled. The harness's pattern of 1,000 labels, sentencepiece,
    in a fresh process: mask p99 over its 20 documents 125 us with that look, 88 without, median
    of 8 runs each; 30-40 with nothing written.)"""
    global _stores, _unswept
    max_bytes()  # (a bad $GRAMMARMASK_CACHE_MAX_MB is named at every store, the first included)
    _stores += 1
    if _stores % _SWEEP_EVERY == 0:
        sweep(where)
        _unswept = None
    else:
        _unswept = where


_unswept: Path | None = None  # the directory of stores since the last look, if any


@atexit.register
def _sweep_at_exit() -> None:
    # (the writer's entries are written by then: the interpreter joins its thread before atexit;
    # a bad $GRAMMARMASK_CACHE_MAX_MB has no caller to be told to here: the stores that found it
    # under store() raised it)
    if _unswept is not None:
        with contextlib.suppress(Exception):
            sweep(_unswept)


def sweep(where: Path | None = None) -> int:
    """Delete the least recently used entries until the directory is at most 80% of
    :func:`max_bytes` (when it is over the limit); the number of bytes freed."""
    where = where or directory()
    limit = max_bytes()
    if where is None or limit is None:
        return 0
    entries = []
    with contextlib.suppress(OSError), os.scandir(where) as it:
        for e in it:
            if e.name.endswith((".pickle", ".pickle.z")) and e.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    freed = 0
    for _, size, path in sorted(entries):
        if total - freed <= limit * 0.8:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            freed += size
    return freed


def _dumps(value: Any, packed: bool) -> bytes:
    if not packed:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    buf = io.BytesIO()
    _PackingPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return zlib.compress(buf.getvalue(), 1)


class _PackingPickler(pickle.Pickler):
    """A pickler that writes a byte DFA of many states as its byte classes and the table over them
    (a JSON Schema's terminal DFAs have 20-70 distinct columns of 256), as bytes; zlib does well
    enough on small ones. Through ``dispatch_table``, consulted for DFAs only: a ``reducer_override``
    is a Python call for every object pickled (~1 us each: a third of a large rules entry's
    pickling)."""

    def __init__(self, f: io.BytesIO, protocol: int) -> None:
        from .automata.dfa import DFA

        super().__init__(f, protocol=protocol)
        self.dispatch_table = {**copyreg.dispatch_table, DFA: _reduce_dfa}


def _reduce_dfa(obj: Any) -> Any:
    if obj.n_states < _PACK_STATES:
        return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    # The DFA's table by class, kept on it (the automata kernels made it, or the native engines'
    # hand-over asked for it), pickles as bytes do: a copy. Reading the classes' columns out of
    # the table here took 2-3 ms for the 2,900 states of a pattern of 1,000 labels, in the writer
    # thread, holding the GIL the masks of the grammar just compiled wait for (byte_classes() is
    # exact: bytes share a class iff their columns are equal, so the table by class is the table)
    classes, k, table, accepting = obj.class_table()
    return _unpack_dfa, (classes, k, table, accepting, obj.start)


_PACK_STATES = 64


def _unpack_dfa(classes: bytes, k: int, table: bytes, accepting: bytes, start: int) -> Any:
    from .automata.dfa import DFA

    return DFA.from_class_table(classes, k, table, accepting, start)


def made_once(kind: str, key: Hashable, make: Callable[[], T], making: threading.local) -> T | None:
    """What an installation makes once: :func:`load`, else ``make()`` stored for later processes,
    with ``making.active`` set while it runs in this thread (the compiles it runs must not ask for
    it again). None when it would be made for nothing (no cache, or a directory that cannot be
    written: every process would make it again, at more than the cost it saves) or when the limits
    in force refuse what it makes; then it is made where used, as anything is."""
    from .errors import GrammarMaskError

    hit = load(kind, key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    where = directory()
    if where is None or not _writable(where):
        return None
    making.active = True
    try:
        value = make()
    except GrammarMaskError:
        return None
    finally:
        making.active = False
    store(kind, key, value)
    return value


def _writable(where: Path) -> bool:
    """Whether entries can be written in ``where`` (made if missing)."""
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(where, os.W_OK | os.X_OK)


def load_or_make(kind: str, key: Hashable, make: Callable[[], T], *, packed: bool = False,
                 costly_only: bool = False, later: bool = False) -> T:
    """The value cached on disk under ``(kind, key)``, or ``make()``'s, stored for the next process.

    ``key`` must name everything the value depends on besides grammarmask's code (:func:`code_hash`
    is added here) and have a stable ``repr``. With the cache off, or a directory that cannot be
    written, this is ``make()``. ``packed``: as :func:`store`; ``costly_only``: stored only when
    ``make()`` took long enough (:func:`worth_storing`); ``later``: stored by :func:`store_later`
    (the value must not change afterwards).
    """
    hit = load(kind, key, packed=packed)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    value, costly = made_costly(make)
    if costly or not costly_only:
        (store_later if later else store)(kind, key, value, packed=packed)
    return value
