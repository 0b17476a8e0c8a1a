"""The GBNF front end: llama.cpp syntax, scannerless semantics, errors with line and column.

Exactness: for regular GBNF grammars the reference is an independently written regex checked with
the ``regex`` package's partial matching; for a recursive one, an equivalent lark grammar with
single-character terminals (lark's Earley parser is scannerless on those).
"""

from __future__ import annotations

import glob
import itertools
import os

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.errors import GrammarError
from grammarmask.frontends.gbnf import Gbnf
from grammarmask.limits import Limits
from grammarmask.mask import Mask
from grammarmask.testing import assert_accepts, assert_rejects, byte_vocabulary, reference_mask
from grammarmask.vocab import Vocabulary
from tests.support import CORPUS as SHARED_CORPUS

from .support_oracles import LarkOracle

# name: (gbnf, oracle regex over bytes, alphabet)
REGULAR = {
    "not_greedy": ('root ::= "a"* "a" "b"?', rb"a*ab?", "ab"),
    "bounded_repeats": (
        'root ::= [0-9]{1,3} ("." [0-9]{1,3}){2}', rb"[0-9]{1,3}(\.[0-9]{1,3}){2}", "1.2",
    ),
    "nullable_rules": (
        "root ::= ws word (ws word)* ws\nws ::= [ ]*\nword ::= [a-c]+", rb" *[a-c]+( *[a-c]+)* *", "ab ",
    ),
    "alternation_groups": ('root ::= ("x" | "xy") ("yz" | "z")+ | "q"', rb"(x|xy)(yz|z)+|q", "xyzq"),
    "negated_class": ('root ::= "<" [^<>]* ">"', rb"<[^<>]*>", "<a>"),
    "counted_open_end": ('root ::= "a"{2,} "b"{,2}', rb"a{2,}b{0,2}", "ab"),
}


def _regex_vocab(alpha: str) -> Vocabulary:
    toks = [b""] + ["".join(p).encode() for n in (1, 2, 3) for p in itertools.product(alpha, repeat=n)]
    return Vocabulary.from_tokens(toks, eos_token_id=0)


def _walk_against_regex(name: str, data: st.DataObject, limits: Limits | None = None) -> None:
    """Six random steps through ``REGULAR[name]``, each mask equal to the regex oracle's."""
    text, pattern, alpha = REGULAR[name]
    rx = regex.compile(pattern)
    vocab = _regex_vocab(alpha)
    m = Gbnf(text).compile(vocab, limits=limits).matcher()

    def viable(b: bytes) -> bool:
        return rx.fullmatch(b, partial=True) is not None

    def complete(b: bytes) -> bool:
        return rx.fullmatch(b) is not None

    out = b""
    for _ in range(6):
        want = reference_mask(viable, vocab, out, is_complete=complete)
        assert m.mask() == want, (name, out)
        legal = [t for t in want.token_ids().tolist() if t != 0]
        if not legal:
            break
        t = data.draw(st.sampled_from(legal))
        m.advance(t)
        out += vocab.token_bytes[t]


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(REGULAR)), data=st.data())
def test_regular_gbnf_masks_match_a_regex_oracle(name: str, data: st.DataObject) -> None:
    _walk_against_regex(name, data)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(REGULAR)), by_class=st.booleans(), edits=st.booleans(), data=st.data())
def test_non_greedy_terminals_in_dense_root_walks(name: str, by_class: bool, edits: bool,
                                                  data: st.DataObject) -> None:
    # GBNF terminals are non-greedy (no shadows); make every lexeme state "broad" so that the dense
    # root walk (on a class trie or on the byte trie, in full or as an edit of an earlier full walk)
    # computes them, and compare with the oracle.
    limits = Limits(
        walk_broad_tokens=-1, walk_broad_below=-1, walk_small_frontier=0,
        walk_max_classes=256 if by_class else 0, walk_diff_share=1 if edits else 8,
        walk_bases=2 if edits else 0,
    )  # fmt: skip
    _walk_against_regex(name, data, limits)


def test_recursive_gbnf_matches_lark_on_every_short_prefix() -> None:
    g = Gbnf('root ::= "(" ws root ws ")" | "x"\nws ::= " "?')
    oracle = LarkOracle('start: "(" ws start ws ")" | "x"\nws: " "?\n', "(x) ", 7)
    toks = [b""] + ["".join(p).encode() for n in (1, 2) for p in itertools.product("(x) ", repeat=n)]
    vocab = Vocabulary.from_tokens(toks, eos_token_id=0)
    c = g.compile(vocab)
    for n in range(2):
        for p in itertools.product("(x) ", repeat=n):
            prefix = "".join(p).encode()
            state = c.feed(c.initial_state(), prefix)
            assert bool(state) == oracle.viable(prefix)
            if not state:
                continue
            got = Mask(c.state_mask_words(state).copy(), vocab.size)
            if c.is_accepting_state(state):
                got = got | Mask.from_token_ids([0], vocab.size)
            assert got == reference_mask(oracle.viable, vocab, prefix, is_complete=oracle.complete), prefix


