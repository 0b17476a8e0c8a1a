"""Loaders: the concatenated token bytes of ``encode(text)`` equal the tokenizer's own decoding.

Real vocabularies: mistral-common's tekken (131k byte-level BPE) and sentencepiece (32k, byte
fallback), the latter both through ``from_mistral`` and through ``from_sentencepiece`` on the raw
processor; a ``tiktoken.Encoding`` built from tekken's ranks (tiktoken's own files need the internet);
Hugging Face ``tokenizers`` trained or assembled in the test (byte-level BPE, sentencepiece-style).

Sentencepiece convention: ``▁`` is always a space, so the tokens spell the dummy-prefix space that
``decode`` drops; the checks remove exactly one leading space before comparing with ``decode``.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask import loaders
from grammarmask.errors import GrammarError
from grammarmask.vocab import Vocabulary

PIECES = ["  ", "   ", "\n", "\n\n", "\t", "\r\n", "😀", "👩\u200d👩\u200d👧", "中文", "日本語", "한국어",
          " hello", "World", "é", "ü", "∑", "123", "!!", "<|endoftext|>", "</s>", "▁", "<0x41>", "\x00",
          "\u00ff"]
texts = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(PIECES)), max_size=12).map("".join)


def spell(vocab: Vocabulary, ids: list[int]) -> bytes:
    return b"".join(vocab.token_bytes[i] for i in ids)


def strip_one_space(b: bytes) -> bytes:
    return b[1:] if b.startswith(b" ") else b


# --- mistral-common: tekken ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tekken() -> tuple[Vocabulary, Any]:
    return Vocabulary.from_mistral("tekken"), loaders.mistral_tokenizer("tekken")


@settings(max_examples=150, deadline=None)
@given(texts)
def test_tekken_bytes_equal_text(tekken: tuple[Vocabulary, Any], text: str) -> None:
    vocab, tok = tekken
    ids = tok.encode(text, bos=False, eos=False)
    assert spell(vocab, ids) == text.encode("utf-8")
    assert spell(vocab, ids).decode("utf-8") == tok.decode(ids)


def test_tekken_specials(tekken: tuple[Vocabulary, Any]) -> None:
    vocab, tok = tekken
    assert vocab.size == tok.n_words == 131072
    assert vocab.eos_token_id == tok.eos_id
    assert set(range(tok.num_special_tokens)) <= vocab.special_ids
    assert all(vocab.token_bytes[i] == b"" for i in range(tok.num_special_tokens))
    # the literal text "</s>" is ordinary tokens, never the EOS id
    ids = tok.encode("</s>", bos=False, eos=False)
    assert vocab.eos_token_id not in ids and spell(vocab, ids) == b"</s>"


# --- mistral-common: sentencepiece ------------------------------------------------------------------


@pytest.fixture(scope="module")
def spm() -> tuple[Vocabulary, Any]:
    tok = loaders.mistral_tokenizer("sentencepiece")
    return Vocabulary.from_mistral("sentencepiece"), tok._model


def test_from_sentencepiece_equals_from_mistral(spm: tuple[Vocabulary, Any]) -> None:
    vocab, sp = spm
    raw = Vocabulary.from_sentencepiece(sp)
    assert raw.token_bytes == vocab.token_bytes
    assert raw.special_ids == vocab.special_ids
    assert raw.eos_token_id == vocab.eos_token_id == sp.eos_id()
    assert raw.size == sp.get_piece_size() == 32000
    assert {sp.unk_id(), sp.bos_id(), sp.eos_id()} <= raw.special_ids
    # the 256 byte-fallback pieces are single bytes, all distinct
    byte_ids = [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
    assert sorted(raw.token_bytes[i] for i in byte_ids) == [bytes([b]) for b in range(256)]


@settings(max_examples=150, deadline=None)
@given(texts)
def test_sentencepiece_bytes_equal_decode(spm: tuple[Vocabulary, Any], text: str) -> None:
    vocab, sp = spm
    ids = sp.encode(text)
    spelled = spell(vocab, ids)
    assert strip_one_space(spelled) == sp.decode(ids).encode("utf-8")
    if text:
        assert spelled.startswith(b" ")  # the dummy prefix is a real space in the output


# --- tiktoken --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiktoken_enc() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    import mistral_common

    path = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
    with open(path) as f:
        data = json.load(f)
    n = data["config"]["default_vocab_size"] - data["config"]["default_num_special_tokens"]
    ranks = {base64.b64decode(e["token_bytes"]): e["rank"] for e in data["vocab"][:n]}
    return tiktoken.Encoding(
        name="tekken-ranks", pat_str=data["config"]["pattern"], mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": n, "<|fim|>": n + 1},
    )


def test_tiktoken_specials_and_eos(tiktoken_enc: Any) -> None:
    vocab = Vocabulary.from_tiktoken(tiktoken_enc)
    eot = tiktoken_enc.eot_token
    assert vocab.eos_token_id == eot and vocab.size == tiktoken_enc.n_vocab
    assert {eot, eot + 1} <= vocab.special_ids
    assert vocab.name == "tekken-ranks"
    other = Vocabulary.from_tiktoken(tiktoken_enc, eos_token_id=eot + 1, size=vocab.size + 64)
    assert other.eos_token_id == eot + 1 and other.size == vocab.size + 64


@settings(max_examples=150, deadline=None)
@given(texts)
def test_tiktoken_bytes_equal_text(tiktoken_enc: Any, text: str) -> None:
    vocab = _cached(tiktoken_enc, lambda: Vocabulary.from_tiktoken(tiktoken_enc))
    ids = tiktoken_enc.encode(text, disallowed_special=())
    assert spell(vocab, ids) == text.encode("utf-8") == tiktoken_enc.decode_bytes(ids)


def test_tiktoken_gaps_and_missing_eos() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"ab"] = 300  # ids 256..299 are a gap
    enc = tiktoken.Encoding(name="gappy", pat_str=r"\S+|\s+", mergeable_ranks=ranks,
                            special_tokens={"<|stop|>": 301})
    with pytest.raises(GrammarError, match=r"no <\|endoftext\|>.*<\|stop\|>"):
        Vocabulary.from_tiktoken(enc)
    vocab = Vocabulary.from_tiktoken(enc, eos_token_id=301)
    assert vocab.size == 302 and vocab.token_bytes[300] == b"ab"
    assert set(range(256, 300)) <= vocab.special_ids  # gaps are never legal
    assert spell(vocab, enc.encode("ab ab")) == b"ab ab"
    with pytest.raises(GrammarError, match="tiktoken.Encoding"):
        Vocabulary.from_tiktoken(object())


# --- Hugging Face tokenizers -----------------------------------------------------------------------

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Grammar-constrained decoding masks logits so the output parses.",
    '{"answer": "yes", "score": 0.93, "tags": ["a", "b"]}',
    "中文分词 and emoji 😀🎉 mixed with  double  spaces\n\nand newlines.",
    "def f(x):\n    return x * 2  # indentation",
] * 20


@pytest.fixture(scope="module")
def hf_bytelevel() -> Any:
    tk = pytest.importorskip("tokenizers", reason="tokenizers not installed (extra: grammarmask[tokenizers])")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens(["hello world", "ünïcode"])  # non-special added tokens: their text is their bytes
    tok.add_special_tokens(["<|tool|>"])
    return tok


def test_byte_map_matches_references() -> None:
    tk = pytest.importorskip("tokenizers")
    table = loaders.bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert set(table.values()) == set(tk.pre_tokenizers.ByteLevel.alphabet())
    convert = pytest.importorskip("transformers.convert_slow_tokenizer")
    assert convert.bytes_to_unicode() == table


def test_hf_bytelevel_specials(hf_bytelevel: Any) -> None:
    vocab = Vocabulary.from_hf(hf_bytelevel)
    tok = hf_bytelevel
    assert vocab.eos_token_id == tok.token_to_id("<|endoftext|>")
    assert {tok.token_to_id("<pad>"), tok.token_to_id("<|tool|>")} <= vocab.special_ids
    hw = tok.token_to_id("hello world")
    assert hw not in vocab.special_ids and vocab.token_bytes[hw] == b"hello world"
    assert vocab.size == tok.get_vocab_size(with_added_tokens=True)
    bigger = Vocabulary.from_hf(tok, size=vocab.size + 10)
    assert bigger.size == vocab.size + 10 and bigger.token_bytes == vocab.token_bytes


@settings(max_examples=150, deadline=None)
@given(texts)
def test_hf_bytelevel_bytes_equal_decode(hf_bytelevel: Any, text: str) -> None:
    vocab = _cached(hf_bytelevel, lambda: Vocabulary.from_hf(hf_bytelevel))
    text = text.replace("<|endoftext|>", "")  # the special token's literal text would encode as it
    ids = hf_bytelevel.encode(text).ids
    assert spell(vocab, ids) == hf_bytelevel.decode(ids, skip_special_tokens=False).encode("utf-8")
    assert spell(vocab, ids) == text.encode("utf-8")


def test_hf_added_token_inside_text(hf_bytelevel: Any) -> None:
    vocab = Vocabulary.from_hf(hf_bytelevel)
    ids = hf_bytelevel.encode("say hello world and ünïcode!").ids
    assert hf_bytelevel.token_to_id("hello world") in ids
    assert spell(vocab, ids) == "say hello world and ünïcode!".encode()


def test_transformers_fast_tokenizer(hf_bytelevel: Any) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers not installed")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=hf_bytelevel, eos_token="<|endoftext|>",
                                                pad_token="<pad>", bos_token="<|tool|>")
    vocab = Vocabulary.from_hf(fast)
    assert vocab.eos_token_id == fast.eos_token_id
    assert set(fast.all_special_ids) <= vocab.special_ids
    for text in ["plain text", "  spaced\n\nout 😀", '{"a": [1, 2]}', "hello world"]:
        ids = fast.encode(text, add_special_tokens=False)
        assert spell(vocab, ids) == fast.decode(ids).encode() == text.encode()


@pytest.fixture(scope="module")
def hf_sentencepiece(spm: tuple[Vocabulary, Any]) -> Any:
    """A sentencepiece-style HF tokenizer (Metaspace, ``<0xNN>`` byte fallback) from the real 32k pieces."""
    tk = pytest.importorskip("tokenizers", reason="tokenizers not installed (extra: grammarmask[tokenizers])")
    _, sp = spm
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = tk.Tokenizer(tk.models.Unigram(pieces, unk_id=sp.unk_id(), byte_fallback=True))
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = tk.decoders.Sequence([
        tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse(),
        tk.decoders.Strip(" ", 1, 0),
    ])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


@settings(max_examples=100, deadline=None)
@given(texts)
def test_hf_sentencepiece_style_bytes_equal_decode(hf_sentencepiece: Any, spm: tuple[Vocabulary, Any],
                                                   text: str) -> None:
    vocab = _cached(hf_sentencepiece, lambda: Vocabulary.from_hf(hf_sentencepiece))
    text = text.replace("</s>", "")
    ids = hf_sentencepiece.encode(text).ids
    assert strip_one_space(spell(vocab, ids)) == hf_sentencepiece.decode(ids).encode("utf-8")


def test_hf_sentencepiece_style_matches_raw_pieces(
    hf_sentencepiece: Any, spm: tuple[Vocabulary, Any]
) -> None:
    vocab = Vocabulary.from_hf(hf_sentencepiece)
    raw, _ = spm
    assert vocab.eos_token_id == 2 and {0, 1, 2} <= vocab.special_ids
    assert vocab.token_bytes == raw.token_bytes


def test_hf_errors() -> None:
    tk = pytest.importorskip("tokenizers")
    wp = tk.Tokenizer(tk.models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    with pytest.raises(GrammarError, match="WordPiece"):
        Vocabulary.from_hf(wp)
    bpe = tk.Tokenizer(tk.models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")]))
    bpe.decoder = tk.decoders.ByteLevel()
    with pytest.raises(GrammarError, match="no EOS"):
        Vocabulary.from_hf(bpe)
    vocab = loaders.from_hf(Vocabulary, bpe, eos_token_id=2)
    assert vocab.eos_token_id == 2
    bare = tk.Tokenizer(tk.models.BPE({"a": 0, "</s>": 1}, []))
    with pytest.raises(GrammarError, match="neither ByteLevel nor sentencepiece"):
        Vocabulary.from_hf(bare)
    with pytest.raises(GrammarError, match="tokenizers.Tokenizer"):
        Vocabulary.from_hf("gpt2")
    with pytest.raises(GrammarError, match="SentencePieceProcessor"):
        Vocabulary.from_sentencepiece(object())


def _cached(key: Any, build: Any) -> Vocabulary:
    cache = _VOCABS.get(id(key))
    if cache is None:
        cache = _VOCABS[id(key)] = build()
    return cache


_VOCABS: dict[int, Vocabulary] = {}



def test_transformers_sentencepiece_backend(spm: tuple[Vocabulary, Any]) -> None:
    """A transformers tokenizer without a ``tokenizers`` backend (``sp_model``): same bytes as the raw
    processor, specials from ``added_tokens_decoder`` / ``all_special_ids``."""
    pytest.importorskip("transformers", reason="transformers not installed")
    backend = pytest.importorskip("transformers.tokenization_utils_sentencepiece")
    raw, sp = spm
    import mistral_common

    path = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tokenizer.model.v1")
    tok = backend.SentencePieceBackend(vocab_file=path, eos_token="</s>", unk_token="<unk>", bos_token="<s>")
    tok.add_tokens(["<tool>"], special_tokens=True)
    tok.add_tokens(["grammarmask"])
    vocab = Vocabulary.from_hf(tok)
    assert vocab.eos_token_id == tok.eos_token_id == 2
    assert vocab.token_bytes[:32000] == raw.token_bytes
    assert tok.convert_tokens_to_ids("<tool>") in vocab.special_ids
    assert vocab.token_bytes[tok.convert_tokens_to_ids("grammarmask")] == b"grammarmask"
    assert set(tok.all_special_ids) <= vocab.special_ids


def test_slow_byte_level_tokenizer_duck_typed() -> None:
    """A GPT-2 style Python tokenizer (``encoder`` + ``byte_decoder``), as transformers' slow ones are."""
    b2u = loaders.bytes_to_unicode()

    class SlowGpt2:
        encoder = {"".join(b2u[b] for b in t.encode()): i for i, t in enumerate(["a", " b", "ü", "\n"])}
        encoder["<|endoftext|>"] = 4
        byte_decoder = {c: b for b, c in b2u.items()}
        added_tokens_decoder = {4: "<|endoftext|>", 5: "<new>"}
        all_special_ids = [4]
        eos_token_id = 4

    vocab = Vocabulary.from_hf(SlowGpt2())
    assert vocab.token_bytes == (b"a", b" b", "ü".encode(), b"\n", b"", b"<new>")
    assert vocab.eos_token_id == 4 and vocab.special_ids == {4}
