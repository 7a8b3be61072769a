"""The query side on object storage: the service answers from a warehouse and FAISS files that
live only on an S3 server, and `corpusgraph tables` reads that warehouse given only the config.

An S3-compatible server (moto's server mode, tests/distributed/objectstore.py) runs on localhost.
The query tests' small world (tests/support/query_fixtures.py: nine documents, their units, entities,
relationships, communities and reports, written by delta-rs) is built in a local folder, its Delta
tables are copied to s3://corpusgraph/run-q/warehouse, and the local folder is deleted. Each kind's
vectors go where Spark would put them, Parquet files of (id, vector) under an s3a:// hand-off
folder, and the embed step's own FAISS builder (steps.embed.build_index, what its Ray task runs)
reads them from there and uploads <kind>.faiss and <kind>.meta.json to an s3a:// index_dir.

The service is `create_app(config)` with its default engine factory (open_query_engine): the
config names the store only through storage.s3 (no AWS_* variables are set), chat goes to the
fixed-answer test server (it cites [U1]), and questions are embedded by the test embeddings
server (tests/support/embed_server.py), whose vectors built the index. A question that is a unit's
own text finds that unit first, so the answer's first citation is that unit. The last test runs
the embed step's Ray task itself (a local Ray), unpinned since nothing it reads or writes is local.
Grouped with the object-store Spark test; no Spark session is started here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from corpusgraph.storage.ann import IndexParams
from corpusgraph.storage.locations import arrow_filesystem, join, open_delta
from corpusgraph.tables import table_path
from tests.support.child_server import ChildServer
from tests.conftest import REPO
from tests.distributed.objectstore import MotoServer
from tests.support.embed_server import EmbedServer, vector_for
from tests.support.query_fixtures import build_tiny_index
from tests.unit.serving.test_serving import wait_ready

pytestmark = pytest.mark.spark

ROOT = "s3a://corpusgraph/run-q"
WAREHOUSE, INDEX_DIR, HANDOFF = f"{ROOT}/warehouse", f"{ROOT}/index", f"{ROOT}/handoff"
DIM = 8  # the embeddings server's width
EMBED_MODEL = "fake-embed"
KINDS = {"text_unit": ("text_units", "unit_id", "text"), "entity": ("entities", "entity_id", "description"),
         "community_report": ("community_reports", "community_id", "summary")}


def _unit_vectors(texts: list[str]) -> np.ndarray:
    raw = np.stack([vector_for(t, DIM) for t in texts]) if texts else np.zeros((0, DIM), np.float32)
    return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


def _publish(tmp, s3) -> dict[str, str]:
    """The small world's tables on the server, its FAISS files built there; nothing left locally.
    Returns each unit's text by id."""
    from corpusgraph.runner.steps.embed import build_index

    wh, _ = build_tiny_index(tmp / "local")
    fs, base = arrow_filesystem(WAREHOUSE, s3)
    from pyarrow import fs as pafs

    pafs.copy_files(wh, base, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    shutil.rmtree(tmp / "local")

    texts = {}
    for kind, (name, key, column) in KINDS.items():
        rows = open_delta(table_path(WAREHOUSE, name), s3).to_pyarrow_table(columns=[key, column]).to_pylist()
        ids, words = [r[key] for r in rows], [r[column] or "" for r in rows]
        if kind == "text_unit":
            texts = dict(zip(ids, words))
        vectors = pa.array(list(_unit_vectors(words)), type=pa.list_(pa.float32()))
        folder = join(HANDOFF, f"vectors-{kind}")
        hfs, path = arrow_filesystem(folder, s3)
        pq.write_table(pa.table({"id": ids, "vector": vectors}), f"{path}/part-00000.parquet", filesystem=hfs)
        built = build_index(folder, INDEX_DIR, kind, EMBED_MODEL, IndexParams(), DIM, s3)
        assert (built["count"], built["dim"]) == (len(ids), DIM)
    return texts


def _config_file(tmp, s3, chat_url: str, embed_url: str):
    data = {
        "base": str(REPO / "conf" / "local.yaml"),
        "llm": {"backend": "openai", "preflight": False, "api_base": chat_url, "model": "bench", "concurrency": 2, "timeout_s": 30},
        "embeddings": {"backend": "openai", "api_base": embed_url, "model": EMBED_MODEL, "cache": False},
        "storage": {"warehouse": WAREHOUSE, "index_dir": INDEX_DIR, "cache_dir": str(tmp / "cache"),
                    "s3": {"endpoint": s3.endpoint, "region": s3.region, "access_key": s3.access_key,
                           "secret_key": s3.secret_key.get_secret_value(), "path_style": s3.path_style}},
    }
    (tmp / "prompts").symlink_to(REPO / "conf" / "prompts", target_is_directory=True)
    path = tmp / "objectstore.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def world(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("AWS_")]:  # the config alone says where the store is
        monkeypatch.delenv(name)
    with MotoServer(tmp_path) as s3, EmbedServer(dim=DIM, model=EMBED_MODEL) as embed, \
            ChildServer(REPO / "tests" / "support" / "fixed_latency_answer_server.py", "--slots", "4",
                        "--latency-s", "0.01") as chat:
        texts = _publish(tmp_path, s3)
        yield _config_file(tmp_path, s3, chat.base_url, embed.base_url), s3, texts


def test_the_service_answers_from_a_warehouse_and_index_only_on_s3(world, tmp_path):
    from fastapi.testclient import TestClient

    from corpusgraph.config import load_config
    from corpusgraph.storage.vectors import available_kinds
    from serving import create_app

    conf, s3, texts = world
    assert not (tmp_path / "local").exists() and not list(tmp_path.glob("**/*.faiss"))
    assert available_kinds(INDEX_DIR, s3) == sorted(KINDS)
    assert available_kinds(f"{ROOT}/nothing-here", s3) == []

    cfg = load_config(conf)
    with TestClient(create_app(cfg)) as client:
        ready = wait_ready(client, 60.0)
        assert ready.status_code == 200, ready.text
        versions = ready.json()["table_versions"]
        assert versions["documents"] == open_delta(table_path(WAREHOUSE, "documents"), s3).version()

        # A unit's own text as the question: its vector is that unit's, so it is [U1] in the context.
        r = client.post("/v1/query", json={"question": texts["u4"], "method": "basic", "top_k": 3})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["method"] == "basic" and not answer.get("error")
        # The cited unit first, then the rest of the context (top_k units in all).
        cited = [(c["unit_id"], c["doc_id"]) for c in answer["citations"]]
        assert cited[0] == ("u4", "d4") and len(cited) == 3 and all(u[1:] == d[1:] for u, d in cited)
        assert answer["citations"][0]["title"] == "Copper for lanterns"
        assert r.headers["x-index-version"] == ready.json()["index_version"]

        entity = client.get("/v1/entities/e_lumen")
        assert entity.status_code == 200 and entity.json()["entity"]["title"] == "Lumen Guild"


def test_tables_and_export_read_the_s3_warehouse_from_the_config_alone(world, tmp_path):
    conf, _, texts = world
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    run = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "tables", "--conf", str(conf)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    counts = {line.split()[0]: line.split()[1] for line in run.stdout.splitlines() if " rows " in line}
    assert counts["documents"] == "9" and counts["text_units"] == str(len(texts)) and counts["entities"] != "0"

    out = tmp_path / "export"
    run = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "export", "--conf", str(conf), "--format",
                          "parquet", "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert pq.read_table(out / "text_units.parquet").num_rows == len(texts)  # as stored: d9's unit too


@pytest.mark.ray
def test_the_embed_steps_ray_task_builds_and_uploads_an_index_off_the_driver_node(world):
    """With the hand-off folder and index_dir both on S3 the task is not pinned to the driver's
    node: it gets the store's settings as an argument and uploads from its own worker process."""
    from corpusgraph.config import RaySection
    from corpusgraph.runner.passes.base import init_ray
    from corpusgraph.runner.steps.embed import _remote_build
    from corpusgraph.storage.vectors import VectorIndex, available_kinds

    _, s3, texts = world
    init_ray(RaySection(num_cpus=1))
    index_dir = f"{ROOT}/index-from-ray"
    built = _remote_build(join(HANDOFF, "vectors-text_unit"), index_dir, "text_unit", EMBED_MODEL, IndexParams(),
                          DIM, s3)
    assert (built["count"], built["dim"], built["index"]["type"]) == (len(texts), DIM, "flat")
    assert available_kinds(index_dir, s3) == ["text_unit"]
    index = VectorIndex.load(index_dir, "text_unit", s3)
    assert index.model == EMBED_MODEL and index.search(_unit_vectors([texts["u2"]]), 1)[0][0][0] == "u2"
