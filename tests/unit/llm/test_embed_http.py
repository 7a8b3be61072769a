"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 (tests/support/embed_server.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from corpusgraph.config import ConfigError, EmbeddingSection, load_config
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.embedders import check_index_model, open_embedder
from corpusgraph.llm.openai_embed import EmbeddingError, OpenAIEmbedder
from tests.support.embed_server import EmbedServer, vector_for

pytestmark = pytest.mark.unit


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_batches_order_normalisation_and_dimension_from_the_answer():
    texts = [f"text number {i}" for i in range(10)]
    with EmbedServer(dim=12) as srv:
        emb = OpenAIEmbedder("fake-embed", srv.base_url, batch_size=4, concurrency=2, api_key="k-123")
        assert emb.dim is None  # unknown until an answer says
        vecs = emb.embed(texts)
    assert vecs.shape == (10, 12) and vecs.dtype == np.float32 and emb.dim == 12
    for text, vec in zip(texts, vecs):  # in input order, unit length, the server's direction
        np.testing.assert_allclose(vec, _unit(vector_for(text, 12)), rtol=1e-5, atol=1e-6)
    assert sorted(len(b["input"]) for b in srv.requests) == [2, 4, 4]
    assert {b["model"] for b in srv.requests} == {"fake-embed"}
    assert set(srv.auth) == {"Bearer k-123"}


def test_5xx_is_retried_and_usage_is_reported_per_request():
    with EmbedServer(dim=4, fail_first=2) as srv:
        emb = OpenAIEmbedder("fake-embed", srv.base_url, batch_size=8, max_retries=3, backoff_base_s=0.01)
        out = emb.embed_many(["alpha beta", "gamma"])
    assert srv.statuses == [500, 500, 200]
    assert out.errors == [None, None] and out.request_of == [0, 0]
    assert out.request_tokens == [3] and out.request_failed == [False]  # the server's prompt_tokens


def test_giving_up_and_4xx_become_errors_per_text_not_exceptions():
    with EmbedServer(dim=4, fail_first=10) as srv:
        emb = OpenAIEmbedder("fake-embed", srv.base_url, batch_size=2, max_retries=1, backoff_base_s=0.01)
        out = emb.embed_many(["a", "b"])
        assert out.failed == 2 and "HTTP 500" in out.errors[0] and "gave up after 2 attempts" in out.errors[0]
        assert srv.statuses == [500, 500]
        srv.fail_first = 0
        out = emb.embed_many(["fine", "reject: too long", "also fine"])
        with pytest.raises(EmbeddingError, match="1 of 3 texts got no vector.*text 1: HTTP 400"):
            emb.embed(["fine", "reject: too long", "also fine"])
    # The request of 2 was refused (400, not retried) and split: only the bad text lost its vector.
    assert out.errors[0] is None and out.errors[2] is None
    assert out.errors[1] == "HTTP 400: input is too long for this model"
    assert all(np.linalg.norm(out.vectors[i]) == pytest.approx(1.0, abs=1e-5) for i in (0, 2))
    assert not out.vectors[1].any()
    assert out.request_failed == [True, False] and out.request_calls == [3, 1]
    # [fine, reject]: 400, then [fine] 200 and [reject] 400; [also fine]: 200. embed() did the same again.
    assert sorted(srv.statuses[2:6]) == [200, 200, 400, 400] and len(srv.statuses) == 10


def test_malformed_answer_and_empty_text_are_clear_errors():
    with EmbedServer(dim=4) as srv:
        srv.short_answer = True
        emb = OpenAIEmbedder("fake-embed", srv.base_url, batch_size=4)
        out = emb.embed_many(["one", "two", "  "])
    assert out.errors[2] == "empty text: nothing to embed"
    assert out.errors[0] == "expected 2 embeddings in 'data', got 1" == out.errors[1]
    assert len(srv.requests) == 1  # a malformed answer is not worth a retry; a blank text is never sent


def test_unreachable_endpoint_is_an_error_row():
    with EmbedServer() as srv:
        url = srv.base_url  # the port is closed once the server has gone
    emb = OpenAIEmbedder("fake-embed", url, max_retries=1, backoff_base_s=0.01)
    out = emb.embed_many(["x"])
    assert "connection error" in out.errors[0]


def test_cache_answers_repeats_without_a_request(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with EmbedServer(dim=6) as srv:
        first = OpenAIEmbedder("fake-embed", srv.base_url, cache=cache).embed_many(["a", "b"])
        again = OpenAIEmbedder("fake-embed", srv.base_url, cache=cache).embed_many(["b", "a", "c"])
        other_model = OpenAIEmbedder("other", srv.base_url, cache=cache).embed_many(["a"])
    assert [len(b["input"]) for b in srv.requests] == [2, 1, 1]  # only "c", then "a" for another model
    assert again.request_of == [-1, -1, 0] and again.cache_hits == 2
    np.testing.assert_array_equal(again.vectors[1], first.vectors[0])
    assert other_model.request_of == [0]


def test_embedder_pickles_for_ray_actors():
    with EmbedServer(dim=3) as srv:
        emb = pickle.loads(pickle.dumps(OpenAIEmbedder("fake-embed", srv.base_url)))
        assert emb.embed(["x"]).shape == (1, 3)


def test_config_selects_backend_and_model_and_hides_the_key(tmp_path):
    with pytest.raises(ConfigError, match="needs embeddings.backend 'openai'"):
        load_config(None, {"embeddings.model": "bge-small"})
    with pytest.raises(ConfigError, match="needs embeddings.api_base"):
        load_config(None, {"embeddings.backend": "openai", "embeddings.model": "bge-small"})
    conf = tmp_path / "c.yaml"
    conf.write_text("embeddings:\n  backend: openai\n  model: bge-small\n  api_base: http://127.0.0.1:9/v1\n"
                    "  api_key: ${EMB_KEY}\n")
    cfg = load_config(conf, env={"EMB_KEY": "s3cret"})
    assert cfg.embeddings.api_key.get_secret_value() == "s3cret"
    assert "s3cret" not in str(cfg.model_dump()) and "s3cret" not in repr(cfg)
    emb = open_embedder(cfg.embeddings, tmp_path)
    assert isinstance(emb, OpenAIEmbedder) and emb.model == "bge-small" and emb.api_key == "s3cret"
    assert open_embedder(EmbeddingSection(), None).model == "all-MiniLM-L6-v2"
    check_index_model("bge-small", cfg.embeddings)
    with pytest.raises(ValueError, match="built with embedding model 'all-MiniLM-L6-v2'.*'bge-small'"):
        check_index_model("all-MiniLM-L6-v2", cfg.embeddings)
