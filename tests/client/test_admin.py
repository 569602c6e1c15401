"""Admin operations through the controller, checked against what clients then see."""

from __future__ import annotations

import time
import uuid

import pytest

import rafka
from protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from rafka import TopicPartition

pytestmark = pytest.mark.cluster


def test_create_describe_list_delete(admin):
    name = "adm-" + uuid.uuid4().hex[:6]
    tid = admin.create_topic(name, 3, 2, {"retention.ms": 3600000})
    assert tid
    assert name in admin.list_topics()
    (d,) = admin.describe_topics([name])
    assert d["topic_id"] == tid and len(d["partitions"]) == 3
    for p in d["partitions"]:
        assert len(p["replicas"]) == 2 and p["leader"] in p["replicas"] and set(p["isr"]) == set(p["replicas"])
    assert len({p["leader"] for p in d["partitions"]}) >= 2  # leadership is spread
    assert admin.describe_configs(name)["retention.ms"] == "3600000"
    assert admin.describe_configs(name, include_defaults=False) == {"retention.ms": "3600000"}
    with pytest.raises(TopicAlreadyExistsError, match=name):
        admin.create_topic(name, 1, 1)
    admin.delete_topics([name])
    assert name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([name])


def test_bad_requests_raise_kafka_errors(admin):
    with pytest.raises(InvalidConfigError, match="no.such.config"):
        admin.create_topic("bad-" + uuid.uuid4().hex[:6], 1, 1, {"no.such.config": "1"})
    with pytest.raises(rafka.errors.InvalidReplicationFactorError):
        admin.create_topic("bad-" + uuid.uuid4().hex[:6], 1, 5)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["never-existed-" + uuid.uuid4().hex[:6]])


def test_create_partitions_and_alter_configs(rafka_cluster, admin, new_topic):
    topic = new_topic(1, 1)
    admin.create_partitions({topic: 3})
    assert len(admin.describe_topics([topic])[0]["partitions"]) == 3
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic: 2})
    with rafka.Producer(rafka_cluster) as p:  # the producer sees the new partitions
        assert p.send(topic, b"x", partition=2).get(10).partition == 2
    admin.alter_configs(topic, set={"retention.ms": 1000, "max.message.bytes": 2048})
    cfg = admin.describe_configs(topic, include_defaults=False)
    assert cfg == {"retention.ms": "1000", "max.message.bytes": "2048"}
    admin.alter_configs(topic, delete=["retention.ms"])
    assert admin.describe_configs(topic, include_defaults=False) == {"max.message.bytes": "2048"}
    with rafka.Producer(rafka_cluster, retries=0, enable_idempotence=False) as p:  # enforced by the leader
        with pytest.raises(rafka.errors.MessageTooLargeError):
            p.send(topic, b"x" * 4000, partition=0).get(10)


def test_cluster_offsets_and_leader_election(rafka_cluster, admin, new_topic):
    desc = admin.describe_cluster()
    assert [b["id"] for b in desc["brokers"]] == [0, 1, 2] and all(b["alive"] for b in desc["brokers"])
    assert desc["controller_id"] in (0, 1, 2) and desc["controller_epoch"] >= 1
    topic = new_topic(2, 3)
    with rafka.Producer(rafka_cluster) as p:
        for i in range(10):
            p.send(topic, b"%d" % i, partition=0, timestamp_ms=5000 + i)
    offs = admin.list_offsets({TopicPartition(topic, 0): "earliest", TopicPartition(topic, 1): "latest"})
    assert offs[TopicPartition(topic, 0)].offset == 0 and offs[TopicPartition(topic, 1)].offset == 0
    assert admin.list_offsets({(topic, 0): "latest"})[TopicPartition(topic, 0)].offset == 10
    assert admin.list_offsets({(topic, 0): 5004})[TopicPartition(topic, 0)].offset == 4
    results = admin.elect_leaders([(topic, 0)])  # the preferred replica already leads
    assert results[0]["error_code"] == 84  # ELECTION_NOT_NEEDED is reported, not raised


