"""Test your own grammar in three lines: ``check_grammar`` (a function and a pytest fixture) and
``grammar_test`` (a test factory pytest collects).

``check_grammar(grammar, valid=[...], invalid=[...])`` checks, against references you trust:

1. every ``valid`` text is a complete sentence, every ``invalid`` text is not, every ``prefixes``
   text is a viable prefix (fed byte by byte, no byte rejected);
2. soundness: documents drawn with :func:`grammarmask.strategies.from_grammar` satisfy ``reference``
   (a callable that returns False or raises on a bad document). By default the reference is picked
   from the backend: ``re.fullmatch`` for ``Regex``, ``lark.Lark(text).parse`` for ``Lark``,
   ``json.loads`` + ``jsonschema`` for ``JsonSchema``, membership for single-label ``Choice``;
3. exactness (when ``is_viable_prefix`` is given): the mask equals the brute-force oracle
   (:func:`grammarmask.testing.reference_mask`) at every step of random token paths.

Example (a test module of your own)::

    import grammarmask as gm
    from grammarmask.pytest_plugin import grammar_test

    test_greeting = grammar_test(gm.Lark('start: "hello " NAME\\nNAME: /[a-z]+/'),
                                 valid=["hello bob"], invalid=["hello", "hello Bob"])

Registered as a pytest plugin (entry point ``grammarmask = "grammarmask.pytest_plugin"``), the
``check_grammar`` fixture is available in every test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from .errors import GrammarError, TokenRejected
from .grammar import Grammar
from .testing import assert_accepts, assert_mask_exact, assert_rejects, byte_vocabulary
from .vocab import Vocabulary

# hypothesis (and the strategies built on it) is imported when a check runs, so registering this
# plugin never breaks a pytest session that lacks hypothesis

__all__ = ["check_grammar", "default_reference", "grammar_test"]

Reference = Callable[[str], Any]


def default_reference(grammar: Grammar) -> Reference | None:
    """The external reference for a backend's documents (None when there is none to trust)."""
    from .frontends.choice import Choice
    from .frontends.json_schema import JsonSchema
    from .frontends.lark import Lark
    from .frontends.regex import Regex

    if isinstance(grammar, Regex):
        rx = re.compile(grammar.pattern, grammar.flags)
        return lambda doc: rx.fullmatch(doc) is not None
    if isinstance(grammar, Lark):
        import lark

        parser = lark.Lark(grammar.text, start=grammar.start, import_paths=list(grammar.import_paths))
        return parser.parse
    if isinstance(grammar, JsonSchema):
        import jsonschema

        schema = grammar.schema
        return lambda doc: jsonschema.validate(json.loads(doc), schema) is None
    if isinstance(grammar, Choice) and grammar.separator is None:
        labels = {("" if grammar.leading_space == "none" else " ") + lab for lab in grammar.labels}
        if grammar.leading_space == "optional":
            labels |= set(grammar.labels)
        return labels.__contains__
    return None


def _is_prefix(grammar: Grammar, text: str) -> bool:
    from .strategies import byte_vocab

    m = grammar.compile(byte_vocab()).matcher()
    try:
        for b in text.encode():
            m.advance(b + 1)
    except TokenRejected:
        return False
    return True


def check_grammar(
    grammar: Grammar,
    *,
    valid: Iterable[str] = (),
    invalid: Iterable[str] = (),
    prefixes: Iterable[str] = (),
    reference: Reference | None | str = "auto",
    is_viable_prefix: Callable[[bytes], bool] | None = None,
    is_complete: Callable[[bytes], bool] | None = None,
    vocab: Vocabulary | None = None,
    examples: int = 50,
    max_size: int = 32,
) -> None:
    """Check ``grammar`` against the given texts and references; fail with an ``AssertionError``
    naming the first problem. See the module docstring for what is checked.

    ``vocab`` is the vocabulary for the exactness check (default: bytes plus a few multi-byte
    tokens built from the ``valid`` texts, so tokens straddle constructs).
    """
    if not isinstance(grammar, Grammar):
        raise GrammarError(f"check_grammar needs a grammarmask Grammar, got {type(grammar).__name__}")
    from .strategies import byte_vocab

    for text in valid:
        assert_accepts(grammar, text, byte_vocab())
    for text in invalid:
        assert_rejects(grammar, text, byte_vocab())
    for text in prefixes:
        if not _is_prefix(grammar, text):
            raise AssertionError(f"{text!r} should be a viable prefix but a byte of it was rejected")
    ref = default_reference(grammar) if reference == "auto" else reference
    if isinstance(ref, str):
        raise GrammarError(f"reference must be a callable, None or 'auto', got {ref!r}")
    if ref is not None:
        _check_sound(grammar, ref, examples, max_size)
    if is_viable_prefix is not None:
        _check_exact(grammar, is_viable_prefix, is_complete, vocab, list(valid), examples)


def _check_sound(grammar: Grammar, ref: Reference, examples: int, max_size: int) -> None:
    from hypothesis import HealthCheck, given, settings

    from .strategies import from_grammar

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])  # fmt: skip
    @given(from_grammar(grammar, max_size=max_size))
    def sound(doc: str) -> None:
        try:
            ok = ref(doc)
        except Exception as e:  # the reference rejected it by raising
            raise AssertionError(f"generated {doc!r}, which the reference rejects: {e}") from None
        if ok is False:
            raise AssertionError(f"generated {doc!r}, which the reference rejects")

    sound()


def _check_exact(
    grammar: Grammar,
    viable: Callable[[bytes], bool],
    complete: Callable[[bytes], bool] | None,
    vocab: Vocabulary | None,
    valid: list[str],
    examples: int,
) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from .strategies import token_paths

    if vocab is None:
        extra = {
            t.encode()[i : i + n] for t in valid for n in (2, 3) for i in range(0, len(t.encode()) - n + 1)
        }
        vocab = byte_vocabulary(sorted(extra)[:200])
    compiled = grammar.compile(vocab)
    done = complete if complete is not None else (lambda _: False)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(st.data())
    def exact(data: Any) -> None:
        path = data.draw(token_paths(compiled, max_tokens=12, allow_eos=False))
        if complete is None:
            m = compiled.matcher()
            m.advance_many(path)
            # without is_complete only the non-EOS part of the mask is compared
            got, out = m.mask(), vocab.decode(path)
            from .testing import reference_mask

            want = reference_mask(viable, vocab, out)
            eos = vocab.eos_token_id
            if {int(t) for t in got.token_ids()} - {eos} != {int(t) for t in want.token_ids()}:
                raise AssertionError(f"mask differs from the oracle after {out!r}")
        else:
            assert_mask_exact(compiled, path, viable, done)

    exact()


@pytest.fixture(name="check_grammar")
def check_grammar_fixture() -> Callable[..., None]:
    """The :func:`check_grammar` function, as a fixture."""
    return check_grammar


def grammar_test(grammar: Grammar, **kwargs: Any) -> Callable[[], None]:
    """A test function running :func:`check_grammar` (assign it to a ``test_*`` name)."""

    def test() -> None:
        check_grammar(grammar, **kwargs)

    test.__doc__ = f"check_grammar({grammar!r})"
    return test
