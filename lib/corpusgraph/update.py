"""Incremental update: new, changed and deleted documents, without paying for a rebuild.

What each step redoes, and why it is enough:

- ingest (steps.ingest): documents are keyed by content hash, so a new file is a new row, an
  edited file is a new row plus its old version soft-deleted, and a vanished file is
  soft-deleted.
- chunk (update_steps.chunk): only live documents without units are chunked; units of dead
  documents are removed, both by Delta MERGE. Unit ids are content hashes, so untouched
  documents keep theirs.
- extract (steps.extract): sends only units with no stored extraction, i.e. the new ones.
- resolve (steps.resolve, stages/resolve_run.py): new mentions are resolved against the stored
  pair decisions, not re-resolved. Nodes (one per normalised name) and candidate pairs are
  recomputed from the stored extractions of live units (cheap Spark, no LLM). Each node has a
  signature, a hash of what a pair score and an adjudication request read from it (key, title,
  type, descriptions, neighbour names); a pair whose two signatures match its row in
  `resolve_pairs` (and whose scoring and prompt fingerprints still hold) keeps its stored score
  and LLM verdict. Only pairs touching a new or changed node, i.e. a name the added or deleted
  units mention, are scored, and only those of them in the ambiguous band go to the LLM; pairs
  whose endpoint vanished drop out. Connected components (with the chain guard) then run over
  all merge edges, and entities, aliases, relationships and claims are rebuilt from live
  mentions, so the tables equal a full rebuild's: a reused decision is the one the rebuild would
  compute, since everything it depends on is in the signatures and fingerprints. Entities,
  relationships and claims that only deleted units supported disappear because their extractions
  are no longer live. The stage's rows say what was redone: pairs_scored, pairs_reused,
  pairs_dropped, adjudicated, adjudications_reused.
- communities (update_steps.communities): the previous partition is extended to new nodes by
  weighted neighbour majority, level by level (graph/extend.py); its modularity on the new graph
  is compared with the modularity recorded when it was detected. Past `update.redetect_drift`
  (relative loss) the graph is re-detected in full; otherwise the partition is kept. Either way
  the table is written by MERGE, and community ids are hashes of their members, so an unchanged
  community keeps its id.
- reports (steps.reports): only communities whose (id, built_from) has no report are sent: those
  whose membership changed (new id), whose content changed (new built_from), and their ancestors
  (whose members or child reports changed with them).
- embed (steps.embed): only items whose text hash has no vector.

The run is pipeline `update` of the registry (registry.py), recorded in `runs` (kind "update")
with what was redone, and next to it (the `cost` step) the estimated cost of a full rebuild of
the live corpus (estimate.py, at the warehouse's own rates).
"""

from __future__ import annotations

# The graph-extension names stay importable here for today's callers (graph/extend.py has them).
from .graph.extend import OldPartition, extend_partition, modularity, old_partition
from .run import RunContext, StageResult

__all__ = ["run_update", "extend_partition", "modularity", "OldPartition", "old_partition"]


def run_update(ctx: RunContext) -> dict[str, StageResult]:
    """Run pipeline `update`, its cost step pricing a full rebuild with estimate.py's model."""
    from .estimate import estimate_warehouse
    from .pipeline import run_pipeline

    ctx.services.setdefault("price_rebuild", lambda tables: estimate_warehouse(tables, ctx.cfg))
    return run_pipeline(ctx, "update")
