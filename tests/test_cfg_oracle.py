"""The lark-based viability oracle itself (tests/support_oracles.py)."""

from __future__ import annotations

from .support_oracles import LarkOracle


def test_oracle_follows_lark_greedy_lexing() -> None:
    # Two NAMEs need a separator: lark's longest match would swallow "ab" as one NAME.
    orc = LarkOracle('start: NAME NAME\nNAME: /[ab]+/\n%ignore " "\n', "ab ", 5)
    assert orc.complete(b"a b") and orc.complete(b"ab ba")
    assert not orc.complete(b"ab") and orc.viable(b"ab") and not orc.viable(b"a b a")
