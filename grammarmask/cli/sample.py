"""``grammarmask sample``: random valid documents."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ..grammar import CompiledGrammar, Matcher
from ._common import (
    EXIT_LIMIT,
    EXIT_OK,
    CliError,
    _compile,
    _grammar,
    load_tokenizer,
    progress,
)

_CLOSERS = b"\"')]}>\n"


def random_document(compiled: CompiledGrammar, rng: np.random.Generator, max_bytes: int) -> bytes | None:
    """A random walk over legal tokens; past ``max_bytes`` prefer EOS, then tokens that complete the
    output, then closing brackets/quotes. None if no end was reached within four times the budget."""
    vocab = compiled.vocab
    tb, eos = vocab.token_bytes, vocab.eos_token_id
    single = {b[0]: i for i, b in enumerate(tb) if len(b) == 1}
    m = compiled.matcher()
    out = bytearray()
    while len(out) <= 4 * max_bytes:
        legal = m.mask()
        if len(out) >= max_bytes:
            if eos in legal:
                return bytes(out)
            t = _finishing_token(m, legal, single, rng)
        else:
            ids = legal.token_ids()
            t = int(rng.choice(ids))
        if t == eos:
            return bytes(out)
        m.advance(t)
        out += tb[t]
    return None


def _finishing_token(m: Matcher, legal: Any, single: dict[int, int], rng: np.random.Generator) -> int:
    candidates = [t for t in single.values() if t in legal]
    if not candidates:
        return int(rng.choice(legal.token_ids()))
    order = list(rng.permutation(candidates))
    for t in order:
        probe = m.fork()
        probe.advance(int(t))
        if probe.is_accepting():
            return int(t)
    tb = m.vocab.token_bytes
    closers = [t for t in order if tb[int(t)] in [bytes([c]) for c in _CLOSERS]]
    return int(closers[0] if closers else order[0])


def cmd_sample(args: argparse.Namespace) -> int:
    from ..testing import byte_vocabulary

    if args.n < 1 or args.max_bytes < 1:
        raise CliError("-n and --max-bytes must be positive")
    grammar = _grammar(args)
    if args.tokenizer == "bytes":
        vocab = byte_vocabulary()
    else:
        with progress(f"loading tokenizer {args.tokenizer}"):
            _, vocab = load_tokenizer(args.tokenizer)
    compiled, _ = _compile(grammar, vocab, args.grammar)
    rng = np.random.default_rng(args.seed)
    docs: list[str] = []
    for _ in range(args.n):
        for _attempt in range(10):
            doc = random_document(compiled, rng, args.max_bytes)
            if doc is not None:
                break
        else:
            print(
                f"grammarmask: error: no document ended within {4 * args.max_bytes} bytes in 10 tries "
                f"(the limit is 4 x --max-bytes {args.max_bytes}: past --max-bytes the walk heads for "
                "an end, past 4 x it gives up); raise --max-bytes",
                file=sys.stderr,
            )
            return EXIT_LIMIT
        docs.append(doc.decode("utf-8", errors="backslashreplace"))
    if args.json:
        print(json.dumps(docs, ensure_ascii=False, indent=2))
    else:
        for d in docs:
            print(d)
    return EXIT_OK
