"""SGLang tests: they import the real SGLang and run only in the virtual environment that
``tools/serving-tests --sglang`` builds (SGLang pinned, about 10 GB). The main suite does not
collect them.

Fixtures: the tiny local model directory of the vLLM tests (a byte-level BPE tokenizer trained
there, with special tokens, and a Llama config whose vocabulary is wider than the tokenizer's),
loaded through SGLang's own tokenizer and model-config readers; SGLang's server arguments with
``grammar_backend="grammarmask"``, published as SGLang's scheduler publishes them; and the backend
built by SGLang's own ``create_grammar_backend`` after SGLang's plugin loader ran grammarmask's
entry point (the documented switch).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    if os.environ.get("GRAMMARMASK_SGLANG_TESTS"):
        raise RuntimeError("tools/serving-tests --sglang runs these tests, but sglang does not import here")
    collect_ignore_glob = ["test_*.py"]  # the main suite: these need the SGLang venv
else:
    # SGLang's import-time notices on a machine without a GPU ("Only CUDA, HIP and XPU support AWQ
    # currently", ...): imported once here, outside the suite's warnings-as-errors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang.srt.configs.model_config
        import sglang.srt.constrained.base_grammar_backend
        import sglang.srt.server_args
        import sglang.srt.speculative.spec_utils  # noqa: F401


def _vllm_conftest() -> Any:
    """tests/serving/conftest.py (its tiny-model builder needs only ``tokenizers``), by path: the
    checkout is not on sys.path here."""
    path = Path(__file__).resolve().parents[1] / "serving" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_grammarmask_serving_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_shared = _vllm_conftest()
build_model_dir = _shared.build_model_dir
MODEL_VOCAB: int = _shared.MODEL_VOCAB


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-model"))  # type: ignore[no-any-return]


class Server:
    """What SGLang's scheduler holds for grammars: its tokenizer, model config and grammar backend."""

    def __init__(self, model_dir: Path, **server_args: Any) -> None:
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
        from sglang.srt.plugins import load_plugins
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.utils.hf_transformers_utils import get_tokenizer

        load_plugins()  # what `sglang serve`, Engine and every scheduler process call first
        args = {"model_path": str(model_dir), "grammar_backend": "grammarmask", "device": "cpu"}
        self.server_args = ServerArgs(**{**args, **server_args})
        publish(self.server_args, role="scheduler")
        self.tokenizer = get_tokenizer(str(model_dir))
        self.model_config = ModelConfig.from_server_args(self.server_args)
        self.backend = create_grammar_backend(
            self.server_args, self.tokenizer, self.model_config.vocab_size, self.model_config.hf_eos_token_id)

    def grammar(self, key_type: str, key_string: str) -> Any:
        """A request's grammar object the way SGLang's GrammarManager gets it: a compile in the
        backend's pool on a cache miss (the template then cached as a copy), a copy on a hit."""
        key = (key_type, key_string)
        value, hit = self.backend.get_cached_or_future_value(key, False)
        if hit:
            return value
        grammar = value.result(timeout=600)
        self.backend.set_cache(key, grammar.copy())
        return grammar


@pytest.fixture(scope="session")
def server(model_dir: Path) -> Server:
    return Server(model_dir)
