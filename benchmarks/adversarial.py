"""Every adversarial input of the budget issues (15 and 19), each in its own process on tekken 131k:
its outcome (a result or a documented error), wall time and peak memory, against 30 s and 1 GB.

    python benchmarks/adversarial.py                  # every case -> benchmarks/results/adversarial.{json,md}
    python benchmarks/adversarial.py --case enum_100k  # cases whose name contains the text

A case builds a grammar (constructing it is part of the case: front ends check their input there),
compiles it against tekken and then either feeds the tokens the issue fed (``feed``: a mask before
each token, the slowest step reported) or walks 20 random legal tokens (seeded) and finishes along
``shortest_completion``; a finished document is checked by the reference (``jsonschema`` with its
format checker, ``re.fullmatch``, lark's Earley parser). Outcomes:

- ``result``: compiled; every step answered; a finished document, if any, passed the reference;
- ``refused: <Error>``: one of grammarmask's documented errors (GrammarError and its subclasses,
  TokenRejected), with its message;
- anything else (another exception, a document the reference rejects, over 30 s, over 1 GB) fails.

Time is counted from the moment the child has loaded the vocabulary (tekken from the disk cache,
reported apart as ``base``), and the limit covers construction, compilation and the walk. Memory is
the child's peak RSS (VmHWM) including the vocabulary; the parent polls RSS every 20 ms and kills a
child over the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SECONDS, MEGABYTES = 30.0, 1024


def nested(kind: str, n: int) -> dict[str, Any]:
    """A string schema wrapped ``n`` times in an object property, array items or an anyOf."""
    s: dict[str, Any] = {"type": "string"}
    for _ in range(n):
        if kind == "object":
            s = {"type": "object", "properties": {"a": s}}
        elif kind == "array":
            s = {"type": "array", "items": s}
        else:
            s = {"anyOf": [s, {"type": "null"}]}
    return s


def ref_chain(n: int) -> dict[str, Any]:
    """``$defs/d0 -> d1 -> ... -> dn`` (a string), the root a ``$ref`` to d0: n + 1 hops."""
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def words(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct lowercase words of 4-12 letters."""
    rng, out = random.Random(seed), set()
    while len(out) < n:
        out.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 12))))
    return sorted(out)


