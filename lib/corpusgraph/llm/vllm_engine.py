"""The `vllm` backend: a ChatModel that owns an in-process vLLM engine.

With `llm.backend: vllm` each Ray worker actor (passes.llm._LLMWorker) builds one of these in
its constructor, so the actor owns a `vllm.LLM` engine on its GPU (ask Ray for it with
`ray.num_gpus_per_actor`) and every batch Ray Data hands the actor goes to the engine as one
`LLM.chat` call, which vLLM schedules with continuous batching. No HTTP server, no port.

JSON-schema requests use vLLM's structured outputs (`StructuredOutputsParams(json=...)`, vLLM
0.10.2 and later; the older `GuidedDecodingParams(json=...)` where that is what is installed).
Answers go through the same response cache as the HTTP backends, under the same key.

Status: vllm cannot be installed on the machines this project is built on (no GPU it supports,
no model hub), so this backend is exercised only against a fake engine (request -> engine
parameters, outputs -> results, cache, failures); tests/unit/llm/test_vllm_engine.py also holds a
test against the real engine that runs where vllm, CUDA and a local model are present.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.chat_cache import from_stored, lookup, request_key, stored

__all__ = ["EngineParams", "VLLMChatModel", "VLLMUnavailable", "engine_params", "result_from_output"]

MISSING = (
    "llm.backend 'vllm' needs the `vllm` package, which is not installed in this environment. "
    "Install it on GPU nodes (`pip install vllm`, a build matching their CUDA), or use llm.backend "
    "'openai' against a `vllm serve` endpoint instead (conf/cluster.yaml shows both)."
)


class VLLMUnavailable(ImportError):
    """vllm is not importable here; the message says what to do instead."""


@dataclass(frozen=True)
class EngineParams:
    """What the engine is asked for one request; the pure half of the sampling parameters."""

    max_tokens: int
    temperature: float
    json_schema: Mapping[str, Any] | None


def engine_params(req: ChatRequest) -> EngineParams:
    return EngineParams(max_tokens=int(req.max_tokens), temperature=float(req.temperature),
                        json_schema=req.json_schema)


def vllm_sampling_params(params: EngineParams):
    """vllm.SamplingParams for `params`, with the schema as a structured-output constraint."""
    from vllm import SamplingParams

    kwargs: dict[str, Any] = {"max_tokens": params.max_tokens, "temperature": params.temperature}
    if params.json_schema is not None:
        schema = dict(params.json_schema)
        try:  # vLLM >= 0.10.2; the guided_* names were removed in 0.12
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(json=schema)
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams

            kwargs["guided_decoding"] = GuidedDecodingParams(json=schema)
    return SamplingParams(**kwargs)


def load_vllm_engine(model: str, engine_args: Mapping[str, Any]):
    """A `vllm.LLM` for `model`; engine_args (llm.vllm_engine_args) are passed as they are."""
    try:
        from vllm import LLM
    except ImportError as exc:
        raise VLLMUnavailable(MISSING) from exc
    return LLM(model=model, **dict(engine_args))


def result_from_output(req_id: str, output: Any) -> ChatResult:
    """One vLLM RequestOutput -> ChatResult; an output without a completion is an error row."""
    completions = getattr(output, "outputs", None) or []
    if not completions:
        return ChatResult(id=req_id, text=None, error="vllm returned no completion")
    first = completions[0]
    tokens_in = len(getattr(output, "prompt_token_ids", None) or [])
    tokens_out = len(getattr(first, "token_ids", None) or [])
    return ChatResult(id=req_id, text=first.text, tokens_in=tokens_in, tokens_out=tokens_out,
                      finish_reason=getattr(first, "finish_reason", None))


class VLLMChatModel:
    """ChatModel over an in-process engine with `LLM.chat(messages_list, sampling_params=[...])`.

    engine / make_sampling: injected by tests (a fake engine, and a mapping that keeps the
    EngineParams); by default the real vllm.LLM and vllm_sampling_params. One engine call runs
    at a time (a lock): vLLM's LLM class is not safe to call from two threads, and it batches
    the whole call itself, so overlapping batches of the actor gain nothing by running together.
    """

    def __init__(
        self,
        model: str,
        cache: ResponseCache | None,
        engine_args: Mapping[str, Any] | None = None,
        *,
        engine: Any = None,
        make_sampling: Callable[[EngineParams], Any] | None = None,
    ) -> None:
        self.model = model
        self.cache = cache
        self.engine = engine if engine is not None else load_vllm_engine(model, engine_args or {})
        self._make_sampling = make_sampling or vllm_sampling_params
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"VLLMChatModel(model={self.model!r})"

    def _key(self, req: ChatRequest) -> str:
        return request_key(self.model, req)

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        requests = list(requests)
        keys = [self._key(r) for r in requests]
        hits = lookup(self.cache, keys)
        results: list[ChatResult | None] = [None] * len(requests)
        todo = []
        for i, (req, key) in enumerate(zip(requests, keys)):
            if key in hits:
                results[i] = from_stored(req, hits[key])
            else:
                todo.append(i)
        if todo:
            for i, res in zip(todo, self._generate([requests[i] for i in todo])):
                results[i] = res
                if res.error is None and self.cache is not None:
                    try:
                        self.cache.put(keys[i], stored(res))
                    except Exception:
                        pass  # the answer is still good; it will just be paid for again next run
        return results  # type: ignore[return-value]

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """One engine call for the batch; a failure becomes an error result per request."""
        start = time.monotonic()
        try:
            sampling = [self._make_sampling(engine_params(r)) for r in requests]
            with self._lock:
                outputs = list(self.engine.chat([[dict(m) for m in r.messages] for r in requests],
                                                sampling_params=sampling, use_tqdm=False))
            if len(outputs) != len(requests):
                raise RuntimeError(f"engine returned {len(outputs)} outputs for {len(requests)} requests")
            results = [result_from_output(r.id, o) for r, o in zip(requests, outputs)]
        except Exception as exc:  # the contract: one bad batch never loses its rows
            results = [ChatResult(id=r.id, text=None, error=f"vllm {type(exc).__name__}: {exc}") for r in requests]
        # The engine works on the batch as a whole: each request is charged the batch's share.
        share = (time.monotonic() - start) / max(1, len(requests))
        for res in results:
            res.seconds = share
        return results

    def shutdown(self) -> None:
        """Drop the engine (and its GPU memory) with the actor that owns it."""
        self.engine = None
