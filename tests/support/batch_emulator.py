"""A local emulator of OpenAI's Batch API (/v1/files, /v1/batches) answering with the scripted model.

A test harness, never a product default. Files are uploaded (multipart, purpose "batch") and
read back (/v1/files/{id}/content); a batch validates its input file (JSON lines with a unique
custom_id, method POST, the batch's endpoint as url, a body) and completes `--delay-s` seconds
after it was created: each line is answered as tests/support/scripted_server.py answers the
same body synchronously (same text, same cl100k usage), into an output file of
{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"} lines. It also
serves POST /v1/chat/completions itself, so the synchronous path sees the very same answers.

Faults, set by POST /control (JSON, any of):
  fail_lines: N, fail_status: S   the next N lines processed get HTTP S (default 500) in the error file
  expire_batches: K, expire_keep: F   the next K batches created expire at their deadline with only
                                      the first F (fraction) of their lines answered; the rest get
                                      error code batch_expired
  delay_s: X                      batches created from now on complete X seconds after creation

GET /stats: {"lines_submitted", "lines_answered", "batches", "sync_served", "submitted_ids"}.
With --log PATH every event is appended to PATH as it happens: "submitted <batch> <custom_id>"
for each line of a created batch, "answered <batch> <custom_id>" for each line given an answer
(what would be paid for), "failed ..." and "expired ..." for the others, "sync <n>" per
synchronous answer.

    python tests/support/batch_emulator.py [--port 0] [--delay-s 2] [--log PATH]

The first stdout line is the base URL (".../v1").
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time

from aiohttp import web

try:
    from tests.support.child_server import ChildServer, run_server, serve_forever
    from tests.support.scripted_server import _tokens, answer_for
except ImportError:  # run as a script: its own folder is on sys.path
    from child_server import ChildServer, run_server, serve_forever
    from scripted_server import _tokens, answer_for


def completion(body: dict, rid: str) -> dict:
    """The scripted server's answer to a chat body, as a /v1/chat/completions response."""
    content = answer_for(body)
    prompt = sum(_tokens(m.get("content") or "") + 4 for m in body.get("messages") or []) + 3
    out = _tokens(content)
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=status)


