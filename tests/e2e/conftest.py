"""End-to-end tests: the Serve HTTP gateway and the Spark jobs (RayDP) against a real rafka cluster on the
session's Ray (tests/conftest.py). Fixtures private to one suite live in that suite's module."""
from __future__ import annotations

import itertools
import uuid

import pytest

import rafka

_names = itertools.count()


@pytest.fixture(scope="session")
def e2e_cluster(ray_cluster, tmp_path_factory):
    """One 3-broker rafka cluster shared by the gateway and Spark suites (they only create their own topics)."""
    cluster = rafka.LocalCluster(brokers=3, name="e" + uuid.uuid4().hex[:8],
                                 data_dir=tmp_path_factory.mktemp("rafka-e2e"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def e2e_admin(e2e_cluster):
    return rafka.Admin(e2e_cluster)


@pytest.fixture
def e2e_topic(e2e_admin):
    """``e2e_topic(partitions, rf, **configs)`` -> a fresh topic name."""
    def make(partitions: int = 1, rf: int = 1, **configs) -> str:
        name = f"e{next(_names)}-{uuid.uuid4().hex[:6]}"
        e2e_admin.create_topic(name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()})
        return name
    return make
