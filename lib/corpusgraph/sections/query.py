"""The query side: what every method shares, and local ranking, global and DRIFT search apart.

Each default is stated here once; the query code reads these sections as they are.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, SecretStr

from corpusgraph.sections.base import Section

__all__ = ["RetrievalSection", "RerankSection", "GlobalSection", "DriftSection", "QuerySection", "MOVED_QUERY_KEYS"]

# Recall of each ranking step and of its ablation on the dev sets.
_RESULTS = "tests/benchmarks/results/retrieval.json"


class RetrievalSection(Section):
    """Local search's unit ranking (query/retrieval.py): personalised PageRank over entities and
    passages, restarted at the question's entities and at its best passages."""

    damping: float = Field(0.5, gt=0, lt=1, description="PPR: probability of following an edge rather than "
                           "restarting (HippoRAG uses 0.5).")
    iterations: int = Field(30, ge=1, description="PPR: most power-iteration rounds (it stops earlier once "
                            "converged).")
    passage_weight: float = Field(0.2, ge=0, le=1, description="Least share of the restart mass on passages (by "
                                  "their dense+BM25 score); the rest goes to the question's entities as far as "
                                  "their seed support reaches, and back to the passages where it does not.")
    dense_weight: float = Field(0.5, ge=0, le=1, description="Passage score: dense cosine vs BM25 (1 = dense "
                                "only, 0 = BM25 only).")
    candidates: int = Field(50, ge=1, le=1000, description="Passages taken from each of the dense and BM25 "
                            "rankings as restart candidates, and entities from the entity vectors.")
    entity_seeds: int = Field(5, ge=0, le=100, description="Nearest entity vectors used as restart seeds, besides "
                              f"the entities the question names (0: names only). Measured choice: {_RESULTS}.")
    entity_seed_ratio: float = Field(0.9, ge=0, le=1, description="A vector seed must score at least this share "
                                     "of the best one (a weak match of a rare entity would otherwise win on "
                                     "specificity).")
    max_walk_nodes: int = Field(50_000, ge=100, description="Graphs up to this many nodes are walked whole; on "
                                "larger ones the walk runs on the neighbourhood of the restart nodes (grown hop by "
                                "hop up to this many nodes), which keeps a query's cost independent of the index "
                                "size.")
    walk_hops: int = Field(3, ge=1, le=10, description="Hops the neighbourhood walk grows from the restart nodes on "
                           "graphs above max_walk_nodes.")
    bridge_from: int = Field(2, ge=0, le=20, description="Bridge step: each of this many top passages is followed "
                             "by the best passage of a document whose title it mentions (0: off). Measured: "
                             f"{_RESULTS}.")
    bridge_min_score: float = Field(0.15, ge=-1, le=1, description="Bridge step: the linked passage's cosine with "
                                    "the question must reach this (MiniLM scale).")
    bridge_novelty: float = Field(0.5, ge=0, le=2, description="Bridge step: the linked passage is chosen by cosine "
                                  "with the question minus this times its cosine with the passage that named it "
                                  "(0: by the question alone).")
    title_seeds: int = Field(2, ge=0, le=20, description="Documents the question names by title (whole words, in "
                             "order of mention) whose passage nearest the question goes first in the ranking "
                             "(0: off).")
    title_min_score: float = Field(0.2, ge=-1, le=1, description="That passage's cosine with the question must "
                                   "reach this (MiniLM scale).")
    entity_bridge_from: int = Field(2, ge=0, le=20, description="Entity bridge: each of this many top passages is "
                                    "followed by the best passage that shares an entity with it (not one the "
                                    f"question names), placed after them (0: off). Measured: {_RESULTS}.")
    entity_bridge_min_score: float = Field(0.3, ge=-1, le=1, description="Entity bridge: the passage's cosine with "
                                           "the question must reach this (MiniLM scale).")
    entity_bridge_max_passages: int | None = Field(None, ge=1, description="Entity bridge: entities found in more "
                                                   "passages than this are not followed (a hub links everything); "
                                                   "empty: the square root of the index's passages, so the limit "
                                                   "follows the corpus.")
    seed_support: bool = Field(True, description="Entity seeds get restart mass as far as the passages they occur "
                               "in score well on the question (mean passage score over the entity's passages): hubs "
                               "give way to the passage scores, specific entities keep the walk's weight "
                               "(query/adaptive.py).")
    seed_coverage: bool = Field(True, description="The restart mass a seed's support earns is scaled by how "
                                "completely its links reach the passages whose text names it (linked / naming, at "
                                "most 1): an extraction that linked a name to one of the forty passages naming it "
                                "says nothing special about that one (query/adaptive.py).")
    code_seeds: bool = Field(True, description="Identifiers the question writes (a word of letters and digits, "
                             "such as R-77, HQ-52910 or PS5; not an ordinal such as 4th) are seeds even where "
                             "extraction made no entity of them: the passages that contain one share its restart "
                             "mass, with support and specificity as an entity seed's. An identifier whose words "
                             "appear together in more passages than `candidates` is not followed "
                             "(query/retrieval.py).")
    seed_support_scale: float = Field(1.25, gt=0, description="A seed's support is min(1, this x the mean passage "
                                      "score over the passages it occurs in).")
    keep_dense: int = Field(5, ge=0, le=50, description="The guarantee: this many first passages of basic "
                            "search's ranking (query.basic) keep their places in local search's ranking unless "
                            "the graph's choice has more evidence by the margin (0: off).")
    keep_first: bool = Field(True, description="The first place of local search's ranking is basic search's first "
                             "passage whatever the graph says: the passage the question's own words match best; the "
                             "graph's evidence (the next hop, what the question does not say) competes for the places "
                             "after it.")
    keep_dense_margin: float | None = Field(None, ge=0, description="The guarantee's margin: a graph choice pushes "
                                            "a protected passage down only with at least (1 + this x (1 - trust)) "
                                            "times its walk score; trust is the seeds' mean support (0 for hubs, 1 "
                                            "for well supported entities). Empty: damping / (1 - damping), the most "
                                            "a passage's own neighbourhood can change its walk score by "
                                            "(query/adaptive.py).")


