"""Fuzz the Lark, GBNF, regex and JSON Schema front ends with atheris (coverage-guided libFuzzer).

    python benchmarks/fuzz_frontends.py --frontend all --minutes 10        # each front end in turn
    python benchmarks/fuzz_frontends.py --frontend regex --replay FILE     # one input, its outcome

atheris is not a dependency of grammarmask: install it next to the checkout's venv, e.g.
``pip install --target /tmp/fuzzvenv/atheris_only atheris`` and ``--atheris /tmp/fuzzvenv/atheris_only``
(that directory is appended to the fuzzing child's ``sys.path``).

Each input is one grammar text (for JSON Schema: the schema's JSON text, given to ``JsonSchema`` as
a ``str``). It is constructed, compiled against a small vocabulary (EOS, the 256 bytes and a few
multi-byte tokens), walked a few random steps (mask, then advance a legal token; an illegal token
must be refused and leave the state unchanged), finished along ``shortest_completion`` and, when
the matcher accepts, the document is checked by the reference:

- regex: ``re.fullmatch(pattern, text, flags)``;
- Lark: ``lark.Lark(text).parse(text)`` (Earley, dynamic lexer);
- GBNF: lark's Earley parser over the parsed rules printed with one-character terminals (scannerless,
  as llama.cpp reads GBNF; this checks lowering and engine, not GBNF's own syntax);
- JSON Schema: strict JSON (no NaN), then ``jsonschema`` with its format checker (strict mode only:
  ``strict=False`` drops keywords on purpose).

Allowed outcomes are a result or a documented error (``GrammarError`` and its subclasses
``BudgetExceeded`` and ``UnsupportedSchemaError``; ``TokenRejected``). Anything else is a finding,
written to ``<work>/<front end>/findings/`` with its traceback, and fuzzing goes on. libFuzzer
enforces the per-input limits (``-timeout`` 30 s, ``-rss_limit_mb`` 1024); an input over them ends
the child, is saved as an artifact, and a new child resumes from the corpus. The summary (executions,
outcomes, findings) goes to ``benchmarks/results/fuzz_frontends.{json,md}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
import traceback
import warnings
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = Path(os.environ.get("GRAMMARMASK_CORPUS", ROOT.parent / "shared" / "corpus"))
FRONTENDS = ("lark", "gbnf", "regex", "json_schema")
MAX_LEN = 8192
STEPS = 12
MAX_FEED = 1 << 20  # completions longer than this are not fed back (seconds of Python per MB)
EXTRA_TOKENS = [
    b'{"',
    b'":',
    b'",',
    b'"}',
    b"true",
    b"null",
    b"  ",
    b"\n  ",
    b"ab",
    b"aa",
    b"aaaa",
    b"12",
    b'a"',
    b"\xc3\xa9",
    b"\xe2\x82",
    b"\xf0\x9f\x98\x80",
    b"):",
    b"0.",
    b"-1",
    b"[]",
    b"{}",
    b"e+",
    b"\\u00",
]
RE_FLAGS = (0, re.IGNORECASE, re.DOTALL, re.MULTILINE, re.VERBOSE, re.ASCII, re.IGNORECASE | re.DOTALL)


# ---- seeds --------------------------------------------------------------------------------------------

REGEX_SEEDS = [
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"\d+(\.\d+)?([eE][+-]?\d+)?",
    r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}",
    r"(a|b)*a(a|b){3}",
    r"(?i)hello|world",
    r"\w+\s\w+",
    r"[^\n]{0,20}",
    r"(?:ab|cd)+?",
    r"\x41\u00e9\U0001f600",
    r"(\d{1,3}\.){3}\d{1,3}",
    r"\+?1?[ -]?\(?\d{3}\)?[ -]?\d{3}-\d{4}",
    r"(?s).{2,5}",
    r"[\w&&]|\W",
    r"a{,3}b{2,}",
    r"(?x) a b  # comment",
    r"^\$[A-Z_]+$",
    r"(?P<x>ab)(?:c|)",
    r"[\u0400-\u04ff]+",
    r"\S*\D?\d",
    r"[]a-]|[^]]",
]


def _small(paths: list[Path], n: int) -> list[bytes]:
    datas = [p.read_bytes() for p in paths]
    return sorted((d for d in datas if len(d) <= MAX_LEN), key=len)[:n]


def seeds(frontend: str) -> list[bytes]:
    """Seed inputs: the shared corpus (grammars, schemas), the tests' grammars and a few regexes."""
    if frontend == "lark":
        lark_files = sorted((CORPUS / "lark").rglob("*.lark")) + sorted((ROOT / "grammars").glob("*.lark"))
        out = _small(lark_files, 80)
    elif frontend == "gbnf":
        gbnf_files = sorted((CORPUS / "gbnf").rglob("*.gbnf")) + sorted((ROOT / "grammars").glob("*.gbnf"))
        out = _small(gbnf_files, 40)
        out += [
            b'root ::= "(" ws root ws ")" | "x"\nws ::= " "?',
            b'root ::= [a-z]{2,4} ("," [0-9]+)*',
            b'root ::= item+\nitem ::= "a" | "b" [^x]? .',
            b'root ::= "\\x41\\u00e9" [\\]\\[]',
        ]
    elif frontend == "regex":
        out = [s.encode() for s in REGEX_SEEDS]
        try:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from workloads import REGEXES  # type: ignore[import-not-found,attr-defined,unused-ignore]

            out += [p.encode() for p in dict(REGEXES).values()][:20]
        except Exception:  # noqa: BLE001 - the workloads' regexes are a bonus
            pass
    else:
        bench = sorted((CORPUS / "json_schema" / "jsonschemabench").rglob("*.json"))
        out = _small(bench, 150)
        for f in sorted((CORPUS / "json_schema" / "test_suite").rglob("*.json")):
            try:
                groups = json.loads(f.read_text())
            except (ValueError, UnicodeDecodeError):
                continue
            for g in groups if isinstance(groups, list) else []:
                if isinstance(g, dict) and "schema" in g:
                    out.append(json.dumps(g["schema"]).encode())
        out = sorted(set(out), key=len)[:400]
    return out


