"""The in-memory grammar IR every front end builds and every engine takes: the :class:`Cfg` (rules
over byte-DFA terminals, :mod:`.cfg`) and the builder that lowers EBNF expressions to it
(:mod:`.builder`). Regular languages are byte DFAs (:mod:`grammarmask.automata`). Printers:
:func:`to_lark` (the builder's expressions as Lark text) and :func:`to_gbnf` (any :class:`Cfg` as
llama.cpp GBNF, :mod:`.gbnf`)."""

from .builder import EMPTY, Alt, Expr, Lit, Pat, Ref, Rep, Seq, alt, build_cfg, opt, seq, star, to_lark
from .cfg import Cfg, Rule, Terminal
from .gbnf import to_gbnf

__all__ = [
    "EMPTY", "Alt", "Cfg", "Expr", "Lit", "Pat", "Ref", "Rep", "Rule", "Seq", "Terminal", "alt", "build_cfg",
    "opt", "seq", "star", "to_gbnf", "to_lark",
]  # fmt: skip
