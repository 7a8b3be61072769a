"""The extraction requests corpusgraph sends the bundled model for sample documents, as the
embedded server receives them (conf/local.yaml's settings, one unit per request, the llama_cpp
profile's body): shared by the sampler's test and its benchmark."""

from __future__ import annotations

from tests.conftest import REPO

SAMPLE_DOCS = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"


def _setting(max_tokens: int | None):
    """conf/local.yaml's config (extract.max_tokens set where given), its extraction prompts and
    the llama_cpp profile's request shaper."""
    from corpusgraph.config import load_config
    from corpusgraph.llm.profiles import PROFILES
    from corpusgraph.llm.shape import RequestShaper
    from corpusgraph.stages.extract.llm import extract_identity

    sets = {"extract.max_tokens": str(max_tokens)} if max_tokens is not None else {}
    cfg = load_config(REPO / "conf" / "local.yaml", sets)
    prompts, _, _ = extract_identity(cfg.extract, cfg.prompt_path, cfg.llm.model)
    return cfg, prompts, RequestShaper(PROFILES["llama_cpp"], cfg.llm.model)


def _docs() -> list:
    return sorted(SAMPLE_DOCS.glob("*.md"))


def sample_extraction_bodies(n: int, max_tokens: int | None = None, chars: int | None = None) -> list[dict]:
    """Request bodies for the first n Markdown documents of the sample (each cut to `chars`
    characters where given), with extract.max_tokens set to `max_tokens` where given."""
    from corpusgraph.stages.extract.llm import build_request

    cfg, prompts, shaper = _setting(max_tokens)
    return [shaper.body(build_request(d.name, d.read_text()[:chars], prompts, cfg.extract)) for d in _docs()[:n]]


def sample_glean_bodies(answers: list[str], max_tokens: int | None = None, chars: int | None = None) -> list[dict]:
    """The gleaning requests corpusgraph sends after the bodies of
    sample_extraction_bodies(len(answers), max_tokens, chars) were answered with `answers`: the same
    system prompt and text, then the continue prompt naming what each answer found."""
    from corpusgraph.llm.base import ChatResult
    from corpusgraph.stages.extract.llm import build_pack_request
    from corpusgraph.stages.extract.parse import split_pack_answer

    cfg, prompts, shaper = _setting(max_tokens)
    bodies = []
    for d, answer in zip(_docs(), answers):
        prior = split_pack_answer(ChatResult(id=d.name, text=answer), 1, cfg.extract)[0]
        bodies.append(shaper.body(build_pack_request(d.name, [d.read_text()[:chars]], prompts, cfg.extract,
                                                     priors=[prior])))
    return bodies
