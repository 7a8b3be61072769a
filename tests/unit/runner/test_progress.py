"""runner/progress.py: the plain lines of a non-interactive log (done/total, rate, ETA, one per interval
and one at the end), the tqdm bar on a terminal, and the driver-side poller."""

from __future__ import annotations

import io
import re
import threading
import time

from corpusgraph.runner import progress
from corpusgraph.runner.progress import Bar, format_duration


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _bar(total, interval=15.0, **kw):
    out, clock = io.StringIO(), Clock()
    return Bar("extract", "LLM calls", total, stream=out, interactive=False, interval=interval, clock=clock, **kw), out, clock


def test_plain_lines_come_once_per_interval_with_done_total_rate_and_eta():
    bar, out, clock = _bar(400)
    clock.t += 5
    bar.update(10)  # 5 s in: under the interval, no line yet
    assert out.getvalue() == ""
    clock.t += 45
    bar.set(120)  # 50 s in, 120 done: 2.4 calls/s, 280 left -> ETA 1m57s
    assert out.getvalue().splitlines() == ["[corpusgraph] extract: 120/400 LLM calls (30%), 2.4 LLM calls/s, ETA 1m57s"]
    clock.t += 1
    bar.update(1)  # a second update within the interval adds no line
    assert len(out.getvalue().splitlines()) == 1
    clock.t += 116
    bar.set(400)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[-1] == "[corpusgraph] extract: 400/400 LLM calls (100%), 2.4 LLM calls/s, done in 2m47s"
    assert len(lines) == 3  # the 167 s mark's interval line, then the closing line


def test_counts_never_go_down_nor_past_the_total():
    bar, out, clock = _bar(10)
    bar.set(7)
    bar.set(3)  # a late poll of a smaller count
    assert bar.done == 7
    bar.update(9)  # a retried batch counted twice
    assert bar.done == 10
    bar.close(failed=True)
    assert out.getvalue().endswith("stopped after 0s\n")


def test_unknown_total_and_slow_rates_read_as_counts_per_minute():
    bar, out, clock = _bar(None, interval=10)
    clock.t += 600
    bar.set(5)
    assert out.getvalue().strip() == "[corpusgraph] extract: 5 LLM calls, 0.5 LLM calls/min"


def test_a_transient_bar_is_silent_unless_it_showed_before_its_end():
    short, out, clock = _bar(8, transient=True)
    short.set(8)
    short.close()
    assert out.getvalue() == ""
    long, out, clock = _bar(8, interval=10, transient=True)
    clock.t += 11
    long.set(4)
    long.close()
    assert len(out.getvalue().splitlines()) == 2 and "done in" in out.getvalue()


def test_on_a_terminal_it_is_a_tqdm_bar_with_rate_and_eta():
    out = io.StringIO()
    bar = Bar("embed", "vectors", 50, stream=out, interactive=True)
    bar.update(25)
    bar.close()
    text = out.getvalue()
    assert "embed" in text and "50/50" not in text and "25/50" in text
    assert re.search(r"vectors/s|s/ vectors", text)


def test_poll_feeds_the_bar_from_a_reader_and_reads_once_more_at_the_end():
    bar, out, clock = _bar(100)
    count = {"n": 0}
    seen = threading.Event()

    def read():
        count["n"] += 10
        seen.set()
        return count["n"]

    with progress.poll(read, bar, every_s=0.01):
        assert seen.wait(5)
    after = bar.done
    assert after >= 20  # at least one poll in the block and the final read
    bar.close()


def test_a_failing_read_is_skipped_and_the_next_one_counts():
    bar, out, clock = _bar(5)
    calls = {"n": 0}
    seen = threading.Event()

    def read():
        calls["n"] += 1
        if calls["n"] < 3:
            raise TimeoutError("counter actor still starting")
        seen.set()
        return 4

    with progress.poll(read, bar, every_s=0.01):
        assert seen.wait(5)
    bar.close()
    assert bar.done == 4


