"""Every chat request shaped for the endpoint's profile (llm/profiles.py), in one place.

Stages and queries build a `ChatRequest` with the schema they mean (bounds included, which the
bundled model needs); `RequestShaper.body` turns it into the body the provider accepts: the
schema made valid for its strict mode, the response_format shape it reads, the field that bounds
the answer, no temperature for a reasoning model. The synchronous client and the Batch API's
lines both call it, so a batch line is the body a synchronous call would send.

Shaping only loosens a schema (it drops keywords a provider refuses) or states what was meant
(additionalProperties false, every property required): each dropped bound is also enforced by
the stage's parser (extract/parse.py cuts names and lists, parse_report slices findings,
parse_summary cuts the text, parse_points and parse_rating clamp scores), so an answer that
would have been cut by the schema is cut there instead.

Per request the work is a few dict operations: a schema is shaped once per schema object (an id
memo, as stages send one schema object with many requests) or, for schemas built anew per call,
once per distinct content (a small JSON-keyed memo).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Iterable

from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.llm.profiles import Profile, SchemaLimits, refuses_system_role

__all__ = ["RequestShaper", "after_widening", "SchemaError", "shape_schema", "schema_violations", "rf_name"]

_MEMO = 64


class SchemaError(ValueError):
    """A schema the endpoint's profile cannot send (over its documented limits)."""


def rf_name(schema: dict[str, Any]) -> str:
    """The json_schema `name`: "a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum
    length of 64" (platform.openai.com/docs/api-reference/chat/create)."""
    name = "".join(c if c.isalnum() and c.isascii() or c in "_-" else "_" for c in str(schema.get("title") or "answer"))
    return name[:64] or "answer"


