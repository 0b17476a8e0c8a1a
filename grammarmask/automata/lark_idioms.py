"""Regular rewrites of the few lookaround idioms in lark's own grammars.

lark's ``common.lark`` and ``python.lark`` spell "a string body that does not end in an odd run of
backslashes" with a lookbehind, and python's short strings forbid an opening ``""`` with a
lookahead. Those languages are regular; :func:`rewrite_lark_idioms` replaces the exact fragments
with lookaround-free patterns that have the same ``re.fullmatch`` language (checked exhaustively on
short strings in ``tests/test_automata_lark.py``). Anything else with lookaround is left alone (and
``regex_to_dfa`` then reports it).

Assumption (true wherever lark uses these fragments): the string-body fragment follows a quote
character, never a backslash, because its lookbehind can look one character before the fragment.
"""

from __future__ import annotations

import re

__all__ = ["LARK_IDIOMS", "rewrite_lark_idioms"]

_BODY = r".*?(?<!\\)(\\\\)*?"
# the body: no odd run of backslashes at its end (and no newline unless DOTALL)
_BODY_RX = r"(?:.*[^\\\n])?(?:\\\\)*"
_BODY_RX_DOTALL = r"(?:.*[^\\])?(?:\\\\)*"


def _short_string(q: str) -> tuple[str, str, str]:
    """python.lark's ``"(?!"")<body>"``: the body is not ``"`` and does not start with ``""``."""
    body = rf"(?:{q}?(?:\\\\)+|{q}?[^{q}\\\n](?:\\\\)*|(?:[^{q}\n]|{q}[^{q}\n]).*[^\\\n](?:\\\\)*)?"
    body_s = rf"(?:{q}?(?:\\\\)+|{q}?[^{q}\\](?:\\\\)*|(?:[^{q}]|{q}[^{q}]).*[^\\](?:\\\\)*)?"
    return f"{q}(?!{q}{q}){_BODY}{q}", f"{q}{body}{q}", f"{q}{body_s}{q}"


# (fragment as it appears in the pattern text, replacement, replacement under DOTALL)
LARK_IDIOMS: list[tuple[str, str, str]] = [
    _short_string('"'),
    _short_string("'"),
    (_BODY, _BODY_RX, _BODY_RX_DOTALL),
    # lark.lark REGEXP: "/(?!/)" only forbids the empty body "//"
    (r"\/(?!\/)(\\\/|\\\\|[^\/])*?\/", r"\/(\\\/|\\\\|[^\/])+?\/", r"\/(\\\/|\\\\|[^\/])+?\/"),
    (r"\/(?!\/)(\\\/|\\\\|[^\/\n])*?\/", r"\/(\\\/|\\\\|[^\/\n])+?\/", r"\/(\\\/|\\\\|[^\/\n])+?\/"),
]

_LEADING_FLAGS = re.compile(r"\(\?([aiLmsux]+)[:)]")


def rewrite_lark_idioms(pattern: str, flags: int = 0) -> str:
    """Replace lark's lookaround idioms in ``pattern`` by equivalent regular fragments.

    ``flags`` are the ``re`` flags the pattern is compiled with; a leading inline group such as
    lark's ``(?is:...)`` wrapper is also honoured for DOTALL. Patterns without the idioms are
    returned unchanged.
    """
    lead = _LEADING_FLAGS.match(pattern)
    dotall = bool(flags & re.DOTALL) or bool(lead and "s" in lead.group(1))
    for fragment, plain, with_dotall in LARK_IDIOMS:
        if fragment in pattern:
            pattern = pattern.replace(fragment, with_dotall if dotall else plain)
    return pattern
