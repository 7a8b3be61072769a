"""`corpusgraph report`: the data of an index's HTML page (data.py) and the page (html.py).
"""