class RerankSection(Section):
    """Basic search's optional reranker (query/rerank.py): the first `candidates` passages of the
    hybrid ranking are scored again against the question and reordered."""

    backend: Literal["none", "tei", "vllm_score", "cohere", "chat"] = Field(
        "none", description="none: no reranker. tei: a text-embeddings-inference server's POST /rerank. "
        "vllm_score: vLLM's POST /score (a cross-encoder served by `vllm serve --task score`). cohere: the "
        "Cohere-style POST <api_base>/rerank that Cohere, Jina, vLLM (/v1/rerank) and Infinity serve. chat: the "
        "configured chat model (llm) ranks the passages listwise in one call.")
    api_base: str | None = Field(None, description="tei, vllm_score, cohere: the server's base URL (for cohere "
                                 "and vLLM's rerank, ending in /v1 or /v2 as the provider documents it).")
    model: str | None = Field(None, description="vllm_score, cohere: the `model` sent (tei serves one model).")
    api_key: SecretStr | None = Field(None, description="Bearer key; write ${VAR} here, never a literal.")
    candidates: int = Field(20, ge=2, le=200, description="Passages of the hybrid ranking sent to the reranker; "
                            "the rest keep their hybrid order after them.")
    max_chars: int = Field(2000, ge=100, description="Each passage is cut to this many characters before it is "
                           "sent (cross-encoders read 512 tokens at most; the chat reranker's prompt must fit "
                           "llm.n_ctx).")
    timeout_s: float = Field(30.0, gt=0, description="Per-request timeout; a failed or late rerank leaves the "
                             "hybrid order and says so in the answer's coverage.")


class GlobalSection(Section):
    """Global search (query/global_search.py) and its dynamic community selection (global_select.py)."""

    prompt_map: str = Field("builtin:prompts/global_map.txt", description="Map prompt, relative to the config file (builtin: = shipped with corpusgraph).")
    prompt_reduce: str = Field("builtin:prompts/global_reduce.txt", description="Reduce prompt (DRIFT's final step too).")
    prompt_rate: str = Field("builtin:prompts/global_rate.txt", description="Prompt rating one report's relevance (0-5).")
    level: int = Field(0, ge=0, description="Community level mapped over when dynamic selection is off or finds "
                       "no relevant root.")
    dynamic: bool = Field(True, description="Without an explicit level, start at the root reports, rate each, and "
                          "descend only into relevant ones' children.")
    dynamic_threshold: int = Field(1, ge=0, le=5, description="Rating (0-5) at or above which a report is relevant.")
    dynamic_max_level: int = Field(3, ge=0, description="Deepest level dynamic selection descends to.")
    dynamic_early_map: bool = Field(True, description="Map reports that cannot be descended into in the same round "
                                    "as their rating (a round less; pruned ones' map tokens are spent).")
    dynamic_max_rated: int = Field(500, ge=0, description="At most this many rating calls per question (0: no "
                                   "limit). A round with more reports than the budget allows rates those nearest the "
                                   "question first (report vectors; else the highest rated); the rest are left "
                                   "unrated and unread, and the answer's coverage counts them.")


