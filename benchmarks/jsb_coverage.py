"""JSONSchemaBench coverage: compile errors (refusals) per sub-dataset, grammarmask beside llguidance.

    python benchmarks/jsb_coverage.py [--llg-python /tmp/benchvenv/bin/python] [--full] [--timeout 60]

Over every schema of the sample (``<corpus>/json_schema/jsonschemabench/<Sub>/<id>.json``):

- grammarmask: ``JsonSchema(schema).to_lark()`` (where refusals happen), or with ``--full`` the whole
  compile on tekken 131k. An ``UnsupportedSchemaError`` is counted under its ``keyword``, a
  ``GrammarError`` under ``GrammarError``; a warning is an error (strict mode).
- llguidance: ``grammar_from_json_schema`` + ``validate_grammar_with_warnings`` with tekken (what the
  harness does), in a subprocess running ``--llg-python`` (the venv llguidance is installed in).

Each engine runs in a worker subprocess that prints one JSON line per schema; a schema that takes over
``--timeout`` seconds kills the worker (counted as an error, noted ``timeout``) and a new worker
resumes after it. Prints a markdown table; ``--json`` also writes the per-schema results.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = Path(os.environ.get("GRAMMARMASK_CORPUS", ROOT.parent / "shared" / "corpus"))
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")
BENCH = CORPUS / "json_schema" / "jsonschemabench"


def schema_files() -> list[tuple[str, Path]]:
    """(sub-dataset, path) of every schema in the sample (or the sub-datasets in $JSB_SUBS)."""
    only = set(filter(None, os.environ.get("JSB_SUBS", "").split(",")))
    out = []
    for sub in sorted(p for p in BENCH.iterdir() if p.is_dir() and (not only or p.name in only)):
        out.extend((sub.name, f) for f in sorted(sub.glob("*.json")))
    return out


# --- workers (one subprocess per engine) ------------------------------------------------------------


def _gm_worker(skip: int, full: bool) -> None:
    sys.path.insert(0, str(ROOT))
    import warnings

    import grammarmask as gm
    from grammarmask.errors import GrammarError, UnsupportedSchemaError
    from grammarmask.frontends import json_schema as js

    vocab = None
    if full:
        from grammarmask.loaders import mistral_tokenizer

        vocab = gm.Vocabulary.from_mistral(mistral_tokenizer("tekken"))
    for i, (sub, path) in enumerate(schema_files()):
        if i < skip:
            continue
        _emit({"start": i})
        res: dict[str, Any] = {"i": i, "sub": sub, "id": path.stem}
        js._RULES_CACHE.clear()
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                g = gm.JsonSchema(json.loads(path.read_text()))
                g.to_lark()
                if vocab is not None:
                    g.compile(vocab)
            res["status"] = "ok"
        except UnsupportedSchemaError as e:
            res.update(status="error", keyword=e.keyword, pointer=e.pointer, error=str(e)[:200])
        except GrammarError as e:
            res.update(status="error", keyword="GrammarError", error=str(e)[:200])
        except Warning as e:  # strict mode warns on nothing, but an unexpected warning is a failure
            res.update(status="error", keyword=type(e).__name__, error=str(e)[:200])
        res["secs"] = time.perf_counter() - t0
        _emit(res)


def _llg_worker(skip: int) -> None:
    import llguidance as llg

    sys.path.insert(0, str(HERE))
    from engines.llguidance import _Tok

    sys.path.insert(0, str(ROOT))
    import grammarmask as gm
    from grammarmask.loaders import mistral_tokenizer

    vocab = gm.Vocabulary.from_mistral(mistral_tokenizer("tekken"))
    specials = sorted(vocab.special_ids - {vocab.eos_token_id})
    tok = llg.LLTokenizer(
        llg.TokenizerWrapper(_Tok(list(vocab.token_bytes), vocab.eos_token_id, specials, None)),
        n_vocab=vocab.size,
    )
    for i, (sub, path) in enumerate(schema_files()):
        if i < skip:
            continue
        _emit({"start": i})
        res: dict[str, Any] = {"i": i, "sub": sub, "id": path.stem}
        t0 = time.perf_counter()
        try:
            grammar = llg.LLMatcher.grammar_from_json_schema(path.read_text())
            is_err, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, tok)
            if is_err:
                res.update(status="error", error="; ".join(messages)[:200])
            else:
                res["status"] = "ok"
                if messages:
                    res["warnings"] = "; ".join(messages)[:200]
        except Exception as e:  # noqa: BLE001 - any failure to compile is a compile error
            res.update(status="error", error=f"{type(e).__name__}: {e}"[:200])
        res["secs"] = time.perf_counter() - t0
        _emit(res)


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


# --- driver -------------------------------------------------------------------------------------------


def run(engine: str, python: str, timeout: float, full: bool) -> dict[int, dict[str, Any]]:
    """Run the engine's worker until every schema has a result; a stuck schema is a timeout error."""
    files = schema_files()
    results: dict[int, dict[str, Any]] = {}
    skip = 0
    while skip < len(files):
        cmd = [python, str(Path(__file__).resolve()), "--worker", engine, "--skip", str(skip)]
        if full:
            cmd.append("--full")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current, deadline = None, time.monotonic() + 600.0  # start-up (vocabulary load) allowance
        while True:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                proc.kill()
                proc.wait()
                if current is None:
                    raise SystemExit(f"{engine} worker did not start")
                sub, path = files[current]
                results[current] = {
                    "i": current, "sub": sub, "id": path.stem, "status": "error",
                    "keyword": "timeout", "error": f"timeout > {timeout:.0f} s", "secs": timeout,
                }
                skip = current + 1
                break
            line = proc.stdout.readline()
            if not line:  # worker exited (done or crashed)
                proc.wait()
                if current is not None and current not in results:
                    sub, path = files[current]
                    results[current] = {
                        "i": current, "sub": sub, "id": path.stem, "status": "error",
                        "keyword": "crash", "error": f"worker exited {proc.returncode}",
                    }
                skip = max(results, default=-1) + 1
                break
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if "start" in obj:
                current, deadline = obj["start"], time.monotonic() + timeout
            else:
                results[obj["i"]] = obj
                current = None
    return results


