"""grammarmask as SGLang's grammar backend (CPU), built by SGLang's own create_grammar_backend: every
request type, masks equal to grammarmask's own at every step of random walks (and to the brute-force
oracle for a regex), accept/rollback/terminate, copy and SGLang's cache, the model's EOS set, the
padded vocabulary, SGLang's speculative tree traversal, mask application, budgets and time limits
failing one request, jump-forward through the tokenizer's own tokenization, structural tags."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.completion import shortest_completion
from grammarmask.integrations import sglang as gs
from grammarmask.testing import reference_mask

from .conftest import MODEL_VOCAB, Server

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["math", "poetry"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
LARK = """
start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")"
%import common.NUMBER
"""
GBNF = 'root ::= "yes" | "no" | "maybe " [0-9]+'
REGEX = r"[a-z]{1,4}@(example|test)\.com"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
           "required": ["city"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = {  # SGLang's structural_tag request in its legacy form: two tools, free text around the calls
    "type": "structural_tag",
    "structures": [
        {"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"},
        {"begin": "<function=get_time>", "schema": TIME, "end": "</function>"},
    ],
    "triggers": ["<function="],
}

KEYS: dict[str, tuple[str, str]] = {
    "json": ("json", json.dumps(PERSON)),
    "json_object": ("json", gs.ANY_JSON),
    "regex": ("regex", REGEX),
    "ebnf_gbnf": ("ebnf", GBNF),
    "ebnf_lark": ("ebnf", LARK),
    "structural_tag": ("structural_tag", json.dumps(TOOLS)),
}


def own_matcher(server: Server, key: tuple[str, str]) -> gm.Matcher:
    """grammarmask's own matcher for the key, compiled independently of SGLang's path."""
    return gs.grammar_for(*key).compile(server.backend.vocab, engine="python").matcher()


def expected_row(own: gm.Matcher, stops: set[int]) -> np.ndarray:
    """The row SGLang must get: grammarmask's mask with the model's EOS set for EOS."""
    words = own.mask().words.astype(np.uint32).copy()
    eos = own.vocab.eos_token_id
    for t in stops | {eos}:
        words[t >> 5] &= ~np.uint32(1 << (t & 31))
    if own.is_accepting():
        for t in stops:
            words[t >> 5] |= np.uint32(1 << (t & 31))
    return words


def legal_ids(row: Any) -> list[int]:
    bits = np.unpackbits(np.asarray(row).view(np.uint8), bitorder="little")
    return [int(i) for i in np.flatnonzero(bits)]


def row_of(grammar: Any, batch: int = 3, idx: int = 1) -> np.ndarray:
    """Fill row ``idx`` of a mask SGLang's way (allocate, fill); the other rows must stay all-ones."""
    mask = grammar.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=batch, device="cpu")
    grammar.fill_vocab_mask(mask, idx)
    rows = mask.numpy().view(np.uint32)
    assert all((rows[i] == np.uint32(0xFFFFFFFF)).all() for i in range(batch) if i != idx)
    return rows[idx].copy()


def _pick(own: gm.Matcher, legal: list[int], stops: set[int], rng: random.Random, *, finishing: bool) -> int:
    text = [t for t in legal if t not in stops]
    if not finishing or not text:
        return rng.choice(text or legal)
    ending = [t for t in legal if t in stops]
    if ending:
        return rng.choice(ending)
    rest = shortest_completion(own.compiled, own.state) or b""
    tb = own.vocab.token_bytes
    toward = [t for t in text if tb[t] and rest.startswith(tb[t])]
    return max(toward, key=lambda t: len(tb[t])) if toward else rng.choice(text)


def walk(server: Server, key: tuple[str, str], rng: random.Random, steps: int = 150,
         finish_after: int = 14) -> tuple[Any, list[int]]:
    """A request's grammar through SGLang's cache; at every step the row equals grammarmask's own."""
    grammar = server.grammar(*key)
    own = own_matcher(server, key)
    stops = set(server.backend.stop_token_ids)
    taken: list[int] = []
    for step in range(steps):
        if grammar.is_terminated():
            break
        row = row_of(grammar)
        np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"{key[0]} step {step}")
        legal = legal_ids(row)
        assert legal and max(legal) < len(server.backend.vocab.token_bytes) <= MODEL_VOCAB
        t = _pick(own, legal, stops, rng, finishing=step >= finish_after)
        grammar.accept_token(t)
        own.advance(own.vocab.eos_token_id if t in stops else t)
        taken.append(t)
    return grammar, taken


