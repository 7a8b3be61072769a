"""The configuration's sections, one module per concern; `corpusgraph.config` assembles them."""
