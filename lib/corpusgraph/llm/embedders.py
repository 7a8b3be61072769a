"""Build the configured embedder: the bundled MiniLM, or an OpenAI-compatible endpoint.

The embed stage (in each Ray actor) and the query side (CLI and service) both call
`open_embedder`, so questions are embedded by the backend and model that built the index;
`check_index_model` refuses an index built by another model.
"""

from __future__ import annotations

from pathlib import Path

from corpusgraph.config import EmbeddingSection
from corpusgraph.llm.base import Embedder

__all__ = ["open_embedder", "check_index_model", "EMBED_CACHE_FILE"]

EMBED_CACHE_FILE = "llm_cache.sqlite"  # the chat side's response cache; keys never collide (see openai_embed)


def open_embedder(section: EmbeddingSection, cache_dir: str | Path | None) -> Embedder:
    if section.backend == "bundled":
        from corpusgraph.llm.minilm import MiniLMEmbedder

        # The built ONNX graph is kept beside the response caches, so each `corpusgraph query`
        # process loads it instead of building it again.
        return MiniLMEmbedder(batch_size=section.batch_size, max_tokens=min(section.max_tokens, 512),
                              windows=section.windows, runtime=section.runtime,
                              int8=section.runtime == "onnxruntime" and section.int8, model_dir=section.model_dir,
                              graph_cache=Path(cache_dir) / "models" if cache_dir else None)
    if section.backend == "openai":
        from corpusgraph.llm.cache import ResponseCache
        from corpusgraph.llm.factory import client_limits, embed_endpoint
        from corpusgraph.llm.openai_embed import OpenAIEmbedder

        cache = ResponseCache(Path(cache_dir) / EMBED_CACHE_FILE) if section.cache and cache_dir else None
        ep = embed_endpoint(section)
        return OpenAIEmbedder(
            model=section.model,
            base_url=section.endpoint_urls(),
            api_key=ep.api_key,
            batch_size=section.batch_size,
            cache=cache,
            max_input_chars=section.max_input_chars,
            route=ep.route,
            tokens=ep.tokens,
            body_model=ep.model,
            **client_limits(section),
        )
    raise ValueError(f"unknown embeddings.backend {section.backend!r}")


def check_index_model(index_model: str | None, section: EmbeddingSection) -> None:
    """Refuse to answer from vectors of another model than the configured embedder's: their
    cosines with a question's vector mean nothing (and their dimensions may differ)."""
    if index_model and index_model != section.model:
        raise ValueError(
            f"the vector index was built with embedding model {index_model!r}, but embeddings.model is "
            f"{section.model!r} (backend {section.backend}); questions must be embedded by the model that built "
            "the index: set embeddings.model (and backend) back, or rebuild with `corpusgraph index`")
