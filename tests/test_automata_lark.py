"""lark's lookaround idioms: the rewrites have the same ``re.fullmatch`` language (exhaustively on
short strings), and lark's real terminals compile after rewriting."""

from __future__ import annotations

import itertools
import re

import lark
import pytest

from grammarmask.automata import regex_to_dfa
from grammarmask.automata.lark_idioms import rewrite_lark_idioms
from grammarmask.errors import GrammarError
from tests.support import CORPUS as SHARED_CORPUS

CORPUS = SHARED_CORPUS / "lark/lark-parser/lark_grammars"

ORIGINALS = [
    (r'".*?(?<!\\)(\\\\)*?"', 0),
    (r'".*?(?<!\\)(\\\\)*?"', re.DOTALL),
    (r"""([ubf]?r?|r[ubf])("(?!"").*?(?<!\\)(\\\\)*?"|'(?!'').*?(?<!\\)(\\\\)*?')""", re.IGNORECASE),
    (r"""(?is:([ubf]?r?|r[ubf])(\"\"\".*?(?<!\\)(\\\\)*?\"\"\"|'''.*?(?<!\\)(\\\\)*?'''))""", 0),
    (r"\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*", 0),
    (r"\/(?!\/)(\\\/|\\\\|[^\/\n])*?\/[imslux]*", 0),
]


@pytest.mark.parametrize(("pattern", "flags"), ORIGINALS)
def test_rewrite_keeps_the_fullmatch_language(pattern: str, flags: int) -> None:
    new = rewrite_lark_idioms(pattern, flags)
    assert "(?<" not in new and "(?!" not in new
    orig_rx, new_rx = re.compile(pattern, flags), re.compile(new, flags)
    dfa = regex_to_dfa(new, flags)
    alphabet = ['"', "'", "\\", "a", "\n", "/", "r"]
    for n in range(7):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            want = orig_rx.fullmatch(s) is not None
            assert (new_rx.fullmatch(s) is not None) == want, (pattern, s)
            assert dfa.matches(s.encode()) == want, (pattern, s)


def test_lark_common_terminals_compile() -> None:
    parser = lark.Lark(
        "%import common.ESCAPED_STRING\n%import common.SIGNED_NUMBER\n%import common.CNAME\n"
        "%import common.WS\n%import common.C_COMMENT\nstart: ESCAPED_STRING SIGNED_NUMBER CNAME"
    )
    for term in parser.terminals:
        rx = term.pattern.to_regexp()
        flags = re.IGNORECASE if "i" in term.pattern.flags else 0
        dfa = regex_to_dfa(rewrite_lark_idioms(rx, flags), flags)
        assert not dfa.is_empty(), term.name
    with pytest.raises(GrammarError, match="lookaround"):
        regex_to_dfa(r'".*?(?<!\\)(\\\\)*?"')
    assert CORPUS.joinpath("common.lark").exists()


def test_unrelated_patterns_are_unchanged() -> None:
    for p in [r"[a-z]+", r"(?=x)y", r"\d+(?![1-9])"]:
        assert rewrite_lark_idioms(p) == p
