"""The real bundled model behind the real server, through the same client a deployment uses.

Needs llama-cpp-python (`make setup`); a missing install fails here with that instruction
rather than skipping, so a broken setup cannot pass this tier unnoticed.
"""

import socket

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.llm import ChatRequest, EmbeddedServer, EmbeddedServerError, open_chat_model, parse_json_answer

pytestmark = pytest.mark.llm

TYPES = ["PERSON", "ORGANIZATION", "LOCATION"]
SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "maxItems": 4,  # without it the 135M model repeats items until the token limit
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string", "enum": TYPES}},
                "required": ["name", "type"],
            },
        },
        "summary": {"type": "string"},
    },
    "required": ["entities", "summary"],
}
TEXTS = [
    "Satya Nadella leads Microsoft from its offices in Redmond.",
    "Marie Curie worked at the University of Paris with Pierre Curie.",
    "The Port of Rotterdam signed a deal with Maersk in the Netherlands.",
]


def requests():
    return [
        ChatRequest(
            id=f"t{i}",
            messages=(
                {"role": "system", "content": "Extract named entities as JSON. Keep the summary to one sentence."},
                {"role": "user", "content": text},
            ),
            max_tokens=200,
            temperature=0.0,
            json_schema=SCHEMA,
        )
        for i, text in enumerate(TEXTS)
    ]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_schema_constrained_answers_tokens_and_cache(tmp_path):
    server = EmbeddedServer(log_path=tmp_path / "server.log")
    with server:
        port = server.port
        assert server.running and port_open(port)
        assert server.base_url == f"http://127.0.0.1:{port}/v1" and server.model == "smollm2"
        chat = open_chat_model(LLMSection(backend="embedded"), tmp_path / "cache", base_url=server.base_url)
        assert chat.profile == "llama_cpp"

        first = chat.complete(requests())
        assert [r.id for r in first] == ["t0", "t1", "t2"]
        for r in first:
            assert r.error is None, r.error
            assert not r.cached and r.finish_reason in ("stop", "length")
            assert r.tokens_in > 20 and r.tokens_out > 0
            obj, err = parse_json_answer(r.text)
            assert err is None, f"{r.id}: {err}: {r.text!r}"
            assert set(SCHEMA["required"]) <= set(obj)
            assert isinstance(obj["entities"], list) and len(obj["entities"]) <= 4
            for entity in obj["entities"]:
                assert {"name", "type"} <= set(entity) and entity["type"] in TYPES  # the grammar held

        posts_before = (tmp_path / "server.log").read_text().count("POST /v1/chat/completions")
        second = chat.complete(requests())
        assert all(r.cached for r in second)
        assert [r.text for r in second] == [r.text for r in first]
        assert [r.tokens_out for r in second] == [r.tokens_out for r in first]
        assert (tmp_path / "server.log").read_text().count("POST /v1/chat/completions") == posts_before
        # The server runs llm/llama_serve.py's sampler for these greedy schema-bound answers.
        assert "check the chosen token before the whole vocabulary" in (tmp_path / "server.log").read_text()

    assert not server.running
    assert not port_open(port)
    with pytest.raises(EmbeddedServerError, match="not running"):
        server.base_url


def test_a_server_that_dies_at_start_reports_its_log(tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    server = EmbeddedServer(log_path=tmp_path / "bad.log", gguf_path=bogus, startup_timeout_s=60)
    with pytest.raises(EmbeddedServerError, match="exited with code") as info:
        server.start()
    assert "bad.log" in str(info.value)
    assert not server.running
