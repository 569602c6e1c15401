"""Partition reassignments over the Kafka wire with real admin clients, and replication throttles, on a 3-broker
LocalCluster of this module's own (its brokers have Kafka's throttle rates set; only a topic whose
leader/follower.replication.throttled.replicas name a replica is throttled, so the other moves run at full speed):

- kafkajs 2.2.4 (tests/e2e/kafkajs/reassign.js): AlterPartitionReassignments moves a partition's only replica to
  another broker, ListPartitionReassignments lists it until it completes, every record is read back from the new
  replica; a partition that does not exist and an unregistered broker are refused per partition;
- kafka-python 3.0.12's KafkaAdminClient: the same move, a cancel (null replicas) of a throttled move in progress
  back to the original replica, a second cancel (NO_REASSIGNMENT_IN_PROGRESS), bad input;
- a throttled move of N bytes takes at least what the rate allows (replication_quota.min_seconds_for), beside the
  same move unthrottled (both printed; only the lower bound is asserted).

confluent-kafka 2.16.1's AdminClient has neither call (librdkafka has no reassignment API).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from support import SMALL_INTERNAL_TOPICS

import rafka
from actors.server.replication_quota import min_seconds_for

pytestmark = pytest.mark.slow  # a cluster of its own and a throttled move of several seconds

RATE = 1 << 20  # leader/follower.replication.throttled.rate, bytes/s
FETCH_MAX = 256 << 10  # replica.fetch.max.bytes
BATCH = 64 << 10  # the producer's batch.size: a fetch moves at most FETCH_MAX plus one batch
WINDOW_NUM = 2  # replication.quota.window.num (Kafka's 11 would let the first 10 s of a move through unthrottled)


@pytest.fixture(scope="module")
def cluster(ray_cluster, tmp_path_factory):
    c = rafka.LocalCluster(
        brokers=3,
        name="ra" + uuid.uuid4().hex[:8],
        data_dir=tmp_path_factory.mktemp("rafka-reassign"),
        broker_config={
            **SMALL_INTERNAL_TOPICS,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "group.initial.rebalance.delay.ms": 100,
            "leader.replication.throttled.rate": RATE,
            "follower.replication.throttled.rate": RATE,
            "replication.quota.window.num": WINDOW_NUM,
            "replication.quota.window.size.seconds": 1,
            "replica.fetch.max.bytes": FETCH_MAX,
        },
    )
    yield c
    c.stop()


@pytest.fixture(scope="module")
def admin(cluster):
    return rafka.Admin(cluster)


@pytest.fixture(scope="module")
def kafka_admin(cluster):
    from kafka import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, client_id="rafka-e2e-reassign")
    yield a
    a.close()


def new_topic(admin, broker: int, **configs) -> str:
    name = "ra-" + uuid.uuid4().hex[:8]
    admin.create_topic(name, 1, 1, configs, replica_assignment=[[broker]])
    return name


def produce(cluster, topic: str, n: int, value_bytes: int) -> int:
    """``n`` incompressible records of ``value_bytes`` to partition 0 with librdkafka (acks=all); the value bytes."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "batch.size": BATCH,
            "linger.ms": 5,
            "broker.address.family": "v4",
        }
    )
    errors: list = []
    for i in range(n):
        value = b"%08d" % i + os.urandom(max(0, value_bytes - 8))
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0 and not errors, errors[:3]
    return n * value_bytes


def partition(admin, topic: str) -> dict:
    (p,) = admin.describe_topics([topic])[0]["partitions"]
    return p


def until_moved(admin, topic: str, replicas: list[int], timeout: float = 120.0) -> float:
    """Seconds until the controller shows ``replicas`` alone and the leader among them (the move completed)."""
    t0 = time.monotonic()
    while True:
        p = partition(admin, topic)
        if p["replicas"] == replicas and p["leader"] in replicas:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"{topic} never reached {replicas}: {p}"
        time.sleep(0.05)


