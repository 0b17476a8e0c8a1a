"""The ``grammarmask`` command: ``mask``, ``check``, ``sample``, ``bench`` and ``generate``.

Exit codes (stable, for scripts): 0 success; 1 the input was rejected by the grammar (a token or byte
that cannot continue, or an output that is only a prefix); 2 a usage or input error (missing file,
unknown extension or tokenizer, bad grammar); 3 an internal error (a bug: please report it). Errors
are one line on stderr, never a traceback (set ``GRAMMARMASK_DEBUG=1`` to see one).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from .errors import GrammarMaskError, NoLegalContinuation, TokenRejected
from .grammar import CompiledGrammar, Grammar, Matcher
from .vocab import Vocabulary

__all__ = ["EXIT_INTERNAL", "EXIT_OK", "EXIT_REJECTED", "EXIT_USAGE", "KINDS", "load_grammar", "main"]

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

#: Grammar kinds, the extensions that select them, and the backend class each uses.
KINDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "labels": ((".labels", ".txt"), "grammarmask.backends.choice", "Choice"),
    "regex": ((".regex", ".re"), "grammarmask.backends.regex", "Regex"),
    "lark": ((".lark",), "grammarmask.backends.lark", "Lark"),
    "gbnf": ((".gbnf",), "grammarmask.backends.gbnf", "Gbnf"),
    "json": ((".json",), "grammarmask.backends.json_schema grammarmask.backends.jsonschema", "JsonSchema"),
}
TOKENIZERS = ("tekken", "sentencepiece")
_CLOSERS = b"\"')]}>\n"


class CliError(Exception):
    """A usage or input error: printed as one line, exit code 2."""


# --- loading ---------------------------------------------------------------------------------------


def _backend(kind: str) -> Any:
    _, modules, name = KINDS[kind]
    for module in modules.split():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and module.startswith(e.name):
                continue
            raise CliError(f"the {kind} backend needs the missing package {e.name!r}") from None
        if hasattr(mod, name):
            return getattr(mod, name)
    raise CliError(f"the {kind} backend ({modules.split()[0]}.{name}) is not available in this installation")


def grammar_kind(path: str, kind: str | None) -> str:
    """The grammar kind: ``kind`` when given, else from the file extension."""
    if kind:
        return kind
    ext = Path(path).suffix.lower()
    for k, (exts, _, _) in KINDS.items():
        if ext in exts:
            return k
    known = ", ".join(e for exts, _, _ in KINDS.values() for e in exts)
    raise CliError(
        f"{path}: cannot tell the grammar kind from extension {ext or '(none)'!r} "
        f"(known: {known}); pass --kind"
    )


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a grammar file") from None
    except UnicodeDecodeError as e:
        raise CliError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise CliError(f"{path}: cannot read: {e.strerror}") from None


def load_grammar(
    path: str, kind: str | None = None, *, leading_space: str = "optional", separator: str | None = None
) -> Grammar:
    """Build the grammar in ``path``: a labels file (one label per line, blank lines skipped), a regex
    (the file minus one trailing newline), a ``.lark`` or ``.gbnf`` grammar, or a JSON Schema.

    Labels take ``leading_space`` (``"optional"`` by default: one space before the label, as BPE models
    spell a word after a prompt, may or may not be there; ``"none"``; ``"always"``) and ``separator``
    (several distinct labels joined by it)."""
    kind = grammar_kind(path, kind)
    text = _read_text(path)
    cls = _backend(kind)
    if kind == "labels":
        labels = [line for line in text.splitlines() if line]
        return cls(labels, leading_space=leading_space, separator=separator)  # type: ignore[no-any-return]
    if kind == "regex":
        return cls(text[:-1] if text.endswith("\n") else text)  # type: ignore[no-any-return]
    if kind == "lark":
        return cls.from_file(path)  # type: ignore[no-any-return]
    if kind == "gbnf":
        return cls(text)  # type: ignore[no-any-return]
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
    return cls(schema)  # type: ignore[no-any-return]


def _grammar(args: argparse.Namespace) -> Grammar:
    return load_grammar(args.grammar, args.kind, leading_space=args.leading_space, separator=args.separator)


@functools.lru_cache(maxsize=2)
def load_tokenizer(name: str) -> tuple[Any, Vocabulary]:
    """The mistral-common tokenizer ``name`` (or a tokenizer file path) and its Vocabulary (cached)."""
    from .loaders import mistral_tokenizer

    if name not in TOKENIZERS and not os.path.exists(name):
        raise CliError(
            f"unknown tokenizer {name!r}: use one of {', '.join(TOKENIZERS)} or a tokenizer file path"
        )
    try:
        tok = mistral_tokenizer(name)
    except GrammarMaskError:
        raise
    except Exception as e:  # mistral-common raises many kinds on a bad file
        raise CliError(f"cannot load tokenizer {name!r}: {type(e).__name__}: {e}") from None
    vocab = Vocabulary.from_mistral(tok)
    vocab.trie  # noqa: B018 - vocabulary preprocessing, done once per tokenizer
    return tok, vocab


@contextmanager
def progress(label: str) -> Iterator[None]:
    """A spinner with elapsed time on stderr while the block runs, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    done = threading.Event()
    t0 = time.perf_counter()

    def spin() -> None:
        frames = "|/-\\"
        i = 0
        while not done.wait(0.1):
            sys.stderr.write(f"\r{frames[i % 4]} {label} {time.perf_counter() - t0:5.1f}s")
            sys.stderr.flush()
            i += 1
        sys.stderr.write("\r" + " " * (len(label) + 12) + "\r")

    th = threading.Thread(target=spin, daemon=True)
    th.start()
    try:
        yield
    finally:
        done.set()
        th.join()


