"""The documented switch, in fresh interpreters: SGLang's plugin loader (its entry-point group, from the
installed distribution) registers grammarmask, `--grammar-backend grammarmask` parses and SGLang's
create_grammar_backend builds it; without the flag the default stays XGrammar; with the plugin not
loaded the flag is refused. Also: a missing hook point is named, and the how-to's snippets that need
SGLang but no GPU run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import build_model_dir

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.plugins import load_plugins
from sglang.srt.runtime_context import publish
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils.hf_transformers_utils import get_tokenizer

load_plugins()  # as `sglang serve` does before it parses its arguments
args = prepare_server_args(["--model-path", sys.argv[1], "--device", "cpu", *sys.argv[2:]])
publish(args, role="scheduler")
config = ModelConfig.from_server_args(args)
backend = create_grammar_backend(args, get_tokenizer(sys.argv[1]), config.vocab_size, config.hf_eos_token_id)
grammar = backend.get_cached_or_future_value(("regex", "[a-z]+"), False)[0].result()
print(json.dumps({"backend": type(backend).__name__, "grammar": type(grammar).__name__}))
"""


def _probe(tmp_path: Path, *flags: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    model = build_model_dir(tmp_path / "model")
    return subprocess.run([sys.executable, "-c", PROBE, str(model), *flags], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=tmp_path, timeout=600)


@pytest.mark.parametrize(("flags", "expected"), [
    ((), {"backend": "XGrammarGrammarBackend", "grammar": "XGrammarGrammar"}),
    (("--grammar-backend", "grammarmask"),
     {"backend": "GrammarmaskBackend", "grammar": "GrammarmaskGrammar"}),
])
def test_the_switch_through_sglangs_own_plugin_loading(tmp_path: Path, flags: tuple[str, ...],
                                                       expected: dict[str, str]) -> None:
    out = _probe(tmp_path, *flags)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_without_the_plugin_the_flag_is_refused(tmp_path: Path) -> None:
    out = _probe(tmp_path, "--grammar-backend", "grammarmask", env={"SGLANG_PLUGINS": "some_other_plugin"})
    assert out.returncode != 0
    assert "invalid choice: 'grammarmask'" in out.stderr, out.stderr[-3000:]


def test_register_names_a_missing_hook_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.constrained import base_grammar_backend as base

    from grammarmask.integrations import sglang as gs

    monkeypatch.setattr(base, "register_grammar_backend", None)
    with pytest.raises(RuntimeError, match=r"base_grammar_backend\.register_grammar_backend"):
        gs.register()


def test_the_howtos_sglang_snippets_run() -> None:
    text = (ROOT / "docs" / "howto_sglang.md").read_text(encoding="utf-8")
    marker = re.escape("<!-- docs-test: skip (needs SGLang: tools/serving-tests-sglang runs it) -->")
    blocks = re.findall(marker + r"\n```python\n(.*?)```", text, re.S)
    assert blocks
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/howto_sglang.md#sglang{i + 1}", "exec"), {"__name__": "__docs__"})
