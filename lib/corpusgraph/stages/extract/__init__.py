"""Extraction: requests and packs (llm.py), answer parsing (parse.py), gleaning (glean.py), the
LLM-free fast method (fast.py), and prompt tuning (tune.py).
"""
