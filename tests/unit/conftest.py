"""Fixtures shared by the query and service tests: one tiny built index per test module."""

import pytest

from tests.support.query_fixtures import build_tiny_index

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="module")
def store(built):
    from corpusgraph.query.store import IndexStore

    return IndexStore(*built)