def read_values(cluster, topic: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    c.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            got += [r.value for r in recs]
    c.close()
    return got


def test_kafkajs_moves_a_replica_lists_it_until_done_and_refuses_bad_input(kafkajs, cluster, admin):
    topic = new_topic(admin, 0)
    n = 200
    produce(cluster, topic, n, 100)
    s = kafkajs("reassign.js", cluster.bootstrap_servers, topic, "1", str(n))
    versions = {k: sorted({v for kk, v in s["sent"] if kk == k}) for k, _ in s["sent"]}
    assert versions.get(45) == [0] and versions.get(46) == [0], versions
    assert s["alter"] is None
    assert s["listings"][-1] == {"all": [], "one": []}
    for seen in s["listings"][:-1]:  # while in progress: replicas [1, 0], adding [1], removing [0]
        (t,) = seen["all"]
        assert t["partitions"] == [{"partition": 0, "replicas": [1, 0], "addingReplicas": [1], "removingReplicas": [0]}]
        assert seen["one"] in (seen["all"], [])  # the second listing may come after it completed
    assert s["metadata"] == {"leader": 1, "replicas": [1], "isr": [1]}
    assert [int(v[:8]) for v in s["values"]] == list(range(n))  # every record, read from broker 1 alone
    assert partition(admin, topic)["replicas"] == [1]
    assert s["unknown_partition"] == [
        {
            "name": "KafkaJSAlterPartitionReassignmentsError",
            "type": "UNKNOWN_TOPIC_OR_PARTITION",
            "topic": topic,
            "partition": 7,
        }
    ]
    assert s["unregistered_broker"] == [
        {
            "name": "KafkaJSAlterPartitionReassignmentsError",
            "type": "INVALID_REPLICA_ASSIGNMENT",
            "topic": topic,
            "partition": 0,
        }
    ]
    assert s["after_bad"]["topics"] == []  # nothing started by the refused requests
    print(
        f"\nkafkajs: moved {n} records b0 -> b1 in {s['completed_ms']} ms, {len(s['listings']) - 1} listings in progress"
    )


def test_kafka_python_moves_cancels_and_refuses_bad_input(cluster, admin, kafka_admin):
    import kafka.errors as KE
    from kafka import TopicPartition

    # a move, completed, all the data on the new replica, then no longer listed
    moved = new_topic(admin, 1)
    n = 300
    produce(cluster, moved, n, 200)
    tp = TopicPartition(moved, 0)
    assert kafka_admin.alter_partition_reassignments({tp: [2]}) == {tp: None}
    took = until_moved(admin, moved, [2])
    assert tp not in kafka_admin.list_partition_reassignments()
    assert tp not in kafka_admin.list_partition_reassignments([tp])
    assert [int(v[:8]) for v in read_values(cluster, moved, n)] == list(range(n))

    # a cancel while a throttled move is still copying: back to the original replica, which kept leading
    slow = new_topic(
        admin,
        0,
        **{"leader.replication.throttled.replicas": "0:0", "follower.replication.throttled.replicas": "0:2"},
    )
    produce(cluster, slow, 96, 64 << 10)  # 6 MiB: several seconds at 1 MiB/s
    stp = TopicPartition(slow, 0)
    assert kafka_admin.alter_partition_reassignments({stp: [2]}) == {stp: None}
    listed = kafka_admin.list_partition_reassignments({slow: [0]})
    assert listed == {stp: {"replicas": [2, 0], "adding_replicas": [2], "removing_replicas": [0]}}
    assert listed == {k: v for k, v in kafka_admin.list_partition_reassignments().items() if k.topic == slow}
    assert kafka_admin.alter_partition_reassignments({stp: None}) == {stp: None}
    assert stp not in kafka_admin.list_partition_reassignments()
    until_moved(admin, slow, [0], timeout=30)  # back to broker 0 alone, which kept leading
    assert partition(admin, slow)["leader"] == 0
    assert kafka_admin.alter_partition_reassignments({stp: None}) == {stp: KE.NoReassignmentInProgressError}

    # bad input: each partition its own error, nothing started
    bad = kafka_admin.alter_partition_reassignments(
        {
            TopicPartition(moved, 9): [0],
            TopicPartition("ra-no-such-topic", 0): [0],
            TopicPartition(slow, 0): [0, 0],
        }
    )
    assert bad == {
        TopicPartition(moved, 9): KE.UnknownTopicOrPartitionError,
        TopicPartition("ra-no-such-topic", 0): KE.UnknownTopicOrPartitionError,
        TopicPartition(slow, 0): KE.InvalidReplicationAssignmentError,
    }
    assert kafka_admin.list_partition_reassignments() == {}
    print(f"\nkafka-python: moved {n} records b1 -> b2 in {took:.2f} s; cancelled a throttled move")


def test_a_throttled_move_takes_at_least_what_the_rate_allows(cluster, admin):
    n, size = 128, 64 << 10  # 8 MiB of incompressible values
    free = new_topic(admin, 0)
    throttled = new_topic(
        admin,
        0,
        **{"leader.replication.throttled.replicas": "0:0", "follower.replication.throttled.replicas": "0:1"},
    )
    nbytes = produce(cluster, free, n, size)
    produce(cluster, throttled, n, size)

    admin.alter_partition_reassignments({(free, 0): [1]})
    free_s = until_moved(admin, free, [1])
    admin.alter_partition_reassignments({(throttled, 0): [1]})
    throttled_s = until_moved(admin, throttled, [1])
    bound = min_seconds_for(nbytes, RATE, WINDOW_NUM, 1.0, FETCH_MAX + 2 * BATCH)
    print(
        f"\nmove of {nbytes / 2**20:.0f} MiB b0 -> b1: unthrottled {free_s:.2f} s, throttled at "
        f"{RATE / 2**20:.0f} MiB/s {throttled_s:.2f} s (the rate's lower bound {bound:.2f} s)"
    )
    assert throttled_s >= bound > 3.0
    assert [int(v[:8]) for v in read_values(cluster, throttled, n)] == list(range(n))
