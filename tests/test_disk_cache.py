"""The on-disk cache: a vocabulary loaded by name is read back by the next load (the tokenizer file
is not opened again), equal to the one made; entries follow the code, the file and the switch."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import grammarmask as gm
from grammarmask import disk_cache, loaders


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_tokenizer_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(name: str) -> None:
        raise AssertionError(f"the tokenizer file {name} was read again")

    monkeypatch.setattr(loaders, "mistral_tokenizer", fail)


def test_a_vocabulary_loaded_by_name_is_read_back(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = gm.Vocabulary.from_mistral("sentencepiece")
    (entry,) = cache_dir.glob("vocabulary-*.pickle")
    assert oct(cache_dir.stat().st_mode & 0o777) == "0o700"
    _no_tokenizer_reads(monkeypatch)
    read = gm.Vocabulary.from_mistral("sentencepiece")
    assert read is not made and read.fingerprint == made.fingerprint
    assert read.token_bytes == made.token_bytes and read.special_token_names == made.special_token_names
    assert "trie" in vars(read)  # the token trie came from the entry too
    assert (read.trie.tokens == made.trie.tokens).all()
    # a compiled grammar on the read vocabulary behaves as on the made one
    for v in (made, read):
        m = gm.Regex("[0-9]+").compile(v).matcher()
        assert m.mask() == gm.Regex("[0-9]+").compile(made).matcher().mask()


def test_a_broken_entry_is_made_again(cache_dir: Path) -> None:
    gm.Vocabulary.from_mistral("sentencepiece")
    (entry,) = cache_dir.glob("vocabulary-*.pickle")
    entry.write_bytes(b"not a pickle")
    v = gm.Vocabulary.from_mistral("sentencepiece")
    assert v.size == 32000 and pickle.loads(entry.read_bytes()).fingerprint == v.fingerprint


def test_other_code_or_size_is_another_entry(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gm.Vocabulary.from_mistral("sentencepiece")
    gm.Vocabulary.from_mistral("sentencepiece", size=32800)
    monkeypatch.setattr(disk_cache, "code_hash", lambda: "other code")
    gm.Vocabulary.from_mistral("sentencepiece")
    assert len(list(cache_dir.glob("vocabulary-*.pickle"))) == 3


@pytest.mark.parametrize("off", ["off", ""])
def test_the_cache_can_be_turned_off(off: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", off)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.directory() is None
    assert disk_cache.load_or_make("x", 1, lambda: 42) == 42
    assert list(tmp_path.iterdir()) == []


def test_default_directory_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAMMARMASK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.directory() == tmp_path / "grammarmask"


def test_an_unwritable_directory_costs_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(blocker / "below"))  # below a file: cannot be made
    assert disk_cache.load_or_make("x", 1, lambda: [1, 2]) == [1, 2]


def test_a_new_process_reads_the_entry(cache_dir: Path) -> None:
    disk_cache.code_hash.cache_clear()  # this checkout's code now, as the new process will hash it
    gm.Vocabulary.from_mistral("sentencepiece")
    code = ("import grammarmask as gm, grammarmask.loaders as L\n"
            "L.mistral_tokenizer = None  # reading the file again would fail\n"
            "print(gm.Vocabulary.from_mistral('sentencepiece').fingerprint)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "GRAMMARMASK_CACHE_DIR": str(cache_dir)})
    assert out.stdout.strip() == gm.Vocabulary.from_mistral("sentencepiece").fingerprint


def _trained_bpe() -> Any:
    tk = pytest.importorskip("tokenizers", reason="tokenizers not installed (extra: grammarmask[tokenizers])")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the cache keys a tokenizer by its content, not its name"] * 20, trainer)
    return tok


def test_a_hf_tokenizer_is_read_back_by_its_content(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = _trained_bpe()
    made = gm.Vocabulary.from_hf(tok)
    (entry,) = cache_dir.glob("vocabulary-*.pickle")

    def fail(*args: Any) -> None:
        raise AssertionError("the tokenizer was read again")

    with monkeypatch.context() as m:
        m.setattr(loaders, "_from_hf_fast", fail)
        # another object with the same content (its JSON) is the same entry
        for same in (tok, type(tok).from_str(tok.to_str())):
            read = gm.Vocabulary.from_hf(same)
            assert read.fingerprint == made.fingerprint and read.token_bytes == made.token_bytes
            assert read.special_ids == made.special_ids and "trie" in vars(read)
    tok.add_special_tokens(["<|tool|>"])  # new content: a new entry, with the new special token
    grown = gm.Vocabulary.from_hf(tok)
    assert grown.size == made.size + 1 and grown.special_token_names[made.size] == "<|tool|>"
    assert len(list(cache_dir.glob("vocabulary-*.pickle"))) == 2
    assert gm.Vocabulary.from_hf(tok, size=grown.size + 8).size == grown.size + 8  # the arguments too
    assert len(list(cache_dir.glob("vocabulary-*.pickle"))) == 3


def test_the_directory_is_kept_under_its_size_limit(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("GRAMMARMASK_CACHE_MAX_MB", "1")
    monkeypatch.setattr(disk_cache, "_SWEEP_EVERY", 1)
    blob = os.urandom(300_000)  # incompressible: each entry about 0.3 MB
    for i in range(3):
        assert disk_cache.store("blob", i, blob)
    old = time.time() - 100
    for i, entry in enumerate(sorted(cache_dir.iterdir())):  # make every entry old ...
        os.utime(entry, (old + i, old + i))
    assert disk_cache.load("blob", 0) == blob  # ... then use entry 0: the last to go
    assert disk_cache.store("blob", 3, blob)  # 1.2 MB: down to 0.8 MB, the least recently used first
    assert sum(p.stat().st_size for p in cache_dir.iterdir()) <= 0.8 * (1 << 20)
    assert disk_cache.load("blob", 1) is None and disk_cache.load("blob", 2) is None
    assert disk_cache.load("blob", 0) == blob and disk_cache.load("blob", 3) == blob


def test_a_process_that_stores_little_looks_at_the_size_at_its_exit(cache_dir: Path) -> None:
    """Fewer stores than one look per _SWEEP_EVERY: the look comes at the exit (after the writer
    thread wrote its entries), not in the middle of the first masks."""
    import time

    blob = os.urandom(300_000)  # incompressible: each entry about 0.3 MB, 1.2 MB in all
    for i in range(4):
        assert disk_cache.store("blob", i, blob)  # (no size limit in force here: kept)
    old = time.time() - 100
    for i, entry in enumerate(sorted(cache_dir.iterdir())):
        os.utime(entry, (old + i, old + i))
    code = ("from grammarmask import disk_cache\n"
            "disk_cache.store_later('small', 'k', b'x' * 1000)\n"
            "disk_cache.flush()\n"
            "assert disk_cache._stores == 1 and len(list(disk_cache.directory().iterdir())) == 5\n")
    env = {**os.environ, "GRAMMARMASK_CACHE_DIR": str(cache_dir), "GRAMMARMASK_CACHE_MAX_MB": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert sum(p.stat().st_size for p in cache_dir.iterdir()) <= 0.8 * (1 << 20)
    assert len(list(cache_dir.glob("small-*.pickle"))) == 1  # the newest stays


@pytest.mark.parametrize("value", ["-1", "lots", "nan"])
def test_a_bad_size_limit_is_named(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GRAMMARMASK_CACHE_MAX_MB", value)
    with pytest.raises(gm.GrammarError, match="GRAMMARMASK_CACHE_MAX_MB"):
        disk_cache.max_bytes()
    with pytest.raises(gm.GrammarError, match="GRAMMARMASK_CACHE_MAX_MB"):
        disk_cache.store("blob", "k", b"x")  # a store names it too (before any look at the size)


def test_no_size_limit(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMARMASK_CACHE_MAX_MB", "0")
    assert disk_cache.max_bytes() is None and disk_cache.sweep(cache_dir) == 0


def test_a_later_store_is_read_while_it_waits_and_written_where_it_was_asked(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store_later: the compile goes on while the writer works; a load meanwhile gets the value
    itself; the entry lands in the directory in force when it was handed over, even if the
    directory changes before it is written; flush waits for it."""
    import threading

    gate = threading.Event()
    write = disk_cache._write

    def slow_write(*args: Any) -> bool:
        gate.wait(10)
        return write(*args)

    monkeypatch.setattr(disk_cache, "_write", slow_write)
    value = {"rules": [1, 2, 3]}
    disk_cache.store_later("later", "k", value, packed=True)
    assert disk_cache.load("later", "k", packed=True) is value  # pending: the object itself
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path / "elsewhere"))
    gate.set()
    disk_cache.flush()
    assert not (tmp_path / "elsewhere").exists()
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(cache_dir))
    back = disk_cache.load("later", "k", packed=True)
    assert back == value and back is not value  # read from the file now
    assert len(list(cache_dir.glob("later-*.pickle.z"))) == 1


def test_a_value_that_does_not_pickle_is_left_out_quietly(cache_dir: Path) -> None:
    disk_cache.store_later("later", "lambda", lambda: None)
    disk_cache.flush()
    assert disk_cache.load("later", "lambda") is None
    assert not list(cache_dir.glob("later-*"))


def test_the_fingerprint_names_the_tokens_and_their_boundaries() -> None:
    def v(tokens: list[bytes]) -> gm.Vocabulary:
        return gm.Vocabulary([*tokens, b""], eos_token_id=len(tokens))

    assert v([b"ab", b"c"]).fingerprint == v([b"ab", b"c"]).fingerprint
    assert v([b"ab", b"c"]).fingerprint != v([b"a", b"bc"]).fingerprint
    assert v([b"ab", b"c"]).fingerprint != v([b"c", b"ab"]).fingerprint
