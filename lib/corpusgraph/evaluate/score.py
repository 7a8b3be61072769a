"""Answer quality: exact match and token F1 against gold answers, retrieval recall from an
answer's citations, and a pairwise LLM judge (issue 5).

Answer metrics follow SQuAD's normalisation: lower case, punctuation dropped, the articles
"a", "an", "the" dropped, whitespace collapsed. A question may have several acceptable answers
(MuSiQue's `answer_aliases`); every metric takes the best over them. corpusgraph's answer prompt
asks for sentences with citation tags ([U1], [R2]); the tags are removed before scoring, since
they are bookkeeping, not words of the answer. Exact match of a sentence against a short gold
answer is near zero by construction, so `contains` (the normalised gold appears as a run of
words inside the normalised answer) is reported beside EM and F1.

Retrieval recall reads an answer's citations: corpusgraph cites text units and their
documents, the units the model cited first, then the rest of its context. A document ingested
from a JSON-lines record has the record's `id` as the `#<id>` suffix of its `source_uri`, which
is what gold `evidence_doc_ids` name.

The pairwise judge asks a chat model, through the LLM layer (`ChatModel.complete`), which of two
answers to a question is better on four criteria (comprehensiveness, diversity, empowerment,
directness: the GraphRAG paper's). Each pair is asked twice, once in each order, in one batch,
so a model that prefers whatever comes first gives one win to each side, i.e. a tie. Verdicts
are parsed leniently (JSON, with or without fences; "Answer 1", "2", "tie"; or plain text lines
"Directness: Answer 2"); a verdict that cannot be read is recorded as "unparsed" for that
criterion and order, and counted, never dropped.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from corpusgraph.llm.base import ChatModel, ChatRequest
from corpusgraph.llm.parse import parse_json_answer

__all__ = [
    "normalize_answer",
    "strip_citations",
    "exact_match",
    "f1_score",
    "contains_answer",
    "source_id",
    "cited_documents",
    "recall_at_k",
    "score_answer",
    "mean_scores",
    "CRITERIA",
    "UNPARSED",
    "judge_prompt",
    "judge_schema",
    "parse_verdict",
    "PairVerdict",
    "judge_pair",
    "summarise_verdicts",
]

# -- answer metrics --------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
# Citation tags the query prompts ask for: [U1], [R2], [P3], several in one pair of brackets
# ([U1, U3] or [U1][R2]), and graphrag-style [Data: Reports (1, 2)].
_TAG_GROUP = re.compile(r"\[\s*(?:[A-Z]\d+\s*(?:[,;]\s*[A-Z]?\d+\s*)*|Data:[^\]]*)\]")


def normalize_answer(text: str | None) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = (text or "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def strip_citations(text: str | None) -> str:
    """The answer without its citation tags ("Paris [U1]." -> "Paris .")."""
    return _TAG_GROUP.sub(" ", text or "")


def _golds(gold: str | Sequence[str] | None) -> list[str]:
    if gold is None:
        return []
    items = [gold] if isinstance(gold, str) else list(gold)
    return [g for g in items if isinstance(g, str) and g.strip()]


def exact_match(prediction: str | None, gold: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    pred = normalize_answer(strip_citations(prediction))
    return float(any(pred == normalize_answer(g) for g in _golds(gold)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, gold: str | Sequence[str]) -> float:
    """Token F1 of the normalised prediction against the best of the gold answers."""
    pred = normalize_answer(strip_citations(prediction)).split()
    return max((_f1(pred, normalize_answer(g).split()) for g in _golds(gold)), default=0.0)


def contains_answer(prediction: str | None, gold: str | Sequence[str]) -> float:
    """1.0 when a normalised gold answer occurs as whole consecutive words in the prediction."""
    pred = f" {normalize_answer(strip_citations(prediction))} "
    return float(any(normalize_answer(g) and f" {normalize_answer(g)} " in pred for g in _golds(gold)))


# -- retrieval recall from citations ---------------------------------------------------------


def source_id(citation: Any) -> str:
    """The source record id of a citation: the `#<id>` suffix of its source_uri, else its doc id."""
    if isinstance(citation, Mapping):
        uri, doc_id = citation.get("source_uri") or "", citation.get("doc_id") or ""
    else:
        uri, doc_id = getattr(citation, "source_uri", "") or "", getattr(citation, "doc_id", "") or ""
    return uri.rsplit("#", 1)[1] if "#" in uri else doc_id


def cited_documents(citations: Iterable[Any]) -> list[str]:
    """Distinct source ids of the citations, in citation order."""
    return list(dict.fromkeys(source_id(c) for c in citations))


def recall_at_k(ranked_docs: Sequence[str], gold_docs: Sequence[str], k: int) -> float:
    """Share of the gold documents among the first k distinct documents of the ranking."""
    gold = set(gold_docs)
    if not gold:
        raise ValueError("recall needs at least one gold document")
    if k < 1:
        raise ValueError("k must be at least 1")
    top = list(dict.fromkeys(ranked_docs))[:k]
    return len(gold.intersection(top)) / len(gold)


def score_answer(answer: Any, gold: str | Sequence[str], gold_docs: Sequence[str] = (),
                 ks: Sequence[int] = (2, 5)) -> dict[str, float]:
    """EM, F1, contains, and recall@k of the gold documents from the answer's citations.

    `answer` is a query `Answer` (or anything with `.answer` and `.citations`). An answer with
    an error scores as what it says (usually nothing): the error is the caller's to count.
    """
    text = getattr(answer, "answer", answer if isinstance(answer, str) else "")
    row = {"em": exact_match(text, gold), "f1": f1_score(text, gold), "contains": contains_answer(text, gold)}
    if gold_docs:
        docs = cited_documents(getattr(answer, "citations", ()) or ())
        for k in ks:
            row[f"recall@{k}"] = recall_at_k(docs, gold_docs, k)
    return row


def mean_scores(rows: Sequence[Mapping[str, float]], digits: int = 4) -> dict[str, float]:
    """Per-key means over score rows (keys missing from a row are averaged over the rest)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out = {}
    for key in keys:
        values = [float(r[key]) for r in rows if key in r]
        out[key] = round(sum(values) / len(values), digits) if values else 0.0
    return out