def test_durations():
    assert [format_duration(s) for s in (0, 42.4, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


def test_interval_from_the_command_lines_environment(monkeypatch):
    from corpusgraph.cli.main import progress_interval_s

    monkeypatch.setattr(progress, "_settings", progress._Settings())
    progress.configure(interval_s=progress_interval_s({"CORPUSGRAPH_PROGRESS_INTERVAL_S": "2.5"}))
    assert progress.interval_s() == 2.5
    for env in ({"CORPUSGRAPH_PROGRESS_INTERVAL_S": "nonsense"}, {}, {"CORPUSGRAPH_PROGRESS_INTERVAL_S": "-1"}):
        monkeypatch.setattr(progress, "_settings", progress._Settings())
        progress.configure(interval_s=progress_interval_s(env))
        assert progress.interval_s() == 15.0


def test_log_lines_go_above_an_open_terminal_bar():
    out = io.StringIO()
    bar = Bar("reports, level 0", "communities", 10, stream=out, interactive=True)
    bar.update(3)
    progress.write("[corpusgraph] a log line", out)
    bar.close()
    progress.write("[corpusgraph] after", out)
    text = out.getvalue()
    # tqdm.write blanks the bar's line first (\r, spaces, \r), then the bar is drawn again below.
    before, line, after = text.partition("[corpusgraph] a log line\n")
    assert line and re.search(r"\r +\r$", before) and "3/10" in after
    assert text.endswith("[corpusgraph] after\n")


def test_scan_rows_counts_the_pass_own_scans_and_not_delta_logs_nor_other_queries():
    from corpusgraph.runner.spark_metrics import scan_rows

    ours = "corpusgraph chunk: documents"
    data = [
        ("Scan parquet ", "FileScan parquet [doc_id#1,text#2] Location: PreparedDeltaFileIndex(1 paths)[file:/w/docu...",
         {"number of output rows": "12,345", "scan time": "total (min, med, max)\n3.0 s"}),
        ("Scan parquet ", "FileScan parquet Location: DeltaLogFileIndex(1 paths)[file:/w/text_units/_delta_log/0...",
         {"number of output rows": "900"}),
        ("Scan ExistingRDD Delta Table State #0 - file:///w/text_units/_delta_log", "", {"number of output rows": "7"}),
        ("Scan json ", "FileScan json", {"number of output rows": "50"}),
        ("Scan parquet ", "a scan whose metrics are not in yet", {}),
        ("Scan parquet ", "the same files in a second branch of the plan", {"number of output rows": "12,000"}),
    ]
    executions = [
        (ours, data),
        (ours, [("Scan parquet ", "a second query over the cached frame", {"number of output rows": "20"})]),
        ("Delta: corpusgraph chunk: documents: Filtering files for query", data),
        ("some other thread's query", [("Scan parquet ", "", {"number of output rows": "99,999"})]),
    ]
    assert scan_rows(executions, ours, "Scan parquet") == 12_345  # the largest scan of ours, not a sum
    assert scan_rows(executions, ours, "Scan binaryFile") == 0
    assert scan_rows([], ours, "Scan parquet") == 0


def test_set_total_lowers_a_bound_and_keeps_the_rate():
    bar, out, clock = _bar(4, interval=1000)
    clock.t += 30
    bar.set(2)
    bar.set_total(bar.done)  # the hierarchy stopped at 2 of at most 4 levels
    bar.close()
    assert out.getvalue().strip() == "[corpusgraph] extract: 2/2 LLM calls (100%), 4.0 LLM calls/min, done in 30s"


def test_ticking_prints_while_the_count_stands_still_and_closes_the_bar():
    out = io.StringIO()
    bar = Bar("communities (Leiden)", "levels", 4, stream=out, interactive=False, interval=0.05)
    with progress.ticking(bar, every_s=0.01):
        bar.set(1)
        deadline = time.monotonic() + 5
        while len(out.getvalue().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(ln.startswith("[corpusgraph] communities (Leiden): 1/4 levels (25%)") for ln in lines)
    assert "ETA" in lines[0] and "done in" in lines[-1]
    failing = Bar("communities (Leiden)", "levels", 4, stream=out, interactive=False, interval=1000)
    try:
        with progress.ticking(failing):
            raise RuntimeError("leiden failed")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines()[-1].endswith("stopped after 0s")


def test_leiden_tells_the_levels_it_built():
    import numpy as np

    from corpusgraph.graph.leiden import hierarchical_leiden

    rng = np.random.default_rng(0)
    edges = rng.integers(0, 300, size=(1500, 2))
    seen = []
    r = hierarchical_leiden(300, edges, None, max_cluster_size=10, seed=1, max_levels=4, on_level=seen.append)
    assert seen == list(range(1, r.levels + 1)) and 1 <= r.levels <= 4
