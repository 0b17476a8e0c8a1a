"""Fixtures: the real mistral-common vocabularies (loaded once per session) and their tokenizers."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import pytest

import grammarmask as gm
from grammarmask.loaders import mistral_tokenizer

if "GRAMMARMASK_CACHE_DIR" not in os.environ:  # the on-disk cache: this run's own, not the user's
    os.environ["GRAMMARMASK_CACHE_DIR"] = _DIR = tempfile.mkdtemp(prefix="grammarmask-tests-")
    atexit.register(shutil.rmtree, _DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def tekken_tokenizer() -> Any:
    return mistral_tokenizer("tekken")


@pytest.fixture(scope="session")
def tekken(tekken_tokenizer: Any) -> gm.Vocabulary:
    return gm.Vocabulary.from_mistral(tekken_tokenizer)


@pytest.fixture(scope="session")
def sentencepiece_tokenizer() -> Any:
    return mistral_tokenizer("sentencepiece")


@pytest.fixture(scope="session")
def sentencepiece(sentencepiece_tokenizer: Any) -> gm.Vocabulary:
    return gm.Vocabulary.from_mistral(sentencepiece_tokenizer)