def make_app(delay_s: float = 2.0, log_path: str | None = None, *,
             prefixes: tuple[tuple[str, str], ...] = (("/v1", "/v1/chat/completions"),), line_check=None,
             create_check=None, own_routes: bool = True, middlewares=(), answer=None) -> web.Application:
    """The emulator's app. The conformance servers (provider_server.py) reuse it with their own
    (route prefix, batch endpoint and line url) pairs (Azure: /openai with /chat/completions,
    /openai/v1 with /v1/chat/completions), a `line_check(body) -> (status, error body) | None` that
    refuses a line's body as the synchronous endpoint would (an error line), a
    `create_check(body)` for the batch's own settings, and no routes of their own (own_routes
    False: no chat, control or stats here), and an `answer(body, rid)` of their own for a line
    (a reasoning model's, say; by default the scripted server's)."""
    answer = answer or completion
    ids = itertools.count(1)
    files: dict[str, dict] = {}
    batches: dict[str, dict] = {}
    control = {"delay_s": delay_s, "fail_lines": 0, "fail_status": 500, "expire_batches": 0, "expire_keep": 0.5}
    stats = {"lines_submitted": 0, "lines_answered": 0, "batches": 0, "sync_served": 0, "submitted_ids": []}
    log = open(log_path, "a", buffering=1) if log_path else None  # line-buffered: each event as it happens

    def note(*words) -> None:
        if log is not None:
            log.write(" ".join(str(w) for w in words) + "\n")

    def new_file(data: bytes, filename: str, purpose: str) -> dict:
        fid = f"file-{next(ids):06d}"
        files[fid] = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                      "filename": filename, "purpose": purpose, "data": data}
        return files[fid]

    def public(f: dict) -> dict:
        return {k: v for k, v in f.items() if k != "data"}

    async def upload(request: web.Request) -> web.Response:
        form = await request.post()
        up = form.get("file")
        if up is None or not hasattr(up, "file"):
            return _error(400, "multipart field 'file' is required")
        if form.get("purpose") != "batch":
            return _error(400, f"purpose must be 'batch', not {form.get('purpose')!r}")
        return web.json_response(public(new_file(up.file.read(), up.filename or "upload.jsonl", "batch")))

    async def file_meta(request: web.Request) -> web.Response:
        f = files.get(request.match_info["fid"])
        return web.json_response(public(f)) if f else _error(404, "no such file")

    async def file_content(request: web.Request) -> web.Response:
        f = files.get(request.match_info["fid"])
        return web.Response(body=f["data"], content_type="application/octet-stream") if f else _error(404, "no such file")

    def validate(data: bytes, endpoint: str) -> tuple[list[dict], list[dict]]:
        lines, errors, seen = [], [], set()
        for n, raw in enumerate(data.decode("utf-8").splitlines(), 1):
            try:
                obj = json.loads(raw)
            except ValueError:
                errors.append({"code": "invalid_json_line", "message": "not JSON", "line": n})
                continue
            cid = obj.get("custom_id") if isinstance(obj, dict) else None
            if not isinstance(cid, str) or cid in seen:
                errors.append({"code": "duplicate_custom_id" if cid in seen else "missing_custom_id",
                               "message": "custom_id must be a unique string", "line": n})
            elif obj.get("method") != "POST" or obj.get("url") != endpoint or not isinstance(obj.get("body"), dict):
                errors.append({"code": "invalid_request", "message": f"want method POST, url {endpoint}, a body",
                               "line": n})
            else:
                seen.add(cid)
                lines.append(obj)
        return lines, errors

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        f = files.get(body.get("input_file_id") or "")
        if f is None:
            return _error(404, f"no such file {body.get('input_file_id')!r}")
        refused = create_check(body) if create_check is not None else None
        if refused is not None:
            return web.json_response(refused[1], status=refused[0])
        # the endpoint of the longest prefix the request came in under
        endpoint = max(((p, e) for p, e in prefixes if request.path.startswith(p + "/")), key=lambda x: len(x[0]))[1]
        if body.get("endpoint") != endpoint:
            return _error(400, f"only {endpoint} is emulated")
        now = time.time()
        bid = f"batch_{next(ids):06d}"
        lines, errors = validate(f["data"], endpoint)
        b = {"id": bid, "object": "batch", "endpoint": endpoint, "errors": None, "input_file_id": f["id"],
             "completion_window": body.get("completion_window") or "24h", "status": "validating",
             "output_file_id": None, "error_file_id": None, "created_at": int(now), "in_progress_at": None,
             "expires_at": int(now + control["delay_s"]) + 1, "finalizing_at": None, "completed_at": None,
             "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
             "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
             "metadata": body.get("metadata"), "_lines": lines, "_due": now + control["delay_s"], "_expire": False}
        if errors:
            b.update(status="failed", failed_at=int(now), errors={"object": "list", "data": errors})
        else:
            if control["expire_batches"] > 0:
                control["expire_batches"] -= 1
                b["_expire"] = True
            for line in lines:
                note("submitted", bid, line["custom_id"])
                stats["submitted_ids"].append(line["custom_id"])
            stats["lines_submitted"] += len(lines)
        batches[bid] = b
        stats["batches"] += 1
        return web.json_response(view(b))

    def finish(b: dict) -> None:
        """Run the batch's lines: answers, injected failures, and expiry."""
        lines = b["_lines"]
        keep = int(len(lines) * control["expire_keep"]) if b["_expire"] else len(lines)
        out, err = [], []
        for i, line in enumerate(lines):
            cid, rid = line["custom_id"], f"req_{next(ids):06d}"
            if i >= keep:
                err.append({"id": f"batch_req_{rid}", "custom_id": cid, "response": None, "error": {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion window expired."}})
                note("expired", b["id"], cid)
            elif line_check is not None and (refusal := line_check(line["body"])) is not None:
                err.append({"id": f"batch_req_{rid}", "custom_id": cid, "error": None, "response": {
                    "status_code": refusal[0], "request_id": rid, "body": refusal[1]}})
                note("refused", b["id"], cid, refusal[0])
            elif control["fail_lines"] > 0:
                control["fail_lines"] -= 1
                status = int(control["fail_status"])
                err.append({"id": f"batch_req_{rid}", "custom_id": cid, "error": None, "response": {
                    "status_code": status, "request_id": rid,
                    "body": {"error": {"message": f"emulated HTTP {status}", "type": "server_error"}}}})
                note("failed", b["id"], cid, status)
            else:
                out.append({"id": f"batch_req_{rid}", "custom_id": cid, "error": None, "response": {
                    "status_code": 200, "request_id": rid, "body": answer(line["body"], f"chatcmpl-{rid}")}})
                note("answered", b["id"], cid)
                stats["lines_answered"] += 1
        now = int(time.time())
        if out:
            b["output_file_id"] = new_file("".join(json.dumps(o) + "\n" for o in out).encode(), f"{b['id']}_output.jsonl",
                                           "batch_output")["id"]
        if err:
            b["error_file_id"] = new_file("".join(json.dumps(e) + "\n" for e in err).encode(), f"{b['id']}_error.jsonl",
                                          "batch_output")["id"]
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err) - (len(lines) - keep)}
        b.update(finalizing_at=now, **({"status": "expired", "expired_at": now} if b["_expire"]
                                       else {"status": "completed", "completed_at": now}))

    def advance(b: dict) -> dict:
        if b["status"] in ("validating", "in_progress"):
            if time.time() >= b["_due"]:
                finish(b)
            elif b["status"] == "validating":
                b.update(status="in_progress", in_progress_at=int(time.time()))
        return b

    def view(b: dict) -> dict:
        return {k: v for k, v in b.items() if not k.startswith("_")}

    async def get_batch(request: web.Request) -> web.Response:
        b = batches.get(request.match_info["bid"])
        return web.json_response(view(advance(b))) if b else _error(404, "no such batch")

    async def cancel(request: web.Request) -> web.Response:
        b = batches.get(request.match_info["bid"])
        if b is None:
            return _error(404, "no such batch")
        if b["status"] in ("validating", "in_progress"):  # no line has run: each gets batch_cancelled
            err = [{"id": f"batch_req_{next(ids):06d}", "custom_id": line["custom_id"], "response": None,
                    "error": {"code": "batch_cancelled", "message": "The batch was cancelled."}} for line in b["_lines"]]
            if err:
                b["error_file_id"] = new_file("".join(json.dumps(e) + "\n" for e in err).encode(),
                                              f"{b['id']}_error.jsonl", "batch_output")["id"]
            b.update(status="cancelled", cancelled_at=int(time.time()))
        return web.json_response(view(b))

    async def list_batches(request: web.Request) -> web.Response:
        ordered = sorted(batches.values(), key=lambda b: b["id"], reverse=True)  # newest first
        after = request.query.get("after")
        if after:
            ordered = [b for b in ordered if b["id"] < after]
        limit = max(1, min(100, int(request.query.get("limit", 20))))
        page = [view(advance(b)) for b in ordered[:limit]]
        return web.json_response({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None, "has_more": len(ordered) > limit})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        stats["sync_served"] += 1
        note("sync", stats["sync_served"])
        return web.json_response(completion(body, f"chatcmpl-sync-{stats['sync_served']}"))

    async def set_control(request: web.Request) -> web.Response:
        body = await request.json()
        unknown = set(body) - set(control)
        if unknown:
            return _error(400, f"unknown control keys {sorted(unknown)}")
        control.update(body)
        return web.json_response(control)

    async def get_stats(request: web.Request) -> web.Response:
        return web.json_response(stats)

    app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=list(middlewares))
    for prefix, _ in prefixes:
        app.router.add_post(f"{prefix}/files", upload)
        app.router.add_get(f"{prefix}/files/{{fid}}", file_meta)
        app.router.add_get(f"{prefix}/files/{{fid}}/content", file_content)
        app.router.add_post(f"{prefix}/batches", create)
        app.router.add_get(f"{prefix}/batches", list_batches)
        app.router.add_get(f"{prefix}/batches/{{bid}}", get_batch)
        app.router.add_post(f"{prefix}/batches/{{bid}}/cancel", cancel)
    if own_routes:
        app.router.add_post(f"{prefixes[0][0]}/chat/completions", chat)
        app.router.add_post("/control", set_control)
        app.router.add_get("/stats", get_stats)
    return app


class BatchEmulator(ChildServer):
    """This emulator in a child process on a free port; `control(**faults)` and `stats()` talk to it."""

    def __init__(self, delay_s: float = 2.0, log: str | None = None):
        super().__init__(__file__, "--port", "0", "--delay-s", str(delay_s), *(["--log", str(log)] if log else []))

    def control(self, **settings) -> dict:
        import urllib.request

        req = urllib.request.Request(self.base_url.removesuffix("/v1") + "/control", data=json.dumps(settings).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict:
        return self.get_json("/stats")


@contextlib.contextmanager
def running(delay_s: float = 2.0, log: str | None = None):
    with BatchEmulator(delay_s, log) as server:
        yield server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay-s", type=float, default=2.0, help="seconds from a batch's creation to its completion")
    p.add_argument("--log", help="append every submitted, answered, failed and expired line to this file")
    args = p.parse_args()
    run_server(serve_forever(make_app(args.delay_s, args.log), args.port))


if __name__ == "__main__":
    main()
