"""Consumer groups over the Kafka wire listener (serve/kafka_wire/handlers/groups.py) with real clients on the
shared 3-broker cluster (tests/e2e/conftest.py): confluent-kafka (librdkafka) commits by hand and a new
member resumes at the committed offsets; two members split the partitions; a rafka Python-client member and a
librdkafka member share one group (the same group coordinator actor); kcat's balanced consumer (-G);
aiokafka in a group; ListGroups / DescribeGroups / DeleteGroups through confluent's AdminClient. Records are
checked exactly: every record once, nothing twice."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest

N = 120
PARTITIONS = 3


def _group() -> str:
    return "wg-" + uuid.uuid4().hex[:8]


def _produce(bootstrap: str, topic: str, tag: str, n: int = N) -> list[bytes]:
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    values = [f"{tag}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        producer.produce(topic, key=f"k{i % 11}".encode(), value=v, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(60) == 0
    assert errors == []
    return values


def _confluent(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def _drain(consumers, want: int, timeout_s: float = 90.0) -> list[list]:
    """Poll every consumer in turn until ``want`` records arrived in all (or the time is up): per consumer,
    its messages."""
    got: list[list] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while sum(len(g) for g in got) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[i].append(msg)
    return got


def test_confluent_manual_commit_then_a_new_member_resumes(bootstrap, e2e_topic):
    from confluent_kafka import TopicPartition

    topic, group = e2e_topic(PARTITIONS, 1), _group()
    first = _produce(bootstrap, topic, "a")
    c1 = _confluent(bootstrap, group)
    c1.subscribe([topic])
    (msgs,) = _drain([c1], N)
    assert sorted(m.value() for m in msgs) == sorted(first)
    c1.commit(asynchronous=False)  # OffsetCommit at the consumed positions, as the group's member
    committed = c1.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    ends = {p: c1.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    assert {tp.partition: tp.offset for tp in committed} == ends
    c1.close()  # LeaveGroup

    second = _produce(bootstrap, topic, "b")
    c2 = _confluent(bootstrap, group)
    c2.subscribe([topic])
    (msgs,) = _drain([c2], N)
    time.sleep(1.0)
    while (m := c2.poll(0.5)) is not None:  # nothing beyond the second batch shows up
        msgs.append(m)
    c2.close()
    assert sorted(m.value() for m in msgs) == sorted(second)  # nothing twice, nothing lost


def test_confluent_group_of_two_splits_the_partitions(bootstrap, e2e_topic):
    topic, group = e2e_topic(4, 1), _group()
    a = _confluent(bootstrap, group, **{"partition.assignment.strategy": "roundrobin"})
    b = _confluent(bootstrap, group, **{"partition.assignment.strategy": "roundrobin"})
    a.subscribe([topic])
    b.subscribe([topic])
    got_a, got_b = [], []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until both members hold partitions (keeping what they read)
        for c, got in ((a, got_a), (b, got_b)):
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        pa, pb = {tp.partition for tp in a.assignment()}, {tp.partition for tp in b.assignment()}
        if pa and pb and pa | pb == {0, 1, 2, 3}:
            break
    assert pa and pb and not (pa & pb) and pa | pb == {0, 1, 2, 3}, (pa, pb)
    # produced once the group is split, so no record is read by a member that later loses its partition
    sent = _produce(bootstrap, topic, "two")
    rest_a, rest_b = _drain([a, b], N - len(got_a) - len(got_b))
    got_a, got_b = got_a + rest_a, got_b + rest_b
    assert {m.partition() for m in got_a} <= pa and {m.partition() for m in got_b} <= pb
    assert sorted(m.value() for m in got_a + got_b) == sorted(sent)
    a.close()
    b.close()


def test_rafka_consumer_and_librdkafka_share_one_group(e2e_cluster, bootstrap, e2e_topic):
    import rafka

    topic, group = e2e_topic(4, 1), _group()
    py = rafka.Consumer(
        e2e_cluster,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        partition_assignment_strategy=["roundrobin"],
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    )
    wire = _confluent(bootstrap, group, **{"partition.assignment.strategy": "roundrobin"})
    py.subscribe([topic])
    wire.subscribe([topic])
    got_py: list = []
    got_wire: list = []

    def poll_both():
        for recs in py.poll(timeout_ms=100).values():
            got_py.extend((r.partition, r.value) for r in recs)
        msg = wire.poll(0.1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got_wire.append((msg.partition(), msg.value()))

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # one rebalance with both members, then the records
        poll_both()
        p_py, p_wire = {tp.partition for tp in py.assignment()}, {tp.partition for tp in wire.assignment()}
        if p_py and p_wire and p_py | p_wire == {0, 1, 2, 3}:
            break
    sent = _produce(bootstrap, topic, "mixed")
    deadline = time.monotonic() + 90
    while len(got_py) + len(got_wire) < N and time.monotonic() < deadline:
        poll_both()
    p_py = {tp.partition for tp in py.assignment()}
    p_wire = {tp.partition for tp in wire.assignment()}
    assert p_py and p_wire and not (p_py & p_wire) and p_py | p_wire == {0, 1, 2, 3}, (p_py, p_wire)
    assert {p for p, _ in got_py} <= p_py and {p for p, _ in got_wire} <= p_wire
    assert sorted(v for _, v in got_py + got_wire) == sorted(sent)
    py.commit()
    wire.commit(asynchronous=False)
    wire.close()
    py.close()

    from confluent_kafka import TopicPartition

    # the offsets both members committed are the group's: a wire client reads them back
    probe = _confluent(bootstrap, group)
    committed = probe.committed([TopicPartition(topic, p) for p in range(4)], timeout=30)
    ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(4)}
    probe.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_kcat_balanced_consumer(bootstrap, e2e_topic):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (.ci/run installs the Debian package)"
    topic, group = e2e_topic(PARTITIONS, 1), _group()
    sent = _produce(bootstrap, topic, "kc", 30)
    out = subprocess.run(
        [kcat, "-b", bootstrap, "-G", group, "-o", "beginning", "-c", "30", "-q", "-f", "%s\\n", topic],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(v.decode() for v in sent)


def test_aiokafka_consumes_in_a_group_and_commits(bootstrap, e2e_topic):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    topic, group = e2e_topic(PARTITIONS, 1), _group()
    sent = _produce(bootstrap, topic, "aio", 60)

    async def run() -> tuple[list, dict]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await c.start()
        got: list = []
        try:
            async with asyncio.timeout(90):
                while len(got) < len(sent):
                    batch = await c.getmany(timeout_ms=500)
                    for recs in batch.values():
                        got += [r.value for r in recs]
            await c.commit()
            committed = {p: await c.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
        finally:
            await c.stop()
        return got, committed

    got, committed = asyncio.run(run())
    assert sorted(got) == sorted(sent)
    from confluent_kafka import TopicPartition as CTP

    probe = _confluent(bootstrap, group)
    ends = {p: probe.get_watermark_offsets(CTP(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    probe.close()
    assert committed == ends


def test_admin_lists_describes_and_deletes_groups(bootstrap, e2e_topic):
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    topic, group = e2e_topic(2, 1), _group()
    _produce(bootstrap, topic, "adm", 10)
    c = _confluent(bootstrap, group, **{"client.id": "wire-groups-test"})
    c.subscribe([topic])
    _drain([c], 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    listed = admin.list_consumer_groups(request_timeout=30).result()
    assert not listed.errors, listed.errors
    mine = {g.group_id: g for g in listed.valid}
    assert group in mine and mine[group].state == ConsumerGroupState.STABLE

    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
    (member,) = desc.members
    assert member.client_id == "wire-groups-test" and member.host.startswith("/127.0.0.1")
    assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}

    with pytest.raises(Exception) as busy:  # a group with a member: NON_EMPTY_GROUP (68)
        admin.delete_consumer_groups([group], request_timeout=30)[group].result()
    assert "NON_EMPTY_GROUP" in str(busy.value)
    c.close()
    assert admin.delete_consumer_groups([group], request_timeout=30)[group].result() is None
    listed = admin.list_consumer_groups(request_timeout=30).result()
    assert group not in {g.group_id for g in listed.valid}
