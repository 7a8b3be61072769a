"""Where an index lives: locations and filesystems, the Delta writer, the durable LLM progress
shards, the run lock, full-disk handling, and the FAISS vector files the embed step writes and
the query side reads.
"""
