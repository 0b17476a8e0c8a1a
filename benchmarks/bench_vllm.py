"""vLLM's structured-output path: masks filled per second, grammarmask beside XGrammar and guidance.

    tools/serving-tests --collect-only -q   # once: builds the vLLM environment (/tmp/vllm-venv)
    /tmp/vllm-venv/bin/python benchmarks/bench_vllm.py [--batches 1,16,128,512] [--steps 48]

Each backend runs inside vLLM 0.33's real ``StructuredOutputManager`` on the CPU, over tekken (131k
tokens, vLLM's ``MistralTokenizer``): XGrammar and guidance by name, grammarmask through its switch.
A batch of B requests has B distinct JSONSchemaBench schemas (the sample in the shared corpus), each
following one of its valid documents, tokenized by the tokenizer; every backend gets the same
requests and the same tokens. Per step the manager fills the batch's bitmask
(``grammar_bitmask``, timed), then accepts each request's next token (not timed). A request whose
document ended is terminated and no longer counted. A fresh manager (fresh caches) per backend and
batch, so every step is a first visit for that request, as on real traffic.

Printed per backend and batch: rows filled per second (masks of live requests / time in
``grammar_bitmask``), the step's p50/p99 latency, and the compile time per schema (p50/p99).
Schemas that any of the three refuses, or whose document one of them rejects, are left out (the
count is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workloads import jsonschemabench  # noqa: E402

BACKENDS = ("grammarmask", "xgrammar", "guidance")


def model_dir(out: Path) -> Path:
    """A Mistral-format model directory: mistral-common's tekken.json and a Llama config."""
    import mistral_common

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tekken_240911.json", out / "tekken.json")
    (out / "config.json").write_text(json.dumps({
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 131072,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32", "rms_norm_eps": 1e-5,
    }))
    return out


class Engine:
    """One backend inside vLLM's StructuredOutputManager."""

    def __init__(self, backend: str, model_config: Any, max_num_seqs: int) -> None:
        from vllm.config import DeviceConfig, SchedulerConfig, StructuredOutputsConfig, VllmConfig
        from vllm.v1.structured_output import StructuredOutputManager

        self.model_config = model_config
        self.so_config = StructuredOutputsConfig(backend="auto" if backend == "grammarmask" else backend)
        sched = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=8192, max_model_len=4096,
                                is_encoder_decoder=False)
        self.config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"),
                                 structured_outputs_config=self.so_config, scheduler_config=sched)
        self.manager = StructuredOutputManager(self.config)
        self.tokenizer = self.manager.tokenizer
        self.requests: dict[str, Any] = {}

    def submit(self, rid: str, schema: Any) -> float:
        """Validate and compile one request; its compile time in seconds (raises if refused)."""
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams
        from vllm.v1.request import Request

        sp = SamplingParams(structured_outputs=StructuredOutputsParams(json=schema), max_tokens=4096)
        sp.verify(self.model_config, None, self.so_config, self.tokenizer)
        sp.update_from_generation_config({}, self.tokenizer.eos_token_id)
        req = Request(rid, [1], sp, None)
        t0 = time.perf_counter()
        self.manager.grammar_init(req)
        grammar = req.structured_output_request._grammar.result()
        dt = time.perf_counter() - t0
        assert grammar is not None
        self.requests[rid] = req
        return dt


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.tokenizer.encode(text, bos=False, eos=False)) + [tokenizer.eos_token_id]


def usable(model_config: Any, candidates: list[Any], need: int) -> list[tuple[Any, list[int]]]:
    """The first ``need`` (schema, document tokens) that every backend compiles and accepts."""
    engines = {b: Engine(b, model_config, 8) for b in BACKENDS}
    out: list[tuple[Any, list[int]]] = []
    seen: set[str] = set()
    refused = 0
    for i, w in enumerate(candidates):
        key = json.dumps(w.source, sort_keys=True)
        if key in seen or not w.docs:
            continue
        seen.add(key)
        tokens = encode(engines["grammarmask"].tokenizer, w.docs[0])
        ok = True
        for e in engines.values():
            try:
                e.submit(f"probe{i}", w.source)
                g = e.requests.pop(f"probe{i}").structured_output_request.grammar
                ok = ok and g.validate_tokens(tokens) == tokens
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


def run(backend: str, model_config: Any, work: list[tuple[Any, list[int]]], steps: int) -> dict[str, float]:
    import numpy as np

    engine = Engine(backend, model_config, max(len(work), 16))
    compile_s = [engine.submit(f"r{i}", schema) for i, (schema, _) in enumerate(work)]
    ids = list(engine.requests)
    times: list[float] = []
    rows = 0
    for step in range(steps):
        live = [rid for rid, (_, toks) in zip(ids, work, strict=True) if step < len(toks)]
        if not live:
            break
        t0 = time.perf_counter()
        engine.manager.grammar_bitmask(engine.requests, ids, {})
        times.append(time.perf_counter() - t0)
        rows += len(live)
        for rid, (_, toks) in zip(ids, work, strict=True):
            if step < len(toks):
                assert engine.manager.accept_tokens(engine.requests[rid], [toks[step]]), (backend, rid, step)
    engine.manager.clear_backend()
    return {
        "rows_per_s": rows / sum(times),
        "step_p50_ms": 1e3 * statistics.median(times),
        "step_p99_ms": 1e3 * float(np.percentile(times, 99)),
        "compile_p50_ms": 1e3 * statistics.median(compile_s),
        "compile_p99_ms": 1e3 * float(np.percentile(compile_s, 99)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,16,128,512")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    from grammarmask.integrations import vllm as gv

    os.environ[gv.SWITCH_ENV] = "1"
    gv.install()
    import vllm
    from vllm.config import ModelConfig

    with tempfile.TemporaryDirectory() as tmp:
        d = model_dir(Path(tmp) / "tekken-model")
        model_config = ModelConfig(model=str(d), tokenizer=str(d), tokenizer_mode="mistral", dtype="float32",
                                   max_model_len=4096)
        work = usable(model_config, jsonschemabench(60), max(batches))
        print(f"# vLLM {vllm.__version__}, {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, tekken 131k, {args.steps} steps")
        print("backend      batch  rows/s     step p50 ms  step p99 ms  compile p50 ms  compile p99 ms")
        for b in batches:
            for backend in args.backends.split(","):
                r = run(backend, model_config, work[:b], args.steps)
                print(f"{backend:<12} {b:>5}  {r['rows_per_s']:>9.0f}  {r['step_p50_ms']:>11.2f}  "
                      f"{r['step_p99_ms']:>11.2f}  {r['compile_p50_ms']:>14.1f}  "
                      f"{r['compile_p99_ms']:>14.1f}", flush=True)


if __name__ == "__main__":
    main()