# ---- one input ----------------------------------------------------------------------------------------


class Finding(Exception):
    """An outcome that is a bug: an unsound document or an inconsistent matcher."""


_LARK_REFS: dict[str, Any] = {}


def _lark_reference(text: str) -> Any:
    import lark

    if text not in _LARK_REFS:
        if len(_LARK_REFS) > 64:
            _LARK_REFS.clear()
        try:
            _LARK_REFS[text] = lark.Lark(text, start="start")
        except Exception as e:  # noqa: BLE001 - lark refuses what grammarmask took: a divergence
            _LARK_REFS[text] = e
    return _LARK_REFS[text]


def _gbnf_as_lark(text: str) -> str | None:
    """The GBNF rules (as grammarmask parsed them) in lark, one terminal per literal; None when
    a rule holds what lark cannot say small (a special token, a repeat over 40)."""
    from grammarmask.frontends.gbnf import parse_gbnf
    from grammarmask.ir.builder import Alt, Lit, Pat, Ref, Rep, Seq

    rules, _ = parse_gbnf(text)
    names = {n: f"r{i}" for i, n in enumerate(rules)}

    def one(c: str) -> str:  # lark unescapes \\U... itself, so printable ASCII is escaped for re instead
        return re.escape(c).replace("/", "\\/") if " " <= c <= "~" else f"\\U{ord(c):08x}"

    aux: list[str] = []

    def rule(body: str) -> str:  # a group of its own: lark multiplies out groups inside a rule
        aux.append(f"g{len(aux)}: {body}")
        return f"g{len(aux) - 1}"

    def expr(e: Any) -> str:  # the IR is shallow (grammar_nesting), so recursion is bounded
        if isinstance(e, Lit):  # one terminal of fixed text: a terminal per character made lark's
            # grammar analysis quadratic in a long literal (30 s for 300 characters)
            return "/" + "".join(one(c) for c in e.text) + "/" if e.text else "empty"
        if isinstance(e, Pat):
            if e.opaque:
                raise ValueError("special token")
            rx = re.sub(r"\\U([0-9a-f]{8})", lambda m: one(chr(int(m.group(1), 16))), e.regex)
            return "/[^\\s\\S]/" if e.regex == "(?!)" else "/" + rx + "/"
        if isinstance(e, Ref):
            return names[e.name]
        if isinstance(e, Seq):
            return " ".join(expr(x) for x in e.items) if e.items else "empty"
        if isinstance(e, Alt):
            return rule(" | ".join(expr(x) for x in e.alts))
        if isinstance(e, Rep):
            if max(e.lo, e.hi or 0) > 40:
                raise ValueError("large repeat")
            item = rule(expr(e.item))
            if e.hi is None:
                tail = rule(f"{item} g{len(aux)} | empty")  # item*, right-recursive
            else:  # item{0,k} as a chain of k optional rules (lark's ~ m..n lists every count)
                tail = "empty"
                for _ in range(e.hi - e.lo):
                    tail = rule(f"{item} {tail} | empty")
            return " ".join([item] * e.lo + [tail])
        raise ValueError(type(e).__name__)

    try:
        body = [f"{names[n]}: {expr(e)}" for n, e in rules.items()]
    except ValueError:
        return None
    return "\n".join([f"start: {names['root']}", "empty: ", *body, *aux]) + "\n"