# -- pairwise judge ---------------------------------------------------------------------------

CRITERIA: dict[str, str] = {
    "comprehensiveness": "How much detail does the answer give to cover all aspects of the question?",
    "diversity": "How varied and rich is the answer in offering different perspectives and insights?",
    "empowerment": "How well does the answer help the reader understand the topic and make informed judgements?",
    "directness": "How specifically and clearly does the answer address the question?",
}
UNPARSED = "unparsed"
_CHOICES = ("1", "2", "tie")

_JUDGE_TEMPLATE = """You compare two answers to the same question.
For each criterion, say which answer is better: "1" for Answer 1, "2" for Answer 2, or "tie".

Criteria:
{criteria}

Question: {question}

Answer 1:
{first}

Answer 2:
{second}

Reply with one JSON object with the keys {keys}, each set to "1", "2" or "tie".
"""


def judge_prompt(question: str, first: str, second: str, criteria: Mapping[str, str] = CRITERIA) -> str:
    lines = "\n".join(f"- {name}: {text}" for name, text in criteria.items())
    keys = ", ".join(criteria)
    # str.format is safe here: the template is ours and the inserted text is not formatted again.
    return _JUDGE_TEMPLATE.format(criteria=lines, question=question.strip(), first=(first or "").strip() or "(empty)",
                                  second=(second or "").strip() or "(empty)", keys=keys)


def judge_schema(criteria: Iterable[str] = CRITERIA) -> dict:
    """JSON schema constraining a verdict (where the backend supports constrained decoding)."""
    names = list(criteria)
    return {
        "type": "object",
        "properties": {name: {"type": "string", "enum": list(_CHOICES)} for name in names},
        "required": names,
    }


_ONE = re.compile(r"^(?:answer|response|option)?\s*#?\s*(1|one|first)\b")
_TWO = re.compile(r"^(?:answer|response|option)?\s*#?\s*(2|two|second)\b")
_TIE = re.compile(r"^(?:tie|tied|equal|both|neither|same|draw|0)\b")
# "1 or 2", "answer 1/answer 2": a hedge names neither.
_HEDGE = re.compile(r"^(?:answer\s*)?#?\s*(?:1|2|one|two)\s*(?:or|and|/|,|&)\s*(?:answer\s*)?#?\s*(?:1|2|one|two)\b")


def _choice(value: Any) -> str:
    """'1', '2', 'tie' or UNPARSED for one criterion's value as a model wrote it."""
    if isinstance(value, bool) or value is None:
        return UNPARSED
    if isinstance(value, (int, float)):
        return {1: "1", 2: "2", 0: "tie"}.get(int(value), UNPARSED) if float(value).is_integer() else UNPARSED
    if isinstance(value, Mapping):  # {"winner": "2", "reason": ...}
        for key in ("winner", "better", "choice", "verdict", "answer"):
            if key in value:
                return _choice(value[key])
        return UNPARSED
    text = str(value).strip().strip("\"'").strip().lower()
    if _TIE.match(text):
        return "tie"
    if _HEDGE.match(text):
        return UNPARSED
    one, two = _ONE.match(text), _TWO.match(text)
    if one and not two:
        return "1"
    if two and not one:
        return "2"
    return UNPARSED


def _from_lines(text: str, criteria: Sequence[str]) -> dict[str, str]:
    out = {}
    for name in criteria:
        m = re.search(rf"{name}\W{{0,5}}\s*[:=\-]\s*\W{{0,3}}([^\n,;.]*)", text, re.IGNORECASE)
        out[name] = _choice(m.group(1)) if m else UNPARSED
    return out


