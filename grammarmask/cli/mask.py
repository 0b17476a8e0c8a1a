"""``grammarmask mask``: a text through the grammar, step by step."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from ..errors import NoLegalContinuation, TokenRejected
from ._common import (
    EXIT_OK,
    EXIT_REJECTED,
    _compile,
    _grammar,
    _load_hf,
    _show,
    load_tokenizer,
    progress,
)
from .check import order_hint


def cmd_mask(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    t0 = time.perf_counter()
    if args.model:
        hf_tok, model, vocab = _load_hf(args.model)
        args.tokenizer = args.model
        ids = [int(t) for t in hf_tok(args.text, add_special_tokens=False)["input_ids"]]
    else:
        with progress(f"loading tokenizer {args.tokenizer}"):
            tok, vocab = load_tokenizer(args.tokenizer)
        ids = [int(t) for t in tok.encode(args.text, bos=False, eos=False)]
    prep = time.perf_counter() - t0
    compiled, secs = _compile(grammar, vocab, args.grammar)
    logp = _model_logprobs(model, hf_tok, ids) if args.model else None
    m = compiled.matcher()
    steps: list[dict[str, Any]] = []
    result: dict[str, Any] = {"result": "accepted", "step": None, "reason": ""}
    if not args.json:
        print(f"tokenizer {args.tokenizer}: {vocab.size:,} tokens, loaded and indexed in {prep:.2f} s")
        print(f"grammar {args.grammar}: compiled in {secs * 1e3:.1f} ms; the text is {len(ids)} tokens")
        print(f"{'step':>4}  {'token':>7}  {'bytes':<24} {'legal':>9}  {'mask us':>8}  forced")
    for i, t in enumerate(ids, 1):
        try:
            t0 = time.perf_counter()
            legal = len(m.mask())
            us = (time.perf_counter() - t0) * 1e6
            forced_list = m.forced_tokens()
        except NoLegalContinuation as e:
            result = {"result": "rejected", "step": i, "reason": str(e)}
            break
        forced = bool(forced_list) and forced_list[0] == t
        step = {
            "step": i,
            "token_id": t,
            "bytes": _show(vocab.token_bytes[t]),
            "legal": legal,
            "mask_us": round(us, 1),
            "forced": forced,
        }
        if logp is not None:  # -log Z: the model's probability mass outside the legal set, in nats
            legal_lp = logp[i - 1][m.mask().to_bool()[: logp.shape[1]]]
            step["neg_log_z"] = -float(np.logaddexp.reduce(legal_lp)) if legal_lp.size else float("inf")
        steps.append(step)
        if not args.json:
            z = f"  -log Z {step['neg_log_z']:.3f}" if "neg_log_z" in step else ""
            mark = "forced" if forced else ""
            print(f"{i:>4}  {t:>7}  {step['bytes']:<24} {legal:>9,}  {us:>8.1f}  {mark:6}{z}")
        try:
            m.advance(t)
        except TokenRejected as e:
            result = {"result": "rejected", "step": i, "reason": str(e)}
            break
    else:
        if not m.is_accepting():
            result = {
                "result": "incomplete",
                "step": len(ids),
                "reason": "the text is a viable prefix but not a complete sentence (EOS is illegal)",
            }
    output = vocab.decode(ids[: len(steps) if result["result"] == "rejected" else len(ids)])
    hint = order_hint(args, args.text.encode()) if result["result"] != "accepted" else None
    if hint:
        result["hint"] = hint
    if args.json:
        print(
            json.dumps(
                {
                    "grammar": args.grammar,
                    "tokenizer": args.tokenizer,
                    "vocab_s": prep,
                    "compile_ms": secs * 1e3,
                    "tokens": len(ids),
                    "steps": steps,
                    **result,
                },
                indent=2,
            )
        )
    elif result["result"] == "accepted":
        print(f"accepted: {len(ids)} tokens, the output is a complete sentence (EOS legal)")
    elif result["result"] == "rejected":
        print(f"rejected at step {result['step']}: {result['reason']}")
    else:
        print(f"incomplete after {len(ids)} tokens: {result['reason']}")
    if hint and not args.json:
        print(f"note: {hint}")
    if logp is not None and not args.json and steps:
        nats = sum(s["neg_log_z"] for s in steps)
        bits = nats / len(steps) / np.log(2)
        print(f"KL(p_C || p) along this text: {nats:.3f} nats, {bits:.3f} bits per token")
    if not args.json and args.tokenizer == "sentencepiece" and output[:1] == b" " and args.text[:1] != " ":
        print("note: sentencepiece adds a leading space to the text (its dummy prefix)", file=sys.stderr)
    return EXIT_OK if result["result"] == "accepted" else EXIT_REJECTED


def _model_logprobs(model: Any, tok: Any, ids: list[int]) -> np.ndarray[Any, Any]:
    """Row i: the model's next-token log-probabilities before ``ids[i]`` (after BOS, if it has one)."""
    import torch

    bos = [int(tok.bos_token_id)] if tok.bos_token_id is not None else [int(tok.eos_token_id or 0)]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([bos + ids])).logits[0, : len(ids)].double()
    return torch.log_softmax(logits, dim=-1).numpy()
