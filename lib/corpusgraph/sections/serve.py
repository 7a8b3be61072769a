"""The query service (`corpusgraph serve`)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from corpusgraph.sections.base import Section

__all__ = ["ServeKey", "ServeSection"]


class ServeKey(Section):
    name: str = Field(..., min_length=1, description="Label for logs and metrics; never the key itself.")
    key: SecretStr = Field(..., min_length=1, description="The key; write ${VAR} here, never a literal secret.")
    domains: list[str] = Field(
        ..., min_length=1,
        description='Access domains the key may read; ["*"] for all. It sees nothing built from other domains.',
    )


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
