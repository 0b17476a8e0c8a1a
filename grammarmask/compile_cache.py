"""Compiled grammars on disk: a second process compiling a grammar it compiled before reads the
expensive part from :mod:`grammarmask.disk_cache` instead of building it again.

What is expensive is the context-free path. For a JSON Schema it is the grammar rules (the schema
compiler, in the constructor), the IR (``build_cfg``: every terminal's regex to a minimal byte DFA)
and the Earley engine's tables (the lexer's combined transition table and reachability facts, the
parser's prediction closures); for Lark and GBNF the IR is built in the constructor (lark's loader,
the terminal DFAs). A ``Regex`` builds its DFA in the constructor: most of a second for a pattern
with Unicode classes and counted repeats (6,000 states), so a large one (``regex-dfa`` below) is
stored; the regular engines' token index (tens of milliseconds) and ``Choice`` are not.

Entries, by what they hold:

- ``json-schema-rules``: a schema's grammar rules and the :class:`~grammarmask.SchemaWarning` texts
  its compiler emitted, by the schema's canonical text, its options and the limits. The constructor
  re-issues the warnings at the caller's line, as on a miss. A schema that raises is never stored,
  so invalid input is refused the same way every time.
- ``lark-ir`` / ``gbnf-ir``: a grammar text's :class:`~grammarmask.ir.Cfg` (and where it names special
  tokens), by the text, the start rule, the limits and, for Lark, every grammar file an ``%import``
  could read (path, size, modification time). Lark grammars with a loader function among their
  ``import_paths`` are not stored.
- ``regex-dfa``: a pattern's DFA of at least
  :data:`grammarmask.frontends.regex.DISK_STATES` states, by the pattern, its flags, ``max_states``
  and the limits.
- ``compiled``: what :meth:`grammarmask.Grammar.compile` builds for one of those grammars, by its
  content key, the limits, the engine (and whether the native CFG engine is on), and the
  vocabulary's content hash (:attr:`~grammarmask.Vocabulary.fingerprint`). For the Python CFG engine
  this is the IR and the engine's tables; for the native one the flat tables the Rust engine is built
  from (:func:`grammarmask.native.cfg.flat_tables`: bytes and int lists, which pickle as fast as they
  copy, so the background writer holds the GIL a fraction of a millisecond, not the 2-10 ms the IR's
  objects took), or the IR when the grammar cannot make it again (Lark, GBNF). Nothing holding a
  native handle is pickled. Masks, walks and other lazily filled caches are not stored: a new process
  fills them as it decodes.

Compositions (``&``, ``|``, ``+``, ``repeat``, structural tags) are not stored themselves: their
context-free parts compile through :meth:`~grammarmask.Grammar.compile` and so through these
entries, and their regular parts are cheap.

Every key also holds :func:`~grammarmask.disk_cache.code_hash`: another version of grammarmask never
reads these entries. An entry that cannot be read is ignored and made again. Only work that took at
least ``$GRAMMARMASK_CACHE_MIN_MS`` (:func:`~grammarmask.disk_cache.worth_storing`) is written.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from . import disk_cache

if TYPE_CHECKING:
    from .grammar import CompiledGrammar, Grammar
    from .limits import Limits
    from .vocab import Vocabulary

__all__ = ["compile_through", "lark_imports", "stable"]

#: the front ends whose compiled form is stored: their cache key is all their content
#: (a Lark grammar's %import files are added by :func:`lark_imports`)
_STORED = frozenset({"JsonSchema", "Lark", "Gbnf"})


def stable(key: Hashable) -> bool:
    """Whether ``key``'s ``repr`` names its content (not an object's address, as a function's does).
    Strings, numbers and tuples of them do without a look at their text (a JSON Schema's key holds
    the schema's JSON, written out three times a compile only to be searched)."""
    stack: list[Any] = [key]
    while stack:
        x = stack.pop()
        t = type(x)
        if t in _PLAIN:
            continue
        if t is tuple or t is frozenset:
            stack.extend(x)
        elif " at 0x" in repr(x):
            return False
    return True


_PLAIN = frozenset({str, bytes, int, float, bool, type(None)})


def compile_through(grammar: Grammar, vocab: Vocabulary, key: Hashable, limits: Limits, engine: str,
                    make: Callable[[], CompiledGrammar]) -> CompiledGrammar:
    """``make()`` (``grammar._compile(vocab)`` under the compile's limits and engine), or the same
    compiled grammar rebuilt from the disk entry an earlier process stored."""
    if disk_cache.directory() is None or type(grammar).__name__ not in _STORED:
        return make()
    from .engine import native_cfg

    extra = getattr(grammar, "_disk_extra", None)
    deps = extra() if callable(extra) else ()
    if deps is None or not stable(key):
        return make()
    dkey = (type(grammar).__module__, type(grammar).__qualname__, key, deps, limits, engine,
            engine == "native" and native_cfg(), vocab.fingerprint)
    snap = disk_cache.load("compiled", dkey, packed=True)
    if snap is not None:
        compiled = _restore(snap, vocab, limits, grammar._cfg_maker())
        if compiled is not None:
            return compiled
    made, costly = disk_cache.made_costly(make)
    snap = _snapshot(made) if costly else None
    if snap is not None:
        disk_cache.store_later("compiled", dkey, snap, packed=True)
    return made


def _snapshot(compiled: CompiledGrammar) -> tuple[Any, ...] | None:
    """What :func:`_restore` needs to rebuild ``compiled`` (None: a kind that is not stored)."""
    # (the Python engine's module, only if something imported it: importing it here took ~30 ms
    # of a process's first costly compile)
    python_engine = sys.modules.get(f"{__package__}.cfg.compiled")
    if python_engine is not None and type(compiled) is python_engine.CompiledCfg:
        return ("cfg+tables", compiled.cfg, compiled.lex, compiled.earley)  # type: ignore[attr-defined]
    if type(compiled).__name__ == "NativeCompiledCfg":
        tables = compiled.flat()  # type: ignore[attr-defined]
        if tables is not None and compiled._remake is not None:  # type: ignore[attr-defined]
            # the engine's flat tables (bytes, int lists: they pickle as fast as they copy; the
            # IR's DFA and rule objects took 2-10 ms of pickling with the GIL held, in the writer
            # thread, beside the compiles running meanwhile); the IR is made again when asked for
            return ("tables", tables)
        return ("cfg", compiled.cfg)  # type: ignore[attr-defined]
    return None


def _restore(snap: Any, vocab: Vocabulary, limits: Limits,
             remake: Callable[[], Any] | None = None) -> CompiledGrammar | None:
    from .engine import compile_cfg

    try:
        if snap[0] == "cfg+tables":
            from .cfg import CompiledCfg  # (the Python engine: imported only for its own entries)

            _, cfg, lex, earley = snap
            return CompiledCfg(cfg, vocab, limits, tables=(lex, earley))
        if snap[0] == "tables" and remake is not None:
            from .native.cfg import NativeCompiledCfg

            return NativeCompiledCfg(None, vocab, limits, tables=snap[1], remake=remake)
        if snap[0] == "cfg":
            return compile_cfg(snap[1], vocab, remake=remake)
    except Exception:  # noqa: BLE001 - an entry that does not fit this code: compiled again
        return None
    return None


# --- Lark %import files ------------------------------------------------------------------------

_IMPORT = re.compile(r"^[ \t]*%import[ \t]+(\.?)([\w.]+)", re.M)


def lark_imports(text: str, source_path: str | None, import_paths: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Every grammar file an ``%import`` in ``text`` (and in the files it imports) could read, as
    (path, size, modification time), for a disk key; None when a loader function is among the
    ``import_paths`` (what it reads cannot be known). Over-inclusive: every candidate directory lark
    searches (``import_paths``, the grammar's own directory, lark's bundled grammars) is looked in."""
    if any(not isinstance(p, str) for p in import_paths):
        return None
    if "%import" not in text:
        return ()
    spec = importlib.util.find_spec("lark")
    stdlib = [os.path.join(os.path.dirname(spec.origin), "grammars")] if spec and spec.origin else []
    if source_path is not None:
        own = os.path.dirname(os.path.abspath(source_path))
    else:
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        own = os.path.dirname(os.path.abspath(main)) if main else os.path.abspath(os.curdir)
    found: dict[str, tuple[int, int]] = {}
    todo = [(text, own)]
    while todo:
        src, base = todo.pop()
        for m in _IMPORT.finditer(src):
            rel = os.path.join(*m.group(2).split(".")) + ".lark"
            dirs = [*import_paths, base, *stdlib]
            # "%import a.b.C": the module is a/b.lark (the last name may be a rule or terminal)
            parts = m.group(2).split(".")
            cands = {os.path.join(d, r) for d in dirs
                     for r in (rel, os.path.join(*parts[:-1]) + ".lark" if len(parts) > 1 else rel)}
            for c in sorted(cands):
                path = os.path.abspath(c)
                if path in found or not os.path.isfile(path):
                    continue
                st = os.stat(path)
                found[path] = (st.st_size, st.st_mtime_ns)
                try:
                    with open(path, encoding="utf-8") as f:
                        todo.append((f.read(), os.path.dirname(path)))
                except (OSError, UnicodeDecodeError):
                    continue
    return tuple(sorted((p, *v) for p, v in found.items()))
