"""The cost model: what the LLM stages of a build would send (count.py, sample.py), priced per
stage (model.py) at configured or measured rates (rates.py), and presented (view.py).
"""
