"""A brute-force viability oracle built on lark alone, for small alphabets (test helper).

``LarkOracle(text, alphabet, max_len)`` parses every string over ``alphabet`` up to ``max_len`` with
``lark.Lark(text).parse`` (lark's default Earley parser and dynamic lexer). A prefix is viable iff it is
a prefix of an accepted string; this is exact for prefixes that, when viable, have a completion over
the alphabet short enough to fit within ``max_len`` (the test grammars are chosen so that they do).
"""

from __future__ import annotations

import itertools

import lark


class LarkOracle:
    def __init__(self, text: str, alphabet: str, max_len: int, start: str = "start") -> None:
        parser = lark.Lark(text, parser="earley", lexer="dynamic", start=start)
        self.accepted: set[bytes] = set()
        self.prefixes: set[bytes] = set()
        for n in range(max_len + 1):
            for chars in itertools.product(alphabet, repeat=n):
                s = "".join(chars)
                try:
                    parser.parse(s)
                except lark.exceptions.LarkError:
                    continue
                b = s.encode()
                self.accepted.add(b)
                for i in range(len(b) + 1):
                    self.prefixes.add(b[:i])

    def viable(self, data: bytes) -> bool:
        return data in self.prefixes

    def complete(self, data: bytes) -> bool:
        return data in self.accepted
