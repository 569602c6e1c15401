"""Client tests run against real rafka clusters on the session's Ray (tests/conftest.py)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from support import SMALL_INTERNAL_TOPICS

import rafka

_names = itertools.count()

# short group timings (test_groups.py's consumers use 3 s sessions; Kafka's minimum is 6 s) so rebalances take
# well under a second or two: the group tests run on this shared cluster rather than on one of their own
FAST_GROUPS = {"group.min.session.timeout.ms": 500, "group.initial.rebalance.delay.ms": 100}


@pytest.fixture(scope="package")
def rafka_cluster(ray_cluster, tmp_path_factory):
    """One 3-broker rafka cluster shared by the non-destructive client tests."""
    cluster = rafka.LocalCluster(
        brokers=3,
        name="c" + uuid.uuid4().hex[:8],
        data_dir=tmp_path_factory.mktemp("rafka-data"),
        # auto-creation off (Kafka's default is on): these tests check sends to unknown topics still fail;
        # auto-creation itself is tested on the e2e cluster (tests/e2e/test_wire_admin_clients.py)
        broker_config={**SMALL_INTERNAL_TOPICS, "auto.create.topics.enable": "false", **FAST_GROUPS},
    )
    yield cluster
    cluster.stop()


@pytest.fixture(scope="package")
def admin(rafka_cluster):
    return rafka.Admin(rafka_cluster)


@pytest.fixture
def new_topic(admin):
    """``new_topic(partitions, rf, **configs)`` -> a fresh topic name; deleted after the test, so the shared
    cluster does not accumulate replica actors."""
    made: list[str] = []

    def make(partitions: int = 1, rf: int = 1, **configs) -> str:
        name = f"t{next(_names)}-{uuid.uuid4().hex[:6]}"
        admin.create_topic(name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()})
        made.append(name)
        return name

    yield make
    existing = set(admin.list_topics())
    if [t for t in made if t in existing]:
        admin.delete_topics([t for t in made if t in existing])
