"""One large-enum case on tekken 131k, in this process: compile, then up to 20 masks and random legal
steps; prints phase times (wall and CPU) and peak RSS. Run each case in its own process, e.g. under
``/usr/bin/time -v`` (docs/json_schema.md, "Large enums"):

    python benchmarks/large_enum.py --write-vocab /tmp/tekken.json          # once, for llguidance
    python benchmarks/large_enum.py --case enum --n 100000                   # grammarmask
    GRAMMARMASK_NATIVE_CFG=0 python benchmarks/large_enum.py --case obj      # the Python CFG engine
    /tmp/benchvenv/bin/python benchmarks/large_enum.py --engine llguidance --vocab-file /tmp/tekken.json \\
        --case enum --lexer-fuel 100000000

Cases: ``enum`` (``{"enum": words}``), ``obj`` (the enum as a required property beside an integer),
``choice`` (``gm.Choice(words)``; for llguidance a regex alternation). The words are ``n`` distinct
strings of 4-12 lowercase letters (seeded). llguidance refuses the enum at its default
``initial_lexer_fuel``; ``--lexer-fuel`` raises it (and ``step_lexer_fuel``).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = 20


def words(n: int, seed: int = 0) -> list[str]:
    rng, out = random.Random(seed), set()
    while len(out) < n:
        out.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 12))))
    return sorted(out)


def schema(case: str, w: list[str]) -> dict[str, Any]:
    if case == "enum":
        return {"enum": w}
    return {
        "type": "object",
        "properties": {"name": {"enum": w}, "n": {"type": "integer"}},
        "required": ["name", "n"],
    }


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Clock:
    def __init__(self) -> None:
        self.t, self.c = time.perf_counter(), time.process_time()

    def lap(self, what: str, **extra: Any) -> None:
        t, c = time.perf_counter(), time.process_time()
        row = {
            "phase": what,
            "wall_s": round(t - self.t, 3),
            "cpu_s": round(c - self.c, 3),
            "peak_mb": peak_mb(),
        }
        print(json.dumps({**row, **extra}), flush=True)
        self.t, self.c = t, c


def walk(mask: Any, advance: Any, size: int, eos: int, words_: Any) -> tuple[int, float]:
    """Up to STEPS masks, each followed by a random legal non-EOS token: (masks, slowest in s)."""
    import numpy as np

    rng, slowest, n = random.Random(0), 0.0, 0
    for _ in range(STEPS):
        t = time.perf_counter()
        mask()
        slowest, n = max(slowest, time.perf_counter() - t), n + 1
        bits = np.unpackbits(words_[0].view(np.uint8), bitorder="little")[:size]
        legal = [int(x) for x in np.flatnonzero(bits) if x != eos]
        if not legal or not advance(rng.choice(legal)):
            break
    return n, slowest


def run_grammarmask(case: str, w: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import grammarmask as gm

    clock = Clock()
    vocab = gm.Vocabulary.from_mistral("tekken")
    clock.lap("vocabulary")
    grammar = gm.Choice(w) if case == "choice" else gm.JsonSchema(schema(case, w))
    clock.lap("construct")
    m = grammar.compile(vocab).matcher()
    clock.lap("compile")
    buf = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    n, slowest = walk(
        lambda: m.fill_mask(buf, 0), lambda t: m.try_advance(t), vocab.size, vocab.eos_token_id, buf
    )
    clock.lap("masks", masks=n, slowest_ms=round(slowest * 1000, 1))


def run_llguidance(case: str, w: list[str], vocab_file: Path, fuel: int | None) -> None:
    import llguidance as llg
    import numpy as np

    clock = Clock()
    spec = json.loads(vocab_file.read_text())
    tokens = [bytes.fromhex(h) for h in spec["tokens"]]
    specials = set(spec["specials"]) | {spec["eos"]}

    class Tok:  # llguidance.TokenizerWrapper's duck type (as benchmarks/engines/llguidance.py)
        def __init__(self) -> None:
            self.tokens = [b"\xff[special_%d]" % i if i in specials else b for i, b in enumerate(tokens)]
            self.eos_token_id = spec["eos"]
            self.bos_token_id = None
            self.special_token_ids = sorted(specials)

        def __call__(self, s: bytes | str) -> list[int]:
            return []

    tok = llg.LLTokenizer(llg.TokenizerWrapper(Tok()), n_vocab=len(tokens))
    clock.lap("vocabulary")
    if case == "choice":
        grammar = llg.grammar_from("regex", "|".join(w))
    else:
        grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema(case, w)))
    limits = llg.LLParserLimits(initial_lexer_fuel=fuel, step_lexer_fuel=fuel) if fuel else None
    m = llg.LLMatcher(tok, grammar, log_level=0, limits=limits)
    if m.is_error():
        clock.lap("compile", error=m.get_error()[:200])
        return
    clock.lap("compile")
    buf = np.zeros((1, (len(tokens) + 31) // 32), dtype=np.int32)
    n, slowest = walk(
        lambda: m.unsafe_compute_mask_ptr(buf.ctypes.data, buf.size * buf.itemsize),
        m.consume_token,
        len(tokens),
        spec["eos"],
        buf,
    )
    clock.lap("masks", masks=n, slowest_ms=round(slowest * 1000, 1), error=m.get_error()[:200])


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=["enum", "obj", "choice"], default="enum")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--engine", choices=["grammarmask", "llguidance"], default="grammarmask")
    ap.add_argument("--vocab-file", type=Path, help="tekken's tokens for llguidance (--write-vocab)")
    ap.add_argument("--lexer-fuel", type=int, help="llguidance: initial_lexer_fuel and step_lexer_fuel")
    ap.add_argument("--write-vocab", type=Path, help="write tekken's tokens to this file and stop")
    a = ap.parse_args()
    if a.write_vocab:
        sys.path.insert(0, str(ROOT))
        import grammarmask as gm

        v = gm.Vocabulary.from_mistral("tekken")
        spec = {
            "tokens": [b.hex() for b in v.token_bytes],
            "eos": v.eos_token_id,
            "specials": sorted(v.special_ids),
        }
        a.write_vocab.write_text(json.dumps(spec))
        return
    w = words(a.n)
    if a.engine == "grammarmask":
        run_grammarmask(a.case, w)
    else:
        if a.vocab_file is None:
            ap.error("--engine llguidance needs --vocab-file (made by --write-vocab)")
        run_llguidance(a.case, w, a.vocab_file, a.lexer_fuel)


if __name__ == "__main__":
    main()
