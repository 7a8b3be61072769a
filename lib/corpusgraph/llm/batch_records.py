"""The batch backend's durable records and its reading of result lines (openai_batch.py).

A record is what makes a batch survive its driver: the keys (custom_ids) of its lines, then the
uploaded file's id, then the batch id, each written before the next step is taken.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Sequence

from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.http_common import error_message
from corpusgraph.llm.openai_http import parse_completion_body

__all__ = ["BatchRecords", "line_outcome", "RETRY_CODES"]

# Line error codes worth another batch: the line never ran, or its model call timed out.
RETRY_CODES = frozenset({"batch_expired", "batch_cancelled", "request_timeout", "rate_limit_exceeded",
                         "server_error", "internal_error"})


class BatchRecords:
    """One JSON file per submitted batch under `folder`, each rewritten atomically (temporary file,
    fsync, rename, fsync of the folder), so a crash leaves the previous or the new version.

    state: uploading (nothing on the server yet) -> uploaded (input_file_id) -> submitted
    (batch_id) -> done (collected, or abandoned before anything was submitted).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def new(self, base_url: str, model: str, keys: Sequence[str], attempt: int) -> dict:
        rec = {"name": f"batch-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}", "base_url": base_url,
               "model": model, "state": "uploading", "attempt": attempt, "created": time.time(),
               "input_file_id": None, "batch_id": None, "keys": list(keys)}
        self.write(rec)
        return rec

    def path(self, rec: dict) -> Path:
        return self.folder / f"{rec['name']}.json"

    def write(self, rec: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(rec)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(rec, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def live(self, base_url: str, model: str) -> list[dict]:
        """Records not done, for this endpoint and model, oldest first."""
        out = []
        for p in sorted(self.folder.glob("batch-*.json")) if self.folder.is_dir() else []:
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if rec.get("state") != "done" and rec.get("base_url") == base_url and rec.get("model") == model:
                out.append(rec)
        return out


def line_outcome(key: str, obj: dict | None, batch: dict) -> tuple[str, ChatResult]:
    """("ok" | "retry" | "fatal", result) for one line of a finished batch."""
    bid, status = batch.get("id"), batch.get("status")
    if status == "failed":
        errors = ((batch.get("errors") or {}).get("data") or []) if isinstance(batch.get("errors"), dict) else []
        why = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors[:3] if isinstance(e, dict)) or "no reason given"
        return "fatal", ChatResult(id=key, text=None, error=f"batch {bid} failed: {why}")
    if obj is None:
        return "retry", ChatResult(id=key, text=None, error=f"no result for this line in batch {bid} ({status})")
    resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
    err = obj.get("error") if isinstance(obj.get("error"), dict) else {}
    code = resp.get("status_code")
    if code == 200:
        res = parse_completion_body(key, resp.get("body"))
        return ("ok" if res.error is None else "fatal"), res  # as synchronously: a 200 without an answer is not retried
    if isinstance(code, int):
        body = resp.get("body")
        msg = error_message(body)
        kind = "retry" if code == 429 or code >= 500 else "fatal"
        return kind, ChatResult(id=key, text=None, error=f"batch {bid}: HTTP {code}: {msg}")
    ecode = err.get("code")
    kind = "retry" if ecode in RETRY_CODES else "fatal"
    return kind, ChatResult(id=key, text=None, error=f"batch {bid}: {ecode}: {err.get('message')}")
