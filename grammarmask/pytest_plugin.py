"""Test your own grammar in three lines: ``check_grammar`` (a function and a pytest fixture) and
``grammar_test`` (a test factory pytest collects).

``check_grammar(grammar, valid=[...], invalid=[...])`` checks, against references you trust:

1. every ``valid`` text is a complete sentence, every ``invalid`` text is not, every ``prefixes``
   text is a viable prefix (fed byte by byte, no byte rejected);
2. soundness, both ways (:mod:`grammarmask.differential`): documents drawn from the grammar by
   derivation (:func:`grammarmask.strategies.from_grammar`), near misses of them, documents of a
   reference grammar and the caller's ``reference_documents`` are each accepted by the grammar iff
   ``reference`` accepts them (a callable that returns False or raises on a bad document, or a
   correct Grammar). By default the reference is picked from the backend: ``re.fullmatch`` for
   ``Regex``, ``lark.Lark(text).parse`` for ``Lark``, :func:`strict_json` + ``jsonschema`` for
   ``JsonSchema``, membership for single-label ``Choice``;
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
from typing import TYPE_CHECKING, Any

import pytest

from .errors import GrammarError, TokenRejected
from .grammar import Grammar
from .testing import assert_accepts, assert_mask_exact, assert_rejects, byte_vocabulary
from .vocab import Vocabulary

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

# hypothesis (and the strategies built on it) is imported when a check runs, so registering this
# plugin never breaks a pytest session that lacks hypothesis

__all__ = ["check_grammar", "default_reference", "grammar_test", "strict_json"]

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
        return lambda doc: jsonschema.validate(strict_json(doc), schema) is None
    if isinstance(grammar, Choice) and grammar.separator is None:
        labels = {("" if grammar.leading_space == "none" else " ") + lab for lab in grammar.labels}
        if grammar.leading_space == "optional":
            labels |= set(grammar.labels)
        return labels.__contains__
    return None


def strict_json(doc: str) -> Any:
    """``json.loads``, refusing a repeated key in an object (which ``json.loads`` lets the last one win,
    while JSON Schema grammars, like most JSON consumers, never produce one)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"repeated key {k!r}")
            out[k] = v
        return out

    return json.loads(doc, object_pairs_hook=pairs)


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
    reference: Reference | Grammar | None | str = "auto",
    reference_documents: Iterable[str] | SearchStrategy[str] | None = None,
    is_viable_prefix: Callable[[bytes], bool] | None = None,
    is_complete: Callable[[bytes], bool] | None = None,
    vocab: Vocabulary | None = None,
    examples: int = 100,
    max_size: int = 32,
    seed: int | None = None,
    both_ways: bool = True,
) -> None:
    """Check ``grammar`` against the given texts and a reference; fail with an ``AssertionError``
    naming the first problem, shrunk to a minimal document. See the module docstring.

    Parameters
    ----------
    reference
        What decides which documents are right: a callable (returns False or raises on a bad
        document), a :class:`~grammarmask.Grammar` (a correct grammar: its documents are generated
        too, and its default reference decides), ``"auto"`` (the backend's default reference,
        :func:`default_reference`) or None (no soundness check).
    reference_documents
        Documents from the reference's side, as a list or a hypothesis strategy: each one the
        reference accepts must be accepted by ``grammar``, each it rejects must be rejected.
    examples
        Hypothesis examples for the soundness and exactness checks. Each example draws one document
        from ``grammar``, two near misses of it (mutations), and, when given, one document from the
        reference grammar and one from ``reference_documents``.
    max_size
        The most bytes a drawn document has (raised to the grammar's shortest document when that
        is longer).
    seed
        Seed hypothesis for a reproducible run (None: hypothesis' own randomness).
    both_ways
        False when the reference is only a superset check (Python's parser for an arithmetic
        grammar): then only over-acceptance is reported.
    vocab
        The vocabulary for the exactness check (default: bytes plus a few multi-byte tokens built
        from the ``valid`` texts, so tokens straddle constructs).

    Raises
    ------
    AssertionError
        A text, document or near miss on which ``grammar`` and the reference disagree, saying which
        of them accepts it (over- or under-acceptance), or a mask that differs from the oracle.
    GrammarError
        ``grammar`` or ``reference`` has the wrong type.
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
    ref_grammar = reference if isinstance(reference, Grammar) else None
    if ref_grammar is not None:
        ref: Reference | None = default_reference(ref_grammar) or _accepted_by(ref_grammar)
    elif reference == "auto":
        ref = default_reference(grammar)
    elif reference is None or callable(reference):
        ref = reference
    else:
        raise GrammarError(f"reference must be a callable, a Grammar, None or 'auto', got {reference!r}")
    if ref is not None:
        from .differential import Differential

        diff = Differential(grammar, ref, ref_grammar, reference_documents, max_size, both_ways)
        diff.check_documents()
        diff.run(examples, seed)
    elif reference_documents is not None:
        raise GrammarError("reference_documents needs a reference to tell good documents from bad")
    if is_viable_prefix is not None:
        _check_exact(grammar, is_viable_prefix, is_complete, vocab, list(valid), examples)


def _accepted_by(grammar: Grammar) -> Reference:
    """A grammar's own compiled matcher as a reference (for backends with no external one)."""
    from .derivation import accepts
    from .strategies import byte_vocab

    compiled = grammar.compile(byte_vocab())
    return lambda doc: accepts(compiled, doc.encode())


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