def _compile(grammar: Grammar, vocab: Vocabulary, what: str) -> tuple[CompiledGrammar, float]:
    t0 = time.perf_counter()
    with progress(f"compiling {what}"):
        compiled = grammar.compile(vocab)
    return compiled, time.perf_counter() - t0


def _show(data: bytes) -> str:
    return repr(data)[1:]  # b'...' without the b


# --- mask ------------------------------------------------------------------------------------------


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


# --- check -----------------------------------------------------------------------------------------


def _byte_matcher(compiled: CompiledGrammar) -> tuple[Matcher, dict[int, int]]:
    ids = {tb[0]: i for i, tb in enumerate(compiled.vocab.token_bytes) if len(tb) == 1}
    return compiled.matcher(), ids


def _expected(m: Matcher, ids: dict[int, int]) -> str:
    try:
        legal = m.mask()
    except NoLegalContinuation:
        return "nothing"
    allowed = [b for b, t in sorted(ids.items()) if t in legal]
    parts = [_show(bytes([b])) for b in allowed[:8]]
    if m.is_accepting():
        parts.append("end of input")
    if len(allowed) > 8:
        parts.append(f"... ({len(allowed)} bytes)")
    return ", ".join(parts) or "nothing"


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[start:offset].decode("utf-8", errors="replace")) + 1
    return line, column


def check_bytes(compiled: CompiledGrammar, data: bytes) -> dict[str, Any]:
    """Feed ``data`` byte by byte; report ``ok``, ``rejected`` (first byte that cannot continue, with
    line and column) or ``incomplete`` (a viable prefix that is not a complete sentence)."""
    m, ids = _byte_matcher(compiled)
    for offset, b in enumerate(data):
        expected = None
        try:
            m.advance(ids[b])
            continue
        except TokenRejected:
            expected = _expected(m, ids)
        line, col = _position(data, offset)
        return {
            "status": "rejected",
            "offset": offset,
            "line": line,
            "column": col,
            "byte": _show(bytes([b])),
            "expected": expected,
        }
    if m.is_accepting():
        return {"status": "ok"}
    line, col = _position(data, len(data))
    return {
        "status": "incomplete",
        "offset": len(data),
        "line": line,
        "column": col,
        "expected": _expected(m, ids),
    }


