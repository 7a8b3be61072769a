"""CSV files for `neo4j-admin database import full`, and the command line that loads them.

Header syntax as neo4j-admin reads it (Operations Manual, "Import header format"): `name:ID(Space)`
keys each node by its id within an id space (the id is also stored as property `name`),
`:START_ID(Space)` / `:END_ID(Space)` join relationships to them, `:LABEL` and `:TYPE` name labels
and relationship types, and `name:int`, `name:double`, `name:string[]` type the properties. Arrays
(and multiple labels) are separated by U+001F, which no value contains (it is removed from
values), passed as `--array-delimiter`; texts and descriptions hold newlines, hence
`--multiline-fields=true`. Quotes are doubled (RFC 4180), neo4j-admin's default quoting. An empty
field is no property.

The graph:

    (:Entity[:<TYPE>] {entity_id, title, type, description, aliases[], frequency, degree, domains[]})
    (:Entity)-[:RELATED {rel_id, description, weight, domains[]}]->(:Entity)
    (:Community {community_id, level, parent_id, size, domains[], title, summary, rating, ...})
    (:Entity)-[:IN_COMMUNITY {level}]->(:Community)
    (:Community)-[:CHILD_OF]->(:Community)
    (:TextUnit {unit_id, doc_id, ordinal, n_tokens, char_start, char_end, access_domain, text})
    (:Entity)-[:MENTIONED_IN]->(:TextUnit)
    (:Document {doc_id, title, source_uri, access_domain})
    (:TextUnit)-[:PART_OF]->(:Document)
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

from corpusgraph.export.source import View
from corpusgraph.query.rows import report_shown

__all__ = ["write_neo4j", "ARRAY_DELIMITER", "IMPORT_SCRIPT"]

ARRAY_DELIMITER = "\x1f"
IMPORT_SCRIPT = "neo4j-import.sh"
_LABEL_OK = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_CONTROL = re.compile("[\x00\x1f]")

NODE_FILES = {
    "entities.csv": ["entity_id:ID(Entity)", ":LABEL", "title", "type", "description", "aliases:string[]",
                     "frequency:int", "degree:int", "domains:string[]"],
    "communities.csv": ["community_id:ID(Community)", ":LABEL", "level:int", "parent_id", "size:int",
                        "domains:string[]", "title", "summary", "rating:double", "rating_explanation",
                        "findings"],
    "text_units.csv": ["unit_id:ID(TextUnit)", ":LABEL", "doc_id", "ordinal:int", "n_tokens:int", "char_start:int",
                       "char_end:int", "access_domain", "text"],
    "documents.csv": ["doc_id:ID(Document)", ":LABEL", "title", "source_uri", "access_domain"],
}
EDGE_FILES = {
    "related.csv": [":START_ID(Entity)", ":END_ID(Entity)", ":TYPE", "rel_id", "description", "weight:double",
                    "domains:string[]"],
    "in_community.csv": [":START_ID(Entity)", ":END_ID(Community)", ":TYPE", "level:int"],
    "child_of.csv": [":START_ID(Community)", ":END_ID(Community)", ":TYPE"],
    "mentioned_in.csv": [":START_ID(Entity)", ":END_ID(TextUnit)", ":TYPE"],
    "part_of.csv": [":START_ID(TextUnit)", ":END_ID(Document)", ":TYPE"],
}


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ARRAY_DELIMITER.join(_CONTROL.sub("", str(v)) for v in value if v is not None)
    return _CONTROL.sub("", str(value))


class _Csv:
    def __init__(self, path: Path, header: list[str]):
        self.path = path
        self._f = open(path, "w", encoding="utf-8", newline="")
        self._w = csv.writer(self._f, lineterminator="\n")
        self._w.writerow(header)
        self.rows = 0
        self._pending: list[list[str]] = []

    def add(self, *values) -> None:
        self._pending.append([_cell(v) for v in values])
        self.rows += 1
        if len(self._pending) >= 2048:
            self.flush()

    def flush(self) -> None:
        self._w.writerows(self._pending)
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        self._f.close()


def _labels(*labels) -> list[str]:
    return [lb for lb in labels if lb and _LABEL_OK.match(lb)]


def import_command(out_dir: Path, database: str) -> list[str]:
    """`neo4j-admin database import full` over the files written (absolute paths)."""
    out = out_dir.resolve()
    argv = ["neo4j-admin", "database", "import", "full", database, "--id-type=string",
            "--array-delimiter=U+001F", "--multiline-fields=true"]
    argv += [f"--nodes={out / name}" for name in NODE_FILES]
    argv += [f"--relationships={out / name}" for name in EDGE_FILES]
    return argv


def write_neo4j(view: View, out_dir: Path, database: str = "neo4j") -> dict:
    """Write the node and relationship CSVs and <out_dir>/neo4j-import.sh; returns counts and the command."""
    files = {name: _Csv(out_dir / name, header) for name, header in {**NODE_FILES, **EDGE_FILES}.items()}
    try:
        _write(view, files)
    finally:
        for f in files.values():
            f.close()
    argv = import_command(out_dir, database)
    command = " ".join(shlex.quote(a) for a in argv)
    script = out_dir / IMPORT_SCRIPT
    head, options = " ".join(shlex.quote(a) for a in argv[:5]), [shlex.quote(a) for a in argv[5:]]
    script.write_text("#!/bin/sh\n# Load this export into an empty database (stop it first, or add "
                      "--overwrite-destination to replace one).\nexec " + " \\\n  ".join([head, *options]) + "\n")
    script.chmod(0o755)
    return {"files": {n: f.rows for n, f in files.items()}, "command": command, "script": str(script)}


def _write(view: View, files: dict[str, _Csv]) -> None:
    ents, units = files["entities.csv"], files["mentioned_in.csv"]
    cols = ["entity_id", "title", "type", "description", "aliases", "frequency", "degree", "unit_ids"]
    for e in view.entity_rows(cols):
        eid = e["entity_id"]
        ents.add(eid, _labels("Entity", e["type"]), e["title"], e["type"], e["description"], e["aliases"],
                 e["frequency"], e["degree"], view.domains_of(e["unit_ids"]))
        for u in dict.fromkeys(e["unit_ids"] or ()):
            if view.unit_visible(u):
                units.add(eid, u, "MENTIONED_IN")

    rel = files["related.csv"]
    for r in view.relationship_rows(["rel_id", "source_id", "target_id", "description", "weight", "unit_ids"]):
        rel.add(r["source_id"], r["target_id"], "RELATED", r["rel_id"], r["description"], r["weight"],
                view.domains_of(r["unit_ids"]))

    reports = _reports(view)
    coms, member, child = files["communities.csv"], files["in_community.csv"], files["child_of.csv"]
    for c in view.communities(["community_id", "level", "parent_id", "entity_ids", "unit_ids", "size"]):
        cid = c["community_id"]
        rep = reports.get(cid) or {}
        findings = rep.get("findings")
        coms.add(cid, ["Community"], c["level"], c["parent_id"], c["size"], view.domains_of(c["unit_ids"]),
                 rep.get("title"), rep.get("summary"), rep.get("rating"), rep.get("rating_explanation"),
                 json.dumps(findings, ensure_ascii=False) if findings else None)
        for e in dict.fromkeys(c["entity_ids"] or ()):
            if e in view.entities:
                member.add(e, cid, "IN_COMMUNITY", c["level"])
        if c["parent_id"] is not None and c["parent_id"] in view.view_parent:
            child.add(cid, c["parent_id"], "CHILD_OF")

    docs = files["documents.csv"]
    exported_docs: set[str] = set()
    for d in view.source.rows("documents", ["doc_id", "title", "source_uri", "access_domain", "deleted"]):
        if view.doc_visible(d):
            docs.add(d["doc_id"], ["Document"], d["title"], d["source_uri"], d["access_domain"])
            exported_docs.add(d["doc_id"])
    tu, part = files["text_units.csv"], files["part_of.csv"]
    for batch in view.source.batches("text_units", ["unit_id", "doc_id", "ordinal", "n_tokens", "char_start",
                                                     "char_end", "text"]):
        for u in batch.to_pylist():
            if view.unit_visible(u["unit_id"]):
                tu.add(u["unit_id"], ["TextUnit"], u["doc_id"], u["ordinal"], u["n_tokens"], u["char_start"],
                       u["char_end"], view.unit_domain[u["unit_id"]], u["text"])
                if u["doc_id"] in exported_docs:
                    part.add(u["unit_id"], u["doc_id"], "PART_OF")
                else:  # a unit of no known document: PART_OF would point at no node
                    view.dangling["part_of"] += 1


def _reports(view: View) -> dict[str, dict]:
    """Report fields of the view's communities (shown reports only, as the service): one small row
    per community, without the report's inputs; per-domain reports under their view ids."""
    from corpusgraph.query.access import domain_view_id

    cols = ["community_id", "title", "summary", "rating", "rating_explanation", "findings", "error"]
    out = {}
    for r in view.source.rows("community_reports", cols):
        if r["community_id"] in view.view_parent and report_shown(r):
            out[r["community_id"]] = r
    if view.partial:
        for r in view.source.rows("community_domain_reports", cols + ["domain"]):
            if (r["community_id"], r["domain"]) in view.partial and report_shown(r):
                out[domain_view_id(r["community_id"], r["domain"])] = r
    return out
