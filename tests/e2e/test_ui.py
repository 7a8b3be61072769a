"""The web page of `corpusgraph serve` in headless Chromium (Debian's package, `make browser`).

The service runs under uvicorn in this process over the unit tier's two-domain world
(query_fixtures.two_domain_world: public Saltreach plus a vault of secrets mixed into the graph),
with the model that echoes its prompt (EchoChat) streaming its answers, so whatever reached a
prompt reaches the page. The page is driven as a user drives it (typing, clicking, following
links) over the DevTools protocol (tests/e2e/browser.py): search, the neighbourhood graph drawn by
Cytoscape.js, a community's report, a streamed answer whose citations open the source text. No
console error, no failed load, no dialog. With the public key, the page, its text and every
response it received hold nothing of the vault; the vault key's page shows Corvin Thale (the
control). A document title that is markup shows as text. Without the graph library the page says so.

Screenshots go to each test's folder; with CORPUSGRAPH_UPDATE_SCREENSHOTS=1 they also replace
those kept at tests/e2e/screenshots/ui_*.png.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from corpusgraph.config import Config, ServeSection
from tests.conftest import REPO
from tests.e2e.browser import Chromium, find_chromium
from tests.support.access_world import ADMIN, KEYS, PUBLIC, VAULT, leaks, said
from tests.support.query_fixtures import EchoChat, build_index, make_engine, two_domain_world
from tests.support.service_thread import serve_in_thread, wait_ready

pytestmark = pytest.mark.e2e

SHOTS = REPO / "tests" / "e2e" / "screenshots"
WIDTH = 1400
MARKUP_TITLE = "<img src=x onerror=alert(1)> Festival of lights"
VAULT_QUESTION = "What is the door code of the Zephyrine Vault?"


def _world(root: Path):
    docs, entities, rels, claims, communities, reports, domains = two_domain_world()
    docs = {**docs, "d7": (MARKUP_TITLE, docs["d7"][1])}  # a public document whose title is markup
    from corpusgraph.query.store import IndexStore

    return IndexStore(*build_index(root, docs, entities, rels, claims, communities, reports, domains=domains,
                                   deleted={"d9"}))


@pytest.fixture(scope="module")
def browser():
    if find_chromium() is None:
        pytest.fail("no chromium on PATH: run `make browser` (Debian's chromium package)")
    with Chromium() as b:
        yield b


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from serving import create_app
    from serving.ui import vendor_ok

    assert vendor_ok(), "serving/ui/vendor/cytoscape.min.js is missing or not the pinned file: run `make ui-vendor`"
    store = _world(tmp_path_factory.mktemp("ui-world"))
    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _c: make_engine(store, EchoChat()))
    with serve_in_thread(app) as url:
        wait_ready(url)
        yield url


def _open(browser, url: str, key: str):
    page = browser.open(f"{url}/ui/", width=WIDTH)
    page.send("Page.enable")
    page.type("#key", key)
    page.click("#key-use")
    page.evaluate("window.corpusgraphUI.idle()", await_promise=True)
    return page


def _follow(page, selector: str) -> None:
    """Click a link and wait until the view it opens is shown."""
    page.evaluate(f"(() => {{ const p = window.corpusgraphUI.nextRoute(); "
                  f"document.querySelector({json.dumps(selector)}).click(); return p; }})()", await_promise=True)


def _go(page, hash_: str) -> None:
    page.evaluate(f"(() => {{ const p = window.corpusgraphUI.nextRoute(); window.location.hash = {json.dumps(hash_)}; "
                  "return p; })()", await_promise=True)


def _search(page, text: str) -> list[str]:
    page.type("#search", text)
    page.click("#search-go")
    page.evaluate("window.corpusgraphUI.idle()", await_promise=True)
    return page.evaluate("Array.from(document.querySelectorAll('#hits a')).map(a => a.textContent)")


def _ask(page, question: str, method: str) -> None:
    page.type("#question", question)
    page.evaluate(f"document.querySelector('#method').value = {json.dumps(method)}")
    page.click("#ask")
    page.evaluate("window.corpusgraphUI.idle()", await_promise=True)


def _shot(page, tmp_path: Path, name: str) -> None:
    shot = page.screenshot(tmp_path / name, WIDTH)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("CORPUSGRAPH_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SHOTS / name)


def _dialogs(page) -> list[dict]:
    return [e for e in page.events if e["method"] == "Page.javascriptDialogOpening"]


def test_search_draws_an_entitys_neighbourhood_and_opens_its_community(browser, service, tmp_path):
    page = _open(browser, service, ADMIN)
    assert _search(page, "mara") == ["Mara Voss"]
    _follow(page, "#hits a")
    assert page.text("#detail-title") == "Mara Voss"
    drawn = page.evaluate("window.corpusgraphUI.drawn()")
    assert set(drawn["nodes"]) == {"Mara Voss", "Lumen Guild", "Tobin Hale", "Saltmarsh Treaty"}
    assert drawn["edges"] == 3 and page.evaluate("document.querySelectorAll('#graph canvas').length") >= 1
    assert page.evaluate("document.getElementById('graph-missing').hidden") is True
    _shot(page, tmp_path, "ui_entity.png")
    _follow(page, "#detail section:nth-of-type(3) a")  # the first community she is in
    assert page.text("#detail-title") and "Findings" in page.text("#detail")
    members = page.evaluate("Array.from(document.querySelectorAll('#detail a')).map(a => a.textContent)")
    assert "Mara Voss" in members
    assert page.errors == [] and _dialogs(page) == []


def test_a_streamed_answer_cites_units_that_open_their_text(browser, service, tmp_path):
    page = _open(browser, service, ADMIN)
    _ask(page, "Who trained Tobin Hale?", "basic")
    status, answer = page.text("#ask-status"), page.text("#answer")
    assert status.startswith("method basic") and "Mara Voss trained Tobin Hale" in answer
    cites = page.evaluate("Array.from(document.querySelectorAll('#citations a')).map(a => a.getAttribute('href'))")
    assert cites and all(c.startswith("#unit/") for c in cites)
    # The echoed prompt holds the context's tags: each [U#] in the answer links to its unit.
    tagged = page.evaluate("Array.from(document.querySelectorAll('#answer a')).map(a => [a.textContent, "
                           "a.getAttribute('href')])")
    assert ["[U1]", cites[0]] in tagged
    _follow(page, "#answer a")
    assert "Tobin Hale" in page.text("#unit-text") and page.text("#unit-title")
    assert "model calls: 1" in page.text("#coverage")
    _shot(page, tmp_path, "ui_answer.png")
    assert page.errors == [] and _dialogs(page) == []


def test_a_public_key_sees_nothing_of_the_vault_on_the_page_or_the_wire(browser, service, tmp_path):
    page = _open(browser, service, PUBLIC)
    for name in ("Corvin", "Zephyrine", "Obsidian", "cartel", "Port Keel"):
        assert _search(page, name) == [], name
        assert page.evaluate("document.getElementById('hits-none').hidden") is False
    _go(page, "#entity/ev_vault")
    hidden = page.text("#detail")
    _go(page, "#entity/never-existed")
    assert hidden == page.text("#detail") == "no such entity in this index"
    _go(page, "#community/cv_vault")
    assert page.text("#detail") == "no such community in this index"
    _go(page, "#unit/uv_ledger")
    assert page.text("#unit") == "no such text unit in this index"
    shown = []
    for method in ("drift", "global", "local", "auto", "basic"):  # the screenshot shows the last (shortest)
        _ask(page, VAULT_QUESTION, method)
        assert page.text("#ask-status").startswith("method"), method
        shown.append(page.text("#answer") + page.text("#citations"))
    _shot(page, tmp_path, "ui_restricted.png")
    assert [leaks(text, (VAULT_QUESTION,)) for text in shown] == [[]] * 5
    bodies = page.responses()
    assert any(r["url"].endswith("/v1/query") for r in bodies) and any("/v1/entities" in r["url"] for r in bodies)
    found = [(r["url"], leaks(said(r["body"]), (VAULT_QUESTION,))) for r in bodies if "/vendor/" not in r["url"]]
    assert [(url, hit) for url, hit in found if hit] == []
    # The only errors the page logged are the 404s of the three ids it was sent to, each exactly as
    # the 404 of an id that never existed.
    assert sorted(e.split(" http")[1] for e in page.errors) == sorted(
        f"://{service.split('://')[1]}/v1/{path}" for path in (
            "entities/ev_vault?limit=50", "entities/never-existed?limit=50", "communities/cv_vault", "units/uv_ledger"))
    assert all("status of 404" in e for e in page.errors) and _dialogs(page) == []


def test_the_vault_key_finds_the_vault(browser, service):
    """The control: the same page and searches find the vault with a vault key."""
    page = _open(browser, service, VAULT)
    assert _search(page, "Corvin") == ["Corvin Thale"]
    _follow(page, "#hits a")
    assert page.text("#detail-title") == "Corvin Thale"
    _ask(page, VAULT_QUESTION, "basic")
    assert "QX-7731" in page.text("#answer")
    assert page.errors == []


def test_markup_in_the_index_shows_as_text(browser, service):
    page = _open(browser, service, PUBLIC)
    _ask(page, "When does Port Keel hold the lantern festival?", "basic")
    titles = page.evaluate("Array.from(document.querySelectorAll('#citations a')).map(a => a.textContent)")
    assert MARKUP_TITLE in titles
    assert page.evaluate("document.querySelectorAll('#citations img, #answer img').length") == 0
    assert page.errors == [] and _dialogs(page) == []


def test_without_the_graph_library_the_page_says_so(browser, tmp_path, monkeypatch):
    import serving.ui
    from serving import create_app

    bare = tmp_path / "ui"
    shutil.copytree(serving.ui.UI_DIR, bare, ignore=shutil.ignore_patterns("vendor"))
    monkeypatch.setattr(serving.ui, "UI_DIR", bare)
    monkeypatch.setattr(serving.ui, "VENDOR_FILE", bare / "vendor" / "cytoscape.min.js")
    store = _world(tmp_path / "world")
    app = create_app(Config(serve=ServeSection(api_keys=KEYS)), engine_factory=lambda _c: make_engine(store, EchoChat()))
    with serve_in_thread(app) as url:
        wait_ready(url)
        page = _open(browser, url, ADMIN)
        assert _search(page, "mara") == ["Mara Voss"]
        _follow(page, "#hits a")
        assert page.text("#detail-title") == "Mara Voss"  # everything but the graph still works
        assert page.evaluate("document.getElementById('graph-missing').hidden") is False
        assert "make ui-vendor" in page.text("#graph-missing")
        # The one error is the library's own missing file.
        assert len(page.errors) == 1 and "status of 404" in page.errors[0]
        assert page.errors[0].endswith("/ui/vendor/cytoscape.min.js")
