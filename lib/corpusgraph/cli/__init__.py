"""The `corpusgraph` command line: every subcommand is registered in main.py.
"""
