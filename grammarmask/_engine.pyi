"""Type stubs of the native engine (the Rust crate at the repository root, built by maturin)."""

from collections.abc import Callable
from typing import Any

__version__: str

class Vocabulary:
    """The token bytes of a vocabulary, shared by every grammar compiled against it."""

    def __init__(
        self, data: bytes, lengths: bytes, specials: list[int], size: int, tries: int = 8,
        shared_walks: int = 128,
    ) -> None: ...
    @property
    def size(self) -> int: ...
    @property
    def n_words(self) -> int: ...
    def clear_tries(self) -> None: ...
    def clear_shared(self) -> None: ...  # stores the CFG grammars share and class tries (benchmarks)
    @property
    def tries_cached(self) -> int: ...  # class tries in the LRU (the byte trie is kept apart)
    @property
    def byte_trie_nodes(self) -> int: ...  # builds the byte trie if it is not yet
    @property
    def slice_tokens(self) -> int: ...  # builds the string-body slice if it is not yet
    def has_slice(self, excluded: bytes) -> bool: ...  # the slice of a body without these ASCII bytes is made
    @property
    def shelf(self) -> tuple[int, int]: ...  # CFG lexer states shared by grammars: (held, served)

class RegularIndex:
    """Legal tokens and next states of a byte DFA (int32 table, dead state 0; 256 columns, or one per
    byte class when ``classes`` maps each byte to its column)."""

    def __init__(
        self,
        vocab: Vocabulary,
        transitions: bytes,
        accepting: bytes,
        start: int,
        cache_masks: int,
        wrap: Callable[[bytes], Any] | None = None,
        classes: bytes | None = None,
    ) -> None: ...
    def mask(self, state: int) -> Any: ...
    def next_state(self, state: int, token: int) -> int: ...
    def is_accepting(self, state: int) -> bool: ...
    def forced_bytes(self, state: int) -> bytes: ...
    @property
    def start(self) -> int: ...
    @property
    def n_states(self) -> int: ...
    @property
    def n_classes(self) -> int: ...
    @property
    def n_trie_nodes(self) -> int: ...
    @property
    def table_words(self) -> int: ...
    @property
    def masks_cached(self) -> int: ...

class CfgState:
    """A state of a native CFG: an immutable, hashable value; falsy when the output left the language."""

    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __hash__(self) -> int: ...
    @property
    def key(self) -> list[tuple[int, int, bool]]: ...

class CfgGrammar:
    """A context-free grammar (combined lexer table and flat rules) bound to a native vocabulary."""

    def __init__(
        self,
        vocab: Vocabulary,
        transitions: bytes,
        accepting: bytes,
        term_of: bytes,
        starts: list[int],
        greedy: list[bool],
        ignore: list[bool],
        rule_lhs: list[int],
        rule_ptr: list[int],
        rule_rhs: list[int],
        start: int,
        n_nonterminals: int,
        limits: tuple[int, int, int, int, int, int],
        wrap: Callable[[bytes], Any] | None = None,
        class_trie_max: int = 32,
        classes: bytes | None = None,
    ) -> None: ...
    def initial(self) -> CfgState: ...
    def advance(self, state: CfgState, token: int) -> CfgState | None: ...
    def feed(self, state: CfgState, data: bytes) -> CfgState: ...
    def is_accepting(self, state: CfgState) -> bool: ...
    def mask(self, state: CfgState) -> Any: ...
    def row(self, state: CfgState) -> tuple[Any, bool, bool]: ...
    def fill(self, state: CfgState, words: Any, row: Any, eos: int) -> bool | None: ...
    def set_completion_costs(self, terminal: list[int], nonterminal: list[int]) -> None: ...
    def configurations(self, state: CfgState) -> list[tuple[bool, list[int]]]: ...
    def completion(self, state: CfgState, i: int, terminal: int) -> tuple[int, list[int]] | None: ...
    @property
    def masks_cached(self) -> int: ...
    @property
    def masks_replayed(self) -> tuple[int, int]: ...
    @property
    def mask_bytes(self) -> tuple[int, int]: ...
    @property
    def lexer_states(self) -> int: ...
    @property
    def n_classes(self) -> int: ...
    @property
    def n_trie_nodes(self) -> int: ...
    @property
    def table_words(self) -> int: ...
    @property
    def table_bytes(self) -> int: ...

class RowJob:
    """Rows of a batch whose grammars are native CFGs, filled without the GIL by every thread that
    calls ``run`` and by the owner's ``finish`` (see ``grammarmask.batch``)."""

    def __init__(
        self,
        grammars: list[CfgGrammar],
        states: list[CfgState],
        rows: list[int],
        eos: list[int],
        address: int,
        n_rows: int,
        n_words: int,
    ) -> None: ...
    @property
    def pending(self) -> int: ...
    def run(self) -> None: ...
    def finish(self) -> list[int]: ...

# The compile-time automata kernels (src/python/automata.rs). A DFA crosses as (transitions: int32
# n x 256 native order, accepting: one byte per state, start); results add the byte classes (256
# bytes), their number and the transitions read by class (int32 n x classes).
DfaParts = tuple[bytes, bytes, int, bytes, int, bytes]

def dfa_minimize(transitions: bytes, accepting: bytes, start: int) -> DfaParts: ...
def dfa_product(
    a_transitions: bytes,
    a_accepting: bytes,
    a_start: int,
    b_transitions: bytes,
    b_accepting: bytes,
    b_start: int,
    op: str,
    limit: int,
) -> DfaParts: ...
def dfa_from_strings(data: bytes, lengths: bytes) -> DfaParts: ...
def dfa_chain(data: bytes, lengths: bytes, counts: bytes) -> DfaParts: ...
def dfa_classes(transitions: bytes) -> tuple[bytes, int]: ...
def dfa_determinize(
    eps_ptr: bytes,
    eps: bytes,
    edge_ptr: bytes,
    edges: bytes,
    assert_ptr: bytes,
    asserts: bytes,
    start: int,
    final_state: int,
    max_states: int,
    max_work: int,
) -> tuple[bool, DfaParts | str]: ...
def dfa_compose(
    program: bytes,
    pieces: list[tuple[bytes, bytes, int]],
    max_nfa: int,
    max_states: int,
    max_work: int,
) -> tuple[bool, DfaParts | str]: ...
def lexer_tables(
    terminals: list[tuple[bytes, int, bytes, bytes, int]],
) -> tuple[bytes, bytes, bytes, bytes, list[int]]: ...
def lark_tokens(text: str) -> list[tuple[int, int, int, int, int, int, int]] | None: ...
