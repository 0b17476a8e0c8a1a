"""The documented switch: off, vLLM is untouched; on, vLLM's own plugin loading (its entry-point
group, from the installed distribution) selects grammarmask. Fresh interpreters, so nothing of this
session leaks in. Also: a missing hook point is named, and the how-to's snippets that need vLLM but
no GPU run."""

from __future__ import annotations

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
from vllm.config import DeviceConfig, ModelConfig, VllmConfig
from vllm.plugins import load_general_plugins
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.request import Request
from grammarmask.integrations import vllm as gv

load_general_plugins()  # what vLLM's engine arguments, engine core and workers call at start
model = ModelConfig(model=sys.argv[1], tokenizer=sys.argv[1], dtype="float32", max_model_len=1024)
config = VllmConfig(model_config=model, device_config=DeviceConfig(device="cpu"))
manager = StructuredOutputManager(config)
sp = SamplingParams(structured_outputs=StructuredOutputsParams(regex="[a-z]+"))
sp.verify(config.model_config, None, config.structured_outputs_config, manager.tokenizer)
request = Request("r", [0], sp, None)
manager.grammar_init(request)
request.structured_output_request._grammar.result()
print(json.dumps({"installed": gv.installed(), "resolved": sp.structured_outputs._backend,
                  "backend": type(manager.backend).__name__}))
"""


def _probe(tmp_path: Path, switch: str | None) -> dict[str, object]:
    import json

    env = {k: v for k, v in os.environ.items() if k != "GRAMMARMASK_VLLM"}
    if switch is not None:
        env["GRAMMARMASK_VLLM"] = switch
    model = build_model_dir(tmp_path / "model")
    out = subprocess.run([sys.executable, "-c", PROBE, str(model)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("switch", "expected"), [
    (None, {"installed": False, "resolved": "xgrammar", "backend": "XgrammarBackend"}),
    ("1", {"installed": True, "resolved": "grammarmask", "backend": "GrammarmaskBackend"}),
])
def test_the_switch_through_vllms_own_plugin_loading(tmp_path: Path, switch: str | None,
                                                     expected: dict[str, object]) -> None:
    assert _probe(tmp_path, switch) == expected


def test_install_names_a_missing_hook_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    from grammarmask.integrations import vllm as gv

    monkeypatch.setattr(StructuredOutputManager, "grammar_init", None)
    monkeypatch.setattr(gv, "installed", lambda: False)
    with pytest.raises(RuntimeError, match=r"StructuredOutputManager\.grammar_init"):
        gv.install()


def test_the_howtos_vllm_snippets_run() -> None:
    text = (ROOT / "docs" / "howto_vllm.md").read_text(encoding="utf-8")
    marker = re.escape("<!-- docs-test: skip (needs vLLM: tools/serving-tests runs it) -->")
    blocks = re.findall(marker + r"\n```python\n(.*?)```", text, re.S)
    assert blocks
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/howto_vllm.md#vllm{i + 1}", "exec"), {"__name__": "__docs__"})
