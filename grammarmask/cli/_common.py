"""Shared by the subcommands: grammar kinds and loading, tokenizers, progress, exit codes."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import GrammarMaskError
from ..grammar import CompiledGrammar, Grammar
from ..vocab import Vocabulary

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERNAL, EXIT_LIMIT = 0, 1, 2, 3, 4

#: Grammar kinds, the extensions that select them, and the backend class each uses.
KINDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "labels": ((".labels", ".txt"), "grammarmask.frontends.choice", "Choice"),
    "regex": ((".regex", ".re"), "grammarmask.frontends.regex", "Regex"),
    "lark": ((".lark",), "grammarmask.frontends.lark", "Lark"),
    "gbnf": ((".gbnf",), "grammarmask.frontends.gbnf", "Gbnf"),
    "json": ((".json",), "grammarmask.frontends.json_schema grammarmask.frontends.jsonschema", "JsonSchema"),
}
TOKENIZERS = ("tekken", "sentencepiece")


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


#: The JSON Schema options the command line sets: ``JsonSchema`` keyword -> the flag that sets it.
JSON_FLAGS: dict[str, str] = {
    "strict": "--no-strict",
    "whitespace": "--whitespace",
    "property_order": "--property-order",
    "max_ws": "--max-ws",
    "indent": "--indent",
    "plain_integers": "--plain-integers",
}


def load_grammar(
    path: str,
    kind: str | None = None,
    *,
    leading_space: str = "optional",
    separator: str | None = None,
    json_options: dict[str, Any] | None = None,
) -> Grammar:
    """Build the grammar in ``path``: a labels file (one label per line, blank lines skipped), a regex
    (the file minus one trailing newline), a ``.lark`` or ``.gbnf`` grammar, or a JSON Schema.

    Labels take ``leading_space`` (``"optional"`` by default: one space before the label, as BPE models
    spell a word after a prompt, may or may not be there; ``"none"``; ``"always"``) and ``separator``
    (several distinct labels joined by it). A JSON Schema takes ``json_options``, keyword arguments of
    ``JsonSchema`` (the keys of :data:`JSON_FLAGS`); given for another kind, they are a ``CliError``."""
    kind = grammar_kind(path, kind)
    json_options = dict(json_options or {})
    if json_options and kind != "json":
        flags = ", ".join(JSON_FLAGS.get(k, k) for k in json_options)
        raise CliError(f"{flags}: JSON Schema options, but {path} is a {kind} grammar")
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
    return cls(schema, **json_options)  # type: ignore[no-any-return]


def json_options(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON Schema options given on the command line (only those given)."""
    opts: dict[str, Any] = {}
    if getattr(args, "no_strict", False):
        opts["strict"] = False
    if getattr(args, "plain_integers", False):
        opts["plain_integers"] = True
    for key in ("whitespace", "property_order", "max_ws", "indent"):
        if getattr(args, key, None) is not None:
            opts[key] = getattr(args, key)
    if opts.get("whitespace") == "compact":
        for key in ("max_ws", "indent"):
            if key in opts:
                raise CliError(f"{JSON_FLAGS[key]} shapes flexible whitespace; --whitespace compact has none")
    return opts


def _grammar(args: argparse.Namespace, **overrides: Any) -> Grammar:
    """The grammar the command line names; ``overrides`` replace JSON Schema options."""
    opts = {**json_options(args), **overrides}
    return load_grammar(
        args.grammar, args.kind, leading_space=args.leading_space, separator=args.separator, json_options=opts
    )


@functools.lru_cache(maxsize=2)
def load_tokenizer(name: str) -> tuple[Any, Vocabulary]:
    """The mistral-common tokenizer ``name`` (or a tokenizer file path) and its Vocabulary (cached)."""
    from ..loaders import mistral_tokenizer

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
