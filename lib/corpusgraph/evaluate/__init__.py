"""Scoring answers against gold answers: exact match, token F1, an LLM judge, retrieval recall.
"""