def test_the_switch_built_grammarmask(server: Server) -> None:
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES

    assert gs.registered() and gs.BACKEND_NAME in GRAMMAR_BACKEND_CHOICES
    assert isinstance(server.backend, gs.GrammarmaskBackend)
    assert isinstance(server.grammar("regex", "a+"), gs.GrammarmaskGrammar)


def test_padded_vocabulary(server: Server) -> None:
    backend = server.backend
    n_tokenizer = len(server.tokenizer)
    assert n_tokenizer < MODEL_VOCAB == server.model_config.vocab_size == backend.vocab.size
    mask = backend.allocate_vocab_mask(MODEL_VOCAB, 4, "cpu")
    assert tuple(mask.shape) == (4, (MODEL_VOCAB + 31) // 32) and str(mask.dtype) == "torch.int32"
    assert (mask == -1).all()
    assert backend.vocab.decode(server.tokenizer.encode('{"a"', add_special_tokens=False)) == b'{"a"'
    assert all(t == b"" for t in backend.vocab.token_bytes[n_tokenizer:])
    # padding is never legal, not even in "any JSON" where every text token is at some point
    g = server.grammar("json", gs.ANY_JSON)
    assert max(legal_ids(row_of(g))) < n_tokenizer
    for pad in (n_tokenizer, MODEL_VOCAB - 1):
        with pytest.raises(ValueError):
            g.accept_token(pad)


@pytest.mark.parametrize("kind", list(KEYS))
def test_masks_equal_grammarmask_own_at_every_step(server: Server, kind: str) -> None:
    for seed in range(3):
        grammar, taken = walk(server, KEYS[kind], random.Random(seed))
        assert grammar.is_terminated(), f"{kind}: the walk did not finish: {taken}"
        assert taken[-1] in server.backend.stop_token_ids
        text = server.backend.vocab.decode(taken[:-1]).decode()
        if kind == "json":
            doc = json.loads(text)
            assert set(doc) >= {"name", "age"} and set(doc) <= set(PERSON["properties"])
        elif kind == "json_object":
            json.loads(text)
        elif kind == "regex":
            import re

            assert re.fullmatch(REGEX, text)


def test_regex_masks_equal_the_brute_force_oracle(server: Server) -> None:
    import regex as re

    def viable(b: bytes) -> bool:
        return re.fullmatch(REGEX, b.decode("utf-8", "replace"), partial=True) is not None

    grammar = server.grammar("regex", REGEX)
    vocab = server.backend.vocab
    stops = set(server.backend.stop_token_ids)
    rng = random.Random(7)
    history: list[int] = []
    for _ in range(40):
        prefix = vocab.decode(history)
        oracle = reference_mask(viable, vocab, prefix).words.astype(np.uint32)
        if re.fullmatch(REGEX, prefix.decode()) is not None:
            for t in stops:
                oracle[t >> 5] |= np.uint32(1 << (t & 31))
        row = row_of(grammar)
        np.testing.assert_array_equal(row, oracle, err_msg=repr(prefix))
        text = [t for t in legal_ids(row) if t not in stops]
        if not text:
            break
        history.append(rng.choice(text))
        grammar.accept_token(history[-1])
    assert len(history) >= 6


def test_accept_rejects_rollback_and_terminate(server: Server) -> None:
    tok = server.tokenizer
    g = server.grammar("regex", r"[a-z]+(\.[a-z]+)?")
    (a,) = tok.encode("a", add_special_tokens=False)
    (brace,) = tok.encode("{", add_special_tokens=False)
    eos = tok.eos_token_id
    with pytest.raises(ValueError, match=f"token {eos} "):  # SGLang aborts the request on ValueError
        g.accept_token(eos)  # nothing written yet: no stop
    g.accept_token(a)
    with pytest.raises(ValueError, match=f"token {brace} "):
        g.accept_token(brace)
    assert g.matcher.num_tokens == 1 and not g.is_terminated()  # the rejection changed nothing
    assert eos in legal_ids(row_of(g))
    g.accept_token(eos)
    assert g.is_terminated()
    g.accept_token(brace)  # after termination tokens are ignored (as XGrammar's backend does)
    g.rollback(1)  # undoes termination
    assert not g.is_terminated() and g.matcher.num_tokens == 1
    g.accept_token(a)
    g.rollback(2)
    assert g.matcher.num_tokens == 0
    with pytest.raises(gm.GrammarError, match="only 0 were taken"):
        g.rollback(1)


def test_copy_and_the_cache(server: Server) -> None:
    key = ("json", json.dumps(PERSON))
    first = server.grammar(*key)
    tok = server.tokenizer
    for t in tok.encode('{"name": "Ada', add_special_tokens=False):
        first.accept_token(t)
    second = server.grammar(*key)  # a cache hit: a copy of the untouched template
    assert second is not first and second.grammar_stats.is_cache_hit
    assert second.matcher.num_tokens == 0
    fork = first.copy()  # a copy keeps the position and is independent
    np.testing.assert_array_equal(row_of(fork), row_of(first))
    fork.accept_token(tok.encode('"', add_special_tokens=False)[0])
    assert fork.matcher.num_tokens == first.matcher.num_tokens + 1
    np.testing.assert_array_equal(row_of(second), row_of(server.grammar(*key)))


def test_the_model_eos_set_replaces_the_single_eos(model_dir: Any) -> None:
    import json as _json
    import shutil

    # a model whose generation config names a second EOS (<|im_end|>): SGLang passes both
    alt = model_dir.parent / "tiny-model-two-eos"
    if not alt.exists():
        shutil.copytree(model_dir, alt)
        im_end = _json.loads((alt / "tokenizer.json").read_text())["added_tokens"][2]
        assert im_end["content"] == "<|im_end|>"
        (alt / "generation_config.json").write_text(_json.dumps({"eos_token_id": [1, im_end["id"]]}))
    server = Server(alt)
    tok = server.tokenizer
    im_end_id = tok.convert_tokens_to_ids("<|im_end|>")
    assert server.backend.stop_token_ids == {tok.eos_token_id, im_end_id}
    g = server.grammar("regex", "[a-z]+")
    assert not set(legal_ids(row_of(g))) & {tok.eos_token_id, im_end_id}
    g.accept_token(tok.encode("a", add_special_tokens=False)[0])
    assert {tok.eos_token_id, im_end_id} <= set(legal_ids(row_of(g)))
    g.accept_token(im_end_id)
    assert g.is_terminated()
    # a backend told of one EOS id: the tokenizer's own EOS is then never legal
    backend = gs.GrammarmaskBackend(tok, MODEL_VOCAB, {im_end_id})
    g = backend.dispatch_regex("[a-z]+")
    g.accept_token(tok.encode("a", add_special_tokens=False)[0])
    assert im_end_id in legal_ids(row_of(g)) and tok.eos_token_id not in legal_ids(row_of(g))
    with pytest.raises(ValueError):
        g.accept_token(tok.eos_token_id)


def test_speculative_tree_traversal(server: Server) -> None:
    """SGLang's own draft-tree traversal (EAGLE's spec_utils.traverse_tree) accepts drafts, fills a
    row per node and rolls back: every row equals grammarmask's mask after that node's path."""
    import torch
    from sglang.srt.speculative.spec_utils import traverse_tree

    tok = server.tokenizer
    key = ("json", json.dumps(PERSON))
    g = server.grammar(*key)
    own = own_matcher(server, key)
    stops = set(server.backend.stop_token_ids)
    start = tok.encode('{"name": "', add_special_tokens=False)
    for t in start:
        g.accept_token(t)
        own.advance(t)
    (x,) = tok.encode("x", add_special_tokens=False)
    (quote,) = tok.encode('"', add_special_tokens=False)
    (brace,) = tok.encode("}", add_special_tokens=False)
    # node 0: the verified token (already taken); 1 -> 2 a chain ("x" then '"'); 3 a sibling of 1
    # that is legal ('"'); 4 a child of 3 that is illegal ("}": "age" is required)
    draft = torch.tensor([start[-1], x, quote, quote, brace])
    next_token = torch.tensor([1, 2, -1, 4, -1])
    next_sibling = torch.tensor([-1, 3, -1, -1, -1])
    mask = g.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=5, device="cpu")
    before = g.matcher.num_tokens
    traverse_tree(next_token, next_sibling, draft, g, mask, vocab_size=MODEL_VOCAB)
    assert g.matcher.num_tokens == before  # every draft rolled back
    rows = mask.numpy().view(np.uint32)
    paths = {0: [], 1: [x], 2: [x, quote], 3: [quote]}
    for node, path in paths.items():
        probe = own.fork()
        probe.advance_many(path)
        np.testing.assert_array_equal(rows[node], expected_row(probe, stops), err_msg=f"node {node}")
    assert (rows[4] == np.uint32(0xFFFFFFFF)).all()  # an illegal draft: its row is never filled


