"""Every cache grammarmask keeps is one of two kinds, both here.

- :class:`Lru`: a thread-safe map bounded by its number of entries and, optionally, by the bytes its
  values were put with; the least recently used entry goes first.
- :func:`per_vocabulary`: state shared by every grammar compiled against one vocabulary (its token
  trie, shared walks), kept beside the vocabulary and freed with it.

Their bounds come from :class:`grammarmask.Limits`. One :class:`Lru` is kept per process, not per
vocabulary: :func:`automaton` keeps the automata (byte DFAs) the front ends build for terminals, so
that equal terminals of later grammars (JSON strings and numbers, keys, patterns) are not built again.
Bounded by ``Limits.shared_automata`` entries and ``Limits.shared_automata_bytes`` bytes of tables,
as the limits in force at its first use say: a DFA's table is 1 KB a state, and a bounded string of a
schema (``maxLength: 256``) alone is 5 MB, so a cache bounded only by its number of entries held
hundreds of MB after a few hundred distinct schemas (``benchmarks/soak_schemas.py``). Tables of 256
KB or more are kept by byte class (a tenth of that string's).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Lru", "automata", "automaton", "forget", "per_vocabulary", "recording_automata"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


class Lru(Generic[K, V]):
    """A thread-safe LRU map of at most ``limit`` entries and, if ``max_bytes`` is given, at most that
    many bytes by the sizes given to :meth:`put` (the newest entry is kept even if it alone is over)."""

    __slots__ = ("_data", "_lock", "_sizes", "limit", "max_bytes", "nbytes")

    def __init__(self, limit: int, max_bytes: int | None = None) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self._lock = threading.Lock()
        self.limit = limit
        self.max_bytes = max_bytes
        self.nbytes = 0

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None.

        No lock on this path (masks are read every decoding step): ``OrderedDict.get`` and
        ``move_to_end`` are each atomic under the GIL, and a key another thread evicted in between
        only makes ``move_to_end`` raise ``KeyError``, while the value read is still valid."""
        v = self._data.get(key)
        if v is not None:
            try:  # noqa: SIM105 (hot path: cheaper than contextlib.suppress)
                self._data.move_to_end(key)
            except KeyError:
                pass
        return v

    def put(self, key: K, value: V, nbytes: int = 0) -> None:
        """Store ``value`` (weighing ``nbytes``) and evict the least recently used past the bounds."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            self.nbytes += nbytes - self._sizes.get(key, 0)
            self._sizes[key] = nbytes
            data = self._data
            while len(data) > self.limit or (
                self.max_bytes is not None and self.nbytes > self.max_bytes and len(data) > 1
            ):
                old, _ = data.popitem(last=False)
                self.nbytes -= self._sizes.pop(old, 0)

    def get_or_make(self, key: K, make: Callable[[], V], nbytes: Callable[[V], int] | None = None) -> V:
        """The value of ``key``, made by ``make()`` (outside the lock) and stored if missing."""
        hit = self.get(key)
        if hit is None:
            hit = make()
            self.put(key, hit, nbytes(hit) if nbytes is not None else 0)
        return hit

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._sizes.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data


_STORES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_STORES_LOCK = threading.RLock()  # re-entrant: a make() may ask for another store of the same vocabulary


def per_vocabulary(vocab: Any, name: str, make: Callable[[], T]) -> T:
    """The object called ``name`` kept for ``vocab``, made once by ``make()`` (under a lock, so two
    threads never make it twice) and dropped when the vocabulary is."""
    with _STORES_LOCK:
        store = _STORES.get(vocab)
        if store is None:
            store = _STORES[vocab] = {}
        got = store.get(name)
        if got is None:
            got = store[name] = make()
    return got


def forget(vocab: Any, name: str | None = None) -> None:
    """Drop the object called ``name`` kept for ``vocab`` (every one, if ``name`` is None); the next
    :func:`per_vocabulary` makes it again."""
    with _STORES_LOCK:
        store = _STORES.get(vocab)
        if store is not None:
            if name is None:
                store.clear()
            else:
                store.pop(name, None)


_AUTOMATA: Lru[Hashable, Any] | None = None
_AUTOMATA_LOCK = threading.Lock()


def automata() -> Lru[Hashable, Any]:
    """The process-wide cache of terminal automata (made at first use, with the limits then in force)."""
    global _AUTOMATA
    got = _AUTOMATA
    if got is None:
        from .limits import active

        with _AUTOMATA_LOCK:
            if _AUTOMATA is None:
                lim = active()
                _AUTOMATA = Lru(lim.shared_automata, lim.shared_automata_bytes)
            got = _AUTOMATA
    return got


#: literals (and patterns that are only literals) of at most this many characters are made each
#: time, not kept in :func:`automata`: a JSON key's DFA takes ~10 us to make and ~25 KB of table to
#: keep, and a thousand of them (sixty JSONSchemaBench schemas) pushed the automata that take
#: milliseconds (a maxLength string: 13 ms) out of the cache
UNKEPT_LITERAL_CHARS = 64


def table_bytes(dfa: Any) -> int:
    """The bytes of a DFA's transition table and accepting flags: what :func:`automaton` weighs a
    DFA it keeps whole by. (Its byte classes and table by class,
    :meth:`~grammarmask.automata.DFA.class_table`, are a few columns beside the 256 and not weighed:
    weighed, they pushed the DFAs of a schema's string of maxLength 4,096 out of the cache over
    JSONSchemaBench's sample: its compile took 70 ms, not 35.)"""
    return int(dfa.transitions.nbytes + dfa.accepting.nbytes)


#: a DFA whose table takes at least this many bytes is kept in :func:`automata` by byte class
#: (:class:`_ByClass`) and made dense again at each hit: a JSON string of maxLength 256 is 5.2 MB
#: dense and 0.45 MB over its 22 classes; made dense again in 0.9 ms, where building it takes 34
BY_CLASS_BYTES = 256 << 10


class _ByClass:
    """A large DFA as :func:`automata` keeps it: :meth:`~grammarmask.automata.DFA.class_table` and
    the start state."""

    __slots__ = ("parts", "start")

    def __init__(self, dfa: Any) -> None:
        self.parts: tuple[bytes, int, bytes, bytes] = dfa.class_table()
        self.start: int = dfa.start

    @property
    def nbytes(self) -> int:
        classes, _, table, accepting = self.parts
        return len(classes) + len(table) + len(accepting)

    def dfa(self) -> Any:
        from .automata.dfa import DFA

        classes, k, table, accepting = self.parts
        return DFA.from_class_table(classes, k, table, accepting, self.start)


def automaton(key: Hashable, make: Callable[[], T]) -> T:
    """The automaton kept under ``key`` (a tuple naming the builder and its arguments) in the
    process-wide cache of :func:`automata`, made by ``make()`` and kept if missing. ``make`` must
    return a DFA and depend on nothing but ``key``; an exception it raises is not kept. A large DFA
    is kept by byte class (:data:`BY_CLASS_BYTES`): each hit hands out a new, equal DFA."""
    seen = getattr(_recording, "seen", None)
    if seen is not None:  # recording: made afresh, so that the automata it is made of are asked too
        if key not in seen:
            seen[key] = make()
        got: T = seen[key]
        return got
    cache = automata()
    hit = cache.get(key)
    if hit is not None:
        return hit.dfa() if type(hit) is _ByClass else hit  # type: ignore[no-any-return]
    made = make()
    size = table_bytes(made)
    if size >= BY_CLASS_BYTES:
        kept = _ByClass(made)
        cache.put(key, kept, kept.nbytes)
    else:
        cache.put(key, made, size)
    return made


_recording = threading.local()  # .seen: the automata recording_automata records in this thread


@contextlib.contextmanager
def recording_automata() -> Iterator[dict[Hashable, Any]]:
    """Inside the block, every automaton :func:`automaton` hands out in this thread, by its key: made
    afresh, not taken from or put in the process-wide cache (what a grammar's compile asks for when
    nothing is kept, to keep it for an installation)."""
    seen: dict[Hashable, Any] = {}
    _recording.seen = seen
    try:
        yield seen
    finally:
        _recording.seen = None
