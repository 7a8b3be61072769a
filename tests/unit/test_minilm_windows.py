"""The bundled embedder reading a long text in windows (llm/minilm.py): the windows cover every
word piece, a text that fits is read as before, and the pooled vector is the weighted mean."""

from __future__ import annotations

import numpy as np
import pytest

from corpusgraph.llm.minilm import MiniLMEmbedder, _windows

pytestmark = pytest.mark.unit


def test_windows_cover_every_piece_once_or_in_an_overlap_and_keep_the_special_tokens():
    ids = [101, *range(1, 1001), 102]
    found = _windows(ids, 256)
    assert all(w[0] == 101 and w[-1] == 102 and len(w) <= 256 for w in found)
    assert {x for w in found for x in w[1:-1]} == set(range(1, 1001))
    assert found[1][1] == found[0][-2 - 254 // 8 + 1]  # consecutive windows share an eighth of a window
    assert _windows([101, 5, 6, 102], 256) == [[101, 5, 6, 102]]


def test_a_long_text_is_read_whole_and_a_short_one_as_before():
    cut, whole = MiniLMEmbedder(), MiniLMEmbedder(windows=True)
    head = "The harbour master of Port Keel keeps the lantern ledger. " * 30
    tail = "Copper prices rose after the storm season flooded the mines of Grey Hollow. " * 30
    short = ["Who keeps the lantern ledger?"]
    assert np.allclose(cut.embed(short), whole.embed(short), atol=1e-6)
    v_cut, v_whole = cut.embed([head + tail])[0], whole.embed([head + tail])[0]
    question = cut.embed(["Why did copper prices rise after the storms?"])[0]
    # The tail lies past the 256-piece window: only the windowed vector sees it.
    assert float(v_whole @ question) > float(v_cut @ question)
    assert abs(float(np.linalg.norm(v_whole)) - 1.0) < 1e-5
