"""ray.address 'spark' and the job scripts' --ray-workers: how they become config, how the scope
starts Ray on Spark only on first use and always shuts it down, and what setup_ray_cluster gets.
No Spark or Ray runs here (tests/distributed/test_ray_on_spark.py runs the real thing)."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import ValidationError

from corpusgraph.config import RaySection
from corpusgraph.runner.passes import cluster as ray_spark
from tests.conftest import REPO


@pytest.fixture(scope="module")
def job():
    path = REPO / "jobs" / "ray_on_spark.py"
    spec = importlib.util.spec_from_file_location("job_ray_on_spark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sets(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i in range(0, len(args), 2) if args[i] == "--set")


def test_ray_workers_stands_for_ray_address_spark_and_its_size(job):
    opts, rest = job.parser().parse_known_args(["--ray-workers", "2", "--ray-cpus-per-worker", "1", "--conf", "x.yaml"])
    assert rest == ["--conf", "x.yaml"]
    assert _sets(job.ray_sets(opts)) == {"ray.address": "spark", "ray.spark_workers": "2",
                                         "ray.spark_cpus_per_worker": "1"}
    none, _ = job.parser().parse_known_args(["--conf", "x.yaml"])
    assert job.ray_sets(none) == []
    with pytest.raises(SystemExit):
        job.ray_sets(job.parser().parse_args(["--ray-workers", "-1"]))


def test_job_option_sets_come_last_so_they_win(job, monkeypatch):
    import corpusgraph

    seen = []
    # the job calls the command line through the public face
    monkeypatch.setattr(corpusgraph, "main", lambda argv: seen.append(list(argv)) or 0)
    assert job.run("index", ["--ray-workers", "3", "--conf", "c.yaml", "--set", "ray.address=auto"]) == 0
    (argv,) = seen
    assert argv[:2] == ["index", "--submitted"]
    args = corpusgraph.build_parser().parse_args(argv)
    overrides = dict(s.split("=", 1) for s in args.set)  # as config_from_args reads them: the last wins
    assert overrides["ray.address"] == "spark" and overrides["ray.spark_workers"] == "3"


def test_ray_section_accepts_spark_and_refuses_a_spark_master_url():
    sec = RaySection(address="spark", spark_workers=2, spark_cpus_per_worker=1)
    assert sec.spark_temp_dir == "/tmp" and sec.spark_object_store_mb is None
    with pytest.raises(ValidationError, match="Spark master URL"):
        RaySection(address="spark://127.0.0.1:7077")
    with pytest.raises(ValidationError):
        RaySection(address="spark", spark_workers=0)
    with pytest.raises(ValidationError):
        RaySection(address="spark", spark_cpus_per_worker=0)


def test_setup_kwargs_size_the_cluster_from_the_section():
    kw = ray_spark.setup_kwargs(RaySection(address="spark", spark_workers=2, spark_cpus_per_worker=1,
                                           spark_object_store_mb=128, spark_temp_dir="/tmp/cg"))
    assert kw["max_worker_nodes"] == kw["min_worker_nodes"] == 2
    # Ray on Spark refuses CPUs without GPUs: the two go together.
    assert kw["num_cpus_worker_node"] == 1 and kw["num_gpus_worker_node"] == 0
    assert kw["object_store_memory_worker_node"] == 128 * 1024 * 1024
    assert kw["num_cpus_head_node"] == 0 and kw["ray_temp_root_dir"] == "/tmp/cg"
    whole = ray_spark.setup_kwargs(RaySection(address="spark"))
    assert "num_cpus_worker_node" not in whole and "num_gpus_worker_node" not in whole


@pytest.fixture
def fake_cluster(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_spark, "_start", lambda section, spark: calls.append(("start", spark)) or "10.0.0.1:9100")
    monkeypatch.setattr(ray_spark, "_shutdown", lambda: calls.append(("shutdown",)))
    return calls


def test_the_scope_starts_on_first_use_and_shuts_down_at_the_end(fake_cluster):
    sec = RaySection(address="spark")
    with ray_spark.ray_on_spark(sec, "the-session"):
        assert fake_cluster == []  # nothing until a stage needs Ray
        assert ray_spark.address(sec) == "10.0.0.1:9100"
        assert ray_spark.address(sec) == "10.0.0.1:9100"  # started once
        with ray_spark.ray_on_spark(sec, "another"):  # nested: the same cluster
            assert ray_spark.address(sec) == "10.0.0.1:9100"
    assert fake_cluster == [("start", "the-session"), ("shutdown",)]
    with pytest.raises(RuntimeError, match="index or update run"):
        ray_spark.address(sec)


def test_the_scope_shuts_down_on_failure_and_starts_nothing_unused(fake_cluster):
    sec = RaySection(address="spark")
    with pytest.raises(KeyError):
        with ray_spark.ray_on_spark(sec, "s"):
            ray_spark.address(sec)
            raise KeyError("a stage failed")
    assert fake_cluster == [("start", "s"), ("shutdown",)]
    fake_cluster.clear()
    with ray_spark.ray_on_spark(sec, "s"):
        pass
    assert fake_cluster == []


def test_other_addresses_pass_through_untouched(fake_cluster):
    for address in (None, "auto", "127.0.0.1:6379"):
        sec = RaySection(address=address)
        with ray_spark.ray_on_spark(sec, "s"):
            assert ray_spark.address(sec) == address
    assert fake_cluster == []