def shape_schema(schema: dict[str, Any], profile: Profile, drop: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of `schema` valid for `profile`: keywords it refuses dropped (and `drop`), and with
    strict shaping every object closed (additionalProperties false) and every property required,
    those that were optional made nullable. A sub-schema used twice (the pack schema shares one
    unit object) is shaped once and stays shared."""
    dropped = profile.drop_keywords | frozenset(drop)
    memo: dict[int, Any] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        held = memo.get(id(node))
        if held is not None:
            return held
        out: dict[str, Any] = {}
        memo[id(node)] = out
        for key, value in node.items():
            if key in dropped:
                continue
            if key == "format" and profile.formats is not None and value not in profile.formats:
                continue
            if key == "oneOf" and profile.strict_shape:  # strict mode takes anyOf, not oneOf
                key = "anyOf"
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                out[key] = {k: walk(v) for k, v in value.items()}
            else:
                out[key] = walk(value)
        if profile.strict_shape and (out.get("type") == "object" or "properties" in out):
            props = out.setdefault("properties", {})
            required = set(node.get("required") or [])
            for k, sub in props.items():
                if k not in required:
                    props[k] = _nullable(sub)
            out["required"] = list(props)
            out["additionalProperties"] = False
        if profile.strict_shape and out.get("type") == "array" and "items" not in out:
            out["items"] = {}
        return out

    return walk(schema)


def _nullable(sub: dict[str, Any]) -> dict[str, Any]:
    """An optional property as strict mode writes it: required, with null allowed
    (platform.openai.com/docs/guides/structured-outputs, "emulate optional parameters")."""
    if "enum" in sub or "const" in sub or "type" not in sub:
        return {"anyOf": [sub, {"type": "null"}]}
    t = sub["type"]
    types = list(t) if isinstance(t, list) else [t]
    return {**sub, "type": types if "null" in types else types + ["null"]}


def schema_violations(schema: dict[str, Any], limits: SchemaLimits | None) -> list[str]:
    """What in a shaped schema passes the profile's limits (empty when nothing does)."""
    if limits is None:
        return []
    props = enums = chars = deepest = 0
    todo: list[tuple[Any, int]] = [(schema, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, list):
            todo.extend((x, depth) for x in node)
            continue
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("properties"), dict):
            depth += 1
            deepest = max(deepest, depth)
            props += len(node["properties"])
            chars += sum(len(k) for k in node["properties"])
            todo.extend((v, depth) for v in node["properties"].values())
        if isinstance(node.get("enum"), list):
            enums += len(node["enum"])
            chars += sum(len(str(v)) for v in node["enum"])
        todo.extend((v, depth) for k, v in node.items() if k not in ("properties", "enum"))
    out = []
    if props > limits.properties:
        out.append(f"{props} object properties (at most {limits.properties})")
    if deepest > limits.depth:
        out.append(f"{deepest} levels of nesting (at most {limits.depth})")
    if enums > limits.enum_values:
        out.append(f"{enums} enum values (at most {limits.enum_values})")
    if chars > limits.chars:
        out.append(f"{chars} characters of names and enum values (at most {limits.chars})")
    return out


class RequestShaper:
    """The bodies one endpoint (profile + model) is sent. Plain data: it travels into Ray actors.

    model: the `model` of each body (for Azure, the deployment). reasoning: a reasoning model (no
    temperature, max_completion_tokens on OpenAI and Azure, `reasoning_budget_tokens` more answer
    tokens, `reasoning_effort` sent when set). token_field: the profile's, unless the caller knows
    better (Azure before api-version 2024-09-01-preview has only max_tokens). drop: more schema
    keywords to remove (llm.drop_schema_keywords), for an endpoint refusing one the profile keeps.
    reasoning_retry_tokens: the answer limit of a second try, for a reasoning model whose first
    answer came back empty with its limit spent on hidden reasoning (see widens).
    """

    def __init__(self, profile: Profile, model: str, *, reasoning: bool = False, reasoning_effort: str | None = None,
                 reasoning_budget_tokens: int = 0, reasoning_retry_tokens: int = 0, drop: Iterable[str] = (),
                 token_field: str | None = None) -> None:
        self.profile = profile
        self.model = model
        self.reasoning = reasoning
        self.reasoning_effort = reasoning_effort
        self.budget = reasoning_budget_tokens if reasoning else 0
        self.retry_tokens = reasoning_retry_tokens if reasoning else 0
        self.drop = tuple(sorted(set(drop)))
        self.token_field = token_field or profile.token_field
        self.merge_system = reasoning and refuses_system_role(model)
        self._by_id: dict[int, tuple[dict, dict]] = {}
        self._by_text: OrderedDict[str, dict] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_by_id"], state["_by_text"] = {}, OrderedDict()  # memos are rebuilt where it lands
        return state

    def __repr__(self) -> str:
        return f"RequestShaper({self.profile.name}, {self.model!r}, reasoning={self.reasoning})"

    # -- bodies ------------------------------------------------------------------------------------
    def body(self, req: ChatRequest, widened: bool = False) -> dict[str, Any]:
        """The /chat/completions body for `req`; widened: the second try's (see widens)."""
        messages = [dict(m) for m in req.messages]
        if self.merge_system:
            messages = _system_into_user(messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                self.token_field: self.answer_tokens(req.max_tokens, widened)}
        if not (self.reasoning and self.profile.name in ("openai", "azure_openai")):
            body["temperature"] = req.temperature
        if self.reasoning and self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        if req.json_schema is not None:
            body["response_format"] = self.response_format(req.json_schema)
        return body

    def answer_tokens(self, max_tokens: int, widened: bool = False) -> int:
        """The completion budget sent: the request's, plus the reasoning budget on a reasoning
        model (its max_completion_tokens covers the hidden reasoning too; docs/guides/reasoning);
        on a widened second try, at least reasoning_retry_tokens."""
        first = int(max_tokens) + self.budget
        return max(first, self.retry_tokens) if widened else first

    def widens(self, result: ChatResult, max_tokens: int) -> bool:
        """Whether `result` is a reasoning model's answer cut to nothing by its limit (no content,
        finish_reason "length": the hidden reasoning took every token) that a second try with
        reasoning_retry_tokens would have room for. OpenAI's reasoning guide describes this answer
        and suggests reserving about 25,000 tokens for reasoning and output when starting out; a
        first limit that high would count against the tokens-per-minute limit on every request,
        so only the cut ones are sent again."""
        return (self.reasoning and result.error_code == "empty" and result.finish_reason == "length"
                and self.retry_tokens > self.answer_tokens(max_tokens))

    def response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        held = self._by_id.get(id(schema))
        if held is not None and held[0] is schema:
            return held[1]
        text = json.dumps(schema, sort_keys=True)
        rf = self._by_text.get(text)
        if rf is None:
            rf = self._build(schema)
            self._by_text[text] = rf
            if len(self._by_text) > _MEMO:
                self._by_text.popitem(last=False)
        else:
            self._by_text.move_to_end(text)
        if len(self._by_id) >= _MEMO:
            self._by_id.clear()
        self._by_id[id(schema)] = (schema, rf)
        return rf

    def _build(self, schema: dict[str, Any]) -> dict[str, Any]:
        p = self.profile
        if p.rf_style == "json_object_schema":
            return {"type": "json_object", "schema": schema}  # the schema as given (see profiles.py)
        shaped = shape_schema(schema, p, self.drop)
        problems = schema_violations(shaped, p.limits)
        if problems:
            raise SchemaError(f"the answer schema is over {p.name}'s documented limits: {'; '.join(problems)}. "
                              "Fewer units per call (extract.units_per_call) or fewer list fields "
                              "(extract.claims: false) make it smaller")
        if p.rf_style == "tgi_grammar":
            return {"type": "json", "value": shaped}
        inner: dict[str, Any] = {"name": rf_name(schema), "schema": shaped}
        if p.rf_style == "json_schema_strict":
            inner["strict"] = True
        elif p.rf_style == "json_schema_loose":
            inner["strict"] = False
        return {"type": "json_schema", "json_schema": inner}


def _system_into_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system messages' text put in front of the first user message, for models that refuse
    the system role."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    rest = [m for m in messages if m.get("role") != "system"]
    if system:
        for m in rest:
            if m.get("role") == "user":
                m["content"] = f"{system}\n\n{m.get('content') or ''}"
                break
        else:
            rest.insert(0, {"role": "user", "content": system})
    return rest


def after_widening(cut: ChatResult, second: ChatResult) -> ChatResult:
    """The second try's result, counting the cut first call's tokens too (both were paid)."""
    second.tokens_in += cut.tokens_in
    second.tokens_out += cut.tokens_out
    second.widened = True
    return second
