"""What the retrievers share: the retrieval-only context, from the service over HTTP or from an
engine in this process, and that context as passages (text, metadata, score).

Over HTTP it is POST /v1/context with the caller's API key (and X-Access-Domains to narrow it);
a refusal (401, 403, 404, 422, 5xx) raises ServiceError with the service's own `detail`, never an
empty list a caller would take for "nothing found".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Iterable

import httpx

__all__ = ["ContextClient", "ServiceError", "Passage", "passages", "in_process_context"]

_CITATION = ("unit_id", "doc_id", "title", "source_uri", "page_start", "page_end", "section", "tag", "rank",
             "similarity")


class ServiceError(RuntimeError):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class ContextClient:
    """POST /v1/context of a corpusgraph service (url: its base, e.g. http://127.0.0.1:8080)."""

    def __init__(self, url: str, api_key: str | None = None, domains: Iterable[str] | None = None,
                 timeout_s: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if domains is not None:
            self.headers["X-Access-Domains"] = ",".join(domains)
        self.timeout_s = timeout_s

    def context(self, question: str, **params: Any) -> dict[str, Any]:
        with httpx.Client(timeout=self.timeout_s) as http:
            return _read(http.post(f"{self.url}/v1/context", json=_body(question, params), headers=self.headers))

    async def acontext(self, question: str, **params: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self.timeout_s) as http:
            return _read(await http.post(f"{self.url}/v1/context", json=_body(question, params), headers=self.headers))


def _body(question: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"question": question, **{k: v for k, v in params.items() if v is not None}}


def _read(resp: httpx.Response) -> dict[str, Any]:
    if resp.status_code != 200:
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text[:300]
        raise ServiceError(resp.status_code, detail if isinstance(detail, str) else str(detail))
    return resp.json()


def in_process_context(engine, question: str, domains: Iterable[str] | None, **params: Any) -> dict[str, Any]:
    """QueryEngine.context as the route returns it (a dict), within `domains` (None: all)."""
    kw = {k: v for k, v in params.items() if v is not None}
    return engine.context(question, domains=domains, **kw).to_dict()


async def in_process_acontext(engine, question: str, domains, **params: Any) -> dict[str, Any]:
    return await asyncio.to_thread(in_process_context, engine, question, domains, **params)


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    metadata: dict[str, Any]
    score: float | None


def passages(ctx: dict[str, Any], include_reports: bool = False) -> list[Passage]:
    """The context's units (kind "unit", cited as the answer would cite them), then, with
    include_reports, its community reports (kind "report")."""
    common = {"method": ctx.get("method"), "index_version": ctx.get("index_version")}
    out = []
    for unit in ctx.get("units") or ():
        meta = {**{k: unit.get(k) for k in _CITATION if unit.get(k) is not None}, **common, "kind": "unit"}
        out.append(Passage(unit["unit_id"], unit.get("text") or "", meta, unit.get("similarity")))
    if include_reports:
        for rep in ctx.get("reports") or ():
            findings = "\n".join(f"- {f.get('summary') or ''}: {f.get('explanation') or ''}"
                                 for f in rep.get("findings") or ())
            text = "\n".join(x for x in (rep.get("title"), rep.get("summary"), findings) if x)
            meta = {"community_id": rep["community_id"], "level": rep.get("level"), "title": rep.get("title"),
                    "rating": rep.get("rating"), "tag": rep.get("tag"), **common, "kind": "report"}
            out.append(Passage(f"report:{rep['community_id']}", text, meta, None))
    return out