def test_partition_reassignment_moves_data(rafka_cluster, admin, new_topic):
    topic = new_topic(1, 1)
    with rafka.Producer(rafka_cluster) as p:
        for i in range(50):
            p.send(topic, b"%d" % i)
    (before,) = admin.describe_topics([topic])[0]["partitions"]
    target = (before["replicas"][0] + 1) % 3
    admin.alter_partition_reassignments({(topic, 0): [target]})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        (now,) = admin.describe_topics([topic])[0]["partitions"]
        if now["replicas"] == [target] and now["leader"] == target:
            break
        time.sleep(0.2)
    assert now["replicas"] == [target] and now["leader"] == target
    assert admin.list_partition_reassignments() == [] or all(
        r["topic"] != topic for r in admin.list_partition_reassignments()
    )
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    got = []
    while len(got) < 50 and time.monotonic() < deadline:
        got += c.poll(1000).get(TopicPartition(topic, 0), [])
    assert [int(r.value) for r in got] == list(range(50))


def test_delete_records_moves_the_log_start_for_every_reader(rafka_cluster, admin, new_topic):
    """Kafka's DeleteRecords through the leader: the log start offset moves up, consumers start there, an
    offset past the high watermark is OFFSET_OUT_OF_RANGE, -1 means the high watermark."""
    from protocol.errors import OffsetOutOfRangeError

    name = new_topic(2, 2)
    with rafka.Producer(rafka_cluster, acks="all") as p:
        p.send_batch(name, [(None, b"r%d" % i, i % 2) for i in range(20)])
    tp0, tp1 = TopicPartition(name, 0), TopicPartition(name, 1)
    assert admin.delete_records({tp0: 4, tp1: -1}) == {tp0: 4, tp1: 10}
    starts = admin.list_offsets({tp0: "earliest", tp1: "earliest"})
    assert (starts[tp0].offset, starts[tp1].offset) == (4, 10)
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest")
    c.assign([tp0, tp1])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            got += [(r.partition, r.offset, r.value) for r in recs]
    c.close()
    assert got == [(0, o, b"r%d" % (2 * o)) for o in range(4, 10)]
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp0: 11})
    assert admin.delete_records({tp0: 2}) == {tp0: 4}  # below the log start: nothing moves back


def test_config_entries_name_their_source(admin, new_topic):
    """Kafka's ConfigEntry sources: a topic override is DYNAMIC_TOPIC_CONFIG (with the default below it as a
    synonym), the rest DEFAULT_CONFIG; broker configs come from the broker's properties (STATIC) or defaults."""
    name = new_topic(1, 1, retention_ms=123456)
    entries = {e["name"]: e for e in admin.describe_config_entries(name)}
    ret = entries["retention.ms"]
    assert (ret["value"], ret["source"]) == ("123456", "DYNAMIC_TOPIC_CONFIG")
    assert [s["source"] for s in ret["synonyms"]] == ["DYNAMIC_TOPIC_CONFIG", "DEFAULT_CONFIG"]
    assert entries["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert set(admin.describe_configs(name)) == set(entries)  # every effective config has an entry
    brokers = admin.describe_broker_configs()
    assert sorted(brokers) == [0, 1, 2]
    conf = {e["name"]: e for e in brokers[1]}
    auto = conf["auto.create.topics.enable"]  # this cluster's broker_config sets it (tests/client/conftest.py)
    assert (auto["value"], auto["source"]) == ("false", "STATIC_BROKER_CONFIG")
    assert conf["num.partitions"]["source"] == "DEFAULT_CONFIG"
    assert list(admin.describe_broker_configs(2)) == [2]


def test_require_topic_fails_at_once_when_brokers_do_not_auto_create(rafka_cluster):
    """`rafka topic produce` checks its topic first: on a cluster with auto.create.topics.enable=false an
    unknown topic is UNKNOWN_TOPIC_OR_PARTITION at once, not a wait of max.block.ms (60 s)."""
    p = rafka.Producer(rafka_cluster)
    t = time.monotonic()
    with pytest.raises(UnknownTopicOrPartitionError, match="auto.create.topics.enable is false"):
        p.metadata.require_topic("nope-" + uuid.uuid4().hex[:6], 60000)
    assert time.monotonic() - t < 20
    p.close()
