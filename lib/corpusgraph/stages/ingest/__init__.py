"""Ingest: files (files.py) and Parquet datasets (parquet.py) into `documents` and `quarantine`.
"""
