"""One entry point for questions: validation, the auto router, and the cost of each answer.

The router is a few rules, no LLM call: corpus-wide wording goes to global search; a question
that asks how or why about known entities (an effect, a role, a change) to DRIFT, which needs
both their neighbourhood and the communities around them; any other question naming known
entities to local search; anything else to basic search. It says why in `Answer.route_reason`. Every LLM call of an answer goes through a per-question meter, so tokens
and dollars are summed in one place whatever the method does.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

from corpusgraph.config import BUILTIN, QuerySection, resolve_prompt_path
from corpusgraph.llm.base import ChatModel, ChatResult, Embedder
from corpusgraph.llm.rerank import open_reranker
from corpusgraph.prompts import load_prompt
from corpusgraph.query.answer import Answer
from corpusgraph.query.basic import basic_search
from corpusgraph.query.context import NO_DRIFT_CONTEXT, RetrievedContext, basic_context, global_context, local_context
from corpusgraph.query.conversation import Turn, condense, turns
from corpusgraph.query.coverage import view_facts
from corpusgraph.query.drift import drift_search
from corpusgraph.query.events import Sink, emit, observing
from corpusgraph.query.global_search import global_search
from corpusgraph.query.loaded import LoadedIndex
from corpusgraph.query.local import local_search
from corpusgraph.query.meter import MeteredChat
from corpusgraph.query.question import parse_question
from corpusgraph.query.store import IndexStore

__all__ = ["QueryEngine", "route", "METHODS", "CONTEXT_METHODS", "MAX_QUESTION_CHARS"]

log = logging.getLogger(__name__)

METHODS = ("basic", "local", "global", "drift", "auto")
CONTEXT_METHODS = ("basic", "local", "global", "auto")  # retrieval only: DRIFT has no such context
MAX_QUESTION_CHARS = 2000

# Wording that asks about the corpus as a whole rather than about something in it.
_CORPUS_WIDE = re.compile(
    r"\b(themes?|trends?|recurring|overall|across|in general|big picture|patterns?|summar(?:y|ise|ize))\b"
    r"|^\s*(?:what|which) (?:are|were) the (?:main|key|major|common|most common|most important|biggest)\b"
)
# Wording that stays corpus-wide even when an entity is named ("themes around the Lumen Guild"
# is still a themes question); weaker cues ("what are the main allies of X") defer to the entity.
_STRONG = re.compile(
    r"\b(themes?|trends?|overall|across (?:the )?(?:corpus|documents|dataset|collection|all|everything))\b"
)


# Asking how or why something affected or shaped something else: an explanation that spans
# entities and the groups around them, not one fact.
_EXPLAIN = re.compile(
    r"\b(how|why)\b.*\b(affect|influenc|impact|shap|chang|evolv|role|lead to|led to|caus|connect|relat)\w*"
)


def route(store: IndexStore, question: str, named: Sequence[str] | None = None) -> tuple[str, str]:
    """(method, reason) for a question, by wording and by entity names the index knows (`named`:
    the entity ids the question names, when already matched)."""
    text = question.casefold()
    cue = _CORPUS_WIDE.search(text)
    strong = _STRONG.search(text)
    named = store.match_names(question) if named is None else named
    names = ", ".join((store.entities[e]["title"] or e) for e in named[:3])
    if cue and (not named or strong):
        why = f"corpus-wide wording ({(strong or cue).group(0).strip()!r})"
        return "global", why + (f" outweighs named entities ({names})" if named else "")
    explain = _EXPLAIN.search(text)
    if named and explain:
        return "drift", f"asks {explain.group(1)!r} about an effect or a role of known entities: {names}"
    if named:
        return "local", f"names known entities: {names}"
    return "basic", "no corpus-wide wording and no known entity named"


def _load_prompt(prompts_dir: Path, relative: str, required: bool = True) -> str | None:
    # The section's paths are relative to the config folder ("prompts/answer.txt") or name a shipped
    # prompt ("builtin:prompts/answer.txt"); a caller that passes the prompts folder itself is
    # served by the file name alone.
    if relative.startswith(BUILTIN):
        candidates: tuple[Path, ...] = (resolve_prompt_path(prompts_dir, relative),)
    else:
        candidates = (prompts_dir / relative, prompts_dir / Path(relative).name)
    for path in candidates:
        if path.is_file():
            return load_prompt(path).template
    if not required:
        return None
    raise FileNotFoundError(f"prompt file {relative!r} not found under {prompts_dir}")


class QueryEngine:
    """Answers questions over a loaded index (a store, its retriever and its views: loaded.py) with
    one chat model and one embedder; given a bare `IndexStore`, it loads it."""

    def __init__(
        self,
        index: LoadedIndex | IndexStore,
        chat: ChatModel,
        embedder: Embedder,
        section: QuerySection,
        prompts_dir: Path,
        usd_per_1k_in: float = 0.0,
        usd_per_1k_out: float = 0.0,
    ):
        self.index = index if isinstance(index, LoadedIndex) else LoadedIndex(index)
        self.chat = chat
        self.embedder = embedder
        self.section = section
        self.usd_per_1k_in = usd_per_1k_in
        self.usd_per_1k_out = usd_per_1k_out
        prompts_dir = Path(prompts_dir)
        # Read once, here, so a missing prompt fails at start-up rather than on the first question.
        self.prompt_answer = _load_prompt(prompts_dir, section.prompt_answer)
        self.prompt_map = _load_prompt(prompts_dir, section.global_.prompt_map)
        self.prompt_reduce = _load_prompt(prompts_dir, section.global_.prompt_reduce)
        self.prompt_rate = _load_prompt(prompts_dir, section.global_.prompt_rate)
        self.prompt_drift = _load_prompt(prompts_dir, section.drift.prompt)
        # Only follow-up questions need it: a config folder from before it existed still answers the rest.
        self.prompt_condense = _load_prompt(prompts_dir, section.prompt_condense, required=False)
        self._condense_path = (prompts_dir, section.prompt_condense)
        index_model = getattr(self.store.vectors("text_unit"), "model", None)
        if index_model and index_model != embedder.model:
            log.warning("vector index was built with %r but the embedder is %r", index_model, embedder.model)

    @property
    def store(self) -> IndexStore:
        """The whole index's store."""
        return self.index.store

    def with_store(self, index: LoadedIndex | IndexStore) -> "QueryEngine":
        """This engine answering from `index` instead (the service swaps in a reloaded index);
        model, embedder and prompts are shared. Anything __init__ derives from the index must be
        re-derived here, or the engine would answer from the old one."""
        import copy

        scoped = copy.copy(self)
        scoped.index = index if isinstance(index, LoadedIndex) else LoadedIndex(index)
        return scoped

    def ask(self, question: str, method: str = "auto", level: int | None = None, top_k: int | None = None,
            domains: Iterable[str] | None = None, history: Sequence[Turn | dict] | None = None,
            events: Sink | None = None) -> Answer:
        """The answer to one question. top_k: text units (basic) or seed entities (local) for this
        question only; domains: answer only from what documents of those access domains built
        (the store's restricted view, access.py); None: the engine's defaults. history: the
        conversation before the question, oldest first ({"role": "user"|"assistant", "content"}),
        which one model call folds into a question that stands alone (query/conversation.py).
        events: told as the answer goes (query/events.py; the service's stream)."""
        question = _check_question(question)
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        _check_level(level)
        history = turns(history)
        with observing(events):
            return self._ask(question, method, level, _with_top_k(self.section, top_k), domains, history)

    def _ask(self, asked: str, method: str, level: int | None, section: QuerySection, domains,
             history: list[Turn]) -> Answer:
        index = self.index.view(domains)
        store = index.store
        meter = MeteredChat(self.chat)
        question, rewrite = self._standalone(meter, asked, history, section)
        # The question's names are matched once, here, and handed on with its vector (basic and
        # global search read none).
        named = store.match_names(question) if method in ("auto", "local", "drift") else ()
        reason = None
        if method == "auto":
            method, reason = route(store, question, named)
        emit("start", {"method": method, "route_reason": reason, "question": asked,
                       "standalone_question": question if rewrite.get("used") else None})
        if method == "global":
            answer = global_search(
                store, meter, question, section, self.prompt_map, self.prompt_reduce, level,
                rate_prompt=self.prompt_rate, question_vector=lambda: self.embedder.embed([question])[0],
            )
        else:
            # Titles matter to local ranking alone (DRIFT parses its follow-ups, the local part).
            titles = index.retriever().titles if method == "local" else None
            parsed = parse_question(store, question, self.embedder.embed([question])[0], named=named, titles=titles)
            if method == "drift":
                answer = drift_search(index, meter, self.embedder, parsed, section, self.prompt_drift,
                                      self.prompt_reduce)
            else:
                # The reranker (query.rerank) reorders basic search's ranking; local search keeps
                # that ranking's first places unless the graph beats them. A chat reranker's calls
                # go through the meter, so the answer's cost counts them.
                reranker = open_reranker(section.rerank, meter) if section.basic == "hybrid" else None
                if method == "basic":
                    answer = basic_search(index, meter, parsed, section, self.prompt_answer, reranker)
                else:
                    answer = local_search(index, meter, parsed, section, self.prompt_answer, reranker)
        answer = self._with_cost(answer, meter.results, reason, store)
        return _asked(answer, asked, question, rewrite)

    def context(self, question: str, method: str = "local", max_tokens: int | None = None,
                top_k: int | None = None, level: int | None = None, domains: Iterable[str] | None = None,
                history: Sequence[Turn | dict] | None = None, map: bool = False) -> RetrievedContext:
        """The context `method` would answer from, as data (query/context.py), and no answer: no
        model call for basic and local, nor for global unless `map` asks for its map's points.
        max_tokens: the context budget (default query.max_context_tokens); auto routes as `ask`
        does, DRIFT's route giving local's context (route_reason says so)."""
        question = _check_question(question)
        if method not in CONTEXT_METHODS:
            raise ValueError(NO_DRIFT_CONTEXT if method == "drift" else
                             f"unknown method {method!r}; choose one of {', '.join(CONTEXT_METHODS)}")
        _check_level(level)
        section = _with_top_k(self.section, top_k)
        if max_tokens is not None:
            section = section.model_validate({**section.model_dump(), "max_context_tokens": max_tokens})
        history = turns(history)
        index = self.index.view(domains)
        store = index.store
        meter = MeteredChat(self.chat)
        asked = question
        question, rewrite = self._standalone(meter, asked, history, section)
        named = store.match_names(question) if method in ("auto", "local") else ()
        reason = None
        if method == "auto":
            method, reason = route(store, question, named)
            if method == "drift":
                method, reason = "local", f"{reason}; DRIFT has no retrieval-only context, so local's is given"
        if method == "global":
            mapped = (meter, self.prompt_map, self.prompt_rate) if map else (None, None, None)
            out = global_context(store, question, section, level, lambda: self.embedder.embed([question])[0],
                                 chat=mapped[0], map_prompt=mapped[1], rate_prompt=mapped[2])
        else:
            titles = index.retriever().titles if method == "local" else None
            parsed = parse_question(store, question, self.embedder.embed([question])[0], named=named, titles=titles)
            reranker = open_reranker(section.rerank, meter) if section.basic == "hybrid" else None
            build = basic_context if method == "basic" else local_context
            out = build(index, parsed, section, reranker)
        out.question, out.route_reason = asked, reason
        out.standalone_question = question if rewrite.get("used") else None
        if rewrite:
            out.details["rewrite"] = rewrite
        out.coverage = {"method": out.method, **out.coverage, "view": view_facts(store)}
        results = meter.results
        out.llm_calls, out.usd = len(results), self._usd(results)
        out.tokens_in, out.tokens_out = sum(r.tokens_in for r in results), sum(r.tokens_out for r in results)
        return out

    def _standalone(self, meter: MeteredChat, question: str, history: list[Turn],
                    section: QuerySection) -> tuple[str, dict]:
        if not history:
            return question, {}
        if self.prompt_condense is None:
            folder, relative = self._condense_path
            raise ValueError(f"follow-up questions need the prompt file {relative!r}, which is not under {folder}")
        return condense(meter, question, history, self.prompt_condense, section.history_tokens, section.max_tokens)

    def _usd(self, results: list[ChatResult]) -> float:
        # Tokens count every call, cached or not: they measure the answer's size. Dollars count
        # only calls a server was paid for; a cache hit cost nothing this time.
        return sum(r.tokens_in / 1000 * self.usd_per_1k_in + r.tokens_out / 1000 * self.usd_per_1k_out
                   for r in results if not r.cached)

    def _with_cost(self, answer: Answer, results: list[ChatResult], reason: str | None, store: IndexStore) -> Answer:
        usd = self._usd(results)
        # Every answer says how much of the index it read (coverage.py), and within which view.
        coverage = {"method": answer.method, **answer.coverage, "view": view_facts(store)}
        details = answer.details
        # A streaming server that reports no usage (llama.cpp) had its tokens counted here.
        if any(getattr(r, "usage_estimated", False) for r in results):
            details = {**details, "usage_estimated": True}
        return replace(
            answer,
            coverage=coverage,
            details=details,
            tokens_in=sum(r.tokens_in for r in results),
            tokens_out=sum(r.tokens_out for r in results),
            usd=usd,
            llm_calls=len(results),
            route_reason=reason,
        )


def _asked(answer: Answer, asked: str, standalone: str, rewrite: dict) -> Answer:
    """The answer to the question as asked, saying what it was rewritten to (and whether the
    rewrite worked, and whether the model's token counts are estimates)."""
    details = dict(answer.details)
    if rewrite:
        details["rewrite"] = rewrite
    return replace(answer, question=asked, standalone_question=standalone if rewrite.get("used") else None,
                   details=details)


def _check_level(level: object) -> None:
    if level is not None and (isinstance(level, bool) or not isinstance(level, int) or level < 0):
        raise ValueError(f"level must be a non-negative integer, got {level!r}")


def _with_top_k(section: QuerySection, top_k: int | None) -> QuerySection:
    if top_k is None:
        return section
    # Validated as a config value would be, so a top_k the section refuses is refused here too.
    return section.model_validate({**section.model_dump(), "top_k_units": top_k, "top_k_entities": top_k})


def _check_question(question: object) -> str:
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise ValueError(f"the question has {len(question)} characters; at most {MAX_QUESTION_CHARS} are allowed")
    return question.strip()
