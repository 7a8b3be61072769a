"""corpusgraph's public face: every name it offers resolves, and importing it loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import corpusgraph


def test_every_name_of_the_face_resolves_to_what_its_module_defines():
    import importlib

    for name, module in corpusgraph._WHERE.items():
        assert getattr(corpusgraph, name) is getattr(importlib.import_module(module), name), name
    assert sorted(corpusgraph.__all__) == sorted(["__version__", *corpusgraph._WHERE])


def test_importing_the_face_loads_neither_spark_ray_faiss_nor_fastapi():
    code = ("import sys, corpusgraph; heavy = ('pyspark', 'ray', 'faiss', 'fastapi', 'deltalake', 'corpusgraph.runner'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    try:
        corpusgraph.run_everything  # noqa: B018
    except AttributeError as exc:
        assert "run_everything" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")