def _check_document(frontend: str, text: str, grammar: Any, doc: bytes, strict: bool) -> str:
    """'' if the reference accepts ``doc``; else why not ('unchecked: ...' when there is no reference)."""
    try:
        s = doc.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"the document is not UTF-8: {e}"
    if frontend == "regex":
        return "" if re.fullmatch(grammar.pattern, s, grammar.flags) else "re.fullmatch rejects it"
    if frontend in ("lark", "gbnf"):
        src = text if frontend == "lark" else _gbnf_as_lark(text)
        if src is None:
            return "unchecked: no small lark form"
        ref = _lark_reference(src)
        if isinstance(ref, Exception):
            return f"unchecked: lark refuses the grammar: {type(ref).__name__}: {str(ref)[:200]}"
        try:
            ref.parse(s)
        except Exception as e:  # noqa: BLE001 - any lark parse error is a rejection
            return f"lark rejects it: {type(e).__name__}: {str(e)[:300]}"
        return ""
    if not strict:
        return "unchecked: strict=False"
    import jsonschema

    def no_constant(c: str) -> Any:
        raise ValueError(f"{c} is not JSON")

    try:
        instance = json.loads(s, parse_constant=no_constant)
        schema = json.loads(text, parse_constant=no_constant)
    except ValueError as e:
        return f"not strict JSON: {e}"
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        ok = cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(instance)
    except Exception as e:  # noqa: BLE001 - jsonschema cannot evaluate what grammarmask compiled
        return f"unchecked: jsonschema fails: {type(e).__name__}: {str(e)[:200]}"
    return "" if ok else "jsonschema rejects it"


