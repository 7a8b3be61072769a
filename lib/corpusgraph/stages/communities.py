"""communities: entities + relationships -> communities (hierarchical Leiden).

The graph is integer-encoded in Spark, only the (int, int, weight) edge list and the ordered id
list come to the driver, Leiden runs there (graph/leiden.py), and the membership goes back to
Spark to gather each community's relationships and source units.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from corpusgraph.config import CommunitiesSection

__all__ = ["encode_graph", "detect", "membership_table", "level_summary", "kept_membership", "extend_or_detect",
           "communities_from_membership", "MEMBERSHIP_SCHEMA"]

MEMBERSHIP_SCHEMA = pa.schema(
    [
        ("community_id", pa.string()),
        ("level", pa.int32()),
        ("parent_id", pa.string()),
        ("entity_id", pa.string()),
        ("graph_version", pa.string()),
        ("modularity", pa.float64()),
    ]
)


def encode_graph(entities, relationships):
    """(nodes, edges): nodes(entity_id, idx) ordered by id; edges(a, b, weight) as ints."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    # A global ordering is one partition's work, but it is one narrow column of ids.
    nodes = entities.select("entity_id").withColumn(
        "idx", (F.row_number().over(Window.orderBy("entity_id")) - 1).cast("long")
    )
    edges = (
        relationships.select("source_id", "target_id", "weight")
        .join(nodes.withColumnRenamed("entity_id", "source_id").withColumnRenamed("idx", "a"), "source_id")
        .join(nodes.withColumnRenamed("entity_id", "target_id").withColumnRenamed("idx", "b"), "target_id")
        .select("a", "b", "weight")
    )
    return nodes, edges


def _community_id(level: int, members: list[str]) -> str:
    h = hashlib.sha256(f"{level}|".encode())
    for m in members:
        h.update(m.encode())
        h.update(b",")
    return h.hexdigest()[:32]


def detect(ids: list[str], a: np.ndarray, b: np.ndarray, w: np.ndarray, section: CommunitiesSection,
           on_level=None) -> pa.Table:
    """Driver side: hierarchical Leiden over the encoded graph -> membership rows. `on_level(n)`
    is told the number of levels built so far, after each (the stage's progress bar)."""
    from corpusgraph.graph.leiden import hierarchical_leiden

    edges = np.stack([a, b], axis=1).astype(np.int64) if len(a) else np.zeros((0, 2), dtype=np.int64)
    order = np.lexsort((edges[:, 1], edges[:, 0])) if len(edges) else np.array([], dtype=np.int64)
    version = hashlib.sha256(
        np.ascontiguousarray(edges[order]).tobytes() + np.asarray(w, dtype=np.float64)[order].tobytes()
        + "|".join(ids).encode()
    ).hexdigest()[:16]
    result = hierarchical_leiden(
        len(ids), edges, np.asarray(w, dtype=np.float64), max_cluster_size=section.max_cluster_size,
        seed=section.seed, max_levels=section.max_levels, resolution=section.resolution,
        engine=section.engine, on_level=on_level,
    )
    groups = []
    for c in result.communities:
        members = [ids[int(i)] for i in c.nodes]
        groups.append((c.level, members, c.parent, version, float(result.modularity.get(c.level, float("nan")))))
    return membership_table(groups)


def membership_table(groups) -> pa.Table:
    """Membership rows of communities given as (level, member ids, index of the parent among
    `groups` or None, graph version, modularity), parents before their children; a community's
    id is the hash of its level and members, so an unchanged community keeps its id."""
    cids: list[str] = []
    rows: dict[str, list] = {f.name: [] for f in MEMBERSHIP_SCHEMA}
    for level, members, parent, version, q in groups:
        cids.append(_community_id(level, members))
        for e in members:
            rows["community_id"].append(cids[-1])
            rows["level"].append(level)
            rows["parent_id"].append(cids[parent] if parent is not None else None)
            rows["entity_id"].append(e)
            rows["graph_version"].append(version)
            rows["modularity"].append(q)
    return pa.table(rows, schema=MEMBERSHIP_SCHEMA)


def level_summary(membership: pa.Table) -> dict[int, tuple[int, float | None]]:
    """level -> (communities, modularity) of membership rows: what their communities rows hold
    (communities_from_membership keeps one level and modularity per community)."""
    out: dict[int, tuple[int, float | None]] = {}
    seen: set[str] = set()
    for cid, level, q in zip(*(membership.column(c).to_pylist() for c in ("community_id", "level", "modularity"))):
        if cid in seen:
            continue
        seen.add(cid)
        n, first = out.get(level, (0, None if q is None or q != q else q))  # NaN: a level with no edges to score
        out[level] = (n + 1, first)
    return out


