"""Vocabulary: what each token id contributes to the decoded text, as bytes.

A :class:`Vocabulary` is the only thing grammarmask needs from a tokenizer: token id -> exact bytes,
the EOS id, the other special ids (never legal unless a grammar names them), and the model's vocabulary
size (which may exceed the tokenizer's; padding ids are never legal). Loaders for tokenizer families
live in :mod:`grammarmask.loaders` and are reached through the ``from_*`` classmethods here.

The token trie (:class:`TokenTrie`) stores every normal token's bytes as a prefix tree in flat numpy
arrays so that automata can walk the whole vocabulary level by level, vectorised.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import as_int, as_int_list
from .errors import GrammarError

__all__ = ["TokenTrie", "Vocabulary", "special_spelling"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

SPECIAL_START = 0xFF  # bytes that never occur in UTF-8 text: a special token's spelling inside the engines
SPECIAL_END = 0xFE


def special_spelling(name: str) -> bytes:
    """The bytes that stand for the special token ``name`` inside the engines: ``0xFF``, the name's
    UTF-8, ``0xFE``. No UTF-8 text contains either byte, so no text grammar matches a spelling, no
    spelling is a prefix of another, and a grammar that names the token matches exactly its spelling
    (see :mod:`grammarmask.special_tokens`)."""
    return bytes([SPECIAL_START]) + name.encode("utf-8") + bytes([SPECIAL_END])


@dataclass(frozen=True, eq=False)
class TokenTrie:
    """The normal tokens' byte strings as a prefix tree, in flat arrays, nodes in BFS order.

    Node 0 is the root (the empty string). For node ``n``: ``byte[n]`` is the byte on the edge into it,
    ``depth[n]`` its length, ``parent[n]`` its parent; its children are nodes ``child_lo[n]`` to
    ``child_hi[n] - 1`` (contiguous, sorted by byte), and the ids of the tokens whose bytes are exactly
    the node's path are ``tokens[tok_lo[n]:tok_hi[n]]``. ``level_lo[d]:level_lo[d+1]`` are the nodes of
    depth ``d``. ``sorted_tokens`` lists the token ids in byte order; the tokens that start with node
    ``n``'s path are ``sorted_tokens[sub_lo[n]:sub_hi[n]]`` (``sub_count[n]`` of them), and the longest
    of them is ``max_len_below[n]`` bytes longer than the path. ``tok_node[t]`` is token ``t``'s node,
    or the sentinel ``n_nodes`` for an id with none (special, empty). Index arrays are int64, the
    type numpy's fancy indexing works in (bytes too), so the walks index with them without converting.
    """

    byte: I64
    depth: I64
    parent: I64
    child_lo: I64
    child_hi: I64
    tok_lo: I64
    tok_hi: I64
    tokens: I64
    level_lo: I64
    sorted_tokens: I64
    sub_lo: I64
    sub_hi: I64
    sub_count: I64
    max_len_below: I64
    tok_node: I64

    @property
    def n_nodes(self) -> int:
        return int(self.byte.shape[0])

    @property
    def label(self) -> I64:
        """The edge labels, which here are bytes (the name :class:`~grammarmask.regular.ClassTrie`
        shares, whose labels are byte classes)."""
        return self.byte

    @classmethod
    def build(cls, token_bytes: Sequence[bytes], exclude: Iterable[int] = ()) -> TokenTrie:
        """Build the trie of every non-empty token not in ``exclude``, vectorised over tokens."""
        skip = set(exclude)
        ids = [i for i, b in enumerate(token_bytes) if b and i not in skip]
        ids.sort(key=token_bytes.__getitem__)
        n = len(ids)
        lengths = np.fromiter((len(token_bytes[i]) for i in ids), dtype=np.int32, count=n)
        max_len = int(lengths.max()) if n else 0
        mat = np.zeros((n, max_len), dtype=np.uint8)
        flat = np.frombuffer(b"".join(token_bytes[i] for i in ids), dtype=np.uint8)
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        mat[rows, cols] = flat
        # lcp[i]: longest common prefix of sorted tokens i-1 and i (0 for the first).
        lcp = np.zeros(n, dtype=np.int32)
        if n > 1:
            same = mat[1:] == mat[:-1]
            both = np.minimum(lengths[1:], lengths[:-1])
            first_diff = np.where(same.all(axis=1), max_len, np.argmin(same, axis=1))
            lcp[1:] = np.minimum(first_diff, both)

        sub_lo_parts = [np.zeros(1, np.int32)]
        sub_hi_parts = [np.full(1, n, np.int32)]
        maxlen_parts = [np.full(1, max_len, np.int32)]
        byte_parts = [np.zeros(1, np.uint8)]
        parent_parts = [np.full(1, -1, np.int32)]
        level_lo = [0, 1]
        node_of_token = np.zeros(n, dtype=np.int64)  # node at the previous depth, per token
        next_id = 1
        end_node = np.zeros(n, dtype=np.int64)
        for d in range(1, max_len + 1):
            alive = np.nonzero(lengths >= d)[0]
            new = lcp[alive] < d
            count = int(new.sum())
            ids_at_d = next_id + np.cumsum(new) - 1
            starts = alive[new]
            breaks = np.append(np.nonzero(lcp < d)[0], n)
            ends = breaks[np.searchsorted(breaks, starts, side="right")]
            sub_lo_parts.append(starts.astype(np.int32))
            sub_hi_parts.append(ends.astype(np.int32))
            maxlen_parts.append(
                (np.maximum.reduceat(lengths, starts) - d).astype(np.int32)
                if count
                else np.zeros(0, np.int32)
            )
            byte_parts.append(mat[starts, d - 1])
            parent_parts.append(node_of_token[alive[new]].astype(np.int32))
            node_of_token[alive] = ids_at_d
            is_end = lengths[alive] == d
            end_node[alive[is_end]] = ids_at_d[is_end]
            next_id += count
            level_lo.append(next_id)

        byte = np.concatenate(byte_parts)
        parent = np.concatenate(parent_parts)
        total = byte.shape[0]
        depth = np.zeros(total, dtype=np.int32)
        for d in range(1, len(level_lo) - 1):
            depth[level_lo[d] : level_lo[d + 1]] = d
        child_lo = np.empty(total, dtype=np.int32)
        child_hi = np.empty(total, dtype=np.int32)
        child_lo[:] = np.searchsorted(parent[1:], np.arange(total), side="left") + 1
        child_hi[:] = np.searchsorted(parent[1:], np.arange(total), side="right") + 1
        # Tokens grouped by end node (several ids may share the same bytes).
        order = np.argsort(end_node, kind="stable")
        sorted_nodes = end_node[order]
        tokens = np.asarray(ids, dtype=np.int32)[order] if n else np.zeros(0, np.int32)
        tok_lo = np.searchsorted(sorted_nodes, np.arange(total), side="left")
        tok_hi = np.searchsorted(sorted_nodes, np.arange(total), side="right")
        tok_node = np.full(len(token_bytes), total, dtype=np.int64)
        tok_node[tokens] = np.repeat(np.arange(total), tok_hi - tok_lo)
        sub_lo, sub_hi = np.concatenate(sub_lo_parts), np.concatenate(sub_hi_parts)
        i64 = np.int64
        return cls(
            byte=byte.astype(i64),
            depth=depth.astype(i64),
            parent=parent.astype(i64),
            child_lo=child_lo.astype(i64),
            child_hi=child_hi.astype(i64),
            tok_lo=tok_lo.astype(i64),
            tok_hi=tok_hi.astype(i64),
            tokens=tokens.astype(i64),
            level_lo=np.asarray(level_lo, dtype=i64),
            sorted_tokens=np.asarray(ids, dtype=i64),
            sub_lo=sub_lo.astype(i64),
            sub_hi=sub_hi.astype(i64),
            sub_count=(sub_hi - sub_lo).astype(i64),
            max_len_below=np.concatenate(maxlen_parts).astype(i64),
            tok_node=tok_node,
        )


class Vocabulary:
    """Token id -> bytes for one tokenizer, plus its special ids and the model's vocabulary size.

    Parameters
    ----------
    token_bytes
        The bytes each token id contributes to the decoded text (index = id). Special tokens may be
        given as ``b""``; they never take part in a grammar.
    eos_token_id
        The end-of-sequence id: legal exactly when the output so far is in the grammar's language.
    special_token_ids
        Control tokens (BOS, padding, tool-call markers, ...): never legal unless a grammar names
        them. EOS is added.
    special_token_names
        The special tokens' names (id -> name, e.g. ``{5: "<tool_call>"}``), which grammars use to
        name them (:class:`~grammarmask.SpecialToken`, ``<tool_call>`` in Lark and GBNF). The loaders
        record them.
    size
        The model's vocabulary size, at least ``len(token_bytes)``; ids past the tokenizer's are
        padding, never legal.

    Raises
    ------
    GrammarError
        No EOS id, an EOS id out of range, a size smaller than the token list, a token that is not
        ``bytes``, or an id or size that is not an integer (``1.5``, ``"0"`` and ``True`` are refused,
        numpy integers are fine).
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        *,
        eos_token_id: int | None,
        special_token_ids: Iterable[int] = (),
        size: int | None = None,
        name: str = "",
        special_token_names: Mapping[int, str] | None = None,
    ) -> None:
        tokens = tuple(token_bytes)
        for i, b in enumerate(tokens):
            if not isinstance(b, bytes):
                raise GrammarError(f"token {i} is {type(b).__name__}, expected bytes")
        if eos_token_id is None:
            raise GrammarError("the vocabulary has no EOS token: pass eos_token_id")
        eos = as_int(eos_token_id, "Vocabulary: eos_token_id")
        n = len(tokens)
        size = n if size is None else as_int(size, "Vocabulary: size")
        if size < n:
            raise GrammarError(f"size={size} is smaller than the {n} tokens given")
        if not 0 <= eos < size:
            raise GrammarError(f"eos_token_id={eos} is outside the vocabulary (size {size})")
        specials = frozenset(as_int_list(special_token_ids, "Vocabulary: special_token_ids")) | {eos}
        bad = [i for i in specials if not 0 <= i < size]
        if bad:
            raise GrammarError(f"special token id {bad[0]} is outside the vocabulary (size {size})")
        self.token_bytes: tuple[bytes, ...] = tuple(b"" if i in specials else b for i, b in enumerate(tokens))
        self.size = size
        self.eos_token_id = eos
        self.special_ids = specials
        self.name = name
        self.special_token_names: dict[int, str] = _check_names(special_token_names, size)
        # the vocabulary this one spells special tokens for (grammarmask.special_tokens), else None
        self.base: Vocabulary | None = None

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Vocabulary{label} size={self.size} eos={self.eos_token_id}>"

    def __len__(self) -> int:
        return self.size

    @property
    def n_words(self) -> int:
        """Number of uint32 words in a packed mask over this vocabulary."""
        return (self.size + 31) // 32

    @cached_property
    def trie(self) -> TokenTrie:
        """The prefix tree of the normal tokens (built on first use, about a second for 131k)."""
        return TokenTrie.build(self.token_bytes, exclude=self.special_ids)

    @cached_property
    def fingerprint(self) -> str:
        """A content hash: equal vocabularies share compiled grammars."""
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.size}:{self.eos_token_id}:{sorted(self.special_ids)}".encode())
        h.update(repr(sorted(self.special_token_names.items())).encode())
        # the lengths, then the bytes: two calls, not two per token (131k tokens: 5 ms, not 140)
        tb = self.token_bytes
        h.update(np.fromiter(map(len, tb), dtype="<u4", count=len(tb)).tobytes())
        h.update(b"".join(tb))
        return h.hexdigest()

    def decode(self, token_ids: Iterable[int], *, special_tokens: bool = False) -> bytes:
        """The bytes of a token sequence. Special tokens contribute nothing, or their names' UTF-8
        with ``special_tokens=True`` (``b"<tool_call>"``)."""
        if self.base is not None:
            return self.base.decode(token_ids, special_tokens=special_tokens)
        tb = self.token_bytes
        n = len(tb)
        if not special_tokens:
            return b"".join(tb[i] if i < n else b"" for i in token_ids)
        names = self.special_token_names
        return b"".join(
            names[i].encode() if i in names else tb[i] if i < n else b"" for i in token_ids
        )

    def special_token_id(self, name: str) -> int:
        """The id of the special token named ``name`` (the lowest, if several share it).

        Raises
        ------
        GrammarError
            No special token has that name (the message lists close names).
        """
        for i, n in sorted(self.special_token_names.items()):
            if n == name:
                return i
        from .special_tokens import unknown_name

        raise unknown_name(self, name, where="Vocabulary.special_token_id")

    # --- loaders (implementations in grammarmask.loaders) -------------------------------------

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes],
        *,
        eos_token_id: int | None,
        special_token_ids: Iterable[int] = (),
        size: int | None = None,
        special_token_names: Mapping[int, str] | None = None,
    ) -> Vocabulary:
        """A vocabulary from a list of token byte strings (index = id)."""
        return cls(tokens, eos_token_id=eos_token_id, special_token_ids=special_token_ids, size=size,
                   special_token_names=special_token_names)

    @classmethod
    def from_mistral(cls, tokenizer: Any = "tekken", *, size: int | None = None) -> Vocabulary:
        """mistral-common's tokenizers: ``"tekken"`` (131k byte-level BPE), ``"sentencepiece"`` (32k),
        a path to a tokenizer file, or a loaded ``Tekkenizer``/``SentencePieceTokenizer``."""
        from . import loaders

        return loaders.from_mistral(cls, tokenizer, size=size)

    @classmethod
    def from_hf(
        cls, tokenizer: Any, *, size: int | None = None, eos_token_id: int | None = None
    ) -> Vocabulary:
        """A Hugging Face ``tokenizers.Tokenizer`` or transformers tokenizer (byte-level BPE via the
        GPT-2 byte map, sentencepiece ``▁`` with ``<0xNN>`` byte fallback, added/special tokens)."""
        from . import loaders

        return loaders.from_hf(cls, tokenizer, size=size, eos_token_id=eos_token_id)

    @classmethod
    def from_tiktoken(
        cls, encoding: Any, *, eos_token_id: int | None = None, size: int | None = None
    ) -> Vocabulary:
        """A ``tiktoken.Encoding`` (ranks are ids; special tokens from the encoding)."""
        from . import loaders

        return loaders.from_tiktoken(cls, encoding, eos_token_id=eos_token_id, size=size)

    @classmethod
    def from_sentencepiece(cls, processor: Any, *, size: int | None = None) -> Vocabulary:
        """A ``sentencepiece.SentencePieceProcessor`` (``▁`` is a space, ``<0xNN>`` pieces are bytes)."""
        from . import loaders

        return loaders.from_sentencepiece(cls, processor, size=size)


def _check_names(names: Mapping[int, str] | None, size: int) -> dict[int, str]:
    if names is None:
        return {}
    if not isinstance(names, Mapping):
        raise GrammarError(
            f"Vocabulary: special_token_names must map ids to names, got {type(names).__name__}"
        )
    out: dict[int, str] = {}
    for i, name in names.items():
        t = as_int(i, "Vocabulary: special_token_names id")
        if not 0 <= t < size:
            raise GrammarError(
                f"Vocabulary: special_token_names names id {t}, outside the vocabulary (size {size})"
            )
        if not isinstance(name, str) or not name:
            raise GrammarError(f"Vocabulary: special_token_names[{t}] must be a non-empty str, got {name!r}")
        out[t] = name
    return out
