"""Vocabulary loaders for tokenizer families: each reduces a tokenizer to token id -> bytes.

Every token becomes the exact bytes it contributes to the decoded text (DESIGN §1):

- byte-level BPE (GPT-2, Llama 3, tekken, tiktoken): each character of the vocabulary string maps back
  to one byte through the GPT-2 byte-to-unicode table (tiktoken and tekken store the bytes directly);
- sentencepiece style: ``▁`` (U+2581) is a space and ``<0xNN>`` byte-fallback pieces are one byte;
- added tokens: special ones (``special=True`` or listed in ``all_special_ids``) are special, never
  legal; the others contribute their content's UTF-8 bytes.

**Leading space.** A sentencepiece tokenizer adds a dummy ``▁`` before the text and its decoder drops
the first space again. Here ``▁`` is always a space, so the tokens of ``encode("Hi")`` spell ``b" Hi"``:
the bytes the model really emitted. Grammars that must match text after a sentencepiece prompt should
allow (or require) that leading space (``Choice(..., leading_space="optional")``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import disk_cache
from .errors import GrammarError

if TYPE_CHECKING:
    from .vocab import Vocabulary

__all__ = ["from_hf", "from_mistral", "from_sentencepiece", "from_tiktoken", "mistral_tokenizer"]

_MISTRAL_FILES = {
    "tekken": "tekken_240911.json",
    "sentencepiece": "tokenizer.model.v1",
}


def mistral_tokenizer(name: str) -> Any:
    """Load one of mistral-common's bundled tokenizers by name (``tekken``, ``sentencepiece``) or path."""
    _mistral_common()
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = _mistral_path(name)
    if path.endswith(".json"):
        return Tekkenizer.from_file(path)
    return SentencePieceTokenizer(path)


def _mistral_common() -> Any:
    """The ``mistral_common`` module, or a GrammarError that says how to install it."""
    try:
        import mistral_common
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise GrammarError(
            "the built-in tokenizers need mistral-common: pip install 'mistral-common[sentencepiece]'"
        ) from e
    return mistral_common


def _mistral_path(name: str) -> str:
    """The file of a bundled tokenizer's name, or ``name`` itself when it is an existing path."""
    path = name
    if name in _MISTRAL_FILES:
        path = os.path.join(os.path.dirname(_mistral_common().__file__), "data", _MISTRAL_FILES[name])
    if not os.path.exists(path):
        known = ", ".join(sorted(_MISTRAL_FILES))
        raise GrammarError(f"unknown tokenizer {name!r}: give one of {known} or a tokenizer file path")
    return path


def from_mistral(cls: type[Vocabulary], tokenizer: Any, *, size: int | None = None) -> Vocabulary:
    """A Vocabulary from a mistral-common Tekkenizer or SentencePieceTokenizer (or a name/path; then
    read from the on-disk cache, :mod:`grammarmask.disk_cache`, when an earlier process made it)."""
    if not isinstance(tokenizer, str):
        return _from_mistral(cls, tokenizer, size)
    path = _mistral_path(tokenizer)
    st = os.stat(path)
    version = _mistral_common().__version__
    key = (cls.__qualname__, os.path.realpath(path), st.st_size, st.st_mtime_ns, version, size)

    def make() -> Vocabulary:
        vocab = _from_mistral(cls, mistral_tokenizer(path), size)
        vocab.trie, vocab.fingerprint  # noqa: B018 - built now, so the cached entry holds them too
        return vocab

    return disk_cache.load_or_make("vocabulary", key, make)


def _from_mistral(cls: type[Vocabulary], tok: Any, size: int | None) -> Vocabulary:
    n = tok.n_words
    if hasattr(tok, "id_to_byte_piece") and hasattr(tok, "num_special_tokens"):  # tekken
        specials = set(range(tok.num_special_tokens))
        pieces = [b"" if i in specials else tok.id_to_byte_piece(i) for i in range(n)]
        names = {i: str(tok.id_to_piece(i)) for i in specials}
        name = "tekken"
    else:  # sentencepiece
        pieces, specials = _sentencepiece_pieces(tok._model)
        names = _sentencepiece_names(tok._model, specials)
        name = "sentencepiece"
    vocab = cls(pieces, eos_token_id=tok.eos_id, special_token_ids=specials, size=size,
                special_token_names=names)
    vocab.name = name
    return vocab


# --- sentencepiece ---------------------------------------------------------------------------------