def kept_membership(ids: list[str], labels: list[np.ndarray], parents: list[np.ndarray],
                    versions: dict[int, str], recorded: dict[int, float]) -> pa.Table:
    """Membership rows of a hierarchy kept by an update (graph/extend.py): labels[L][i] is node
    i's slot at level L, parents[L][k] the level L-1 slot of level-L slot k; each level keeps the
    graph version and modularity recorded when it was detected."""
    groups, index_of = [], {}
    for lv, lab in enumerate(labels):
        order = np.argsort(lab, kind="stable")
        sorted_lab = lab[order]
        for k in np.unique(sorted_lab[sorted_lab >= 0]):
            parent = index_of.get((lv - 1, int(parents[lv][k]))) if lv else None
            index_of[(lv, int(k))] = len(groups)
            groups.append((lv, sorted(ids[i] for i in order[sorted_lab == k]), parent, versions.get(lv, ""),
                           recorded.get(lv, float("nan"))))
    return membership_table(groups)


def extend_or_detect(ids: list[str], a: np.ndarray, b: np.ndarray, w: np.ndarray, old_rows: list[dict],
                     section: CommunitiesSection, redetect_drift: float) -> tuple[pa.Table, dict]:
    """An update's communities: the stored partition (`old_rows`: communities rows with at least
    community_id, level, parent_id, entity_ids, graph_version, modularity) extended to the new
    nodes level by level (graph/extend.py), kept while its modularity on the new graph is within
    `redetect_drift` (relative loss) of the one recorded at detection, else detected in full.
    (membership rows, what was decided: entities, new_nodes, redetected, modularity_recorded,
    modularity_extended, drift)."""
    from corpusgraph.graph.extend import extend_partition, modularity, old_partition
    from corpusgraph.graph.leiden import normalise_edges

    old = old_partition(ids, old_rows)
    edges, weights = normalise_edges(len(ids), np.stack([a, b], axis=1).astype(np.int64) if len(a) else
                                     np.zeros((0, 2), np.int64), w)
    q_rec = old.recorded.get(0, float("nan"))
    redetect, q_ext, drift = True, float("nan"), float("nan")
    if old.labels and len(ids) and np.isfinite(q_rec) and q_rec > 0:
        labels, parents = extend_partition(len(ids), edges, weights, old)
        q_ext = modularity(len(ids), edges, weights, labels[0])
        drift = (q_rec - q_ext) / q_rec if np.isfinite(q_ext) else float("inf")
        redetect = not drift <= redetect_drift
    if redetect:
        membership = detect(ids, a, b, w, section)
    else:
        membership = kept_membership(ids, labels, parents, old.versions, old.recorded)
    decided = {"entities": len(ids), "new_nodes": int((old.labels[0] < 0).sum()) if old.labels else len(ids),
               "redetected": int(redetect), "modularity_recorded": q_rec, "modularity_extended": q_ext,
               "drift": drift}
    return membership, decided


def communities_from_membership(membership, entities, relationships):
    """membership(community_id, level, parent_id, entity_id, ...) -> communities rows."""
    from pyspark.sql import functions as F

    units = membership.join(entities.select("entity_id", "unit_ids"), "entity_id").select(
        "community_id", F.explode("unit_ids").alias("unit_id")
    ).groupBy("community_id").agg(F.array_sort(F.collect_set("unit_id")).alias("unit_ids"))
    m_src = membership.select("community_id", F.col("entity_id").alias("source_id"))
    m_tgt = membership.select("community_id", F.col("entity_id").alias("target_id"))
    rels = (
        relationships.select("rel_id", "source_id", "target_id")
        .join(m_src, "source_id")
        .join(m_tgt, ["community_id", "target_id"])
        .groupBy("community_id")
        .agg(F.array_sort(F.collect_set("rel_id")).alias("rel_ids"))
    )
    base = membership.groupBy("community_id").agg(
        F.first("level").alias("level"),
        F.first("parent_id").alias("parent_id"),
        F.array_sort(F.collect_list("entity_id")).alias("entity_ids"),
        F.first("graph_version").alias("graph_version"),
        F.first("modularity").alias("modularity"),
    )
    empty = F.array().cast("array<string>")
    return base.join(rels, "community_id", "left").join(units, "community_id", "left").select(
        "community_id",
        F.col("level").cast("int").alias("level"),
        "parent_id",
        "entity_ids",
        F.coalesce("rel_ids", empty).alias("rel_ids"),
        F.coalesce("unit_ids", empty).alias("unit_ids"),
        F.size("entity_ids").cast("int").alias("size"),
        "graph_version",
        "modularity",
    )
