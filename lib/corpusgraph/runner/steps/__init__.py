"""One step per stage: read the stage's tables, call the pure transforms of stages/, write its
outputs (index.py; resolve.py for resolution; embed.py; runner/steps/update.py for update's own steps).
"""