def run_one(frontend: str, data: bytes, vocab: Any) -> str:
    """Build, compile, walk and check one input; the outcome's label. Raises Finding on a bug and lets
    any undocumented exception through."""
    import grammarmask as gm
    from grammarmask.completion import shortest_completion

    text = data.decode("utf-8", errors="replace")
    rng = random.Random(zlib.crc32(data))
    strict = rng.random() < 0.75
    try:
        if frontend == "lark":
            g: Any = gm.Lark(text)
        elif frontend == "gbnf":
            g = gm.Gbnf(text)
        elif frontend == "regex":
            g = gm.Regex(text, flags=rng.choice(RE_FLAGS))
        else:
            g = gm.JsonSchema(text, strict=strict, whitespace=rng.choice(["flexible", "compact"]))
        compiled = g.compile(vocab)
    except (gm.GrammarError, gm.TokenRejected) as e:
        return f"refused: {type(e).__name__}"
    m = compiled.matcher()
    tb = vocab.token_bytes
    out: list[bytes] = []
    for _ in range(rng.randrange(STEPS + 1)):
        mask = m.mask()
        if (0 in mask) != m.is_accepting():
            raise Finding(f"EOS in the mask is {0 in mask} but is_accepting() is {m.is_accepting()}")
        legal = [t for t in mask.token_ids() if t != 0]
        illegal = rng.randrange(1, vocab.size)
        if illegal not in mask:
            n = m.num_tokens
            if m.try_advance(illegal) or m.num_tokens != n:
                raise Finding(f"token {illegal} ({tb[illegal]!r}) is outside the mask but was taken")
        if not legal:
            break
        t = rng.choice(legal)
        if not m.try_advance(t):
            raise Finding(f"token {t} ({tb[t]!r}) is in the mask but advance refused it")
        out.append(tb[t])
    rest = shortest_completion(compiled, m.state)
    if rest is None:
        return "walked"
    if len(rest) > MAX_FEED:  # e.g. minLength 8000000: feeding it byte by byte is the harness's time
        return "walked: completion too long to feed"
    for b in rest:
        if not m.try_advance(b + 1):
            raise Finding(f"the shortest completion {rest!r} is refused at byte {b!r}")
    if not m.is_accepting():
        raise Finding(f"the shortest completion {rest!r} does not reach an accepting state")
    doc = b"".join(out) + rest
    why = _check_document(frontend, text, g, doc, strict)
    if why.startswith("unchecked"):
        return why.split(":")[0] + ": " + why.split(":")[1].strip()
    if why:
        raise Finding(f"unsound: {doc!r}: {why}")
    return "finished"


# ---- the fuzzing child --------------------------------------------------------------------------------


def child(frontend: str, work: Path, libfuzzer_args: list[str]) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    warnings.simplefilter("ignore")
    with atheris.instrument_imports(include=["grammarmask"]):
        import grammarmask  # noqa: F401 - instrumented
        from grammarmask.frontends import gbnf, json_schema, lark, regex  # noqa: F401 - instrumented
    from grammarmask.testing import byte_vocabulary

    vocab = byte_vocabulary(EXTRA_TOKENS)
    findings = work / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    stats = work / f"stats-{os.getpid()}.json"
    last = [time.monotonic()]

    def one_input(data: bytes) -> None:
        try:
            outcome = run_one(frontend, data, vocab)
        except Exception as e:  # noqa: BLE001 - a finding: saved, and fuzzing goes on
            kind = (
                "unsound"
                if isinstance(e, Finding) and str(e).startswith("unsound")
                else ("inconsistent" if isinstance(e, Finding) else type(e).__name__)
            )
            outcome = f"FINDING {kind}"
            tag = hashlib.sha1(data).hexdigest()[:12]
            (findings / f"{kind}-{tag}.input").write_bytes(data)
            (findings / f"{kind}-{tag}.txt").write_text(traceback.format_exc())
        counts[outcome] += 1
        counts["execs"] += 1
        if time.monotonic() - last[0] > 5:
            last[0] = time.monotonic()
            stats.write_text(json.dumps(counts))

    import atexit

    atexit.register(lambda: stats.write_text(json.dumps(counts)))
    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


# ---- the driver ---------------------------------------------------------------------------------------