def parse_verdict(text: str | None, criteria: Sequence[str] = tuple(CRITERIA)) -> dict[str, str]:
    """Criterion -> "1", "2", "tie" or "unparsed", from a judge's answer; never raises."""
    if not text or not text.strip():
        return {name: UNPARSED for name in criteria}
    obj, _ = parse_json_answer(text)
    if obj is not None:
        lowered = {str(k).strip().lower(): v for k, v in obj.items()}
        parsed = {name: _choice(lowered[name]) if name in lowered else UNPARSED for name in criteria}
        if any(v != UNPARSED for v in parsed.values()):
            return parsed
    return _from_lines(text, criteria)


def _to_sides(choice: str, a_first: bool) -> str:
    """A verdict about positions ('1', '2') as one about sides ('A', 'B')."""
    if choice in ("1", "2"):
        first_wins = choice == "1"
        return "A" if first_wins == a_first else "B"
    return choice  # "tie" or UNPARSED


@dataclass
class PairVerdict:
    """Both orders' verdicts on one pair of answers, A and B, per criterion.

    `orders[c]` is (verdict with A shown first, verdict with B shown first), each "A", "B",
    "tie" or "unparsed". `score_a[c]` is A's mean score over the readable orders (win 1, tie
    0.5, loss 0), None when neither order could be read.
    """

    question: str
    orders: dict[str, tuple[str, str]]
    score_a: dict[str, float | None]
    raw: tuple[str | None, str | None]
    errors: tuple[str | None, str | None] = (None, None)
    tokens_in: int = 0
    tokens_out: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _score(verdicts: Sequence[str]) -> float | None:
    points = [{"A": 1.0, "B": 0.0, "tie": 0.5}[v] for v in verdicts if v != UNPARSED]
    return sum(points) / len(points) if points else None


def judge_pair(chat: ChatModel, question: str, answer_a: str, answer_b: str, *, max_tokens: int = 120,
               criteria: Mapping[str, str] = CRITERIA, constrained: bool = True) -> PairVerdict:
    """Ask `chat` which answer is better on each criterion, in both orders (one batch).

    `constrained` sends `judge_schema` with the requests, which backends that support it
    (llama.cpp, OpenAI structured outputs) use to keep the answer to valid JSON.
    """
    names = list(criteria)
    schema = judge_schema(names) if constrained else None
    requests = [
        ChatRequest(id="judge-ab", messages=({"role": "user", "content": judge_prompt(question, answer_a, answer_b, criteria)},),
                    max_tokens=max_tokens, json_schema=schema),
        ChatRequest(id="judge-ba", messages=({"role": "user", "content": judge_prompt(question, answer_b, answer_a, criteria)},),
                    max_tokens=max_tokens, json_schema=schema),
    ]
    results = list(chat.complete(requests))
    by_id = {r.id: r for r in results}
    ab, ba = by_id.get("judge-ab"), by_id.get("judge-ba")
    texts = (ab.text if ab else None, ba.text if ba else None)
    errors = tuple((r.error if r else "no result for this request") for r in (ab, ba))
    first = parse_verdict(texts[0], names)
    second = parse_verdict(texts[1], names)
    orders = {name: (_to_sides(first[name], True), _to_sides(second[name], False)) for name in names}
    return PairVerdict(
        question=question,
        orders=orders,
        score_a={name: _score(orders[name]) for name in names},
        raw=texts,
        errors=errors,  # type: ignore[arg-type]
        tokens_in=sum(r.tokens_in for r in results),
        tokens_out=sum(r.tokens_out for r in results),
    )


def summarise_verdicts(verdicts: Sequence[PairVerdict], name_a: str = "A", name_b: str = "B") -> dict[str, Any]:
    """Per criterion: wins, ties and unparsed verdicts over both orders, A's win rate, and how
    often the answer shown first won (position bias; 0.5 is none)."""
    out: dict[str, Any] = {}
    criteria = list(dict.fromkeys(c for v in verdicts for c in v.orders))
    for name in criteria:
        counts = Counter()
        first_wins = first_decided = 0
        for v in verdicts:
            ab, ba = v.orders[name]
            for verdict, a_first in ((ab, True), (ba, False)):
                counts[verdict] += 1
                if verdict in ("A", "B"):
                    first_decided += 1
                    first_wins += (verdict == "A") == a_first
        scores = [v.score_a[name] for v in verdicts if v.score_a.get(name) is not None]
        out[name] = {
            f"{name_a}_wins": counts["A"],
            f"{name_b}_wins": counts["B"],
            "ties": counts["tie"],
            "unparsed": counts[UNPARSED],
            "verdicts": sum(counts.values()),
            f"{name_a}_win_rate": round(sum(scores) / len(scores), 4) if scores else None,
            "first_position_win_share": round(first_wins / first_decided, 4) if first_decided else None,
        }
    return out