def from_sentencepiece(cls: type[Vocabulary], processor: Any, *, size: int | None = None) -> Vocabulary:
    """A Vocabulary from a ``sentencepiece.SentencePieceProcessor``.

    Control, unknown and unused pieces are special; ``<0xNN>`` byte pieces are that byte; ``▁`` is a
    space (see the module docstring on the leading space). EOS is ``processor.eos_id()``.
    """
    if not hasattr(processor, "id_to_piece") or not hasattr(processor, "get_piece_size"):
        raise GrammarError(
            f"from_sentencepiece needs a sentencepiece.SentencePieceProcessor, got {type(processor).__name__}"
        )
    pieces, specials = _sentencepiece_pieces(processor)
    eos = int(processor.eos_id())
    if eos < 0:
        raise GrammarError("the sentencepiece model has no EOS piece (eos_id() is -1)")
    vocab = cls(pieces, eos_token_id=eos, special_token_ids=specials, size=size,
                special_token_names=_sentencepiece_names(processor, specials))
    vocab.name = "sentencepiece"
    return vocab


def _sentencepiece_pieces(sp: Any) -> tuple[list[bytes], set[int]]:
    n = int(sp.get_piece_size())
    unused = getattr(sp, "is_unused", lambda i: False)
    is_byte = getattr(sp, "is_byte", None)
    specials = {i for i in range(n) if sp.is_control(i) or sp.is_unknown(i) or unused(i)}
    pieces: list[bytes] = []
    for i in range(n):
        if i in specials:
            pieces.append(b"")
            continue
        piece = sp.id_to_piece(i)
        if is_byte is not None and is_byte(i) or is_byte is None and _is_byte_piece(piece):
            pieces.append(bytes([int(piece[3:5], 16)]))
        else:
            pieces.append(piece.replace("\u2581", " ").encode("utf-8"))
    return pieces, specials


def _sentencepiece_names(sp: Any, specials: set[int]) -> dict[int, str]:
    """The control and unknown pieces' names (``<s>``, ``</s>``, ``<unk>``; unused pieces have none)."""
    unused = getattr(sp, "is_unused", lambda i: False)
    return {i: str(sp.id_to_piece(i)) for i in sorted(specials) if not unused(i) and sp.id_to_piece(i)}


def _is_byte_piece(piece: str) -> bool:
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")


# --- tiktoken --------------------------------------------------------------------------------------


def from_tiktoken(
    cls: type[Vocabulary], encoding: Any, *, eos_token_id: int | None = None, size: int | None = None
) -> Vocabulary:
    """A Vocabulary from a ``tiktoken.Encoding``: ranks are ids, the bytes are the ranks' byte strings.

    The encoding's special tokens are special; ``eos_token_id`` defaults to ``<|endoftext|>``. Ids with
    no token (gaps in the ranks) are never legal.
    """
    if not hasattr(encoding, "decode_single_token_bytes"):
        raise GrammarError(f"from_tiktoken needs a tiktoken.Encoding, got {type(encoding).__name__}")
    special_map: dict[str, int] = dict(getattr(encoding, "_special_tokens", None) or {})
    n = int(encoding.n_vocab)
    pieces = [b""] * n
    ranks: dict[bytes, int] | None = getattr(encoding, "_mergeable_ranks", None)
    if ranks:
        for piece, rank in ranks.items():
            pieces[rank] = piece
    else:
        skip = set(special_map.values())
        for i in range(n):
            if i not in skip:
                with contextlib.suppress(KeyError):  # a gap in the ranks
                    pieces[i] = encoding.decode_single_token_bytes(i)
    specials = set(special_map.values()) | {i for i, b in enumerate(pieces) if not b}
    if eos_token_id is None:
        eos_token_id = special_map.get("<|endoftext|>")
        if eos_token_id is None:
            names = ", ".join(sorted(special_map)) or "none"
            raise GrammarError(
                f"the tiktoken encoding {getattr(encoding, 'name', '?')!r} has no <|endoftext|> token "
                f"(special tokens: {names}): pass eos_token_id"
            )
    vocab = cls(pieces, eos_token_id=eos_token_id, special_token_ids=specials, size=size,
                special_token_names={i: name for name, i in special_map.items()})
    vocab.name = str(getattr(encoding, "name", "tiktoken"))
    return vocab


# --- Hugging Face ----------------------------------------------------------------------------------

_EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<eos>", "[SEP]")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level BPE vocabularies."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}