def fuzz(
    frontend: str, minutes: float, work: Path, atheris_path: str, timeout: int, rss_mb: int
) -> dict[str, Any]:
    """Run children until ``minutes`` of wall time are used; restart after a timeout or OOM."""
    fw = work / frontend
    corpus, seed_dir, artifacts = fw / "corpus", fw / "seeds", fw / "artifacts"
    for d in (corpus, seed_dir, artifacts):
        d.mkdir(parents=True, exist_ok=True)
    for s in seeds(frontend):
        (seed_dir / hashlib.sha1(s).hexdigest()).write_bytes(s)
    for old in fw.glob("stats-*.json"):
        old.unlink()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), atheris_path]))
    deadline = time.monotonic() + minutes * 60
    starts, aborts = 0, []
    while (left := int(deadline - time.monotonic())) > 5:
        starts += 1
        cmd = [
            "nice",
            "-n",
            "19",
            sys.executable,
            __file__,
            "--child",
            frontend,
            "--work",
            str(fw),
            "--",
            str(corpus),
            str(seed_dir),
            f"-max_total_time={left}",
            f"-timeout={timeout}",
            f"-rss_limit_mb={rss_mb}",
            f"-max_len={MAX_LEN}",
            f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1",
        ]
        if starts > 1:
            cmd.remove(str(seed_dir))  # the corpus already holds what the seeds found
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
        (fw / f"child-{starts}.log").write_text(p.stderr[-200_000:])
        written = [w for w in re.findall(r"Test unit written to (\S+)", p.stderr) if "/slow-unit-" not in w]
        artifact = written[-1] if written else None  # the unit that ended the child
        if p.returncode != 0:
            kind = (
                "timeout"
                if "libFuzzer: timeout" in p.stderr
                else "out-of-memory"
                if "out-of-memory" in p.stderr
                else f"exit {p.returncode}"
            )
            aborts.append({"kind": kind, "artifact": artifact})
            print(f"[{frontend}] child {starts}: {kind} {artifact or ''}", flush=True)
    counts: Counter[str] = Counter()
    for f in fw.glob("stats-*.json"):
        counts.update(json.loads(f.read_text()))
    execs = counts.pop("execs", 0)
    findings = sorted(p.name for p in (fw / "findings").glob("*.input")) if (fw / "findings").is_dir() else []
    return {
        "frontend": frontend,
        "minutes": minutes,
        "execs": execs,
        "children": starts,
        "outcomes": dict(counts.most_common()),
        "aborts": aborts,
        "findings": findings,
        "corpus": len(list(corpus.iterdir())),
        "load": [round(x, 1) for x in os.getloadavg()],
    }


def replay(frontend: str, path: Path) -> None:
    """Run one input outside libFuzzer and print its outcome (or the traceback)."""
    from grammarmask.testing import byte_vocabulary

    warnings.simplefilter("ignore")
    t = time.perf_counter()
    print(
        run_one(frontend, path.read_bytes(), byte_vocabulary(EXTRA_TOKENS)), f"{time.perf_counter() - t:.2f}s"
    )


def _markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "# Front-end fuzzing (atheris)",
        "",
        "One front end at a time, each input at most 30 s and 1 GB, under `nice -n 19` on 2 shared cores;",
        "load is the 1/5/15-minute load average when the front end's run ended.",
        "",
        "| front end | minutes | executions | children | corpus | findings | aborts (timeout/OOM) "
        "| load | outcomes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        oc = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())
        ab = ", ".join(
            f"{a['kind']} {Path(a['artifact']).name if a['artifact'] else ''}" for a in r["aborts"]
        )
        load = "/".join(str(x) for x in r.get("load", []))
        out.append(
            f"| {r['frontend']} | {r['minutes']} | {r['execs']} | {r['children']} | {r['corpus']} | "
            f"{len(r['findings'])} | {ab or 0} | {load} | {oc} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frontend", default="all", choices=[*FRONTENDS, "all"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/grammarmask-fuzz"))
    ap.add_argument("--atheris", default="/tmp/fuzzvenv/atheris_only", help="directory holding atheris")
    ap.add_argument("--timeout", type=int, default=30, help="seconds per input")
    ap.add_argument("--rss-mb", type=int, default=1024, help="memory per input process")
    ap.add_argument("--replay", type=Path)
    ap.add_argument("--child", choices=FRONTENDS)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fuzz_frontends")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if a.child:
        child(a.child, a.work, a.rest)
        return
    if a.replay:
        replay(a.frontend, a.replay)
        return
    rows = []
    for fe in FRONTENDS if a.frontend == "all" else (a.frontend,):
        rows.append(fuzz(fe, a.minutes, a.work, a.atheris, a.timeout, a.rss_mb))
        print(json.dumps(rows[-1]), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    prev = json.loads(a.out.with_suffix(".json").read_text()) if a.out.with_suffix(".json").exists() else {}
    merged = {r["frontend"]: r for r in prev.get("runs", [])} | {r["frontend"]: r for r in rows}
    a.out.with_suffix(".json").write_text(json.dumps({"runs": list(merged.values())}, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(_markdown(list(merged.values())))


if __name__ == "__main__":
    main()
