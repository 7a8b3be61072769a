"""The Ray side of an LLM or embedding pass: Ray's start-up and the actors that answer the
hand-off's Parquet rows (base.py), the LLM pass (llm.py), the embedding pass (embed.py), and
Ray on a Spark application's workers (cluster.py).
"""
