"""Every budget and cache bound of the engines, in one documented place, settable per compile.

``grammar.compile(vocab, limits=gm.Limits(cfg_mask_bytes=64 << 20))`` compiles with these limits;
without ``limits`` the defaults below apply. Engines read them when they are built, so a compiled
grammar keeps the limits it was compiled with. The caches shared by every grammar of one vocabulary
(``*_per_vocabulary``, ``shared_*``) are sized by the first compile against that vocabulary.

The walk-strategy fields choose how a mask is computed, never which tokens it holds: every setting
gives the same masks (the tests run the engine at extreme settings and compare).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MAX_JSON_SCHEMA_DEPTH", "Limits", "active", "in_force"]

MAX_JSON_SCHEMA_DEPTH = 1000


@dataclass(frozen=True)
class Limits:
    """Budgets and cache bounds (defaults in parentheses; each says what it protects)."""

    # ---- caches kept per vocabulary ----------------------------------------------------------------
    #: compiled grammars kept per vocabulary, for compiles of equal grammars (32; each holds mask
    #: caches of up to ~80 MB) and the bytes of the tables they hold when compiled (128 MiB: a JSON
    #: string of ``maxLength: n`` is about 17 KB x n in its DFA, and up to as much in the engine's;
    #: the newest is kept even if it alone is over)
    compiled_per_vocabulary: int = 32
    compiled_bytes_per_vocabulary: int = 128 << 20
    #: token tries compressed by byte class, kept per vocabulary (8; a few MB each on 131k tokens)
    class_tries_per_vocabulary: int = 8
    #: what CFG lexer states allow by themselves, walked on the byte trie and shared by the native
    #: engine's grammars of a vocabulary (128; a mask row and a key each, 10 MB at most on 131k
    #: tokens): every JSON Schema's strings are walked once; and an eighth as many loop sets'
    #: runs on the tries (names' letters, strings' characters: 16, up to 1.1 MB each on tekken)
    shared_lexer_walks: int = 128

    # ---- the cache kept per process -------------------------------------------------------------------
    #: terminal automata (byte DFAs of patterns, literals, bounded strings, key sets, intersections)
    #: kept for equal terminals of later grammars, in one cache per process sized by the first
    #: compile (4096) and by their tables' bytes (32 MiB: a table is 1 KB a state, 256 KB or more kept
    #: by byte class: a JSON string of ``maxLength: 256`` weighs 0.45 MB of its 5.2; the newest is
    #: kept even if it alone is over)
    shared_automata: int = 4096
    shared_automata_bytes: int = 32 << 20

    # ---- the regular engine (token index of a DFA) ---------------------------------------------------
    #: masks kept per compiled regular grammar (512; 16 KB each on 131k tokens)
    index_masks: int = 512
    #: DFAs with up to this many states are indexed whole when compiled (16384)
    index_eager_states: int = 16384
    #: (state, trie node) pairs one batched index walk may visit (3,000,000: memory of one walk)
    index_pair_budget: int = 3_000_000
    #: a state with more than vocabulary size / this legal tokens is "broad" and stored as a
    #: complement (32)
    index_narrow_fraction: int = 32
    #: broad states x class nodes walked unpruned when compiled (8,000,000: compile time)
    index_dense_budget: int = 8_000_000
    #: (word index, word) entries kept for eagerly indexed states (4,000,000: memory)
    index_sparse_budget: int = 4_000_000

    # ---- the context-free engine ---------------------------------------------------------------------
    #: root frontiers kept per compiled grammar, by lexer shadow set (4096)
    cfg_root_frontiers: int = 4096
    #: masks kept per compiled grammar (2048) and their bytes (16 MiB: a 131k-token row is 16 KB);
    #: the native engine keeps as many of what lexer states allow by themselves (a row each), and
    #: its mask walks by their questions to the parser, 2 KB per mask (4 MiB), for states alike
    cfg_masks: int = 2048
    cfg_mask_bytes: int = 16 << 20
    #: ways of cutting the output into lexemes one matcher state may keep open (4,096; real grammars
    #: keep a handful, scannerless terminals that split one text many ways double it per byte)
    cfg_configs: int = 4096
    #: parser states one mask may visit below the lexer walks (10,000: about 2 s at worst)
    cfg_walk_visits: int = 10_000
    #: walk results kept per compiled grammar (65536) and their bytes (64 MiB)
    cfg_parts: int = 65536
    cfg_parts_bytes: int = 64 << 20
    #: Earley signatures interned per compiled grammar (200,000; past it the native engine forgets
    #: the oldest, the Python engine starts its table again)
    earley_signatures: int = 200_000
    #: Earley sets held after they are built, for speculative sets asked again soon (256)
    earley_recent: int = 256
    #: items one Earley set may consider while it is built (100,000: about 0.1 s of Python). Sets
    #: of real grammars hold hundreds; a highly ambiguous grammar (``s: s s | "a"``) needs about
    #: n**2 / 2 after n lexemes, and over the budget ``mask``/``advance`` raise BudgetExceeded
    earley_items_per_set: int = 100_000
    #: root walks shared by every grammar of a vocabulary: their bytes (128 MiB)
    shared_walk_bytes: int = 128 << 20
    #: dense root walkers shared per vocabulary (16; a few MB each)
    shared_walkers: int = 16
    #: terminals remembered per vocabulary as needing no dense walker (65536; a digest each)
    shared_narrow_terminals: int = 1 << 16

    # ---- front ends: JSON Schema (each raises gm.BudgetExceeded naming the field, unless noted) -------
    #: nesting depth of a schema: the JSON nesting of the schema document, and the chain of
    #: subschemas and $refs the compiler follows from the root (128; real schemas stay under 40).
    #: Protects the Python stack: the compiler recurses on it, with room made for this depth
    #: (at most 1,000)
    json_schema_depth: int = 128
    #: states of one array's or object's counting machine (minItems/maxItems with prefixItems or
    #: contains, minProperties/maxProperties, dependentRequired; 20,000: compile time and rules).
    #: Large counts over uniform items are counted in O(log n) rules and never meet this budget
    json_schema_counting_states: int = 20_000
    #: combined anyOf/oneOf branches of one node (64: the product of the groups' sizes; over it
    #: the keyword is refused with UnsupportedSchemaError, as it has no compact exact form)
    json_schema_branches: int = 64
    #: states of a product automaton intersecting string constraints (pattern, format, length,
    #: key sets; 20,000; over it the constraint is refused with UnsupportedSchemaError)
    json_schema_product_states: int = 20_000
    #: property_order="any": tracked keys (10; 2^k states) and states of an object's machine (4096);
    #: over them the object is refused with UnsupportedSchemaError (strict) or kept in declared order
    json_schema_any_order_keys: int = 10
    json_schema_any_order_states: int = 4096
    #: values of one enum (1,000,000; each is validated against its node and stored in a trie)
    json_schema_enum_values: int = 1_000_000

    # ---- front ends: regular expressions -------------------------------------------------------------
    #: group nesting depth of a regex (200; Python's own parser recurses on it)
    regex_depth: int = 200
    #: NFA states in the DFA states the subset construction builds, summed (2,000,000: about
    #: 6 s and 250 MB at worst; ``"a?" * 4000`` needs 24,000,000, ordinary patterns well under
    #: 100,000)
    regex_subset_work: int = 2_000_000

    # ---- front ends: Lark and GBNF ----------------------------------------------------------------------
    #: group nesting of a Lark or GBNF rule ((...), [...]; 100: lark's loader, the GBNF parser and
    #: the IR lowering recurse on it; real grammars nest a handful deep). Read when the grammar is
    #: constructed: raise it around the constructor with ``with limits.in_force(Limits(...))``
    grammar_nesting: int = 100

    # ---- walk strategy of the context-free engine (masks are the same at every setting) -------------
    #: frontiers with fewer rows continue in plain Python (12)
    walk_small_rows: int = 12
    #: a frontier with fewer rows is never walked densely (32)
    walk_small_frontier: int = 32
    #: a lexeme starting at a frontier over more tokens than this is walked densely (8192) ...
    walk_broad_below: int = 8192
    #: ... if the frontier's rows hang from at most this many nodes (4)
    walk_below_parents: int = 4
    #: a lexeme state whose first bytes start more tokens than this walks densely (8192)
    walk_broad_tokens: int = 8192
    #: DFAs with more byte classes than this walk the byte trie, not a class trie (12)
    walk_max_classes: int = 12
    #: full root walks kept per walker to edit into the walks of nearby states (2)
    walk_bases: int = 2
    #: an edit visiting more than 1/this of the trie's nodes gives way to a full walk (8)
    walk_diff_share: int = 8
    #: class-reduced tables bigger than this get one walk class per state (4,194,304 cells)
    walk_refine_cells: int = 1 << 22
    #: a walk result with more distinct parts than this is stored as their union (3)
    walk_collapse: int = 3
    #: parser look-ups deeper than this are memoised by the full signature (8)
    walk_need_max: int = 8

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if type(v) is not int:
                raise TypeError(f"Limits.{f.name} must be an int, got {type(v).__name__} {v!r:.40}")
            if v < (-1 if f.name.startswith("walk_") else 0):  # -1: a walk threshold every state passes
                raise ValueError(f"Limits.{f.name} must be >= 0, got {v}")
        if self.json_schema_depth > MAX_JSON_SCHEMA_DEPTH:  # the stack room made for it must fit
            raise ValueError(
                f"Limits.json_schema_depth must be <= {MAX_JSON_SCHEMA_DEPTH}, got {self.json_schema_depth}"
            )

    def __repr__(self) -> str:
        # the dataclass's own text, made once: the disk cache's keys hold the limits in force, and
        # each compile wrote them out about six times, 7 us each
        text = self.__dict__.get("_repr")
        if text is None:
            inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
            text = f"{type(self).__qualname__}({inner})"
            object.__setattr__(self, "_repr", text)
        return text


_DEFAULT = Limits()
_ACTIVE: contextvars.ContextVar[Limits] = contextvars.ContextVar("grammarmask_limits")


def active() -> Limits:
    """The limits of the compile in progress (the defaults outside one)."""
    return _ACTIVE.get(_DEFAULT)


def in_a_compile() -> bool:
    """Whether limits were put in force (by ``compile()`` or an :func:`in_force` block): a budget
    error then tells how to raise it there, else around the grammar's constructor."""
    return _ACTIVE.get(None) is not None


@contextlib.contextmanager
def in_force(limits: Limits | None) -> Iterator[Limits]:
    """Make ``limits`` (None: the defaults) what :func:`active` returns inside the block."""
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a grammarmask.Limits, got {type(limits).__name__}")
    token = _ACTIVE.set(limits if limits is not None else _DEFAULT)
    try:
        yield active()
    finally:
        _ACTIVE.reset(token)