# name -> (issue, what, kind, input, options). kind: schema | schema_text | lark | gbnf | regex.
# options: feed (text whose tekken tokens are fed one by one), strict, twice (compile two grammars).
CASES: dict[str, tuple[str, str, str, Any, dict[str, Any]]] = {
    "lark_s_s_a_x1000": ("15", "Lark s: s s | \"a\", 1,000 a's", "lark",
                         'start: s\ns: s s | "a"\n', {"feed": ["a"] * 1000}),
    "gbnf_s_s_a_x1000": ("15", "GBNF twin, 1,000 a's", "gbnf", 'root ::= s\ns ::= s s | "a"\n',
                         {"feed": ["a"] * 1000}),
    "schema_nested_200_object": ("15", "objects nested 200 deep", "schema", nested("object", 200), {}),
    "schema_nested_200_array": ("15", "arrays nested 200 deep", "schema", nested("array", 200), {}),
    "schema_nested_200_anyOf": ("15", "anyOf nested 200 deep", "schema", nested("anyOf", 200), {}),
    "schema_ref_chain_1000": ("15", "$ref chain 1,000 long", "schema", ref_chain(1000), {}),
    "enum_100k_strings": ("15", "enum of 100,000 strings", "schema", {"enum": words(100_000)}, {}),
    "enum_100k_strings_twice": ("19", "the same, compiled twice in one process", "schema",
                                {"enum": words(100_000)}, {"twice": True}),
    "array_minItems_15000": ("15", "minItems 15,000", "schema", {"type": "array", "minItems": 15000}, {}),
    "string_maxLength_1e9": ("15", "maxLength 10^9", "schema", {"type": "string", "maxLength": 10**9}, {}),
    "regex_groups_500_deep": ("15", "regex groups nested 500 deep", "regex", "(" * 500 + "a" + ")" * 500, {}),
    "schema_no_finite_instance": ("15", "recursive schema with no finite instance", "schema",
                                  {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
                                  {}),
    "const_nan": ("19", "const NaN", "schema", {"const": float("nan")}, {}),
    # tekken's longest run of a's is one 3-byte token
    "gbnf_root_root_a_plus": ("19", 'GBNF root ::= root root | "a"+ | "a"?, 3 + 16 a\'s', "gbnf",
                              'root ::= root root | "a"+ | "a"?\n', {"feed": ["aaa"] + ["a"] * 16}),
    "lark_s_s_a_x400": ("19", "Lark s: s s | \"a\", 400 a's", "lark", 'start: s\ns: s s | "a"\n',
                        {"feed": ["a"] * 400}),
    "string_maxLength_2147483647": ("19", "maxLength 2^31-1", "schema",
                                    {"type": "string", "maxLength": 2147483647}, {}),
    "string_maxLength_1e7": ("19", "maxLength 10^7", "schema", {"type": "string", "maxLength": 10**7}, {}),
    "array_minItems_5000": ("19", "minItems 5,000", "schema", {"type": "array", "minItems": 5000}, {}),
    "regex_a_opt_x4000": ("19", '"a?" * 4000', "regex", "a?" * 4000, {}),
    "regex_a_opt_x10000": ("19", '"a?" * 10000', "regex", "a?" * 10000, {}),
    "optional_properties_2000": ("19", "2,000 optional properties", "schema",
                                 {"type": "object",
                                  "properties": {f"p{i}": {"type": "integer"} for i in range(2000)}}, {}),
    "schema_nested_98_object": ("19", "objects nested 98 deep", "schema", nested("object", 98), {}),
    "schema_nested_123_array": ("19", "arrays nested 123 deep", "schema", nested("array", 123), {}),
    "schema_nested_82_anyOf": ("19", "anyOf nested 82 deep", "schema", nested("anyOf", 82), {}),
    "schema_ref_chain_494": ("19", "$ref chain 494 long", "schema", ref_chain(494), {}),
    "schema_text_brackets_100000": ("19", '"[" * 100000 + "]" * 100000 as schema text', "schema_text",
                                    "[" * 100000 + "]" * 100000, {}),
    "fuzz_contains_ref_root": ("19", '{"contains": {"$ref": "#"}}', "schema", {"contains": {"$ref": "#"}},
                               {}),
    "fuzz_anyOf_ref_root_oneOf": ("19", "boolean, anyOf with $ref to the root, oneOf [true]", "schema",
                                  {"type": "boolean", "anyOf": [{"$ref": "#"}, {"type": "string"}, {}],
                                   "oneOf": [True]}, {}),
    "fuzz_oneOf_ref_root_nonstrict": ("19", "oneOf with $ref to the root, strict=False", "schema",
                                      {"oneOf": [{"$ref": "#"}, True, True], "type": ["string"]},
                                      {"strict": False}),
    "lark_parens_500": ("19", "500 nested parentheses in a Lark rule", "lark",
                        "start: " + "(" * 500 + '"a"' + ")" * 500 + "\n", {}),
    "gbnf_parens_500": ("19", "500 nested parentheses in a GBNF rule", "gbnf",
                        "root ::= " + "(" * 500 + '"a"' + ")" * 500 + "\n", {}),
}


# ---- the child: one case ---------------------------------------------------------------------------


def build(kind: str, data: Any, opts: dict[str, Any]) -> Any:
    import grammarmask as gm

    if kind == "schema":
        return gm.JsonSchema(data, strict=opts.get("strict", True))
    if kind == "schema_text":
        return gm.JsonSchema(data)
    if kind == "lark":
        return gm.Lark(data)
    if kind == "gbnf":
        return gm.Gbnf(data)
    return gm.Regex(data)


def reference(kind: str, data: Any, opts: dict[str, Any]) -> Callable[[str], bool] | None:
    if kind == "schema" and opts.get("strict", True):
        import jsonschema

        cls = jsonschema.Draft202012Validator
        v = cls(data, format_checker=cls.FORMAT_CHECKER)

        def ok(text: str) -> bool:
            try:
                doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError:
                return False
            return bool(v.is_valid(doc))

        return ok
    if kind == "regex":
        return lambda text: re.fullmatch(data, text) is not None
    if kind == "lark":
        import lark

        parser = lark.Lark(data, parser="earley")

        def parses(text: str) -> bool:
            try:
                parser.parse(text)
            except lark.exceptions.LarkError:
                return False
            return True

        return parses
    return None  # GBNF: the fuzz harness's reference; here the walk's own consistency


def child(name: str) -> None:
    import cold_cache  # benchmarks/ is on sys.path: this file runs as a script

    cold_cache.use()  # a fresh grammar cache per case: no case reads what an earlier one compiled

    import grammarmask as gm
    from grammarmask.errors import GrammarError, TokenRejected

    issue, what, kind, data, opts = CASES[name]
    vocab = gm.Vocabulary.from_mistral("tekken")
    print(json.dumps({"ready": _rss()}), flush=True)
    t0 = time.perf_counter()
    res: dict[str, Any]
    try:
        grammars = [build(kind, data, opts) for _ in range(2 if opts.get("twice") else 1)]
        for g in grammars:
            compiled = g.compile(vocab)
        res = {"outcome": "result", **_walk_checked(compiled, vocab, kind, data, opts)}
    except (GrammarError, TokenRejected) as e:
        res = {"outcome": f"refused: {type(e).__name__}", "message": (str(e).splitlines() or [""])[0][:160]}
    except Exception as e:  # noqa: BLE001 - any other exception is the finding this script looks for
        res = {"outcome": f"FAILED: {type(e).__name__}", "message": (str(e).splitlines() or [""])[0][:160]}
    res["seconds"] = round(time.perf_counter() - t0, 3)
    res["peak_mb"] = _hwm()
    print(json.dumps(res), flush=True)


def _walk_checked(compiled: Any, vocab: Any, kind: str, data: Any, opts: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from grammarmask.completion import shortest_completion

    feed = opts.get("feed")
    m = compiled.matcher()
    buf = np.zeros((1, (vocab.size + 31) // 32), dtype=np.uint32)
    single = {vocab.token_bytes[i]: i for i in range(vocab.size) if len(vocab.token_bytes[i]) == 1}
    lookup = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    rng = random.Random(0)
    plan: list[int | None] = [lookup[t.encode()] for t in feed] if feed else [None] * 20
    slowest, taken = 0.0, []
    for tok in plan:
        t0 = time.perf_counter()
        m.fill_mask(buf)
        slowest = max(slowest, time.perf_counter() - t0)
        bits = np.unpackbits(buf[0].view(np.uint8), bitorder="little")[: vocab.size]
        if tok is None:
            legal = [t for t in np.flatnonzero(bits).tolist() if t != vocab.eos_token_id]
            if not legal:
                break
            tok = rng.choice(legal)
        elif not bits[tok]:
            return {"steps": len(taken), "slowest_ms": round(slowest * 1e3, 2),
                    "note": "a fed token is illegal"}
        m.advance(tok)
        taken.append(tok)
    out: dict[str, Any] = {"steps": len(taken), "slowest_ms": round(slowest * 1e3, 2)}
    if feed:
        return out
    tail = shortest_completion(compiled, m.state)
    if tail is None:
        out["note"] = "no completion known"
        return out
    for b in tail:
        m.advance(single[bytes([b])])
    if not m.is_accepting():
        raise AssertionError("the shortest completion did not end in an accepting state")
    text = vocab.decode(taken).decode("utf-8", "replace") + tail.decode("utf-8", "replace")
    check = reference(kind, data, opts)
    out["document_bytes"] = len(text.encode())
    if check is not None:
        try:
            verdict = check(text)
        except RecursionError:  # jsonschema follows a $ref cycle that consumes nothing without end
            out["note"] = "finished; the reference recurses without end on this schema"
            return out
        if not verdict:
            raise AssertionError(f"the reference rejects the finished document {text[:80]!r}")
        out["note"] = "finished; the reference accepts it"
    else:
        out["note"] = "finished"
    return out


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    return 0


def _rss() -> int:
    return _status("VmRSS:")


def _hwm() -> int:
    return _status("VmHWM:")


# ---- the parent: every case in its own process -----------------------------------------------------


def run_case(name: str) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, __file__, "--child", name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline() or "{}")
    if "ready" not in ready:
        proc.wait()
        err = proc.stderr.read() if proc.stderr else ""
        return {"outcome": "FAILED: child did not start", "message": err.strip().splitlines()[-1:]}
    t0, peak, verdict = time.perf_counter(), 0, None
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max(peak, next((int(x.split()[1]) // 1024 for x in f if x.startswith("VmRSS:")), 0))
        except OSError:
            pass
        if peak > MEGABYTES:
            verdict = f"FAILED: over {MEGABYTES} MB"
        elif time.perf_counter() - t0 > SECONDS:
            verdict = f"FAILED: over {SECONDS:.0f} s"
        if verdict:
            proc.kill()
            break
        time.sleep(0.02)
    out, err = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    res = json.loads(lines[-1]) if lines else {"outcome": "FAILED: no answer", "message": err.strip()[-200:]}
    if verdict:
        res = {"outcome": verdict, "seconds": round(time.perf_counter() - t0, 1), "peak_mb": peak}
    res["base_mb"] = ready["ready"]
    res["peak_mb"] = max(res.get("peak_mb", 0), peak)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="", help="run the cases whose name contains this text")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "adversarial")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    names = [n for n in CASES if args.case in n]
    rows = []
    for name in names:
        res = run_case(name)
        rows.append({"case": name, "issue": CASES[name][0], "what": CASES[name][1], **res})
        print(f"{name:32} {res['outcome']:28} {res.get('seconds', '?'):>8} s {res['peak_mb']:>6} MB"
              f"  {res.get('note') or res.get('message') or ''}", flush=True)
    failed = [r["case"] for r in rows if r["outcome"].startswith("FAILED")]
    if not args.case:
        write(args.out, rows)
    print(f"{len(rows) - len(failed)} of {len(rows)} within {SECONDS:.0f} s and {MEGABYTES} MB with a "
          f"documented outcome" + (f"; failed: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


def write(out: Path, rows: list[dict[str, Any]]) -> None:
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    summary = {"when": stamp, "load": load, "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        "# Adversarial inputs (issues 15 and 19), each in its own process on tekken 131k",
        "",
        f"`python benchmarks/adversarial.py`, {stamp}, load {load} (1/5/15 min) when the run ended. Limits "
        f"{SECONDS:.0f} s (construction + compilation + steps, after the vocabulary is loaded) and "
        f"{MEGABYTES} MB "
        "peak RSS (the whole process, vocabulary included: `base` is its RSS once tekken is loaded).",
        "",
        "| issue | input | outcome | s | peak MB | base MB | steps | slowest step ms | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        note = (r.get("note") or r.get("message") or "").replace("|", "\\|")
        lines.append(f"| {r['issue']} | {r['what'].replace('|', chr(92) + '|')} | {r['outcome']} | "
                     f"{r.get('seconds', '')} | {r['peak_mb']} | {r['base_mb']} | {r.get('steps', '')} | "
                     f"{r.get('slowest_ms', '')} | {note} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
