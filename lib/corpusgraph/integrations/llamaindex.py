"""A LlamaIndex retriever over corpusgraph's retrieval-only context: `retrieve(question)` returns
NodeWithScore items, one per text unit the method ranked (and, with include_reports, one per
community report): a TextNode whose id is the unit id, whose text is the unit's and whose metadata
is its citation (unit_id, doc_id, title, source_uri, page and section where known, tag, rank,
similarity, method, index_version, kind); the score is the unit's similarity to the question.

    retriever = LlamaIndexRetriever(url="http://127.0.0.1:8080", api_key=KEY, method="local")
    retriever = LlamaIndexRetriever(engine=engine, domains=["public"])   # in this process

Implements llama-index-core's BaseRetriever `_retrieve` and `_aretrieve`. Needs
`pip install 'corpusgraph[retrievers]'`.
"""

from __future__ import annotations

from typing import Any, Iterable

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # the extra is not installed
    raise ImportError("LlamaIndexRetriever needs llama-index-core: pip install 'corpusgraph[retrievers]'") from exc

from corpusgraph.integrations.http import ContextClient, in_process_acontext, in_process_context, passages

__all__ = ["LlamaIndexRetriever"]

_METHODS = ("basic", "local", "global", "auto")


class LlamaIndexRetriever(BaseRetriever):
    def __init__(self, url: str | None = None, api_key: str | None = None, engine: Any = None,
                 domains: Iterable[str] | None = None, method: str = "local", max_tokens: int | None = None,
                 top_k: int | None = None, include_reports: bool = False, timeout_s: float = 60.0, **kw: Any) -> None:
        if (url is None) == (engine is None):
            raise ValueError("give `url` (the service) or `engine` (a QueryEngine in this process), one of them")
        if method not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(_METHODS)}, not {method!r}")
        super().__init__(**kw)
        self.engine = engine
        self.domains = None if domains is None else list(domains)
        self.client = ContextClient(url, api_key, self.domains, timeout_s) if url is not None else None
        self.params = {"method": method, "max_tokens": max_tokens, "top_k": top_k}
        self.include_reports = include_reports

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.engine is not None:
            ctx = in_process_context(self.engine, query_bundle.query_str, self.domains, **self.params)
        else:
            ctx = self.client.context(query_bundle.query_str, **self.params)
        return _nodes(ctx, self.include_reports)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.engine is not None:
            ctx = await in_process_acontext(self.engine, query_bundle.query_str, self.domains, **self.params)
        else:
            ctx = await self.client.acontext(query_bundle.query_str, **self.params)
        return _nodes(ctx, self.include_reports)


def _nodes(ctx: dict[str, Any], include_reports: bool) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=p.text, id_=p.id, metadata=p.metadata), score=p.score)
            for p in passages(ctx, include_reports)]
