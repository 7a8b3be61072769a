"""When a pass's failures stop the run (runner/failures.py): every call failed, or more than
llm.max_failed_share once llm.failed_share_min_calls were sent; the messages are logged once each,
with their counts and fixes."""

from __future__ import annotations

import pytest

from corpusgraph.config import LLMSection
from corpusgraph.llm.base import Usage
from corpusgraph.runner.failures import Failure, StageFailed, check_failures

KEY = "HTTP 401: Incorrect API key provided: sk-...0042."
LLM = LLMSection(max_failed_share=0.1, failed_share_min_calls=20)


def check(calls, errors, failures):
    logged = []
    check_failures("extract", "extract (9 units)", Usage(calls=calls, errors=errors), failures, LLM, logged.append)
    return logged


def test_every_call_failed_stops_even_a_small_pass():
    with pytest.raises(StageFailed, match=r"2 of 2 LLM calls of extract \(9 units\) failed \(every call\).*"
                                          r"Incorrect API key.*fix: the endpoint refused the key") as info:
        check(2, 2, [Failure(KEY, 2, 401)])
    assert info.value.stage == "extract" and info.value.usage.errors == 2


def test_a_share_over_the_limit_stops_once_enough_calls_were_sent():
    with pytest.raises(StageFailed, match="more than llm.max_failed_share"):
        check(40, 5, [Failure("HTTP 400: bad", 5, 400)])
    logged = check(10, 5, [Failure("HTTP 400: bad", 5, 400)])  # below failed_share_min_calls: shown only
    assert logged[0] == "  extract (9 units): 5 of 10 LLM calls failed (50%); the endpoint said:"
    assert logged[1] == "  x5: HTTP 400: bad"


def test_a_few_failures_are_shown_once_each_and_the_run_goes_on():
    failures = [Failure("HTTP 500: overloaded (gave up after 4 attempts)", 2, None), Failure(KEY, 1, 401)]
    logged = check(100, 3, failures)
    assert logged[1:] == ["  x2: HTTP 500: overloaded (gave up after 4 attempts)",
                          f"  x1: {KEY}\n      fix: the endpoint refused the key: set llm.api_key (write "
                          "${OPENAI_API_KEY} or similar in the config)"]
    assert check(100, 0, []) == []
