"""A query engine over the index a config describes: the store, its vector indexes, and the
chat and embedding models the config names. The command line, the service and notebooks open
their engine here."""

from __future__ import annotations

from pathlib import Path

from corpusgraph.config import Config
from corpusgraph.query.engine import QueryEngine

__all__ = ["open_query_engine"]


def open_query_engine(cfg: Config, base_url: str | None) -> QueryEngine:
    """The engine for `cfg`; `base_url` is where chat requests go (a ChatEndpoint's url() for the
    query stage's section; None: that section's own endpoints). The chat model and its price are
    the query stage's (llm.stages.query, else llm)."""
    from corpusgraph.llm.embedders import check_index_model, open_embedder
    from corpusgraph.llm.factory import open_chat_model
    from corpusgraph.query.store import IndexStore
    from corpusgraph.storage.vectors import available_kinds

    s3 = cfg.storage.s3  # the warehouse and index_dir may be on S3
    store = IndexStore(cfg.storage.warehouse, cfg.storage.index_dir, s3=s3)
    # Questions must be embedded by the backend and model that built the index.
    for kind in available_kinds(cfg.storage.index_dir, s3):
        check_index_model(store.vectors(kind).model, cfg.embeddings)
    from corpusgraph.llm.factory import fit_context

    llm = cfg.llm.for_stage("query")
    chat = open_chat_model(llm, cfg.storage.cache_dir, base_url=base_url)
    embedder = open_embedder(cfg.embeddings, cfg.storage.cache_dir)
    # Every method's context fits the query model's window beside its answer.
    query = cfg.query.model_copy(update={"max_context_tokens": fit_context(cfg.query.max_context_tokens, llm,
                                                                           cfg.query.max_tokens)})
    return QueryEngine(store, chat, embedder, query, prompts_dir=Path(cfg.conf_dir),
                       usd_per_1k_in=llm.usd_per_1k_in, usd_per_1k_out=llm.usd_per_1k_out)
