"""Counting what the LLM stages would send: the real requests, tokenised by the target model's tokenizer.

The extract requests are built by the stage's own packer (`stages.extract.pack_requests`) and the
report prompt by `ReportTask.requests`, so a prompt edit changes the count. For the bundled model
the tokenizer is its GGUF vocabulary over its chat template, the prompt the server evaluates;
for other backends tiktoken with a per-message overhead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pyarrow as pa

from corpusgraph.config import EstimateSection, ExtractSection, LLMSection, ReportsSection
from corpusgraph.estimate.model import CostSections
from corpusgraph.llm.base import ChatRequest
from corpusgraph.prompts import Prompt
from corpusgraph.stages.extract.llm import ExtractPrompts, extract_identity, pack_requests
from corpusgraph.tables import spark_struct

__all__ = ["COUNT_SCHEMA", "ExtractCounting", "counter_spec", "request_counter", "extract_counts", "count_units",
           "report_overhead"]


class _TiktokenCounter:
    """Chat tokens as OpenAI counts them: each message's content plus a fixed per-message overhead,
    plus 3 that prime the reply (the documented rule for the GPT-4 and 4o families)."""

    def __init__(self, encoding: str, overhead: int):
        from corpusgraph.tokens import get_encoding

        self.enc, self.overhead = get_encoding(encoding), overhead

    def text(self, text: str) -> int:
        return len(self.enc.encode_ordinary(text))

    def __call__(self, req: ChatRequest) -> int:
        return sum(self.text(m["content"]) + self.overhead for m in req.messages) + 3


class _GGUFCounter:
    """The bundled model's own tokenizer over its own chat template: the exact prompt the server
    evaluates (equal to llama.cpp's reported prompt_tokens)."""

    def __init__(self, path: str):
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{path} has no chat template: use estimate.tokenizer=tiktoken")

        def token(key: str) -> str:
            tid = int(meta.get(key, -1))
            return self.llm.detokenize([tid], special=True).decode("utf-8", "replace") if tid >= 0 else ""

        self.format = Jinja2ChatFormatter(template, eos_token=token("tokenizer.ggml.eos_token_id"),
                                          bos_token=token("tokenizer.ggml.bos_token_id"))

    def text(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def __call__(self, req: ChatRequest) -> int:
        prompt = self.format(messages=[dict(m) for m in req.messages]).prompt
        return len(self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))


def counter_spec(estimate: EstimateSection, backend: str) -> tuple[str, str, int]:
    """(kind, argument, overhead): a picklable name of the counter, rebuilt in each Spark worker.
    backend: llm.backend, which decides the tokenizer when estimate.tokenizer is auto."""
    mode = estimate.tokenizer
    if mode == "auto":
        mode = "gguf" if backend == "embedded" else "tiktoken"
    if mode == "gguf":
        from corpusgraph.llm.server import find_bundled_gguf

        return "gguf", str(find_bundled_gguf()), 0
    return "tiktoken", estimate.tiktoken_encoding, estimate.message_overhead_tokens


@functools.lru_cache(maxsize=4)
def request_counter(kind: str, arg: str, overhead: int = 0):
    """A callable req -> prompt tokens (with `.text(str) -> tokens`); one per process."""
    return _GGUFCounter(arg) if kind == "gguf" else _TiktokenCounter(arg, overhead)


@dataclass(frozen=True)
class ExtractCounting:
    """What a Spark worker needs to build the extract stage's first-pass requests for unit rows and
    count them: picklable, the counter itself rebuilt from `spec` in each process."""

    section: ExtractSection
    prompts: ExtractPrompts | None  # None: the fast method, which sends no request
    temperature: float
    spec: tuple[str, str, int]

    @classmethod
    def of(cls, cost: CostSections, prompt_path: Callable[[str], Path]) -> "ExtractCounting":
        """prompt_path: a prompt file's path from its configured name (Config.prompt_path)."""
        ex, llm = cost.extract, cost.llm
        prompts = extract_identity(ex, prompt_path, llm.for_stage("extract").model)[0] if ex.method == "llm" else None
        return cls(ex, prompts, llm.temperature, counter_spec(cost.estimate, llm.backend))

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        """The requests the stage sends for these units, packed as it packs them."""
        if self.prompts is None:
            return []
        return pack_requests(rows, self.prompts, self.section, self.temperature)

    def counter(self):
        return request_counter(*self.spec)


# -- per-unit counts (pure; run inside Spark workers) -------------------------------------------

COUNT_SCHEMA = pa.schema([("requests", pa.int64()), ("tokens_in", pa.int64()), ("text_tokens", pa.int64()),
                          ("n_tokens", pa.int64()), ("units", pa.int64())])


def extract_counts(rows: Sequence[dict], requests: Callable[[Sequence[dict]], list[ChatRequest]], counter) -> dict:
    """Counts for a batch of text_units rows: the requests the extract task builds for them and
    their prompt tokens. `requests` is the task's own builder, so packing several units into one
    request, or any prompt change, is followed automatically."""
    reqs = requests(rows) if rows else []
    return {
        "requests": len(reqs),
        "tokens_in": sum(counter(r) for r in reqs),
        "text_tokens": sum(counter.text(r["text"] or "") for r in rows),
        "n_tokens": sum(int(r.get("n_tokens") or 0) for r in rows),
        "units": len(rows),
    }


def _count_batches(batches: Iterator[pa.RecordBatch], counting: ExtractCounting) -> Iterator[pa.RecordBatch]:
    counter = counting.counter()
    for batch in batches:
        c = extract_counts(batch.to_pylist(), counting.requests, counter)
        yield pa.RecordBatch.from_pylist([c], schema=COUNT_SCHEMA)


def count_units(text_units, counting: ExtractCounting) -> dict:
    """Spark: extract counts summed over every unit (the tokenizer runs on the executors)."""
    from pyspark.sql import functions as F

    parts = text_units.select("unit_id", "text", "n_tokens").mapInArrow(
        lambda it: _count_batches(it, counting), spark_struct(COUNT_SCHEMA))
    row = parts.agg(*[F.sum(f.name).alias(f.name) for f in COUNT_SCHEMA]).first()
    return {f.name: int(row[f.name] or 0) for f in COUNT_SCHEMA}


def report_overhead(section: ReportsSection, prompt: Prompt, llm: LLMSection, counter) -> int:
    """Prompt tokens of a report request with an empty context: the template, rendered for real."""
    from corpusgraph.stages.reports import ReportTask

    req = ReportTask(section, prompt, llm.model, llm.temperature).requests(
        [{"community_id": "estimate", "level": 0, "context": ""}])[0]
    return counter(req)
