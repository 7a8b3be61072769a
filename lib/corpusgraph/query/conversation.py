"""Follow-up questions: one model call rewrites a question and the turns before it into a question
that stands alone, which is then retrieved for and answered like any other.

Retrieval keys on the question's own words (the entity names it matches, its vector), so "and
who trained him?" finds nothing until "him" is "Tobin Hale". The rewrite is condensing, as in
LlamaIndex's CondenseQuestionChatEngine (developers.llamaindex.ai, chat_engine_condense_question):
the history reaches the rewrite only, never the answer prompt, which gets the standalone
question and the context, so the prompt's size and its citations stay those of one question.

A rewrite that fails, does not parse or comes back empty or too long leaves the question as it
was asked; the answer says so in `details["rewrite"]`. No history: no call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from corpusgraph.llm.base import ChatModel, ChatRequest
from corpusgraph.query.answer import fill_prompt, pack_blocks

__all__ = ["Turn", "turns", "format_history", "rewrite_schema", "condense", "MAX_REWRITE_CHARS"]

MAX_REWRITE_CHARS = 400  # a standalone question, not an essay: bounded so a small model stops
_ROLES = {"user": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class Turn:
    role: str  # user or assistant
    content: str


def turns(history: Iterable[Turn | Mapping[str, Any]] | None) -> list[Turn]:
    """History as Turns (dicts with role and content are read as such); other roles, and empty
    turns, are refused with a ValueError naming the turn."""
    out = []
    for i, item in enumerate(history or ()):
        role, content = (item.role, item.content) if isinstance(item, Turn) else (item.get("role"), item.get("content"))
        if role not in _ROLES:
            raise ValueError(f"history turn {i}: role must be 'user' or 'assistant', not {role!r}")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"history turn {i}: content is empty")
        out.append(Turn(role, content.strip()))
    return out


def format_history(history: Sequence[Turn], budget: int) -> str:
    """The turns as `User: ...` / `Assistant: ...` lines, oldest first, keeping the newest that fit
    `budget` tokens (the one that does not fit is cut; older ones are left out)."""
    newest_first = [f"{_ROLES[t.role]}: {t.content}" for t in reversed(history)]
    kept, _ = pack_blocks(newest_first, budget)
    return "\n".join(reversed(kept))


def rewrite_schema() -> dict:
    return {"type": "object", "properties": {"question": {"type": "string", "maxLength": MAX_REWRITE_CHARS}},
            "required": ["question"]}


def condense(chat: ChatModel, question: str, history: Sequence[Turn], prompt: str, budget: int,
             max_tokens: int) -> tuple[str, dict[str, Any]]:
    """(the question to retrieve and answer for, facts for details["rewrite"])."""
    from corpusgraph.llm.parse import parse_json_answer

    if not history:
        return question, {}
    text = fill_prompt(prompt, history=format_history(history, budget), question=question)
    request = ChatRequest(id="rewrite", messages=({"role": "user", "content": text},), max_tokens=max_tokens,
                          json_schema=rewrite_schema())
    result = chat.complete([request])[0]
    facts: dict[str, Any] = {"turns": len(history)}
    if result.error:
        return question, {**facts, "used": False, "error": result.error}
    obj, why = parse_json_answer(result.text)
    rewritten = obj.get("question") if isinstance(obj, dict) else None
    if not isinstance(rewritten, str) or not rewritten.strip():
        return question, {**facts, "used": False, "error": why or "the rewrite holds no question"}
    rewritten = " ".join(rewritten.split())
    if len(rewritten) > MAX_REWRITE_CHARS:
        return question, {**facts, "used": False, "error": f"the rewrite is over {MAX_REWRITE_CHARS} characters"}
    return rewritten, {**facts, "used": True}
