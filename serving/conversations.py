"""Conversations the service keeps by `conversation_id`: each one's last exchanges, in memory.

Keyed by (API key name, the request's domain set, conversation_id): another key naming the same id
gets a conversation of its own, and so does the same key narrowed to fewer domains
(X-Access-Domains), so an exchange answered from a vault the request cannot read never reaches
the rewrite of its follow-up. Bounded three ways (config serve.conversations): exchanges per
conversation, conversations per key (least recently used dropped first), and an idle time-to-live.

Per process: behind a balancer over several processes, route a conversation to one of them
(sticky sessions), or send the turns in the request's `history` instead.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from typing import Callable

from corpusgraph.config import ConversationSection

__all__ = ["Conversations"]

Key = tuple[frozenset[str] | None, str]  # (domains, conversation id), under one key name


class Conversations:
    def __init__(self, section: ConversationSection, clock: Callable[[], float] = time.monotonic) -> None:
        self.section = section
        self.clock = clock
        self._by_key: dict[str, OrderedDict[Key, tuple[float, deque]]] = {}
        self._lock = threading.Lock()  # requests run on worker threads

    def _live(self, name: str) -> OrderedDict[Key, tuple[float, deque]]:
        """The key's conversations, the expired ones dropped (oldest use first, so from the front)."""
        held = self._by_key.setdefault(name, OrderedDict())
        cutoff = self.clock() - self.section.ttl_s
        while held:
            first = next(iter(held))
            if held[first][0] >= cutoff:
                break
            held.pop(first)
        return held

    def history(self, name: str, domains: frozenset[str] | None, conversation_id: str) -> list[dict[str, str]]:
        """The conversation's turns, oldest first ({"role", "content"}); [] for a new one."""
        with self._lock:
            held = self._live(name)
            entry = held.get((domains, conversation_id))
            if entry is None:
                return []
            held.move_to_end((domains, conversation_id))
            return [turn for question, answer in entry[1]
                    for turn in ({"role": "user", "content": question}, {"role": "assistant", "content": answer})]

    def add(self, name: str, domains: frozenset[str] | None, conversation_id: str, question: str, answer: str) -> None:
        """One exchange more (the answer cut to max_answer_chars); the oldest exchange, and the
        key's least recently used conversation, go when over their bounds."""
        answer = answer[: self.section.max_answer_chars]
        with self._lock:
            held = self._live(name)
            key = (domains, conversation_id)
            _, turns = held.pop(key, (0.0, deque(maxlen=self.section.max_exchanges)))
            turns.append((question, answer))
            held[key] = (self.clock(), turns)
            while len(held) > self.section.max_conversations_per_key:
                held.popitem(last=False)

    def count(self, name: str) -> int:
        with self._lock:
            return len(self._live(name))
