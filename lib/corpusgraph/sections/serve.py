"""The query service (`corpusgraph serve`)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from corpusgraph.sections.base import Section

__all__ = ["ServeKey", "ServeSection", "ConversationSection", "McpSection", "UiSection", "TelemetrySection"]


class ServeKey(Section):
    name: str = Field(..., min_length=1, description="Label for logs and metrics; never the key itself.")
    key: SecretStr = Field(..., min_length=1, description="The key; write ${VAR} here, never a literal secret.")
    domains: list[str] = Field(
        ..., min_length=1,
        description='Access domains the key may read; ["*"] for all. It sees nothing built from other domains.',
    )


class ConversationSection(Section):
    """Follow-up questions under a `conversation_id`: the service keeps each conversation's last
    exchanges, per API key and domain set, in this process's memory."""

    enabled: bool = Field(True, description="Keep conversations by `conversation_id`; false: a request naming "
                          "one is refused (422), while `history` sent in the request still works.")
    max_exchanges: int = Field(6, ge=1, le=50, description="Question-and-answer pairs kept per conversation (the "
                               "oldest go first), and the most a request's `history` may hold (twice this many "
                               "turns).")
    max_conversations_per_key: int = Field(200, ge=1, description="Conversations kept per API key; the least "
                                           "recently used goes first.")
    ttl_s: float = Field(3600.0, gt=0, description="A conversation not used for this many seconds is forgotten.")
    max_answer_chars: int = Field(2000, ge=100, description="An answer is kept in a conversation cut to this many "
                                  "characters, and an assistant turn of a request's `history` may be this long.")


class McpSection(Section):
    """The Model Context Protocol server (needs the `mcp` extra: pip install 'corpusgraph[mcp]')."""

    enabled: bool = Field(False, description="Also serve MCP's streamable HTTP transport at `path` inside "
                          "`corpusgraph serve`, under the same API keys (`corpusgraph mcp` serves stdio).")
    path: str = Field("/mcp", pattern=r"^/[A-Za-z0-9_/-]*$", description="Where the MCP endpoint is mounted.")
    allowed_hosts: list[str] = Field(default_factory=list, description="Host headers accepted besides loopback "
                                     "(DNS-rebinding protection), e.g. graph.example.com:443; needed behind a name.")
    allowed_origins: list[str] = Field(default_factory=list, description="Browser Origin headers accepted besides "
                                       "loopback ones.")


class UiSection(Section):
    enabled: bool = Field(True, description="Serve the web page (search entities, draw a neighbourhood, read "
                          "community reports, ask with a streamed answer) at `path`; it calls /v1 with the key the "
                          "user types in.")
    path: str = Field("/ui", pattern=r"^/[A-Za-z0-9_-]+$", description="Where the page is served.")


class TelemetrySection(Section):
    """OpenTelemetry traces (needs the `otel` extra: pip install 'corpusgraph[otel]')."""

    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP traces endpoint, e.g. "
                                      "http://collector:4318/v1/traces; null: no traces, and the SDK is not loaded.")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="Headers sent with each export (an "
                                          "API key: write ${VAR} here).")
    service_name: str = Field("corpusgraph", min_length=1, description="The traces' service.name.")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="Share of requests traced (parent-based: a traced "
                                "caller's requests are traced).")
    record_question: bool = Field(False, description="Put the question's text on the query span; off, spans hold "
                                  "no corpus text and no question, only methods, counts, tokens and times.")


class ServeSection(Section):
    """The query service (`corpusgraph serve`); command-line options override these."""

    host: str = Field("127.0.0.1", description="Interface to listen on; another than loopback only with API keys.")
    port: int = Field(8080, ge=0, le=65535, description="Port to listen on.")
    api_keys: list[ServeKey] = Field(
        default_factory=list, description="Accepted keys, each bound to access domains. None at all (and no "
        "api_key_file): no authentication, every domain open; for local use only.",
    )
    api_key_file: str | None = Field(
        None, description="File of more keys, one per line: `KEY DOMAIN[,DOMAIN...]` or `KEY *`; # comments.")
    request_timeout_s: float = Field(
        180.0, gt=0, description="A question not answered within this many seconds gets 504. Global search makes "
        "several LLM calls (answer times under load: tests/benchmarks/results/service_load.json).",
    )
    max_concurrent_queries: int = Field(
        4, ge=1, description="Questions worked on at once; later ones wait, and the wait counts against the timeout.")
    max_question_chars: int = Field(2000, ge=1, description="Longer questions are refused with 422.")
    max_top_k: int = Field(50, ge=1, le=50, description="Largest `top_k` a request may ask for.")
    max_level: int = Field(15, ge=0, description="Largest community `level` a request may name.")
    max_page_size: int = Field(200, ge=1, description="Most rows one listing (communities, an entity's edges) returns.")
    max_body_bytes: int = Field(65_536, ge=1, description="A request body over this many bytes gets 413 before it "
                                "is parsed (declared by Content-Length, or counted as it streams in).")
    body_timeout_s: float = Field(30.0, gt=0, description="A request body not received in full within this many "
                                  "seconds gets 408 (a client trickling bytes holds no worker for long).")
    header_timeout_s: float = Field(10.0, gt=0, description="A connection that has not sent a request's headers in "
                                    "full this many seconds after connecting (or after its last response) is closed.")
    keep_alive_s: int = Field(5, ge=1, description="An idle keep-alive connection is closed after this many seconds.")
    max_header_bytes: int = Field(16_384, ge=1024, description="Request line and headers larger than this are refused.")
    rate_limit_per_s: float = Field(0.0, ge=0, description="Requests per second each API key (or, without keys, all "
                                    "callers together) may make on /v1 routes, as a token bucket; 0: no limit.")
    rate_limit_burst: int = Field(20, ge=1, description="Requests a key may make at once before rate_limit_per_s applies.")
    cors_origins: list[str] = Field(default_factory=list, description="Browser origins allowed to call the service "
                                    "(CORS), e.g. https://app.example.com; none: CORS closed.")
    admin_key: SecretStr | None = Field(None, description="Key for POST /admin/reload (as `X-Admin-Key`); write "
                                        "${VAR} here. None: the endpoint is off (404).")
    reload_poll_s: float = Field(0.0, ge=0, description="Check the warehouse for a new index version this often and "
                                 "swap it in when no run is writing it; 0: only on POST /admin/reload.")
    malloc_arenas: int = Field(2, ge=0, description="Most glibc malloc arenas the service process uses (mallopt "
                               "M_ARENA_MAX, set at start-up before any thread). glibc's default, 8 per core, lets "
                               "each of the service's many threads keep freed memory in an arena of its own, so "
                               "resident memory climbs in steps under load; 0: glibc's default.")
    stream_keepalive_s: float = Field(15.0, gt=0, description="A streamed answer (POST /v1/query with stream: "
                                      "true) silent this long sends an SSE comment, so proxies and load balancers "
                                      "with idle timeouts keep the connection open while global search maps.")
    max_context_tokens: int = Field(8000, ge=200, description="Largest `max_tokens` (context budget) a POST "
                                    "/v1/context may ask for.")
    conversations: ConversationSection = Field(default_factory=ConversationSection,
                                               description="Follow-up questions by conversation_id.")
    mcp: McpSection = Field(default_factory=McpSection, description="The MCP server.")
    ui: UiSection = Field(default_factory=UiSection, description="The web page.")
    telemetry: TelemetrySection = Field(default_factory=TelemetrySection, description="OpenTelemetry traces.")
