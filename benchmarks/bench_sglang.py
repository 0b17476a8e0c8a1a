"""SGLang's grammar backends: masks filled per second, grammarmask beside XGrammar and llguidance.

    tools/serving-tests-sglang --collect-only -q   # once: builds the SGLang environment (/tmp/sglang-venv)
    OMP_NUM_THREADS=1 /tmp/sglang-venv/bin/python benchmarks/bench_sglang.py [--batches 1,16,128,512]

(``OMP_NUM_THREADS=1``: on a loaded machine torch's intra-op threads made allocating the batch's mask
cost about 20 ms a step at batch 16, for every backend alike, hiding the masks' own cost.)

Each backend is built by SGLang 0.5.23's own ``create_grammar_backend`` from server arguments naming
it (grammarmask through its plugin, registered by SGLang's plugin loader), on the CPU, over tekken
(131k tokens; mistral-common's tekken.json converted to a Hugging Face tokenizer by transformers'
``MistralConverter`` and read by SGLang's ``get_tokenizer``). A batch of B requests has B distinct
JSONSchemaBench schemas (the sample in the shared corpus), each following one of its valid documents,
tokenized by the tokenizer; every backend gets the same requests and the same tokens. Per step the
batch's mask is built as SGLang's ``SamplingBatchInfo.update_regex_vocab_mask`` builds it (allocate,
then ``fill_vocab_mask_batched`` over the live rows; timed), then each request accepts its next token
(not timed). A request whose document ended is terminated and no longer counted. A fresh backend
(fresh caches) per backend and batch, so every step is a first visit for that request.

Printed per backend and batch: rows filled per second, the step's p50/p99 latency, and the compile
time per schema (p50/p99, SGLang's dispatch in the calling thread). Schemas that any of the three
refuses, or whose document one of them rejects, are left out (the count is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workloads import jsonschemabench  # noqa: E402

BACKENDS = ("grammarmask", "xgrammar", "llguidance")


def model_dir(out: Path) -> Path:
    """tekken as a Hugging Face tokenizer directory, with a Mistral config of 131,072 logits."""
    import mistral_common
    from transformers.integrations.mistral.tokenizer import MistralConverter

    out.mkdir(parents=True, exist_ok=True)
    tekken = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    MistralConverter(str(tekken)).converted().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 4096,
    }))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 131072,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32", "rms_norm_eps": 1e-5,
    }))
    return out


class Setup:
    """The tokenizer and model config SGLang's scheduler would hold, read once."""

    def __init__(self, d: Path) -> None:
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.utils.hf_transformers_utils import get_tokenizer

        self.dir = d
        args = ServerArgs(model_path=str(d), device="cpu")
        publish(args, role="scheduler")
        self.tokenizer = get_tokenizer(str(d))
        self.model_config = ModelConfig.from_server_args(args)

    def backend(self, name: str) -> Any:
        from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import ServerArgs

        args = ServerArgs(model_path=str(self.dir), device="cpu", grammar_backend=name)
        publish(args, role="scheduler")
        mc = self.model_config
        return create_grammar_backend(args, self.tokenizer, mc.vocab_size, mc.hf_eos_token_id)


def compile_one(backend: Any, schema: Any) -> tuple[Any, float]:
    """SGLang's dispatch of one ``json`` key; the grammar and its compile time (raises if refused)."""
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    t0 = time.perf_counter()
    g = backend._init_value_dispatch(("json", json.dumps(schema)), False)
    dt = time.perf_counter() - t0
    if isinstance(g, InvalidGrammarObject):
        raise ValueError(g.error_message)
    return g, dt


def accepts(grammar: Any, tokens: list[int]) -> bool:
    try:
        for t in tokens:
            grammar.accept_token(t)
    except ValueError:
        return False
    return bool(grammar.is_terminated())


def usable(setup: Setup, candidates: list[Any], need: int) -> list[tuple[Any, list[int]]]:
    """The first ``need`` (schema, document tokens) that every backend compiles and accepts."""
    backends = {b: setup.backend(b) for b in BACKENDS}
    tok = setup.tokenizer
    out: list[tuple[Any, list[int]]] = []
    seen: set[str] = set()
    refused = 0
    for w in candidates:
        key = json.dumps(w.source, sort_keys=True)
        if key in seen or not w.docs:
            continue
        seen.add(key)
        tokens = [*tok.encode(w.docs[0], add_special_tokens=False), tok.eos_token_id]
        ok = True
        for b in backends.values():
            try:
                ok = accepts(compile_one(b, w.source)[0], tokens)
            except Exception:  # noqa: BLE001 - a refusal by any backend leaves the schema out
                ok = False
            if not ok:
                break
        if ok:
            out.append((w.source, tokens))
            if len(out) == need:
                break
        else:
            refused += 1
    print(f"# schemas: {len(out)} usable, {refused} left out (refused by a backend or document rejected)",
          flush=True)
    return out


def run(setup: Setup, name: str, work: list[tuple[Any, list[int]]], steps: int) -> dict[str, float]:
    import numpy as np
    from sglang.srt.constrained.base_grammar_backend import GrammarRow

    backend = setup.backend(name)
    compiled = [compile_one(backend, schema) for schema, _ in work]
    grammars = [g for g, _ in compiled]
    vocab_size = setup.model_config.vocab_size
    times: list[float] = []
    rows = 0
    for step in range(steps):
        live = [i for i, (_, toks) in enumerate(work) if step < len(toks)]
        if not live:
            break
        t0 = time.perf_counter()
        first = grammars[0]
        mask = first.allocate_vocab_mask(vocab_size=vocab_size, batch_size=len(work), device="cpu")
        entries = [GrammarRow(row=i, grammar=grammars[i]) for i in live
                   if not grammars[i].finished and not grammars[i].is_terminated()]
        first.fill_vocab_mask_batched(entries, mask)
        times.append(time.perf_counter() - t0)
        rows += len(entries)
        for i in live:
            grammars[i].accept_token(work[i][1][step])
    backend.reset()
    return {
        "rows_per_s": rows / sum(times),
        "step_p50_ms": 1e3 * statistics.median(times),
        "step_p99_ms": 1e3 * float(np.percentile(times, 99)),
        "compile_p50_ms": 1e3 * statistics.median(dt for _, dt in compiled),
        "compile_p99_ms": 1e3 * float(np.percentile([dt for _, dt in compiled], 99)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,16,128,512")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SGLang's import-time notices on a machine without a GPU
        import sglang
        from sglang.srt.plugins import load_plugins

        load_plugins()  # registers grammarmask, as every SGLang process does
    from grammarmask.integrations import sglang as gs

    gs.register()  # idempotent; run from a checkout, a stale grammarmask.egg-info may hide the entry point

    with tempfile.TemporaryDirectory() as tmp:
        setup = Setup(model_dir(Path(tmp) / "tekken-model"))
        work = usable(setup, jsonschemabench(60), max(batches))
        print(f"# SGLang {sglang.__version__}, {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, tekken 131k, {args.steps} steps")
        print("backend      batch  rows/s     step p50 ms  step p99 ms  compile p50 ms  compile p99 ms")
        for b in batches:
            for name in args.backends.split(","):
                r = run(setup, name, work[:b], args.steps)
                print(f"{name:<12} {b:>5}  {r['rows_per_s']:>9.0f}  {r['step_p50_ms']:>11.2f}  "
                      f"{r['step_p99_ms']:>11.2f}  {r['compile_p50_ms']:>14.1f}  "
                      f"{r['compile_p99_ms']:>14.1f}  (load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
