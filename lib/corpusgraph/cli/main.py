"""The `corpusgraph` command line: index, update, estimate, query, tables."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from corpusgraph.cli.common import add_config_options, missing_extra
from corpusgraph.cli.common import config_from_args as _config
from corpusgraph.config import Config, ConfigError
from corpusgraph.runner.failures import StageFailed
from corpusgraph.storage.diskfull import DiskFullError
from corpusgraph.storage.runlock import RunLocked, refuse_if_running

__all__ = ["main"]


class _QueryMethods(Sequence):
    """The query engine's METHODS as --method's choices, read when argparse first looks at them:
    importing the engine loads the LLM clients and the index store, which every other command
    (and --help) would otherwise wait for."""

    def _methods(self) -> tuple[str, ...]:
        from corpusgraph.query.engine import METHODS

        return METHODS

    def __getitem__(self, i):
        return self._methods()[i]

    def __len__(self) -> int:
        return len(self._methods())


def progress_interval_s(env) -> float | None:
    """CORPUSGRAPH_PROGRESS_INTERVAL_S: seconds between plain progress lines in a log (None when
    unset or not a number: progress's default)."""
    raw = env.get("CORPUSGRAPH_PROGRESS_INTERVAL_S")
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def _spark(cfg: Config, args=None):
    """The run's Spark session. Progress is corpusgraph's own (runner/progress.py); Spark's console
    progress bar and its WARN lines come back with --verbose (errors always show)."""
    from corpusgraph.runner import progress
    from corpusgraph.runner.spark import build_spark

    verbose = bool(getattr(args, "verbose", False))
    progress.configure(verbose=verbose, interval_s=progress_interval_s(os.environ))
    import pyspark  # noqa: F401  an install without the [index] extra says so before any talk of jars

    from corpusgraph.cli.setup import spark_jars_dir

    extra = {"spark.ui.showConsoleProgress": "false", **cfg.spark.extra}
    if verbose:
        extra["spark.ui.showConsoleProgress"] = "true"
    # Under spark-submit the jars came with --jars; otherwise a checkout's jars/ or `setup --jars`'s.
    jars_dir = cfg.spark.jars_dir if getattr(args, "submitted", False) else spark_jars_dir(cfg.spark.jars_dir)
    spark = build_spark(cfg.spark.model_copy(update={"extra": extra, "jars_dir": jars_dir}),
                        set_master=not getattr(args, "submitted", False), storage=cfg.storage)
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return spark


def _run_pipeline(args, kind: str, run) -> int:
    """An index or update run: the run lock checked, Spark up, `run(ctx)`, the summary printed."""
    from corpusgraph.runner.passes.cluster import ray_on_spark
    from corpusgraph.runner.pipeline import format_summary
    from corpusgraph.runner.run import RunContext

    cfg = _config(args)
    refuse_if_running(cfg.storage.warehouse, cfg.storage.run_lock_stale_s)  # before the JVM starts
    t0 = time.perf_counter()
    spark = _spark(cfg, args)
    ctx = RunContext(cfg, spark, kind=kind)
    ctx.preflight = not getattr(args, "no_preflight", False)
    try:
        # ray.address 'spark': Ray on this application's Spark workers, up from the first stage
        # that needs it until the run ends (runner/passes/cluster.py); any other address: nothing.
        with ray_on_spark(cfg.ray, spark):
            run(ctx)
    finally:
        print(format_summary(ctx, time.perf_counter() - t0))
        if not args.submitted:
            spark.stop()
    return 0


def cmd_index(args) -> int:
    from corpusgraph.runner.pipeline import run_index

    stages = [s.strip() for s in args.stages.split(",")] if args.stages else None
    return _run_pipeline(args, "index", lambda ctx: run_index(ctx, stages))


def cmd_estimate(args) -> int:
    """Dry run: what a build would cost, before any LLM spend (or after --calibrate N calls)."""
    from corpusgraph.estimate.view import format_estimate, write_chart
    from corpusgraph.runner import progress
    from corpusgraph.runner.dry_run import run_estimate

    cfg = _config(args)
    if args.calibrate < 0:
        raise ValueError("--calibrate takes a number of units >= 0")
    if args.sample_units is not None and args.sample_units < 0:
        raise ValueError("--sample-units takes a number of units >= 0")
    spark = _spark(cfg, args)
    try:
        est, out = run_estimate(cfg, spark, calibrate_n=args.calibrate, out_dir=args.out,
                                sample_units=args.sample_units)
        chart = write_chart(est, out / "estimate")
        progress.write(f"[corpusgraph] estimate written to {out / 'estimate.json'} and {chart}")
        print(json.dumps(est.to_dict(), indent=2) if args.json else format_estimate(est, cfg.estimate))
    finally:
        if not args.submitted:
            spark.stop()
    return 0


def cmd_update(args) -> int:
    """Incremental refresh: new, changed and deleted documents since the last build."""
    from corpusgraph.runner.pipeline import run_update

    return _run_pipeline(args, "update", run_update)


def cmd_query(args) -> int:
    from pathlib import Path

    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.query import format_answer
    from corpusgraph.query.open import open_query_engine

    cfg = _config(args)
    with ChatEndpoint(cfg.llm.for_stage("query"), Path(cfg.storage.cache_dir) / "embedded-server-query.log") as endpoint:
        engine = open_query_engine(cfg, endpoint.url())
        for question in args.question:
            answer = engine.ask(question, method=args.method, level=args.level)
            print(json.dumps(answer.to_dict(), indent=2) if args.json else format_answer(answer))
            print()
    return 0


def _units_for_tuning(cfg: Config, ingest: bool) -> tuple[list[dict], str]:
    """text_units rows to sample from: the warehouse's table, or ingest + chunk first."""
    from deltalake.exceptions import TableNotFoundError

    from corpusgraph.storage.locations import open_delta
    from corpusgraph.tables import table_path

    def read() -> list[dict]:
        try:
            dt = open_delta(table_path(cfg.storage.warehouse, "text_units"), cfg.storage.s3)
        except TableNotFoundError:
            return []
        return dt.to_pyarrow_dataset().to_table(columns=["unit_id", "text", "n_tokens"]).to_pylist()

    rows = [] if ingest else read()
    if rows:
        return rows, f"text_units at {cfg.storage.warehouse}"
    from corpusgraph.runner.pipeline import run_pipeline
    from corpusgraph.runner.run import RunContext

    spark = _spark(cfg)
    try:
        run_pipeline(RunContext(cfg, spark, kind="index"), "prompt-tune")
    finally:
        spark.stop()
    return read(), ", ".join(i if isinstance(i, str) else i.key() for i in cfg.ingest.inputs)


def cmd_prompt_tune(args) -> int:
    """Propose entity types and few-shot examples from the corpus; write an editable prompt folder."""
    from pathlib import Path

    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.llm.factory import open_chat_model
    from corpusgraph.prompts import load_prompt
    from corpusgraph.stages.extract.tune import tune, write_prompt_folder

    cfg = _config(args)
    rows, source = _units_for_tuning(cfg, args.ingest)
    base = load_prompt(cfg.prompt_path(cfg.extract.prompt))
    llm = cfg.llm.for_stage("extract")
    with ChatEndpoint(llm, Path(cfg.storage.cache_dir) / "embedded-server.log") as endpoint:
        chat = open_chat_model(llm, cfg.storage.cache_dir, base_url=endpoint.url())
        res = tune(chat, rows, cfg.extract, base, n=args.n, max_types=args.max_types, n_examples=args.examples,
                   seed=args.seed)
    written = write_prompt_folder(args.out, res, base, cfg.prompt_path(cfg.extract.prompt).parent, source, llm.model)
    print(f"sampled {res.sampled} units of {source}; entity types: {', '.join(res.entity_types)}; "
          f"{len(res.examples)} examples; {res.tokens_in} + {res.tokens_out} tokens")
    for note in res.notes:
        print(f"note: {note}")
    for path in written:
        print(f"wrote {path}")
    print(f"use it: add {Path(args.out).resolve() / 'entity_types.yaml'}'s extract keys to your config")
    return 0


def cmd_tables(args) -> int:
    """Row counts of every table, read without a JVM (delta-rs), wherever storage.warehouse is."""
    from deltalake.exceptions import TableNotFoundError

    from corpusgraph.storage.locations import open_delta
    from corpusgraph.tables import TABLES, table_path

    cfg = _config(args)
    s3 = cfg.storage.s3
    for name in TABLES:
        try:
            dt = open_delta(table_path(cfg.storage.warehouse, name), s3)
            rows = dt.to_pyarrow_dataset().count_rows()
            print(f"{name:<20} {rows:>8} rows  version {dt.version()}")
        except TableNotFoundError:
            print(f"{name:<20} (missing: run `corpusgraph index`)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from corpusgraph.lazy import installed_version  # the installed distribution's metadata (pyproject's version)

    p = argparse.ArgumentParser(prog="corpusgraph", description="GraphRAG over large corpora.")
    p.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def verbose(sp):
        sp.add_argument("--verbose", action="store_true",
                        help="also show Ray's and Spark's own progress output and Spark's warnings")

    sp = sub.add_parser("index", help="build or refresh the index (ingest -> embed)")
    add_config_options(sp)
    verbose(sp)
    sp.add_argument("--stages", help="comma-separated subset of stages to run, in pipeline order")
    sp.add_argument("--no-preflight", action="store_true", help="skip the one request of each kind sent to the "
                    "endpoints before the first stage (llm.preflight: false does the same)")
    sp.add_argument("--submitted", action="store_true", help=argparse.SUPPRESS)  # set by jobs/index.py
    sp.set_defaults(func=cmd_index)

    sp = sub.add_parser("query", help="answer questions with citations")
    add_config_options(sp)
    sp.add_argument("question", nargs="+", help="one or more questions")
    sp.add_argument("--method", default="auto", choices=_QueryMethods(), metavar="METHOD",
                    help="auto (the router picks, and says why), basic (vector), local (graph neighbourhood), "
                    "global (map-reduce over community reports) or drift (global primer, local follow-ups)")
    sp.add_argument("--level", type=int, default=None, help="community level for global search")
    sp.add_argument("--json", action="store_true", help="print answers as JSON")
    sp.set_defaults(func=cmd_query)

    from corpusgraph.cli.serve import add_serve_command  # argparse wiring only; FastAPI loads on use

    add_serve_command(sub)
    from corpusgraph.cli.mcp import add_mcp_command  # argparse wiring only; the mcp package loads on use

    add_mcp_command(sub)
    from corpusgraph.cli.export import register as add_export_command  # graphml, neo4j, parquet (export/__init__.py)

    add_export_command(sub)

    sp = sub.add_parser("estimate", help="dry run: LLM calls, tokens, dollars, GPU-hours and wall time per stage")
    add_config_options(sp)
    verbose(sp)
    sp.add_argument("--calibrate", type=int, default=0, metavar="N",
                    help="measure answer lengths, entity yield and community count with the real model on N sampled units")
    sp.add_argument("--out", help="folder for estimate.json and the chart (default: under storage.cache_dir)")
    sp.add_argument("--sample-units", type=int, default=None, metavar="N",
                    help="count extract prompt tokens on about N sampled units and scale up with a stated 95%% "
                    "bound (default: every unit up to 200,000, 50,000 sampled above; 0: always every unit)")
    sp.add_argument("--json", action="store_true", help="print the estimate as JSON")
    sp.add_argument("--submitted", action="store_true", help=argparse.SUPPRESS)  # set by jobs/estimate.py
    sp.set_defaults(func=cmd_estimate)

    sp = sub.add_parser("update", help="incremental refresh: new, changed and deleted documents")
    add_config_options(sp)
    verbose(sp)
    sp.add_argument("--no-preflight", action="store_true", help="skip the endpoints' check before the first stage")
    sp.add_argument("--submitted", action="store_true", help=argparse.SUPPRESS)  # set by jobs/update.py
    sp.set_defaults(func=cmd_update)

    sp = sub.add_parser("tables", help="row counts of every Delta table (no JVM)")
    add_config_options(sp)
    sp.set_defaults(func=cmd_tables)

    sp = sub.add_parser("prompt-tune", help="propose entity types and few-shot examples from the corpus")
    add_config_options(sp)
    sp.add_argument("--out", required=True, help="folder to write the prompts and entity_types.yaml into")
    sp.add_argument("--n", type=int, default=8, help="text units to sample (default 8)")
    sp.add_argument("--max-types", type=int, default=8, help="most entity types to propose (default 8)")
    sp.add_argument("--examples", type=int, default=2, help="few-shot examples to keep (default 2)")
    sp.add_argument("--seed", type=int, default=0, help="sampling seed")
    sp.add_argument("--ingest", action="store_true",
                    help="ingest and chunk the configured inputs first, even if text_units exists")
    sp.set_defaults(func=cmd_prompt_tune)
    from corpusgraph.cli.report import register as add_report_command  # the HTML page of an index

    add_report_command(sub)
    from corpusgraph.cli.doctor import register as add_doctor_command  # the endpoints checked

    add_doctor_command(sub)
    from corpusgraph.cli.eval import register as add_eval_command  # answer quality on a question file

    add_eval_command(sub)
    from corpusgraph.cli.init import register as add_init_command  # a new project folder

    add_init_command(sub)
    from corpusgraph.cli.setup import register as add_setup_command  # the jars outside a checkout

    add_setup_command(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"corpusgraph: error: {exc}", file=sys.stderr)
        return 2
    except RunLocked as exc:  # another run writes this warehouse: nothing was done
        print(f"corpusgraph: refused: {exc}", file=sys.stderr)
        return 3
    except DiskFullError as exc:
        print(f"corpusgraph: error: {exc.strerror}", file=sys.stderr)
        return 4
    except StageFailed as exc:  # an endpoint refused a stage's calls (or the preflight): nothing built on it
        print(f"corpusgraph: stopped: {exc}", file=sys.stderr)
        return 5
    except ModuleNotFoundError as exc:  # an install without the extra this command needs
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"corpusgraph: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
