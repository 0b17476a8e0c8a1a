"""Special tokens in grammars: legal exactly where a grammar names them (SpecialToken, Lark and GBNF
<name>/<[id]>), never elsewhere; loaders record the names; clear errors; and the tool-calling example
end to end with the real tekken tokenizer."""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import grammarmask as gm
from grammarmask.testing import assert_mask_exact

# ids: 0 EOS, 1-4 text, 5 <t>, 6 [T], 7 a special with no name, 8 b"\xff" (never text), 9 b"a\xff"
TOKENS = [b"", b"a", b"b", b"ab", b"<t>", b"", b"", b"", b"\xff", b"a\xff"]
NAMES = {0: "</s>", 5: "<t>", 6: "[T]"}


@pytest.fixture
def toy() -> gm.Vocabulary:
    return gm.Vocabulary.from_tokens(TOKENS, eos_token_id=0, special_token_ids=[5, 6, 7],
                                     special_token_names=NAMES)


GRAMMARS = {
    "python": lambda: gm.Regex("a+") + gm.SpecialToken("<t>") + gm.Regex("b") + gm.SpecialToken(6),
    "lark": lambda: gm.Lark('start: A <t> "b" <[T]>\nA: /a+/'),
    "gbnf": lambda: gm.Gbnf('root ::= "a"+ <t> "b" <[6]>'),
}


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("kind", sorted(GRAMMARS))
def test_legal_exactly_where_named(toy: gm.Vocabulary, kind: str, engine: str) -> None:
    m = GRAMMARS[kind]().compile(toy, engine=engine).matcher()
    steps = [([1], 1), ([1, 5], 5), ([2], 2), ([6], 6), ([0], 0)]
    for legal, take in steps:
        assert m.mask().token_ids().tolist() == legal
        m.advance(take)
    assert m.is_finished()


def test_text_grammars_never_allow_special_tokens(toy: gm.Vocabulary) -> None:
    # compiled on the view that spells the special tokens: free text still excludes them and the
    # normal tokens holding 0xFF (they could otherwise spell the start of a special token)
    g = gm.Regex("(?s).*") + gm.SpecialToken("<t>")
    m = g.compile(toy).matcher()
    assert m.mask().token_ids().tolist() == [1, 2, 3, 4, 5]
    for t in (6, 7, 8, 9):
        with pytest.raises(gm.TokenRejected):
            m.advance(t)
    assert m.num_tokens == 0
    m.advance(5)
    assert m.mask().token_ids().tolist() == [0]
    assert gm.Regex("(?s).*").compile(toy).matcher().mask().token_ids().tolist() == [0, 1, 2, 3, 4]


def test_oracle_agrees_on_the_view(toy: gm.Vocabulary) -> None:
    spell = {b"\xff<t>\xfe": "S"}

    def decode(data: bytes) -> list[str]:
        for k, v in spell.items():
            data = data.replace(k, v.encode())
        cut = data.rfind(b"\xff")
        if cut < 0:
            return [data.decode()]
        return [data[:cut].decode() + "S"] if b"\xff<t>\xfe".startswith(data[cut:]) else []

    def viable(data: bytes) -> bool:
        return any(re.fullmatch(r"(a+(S(b)?)?)?", s) is not None for s in decode(data))

    def complete(data: bytes) -> bool:
        return any(re.fullmatch(r"a+Sb", s) is not None for s in decode(data))

    compiled = (gm.Regex("a+") + gm.SpecialToken("<t>") + gm.Regex("b")).compile(toy)
    assert_mask_exact(compiled, [1, 1, 5, 2], viable, complete)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: gm.SpecialToken("<x>"),
     "'<x>' is not a special token of <Vocabulary size=10 eos=0>; did you mean '<t>'"),
    (lambda: gm.SpecialToken("T"), "did you mean '[T]'"),
    (lambda: gm.SpecialToken("</s>"), "</s> is the EOS token"),
    (lambda: gm.SpecialToken(1), "token id 1 is not a special token (it is the text b'a')"),
    (lambda: gm.SpecialToken(7), "token id 7 is a special token with no name"),
    (lambda: gm.SpecialToken(99), "token id 99 is outside the vocabulary"),
    (lambda: gm.Lark("start: <|x|>"), "Lark(<12 chars>, start='start'), line 1, column 8: '<|x|>' is not"),
    (lambda: gm.Regex("a") + gm.Gbnf('root ::= "b" |\n  <[U]>'), "Gbnf(<22 chars>), line 2, column 3: '[U]'"),
    (lambda: gm.Regex("a") + gm.SpecialToken("<y>"), "SpecialToken('<y>')"),
])
def test_unknown_tokens_are_clear_errors(
    toy: gm.Vocabulary, make: Callable[[], gm.Grammar], message: str
) -> None:
    with pytest.raises(gm.GrammarError, match=re.escape(message)):
        make().compile(toy)


def test_gbnf_negation_is_refused_with_its_position() -> None:
    with pytest.raises(gm.GrammarError, match=r"line 1, column 10: '!': negated token references"):
        gm.Gbnf("root ::= !<t>")


