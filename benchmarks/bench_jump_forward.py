"""Jump-forward on the seeds' conjugation schema: how many model calls forced tokens save.

    python benchmarks/bench_jump_forward.py [--runs 50]

The schema is the one in the seeds (``{"verb": enum of 20, "tense": enum of 5, "person": enum of 3}``,
all required, no other keys). ``gm.generate`` runs ``--runs`` times with ``RandomModel`` logits (one
seed per run) on the real tekken vocabulary, once with ``jump_forward=True`` and once with ``False``,
through two equivalent grammars: ``JsonSchema`` (compact whitespace; the CFG backend's forced bytes
are derived from its masks) and the same language written as one ``Regex``. With jump-forward,
tokens the grammar forces (punctuation, key names, the rest of an enum value once its prefix is
unique) are appended without a model call. Prints a markdown table.
Target: jump-forward saves at least half of the model calls.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grammarmask.decoding import generate  # noqa: E402
from grammarmask.frontends.json_schema import JsonSchema  # noqa: E402
from grammarmask.frontends.regex import Regex  # noqa: E402
from grammarmask.grammar import Grammar  # noqa: E402
from grammarmask.models import RandomModel  # noqa: E402
from grammarmask.vocab import Vocabulary  # noqa: E402

VERBS = [
    "work", "play", "walk", "talk", "listen", "watch", "study", "finish", "start", "look",
    "want", "like", "be", "have", "do", "go", "come", "see", "eat", "write",
]  # fmt: skip
TENSES = ["infinitive", "present_simple", "past_simple", "past_participle", "simple_future"]
PERSONS = ["1sg", "2sg", "3sg"]

CONJUGATION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verb": {"enum": VERBS},
        "tense": {"enum": TENSES},
        "person": {"enum": PERSONS},
    },
    "required": ["verb", "tense", "person"],
    "additionalProperties": False,
}


def conjugation_regex() -> str:
    """The compact-JSON language of :data:`CONJUGATION` (keys in schema order) as one regex."""

    def alt(xs: list[str]) -> str:
        return "(?:" + "|".join(re.escape(x) for x in xs) + ")"

    return rf'\{{"verb":"{alt(VERBS)}","tense":"{alt(TENSES)}","person":"{alt(PERSONS)}"\}}'


def run(grammar: Grammar, vocab: Vocabulary, runs: int, jump: bool) -> dict[str, float]:
    compiled = grammar.compile(vocab)
    calls = tokens = 0
    t0 = time.perf_counter()
    for seed in range(runs):
        r = generate(RandomModel(vocab.size, seed=seed), vocab, compiled, max_tokens=200, seed=seed,
                     jump_forward=jump)  # fmt: skip
        if not r.finished:
            raise SystemExit(f"run {seed} did not finish: {r.text!r}")
        calls += r.model_calls
        tokens += len(r.token_ids)
    return {"calls": calls / runs, "tokens": tokens / runs, "seconds": (time.perf_counter() - t0) / runs}


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    vocab = Vocabulary.from_mistral("tekken")
    print(f"# jump-forward, conjugation schema, tekken ({vocab.size} tokens), {args.runs} runs each")
    print()
    print("| grammar | calls without | calls with | saved | tokens/output | ms/output (with) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, g in (
        ("JsonSchema (compact)", JsonSchema(CONJUGATION, whitespace="compact")),
        ("Regex (same language)", Regex(conjugation_regex())),
    ):
        off = run(g, vocab, args.runs, jump=False)
        on = run(g, vocab, args.runs, jump=True)
        saved = 1 - on["calls"] / off["calls"]
        print(
            f"| {name} | {off['calls']:.1f} | {on['calls']:.1f} | {saved:.0%} | "
            f"{on['tokens']:.1f} | {on['seconds'] * 1e3:.1f} |"
        )


if __name__ == "__main__":
    main()
