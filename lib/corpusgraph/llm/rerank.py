"""Rerankers: a question and passages in, one relevance score per passage out.

Backends (RerankSection.backend):
- `tei`: text-embeddings-inference's `POST /rerank` with {"query", "texts", "raw_scores": false};
  it answers a list of {"index", "score"} (TEI's OpenAPI, huggingface/text-embeddings-inference).
- `vllm_score`: vLLM's `POST /score` with {"model", "text_1": query, "text_2": [passages]}; it
  answers {"data": [{"index", "score"}]} (vLLM's pooling score protocol, docs.vllm.ai,
  vllm/entrypoints/pooling/score/protocol.py).
- `cohere`: `POST <api_base>/rerank` with {"model", "query", "documents", "top_n"}; it answers
  {"results": [{"index", "relevance_score"}]}: Cohere's rerank API, which Jina, vLLM (/v1/rerank,
  the same protocol file's RerankRequest/RerankResponse) and Infinity serve too.
- `chat`: the configured chat model ranks the passages listwise in one call: it is shown them
  numbered and answers the numbers best first as JSON (a schema constrains it where the server
  can); a passage it leaves out ranks after those it names, in the order it was given.

A reranker raises on any failure (HTTP error, an answer that does not cover the passages, a chat
answer that names none); basic search then keeps the hybrid order and says why (query/hybrid.py).
No cross-encoder runs in-process: no PyPI package ships one's weights (flashrank's wheel, for
one, downloads its models from a model hub at first use), and the project loads none from a hub.
"""

from __future__ import annotations

import json
import re
from typing import Protocol, Sequence, runtime_checkable

from corpusgraph.llm.base import ChatModel, ChatRequest

__all__ = ["Reranker", "HttpReranker", "ChatReranker", "open_reranker", "listwise_prompt", "parse_listwise"]


@runtime_checkable
class Reranker(Protocol):
    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, higher is more relevant."""
        ...


class HttpReranker:
    """A reranking endpoint: TEI's /rerank, vLLM's /score or a Cohere-style /rerank."""

    def __init__(self, backend: str, api_base: str, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 30.0):
        if backend not in ("tei", "vllm_score", "cohere"):
            raise ValueError(f"unknown reranking endpoint kind {backend!r}")
        if not api_base:
            raise ValueError(f"query.rerank.api_base is required for the {backend} reranker")
        self.backend, self.api_base, self.model = backend, api_base.rstrip("/"), model
        self.api_key, self.timeout_s = api_key, timeout_s

    def _request(self, query: str, passages: list[str]) -> tuple[str, dict]:
        if self.backend == "tei":
            return "/rerank", {"query": query, "texts": passages, "raw_scores": False}
        if self.backend == "vllm_score":
            return "/score", {"model": self.model, "text_1": query, "text_2": passages}
        return "/rerank", {"model": self.model, "query": query, "documents": passages, "top_n": len(passages)}

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        import httpx

        passages = list(passages)
        if not passages:
            return []
        path, body = self._request(query, passages)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        r = httpx.post(self.api_base + path, json=body, headers=headers, timeout=self.timeout_s)
        if r.status_code != 200:
            raise RuntimeError(f"{self.backend} reranker answered HTTP {r.status_code}: {r.text[:300]}")
        data = r.json()
        rows = data if self.backend == "tei" else data.get("data" if self.backend == "vllm_score" else "results")
        key = "relevance_score" if self.backend == "cohere" else "score"
        scores: dict[int, float] = {}
        for row in rows or ():
            i = row.get("index") if isinstance(row, dict) else None
            if isinstance(i, int) and 0 <= i < len(passages) and isinstance(row.get(key), (int, float)):
                scores[i] = float(row[key])
        if len(scores) != len(passages):
            raise RuntimeError(f"{self.backend} reranker scored {len(scores)} of {len(passages)} passages")
        return [scores[i] for i in range(len(passages))]


_SYSTEM = ("You rank passages by how well they answer a question. Answer only JSON: "
           '{"ranking": [passage numbers, most relevant first]}.')


def listwise_prompt(query: str, passages: Sequence[str]) -> str:
    blocks = "\n\n".join(f"[{i}] {p.strip()}" for i, p in enumerate(passages, 1))
    return f"Question: {query}\n\nPassages:\n{blocks}\n\nRank the passage numbers, most relevant first."


def parse_listwise(text: str | None, n: int) -> list[int]:
    """Passage numbers (1-based) the answer ranks, best first, each once, only those in 1..n."""
    if not text:
        return []
    found: list = []
    try:
        data = json.loads(text)
        found = data.get("ranking", []) if isinstance(data, dict) else data if isinstance(data, list) else []
    except ValueError:
        found = re.findall(r"\d+", text)
    out: list[int] = []
    for x in found:
        try:
            i = int(x)
        except (TypeError, ValueError):
            continue
        if 1 <= i <= n and i not in out:
            out.append(i)
    return out


class ChatReranker:
    """The chat model as a listwise reranker: one call per question."""

    def __init__(self, chat: ChatModel, max_tokens: int = 200):
        self.chat, self.max_tokens = chat, max_tokens

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        n = len(passages)
        if not n:
            return []
        schema = {"type": "object", "properties": {"ranking": {"type": "array", "maxItems": n,
                  "items": {"type": "integer", "minimum": 1, "maximum": n}}}, "required": ["ranking"]}
        request = ChatRequest("rerank", ({"role": "system", "content": _SYSTEM},
                                         {"role": "user", "content": listwise_prompt(query, passages)}),
                              self.max_tokens, json_schema=schema)
        result = self.chat.complete([request])[0]
        if result.error:
            raise RuntimeError(f"chat reranker call failed: {result.error}")
        order = parse_listwise(result.text, n)
        if not order:
            raise RuntimeError(f"chat reranker named no passage: {(result.text or '')[:200]!r}")
        # Named passages first, best first; the rest after them in the order they were given.
        rank = {i - 1: r for r, i in enumerate(order)}
        return [float(n - rank[i]) if i in rank else float(-i) / n for i in range(n)]


def open_reranker(section, chat: ChatModel | None = None) -> Reranker | None:
    """The reranker `section` (a RerankSection) names, or None for backend none; `chat` is the
    chat model the `chat` backend ranks with."""
    if section.backend == "none":
        return None
    if section.backend == "chat":
        if chat is None:
            raise ValueError("query.rerank.backend chat needs the chat model")
        return ChatReranker(chat)
    key = section.api_key.get_secret_value() if section.api_key else None
    return HttpReranker(section.backend, section.api_base or "", section.model, key, section.timeout_s)