def test_masks_applied_to_logits(server: Server) -> None:
    """SGLang's GrammarMask (what the sampler calls) on CPU logits: -inf exactly where forbidden."""
    import torch
    from sglang.srt.constrained.base_grammar_backend import BaseGrammarObject, GrammarMask, GrammarRow

    grammars = [server.grammar("regex", REGEX), server.grammar("ebnf", GBNF), None]
    mask = grammars[0].allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=3, device="cpu")
    entries = [GrammarRow(row=i, grammar=g) for i, g in enumerate(grammars) if g is not None]
    BaseGrammarObject.fill_vocab_mask_batched(entries, mask)
    mask = grammars[0].move_vocab_mask(mask, "cpu")
    logits = torch.randn(3, MODEL_VOCAB)
    original = logits.clone()
    GrammarMask(grammars[0], mask).apply(logits)
    for i, g in enumerate(grammars):
        allowed = set(legal_ids(mask[i].numpy())) if g is not None else set(range(MODEL_VOCAB))
        for t in range(MODEL_VOCAB):
            assert (logits[i, t] == original[i, t]) if t in allowed else logits[i, t] == float("-inf")
    # the backend's static methods (what SGLang's reasoner wrapper calls) are the same
    logits2 = original.clone()
    server.backend.apply_vocab_mask(logits2, server.backend.move_vocab_mask(mask, "cpu"))
    assert torch.equal(logits, logits2)


