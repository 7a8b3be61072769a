"""chunk: documents -> text_units, token windows with overlap and character offsets.

Windows are cut on token boundaries of the configured tiktoken encoding; each unit keeps the
character span it covers in its document, and the pages and section it came from (from the
document's spans), so a citation can point back into the source. A page or section boundary
near the end of a window ends the unit there (chunk.boundary_slack).
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Iterator, NamedTuple, Sequence

import pyarrow as pa

from corpusgraph.config import ChunkSection
from corpusgraph.stages.ingest.spans import boundaries, locate
from corpusgraph.tables import table
from corpusgraph.tokens import get_encoding

__all__ = ["chunk_text", "Chunk", "unit_id", "chunk_documents"]

_MIN_UNIT_TOKENS = 16  # a boundary this close to a window's start is crossed, not cut at


class Chunk(NamedTuple):
    ordinal: int
    text: str
    n_tokens: int
    char_start: int
    char_end: int


def unit_id(doc_id: str, ordinal: int, text: str) -> str:
    return hashlib.sha256(f"{doc_id}|{ordinal}|{text}".encode("utf-8")).hexdigest()[:32]


def chunk_text(text: str, size: int, overlap: int, encoding: str = "cl100k_base", boundaries: Sequence[int] = (),
               slack: float = 0.0) -> list[Chunk]:
    """Token windows of `size` with `overlap`. boundaries: character offsets where a page or
    section starts; a window whose last `slack` fraction holds one ends there, and the next window
    starts at it (no overlap across it). A boundary earlier in a window is crossed. Without
    boundaries (or with slack 0) the windows are exactly the plain sliding ones."""
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than size ({size})")
    enc = get_encoding(encoding)
    tokens = enc.encode_ordinary(text)
    if not tokens:
        return []
    # Byte offset of every token start, then byte offset -> character offset. A token may end
    # inside a multi-byte character; rounding down keeps spans on character boundaries.
    byte_ends = []
    total = 0
    for tok in tokens:
        total += len(enc.decode_single_token_bytes(tok))
        byte_ends.append(total)
    char_byte_starts = []
    b = 0
    for ch in text:
        char_byte_starts.append(b)
        b += len(ch.encode("utf-8"))

    def to_char(byte_offset: int) -> int:
        return bisect.bisect_right(char_byte_starts, byte_offset) - 1 if byte_offset < b else len(text)

    cuts = _boundary_tokens(boundaries, char_byte_starts, byte_ends, len(text)) if slack > 0 else []
    chunks = []
    step = size - overlap
    start = 0
    while True:
        end = min(start + size, len(tokens))
        cut = None
        if cuts and end < len(tokens):
            i = bisect.bisect_right(cuts, end) - 1  # the last boundary inside the window
            # only near the size target, and never leaving a scrap of a unit
            if i >= 0 and cuts[i] >= start + max(size * (1 - slack), _MIN_UNIT_TOKENS):
                cut = end = cuts[i]
        byte_start = byte_ends[start - 1] if start else 0
        c0, c1 = to_char(byte_start), to_char(byte_ends[end - 1])
        chunks.append(Chunk(len(chunks), text[c0:c1], end - start, c0, c1))
        if end == len(tokens):
            return chunks
        start = cut if cut is not None else start + step


def _boundary_tokens(boundaries: Sequence[int], char_byte_starts: list[int], byte_ends: list[int],
                     n_chars: int) -> list[int]:
    """Each boundary (a character offset) as the index of the first token starting at or after it."""
    token_starts = [0] + byte_ends[:-1]
    return sorted({bisect.bisect_left(token_starts, char_byte_starts[c]) for c in boundaries if 0 < c < n_chars}
                  - {0, len(byte_ends)})


def _chunk_batches(batches: Iterator[pa.RecordBatch], section: ChunkSection) -> Iterator[pa.RecordBatch]:
    schema = table("text_units").schema
    for batch in batches:
        rows = []
        for doc_id, text, spans in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist(),
                                       batch.column("spans").to_pylist()):
            for c in chunk_text(text or "", section.size_tokens, section.overlap_tokens, section.encoding,
                                boundaries(spans), section.boundary_slack):
                page_start, page_end, heading = locate(spans, c.char_start, c.char_end)
                rows.append(
                    {
                        "unit_id": unit_id(doc_id, c.ordinal, c.text),
                        "doc_id": doc_id,
                        "ordinal": c.ordinal,
                        "text": c.text,
                        "n_tokens": c.n_tokens,
                        "char_start": c.char_start,
                        "char_end": c.char_end,
                        "page_start": page_start,
                        "page_end": page_end,
                        "section": heading,
                    }
                )
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)


def chunk_documents(documents, section: ChunkSection):
    """documents (live rows) -> text_units, in Arrow batches on the executors."""
    from corpusgraph.tables import spark_schema

    live = documents.where("NOT deleted").select("doc_id", "text", "spans")
    return live.mapInArrow(lambda it: _chunk_batches(it, section), spark_schema("text_units"))