def _byte_level_piece(token: str) -> bytes:
    try:
        return bytes(_UNICODE_TO_BYTE[c] for c in token)
    except KeyError:  # not from the byte map (a hand-added entry): its text is its bytes
        return token.encode("utf-8")


def _components(spec: Any) -> Iterable[dict[str, Any]]:
    """Every component of a decoder / pre-tokenizer spec, through nested Sequences."""
    if isinstance(spec, dict):
        yield spec
        for key in ("decoders", "pretokenizers", "normalizers"):
            for sub in spec.get(key) or ():
                yield from _components(sub)


def from_hf(
    cls: type[Vocabulary], tokenizer: Any, *, size: int | None = None, eos_token_id: int | None = None
) -> Vocabulary:
    """A Vocabulary from a ``tokenizers.Tokenizer`` or a transformers tokenizer (fast or slow).

    A fast tokenizer's vocabulary (with its token trie) is stored in the on-disk cache
    (:mod:`grammarmask.disk_cache`) by a hash of the tokenizer's JSON (vocabulary, merges, added and
    special tokens) and transformers' special ids, EOS and name, and read back by the next process.

    Byte-level BPE vocabularies are decoded through the GPT-2 byte map; sentencepiece-style ones
    (``Metaspace`` / ``▁`` replacement, ``<0xNN>`` byte fallback) map ``▁`` to a space. Special added
    tokens (and a transformers tokenizer's ``all_special_ids``) are special; other added tokens are
    their content's bytes. EOS comes from the tokenizer (``eos_token_id``), else from a well-known
    special token name (``</s>``, ``<|endoftext|>``, ...), unless given.

    Raises
    ------
    GrammarError
        An unrecognised tokenizer object, a WordPiece/WordLevel model (not byte-exact), or no EOS.
    """
    hf = None
    if hasattr(tokenizer, "backend_tokenizer"):  # transformers fast tokenizer
        hf, backend = tokenizer, tokenizer.backend_tokenizer
    elif hasattr(tokenizer, "to_str") and hasattr(tokenizer, "get_added_tokens_decoder"):
        backend = tokenizer
    elif hasattr(tokenizer, "sp_model") or hasattr(tokenizer, "byte_decoder"):  # transformers slow
        return _from_hf_slow(cls, tokenizer, size=size, eos_token_id=eos_token_id)
    else:
        raise GrammarError(
            "from_hf needs a tokenizers.Tokenizer or a transformers tokenizer, "
            f"got {type(tokenizer).__name__}"
        )
    text = backend.to_str()
    # the on-disk cache, by the tokenizer's content (its JSON: vocabulary, merges, added and special
    # tokens), what transformers adds (its special ids, EOS, name) and the arguments
    extra = None if hf is None else (
        sorted(int(i) for i in hf.all_special_ids if i is not None), getattr(hf, "eos_token_id", None),
        str(getattr(hf, "name_or_path", "") or "hf"))
    key = (cls.__qualname__, hashlib.blake2b(text.encode(), digest_size=20).hexdigest(), extra, size,
           eos_token_id, getattr(sys.modules.get("tokenizers"), "__version__", ""))

    def make() -> Vocabulary:
        vocab = _from_hf_fast(cls, hf, backend, text, size, eos_token_id)
        vocab.trie, vocab.fingerprint  # noqa: B018 - built now, so the cached entry holds them too
        return vocab

    return disk_cache.load_or_make("vocabulary", key, make)


def _from_hf_fast(cls: type[Vocabulary], hf: Any, backend: Any, text: str, size: int | None,
                  eos_token_id: int | None) -> Vocabulary:
    spec = json.loads(text)
    pieces = _hf_model_pieces(spec, backend.get_vocab(with_added_tokens=False))
    added = {int(i): t for i, t in backend.get_added_tokens_decoder().items()}
    specials = {i for i, t in added.items() if t.special}
    n = max([len(pieces) - 1, *added]) + 1
    pieces += [b""] * (n - len(pieces))
    for i, t in added.items():
        pieces[i] = b"" if t.special else t.content.encode("utf-8")
    unk = spec["model"].get("unk_token") if spec["model"].get("type") == "BPE" else None
    unk_id = spec["model"].get("unk_id") if spec["model"].get("type") == "Unigram" else None
    if unk is not None and backend.token_to_id(unk) is not None:
        specials.add(int(backend.token_to_id(unk)))
    if unk_id is not None:
        specials.add(int(unk_id))
    if hf is not None:
        specials |= {int(i) for i in hf.all_special_ids if i is not None}
    names = {i: str(t.content) for i, t in added.items() if t.special and t.content}
    for i in specials - set(names):
        name = backend.id_to_token(i)
        if name:
            names[i] = str(name)
    specials |= {i for i, b in enumerate(pieces) if not b}  # gaps in the id space
    eos = _hf_eos(hf, backend, specials, eos_token_id)
    vocab = cls(pieces, eos_token_id=eos, special_token_ids=specials, size=size, special_token_names=names)
    vocab.name = str(getattr(hf, "name_or_path", "") or "hf")
    return vocab


