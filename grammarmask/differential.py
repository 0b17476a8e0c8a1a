"""A grammar against a reference, in both directions: the soundness part of ``check_grammar``.

One rule decides every document, wherever it comes from: ``grammar`` must accept it iff the reference
does. The documents are

1. drawn from ``grammar`` (:mod:`grammarmask.derivation`): a rejection by the reference is
   *over-acceptance* (the grammar lets a model write something wrong);
2. near misses of those (:func:`grammarmask.derivation.mutate`: a subtree cut, repeated or moved, a
   byte deleted, inserted or changed): they catch both directions, and under-acceptance (the grammar
   forbids something right) is how a ``+`` written for ``*`` or an off-by-one minimum shows;
3. drawn from a reference grammar, when the reference is one: what the correct grammar can say
   and the tested one cannot;
4. the caller's ``reference_documents`` (a list, or a hypothesis strategy).

Hypothesis shrinks a disagreement to a minimal document; the message names the direction, the
document, the reference's complaint and the example that first failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .derivation import Drawn, accepts, generator_for, mutate
from .grammar import Grammar
from .strategies import byte_vocab, from_grammar

__all__ = ["Differential"]

Reference = Callable[[str], Any]
_WS = re.compile(rb"[ \t\n\r]")
_MUTANTS = 3  # near misses per example
# no "explain" phase: it re-ran the shrunk example thousands of times to annotate lines
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)


def _has(grammar: Grammar, kind: type) -> bool:
    """Whether ``grammar`` is, or is composed of, a ``kind``."""
    return isinstance(grammar, kind) or any(_has(p, kind) for p in getattr(grammar, "parts", ()))


class Differential:
    """``grammar`` against ``ref`` (and ``ref_grammar``'s documents, and ``documents``)."""

    def __init__(
        self,
        grammar: Grammar,
        ref: Reference,
        ref_grammar: Grammar | None,
        documents: Iterable[str] | st.SearchStrategy[str] | None,
        max_size: int,
        both_ways: bool = True,
    ) -> None:
        self.both_ways = both_ways
        self.grammar = grammar
        self.ref = ref
        self.compiled = grammar.compile(byte_vocab())
        self.gen = generator_for(grammar)
        self.ref_gen = None if ref_grammar is None else generator_for(ref_grammar)
        self.ref_walk = None
        if ref_grammar is not None and self.ref_gen is None:
            self.ref_walk = from_grammar(ref_grammar, max_size=max_size)
        self.strategy = documents if isinstance(documents, st.SearchStrategy) else None
        self.listed = [] if documents is None or self.strategy is not None else list(documents)  # type: ignore[arg-type]
        self.max_size = max_size
        from .frontends.json_schema import JsonSchema

        self.ws_policy = _has(grammar, JsonSchema)
        self.examples_run = 0
        self.first_failure: int | None = None

    def verdict(self, doc: str) -> tuple[bool, str]:
        """Whether the reference accepts ``doc``, and its complaint when it does not."""
        try:
            ok = self.ref(doc)
        except Exception as e:  # the reference rejected it by raising
            return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return ok is not False, ""

    def compare(self, doc: str, origin: str, *, known: bool | None = None) -> None:
        """Fail unless ``grammar`` and the reference agree on ``doc``."""
        mine = accepts(self.compiled, doc.encode()) if known is None else known
        if not mine and not self.both_ways:
            return
        theirs, why = self.verdict(doc)
        if mine == theirs:
            return
        if self.first_failure is None:
            self.first_failure = self.examples_run
        if mine:
            raise AssertionError(
                f"over-acceptance: the grammar accepts {doc!r} ({origin}), which the reference rejects"
                + (f" ({why})" if why else ""))
        raise AssertionError(
            f"under-acceptance: the reference accepts {doc!r} ({origin}), which the grammar rejects")

    def check_documents(self) -> None:
        for doc in self.listed:
            self.compare(doc, "from reference_documents")

    def _drawn(self, data: Any) -> Drawn:
        if self.gen is not None:
            got = self.gen.draw(data.draw, self.max_size)
            assume(got is not None)
            assert got is not None
            return got
        return Drawn(data.draw(from_grammar(self.grammar, max_size=self.max_size), label="document").encode())

    def generated(self, data: Any) -> None:
        """One example: a document drawn from the grammar and its near misses."""
        self.examples_run += 1
        doc = self._drawn(data)
        self.compare(doc.data.decode(), "generated by the grammar", known=True)
        for _ in range(_MUTANTS):
            near = mutate(data.draw, doc)
            try:
                text = near.decode()
            except UnicodeDecodeError:
                continue
            if self.ws_policy and _WS.sub(b"", near) == _WS.sub(b"", doc.data):
                continue  # JSON Schema's whitespace is a policy (bounded runs), not the reference's
            self.compare(text, f"a near miss of the generated {doc.data.decode()!r}")

    def from_reference(self, data: Any) -> None:
        """One example: a document from the reference grammar, or from ``reference_documents``."""
        self.examples_run += 1
        own = self.ref_gen is not None or self.ref_walk is not None
        if self.strategy is not None and (not own or data.draw(st.booleans())):
            self.compare(data.draw(self.strategy), "from reference_documents")
        elif self.ref_gen is not None:
            got = self.ref_gen.draw(data.draw, self.max_size)
            assume(got is not None)
            assert got is not None
            text = got.data.decode()
            assume(self.verdict(text)[0])  # what the correct grammar's own reference refuses says nothing
            self.compare(text, "generated by the reference grammar")
        elif self.ref_walk is not None:
            self.compare(data.draw(self.ref_walk), "generated by the reference grammar")

    def run(self, examples: int, seed: int | None) -> None:
        """Both directions, one after the other (so each shrinks on its own), within ``examples`` each."""
        phases = [self.generated]
        if self.ref_gen is not None or self.ref_walk is not None or self.strategy is not None:
            phases.append(self.from_reference)
        for phase in phases:
            self.examples_run = 0
            self._run(phase, examples, seed)

    def _run(self, phase: Callable[[Any], None], examples: int, seed: int | None) -> None:
        @settings(max_examples=examples, deadline=None, database=None, report_multiple_bugs=False,
                  verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck),
                  phases=_PHASES)  # fmt: skip
        @given(st.data())
        def differential(data: Any) -> None:
            phase(data)

        test = differential if seed is None else hypothesis_seed(seed)(differential)
        try:
            test()
        except AssertionError as e:
            if self.first_failure is not None:
                note = (f"check_grammar: first disagreement in example {self.first_failure} of {examples} "
                        "(the document above is the shrunk one)")  # fmt: skip
                if hasattr(e, "add_note"):
                    e.add_note(note)
                else:  # Python 3.10: no add_note; the same attribute, and the note in the message too
                    setattr(e, "__notes__", [*getattr(e, "__notes__", []), note])  # noqa: B010
                    e.args = (f"{e.args[0] if e.args else ''}\n{note}", *e.args[1:])
            raise
