"""A LangChain retriever over corpusgraph's retrieval-only context: `invoke(question)` returns
LangChain Documents, one per text unit the method ranked (and, with include_reports, one per
community report), each with its citation in `metadata` (unit_id, doc_id, title, source_uri, page
and section where known, tag, rank, similarity, method, index_version, kind) and `id` the unit id.

    retriever = LangChainRetriever(url="http://127.0.0.1:8080", api_key=KEY, method="local")
    retriever = LangChainRetriever(engine=engine, domains=["public"])   # in this process

Implements BaseRetriever's `_get_relevant_documents` and `_aget_relevant_documents`
(reference.langchain.com, langchain-core BaseRetriever). Needs `pip install 'corpusgraph[retrievers]'`.
"""

from __future__ import annotations

from typing import Any, Literal

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # the extra is not installed
    raise ImportError("LangChainRetriever needs langchain-core: pip install 'corpusgraph[retrievers]'") from exc
from pydantic import ConfigDict, Field, model_validator

from corpusgraph.integrations.http import ContextClient, in_process_acontext, in_process_context, passages

__all__ = ["LangChainRetriever"]


class LangChainRetriever(BaseRetriever):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = Field(None, description="The service's base URL (POST /v1/context); or give `engine`.")
    api_key: str | None = Field(None, repr=False, description="The API key sent as a bearer token.")
    engine: Any = Field(None, exclude=True, description="A QueryEngine in this process, instead of `url`.")
    domains: list[str] | None = Field(None, description="Access domains to read (in process), or to narrow the "
                                      "key to (X-Access-Domains); None: all the key (or engine) may read.")
    method: Literal["basic", "local", "global", "auto"] = "local"
    max_tokens: int | None = Field(None, description="The context budget in tokens.")
    top_k: int | None = None
    include_reports: bool = Field(False, description="Also return the context's community reports.")
    timeout_s: float = 60.0

    @model_validator(mode="after")
    def _one_source(self) -> "LangChainRetriever":
        if (self.url is None) == (self.engine is None):
            raise ValueError("give `url` (the service) or `engine` (a QueryEngine in this process), one of them")
        return self

    def _params(self) -> dict[str, Any]:
        return {"method": self.method, "max_tokens": self.max_tokens, "top_k": self.top_k}

    def _client(self) -> ContextClient:
        return ContextClient(self.url, self.api_key, self.domains, self.timeout_s)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.engine is not None:
            ctx = in_process_context(self.engine, query, self.domains, **self._params())
        else:
            ctx = self._client().context(query, **self._params())
        return _documents(ctx, self.include_reports)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        if self.engine is not None:
            ctx = await in_process_acontext(self.engine, query, self.domains, **self._params())
        else:
            ctx = await self._client().acontext(query, **self._params())
        return _documents(ctx, self.include_reports)


def _documents(ctx: dict[str, Any], include_reports: bool) -> list[Document]:
    return [Document(page_content=p.text, metadata={**p.metadata, "score": p.score}, id=p.id)
            for p in passages(ctx, include_reports)]
