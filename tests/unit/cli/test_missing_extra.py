"""A command that needs an extra this install left out says which one, in one line (exit 2), as in
a `pip install corpusgraph[serve]` environment asked to build an index."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

_WITHOUT = """
import sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name in {blocked!r} or name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
        return None

sys.meta_path.insert(0, Absent())
from corpusgraph.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _run(blocked: tuple[str, ...], *argv: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'lib'}:{REPO}"}
    return subprocess.run([sys.executable, "-c", _WITHOUT.format(blocked=blocked), *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_index_without_spark_names_the_index_extra(tmp_path):
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"storage: {{warehouse: {tmp_path / 'wh'}}}\n")
    done = _run(("pyspark", "py4j"), "index", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "corpusgraph: error: this command needs 'pyspark', which corpusgraph[index] installs: "
        "pip install 'corpusgraph[index]'")


def test_another_missing_module_is_not_hidden(tmp_path):
    (tmp_path / "settings.yaml").write_text("chunk: {size_tokens: 200}\n")
    done = _run(("yaml_not_an_extra",), "--version", cwd=tmp_path)
    assert done.returncode == 0  # nothing blocked that the command needs
    done = _run(("corpusgraph.cli.init",), "init", str(tmp_path / "p"), cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" in done.stderr and "corpusgraph.cli.init" in done.stderr
