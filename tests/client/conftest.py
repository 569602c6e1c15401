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


# The fault suites (test_eos_faults, test_failover, test_transaction_faults, test_verify) kill brokers, so they
# stay off ``rafka_cluster``; they share this one instead of starting a 3-broker cluster per module (or per
# test): one partition per internal topic (the coordinator of every transactional id is one known broker, and
# few actors), timed-out transactions checked every 300 ms, dead followers out of the ISR after 3 s.
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