def table(gm_res: dict[int, dict[str, Any]], llg_res: dict[int, dict[str, Any]]) -> str:
    subs: dict[str, list[int]] = {}
    for i, (sub, _) in enumerate(schema_files()):
        subs.setdefault(sub, []).append(i)
    rows = [
        "| sub-dataset | schemas | grammarmask refused | llguidance errors | top grammarmask refusals |",
        "|---|---|---|---|---|",
    ]
    tot = Counter[str]()
    for sub, ids in subs.items():
        g_err = [gm_res[i] for i in ids if gm_res.get(i, {}).get("status") != "ok"]
        l_err = [llg_res[i] for i in ids if i in llg_res and llg_res[i].get("status") != "ok"]
        kw = Counter(r.get("keyword", "?") for r in g_err)
        top = ", ".join(f"{k} {n}" for k, n in kw.most_common(4))
        mark = " **" if llg_res and len(g_err) > len(l_err) else ""
        l_txt = str(len(l_err)) if llg_res else "-"
        rows.append(f"| {sub} | {len(ids)} | {len(g_err)}{mark} | {l_txt} | {top} |")
        tot["n"] += len(ids)
        tot["g"] += len(g_err)
        tot["l"] += len(l_err)
    rows.append(f"| **total** | {tot['n']} | {tot['g']} | {tot['l']} | |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["gm", "llg"], help=argparse.SUPPRESS)
    ap.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--full", action="store_true", help="grammarmask: compile on tekken too")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per schema (then an error)")
    ap.add_argument("--llg-python", default="/tmp/benchvenv/bin/python")
    ap.add_argument("--no-llg", action="store_true", help="grammarmask only")
    ap.add_argument("--json", type=Path, help="write the per-schema results here")
    ap.add_argument("--list", action="store_true", help="list every grammarmask refusal")
    ap.add_argument("--subs", default="", help="comma list of sub-datasets (default: all)")
    args = ap.parse_args()
    if args.worker == "gm":
        return _gm_worker(args.skip, args.full)
    if args.worker == "llg":
        return _llg_worker(args.skip)

    if args.subs:
        os.environ["JSB_SUBS"] = args.subs  # inherited by the workers
    gm_res = run("gm", sys.executable, args.timeout, args.full)
    llg_res = {} if args.no_llg else run("llg", args.llg_python, args.timeout, False)
    print(f"JSONSchemaBench sample, {len(gm_res)} schemas; timeout {args.timeout:.0f} s per compile\n")
    print(table(gm_res, llg_res))
    print("\n(** = more refusals than llguidance)")
    secs = sorted(r.get("secs", 0.0) for r in gm_res.values())
    if secs:
        what = "compile on tekken" if args.full else "to_lark"
        print(f"\ngrammarmask {what}: p50 {secs[len(secs) // 2]:.3f} s, max {secs[-1]:.2f} s")
    slow = [r for r in list(gm_res.values()) + list(llg_res.values()) if r.get("keyword") == "timeout"]
    if slow:
        print("\nTimeouts: " + ", ".join(f"{r['sub']}/{r['id']}" for r in slow))
    kw = Counter(r.get("keyword", "?") for r in gm_res.values() if r["status"] != "ok")
    print("\ngrammarmask refusals by keyword: " + ", ".join(f"{k} {n}" for k, n in kw.most_common()))
    if args.list:
        print()
        for r in sorted(gm_res.values(), key=lambda r: (str(r.get("keyword")), r["sub"])):
            if r["status"] != "ok":
                other = llg_res.get(r["i"], {}).get("status", "-")
                print(f"- {r['sub']}/{r['id']} [{r.get('keyword')} {r.get('pointer', '')}] llg={other}: "
                      f"{r.get('error', '')[:140]}")
    if args.json:
        args.json.write_text(json.dumps({"grammarmask": gm_res, "llguidance": llg_res}, indent=1))


if __name__ == "__main__":
    main()
