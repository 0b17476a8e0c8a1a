"""Serving-engine tests: they import the real vLLM and run only in the virtual environment that
``tools/serving-tests`` builds (vLLM pinned, about 9 GB). The main suite does not collect them.

Fixtures build a tiny local model directory (a byte-level BPE tokenizer trained here, with special
tokens, and a Llama config whose vocabulary is wider than the tokenizer's: padding ids), a vLLM
config on the CPU, and vLLM's own ``StructuredOutputManager`` with grammarmask selected through the
documented switch (``GRAMMARMASK_VLLM=1`` and vLLM's ``vllm.general_plugins`` entry point).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("GRAMMARMASK_SERVING_TESTS"):
        raise RuntimeError("tools/serving-tests runs these tests, but vllm does not import here")
    collect_ignore_glob = ["test_*.py"]  # the main suite: these need tools/serving-tests' venv

#: tokens the tokenizer gets (with its special tokens), and the model's wider vocabulary
MODEL_VOCAB = 400
SPECIALS = ["<s>", "</s>", "<|im_end|>", "<tool_call>", "</tool_call>"]
_CORPUS = [
    '{"name": "Ada Lovelace", "age": 36, "tags": ["math", "poetry"], "ok": true, "n": null}',
    "The quick brown fox jumps over the lazy dog. 0123456789 {}[]:,\"'\n\t-+.eE",
    "Technology > AI > NLP, Science > Physics, yes, no, 2024-01-31T12:00:00Z ada@example.com",
    "expr: term (('+'|'-') term)*  root ::= \"a\" | \"b\"  NUMBER WORD %import common",
]


def build_model_dir(out: Path) -> Path:
    """A model directory vLLM can read offline: tokenizer.json (byte-level BPE), its config, a config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=MODEL_VOCAB - 8, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 40, trainer)
    n = tok.get_vocab_size()
    assert n < MODEL_VOCAB and MODEL_VOCAB % 32, "the model's vocabulary must be padded, past a partial word"
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 4096,
    }))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": MODEL_VOCAB,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 1,
        "torch_dtype": "float32", "rms_norm_eps": 1e-5,
    }))
    return out


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def switched_on() -> Iterator[None]:
    """grammarmask selected the documented way: the switch, then vLLM loads its general plugins."""
    os.environ["GRAMMARMASK_VLLM"] = "1"
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    yield


@pytest.fixture(scope="session")
def model_config(model_dir: Path) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(model=str(model_dir), tokenizer=str(model_dir), dtype="float32", max_model_len=1024)


class Engine:
    """vLLM's StructuredOutputManager over one config, and the requests it manages."""

    def __init__(self, model_config: Any, *, spec_tokens: int = 0, max_num_seqs: int = 16) -> None:
        from vllm.config import (
            DeviceConfig,
            SchedulerConfig,
            SpeculativeConfig,
            StructuredOutputsConfig,
            VllmConfig,
        )
        from vllm.v1.structured_output import StructuredOutputManager

        self.model_config = model_config
        self.so_config = StructuredOutputsConfig()  # backend "auto": the switch decides
        self.spec_config = (SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens,
                                              prompt_lookup_max=3, prompt_lookup_min=1)
                            if spec_tokens else None)
        sched = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=4096, max_model_len=1024,
                                is_encoder_decoder=False)
        self.config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"),
                                 structured_outputs_config=self.so_config, scheduler_config=sched,
                                 speculative_config=self.spec_config)
        self.manager = StructuredOutputManager(self.config)
        self.tokenizer = self.manager.tokenizer
        self.requests: dict[str, Any] = {}

    def params(self, **so: Any) -> Any:
        """SamplingParams with these structured outputs, verified the way vLLM's input processor does."""
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        stop_ids = so.pop("stop_token_ids", None)
        sp = SamplingParams(structured_outputs=StructuredOutputsParams(**so), stop_token_ids=stop_ids,
                            max_tokens=256)
        sp.verify(self.model_config, self.spec_config, self.so_config, self.tokenizer)
        sp.update_from_generation_config({}, self.tokenizer.eos_token_id)
        return sp

    def submit(self, request_id: str | None = None, **so: Any) -> Any:
        """A request through vLLM's validation and grammar_init, its compile finished (or failed)."""
        from vllm.v1.request import Request

        rid = request_id or f"r{len(self.requests)}"
        req = Request(rid, [0, 5, 6], self.params(**so), None)
        self.manager.grammar_init(req)
        future = req.structured_output_request._grammar
        if hasattr(future, "exception"):
            future.exception()  # wait for the compile; a failure stays in the request (vLLM reads it)
        self.requests[rid] = req
        return req

    def bitmask(self, ids: list[str], drafts: dict[str, list[int]] | None = None) -> Any:
        return self.manager.grammar_bitmask(self.requests, ids, drafts or {})


@pytest.fixture(scope="session")
def engine(switched_on: None, model_config: Any) -> Engine:
    return Engine(model_config)


@pytest.fixture(scope="session")
def make_engine(switched_on: None, model_config: Any) -> Callable[..., Engine]:
    return lambda **kw: Engine(model_config, **kw)
