"""`corpusgraph eval --questions FILE`: answer quality of the configured endpoint on an index
(evaluate/answers.py): EM, token F1, an LLM judge's verdicts and retrieval recall, per method; a
JSON report and a short table."""

from __future__ import annotations

__all__ = ["register", "cmd_eval"]

METHODS = ("basic", "local", "global", "drift", "auto")


def cmd_eval(args) -> int:
    import json
    import sys
    from pathlib import Path

    from corpusgraph.cli.common import config_from_args
    from corpusgraph.evaluate.answers import evaluate_answers, format_table, load_questions
    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.llm.factory import open_chat_model
    from corpusgraph.prompts import load_prompt
    from corpusgraph.query.open import open_query_engine

    cfg = config_from_args(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    questions = load_questions(args.questions, args.limit)
    query, judge_llm = cfg.llm.for_stage("query"), cfg.llm.for_stage("judge")
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))  # noqa: E731
    with ChatEndpoint(query, Path(cfg.storage.cache_dir) / "embedded-server-eval.log") as endpoint:
        engine = open_query_engine(cfg, endpoint.url(query))
        judge = open_chat_model(judge_llm, cfg.storage.cache_dir, base_url=endpoint.url(judge_llm)) \
            if args.judge else None
        prompt = load_prompt(cfg.prompt_path(args.judge_prompt)) if args.judge else None
        report = evaluate_answers(engine, questions, methods, judge=judge, judge_prompt=prompt, log=log)
    report.update(questions_file=str(args.questions), query_model=query.model,
                  judge_model=judge_llm.model if args.judge else None,
                  embedding_model=cfg.embeddings.model, warehouse=cfg.storage.warehouse)
    out = Path(args.out) if args.out else Path(cfg.storage.cache_dir) / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(format_table(report))
    print(f"{report['questions']} questions x {len(methods)} methods; query model {query.model}"
          + (f", judge {judge_llm.model}" if args.judge else ", no judge") + f"; written to {out}")
    return 0


def register(sub) -> None:
    """Add `corpusgraph eval` to the command line's subparsers."""
    from corpusgraph.cli.common import add_config_options

    sp = sub.add_parser("eval", help="answer quality on a question file: exact match, token F1, an LLM judge "
                        "against the gold answers, and retrieval recall where evidence documents are named")
    add_config_options(sp)
    sp.add_argument("--questions", required=True, help="JSON lines of {id, question, answer, answer_aliases?, "
                    "evidence_doc_ids?} (the ../shared/data dev sets' format)")
    sp.add_argument("--methods", default="basic,local", help="comma-separated: " + ", ".join(METHODS))
    sp.add_argument("--limit", type=int, default=None, help="the first N questions only")
    sp.add_argument("--no-judge", dest="judge", action="store_false", help="skip the LLM judge (EM, F1, recall only)")
    sp.add_argument("--judge-prompt", default="builtin:prompts/eval_judge.txt",
                    help="judge prompt, relative to the config file (builtin: = shipped with corpusgraph)")
    sp.add_argument("--out", help="where to write the JSON report (default: <storage.cache_dir>/eval.json)")
    sp.set_defaults(func=cmd_eval)
