"""The LLM layer: one small protocol, one HTTP client, the embedded CPU model.

Importing this package starts nothing and opens nothing; aiohttp and httpx are its only non-stdlib
imports beyond numpy (base.py); the official `openai` package is imported on first use by the Batch
API's calls (batch_api.py) only. llama-cpp-python is never imported here: the embedded server runs it
in a subprocess.
"""

from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult, Embedder, Usage
from corpusgraph.llm.cache import ResponseCache, cache_key
from corpusgraph.llm.factory import open_chat_model
from corpusgraph.llm.openai_http import OpenAIChatModel
from corpusgraph.llm.parse import parse_json_answer
from corpusgraph.llm.server import EmbeddedServer, EmbeddedServerError

__all__ = [
    "ChatModel",
    "ChatRequest",
    "ChatResult",
    "Embedder",
    "Usage",
    "ResponseCache",
    "cache_key",
    "OpenAIChatModel",
    "EmbeddedServer",
    "EmbeddedServerError",
    "open_chat_model",
    "parse_json_answer",
]
