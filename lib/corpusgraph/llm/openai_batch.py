"""The `openai_batch` backend: a ChatModel whose requests go as OpenAI Batch API jobs.

`complete(requests)` keeps the protocol of base.py (one result per request, in order, a failed
request an error result), but the answers come from JSON-lines batches: the requests not in the
response cache are written one per line ({"custom_id", "method": "POST", "url":
"/v1/chat/completions", "body"}, the format `vllm run-batch` also reads), uploaded to /v1/files
(purpose "batch"), and run by POST /v1/batches; the batch is polled until it ends, and its
output and error files are read line by line. custom_id is the request's cache key, so a line
matches its request whatever the order of the files, and identical requests go once.

Paying once. Before anything is uploaded, a record of the batch (its lines' keys) is written
atomically to `state_dir` (one JSON file per batch), and rewritten with the file id and then the
batch id as they come back. A later call that needs any of those keys (the rerun after a crashed
driver) adopts the live record and polls that batch instead of submitting the lines again; a
record with a file id but no batch id is matched to the batch created from that file (batches
are listed) before a new one is created. Answers go to the response cache as the synchronous
client stores them (same key, same value), so a rerun, or the synchronous client, pays nothing.

Failures, per line, as the synchronous client treats them: a 429 or 5xx answer, a line the
server never ran (expired or cancelled batch, missing from both files) or a model timeout is
sent again in a new batch (only those lines), up to `max_retries` more batches; any other error
(a 4xx, a 200 without an answer, a batch that failed validation) is an error result at once,
which the stage records as a failed row, retried by the next run. One exception, as the
synchronous client makes it: a reasoning model's answer cut to nothing by its limit (the hidden
reasoning spent it; RequestShaper.widens) goes once more in a batch of its own with
llm.reasoning_retry_tokens, and its result counts the tokens of both lines. An API that cannot be reached
while polling leaves the record live: the lines become error results and the next run resumes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from typing import Sequence


from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.batch_api import BatchAPI, BatchAPIError, as_dict
from corpusgraph.llm.batch_records import BatchRecords, line_outcome
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.chat_cache import from_stored, lookup, request_key
from corpusgraph.llm.profiles import profile
from corpusgraph.llm.routes import Route, TokenSource, azure_uses_v1
from corpusgraph.llm.shape import RequestShaper, after_widening

__all__ = ["OpenAIBatchChatModel", "BatchRecords", "BatchAPIError", "ENDPOINT"]

ENDPOINT = "/v1/chat/completions"
_TERMINAL = frozenset({"completed", "expired", "failed", "cancelled"})
_FIND_PAGES = 20  # pages of 100 batches searched for the one a file was submitted as


class OpenAIBatchChatModel:
    """A chat model over one endpoint's /v1/files and /v1/batches (see the module docstring).

    `submit(requests)` only submits (what is not cached or already in a live batch); the stage
    runner submits every chunk of a stage's rows first, so the batches run side by side, then
    calls `complete` chunk by chunk, which waits for the chunk's batches.
    """

    def __init__(self, model: str, base_url: str, *, state_dir: str | Path, api_key: str | None = None,
                 cache: ResponseCache | None = None, poll_s: float = 30.0, completion_window: str = "24h",
                 max_lines: int = 50_000, max_bytes: int = 100_000_000, max_retries: int = 3,
                 timeout_s: float = 180.0, max_wait_s: float | None = None, shaper: RequestShaper | None = None,
                 route: Route | None = None, tokens: TokenSource | None = None, log=None) -> None:
        """shaper, route, tokens: the endpoint's request shaping, URLs and Entra ID token source
        (factory.chat_endpoint); by default an openai_compatible endpoint at base_url."""
        self.model, self.base_url, self.api_key, self.cache = model, base_url.rstrip("/"), api_key, cache
        self.records = BatchRecords(state_dir)
        self.poll_s, self.completion_window, self.max_wait_s = poll_s, completion_window, max_wait_s
        self.max_lines, self.max_bytes, self.max_retries = max_lines, max_bytes, max_retries
        self.timeout_s = timeout_s
        self.shaper = shaper or RequestShaper(profile("openai_compatible"), model)
        self.route = route or Route(self.shaper.profile)
        self.tokens = tokens
        # A line's url and the batch's endpoint: the profile's (OpenAI /v1/chat/completions, Azure's
        # dated API /chat/completions; Azure's v1 API the /v1 form, an assumption: its batch page
        # shows only /v1/responses lines).
        azure = self.route.profile.auth == "azure"
        self.line_url = ("/v1/chat/completions" if azure and azure_uses_v1(self.route.api_version)
                         else self.route.profile.batch_url or ENDPOINT)
        self._log = log or (lambda msg: print(f"[corpusgraph]   {msg}", file=sys.stderr, flush=True))
        self._live: dict[str, dict] = {}  # record name -> record, batches this process polls
        self._keysets: dict[str, set[str]] = {}
        self._reqs: dict[str, ChatRequest] = {}  # key -> request, for lines that may need resubmitting
        self._fresh: dict[str, ChatResult] = {}  # answers fetched here, not yet handed out (paid, not cached)
        self._failed: dict[str, ChatResult] = {}  # final errors, not yet handed out
        # Lines sent (again) with the widened limit, and the cut first answers whose tokens their
        # results will count (paid too).
        self._wide: set[str] = set()
        self._cut: dict[str, ChatResult] = {}
        self._seen: dict[str, tuple] = {}  # batch id -> last (status, counts) logged
        self.api = BatchAPI(self.base_url, self.route, api_key, tokens, timeout_s, max_retries)

    def __repr__(self) -> str:  # no api_key: reprs end up in logs
        return f"OpenAIBatchChatModel(model={self.model!r}, base_url={self.base_url!r}, state={str(self.records.folder)!r})"

    # -- public API ----------------------------------------------------------------------------
    def submit(self, requests: Sequence[ChatRequest]) -> None:
        """Submit what these requests need (nothing for cached ones or ones in a live batch)."""
        requests = list(requests)
        self._prepare(requests, [self._key(r) for r in requests], [None] * len(requests), register=False)

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        requests = list(requests)
        keys = [self._key(r) for r in requests]
        results: list[ChatResult | None] = [None] * len(requests)
        wanted = self._prepare(requests, keys, results, register=True)
        try:
            if wanted:
                self._wait(set(wanted))
            handed: set[str] = set()
            for i, (req, key) in enumerate(zip(requests, keys)):
                if results[i] is not None:
                    continue
                res = self._fresh.get(key) or self._failed.get(key)
                if res is None:  # a bug here, not a server problem: losing a row silently would be worse
                    raise AssertionError(f"no batch result for request {req.id}")
                # A repeated request was sent once: its copies are answered without a call.
                results[i] = dataclasses.replace(res, id=req.id, cached=key in handed)
                handed.add(key)
            for key in handed:
                self._fresh.pop(key, None)
                self._failed.pop(key, None)
        finally:
            for key in wanted:
                self._reqs.pop(key, None)
                self._wide.discard(key)
                self._cut.pop(key, None)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self.api.close()

    # -- what to send ----------------------------------------------------------------------------
    def _key(self, req: ChatRequest) -> str:
        return request_key(self.model, req)

    def _prepare(self, requests: list[ChatRequest], keys: list[str], results: list, register: bool) -> dict:
        """Fill cache hits into `results`; submit what no live batch covers. Returns {key: request}
        of the requests still to be answered."""
        unseen = [k for k in dict.fromkeys(keys) if k not in self._fresh and k not in self._failed]
        hits = lookup(self.cache, unseen)
        wanted: dict[str, ChatRequest] = {}
        for i, (req, key) in enumerate(zip(requests, keys)):
            if key in hits:
                results[i] = from_stored(req, hits[key])
            else:
                wanted.setdefault(key, req)
        if register:
            self._reqs.update(wanted)
        need = {k: r for k, r in wanted.items() if k not in self._fresh and k not in self._failed}
        if need:
            covered = self._adopt(need)
            self._submit({k: r for k, r in need.items() if k not in covered}, attempt=0)
        return wanted

    def _adopt(self, need: dict[str, ChatRequest]) -> set[str]:
        """Keys of `need` that a live batch (of this process or a recorded one) will answer."""
        covered: set[str] = set()
        for rec in self.records.live(self.base_url, self.model):
            keys = self._keysets.get(rec["name"]) or set(rec["keys"])
            if keys.isdisjoint(need):
                continue
            if rec["name"] not in self._live:
                if rec["state"] == "uploading":  # stopped before its file reached the server
                    self._done(rec, state_note="abandoned before upload")
                    continue
                try:
                    if rec["state"] == "uploaded":
                        self._create(rec)
                except BatchAPIError as exc:
                    self._fail(keys & need.keys(), f"batch of record {self.records.path(rec)} could not be created: {exc}")
                    continue
                self._track(rec)
                self._log(f"batch {rec['batch_id']}: resuming ({len(keys)} requests, record {self.records.path(rec).name})")
            covered |= keys
        return covered

    def _submit(self, reqs: dict[str, ChatRequest], attempt: int) -> None:
        for chunk in self._chunks(reqs):
            rec = self.records.new(self.base_url, self.model, [k for k, _ in chunk], attempt)
            if all(k in self._wide for k, _ in chunk):  # a rerun that adopts it widens none again
                rec["widened"] = True
            try:
                rec.update(state="uploaded", input_file_id=self._upload(rec["name"], b"".join(line for _, line in chunk)))
            except BatchAPIError as exc:  # nothing was submitted: the record has no further use
                self._done(rec, state_note=f"upload failed: {exc}")
                self._fail([k for k, _ in chunk], f"batch file upload failed: {exc}")
                continue
            self.records.write(rec)
            try:
                self._create(rec, look_first=False)  # just uploaded: no batch can be made of it yet
            except BatchAPIError as exc:  # the record stays: the next run finds the batch or creates it
                self._fail([k for k, _ in chunk], f"batch could not be created: {exc}; record {self.records.path(rec)} kept")
                continue
            self._track(rec)
            self._log(f"batch {rec['batch_id']}: {len(chunk)} requests submitted (record {self.records.path(rec).name})")

    def _chunks(self, reqs: dict[str, ChatRequest]):
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for key, req in reqs.items():
            line = (json.dumps({"custom_id": key, "method": "POST", "url": self.line_url,
                                "body": self.shaper.body(req, widened=key in self._wide)},
                               ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
            if chunk and (len(chunk) >= self.max_lines or size + len(line) > self.max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append((key, line))
            size += len(line)
        if chunk:
            yield chunk

    def _track(self, rec: dict) -> None:
        self._live[rec["name"]] = rec
        self._keysets[rec["name"]] = set(rec["keys"])

    def _done(self, rec: dict, state_note: str, **extra) -> None:
        rec.update(state="done", note=state_note, finished=time.time(), **extra)
        self.records.write(rec)
        self._live.pop(rec["name"], None)
        self._keysets.pop(rec["name"], None)

    def _fail(self, keys, message: str) -> None:
        for key in keys:
            self._failed[key] = ChatResult(id=key, text=None, error=message)

    # -- waiting and collecting ----------------------------------------------------------------
    def _wait(self, wanted: set[str]) -> None:
        until = None if self.max_wait_s is None else time.monotonic() + self.max_wait_s
        while True:
            pending = [r for r in list(self._live.values()) if not self._keysets[r["name"]].isdisjoint(wanted)]
            if not pending:
                return
            for rec in pending:
                try:
                    batch = as_dict(self._call(f"GET /batches/{rec['batch_id']}",
                                       lambda c: c.batches.retrieve(rec["batch_id"])))
                except BatchAPIError as exc:
                    if exc.retryable:  # the API is down: try again on the next run
                        self._give_up(rec, f"could not be polled: {exc}")
                    else:  # the server does not know the batch (deleted, another account): its lines go again
                        self._done(rec, state_note=f"lost: {exc}")
                        self._resubmit({k: f"batch {rec['batch_id']} lost: {exc}" for k in rec["keys"]},
                                       int(rec.get("attempt") or 0) + 1, rec["batch_id"])
                    continue
                self._progress(batch)
                if batch.get("status") in _TERMINAL:
                    self._collect(rec, batch)
            if until is not None and time.monotonic() > until:
                for rec in [r for r in list(self._live.values()) if not self._keysets[r["name"]].isdisjoint(wanted)]:
                    self._give_up(rec, f"not finished within llm.batch.max_wait_s ({self.max_wait_s:g} s)")
                return
            if any(not self._keysets[r["name"]].isdisjoint(wanted) for r in self._live.values()):
                time.sleep(self.poll_s)

    def _give_up(self, rec: dict, why: str) -> None:
        """Stop waiting on a batch in this run; its record stays live for the next run to resume."""
        self._fail(self._keysets.pop(rec["name"], set()), f"batch {rec['batch_id']} {why}; record "
                   f"{self.records.path(rec)} kept: a rerun resumes polling it")
        self._live.pop(rec["name"], None)

    def _progress(self, batch: dict) -> None:
        counts = batch.get("request_counts") or {}
        state = (batch.get("status"), counts.get("completed"), counts.get("failed"))
        if self._seen.get(batch.get("id")) != state:
            self._seen[batch.get("id")] = state
            self._log(f"batch {batch.get('id')}: {state[0]}, {counts.get('completed', 0)}/{counts.get('total', '?')} "
                      f"done, {counts.get('failed', 0)} failed")

    def _collect(self, rec: dict, batch: dict) -> None:
        status = batch.get("status")
        lines: dict[str, dict] = {}
        try:
            # The error file first: where a line is in both, its answer wins.
            for fid in (batch.get("error_file_id"), batch.get("output_file_id")):
                for raw in (self._download(fid).splitlines() if fid else []):
                    if raw.strip():
                        obj = json.loads(raw)
                        if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
                            lines[obj["custom_id"]] = obj
        except (BatchAPIError, ValueError) as exc:
            self._give_up(rec, f"results could not be read: {exc}")
            return
        seconds = time.time() - float(rec.get("created") or time.time())
        ok: dict[str, ChatResult] = {}
        retry: dict[str, str] = {}
        widen: dict[str, ChatRequest] = {}
        if rec.get("widened"):  # adopted from an earlier run: a line sent again stays wide
            self._wide.update(rec["keys"])
        for key in rec["keys"]:
            verdict, res = line_outcome(key, lines.get(key), batch)
            res.seconds = seconds
            wide = key in self._wide
            if wide and verdict != "retry":
                # The second line's result counts the cut first one's tokens (a process that
                # resumed this batch never saw the first: its tokens are in that run's llm_calls).
                first = self._cut.pop(key, None)
                res = after_widening(first, res) if first is not None else dataclasses.replace(res, widened=True)
            if verdict == "ok":
                ok[key] = res
            elif verdict == "retry":
                retry[key] = res.error or "no answer"
            elif not wide and key in self._reqs and self.shaper.widens(res, self._reqs[key].max_tokens):
                self._cut[key] = res
                widen[key] = self._reqs[key]
            else:
                self._failed[key] = res
        if ok and self.cache is not None:
            try:
                self.cache.put_many({k: {"text": r.text, "tokens_in": r.tokens_in, "tokens_out": r.tokens_out,
                                         "finish_reason": r.finish_reason} for k, r in ok.items()})
            except Exception:
                pass  # the answers are still good; they will just be paid for again next run
        self._fresh.update(ok)
        self._done(rec, state_note=f"collected ({status})", status=status,
                   outcome={"ok": len(ok), "retry": len(retry), "failed": len(rec["keys"]) - len(ok) - len(retry)})
        self._resubmit(retry, int(rec.get("attempt") or 0) + 1, f"{batch.get('id')} ({status})")
        if widen:
            self._wide.update(widen)
            self._log(f"batch {batch.get('id')}: {len(widen)} answers cut to nothing by the model's hidden reasoning "
                      f"sent again with room for {self.shaper.retry_tokens} completion tokens")
            self._submit(widen, int(rec.get("attempt") or 0))

    def _resubmit(self, retry: dict[str, str], attempt: int, what: str) -> None:
        """Send the lines that got no answer again, within max_retries more batches; lines this
        process has no request for are sent when a call next needs them."""
        again = {k: self._reqs[k] for k in retry if k in self._reqs}
        if again and attempt <= self.max_retries:
            self._log(f"batch {what}: {len(again)} lines without an answer sent again")
            self._submit(again, attempt)
        else:
            for key in again:
                self._failed[key] = ChatResult(id=key, text=None, error=f"{retry[key]} (gave up after {attempt} batches)")

    # -- the API side (llm/batch_api.py) ------------------------------------------------------------
    def _call(self, what: str, fn, tries: int | None = None):
        return self.api.call(what, fn, tries)

    def _upload(self, name: str, data: bytes) -> str:
        return self.api.upload(f"corpusgraph-{name}.jsonl", data)

    def _download(self, file_id: str) -> str:
        return self.api.download(file_id)

    def _create(self, rec: dict, look_first: bool = True) -> None:
        """POST /batches for the record's uploaded file, once: before a retry (and first, for a
        record found after a crash) the batch made from that file is looked for, so a create whose
        answer was lost is never repeated."""
        for attempt in range(self.max_retries + 3):
            found = self._find_batch(rec["input_file_id"]) if look_first or attempt else None
            if found is None:
                try:
                    found = as_dict(self._call("POST /batches", lambda c: c.batches.create(
                        input_file_id=rec["input_file_id"], endpoint=self.line_url,
                        completion_window=self.completion_window, metadata={"corpusgraph_record": rec["name"]}),
                        tries=1))
                except BatchAPIError as exc:
                    if not exc.retryable or attempt == self.max_retries + 2:
                        raise
                    time.sleep(random.uniform(0, min(30.0, 0.5 * 2**attempt)))
                    continue
            rec.update(state="submitted", batch_id=str(found["id"]), submitted=time.time())
            self.records.write(rec)
            return

    def _find_batch(self, input_file_id: str) -> dict | None:
        after = None
        for _ in range(_FIND_PAGES):
            page = self._call("GET /batches", lambda c: c.batches.list(limit=100, **({"after": after} if after else {})))
            data = [as_dict(b) for b in (page.data or [])]
            for b in data:
                if isinstance(b, dict) and b.get("input_file_id") == input_file_id and b.get("id"):
                    return b
            if not getattr(page, "has_more", False) or not data:
                return None
            after = data[-1].get("id")
        return None
