"""Entity resolution: mentions and node ids (mentions.py), blocking (blocking.py), pair scoring
(score.py), merging (merge.py) and LLM adjudication and summaries (llm.py).
"""
