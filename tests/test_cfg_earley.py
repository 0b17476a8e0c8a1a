"""The Earley recognizer's complexity guarantees and persistence, observed through the CFG backend."""

from __future__ import annotations

from grammarmask.frontends.lark import Lark
from grammarmask.testing import byte_vocabulary


def _final_set_size(text: str, n: int) -> int:
    c = Lark(text).compile(byte_vocabulary(), engine="python")  # the Python engine's chart
    state = c.feed(c.initial_state(), b"a" * n + b"b")
    (e, _, _, _), *_ = [cfg for cfg in state if cfg[3]]
    assert c.is_accepting_state(state)
    return int(e.size)


def test_leo_keeps_right_recursion_flat() -> None:
    # Without Leo, completing the final "b" adds one item per "a" (a chain back to the start).
    grammar = 'start: x\nx: "a" x | "b"\n'
    assert _final_set_size(grammar, 400) == _final_set_size(grammar, 20)


def test_left_recursion_is_flat() -> None:
    grammar = 'start: x "b"\nx: x "a" | "a"\n'
    assert _final_set_size(grammar, 400) == _final_set_size(grammar, 20)


def test_work_per_step_does_not_grow_with_the_document() -> None:
    # Per-step work is bounded by the size of the current Earley set: it must not grow with the
    # number of items already parsed (the timing side is in benchmarks/bench_cfg.py).
    c = Lark('start: item*\nitem: "[" NUMBER "]"\nNUMBER: /[0-9]+/\n%ignore " "\n').compile(byte_vocabulary(),
                                                                                         engine="python")

    def sizes(n: int) -> list[int]:
        state = c.feed(c.initial_state(), b"[12] " * n)
        return sorted(int(cfg[0].size) for cfg in state)

    assert sizes(2000) == sizes(50) == sizes(3)


def test_fork_and_rollback_share_the_chart() -> None:
    c = Lark('start: "(" start ")" | "x"\n').compile(byte_vocabulary())
    m = c.matcher()
    for ch in b"(((":
        m.advance(ch + 1)
    f = m.fork()
    f.advance(ord("x") + 1)
    assert ord(")") + 1 in f.mask() and ord("x") + 1 in m.mask()
    m.rollback(2)
    assert ord("x") + 1 in m.mask() and ord(")") + 1 not in m.mask()