SYNTAX = {
    "comments_and_newlines": (
        '# c\nroot ::= a |\n  b # tail\na ::= "a"\nb ::= (\n "b"\n "c"\n)\n', ["a", "bc"], ["b"],
    ),
    "escapes": (
        'root ::= "\\x41\\u00e9\\t\\n\\\\\\"" [\\]\\[]', ['A\u00e9\t\n\\"]', 'A\u00e9\t\n\\"['], ["A"],
    ),
    "unicode_ranges": (
        'root ::= [\u3041-\u309f]+ "\U0001f600"?', ["\u3042\u3044", "\u3042\U0001f600"], ["a"],
    ),
    "any_char": ('root ::= "<" . ">"', ["<a>", "<\u00e9>", "<\n>"], ["<>", "<ab>"]),
    "forward_reference": ("root ::= later later\nlater ::= [xy]", ["xy"], ["x"]),
    "empty_alternative": ('root ::= "a" opt\nopt ::= | "b"', ["a", "ab"], ["b"]),
}


@pytest.mark.parametrize("name", sorted(SYNTAX))
def test_syntax(name: str) -> None:
    text, good, bad = SYNTAX[name]
    g = Gbnf(text)
    vocab = byte_vocabulary()
    for s in good:
        assert_accepts(g, s, vocab)
    for s in bad:
        assert_rejects(g, s, vocab)


ERRORS = {
    "missing_assign": ('root "a"\n', "::=", 1, 6),
    "undefined_rule": ('root ::= "a" thing\n', "undefined rule 'thing'", 1, 14),
    "no_root": ('start ::= "a"\n', "root", 1, 1),
    "unterminated_string": ('root ::= "abc\n', "unterminated string", 1, 10),
    "unterminated_class": ("root ::= [abc\n", "unterminated character class", 1, 10),
    "unclosed_group": ('root ::= ( "a"\n', "')'", 1, 10),
    "bad_escape": ('root ::= "\\q"\n', "unknown escape", 1, 11),
    "bad_repetition": ('root ::= "a"{3,1}\n', "maximum", 1, 13),
    "nothing_to_repeat": ('root ::= "" *\n', "nothing to repeat", 1, 13),
    "duplicate_rule": ('root ::= "a"\nroot ::= "b"\n', "defined twice", 2, 1),
    "unproductive": ('root ::= "a" root\n', "unproductive", 1, 1),
    "second_line_error": ('root ::= x\nx ::= "a" )\n', "unexpected ')'", 2, 11),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_say_where(name: str) -> None:
    text, needle, line, col = ERRORS[name]
    with pytest.raises(GrammarError) as info:
        Gbnf(text)
    assert needle in str(info.value)
    assert (info.value.line, info.value.column) == (line, col)


def test_every_corpus_gbnf_compiles() -> None:
    vocab = byte_vocabulary()
    files = sorted(glob.glob(f"{SHARED_CORPUS}/gbnf/*/*.gbnf"))
    assert len(files) >= 9
    for path in files:
        c = Gbnf.from_file(path).compile(vocab)
        assert c.state_mask_words(c.initial_state()).any(), os.path.basename(path)


CORPUS_EXAMPLES = {
    "json.gbnf": ['{"a": [1, 2.5e3, {"b": null}], "c": "x\\ny"}', "{}"],
    "json_arr.gbnf": ['[\n{"a": 1},\n{"b": [true, false]}]', "[\n]"],
    "arithmetic.gbnf": ["x1 = 1\n", "a+b*(c-1) = (d)\ne=f\n"],
    "list.gbnf": ["- one\n- two\n"],
    "chess.gbnf": ["1. e4 e5\n2. Nf3 Nc6\n"],
}


@pytest.mark.parametrize("name", sorted(CORPUS_EXAMPLES))
def test_corpus_gbnf_examples(name: str) -> None:
    g = Gbnf.from_file(f"{SHARED_CORPUS}/gbnf/llama.cpp/{name}")
    for s in CORPUS_EXAMPLES[name]:
        assert_accepts(g, s)


def test_groups_nested_past_the_limit_are_refused_where_they_start() -> None:
    limit = gm.Limits().grammar_nesting

    assert_accepts(Gbnf("root ::= " + "(" * limit + '"a"' + ")" * limit), "a")
    for depth in (limit + 1, 500, 5000):
        with pytest.raises(gm.BudgetExceeded, match="groups nested too deep") as e:
            Gbnf("root ::= " + "(" * depth + '"a"' + ")" * depth)
        assert (e.value.budget, e.value.value) == ("grammar_nesting", limit)
        assert e.value.where == f"line 1, column {10 + limit}"
        assert "limits.in_force(" in str(e.value)  # read at construction: raised around the constructor
    from grammarmask.limits import in_force

    with in_force(gm.Limits(grammar_nesting=limit + 1)):
        assert_accepts(Gbnf("root ::= " + "(" * (limit + 1) + '"a"' + ")" * (limit + 1)), "a")


def test_the_first_undefined_reference_in_the_text_is_reported() -> None:
    with pytest.raises(GrammarError, match="undefined rule 'b'") as e:
        Gbnf('root ::= a b\na ::= "x" c\n')
    assert (e.value.line, e.value.column) == (1, 12)