def _hf_model_pieces(spec: dict[str, Any], vocab: dict[str, int]) -> list[bytes]:
    model = spec["model"]
    kind = model.get("type")
    if kind not in ("BPE", "Unigram"):
        raise GrammarError(
            f"{kind} tokenizers are not supported: their tokens do not map to exact bytes "
            "(supported: byte-level BPE and sentencepiece-style BPE/Unigram)"
        )
    parts = [*_components(spec.get("decoder")), *_components(spec.get("pre_tokenizer"))]
    types = {p.get("type") for p in parts}
    byte_level = "ByteLevel" in types
    byte_fallback = bool(model.get("byte_fallback")) or "ByteFallback" in types
    metaspace = "Metaspace" in types or any(
        p.get("type") == "Replace" and (p.get("pattern") or {}).get("String") == "\u2581" for p in parts
    )
    if not byte_level and not metaspace:
        raise GrammarError(
            "cannot tell how this tokenizer's tokens map to bytes: its decoder is neither ByteLevel "
            f"nor sentencepiece-style (decoder: {(spec.get('decoder') or {}).get('type')})"
        )
    n = max(vocab.values(), default=-1) + 1
    pieces = [b""] * n
    for text, i in vocab.items():
        if byte_level:
            pieces[i] = _byte_level_piece(text)
        elif byte_fallback and _is_byte_piece(text):
            pieces[i] = bytes([int(text[3:5], 16)])
        else:
            pieces[i] = text.replace("\u2581", " ").encode("utf-8")
    return pieces


def _hf_eos(hf: Any, backend: Any, specials: set[int], eos_token_id: int | None) -> int:
    if eos_token_id is not None:
        return int(eos_token_id)
    if hf is not None and getattr(hf, "eos_token_id", None) is not None:
        return int(hf.eos_token_id)
    for name in _EOS_NAMES:
        i = backend.token_to_id(name)
        if i is not None and int(i) in specials:
            return int(i)
    raise GrammarError(
        "the tokenizer has no EOS token (no eos_token_id and none of "
        f"{', '.join(_EOS_NAMES)} is a special token): pass eos_token_id"
    )


def _from_hf_slow(
    cls: type[Vocabulary], tok: Any, *, size: int | None, eos_token_id: int | None
) -> Vocabulary:
    if hasattr(tok, "sp_model"):
        pieces, specials = _sentencepiece_pieces(tok.sp_model)
    else:
        enc: dict[str, int] = tok.encoder
        pieces = [b""] * (max(enc.values(), default=-1) + 1)
        dec: dict[str, int] = tok.byte_decoder
        for text, i in enc.items():
            try:
                pieces[i] = bytes(dec[c] for c in text)
            except KeyError:  # not from the byte map: its text is its bytes
                pieces[i] = text.encode("utf-8")
        specials = set()
    added = {int(i): t for i, t in getattr(tok, "added_tokens_decoder", {}).items()}
    n = max([len(pieces) - 1, *added]) + 1
    pieces += [b""] * (n - len(pieces))
    for i, t in added.items():
        special = bool(getattr(t, "special", False))
        pieces[i] = b"" if special else str(t).encode("utf-8")
        if special:
            specials.add(i)
    specials |= {int(i) for i in tok.all_special_ids if i is not None}
    names: dict[int, str] = {}
    for i in sorted(specials):
        with contextlib.suppress(Exception):  # a slow tokenizer may not know an id
            name = tok.convert_ids_to_tokens(i)
            if isinstance(name, str) and name:
                names[i] = name
    specials |= {i for i, b in enumerate(pieces) if not b}
    eos = eos_token_id if eos_token_id is not None else tok.eos_token_id
    if eos is None:
        raise GrammarError("the tokenizer has no EOS token (eos_token_id is None): pass eos_token_id")
    vocab = cls(pieces, eos_token_id=int(eos), special_token_ids=specials, size=size,
                special_token_names=names)
    vocab.name = str(getattr(tok, "name_or_path", "") or "hf")
    return vocab
