"""The index runner: the stage registry, pipelines and the run context, the steps that read
and write Delta around the pure transforms of stages/, the Spark-to-Ray hand-off and the Ray
passes, progress, and the dry run.
"""
