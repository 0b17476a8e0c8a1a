"""``grammarmask check``: does each file belong to the language, and where does it fail?"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import GrammarMaskError, NoLegalContinuation, TokenRejected
from ..grammar import CompiledGrammar, Matcher
from ..testing import byte_vocabulary
from ._common import (
    EXIT_OK,
    EXIT_REJECTED,
    CliError,
    _compile,
    _grammar,
    _show,
    grammar_kind,
)

ORDER_HINT = "rejected only by the schema's declared key order: pass --property-order any to accept it"


def _byte_matcher(compiled: CompiledGrammar) -> tuple[Matcher, dict[int, int]]:
    ids = {tb[0]: i for i, tb in enumerate(compiled.vocab.token_bytes) if len(tb) == 1}
    return compiled.matcher(), ids


def _expected(m: Matcher, ids: dict[int, int]) -> str:
    try:
        legal = m.mask()
    except NoLegalContinuation:
        return "nothing"
    allowed = [b for b, t in sorted(ids.items()) if t in legal]
    parts = [_show(bytes([b])) for b in allowed[:8]]
    if m.is_accepting():
        parts.append("end of input")
    if len(allowed) > 8:
        parts.append(f"... ({len(allowed)} bytes)")
    return ", ".join(parts) or "nothing"


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[start:offset].decode("utf-8", errors="replace")) + 1
    return line, column


def check_bytes(compiled: CompiledGrammar, data: bytes) -> dict[str, Any]:
    """Feed ``data`` byte by byte; report ``ok``, ``rejected`` (first byte that cannot continue, with
    line and column) or ``incomplete`` (a viable prefix that is not a complete sentence)."""
    m, ids = _byte_matcher(compiled)
    for offset, b in enumerate(data):
        expected = None
        try:
            m.advance(ids[b])
            continue
        except TokenRejected:
            expected = _expected(m, ids)
        line, col = _position(data, offset)
        return {
            "status": "rejected",
            "offset": offset,
            "line": line,
            "column": col,
            "byte": _show(bytes([b])),
            "expected": expected,
        }
    if m.is_accepting():
        return {"status": "ok"}
    line, col = _position(data, len(data))
    return {
        "status": "incomplete",
        "offset": len(data),
        "line": line,
        "column": col,
        "expected": _expected(m, ids),
    }


def order_hint(args: argparse.Namespace, data: bytes) -> str | None:
    """:data:`ORDER_HINT` when ``data``, rejected by a JSON Schema in declared property order, is
    accepted with ``property_order="any"``; else None. The second grammar is compiled (against single
    bytes) on the first call and kept on ``args``."""
    if grammar_kind(args.grammar, args.kind) != "json" or (args.property_order or "declared") != "declared":
        return None
    if not hasattr(args, "_any_order"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the warnings were shown for the grammar itself
                args._any_order = _grammar(args, property_order="any").compile(byte_vocabulary())
        except GrammarMaskError:  # e.g. too many required keys to track in any order
            args._any_order = None
    compiled = args._any_order
    return ORDER_HINT if compiled is not None and check_bytes(compiled, data)["status"] == "ok" else None


def cmd_check(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    compiled, _ = _compile(grammar, byte_vocabulary(), args.grammar)
    results = []
    for path in args.files:
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as e:
            raise CliError(f"{path}: cannot read: {e.strerror}") from None
        if args.strip and data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        res = {"file": path, **check_bytes(compiled, data)}
        hint = order_hint(args, data) if res["status"] != "ok" else None
        if hint:
            res["hint"] = hint
        results.append(res)
        if args.json:
            continue
        if res["status"] == "ok":
            print(f"{path}: ok")
        elif res["status"] == "rejected":
            hint = (
                "; the file ends with a newline: try --strip"
                if res["offset"] == len(data) - 1 and data.endswith(b"\n")
                else f"; {res['hint']}"
                if "hint" in res
                else ""
            )
            print(
                f"{path}:{res['line']}:{res['column']}: rejected: byte {res['byte']} cannot continue "
                f"(expected {res['expected']}){hint}"
            )
        else:
            print(
                f"{path}:{res['line']}:{res['column']}: incomplete: the file is a prefix of the "
                f"language but not a complete sentence (expected {res['expected']})"
                + (f"; {res['hint']}" if "hint" in res else "")
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return EXIT_OK if all(r["status"] == "ok" for r in results) else EXIT_REJECTED
