"""The fault suites (test_eos_faults, test_failover, test_transaction_faults, test_verify) kill brokers, so they
stay off the client package's ``rafka_cluster``; they share one cluster of their own instead of starting a
3-broker cluster per module (or per test). This directory is a package (``__init__.py``) so that cluster is
stopped when its last suite ends, not at the end of the session: a package-scoped fixture outside a package
lives as long as the session, and an idle 3-broker cluster left running slows every later suite."""

from __future__ import annotations

import uuid

import pytest

import rafka

# one partition per internal topic (the coordinator of every transactional id is one known broker, and few
# actors), timed-out transactions checked every 300 ms, dead followers out of the ISR after 3 s
FAULTS = {
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
    "replica.lag.time.max.ms": 3000,
    "group.initial.rebalance.delay.ms": 100,
}


@pytest.fixture(scope="package")
def _fault_cluster(ray_cluster, tmp_path_factory):
    cluster = rafka.LocalCluster(
        brokers=3,
        name="flt" + uuid.uuid4().hex[:6],
        data_dir=tmp_path_factory.mktemp("rafka-faults"),
        broker_config=FAULTS,
    )
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def fault_cluster(_fault_cluster):
    """The fault suites' shared 3-broker cluster (``FAULTS``). Each module starts with every broker up (a test
    that killed one and failed before restarting it is healed here) and its topics are deleted after it, so
    the cluster accumulates no replica actors."""
    admin = rafka.Admin(_fault_cluster)
    down = set(_fault_cluster.broker_ids()) - {b["id"] for b in admin.describe_cluster()["brokers"] if b["alive"]}
    for b in sorted(down):
        _fault_cluster.restart_broker(b)
    before = set(admin.list_topics())
    yield _fault_cluster
    made = [t for t in admin.list_topics() if t not in before and not t.startswith("__")]
    if made:
        admin.delete_topics(made)
    admin.close()