def test_lark_references_skip_strings_regexes_and_comments(toy: gm.Vocabulary) -> None:
    g = gm.Lark('start: "<t>" /<[t]>/? <t>  // <nope>\n')
    assert g.special_tokens() == frozenset({"<t>"})
    m = g.compile(toy).matcher()
    m.advance(4)  # the text "<t>" is a normal token; then the regex /<[t]>/ (text again) or <t>
    assert m.mask().token_ids().tolist() == [4, 5]


def test_vocabulary_api(toy: gm.Vocabulary) -> None:
    assert toy.special_token_id("<t>") == 5
    assert toy.decode([1, 5, 2]) == b"ab"
    assert toy.decode([1, 5, 2, 0], special_tokens=True) == b"a<t>b</s>"
    assert 5 in toy.special_ids and toy.token_bytes[5] == b""  # the vocabulary itself is unchanged
    with pytest.raises(gm.GrammarError, match="special_token_names"):
        gm.Vocabulary([b"a"], eos_token_id=0, special_token_names={3: "x"})


def test_generate_pickle_and_rollback(toy: gm.Vocabulary) -> None:
    g = GRAMMARS["python"]()
    out = gm.generate(gm.UniformModel(toy.size), toy, g, seed=1)
    assert out.token_ids[-2:] == (6, 0) and 5 in out.token_ids
    compiled = g.compile(toy)
    for v in (toy, compiled.vocab):  # the vocabulary or the view it was compiled for
        assert gm.generate(gm.UniformModel(toy.size), v, compiled, seed=1).token_ids == out.token_ids
    other = gm.Vocabulary.from_tokens(TOKENS, eos_token_id=0, special_token_ids=[5, 6, 7],
                                      special_token_names={5: "<t>", 6: "[U]"})
    with pytest.raises(gm.GrammarError, match="different vocabulary"):
        gm.generate(gm.UniformModel(toy.size), other, compiled, seed=1)
    again = pickle.loads(pickle.dumps(compiled))
    m = again.matcher()
    m.advance_many([1, 5])
    m.rollback(1)
    assert m.mask().token_ids().tolist() == [1, 5]
    words = np.zeros((1, toy.n_words), np.int32)
    compiled.matcher().fill_mask(words)
    assert words[0, 0] == 1 << 1


def test_loaders_record_names() -> None:
    tekken = gm.Vocabulary.from_mistral("tekken")
    assert tekken.special_token_id("[TOOL_CALLS]") == 9
    assert tekken.special_token_names[tekken.eos_token_id] == "</s>"
    m = gm.Lark('start: <[TOOL_CALLS]> "[1]"').compile(tekken).matcher()
    assert m.mask().token_ids().tolist() == [9]
    sp = gm.Vocabulary.from_mistral("sentencepiece")
    assert sp.special_token_names == {0: "<unk>", 1: "<s>", 2: "</s>"}


def test_tool_calling_example_end_to_end() -> None:
    path = Path(__file__).parent.parent / "examples" / "tool_calling.py"
    spec = importlib.util.spec_from_file_location("tool_calling", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for seed in (0, 1):
        ids, text = mod.run(seed)
        assert ids[0] == 9 and ids[-1] == 2  # [TOOL_CALLS] first, EOS last
        call = json.loads(text.removeprefix("[TOOL_CALLS]"))
        jsonschema.validate(call["arguments"], mod.TOOLS[call["name"]])


def test_hf_loader_records_names() -> None:
    tk = pytest.importorskip("tokenizers", reason="tokenizers not installed (extra: grammarmask[tokenizers])")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tok.train_from_iterator(["a tool call <tool_call> in text"] * 5, trainer)
    tok.add_tokens(["<tool_call>"])  # not special: text
    tok.add_special_tokens(["<|python_tag|>"])
    vocab = gm.Vocabulary.from_hf(tok)
    tag = tok.token_to_id("<|python_tag|>")
    assert vocab.special_token_names[tag] == "<|python_tag|>"
    assert vocab.special_token_names[vocab.eos_token_id] == "<|endoftext|>"
    m = (gm.Lark('start: <|python_tag|> "{}"')).compile(vocab).matcher()
    assert m.mask().token_ids().tolist() == [tag]
    with pytest.raises(gm.GrammarError, match="'<tool_call>' is not a special token"):
        gm.SpecialToken("<tool_call>").compile(vocab)


def test_tiktoken_loader_records_names() -> None:
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken not installed")
    ranks = {bytes([b]): b for b in range(256)}
    enc = tiktoken.Encoding(name="bytes", pat_str=r"[\s\S]", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 256, "<|fim|>": 257})
    vocab = gm.Vocabulary.from_tiktoken(enc)
    assert vocab.special_token_names == {256: "<|endoftext|>", 257: "<|fim|>"}
    m = gm.Gbnf('root ::= "a" <|fim|> "b"').compile(vocab).matcher()
    m.advance(ord("a"))
    assert m.mask().token_ids().tolist() == [257]
