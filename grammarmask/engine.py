"""The seam between front ends and engines: IR in, compiled grammar out.

Front ends build the IR (a :class:`~grammarmask.ir.Cfg` or a byte :class:`~grammarmask.automata.DFA`)
and hand it here; they never import an engine. Two engines sit behind the two calls:

- ``"native"``: the Rust engine (:mod:`grammarmask.native`, the extension ``grammarmask._engine``),
  the default whenever the extension is importable. Regular languages compile with its regular index;
  context-free grammars with its CFG engine (:mod:`grammarmask.native.cfg`) when :func:`native_cfg`
  says so (the environment variable ``GRAMMARMASK_NATIVE_CFG``: ``1`` on, ``0`` off, unset the
  default :data:`NATIVE_CFG_DEFAULT`), else with the Python one.
- ``"python"``: the pure-Python engine (:mod:`grammarmask.regular`, :mod:`grammarmask.cfg`), kept as
  the executable specification the native one is tested against.

``Grammar.compile(vocab, engine=...)`` chooses one for the whole compile (nested compiles of parts
inherit it) through :func:`in_use`; :func:`selected` tells the engine in force.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .errors import GrammarError

if TYPE_CHECKING:
    from .automata import DFA
    from .grammar import CompiledGrammar
    from .ir import Cfg
    from .vocab import Vocabulary

__all__ = ["ENGINES", "NATIVE_CFG_DEFAULT", "compile_cfg", "compile_dfa", "in_use", "native_cfg", "resolve",
           "selected"]

ENGINES = ("native", "python")

#: whether engine "native" compiles context-free grammars with the Rust CFG engine when
#: ``GRAMMARMASK_NATIVE_CFG`` is unset. On: its masks equal the Python engine's (tests/test_native_cfg.py,
#: and all 401,080 steps of the JSONSchemaBench sample in both property orders), and
#: :func:`grammarmask.completion.shortest_completion` reads its chart (src/cfg/complete.rs);
#: ``GRAMMARMASK_NATIVE_CFG=0`` keeps the Python CFG engine under engine "native"
NATIVE_CFG_DEFAULT = True

_SELECTED: contextvars.ContextVar[str] = contextvars.ContextVar("grammarmask_engine")


def _default() -> str:
    from .native import available

    return "native" if available() else "python"


def resolve(engine: str | None) -> str:
    """The engine a compile with ``engine=`` uses: the one named, else the one in force (inside a
    compile), else ``"native"`` when the extension is importable and ``"python"`` when not.

    Raises
    ------
    GrammarError
        ``engine`` is not None, ``"native"`` or ``"python"``, or is ``"native"`` and the extension
        ``grammarmask._engine`` cannot be imported.
    """
    if engine is None:
        return _SELECTED.get(None) or _default()
    if not isinstance(engine, str) or engine not in ENGINES:
        raise GrammarError(f"compile: engine must be None, 'native' or 'python', got {engine!r}")
    if engine == "native":
        from .native import IMPORT_ERROR, available

        if not available():
            raise GrammarError(
                "compile: engine='native' needs the extension grammarmask._engine, which did not "
                f"import ({IMPORT_ERROR}); reinstall with pip to build it, or use engine='python'"
            )
    return engine


def selected() -> str:
    """The engine of the compile in progress (outside one: the default)."""
    return _SELECTED.get(None) or _default()


@contextlib.contextmanager
def in_use(engine: str) -> Iterator[str]:
    """Make ``engine`` (a name :func:`resolve` returned) what :func:`selected` returns in the block."""
    token = _SELECTED.set(engine)
    try:
        yield engine
    finally:
        _SELECTED.reset(token)


def native_cfg() -> bool:
    """Whether engine ``"native"`` compiles context-free grammars with the Rust CFG engine: the
    environment variable ``GRAMMARMASK_NATIVE_CFG`` (``0``, ``false``, ``no`` or empty: no; any other
    value: yes), read at each compile, else :data:`NATIVE_CFG_DEFAULT`."""
    v = os.environ.get("GRAMMARMASK_NATIVE_CFG")
    if v is None:
        return NATIVE_CFG_DEFAULT
    return v.strip().lower() not in ("0", "false", "no", "")


def compile_cfg(cfg: Cfg, vocab: Vocabulary, *, remake: Callable[[], Cfg] | None = None) -> CompiledGrammar:
    """A context-free grammar bound to ``vocab`` (Earley parser over a lexer of byte DFAs): by the
    Rust CFG engine when ``"native"`` is selected and :func:`native_cfg` is true, else by the Python
    engine. ``remake`` (the front end's way to build ``cfg`` again, the same) lets the native
    engine's compiled grammar let go of the IR once compiled (the Python engine reads it at every
    step)."""
    if selected() == "native" and native_cfg():
        from .native.cfg import NativeCompiledCfg

        return NativeCompiledCfg(cfg, vocab, remake=remake)
    from .cfg import CompiledCfg

    return CompiledCfg(cfg, vocab)


def compile_dfa(dfa: DFA, vocab: Vocabulary) -> CompiledGrammar:
    """A regular language (a trimmed byte DFA) bound to ``vocab`` through its token index, by the
    selected engine."""
    if selected() == "native":
        from .native.regular import NativeDfaCompiledGrammar

        return NativeDfaCompiledGrammar(vocab, dfa)
    from .regular import DfaCompiledGrammar

    return DfaCompiledGrammar(vocab, dfa)