def test_token_filter(server: Server) -> None:
    backend = server.backend
    assert backend.is_support_token_filter
    mask = backend.allocate_vocab_mask(MODEL_VOCAB, 2, "cpu")
    backend.set_token_filter(mask, [3, 70, 399], 1, is_allowed=True)
    assert legal_ids(mask[1].numpy()) == [3, 70, 399] and (mask[0] == -1).all()


@pytest.mark.parametrize(("key", "message"), [
    (("regex", "a(b"), "grammarmask"),
    (("json", '{"type": "object", "properties": 3}'), "grammarmask"),
    (("json", "{not json"), "grammarmask"),
    (("ebnf", "root ::= undefined_rule"), "undefined_rule"),
    (("ebnf", "start: undefined_rule"), "undefined_rule"),
    (("structural_tag", json.dumps({"type": "structural_tag", "format": {"type": "no_such_format"}})),
     "no_such_format"),
])
def test_a_bad_grammar_fails_that_request(server: Server, key: tuple[str, str], message: str) -> None:
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    g = server.grammar(*key)
    assert isinstance(g, InvalidGrammarObject), g
    assert message in g.error_message and g.error_message.startswith("grammarmask: ")
    assert isinstance(server.grammar(*key), InvalidGrammarObject)  # cached as SGLang caches it
    assert isinstance(server.grammar("regex", "[0-9]+"), gs.GrammarmaskGrammar)  # others go on


