"""Retrievers for other frameworks over the query service's retrieval-only context (POST /v1/context,
or QueryEngine.context in process): LangChain's and LlamaIndex's, each returning its own document
type with the citation in the metadata. Optional: `pip install 'corpusgraph[retrievers]'`.

Names resolve on first use, so importing this package loads neither framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corpusgraph.lazy import lazy_exports

__all__ = ["LangChainRetriever", "LlamaIndexRetriever", "ContextClient", "ServiceError"]

_WHERE = {
    "LangChainRetriever": "corpusgraph.integrations.langchain",
    "LlamaIndexRetriever": "corpusgraph.integrations.llamaindex",
    "ContextClient": "corpusgraph.integrations.http",
    "ServiceError": "corpusgraph.integrations.http",
}

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from corpusgraph.integrations.http import ContextClient, ServiceError
    from corpusgraph.integrations.langchain import LangChainRetriever
    from corpusgraph.integrations.llamaindex import LlamaIndexRetriever


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
