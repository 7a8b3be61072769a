"""The Batch API's own calls (upload a file, create, get and list batches, download a result file)
through the official `openai` package: OpenAI, or AzureOpenAI for the azure_openai profile's dated
API, whose files and batches live at /openai/files and /openai/batches with an api-version.

They are few per batch, so the package's per-call cost, which keeps it off the synchronous path
(tests/benchmarks/results/chat_client_cpu.json), does not matter here, and it brings Azure's URLs
and credentials. Its own retries are off (max_retries=0): the retry rule is `BatchAPI.call`'s,
the one llm/openai_batch.py's record-keeping was written for. The package is imported on first
use only; every argument is given, so it reads no environment variable.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from corpusgraph.llm.http_common import RETRY_AFTER_CAP_S, error_details, retry_after
from corpusgraph.llm.routes import Route, TokenSource, azure_uses_v1

__all__ = ["BatchAPI", "BatchAPIError", "as_dict"]


class BatchAPIError(Exception):
    """The batch API itself (files, batches) refused or kept failing."""

    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class BatchAPI:
    """One endpoint's files and batches calls, with backoff over connection errors, 429 and 5xx."""

    def __init__(self, base_url: str, route: Route, api_key: str | None, tokens: TokenSource | None,
                 timeout_s: float, max_retries: int) -> None:
        self.base_url, self.route, self.api_key, self.tokens = base_url.rstrip("/"), route, api_key, tokens
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self._sdk: Any = None
        self._sdk_token: str | None = None  # the Entra token the SDK client was built with

    def close(self) -> None:
        if self._sdk is not None:
            self._sdk.close()
            self._sdk = None

    def client(self) -> Any:
        """The SDK client, built on first use and again when an Entra token is renewed."""
        import openai

        token = self.tokens.get() if self.tokens is not None else None
        if self._sdk is not None and token == self._sdk_token:
            return self._sdk
        self.close()
        common = dict(max_retries=0, timeout=self.timeout_s)
        if self.route.profile.auth == "azure" and not azure_uses_v1(self.route.api_version):
            root = self.route.api_url(self.base_url, "").split("/openai")[0]
            auth = {"azure_ad_token": token} if token else {"api_key": self.api_key or ""}
            self._sdk = openai.AzureOpenAI(azure_endpoint=root, api_version=self.route.api_version, **auth, **common)
        elif self.route.profile.auth == "azure":
            base = self.route.api_url(self.base_url, "").split("?")[0]
            headers = {"Authorization": f"Bearer {token}"} if token else {"api-key": self.api_key or ""}
            query = {"api-version": self.route.api_version} if self.route.api_version == "preview" else None
            self._sdk = openai.OpenAI(base_url=base, api_key=token or self.api_key or "", default_headers=headers,
                                      default_query=query, **common)
        else:
            # No key: a placeholder the package insists on; servers without auth ignore the header.
            self._sdk = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY", **common)
        self._sdk_token = token
        return self._sdk

    def call(self, what: str, fn: Callable[[Any], Any], tries: int | None = None) -> Any:
        """fn(client); a 4xx other than 429 raises BatchAPIError at once, the rest are retried."""
        import openai

        tries = tries or self.max_retries + 3
        why = ""
        for attempt in range(tries):
            wait = None
            try:
                return fn(self.client())
            except openai.APIStatusError as exc:
                why = f"HTTP {exc.status_code}: {error_details(_body_of(exc))[0]}"
                if exc.status_code == 401 and self.tokens is not None and attempt == 0:
                    self.tokens.invalidate()  # an Entra token that expired early: a new one, once
                elif exc.status_code != 429 and exc.status_code < 500:
                    raise BatchAPIError(f"{what}: {why}") from exc
                wait = _retry_after(exc)
            except openai.APIConnectionError as exc:  # timeouts included
                why = f"{type(exc).__name__}: {exc}"
            if attempt < tries - 1:
                time.sleep(min(wait if wait is not None else random.uniform(0, min(30.0, 0.5 * 2**attempt)),
                               RETRY_AFTER_CAP_S))
        raise BatchAPIError(f"{what}: {why} (gave up after {tries} attempts)", retryable=True)

    def upload(self, filename: str, data: bytes) -> str:
        got = as_dict(self.call("POST /files", lambda c: c.files.create(file=(filename, data, "application/jsonl"),
                                                                        purpose="batch")))
        if not got.get("id"):
            raise BatchAPIError(f"POST /files: no file id in {str(got)[:200]}")
        return str(got["id"])

    def download(self, file_id: str) -> str:
        return self.call(f"GET /files/{file_id}/content", lambda c: c.files.content(file_id)).text


def as_dict(obj: Any) -> dict:
    """An SDK object (a pydantic model) as the plain dict the records and line reader use."""
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None) or getattr(obj, "to_dict", None)
    if dump is None:
        raise BatchAPIError(f"unexpected answer {str(obj)[:200]}")
    return dump()


def _body_of(exc: Any) -> Any:
    """The error body of an SDK status error as the server sent it (the SDK's `body` is only
    its "error" member)."""
    try:
        return exc.response.json()
    except Exception:
        return exc.body if getattr(exc, "body", None) is not None else str(exc)


def _retry_after(exc: Any) -> float | None:
    try:
        return retry_after(exc.response)
    except Exception:
        return None
