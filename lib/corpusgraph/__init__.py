"""corpusgraph: GraphRAG for large corpora.

Python API: `load_config`, `run_index` (with a `RunContext`), and the query side in
`corpusgraph.query`. Nothing heavy is imported here; Spark, Ray and the models load on use.
"""

from .config import Config, load_config

__all__ = ["Config", "load_config", "__version__"]
__version__ = "0.1.0"
