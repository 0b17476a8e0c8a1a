"""Benchmark grammarmask beside XGrammar, llguidance and outlines-core on the same workloads and the
same real vocabularies (mistral-common's tekken 131k and sentencepiece 32k).

The parent process builds the workloads (``workloads.py``), checks every document against an external
reference, tokenizes the documents with the real tokenizer, and then runs each engine on each workload
in its own subprocess (``--worker``), so peak memory and import side effects stay separate. Per
workload: compile time (vocabulary preprocessing reported apart), mask time per step (p50/p99/max)
over the documents, peak RSS, and the count of document tokens the mask wrongly refused (must be 0).
JSONSchemaBench schemas follow the MaskBench method (valid instances must be accepted; invalid ones
must not be accepted through EOS).

    python benchmarks/harness.py                         # all engines importable, tekken
    python benchmarks/harness.py --tokenizers tekken,sentencepiece --peer-python /path/to/venv/bin/python
    python benchmarks/harness.py --grammar my.lark --docs examples/*.txt   # your grammar, your documents

``grammarmask bench ARGS`` runs ``harness.py --from-cli ARGS``: then the results go under the current
directory (``grammarmask-bench/latest``) unless ``--out`` says where, and ``--readme`` is refused, so
the command never writes into the installed package or the checkout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]  # the source tree first, so this checkout is what runs

import workloads as W  # noqa: E402
from report import _pct, compact_markdown, update_readme, write_report  # noqa: E402

RESULTS = HERE / "results"
CLI_OUT = Path("grammarmask-bench") / "latest"  # grammarmask bench: under the current directory
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (as the ``grammarmask`` command prints them), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --- worker (runs inside the engine's subprocess) ---------------------------------------------------


def run_worker(engine_name: str, spec_path: str, names: list[str]) -> None:
    """Build the engine for the spec's tokenizer, then print one JSON line per workload."""
    from engines import Unsupported, load

    try:
        cls = load(engine_name)
    except ImportError as e:
        print(json.dumps({"fatal": f"{engine_name} is not installed ({e.name})"}), flush=True)
        return
    spec = json.loads(Path(spec_path).read_text())
    import grammarmask as gm
    from grammarmask.loaders import mistral_tokenizer

    tok = mistral_tokenizer(spec["tokenizer"])
    vocab = gm.Vocabulary.from_mistral(tok)
    specials = sorted(vocab.special_ids - {vocab.eos_token_id})
    t0 = time.perf_counter()
    engine = cls(
        list(vocab.token_bytes),
        vocab.eos_token_id,
        specials,
        vocab.size,
        lambda text: _tokenize(tok, vocab, text) or [],  # exact bytes: no sentencepiece dummy prefix
    )
    prep = time.perf_counter() - t0
    # The preparation leaves young 131k-entry containers (the token list above, the tokenizer's and the
    # engine's tables): the first gen-0 collection walks them, 5-10 ms charged to whichever compile
    # or mask step comes first. Collect here, as a server does once at startup, for every engine.
    gc.collect()
    eos = vocab.eos_token_id
    by_name = {w["name"]: w for w in spec["workloads"]}
    for name in names:
        w = by_name[name]
        res: dict[str, Any] = {
            "workload": name,
            "group": w["group"],
            "engine": engine_name,
            "tokenizer": spec["tokenizer"],
            "vocab_prep_s": prep,
            "version": _version(engine_name),
        }
        try:
            t0 = time.perf_counter()
            compiled = engine.compile(w["kind"], w["source"])
            res["compile_s"] = time.perf_counter() - t0
        except Unsupported as e:
            res["status"] = "n/a"
            res["error"] = str(e).splitlines()[0] if str(e) else w["kind"]
            print(json.dumps(res), flush=True)
            continue
        except Exception as e:  # a refusal: the engine could not compile this grammar
            res["status"] = "compile error"
            res["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
            print(json.dumps(res), flush=True)
            continue
        times: list[float] = []
        refused = refused_docs = 0
        for doc in w["docs"]:
            ok = _walk(engine, compiled, doc, eos, times)
            if ok is not True:
                refused += 1
                refused_docs += 1
                res.setdefault("first_refusal", ok)
        accepted_invalid = sum(_walk(engine, compiled, doc, eos, None) is True for doc in w["invalid_docs"])
        res.update(
            status="ok",
            steps=len(times),
            docs=len(w["docs"]),
            refused=refused,
            refused_docs=refused_docs,
            invalid_docs=len(w["invalid_docs"]),
            invalid_accepted=accepted_invalid,
            p50_us=_pct(times, 0.5) * 1e6,
            p99_us=_pct(times, 0.99) * 1e6,
            max_us=(max(times) if times else float("nan")) * 1e6,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        )
        print(json.dumps(res), flush=True)


def _walk(engine: Any, compiled: Any, doc: list[int], eos: int, times: list[float] | None) -> Any:
    """Feed ``doc`` then EOS; True if every token (and EOS) was in the mask, else where it failed."""
    try:
        m = engine.start(compiled)
    except Exception as e:
        return f"matcher: {type(e).__name__}: {e}"[:200]
    for i, t in enumerate([*doc, eos]):
        t0 = time.perf_counter()
        engine.fill(m)
        if times is not None:
            times.append(time.perf_counter() - t0)
        if not engine.allowed(t):
            return f"token {i} ({t}) not in the mask"
        if t == eos:
            return True
        if not engine.advance(m, t):
            return f"token {i} ({t}) refused by advance"
    return True


def _version(engine: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(engine.replace("_", "-"))
    except PackageNotFoundError:
        return "?"


# --- parent -------------------------------------------------------------------------------------------


def _tokenize(tok: Any, vocab: Any, text: str) -> list[int] | None:
    """The real tokenizer's ids for ``text``; sentencepiece's dummy-prefix space is undone by re-splitting
    the first token greedily. None if the ids do not decode to exactly the text."""
    ids = [int(t) for t in tok.encode(text, bos=False, eos=False)]
    data = text.encode()
    if ids and vocab.decode(ids) == b" " + data:
        first = vocab.token_bytes[ids[0]][1:]
        ids = _greedy(vocab, first) + ids[1:]
    return ids if vocab.decode(ids) == data else None


def _greedy(vocab: Any, data: bytes) -> list[int]:
    from grammarmask.cache import per_vocabulary

    index = per_vocabulary(
        vocab, "bench.token_index",
        lambda: {b: i for i, b in enumerate(vocab.token_bytes) if b and i not in vocab.special_ids},
    )
    out, i = [], 0
    while i < len(data):
        for j in range(len(data), i, -1):
            if data[i:j] in index:
                out.append(index[data[i:j]])
                i = j
                break
        else:
            raise ValueError(f"no token for {data[i : i + 1]!r}")
    return out


def build_spec(tokenizer: str, workloads: list[W.Workload]) -> dict[str, Any]:
    """The workloads with documents as token ids of ``tokenizer`` (invalid or untokenizable ones dropped)."""
    import grammarmask as gm
    from grammarmask.loaders import mistral_tokenizer

    tok = mistral_tokenizer(tokenizer)
    vocab = gm.Vocabulary.from_mistral(tok)
    out = []
    for w in workloads:
        bad = set(W.validate(w))
        docs = [_tokenize(tok, vocab, d) for d in w.docs if d not in bad]
        invalid = [_tokenize(tok, vocab, d) for d in w.invalid_docs]
        out.append(
            {
                "name": w.name,
                "kind": w.kind,
                "source": w.source,
                "group": w.group,
                "docs": [d for d in docs if d is not None],
                "invalid_docs": [d for d in invalid if d is not None],
                "dropped_docs": len(w.docs) - sum(d is not None for d in docs),
            }
        )
    return {"tokenizer": tokenizer, "workloads": out}


def run_engine(
    engine: str, python: str, spec_path: str, names: list[str], timeout: float
) -> list[dict[str, Any]]:
    """Run one worker subprocess; on a timeout, the workloads it did not finish are marked ``timeout``."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [python, str(Path(__file__).resolve()), "--worker", engine, "--spec", spec_path, "--names", *names]
    results: list[dict[str, Any]] = []
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = "timeout"
    for line in out.splitlines():
        if line.startswith("{"):
            results.append(json.loads(line))
    if results and "fatal" in results[0]:
        return results
    done = {r["workload"] for r in results}
    for n in names:
        if n not in done:
            status = "timeout" if err == "timeout" else "crashed"
            results.append(
                {
                    "workload": n,
                    "engine": engine,
                    "status": status,
                    "error": f"> {timeout:.0f} s" if status == "timeout" else err.strip()[-300:],
                }
            )
    return results


def machine() -> dict[str, Any]:
    """CPU model, cores, Python, OS."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from_cli = argv[:1] == ["--from-cli"]  # run as `grammarmask bench`
    if from_cli:
        argv = argv[1:]
    p = _Parser(
        prog="grammarmask bench" if from_cli else "harness.py",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--engines", default=",".join(["grammarmask", "xgrammar", "llguidance", "outlines_core"]))
    p.add_argument("--tokenizers", default="tekken", help="comma list of tekken, sentencepiece")
    p.add_argument("--only", default="", help="run only workloads whose name contains this")
    p.add_argument("--jsb", type=int, default=3, help="JSONSchemaBench schemas per sub-dataset (0: skip)")
    p.add_argument("--jsb-tokenizers", default="tekken", help="tokenizers to run JSONSchemaBench with")
    p.add_argument("--render", metavar="JSON", help="only re-render a results JSON file as markdown")
    p.add_argument("--resume", metavar="JSON", help="keep the results in this file and run only the rest")
    p.add_argument("--timeout", type=float, default=120, help="seconds per engine and workload")
    p.add_argument(
        "--peer-python",
        default=os.environ.get("GRAMMARMASK_BENCH_PYTHON", sys.executable),
        help="the Python that has xgrammar/llguidance/outlines-core (default: this one)",
    )
    out = CLI_OUT if from_cli else RESULTS / "latest"
    p.add_argument(
        "--out", default=str(out), metavar="PATH", help=f"write PATH.json and PATH.md (default: {out})"
    )
    p.add_argument(
        "--readme",
        action="store_true",
        help=argparse.SUPPRESS if from_cli else "also put the table into README.md",
    )
    own = p.add_argument_group("your own grammar (instead of the built-in workloads)")
    own.add_argument("--grammar", metavar="FILE", help="a grammar file, its kind from the extension")
    own.add_argument(
        "--kind",
        choices=("labels", "regex", "lark", "gbnf", "json"),
        help="the grammar kind (default: from the extension, as for grammarmask check)",
    )
    own.add_argument("--docs", nargs="+", metavar="FILE", default=[], help="documents to time, one per file")
    own.add_argument(
        "--invalid-docs", nargs="+", metavar="FILE", default=[], help="documents the grammar must not accept"
    )
    own.add_argument("--strip", action="store_true", help="drop one trailing newline from each document")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--names", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        run_worker(args.worker, args.spec, args.names or [])
        return 0
    if args.readme and from_cli:
        p.error("--readme rewrites the checkout's README.md: run python benchmarks/harness.py --readme there")
    if args.render:
        report = json.loads(Path(args.render).read_text())
        write_report(report, Path(args.out))
        if args.readme:
            update_readme(compact_markdown(report))
        return 0
    if (args.docs or args.invalid_docs or args.kind or args.strip) and not args.grammar:
        p.error("--docs, --invalid-docs, --kind and --strip go with --grammar")
    if args.grammar:
        if not args.docs:
            p.error("--grammar needs --docs: the documents to time")
        try:
            workloads, notes = user_workload(args)
        except ValueError as e:
            p.exit(EXIT_USAGE, f"{p.prog}: error: {e}\n")
    else:
        workloads, notes = W.build(jsb_per_dataset=args.jsb), []
    named = [w for w in workloads if args.only in w.name]
    if not named:
        names = [w.name for w in workloads]
        shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
        p.error(f"--only {args.only!r} matches no workload name (the names: {shown})")
    workloads = named
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    host = machine()
    results: list[dict[str, Any]] = []
    if args.resume:
        results = [r for r in json.loads(Path(args.resume).read_text())["results"] if "workload" in r]
    done = {(r["tokenizer"], r["engine"], r["workload"]) for r in results}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tokenizer in args.tokenizers.split(","):
            jsb = tokenizer in args.jsb_tokenizers.split(",")
            spec = build_spec(
                tokenizer, [w for w in workloads if jsb or not w.group.startswith("JSONSchemaBench")]
            )
            spec_path = os.path.join(tmp, f"{tokenizer}.json")
            Path(spec_path).write_text(json.dumps(spec))
            for engine in args.engines.split(","):
                if engine in skipped:
                    continue
                python = sys.executable if engine == "grammarmask" else args.peer_python
                for batch in _batches(spec["workloads"]):
                    batch = [n for n in batch if (tokenizer, engine, n) not in done]
                    if not batch:
                        continue
                    t0 = time.perf_counter()
                    res = run_engine(engine, python, spec_path, batch, args.timeout * len(batch))
                    if res and "fatal" in res[0]:
                        skipped[engine] = res[0]["fatal"]
                        print(f"skip {engine}: {res[0]['fatal']}", file=sys.stderr)
                        break
                    for r in res:
                        r.setdefault("tokenizer", tokenizer)
                    results += res
                    print(
                        f"{tokenizer} {engine} {batch[0]}{' ...' if len(batch) > 1 else ''}: "
                        f"{time.perf_counter() - t0:.1f} s",
                        file=sys.stderr,
                    )
                    partial = {
                        "machine": host,
                        "notes": notes,
                        "skipped_engines": skipped,
                        "results": results,
                    }
                    write_report(partial, Path(args.out + ".partial"))
            for w in spec["workloads"]:
                if w["dropped_docs"]:
                    note = (
                        f"{w['name']}: {w['dropped_docs']} documents dropped (reference rejects them, "
                        f"or {tokenizer} cannot reproduce them)"
                    )
                    print(f"note: {note}", file=sys.stderr)
                    notes.append(note)
    report = {"machine": host, "notes": notes, "skipped_engines": skipped, "results": results}
    write_report(report, Path(args.out))
    for ext in ("json", "md"):  # the run finished: the crash-recovery copy is not needed
        Path(f"{args.out}.partial.{ext}").unlink(missing_ok=True)
    print(f"wrote {args.out}.json and {args.out}.md", file=sys.stderr)
    if args.readme:
        update_readme(compact_markdown(report))
    return 0


def user_workload(args: argparse.Namespace) -> tuple[list[W.Workload], list[str]]:
    """The workload of ``--grammar`` and ``--docs``, and notes for the report on the documents its
    reference rejects (they are not timed). Raises ValueError (one line) on a file that cannot be
    read or a bad grammar."""
    from grammarmask.cli._common import CliError, grammar_kind, load_grammar
    from grammarmask.errors import GrammarMaskError

    try:
        kind = grammar_kind(args.grammar, args.kind)
        load_grammar(args.grammar, kind)  # the grammar's own errors, at once and in the CLI's words
    except (CliError, GrammarMaskError) as e:
        raise ValueError(str(e).splitlines()[0]) from None
    text = Path(args.grammar).read_text(encoding="utf-8")
    source: Any = text
    if kind == "labels":
        source = [line for line in text.splitlines() if line]
    elif kind == "regex":
        source = text[:-1] if text.endswith("\n") else text
    elif kind == "json":
        source = json.loads(text)
    docs = {path: _read_doc(path, args.strip) for path in args.docs}
    invalid = [_read_doc(path, args.strip) for path in args.invalid_docs]
    name = Path(args.grammar).name
    w = W.Workload(
        name, "json_schema" if kind == "json" else kind, source, list(docs.values()), "Yours", invalid
    )
    bad = set(W.validate(w))
    notes = [f"{name}: {path}: the reference rejects it, not timed" for path, d in docs.items() if d in bad]
    if kind == "gbnf":
        notes.append(f"{name}: GBNF has no external reference here: a refused document may be invalid")
    return [w], notes


def _read_doc(path: str, strip: bool) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    if strip and text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    return text


def _batches(workloads: list[dict[str, Any]]) -> list[list[str]]:
    """One subprocess per workload, except JSONSchemaBench: one per sub-dataset."""
    out: list[list[str]] = []
    groups: dict[str, list[str]] = {}
    for w in workloads:
        if w["group"].startswith("JSONSchemaBench"):
            groups.setdefault(w["group"], []).append(w["name"])
        else:
            out.append([w["name"]])
    return out + list(groups.values())


if __name__ == "__main__":
    sys.exit(main())