def test_budgets_and_the_time_limit_fail_one_request(model_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    monkeypatch.setenv(gs.LIMITS_ENV, '{"json_schema_enum_values": 10}')
    server = Server(model_dir)
    g = server.grammar("json", json.dumps({"enum": [f"v{i}" for i in range(50)]}))
    assert isinstance(g, InvalidGrammarObject)
    assert "json_schema_enum_values" in g.error_message and gs.LIMITS_ENV in g.error_message
    small = server.grammar("json", json.dumps({"enum": [f"v{i}" for i in range(5)]}))
    assert isinstance(small, gs.GrammarmaskGrammar)

    monkeypatch.delenv(gs.LIMITS_ENV)
    monkeypatch.setenv(gs.COMPILE_TIMEOUT_ENV, "0.05")
    server = Server(model_dir)
    release = threading.Event()
    compile_ = gm.JsonSchema.compile

    def slow_compile(self: gm.JsonSchema, *args: Any, **kwargs: Any) -> Any:
        release.wait(10)  # slower than the limit however fast the compile itself is
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(gm.JsonSchema, "compile", slow_compile)
    slow = {**PERSON, "properties": {**PERSON["properties"], "slow": {"type": "string"}}}
    g = server.grammar("json", json.dumps(slow))
    release.set()
    assert isinstance(g, InvalidGrammarObject)
    assert "longer than" in g.error_message and gs.COMPILE_TIMEOUT_ENV in g.error_message

    monkeypatch.setenv(gs.COMPILE_TIMEOUT_ENV, "soon")
    with pytest.raises(gm.GrammarError, match=gs.COMPILE_TIMEOUT_ENV):
        Server(model_dir)


def test_a_mask_time_error_fails_the_request_not_the_scheduler(server: Server) -> None:
    backend = server.backend
    compiled = gm.Lark('start: "a"+ "b"').compile(backend.vocab, limits=gm.Limits(cfg_walk_visits=0))
    g = gs.GrammarmaskGrammar(compiled, backend.stops, "lark")
    assert legal_ids(row_of(g)) == sorted(backend.stop_token_ids)  # stop tokens only
    assert isinstance(g.error, gm.BudgetExceeded)
    with pytest.raises(ValueError, match="stopped masking"):
        g.accept_token(server.tokenizer.eos_token_id)  # SGLang then aborts this request


def test_jump_forward_is_the_tokenizers_own_tokenization(server: Server) -> None:
    """The interface's jump-forward (SGLang 0.5.23's scheduler no longer calls it), driven as its
    scheduler did: the forced text is appended to the output's text and the whole output is
    retokenized by the tokenizer; the grammar follows that tokenization."""
    tok = server.tokenizer
    key = ("regex", r'\{"city": "[A-Za-z ]+"\}')
    g = server.grammar(*key)
    old = tok.encode("{", add_special_tokens=False)
    for t in old:
        g.accept_token(t)
    helper = g.try_jump_forward(tok)
    assert helper is not None
    text, state = g.jump_forward_str_state(helper)
    assert text == '"city": "'  # forced up to the city's name
    new = tok.encode(tok.decode(old) + text, add_special_tokens=False)
    assert new[0] != old[0], "the tokenizer should merge '{' with the forced text here"
    g.jump_and_retokenize(old, new, state)
    own = own_matcher(server, key)
    own.advance_many(new)
    assert g.matcher.num_tokens == len(new)
    np.testing.assert_array_equal(row_of(g), expected_row(own, set(server.backend.stop_token_ids)))
    assert g.try_jump_forward(tok) is None  # the city's name is a choice
    # a retokenization the grammar refuses raises and leaves the grammar where it was
    bad = tok.encode('{"town": "', add_special_tokens=False)
    with pytest.raises(ValueError):
        g.jump_and_retokenize(new, bad, state)
    assert g.matcher.num_tokens == len(new)


def test_structural_tag_tool_calls(server: Server) -> None:
    tok = server.tokenizer
    text = ('Let me check. <function=get_weather>{"city": "Paris"}</function> and '
            '<function=get_time>{"zone": "CET"}</function> done.')
    key = ("structural_tag", json.dumps(TOOLS))
    g = server.grammar(*key)
    own = own_matcher(server, key)
    stops = set(server.backend.stop_token_ids)
    for i, t in enumerate([*tok.encode(text, add_special_tokens=False), tok.eos_token_id]):
        row = row_of(g)
        np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"token {i}")
        assert t in legal_ids(row)
        g.accept_token(t)
        own.advance(own.vocab.eos_token_id if t in stops else t)
    assert g.is_terminated()
    g = server.grammar(*key)
    with pytest.raises(ValueError):  # a call's arguments follow its schema: "Paris" is no zone
        for t in tok.encode('<function=get_time>{"zone": "Paris"', add_special_tokens=False):
            g.accept_token(t)


def test_structural_tag_with_special_tokens(server: Server) -> None:
    tok = server.tokenizer
    begin, end = tok.convert_tokens_to_ids("<tool_call>"), tok.convert_tokens_to_ids("</tool_call>")
    spec = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "token", "token": "<tool_call>"},
        {"type": "json_schema", "json_schema": TIME},
        {"type": "token", "token": "</tool_call>"},
    ]}}
    g = server.grammar("structural_tag", json.dumps(spec))
    assert legal_ids(row_of(g)) == [begin]  # the marker, nothing else
    for t in [begin, *tok.encode('{"zone": "UTC"}', add_special_tokens=False), end]:
        g.accept_token(t)
    assert legal_ids(row_of(g)) == sorted(server.backend.stop_token_ids)
    g.accept_token(tok.eos_token_id)
    assert g.is_terminated()
