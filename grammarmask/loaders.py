"""Vocabulary loaders for tokenizer families: each reduces a tokenizer to token id -> bytes."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .errors import GrammarError

if TYPE_CHECKING:
    from .vocab import Vocabulary

__all__ = ["from_mistral", "mistral_tokenizer"]

_MISTRAL_FILES = {
    "tekken": "tekken_240911.json",
    "sentencepiece": "tokenizer.model.v1",
}


def mistral_tokenizer(name: str) -> Any:
    """Load one of mistral-common's bundled tokenizers by name (``tekken``, ``sentencepiece``) or path."""
    try:
        import mistral_common
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise GrammarError(
            "the built-in tokenizers need mistral-common: pip install 'mistral-common[sentencepiece]'"
        ) from e
    path = name
    if name in _MISTRAL_FILES:
        path = os.path.join(os.path.dirname(mistral_common.__file__), "data", _MISTRAL_FILES[name])
    if not os.path.exists(path):
        known = ", ".join(sorted(_MISTRAL_FILES))
        raise GrammarError(f"unknown tokenizer {name!r}: give one of {known} or a tokenizer file path")
    if path.endswith(".json"):
        return Tekkenizer.from_file(path)
    return SentencePieceTokenizer(path)


def from_mistral(cls: type[Vocabulary], tokenizer: Any, *, size: int | None = None) -> Vocabulary:
    """A Vocabulary from a mistral-common Tekkenizer or SentencePieceTokenizer (or a name/path)."""
    tok = mistral_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    n = tok.n_words
    if hasattr(tok, "id_to_byte_piece") and hasattr(tok, "num_special_tokens"):  # tekken
        specials = set(range(tok.num_special_tokens))
        pieces = [b"" if i in specials else tok.id_to_byte_piece(i) for i in range(n)]
        name = "tekken"
    else:  # sentencepiece
        sp = tok._model
        specials = {i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)}
        pieces = [b"" if i in specials else _sentencepiece_piece(sp.id_to_piece(i)) for i in range(n)]
        name = "sentencepiece"
    vocab = cls(pieces, eos_token_id=tok.eos_id, special_token_ids=specials, size=size)
    vocab.name = name
    return vocab


def _sentencepiece_piece(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")