class DriftSection(Section):
    """DRIFT search (query/drift.py): reports prime the answer, local search follows it up."""

    prompt: str = Field("builtin:prompts/drift_primer.txt", description="Primer and follow-up prompt: partial answer + "
                        "follow-up questions.")
    primer_reports: int = Field(3, ge=1, le=20, description="Reports nearest the question that prime DRIFT.")
    breadth: int = Field(3, ge=1, le=10, description="Follow-up questions answered per round.")
    depth: int = Field(1, ge=1, le=3, description="Rounds of follow-up questions.")


class QuerySection(Section):
    """What every method shares (prompt, budgets, how many units and seeds), and a section per method."""

    model_config = ConfigDict(populate_by_name=True)  # `global` in YAML, `global_` in Python

    prompt_answer: str = Field("builtin:prompts/answer.txt", description="Answer prompt of basic and local search, "
                               "relative to the config file (builtin: = shipped with corpusgraph).")
    top_k_units: int = Field(5, ge=1, le=50, description="Text units retrieved by basic search (local search "
                             "ranks twice as many for its budget).")
    top_k_entities: int = Field(5, ge=1, le=50, description="Seed entities for local search.")
    basic: Literal["dense", "hybrid"] = Field("hybrid", description="Basic search's ranking, and the one local "
                                              "search guarantees its top places against: dense (the text-unit "
                                              "vectors alone) or hybrid (dense and BM25 fused as query.fusion "
                                              "says, then the reranker where one is configured).")
    fusion: Literal["relative_score", "rrf"] = Field(
        "relative_score", description="How hybrid basic search fuses dense and BM25 (query/hybrid.py): "
        "relative_score (each ranking's scores min-max normalised over its hits and summed with equal weights) "
        "or rrf (reciprocal rank fusion, k = 60).")
    rerank: RerankSection = Field(default_factory=RerankSection, description="Basic search's optional reranker.")
    max_context_tokens: int = Field(12000, ge=200, description="Context budget for an answer, and per global map call "
                                    "(graphrag's local search reads 12,000 tokens), cut to fit the query model's "
                                    "context window beside the answer (llm.context_window or its profile's).")
    max_tokens: int = Field(2000, ge=16, description="Answer token limit (graphrag's local search answer limit, "
                            "2,000).")
    prompt_condense: str = Field("builtin:prompts/condense_question.txt", description="Prompt that rewrites a follow-up "
                                 "question and the conversation before it into one question that stands alone "
                                 "(query/conversation.py), relative to the config file (builtin: = shipped with corpusgraph).")
    history_tokens: int = Field(1000, ge=50, description="Conversation turns shown to that rewrite, newest first, "
                                "within this many tokens.")
    retrieval: RetrievalSection = Field(default_factory=RetrievalSection, description="Local search's unit ranking.")
    global_: GlobalSection = Field(default_factory=GlobalSection, alias="global", description="Global search.")
    drift: DriftSection = Field(default_factory=DriftSection, description="DRIFT search.")


# Flat keys of the query section before it was nested, and where each lives now: a config that
# still uses one is told the new key instead of only that the old one is unknown.
MOVED_QUERY_KEYS: dict[str, str] = {
    "prompt_map": "global.prompt_map", "prompt_reduce": "global.prompt_reduce", "prompt_rate": "global.prompt_rate",
    "global_level": "global.level", "global_dynamic": "global.dynamic",
    "dynamic_threshold": "global.dynamic_threshold", "dynamic_max_level": "global.dynamic_max_level",
    "dynamic_early_map": "global.dynamic_early_map",
    "prompt_drift": "drift.prompt", "drift_primer_reports": "drift.primer_reports",
    "drift_breadth": "drift.breadth", "drift_depth": "drift.depth",
    **{f"retrieval_{name}": f"retrieval.{name}" for name in RetrievalSection.model_fields},
}
