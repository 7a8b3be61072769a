"""corpusgraph: GraphRAG for large corpora.

The public face: what notebooks, jobs and other programs import. Every name loads its module on
first use, so `import corpusgraph` starts nothing and imports neither Spark, Ray nor FAISS.

    cfg = corpusgraph.load_config("conf/local.yaml")
    spark = corpusgraph.build_spark(cfg.spark, storage=cfg.storage)
    corpusgraph.run_index(corpusgraph.RunContext(cfg, spark, kind="index"))
    corpusgraph.index(spark.table("kb.articles"), cfg)  # or a DataFrame of documents as input
    with corpusgraph.ChatEndpoint(cfg.llm.for_stage("query"), "work/embedded-server.log") as endpoint:
        engine = corpusgraph.open_query_engine(cfg, endpoint.url())
        print(corpusgraph.format_answer(engine.ask("...", method="local")))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corpusgraph.lazy import installed_version, lazy_exports


__version__ = installed_version()

_WHERE = {
    # configuration
    "Config": "corpusgraph.config",
    "ConfigError": "corpusgraph.config",
    "load_config": "corpusgraph.config",
    # running an index: Spark, the run context, pipelines, the dry run
    "build_spark": "corpusgraph.runner.spark",
    "use_active_session": "corpusgraph.runner.spark",
    "ray_on_spark": "corpusgraph.runner.passes.cluster",
    "RunContext": "corpusgraph.runner.run",
    "StageResult": "corpusgraph.runner.run",
    "run_pipeline": "corpusgraph.runner.pipeline",
    "run_index": "corpusgraph.runner.pipeline",
    "run_update": "corpusgraph.runner.pipeline",
    "format_summary": "corpusgraph.runner.pipeline",
    "run_estimate": "corpusgraph.runner.dry_run",
    "index": "corpusgraph.runner.api",
    "update": "corpusgraph.runner.api",
    "register_tables": "corpusgraph.runner.api",
    "format_estimate": "corpusgraph.estimate.view",
    "write_chart": "corpusgraph.estimate.view",
    # asking an index
    "ChatEndpoint": "corpusgraph.llm.chat_endpoint",
    "open_query_engine": "corpusgraph.query.open",
    "QueryEngine": "corpusgraph.query.engine",
    "IndexStore": "corpusgraph.query.store",
    "Answer": "corpusgraph.query.answer",
    "format_answer": "corpusgraph.query.answer",
    "normalise_name": "corpusgraph.text",
    "create_app": "serving.app",
    # retrievers for other frameworks (the `retrievers` extra)
    "LangChainRetriever": "corpusgraph.integrations.langchain",
    "LlamaIndexRetriever": "corpusgraph.integrations.llamaindex",
    # the command line
    "main": "corpusgraph.cli.main",
    "build_parser": "corpusgraph.cli.main",
}
__all__ = ["__version__", "Config", "ConfigError", "load_config", "build_spark", "use_active_session",
           "ray_on_spark", "RunContext", "StageResult", "run_pipeline", "run_index", "run_update",
           "format_summary", "run_estimate", "index", "update", "register_tables", "format_estimate", "write_chart", "ChatEndpoint",
           "open_query_engine", "QueryEngine", "IndexStore", "Answer", "format_answer", "normalise_name",
           "create_app", "LangChainRetriever", "LlamaIndexRetriever", "main", "build_parser"]

if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from corpusgraph.cli.main import build_parser, main
    from corpusgraph.config import Config, ConfigError, load_config
    from corpusgraph.estimate.view import format_estimate, write_chart
    from corpusgraph.integrations.langchain import LangChainRetriever
    from corpusgraph.integrations.llamaindex import LlamaIndexRetriever
    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.query.answer import Answer, format_answer
    from corpusgraph.query.engine import QueryEngine
    from corpusgraph.query.open import open_query_engine
    from corpusgraph.query.store import IndexStore
    from corpusgraph.runner.api import index, register_tables, update
    from corpusgraph.runner.dry_run import run_estimate
    from corpusgraph.runner.passes.cluster import ray_on_spark
    from corpusgraph.runner.pipeline import format_summary, run_index, run_pipeline, run_update
    from corpusgraph.runner.run import RunContext, StageResult
    from corpusgraph.runner.spark import build_spark, use_active_session
    from corpusgraph.text import normalise_name
    from serving.app import create_app

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, __all__)
