"""Output quality on a real model: SmolLM2-135M-Instruct, greedy, on the task set of tasks.py.

Modes: unconstrained (then parsed leniently), grammarmask with the exact byte-level mask, grammarmask
with canonical forced text, llguidance (LLMatcher), and XGrammar when it is importable (run this
script with a Python that has it). Reports per mode and task kind: validity rate, task accuracy,
generated tokens per second (model and masks together) and -log Z per model-chosen token (nats), and
per pair of engines how many outputs are identical, with the first differing step of each difference.

    python benchmarks/quality/run.py [--tasks person,topic-1] [--out benchmarks/results/quality]

Writes ``<out>.json`` and ``<out>.md`` (the tables docs/quality.md quotes).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drivers import (  # noqa: E402
    Engine,
    GrammarmaskConstraint,
    Run,
    first_difference,
    grammarmask_engines,
    greedy,
    llguidance_engine,
    xgrammar_engine,
)
from tasks import TASKS, Task  # noqa: E402

import grammarmask as gm  # noqa: E402
from grammarmask.canonical import canonical  # noqa: E402

MAX_TOKENS = 80
FLEXIBLE = "grammarmask-canonical-ws"  # JSON with flexible whitespace (the others: compact)
FLEXIBLE_EXACT = "grammarmask-ws"
PAIRS = [("grammarmask-canonical", "llguidance"), ("grammarmask", "llguidance"), ("grammarmask", "xgrammar"),
         ("grammarmask-canonical", "xgrammar"), ("grammarmask-ws", "grammarmask-canonical-ws")]


# --- scoring -----------------------------------------------------------------------------------


def _norm(x: Any) -> Any:
    return x.strip().casefold() if isinstance(x, str) else x


def _first_object(text: str) -> Any:
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None


def score(task: Task, text: str, constrained: bool) -> tuple[bool, bool]:
    """(valid: the output is in the task's language, correct: the answer is the gold one). An
    unconstrained output is parsed leniently first (the first JSON object; the first label named;
    the first line without quotes or a final period)."""
    if task.kind == "schema":
        import jsonschema

        obj = _first_object(text) if not constrained else _loads(text)
        valid = obj is not None and jsonschema.Draft202012Validator(task.source).is_valid(obj)
        correct = isinstance(obj, dict) and all(_norm(obj.get(k)) == _norm(v) for k, v in task.gold.items())
        return valid, correct
    if task.kind == "labels":
        valid = text.strip().rstrip(".").casefold() in {x.casefold() for x in task.source}
        named = [x for x in task.source if re.search(rf"\b{re.escape(x)}\b", text, re.IGNORECASE)]
        named.sort(key=lambda x: text.casefold().find(x.casefold()))
        return valid, bool(named) and named[0].casefold() == task.gold.casefold()
    line = text.strip().splitlines()[0].strip().strip("`'\"").rstrip(".") if text.strip() else ""
    import lark

    try:
        lark.Lark(task.source).parse(line)
    except lark.exceptions.LarkError:
        return False, False
    if isinstance(task.gold, str):
        return True, line == task.gold
    return True, _value(line) == task.gold


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _value(expr: str) -> float | None:
    if not re.fullmatch(r"[0-9+\-*/()]+", expr):
        return None
    try:
        return float(eval(expr, {"__builtins__": {}}))  # digits and operators only (checked above)
    except (ZeroDivisionError, SyntaxError):
        return None


# --- running -----------------------------------------------------------------------------------


class Setup:
    def __init__(self, threads: int) -> None:
        import llguidance.hf
        import torch

        from grammarmask.integrations.transformers import HFModel
        from grammarmask.models import smollm2

        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        self.tok, self.model = smollm2()
        self.load_s = time.perf_counter() - t0
        self.width = int(self.model.config.vocab_size)
        self.vocab = gm.Vocabulary.from_hf(self.tok, size=self.width)
        self.lltok = llguidance.hf.from_tokenizer(self.tok, n_vocab=self.width)
        self.lm = HFModel(self.model)
        try:
            import xgrammar  # noqa: F401

            self.has_xgrammar = True
        except ImportError:
            self.has_xgrammar = False

    def chat(self, text: str) -> list[int]:
        ids = self.tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]

    def decode(self, ids: list[int]) -> str:
        return self.vocab.decode(ids).decode("utf-8", errors="replace")

    def piece(self, t: int) -> str:
        return str(self.tok.convert_ids_to_tokens(int(t)))

    def grammar(self, task: Task) -> gm.Grammar:
        if task.kind == "schema":
            return gm.JsonSchema(task.source, whitespace="compact", plain_integers=True)
        if task.kind == "labels":
            return gm.Choice(task.source, leading_space="none")
        return gm.Lark(task.source)

    def engines(self, task: Task) -> tuple[list[Engine], dict[str, str]]:
        out = grammarmask_engines(self.grammar(task), self.vocab, self.tok, self.width)
        if task.kind == "schema":  # the JSON the model writes unconstrained has whitespace: allow it
            flex = gm.JsonSchema(task.source, whitespace="flexible", plain_integers=True).compile(self.vocab)
            canon = canonical(flex, self.tok)
            w = self.width
            out.append(Engine(FLEXIBLE_EXACT, lambda: GrammarmaskConstraint(flex, w, FLEXIBLE_EXACT)))
            out.append(Engine(FLEXIBLE, lambda: GrammarmaskConstraint(canon, w, FLEXIBLE)))
        errors: dict[str, str] = {}
        makers = [("llguidance", lambda: llguidance_engine(self.lltok, task.kind, task.source, self.width))]
        if self.has_xgrammar:
            makers.append(("xgrammar", lambda: xgrammar_engine(self.tok, task.kind, task.source, self.width)))
        for name, make in makers:
            try:
                out.append(make())
            except Exception as e:  # a peer that cannot compile this grammar: reported, not fatal
                errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return out, errors


def run_task(setup: Setup, task: Task) -> dict[str, Any]:
    prompt = setup.chat(task.prompt)
    eos = setup.vocab.eos_token_id
    rows: dict[str, Any] = {}
    free = greedy(setup.lm, None, prompt, setup.decode, eos, MAX_TOKENS + 32)
    rows["unconstrained"] = _row(task, free, constrained=False)
    engines, errors = setup.engines(task)
    runs: dict[str, Run] = {}
    for e in engines:
        try:
            runs[e.name] = greedy(setup.lm, e.make(), prompt, setup.decode, eos, MAX_TOKENS, e.name)
        except Exception as ex:  # an engine failing mid-generation: reported
            errors[e.name] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"
            continue
        rows[e.name] = _row(task, runs[e.name], constrained=True)
    by_name = {e.name: e for e in engines}
    agreement = {}
    for a, b in PAIRS:
        if a in runs and b in runs:
            d = first_difference(by_name[a], runs[a], by_name[b], runs[b], setup.piece, setup.decode)
            agreement[f"{a} / {b}"] = None if d is None else str(d)
    return {"task": task.name, "kind": task.kind, "rows": rows, "errors": errors, "agreement": agreement}


def _row(task: Task, run: Run, constrained: bool) -> dict[str, Any]:
    valid, correct = score(task, run.text, constrained)
    return {"text": run.text, "valid": valid, "correct": correct, "tokens": len(run.tokens),
            "seconds": run.seconds, "finished": run.finished, "neg_log_z": run.neg_log_z}


# --- reporting ---------------------------------------------------------------------------------

MODES = ["unconstrained", "grammarmask", "grammarmask-canonical", "llguidance", "xgrammar", FLEXIBLE_EXACT,
         FLEXIBLE]


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Model: SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to float32), greedy, chat template; "
             f"{meta['machine']}; run {meta['when']}, load average {meta['load']}; commit {meta['commit']}.",
             "", "| kind | mode | tasks | valid | correct | tokens/s | -log Z per token (nats) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for kind in ("schema", "labels", "lark", "all"):
        for mode in MODES:
            rows = [r["rows"][mode] for r in results if mode in r["rows"] and kind in (r["kind"], "all")]
            if not rows:
                continue
            toks = sum(r["tokens"] for r in rows)
            secs = sum(r["seconds"] for r in rows)
            nlz = [x for r in rows for x in r["neg_log_z"]]
            lines.append(
                f"| {kind} | {mode} | {len(rows)} | {sum(r['valid'] for r in rows)} | "
                f"{sum(r['correct'] for r in rows)} | {toks / secs:.1f} | "
                + (f"{sum(nlz) / len(nlz):.3f} |" if nlz else "- |"))
    lines += ["", "Greedy agreement (identical outputs / tasks both ran):", ""]
    for a, b in PAIRS:
        key = f"{a} / {b}"
        got = [r["agreement"][key] for r in results if key in r["agreement"]]
        if got:
            lines.append(f"- {key}: {sum(d is None for d in got)} / {len(got)}")
    lines += ["", "Every difference, at its first differing step:", ""]
    for r in results:
        for key, d in r["agreement"].items():
            if d is not None:
                lines.append(f"- {r['task']} ({key}): {d}")
    lines += ["", "Outputs:", "", "| task | " + " | ".join(MODES) + " |", "|---|" + "---|" * len(MODES)]
    for r in results:
        cells = []
        for mode in MODES:
            row = r["rows"].get(mode)
            if row is None:
                cells.append("n/a" if mode not in r["errors"] else "error")
                continue
            mark = "ok" if row["correct"] else ("valid" if row["valid"] else "invalid")
            text = row["text"].strip().replace("|", "\\|").replace("\n", " ")
            cells.append(f"`{text[:60]}` {mark}")
        lines.append(f"| {r['task']} | " + " | ".join(cells) + " |")
    errs = [(r["task"], k, v) for r in results for k, v in r["errors"].items()]
    if errs:
        lines += ["", "Engine errors:", ""] + [f"- {t} ({k}): {v}" for t, k, v in errs]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", help="comma-separated task names (default: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "quality"))
    args = p.parse_args()
    tasks = TASKS if not args.tasks else [t for t in TASKS if t.name in args.tasks.split(",")]
    import os
    import subprocess

    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": f"{os.getloadavg()[0]:.1f}",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=Path(__file__).parent).stdout.strip(),
    }
    setup = Setup(args.threads)
    meta["load_s"] = round(setup.load_s, 1)
    meta["xgrammar"] = setup.has_xgrammar
    results = []
    for task in tasks:
        t0 = time.perf_counter()
        results.append(run_task(setup, task))
        print(f"{task.name}: {time.perf_counter() - t0:.1f}s "
              + " ".join(f"{m}={'ok' if r['correct'] else ('v' if r['valid'] else 'x')}"
                         for m, r in results[-1]["rows"].items()), file=sys.stderr, flush=True)
    meta["load_end"] = f"{os.getloadavg()[0]:.1f}"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = render(results, meta)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