def cmd_check(args: argparse.Namespace) -> int:
    from .testing import byte_vocabulary

    grammar = _grammar(args)
    compiled, _ = _compile(grammar, byte_vocabulary(), args.grammar)
    results = []
    for path in args.files:
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as e:
            raise CliError(f"{path}: cannot read: {e.strerror}") from None
        if args.strip and data.endswith(b"\n"):
            data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
        res = {"file": path, **check_bytes(compiled, data)}
        results.append(res)
        if args.json:
            continue
        if res["status"] == "ok":
            print(f"{path}: ok")
        elif res["status"] == "rejected":
            hint = (
                "; the file ends with a newline: try --strip"
                if res["offset"] == len(data) - 1 and data.endswith(b"\n")
                else ""
            )
            print(
                f"{path}:{res['line']}:{res['column']}: rejected: byte {res['byte']} cannot continue "
                f"(expected {res['expected']}){hint}"
            )
        else:
            print(
                f"{path}:{res['line']}:{res['column']}: incomplete: the file is a prefix of the "
                f"language but not a complete sentence (expected {res['expected']})"
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return EXIT_OK if all(r["status"] == "ok" for r in results) else EXIT_REJECTED


# --- sample ----------------------------------------------------------------------------------------


def random_document(compiled: CompiledGrammar, rng: np.random.Generator, max_bytes: int) -> bytes | None:
    """A random walk over legal tokens; past ``max_bytes`` prefer EOS, then tokens that complete the
    output, then closing brackets/quotes. None if no end was reached within four times the budget."""
    vocab = compiled.vocab
    tb, eos = vocab.token_bytes, vocab.eos_token_id
    single = {b[0]: i for i, b in enumerate(tb) if len(b) == 1}
    m = compiled.matcher()
    out = bytearray()
    while len(out) <= 4 * max_bytes:
        legal = m.mask()
        if len(out) >= max_bytes:
            if eos in legal:
                return bytes(out)
            t = _finishing_token(m, legal, single, rng)
        else:
            ids = legal.token_ids()
            t = int(rng.choice(ids))
        if t == eos:
            return bytes(out)
        m.advance(t)
        out += tb[t]
    return None


def _finishing_token(m: Matcher, legal: Any, single: dict[int, int], rng: np.random.Generator) -> int:
    candidates = [t for t in single.values() if t in legal]
    if not candidates:
        return int(rng.choice(legal.token_ids()))
    order = list(rng.permutation(candidates))
    for t in order:
        probe = m.fork()
        probe.advance(int(t))
        if probe.is_accepting():
            return int(t)
    tb = m.vocab.token_bytes
    closers = [t for t in order if tb[int(t)] in [bytes([c]) for c in _CLOSERS]]
    return int(closers[0] if closers else order[0])


def cmd_sample(args: argparse.Namespace) -> int:
    from .testing import byte_vocabulary

    if args.n < 1 or args.max_bytes < 1:
        raise CliError("-n and --max-bytes must be positive")
    grammar = _grammar(args)
    if args.tokenizer == "bytes":
        vocab = byte_vocabulary()
    else:
        with progress(f"loading tokenizer {args.tokenizer}"):
            _, vocab = load_tokenizer(args.tokenizer)
    compiled, _ = _compile(grammar, vocab, args.grammar)
    rng = np.random.default_rng(args.seed)
    docs: list[str] = []
    for _ in range(args.n):
        for _attempt in range(10):
            doc = random_document(compiled, rng, args.max_bytes)
            if doc is not None:
                break
        else:
            print(
                f"grammarmask: error: no document ended within {4 * args.max_bytes} bytes in 10 tries; "
                "raise --max-bytes",
                file=sys.stderr,
            )
            return EXIT_REJECTED
        docs.append(doc.decode("utf-8", errors="backslashreplace"))
    if args.json:
        print(json.dumps(docs, ensure_ascii=False, indent=2))
    else:
        for d in docs:
            print(d)
    return EXIT_OK


# --- bench and generate ----------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    harness = Path(__file__).resolve().parent.parent / "benchmarks" / "harness.py"
    if not harness.exists():
        raise CliError(
            "the benchmark harness ships with the source checkout (benchmarks/harness.py); "
            "run grammarmask bench from a clone"
        )
    rest = args.harness_args[1:] if args.harness_args[:1] == ["--"] else args.harness_args
    return subprocess.call([sys.executable, str(harness), *rest])


def _load_hf(path: str) -> tuple[Any, Any, Vocabulary]:
    """A local Hugging Face model directory: its tokenizer, the model (eval mode), the Vocabulary."""
    try:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise CliError(
            "--model needs torch and transformers: pip install 'grammarmask[torch,transformers]'"
        ) from None
    if not Path(path, "config.json").is_file():
        raise CliError(f"{path}: not a Hugging Face model directory (no config.json)")
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    transformers.utils.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    with progress(f"loading {path}"):
        try:
            tok = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise CliError(f"{path}: cannot load the model: {str(e).splitlines()[0]}") from None
    model.eval()  # type: ignore[no-untyped-call]
    return tok, model, Vocabulary.from_hf(tok, size=model.config.vocab_size)


def cmd_generate(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    tok, model, vocab = _load_hf(args.model)
    import torch

    compiled, _ = _compile(grammar, vocab, args.grammar)
    from .sampling import SequenceStats, sample_with_stats

    m = compiled.matcher()
    rng = np.random.default_rng(args.seed)
    ids = list(tok(args.prompt)["input_ids"]) if args.prompt else [int(tok.bos_token_id or 0)]
    past, inp, out, steps = None, torch.tensor([ids]), [], []
    with torch.no_grad():
        for _ in range(args.max_tokens):
            res = model(input_ids=inp, past_key_values=past, use_cache=True)
            past = res.past_key_values
            t, st = sample_with_stats(
                res.logits[0, -1].float(), m.mask(), temperature=args.temperature, rng=rng
            )
            steps.append(st)
            m.advance(t)
            if m.is_finished():
                break
            out.append(t)
            inp = torch.tensor([[t]])
    print(vocab.decode(out).decode("utf-8", errors="replace"))
    summary = SequenceStats.from_steps(steps)
    print(
        f"{len(steps)} steps, {'finished with EOS' if m.is_finished() else 'stopped at --max-tokens'}; "
        f"KL(p_C || p) = {summary.bits_per_token:.3f} bits per token",
        file=sys.stderr,
    )
    return EXIT_OK if m.is_finished() or m.is_accepting() else EXIT_REJECTED


# --- argument parsing ------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    p = _Parser(
        prog="grammarmask",
        description="Exact grammar-constrained decoding by logit masking.",
        epilog="Exit codes: 0 ok, 1 input rejected by the grammar, 2 usage or input error, 3 internal error. "
        "Grammar kind from the extension: "
        + "; ".join(f"{'/'.join(e)} {k}" for k, (e, _, _) in KINDS.items())
        + ".",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def grammar_cmd(
        name: str, help_: str, fn: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.add_argument("grammar", metavar="GRAMMAR", help="grammar file (.labels .regex .lark .gbnf .json)")
        sp.add_argument("--kind", choices=sorted(KINDS), help="grammar kind (default: from the extension)")
        sp.add_argument(
            "--leading-space",
            choices=("optional", "none", "always"),
            default="optional",
            help="labels: may a space precede the label? (default: optional)",
        )
        sp.add_argument("--separator", help="labels: several distinct labels joined by this string")
        sp.set_defaults(fn=fn)
        return sp

    sp = grammar_cmd(
        "mask",
        "Tokenize a text and show, step by step, each token, how many tokens were "
        "legal and which steps were forced.",
        cmd_mask,
    )
    sp.add_argument("--text", required=True, help="the text to feed, tokenized by --tokenizer")
    sp.add_argument("--tokenizer", default="tekken", help="tekken (default), sentencepiece, or a file path")
    sp.add_argument(
        "--model", help="a local Hugging Face model directory: use its tokenizer and report -log Z per step"
    )
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = grammar_cmd(
        "check",
        "Does each file belong to the language? Reports the line and column of "
        "the first byte that cannot continue.",
        cmd_check,
    )
    sp.add_argument("files", nargs="+", metavar="FILE", help="files to check ('-' for stdin)")
    sp.add_argument("--strip", action="store_true", help="drop one trailing newline from each file")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = grammar_cmd(
        "sample", "Random valid documents (a seedable random walk over legal tokens).", cmd_sample
    )
    sp.add_argument("-n", type=int, default=5, help="number of documents (default 5)")
    sp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sp.add_argument(
        "--max-bytes", type=int, default=200, help="length budget; past it the walk heads for an end"
    )
    sp.add_argument("--tokenizer", default="bytes", help="bytes (default), tekken, sentencepiece")
    sp.add_argument("--json", action="store_true", help="print a JSON list")

    sp = grammar_cmd("generate", "Generate with a local Hugging Face model under the grammar.", cmd_generate)
    sp.add_argument("--model", required=True, help="a local Hugging Face model directory")
    sp.add_argument("--prompt", default="", help="the prompt text")
    sp.add_argument("--max-tokens", type=int, default=256)
    sp.add_argument("--temperature", type=float, default=0.7, help="0 for greedy")
    sp.add_argument("--seed", type=int, default=0)

    sp = sub.add_parser(
        "bench",
        help="Run the benchmark harness (benchmarks/harness.py) beside the peers.",
        description="Run benchmarks/harness.py; the arguments after 'bench' go to the "
        "harness (try: grammarmask bench --help-harness).",
        add_help=False,
    )
    sp.add_argument("harness_args", nargs=argparse.REMAINDER)
    sp.set_defaults(fn=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # everything after "bench" belongs to the harness, --help included
        argv = ["bench", "--", *argv[1:]]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed as one line
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        return int(args.fn(args))
    except CliError as e:
        print(f"grammarmask: error: {e}", file=sys.stderr)
    except GrammarMaskError as e:
        where = f"{args.grammar}: " if getattr(args, "grammar", None) else ""
        print(f"grammarmask: error: {where}{str(e).splitlines()[0]}", file=sys.stderr)
    except KeyboardInterrupt:
        print("grammarmask: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not bad input: still one line unless debugging
        if os.environ.get("GRAMMARMASK_DEBUG"):
            raise
        first = (str(e).splitlines() or [""])[0]
        print(
            f"grammarmask: internal error: {type(e).__name__}: {first} "
            "(set GRAMMARMASK_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
