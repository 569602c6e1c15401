"""Consumer groups over the Kafka wire listener (serve/kafka_wire/handlers/groups.py) with real clients on the
shared 3-broker cluster (tests/e2e/conftest.py): confluent-kafka (librdkafka) commits by hand and a new
member resumes at the committed offsets; two members split the partitions; a rafka Python-client member and a
librdkafka member share one group (the same group coordinator actor); kcat's balanced consumer (-G);
aiokafka in a group; ListGroups / DescribeGroups / DeleteGroups through confluent's AdminClient. Records are
checked exactly: every record once, nothing twice."""

from __future__ import annotations

import asyncio
import datetime
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


def test_kafka_python_group_flexible_versions_and_offset_admin(bootstrap, e2e_topic):
    """kafka-python sends the flexible versions (JoinGroup 7, SyncGroup 5, Heartbeat 4, LeaveGroup 5,
    OffsetCommit/OffsetFetch 8); its admin client fetches two groups' offsets in one OffsetFetch v8+
    (KIP-709), deletes offsets (OffsetDelete) and groups."""
    from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition

    topic, group, other = e2e_topic(PARTITIONS, 1), _group(), _group()
    sent = _produce(bootstrap, topic, "kp", 60)
    c = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    got: list = []
    deadline = time.monotonic() + 90
    while len(got) < len(sent) and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            got += [r.value for r in recs]
    assert sorted(got) == sorted(sent)
    c.commit()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = c.end_offsets(tps)
    assert {tp: c.committed(tp) for tp in tps} == ends
    c.close()  # LeaveGroup v5

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        # OffsetCommit with generation -1 into a new group (an admin's offset change)
        admin.alter_group_offsets(other, {tps[0]: OffsetAndMetadata(1, "", -1)})
        offsets = admin.list_group_offsets({group: None, other: None})
        assert {tp: om.offset for tp, om in offsets[group].items()} == ends
        assert {tp: om.offset for tp, om in offsets[other].items()} == {tps[0]: 1}
        d = admin.describe_groups([group])[group]
        assert (d["error"], d["group_state"], d["protocol_type"], d["members"]) == (None, "Empty", "consumer", [])
        empty = {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}  # ListGroups v4+ filter
        assert {group, other} <= empty
        assert group not in {g["group_id"] for g in admin.list_groups(states_filter=["Stable"])}
        deleted = admin.delete_group_offsets(group, tps[:2])  # OffsetDelete v0: an Empty group
        assert {tp: e.errno for tp, e in deleted.items()} == {tps[0]: 0, tps[1]: 0}
        left = admin.list_group_offsets({group: None})[group]
        assert {tp: om.offset for tp, om in left.items()} == {tps[2]: ends[tps[2]]}
        assert admin.delete_groups([group, other]) == {group: "OK", other: "OK"}
        assert {group, other}.isdisjoint(g["group_id"] for g in admin.list_groups())
    finally:
        admin.close()


def _ask(addr: str, request, response_cls):
    import socket

    from serve.kafka_wire import codec

    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(codec.encode_request(1, request))
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        size = int.from_bytes(head, "big")
        buf = b""
        while len(buf) < size:
            chunk = s.recv(size - len(buf))
            assert chunk, "connection closed"
            buf += chunk
    return codec.decode_response(buf, response_cls)[1]


def test_not_coordinator_elsewhere_and_member_id_required_at_the_coordinator(bootstrap):
    """A group request to a broker that does not coordinate the group: NOT_COORDINATOR (16), as in Kafka;
    at the coordinator a JoinGroup v5 without a member id gets MEMBER_ID_REQUIRED (79) and an id."""
    from kio.schema.find_coordinator.v2 import request as fc2
    from kio.schema.find_coordinator.v2 import response as fc2r
    from kio.schema.heartbeat.v3 import request as hb3
    from kio.schema.heartbeat.v3 import response as hb3r
    from kio.schema.join_group.v5 import request as jg5
    from kio.schema.join_group.v5 import response as jg5r

    group, servers = _group(), bootstrap.split(",")
    deadline = time.monotonic() + 60
    while True:
        fc = _ask(servers[0], fc2.FindCoordinatorRequest(key=group, key_type=0), fc2r.FindCoordinatorResponse)
        if fc.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert fc.error_code == 0, fc
    coordinator = f"{fc.host}:{fc.port}"
    assert coordinator in servers
    join = jg5.JoinGroupRequest(
        group_id=group,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(jg5.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    r = _ask(coordinator, join, jg5r.JoinGroupResponse)
    assert r.error_code == 79 and r.member_id, r
    for other in (s for s in servers if s != coordinator):
        beat = hb3.HeartbeatRequest(group_id=group, generation_id=1, member_id=r.member_id, group_instance_id=None)
        assert _ask(other, beat, hb3r.HeartbeatResponse).error_code == 16
        assert _ask(other, join, jg5r.JoinGroupResponse).error_code == 16


def test_confluent_static_member_rejoins_with_its_instance_id(bootstrap, e2e_topic):
    """group.instance.id (KIP-345) passes through: DescribeGroups shows it; the member closes without
    leaving (static members do not send LeaveGroup) and a new consumer with the same instance id takes its
    place and resumes at the committed offsets."""
    from confluent_kafka.admin import AdminClient

    topic, group = e2e_topic(2, 1), _group()
    first = _produce(bootstrap, topic, "s1", 20)
    c = _confluent(bootstrap, group, **{"group.instance.id": "static-1"})
    c.subscribe([topic])
    (msgs,) = _drain([c], 20)
    assert sorted(m.value() for m in msgs) == sorted(first)
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    assert [m.group_instance_id for m in desc.members] == ["static-1"]
    old_member = desc.members[0].member_id
    c.close()

    second = _produce(bootstrap, topic, "s2", 20)
    c = _confluent(bootstrap, group, **{"group.instance.id": "static-1"})
    c.subscribe([topic])
    (msgs,) = _drain([c], 20)
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    c.close()
    assert sorted(m.value() for m in msgs) == sorted(second)
    assert [m.group_instance_id for m in desc.members] == ["static-1"] and desc.members[0].member_id != old_member


def _coordinator(bootstrap: str, group: str) -> str:
    from kio.schema.find_coordinator.v2 import request as fc2
    from kio.schema.find_coordinator.v2 import response as fc2r

    deadline = time.monotonic() + 60
    while True:
        fc = _ask(
            bootstrap.split(",")[0], fc2.FindCoordinatorRequest(key=group, key_type=0), fc2r.FindCoordinatorResponse
        )
        if fc.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert fc.error_code == 0, fc
    return f"{fc.host}:{fc.port}"


def test_raw_rebalance_commit_while_preparing_and_an_empty_assignment(bootstrap, e2e_topic):
    """The group pitfalls of wire-notes, over raw kio requests on the coordinator: a member's OffsetCommit
    of the current generation is accepted while a rebalance is being prepared (its Heartbeat says
    REBALANCE_IN_PROGRESS); after the rebalance the old generation is refused (ILLEGAL_GENERATION); a member
    the leader gives nothing gets a valid empty assignment."""
    from concurrent.futures import ThreadPoolExecutor

    from kio.schema.heartbeat.v3 import request as hb3
    from kio.schema.heartbeat.v3 import response as hb3r
    from kio.schema.join_group.v5 import request as jg5
    from kio.schema.join_group.v5 import response as jg5r
    from kio.schema.leave_group.v3 import request as lg3
    from kio.schema.leave_group.v3 import response as lg3r
    from kio.schema.offset_commit.v7 import request as oc7
    from kio.schema.offset_commit.v7 import response as oc7r
    from kio.schema.offset_fetch.v5 import request as of5
    from kio.schema.offset_fetch.v5 import response as of5r
    from kio.schema.sync_group.v3 import request as sg3
    from kio.schema.sync_group.v3 import response as sg3r

    topic, group = e2e_topic(1, 1), _group()
    coord = _coordinator(bootstrap, group)
    sec = datetime.timedelta(seconds=1)

    def join(member_id: str):
        req = jg5.JoinGroupRequest(
            group_id=group,
            session_timeout=20 * sec,
            rebalance_timeout=20 * sec,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(jg5.JoinGroupRequestProtocol(name="range", metadata=b"m-" + member_id.encode()),),
        )
        return _ask(coord, req, jg5r.JoinGroupResponse)

    def sync(member_id: str, generation: int, assignments=()):
        a = tuple(sg3.SyncGroupRequestAssignment(member_id=m, assignment=x) for m, x in assignments)
        req = sg3.SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None, assignments=a
        )
        return _ask(coord, req, sg3r.SyncGroupResponse)

    def commit(member_id: str, generation: int, offset: int) -> int:
        part = oc7.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="meta"
        )
        req = oc7.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            topics=(oc7.OffsetCommitRequestTopic(name=topic, partitions=(part,)),),
        )
        return _ask(coord, req, oc7r.OffsetCommitResponse).topics[0].partitions[0].error_code

    def beat(member_id: str, generation: int) -> int:
        req = hb3.HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None
        )
        return _ask(coord, req, hb3r.HeartbeatResponse).error_code

    a = join("")
    assert a.error_code == 79
    a = join(a.member_id)
    assert (a.error_code, a.leader, a.generation_id) == (0, a.member_id, 1)
    assert sync(a.member_id, 1, [(a.member_id, b"all")]).assignment == b"all"
    assert commit(a.member_id, 1, 5) == 0

    b = join("")
    assert b.error_code == 79
    with ThreadPoolExecutor(2) as pool:
        b_join = pool.submit(join, b.member_id)  # parks: the group prepares a rebalance
        deadline = time.monotonic() + 30
        while (code := beat(a.member_id, 1)) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 27  # REBALANCE_IN_PROGRESS: a must join again
        assert commit(a.member_id, 1, 7) == 0  # accepted while preparing the rebalance
        a2 = join(a.member_id)
        b2 = b_join.result(60)
        assert a2.error_code == 0 and b2.error_code == 0 and a2.generation_id == b2.generation_id == 2
        leader, follower = (a2, b2) if a2.leader == a2.member_id else (b2, a2)
        assert sorted(m.member_id for m in leader.members) == sorted([a.member_id, b.member_id])
        assert follower.members == ()
        f_sync = pool.submit(sync, follower.member_id, 2)
        mine = sync(leader.member_id, 2, [(leader.member_id, b"everything")])  # nothing for the follower
        theirs = f_sync.result(60)
    assert (mine.error_code, mine.assignment) == (0, b"everything")
    assert (theirs.error_code, theirs.assignment) == (0, b"")  # a valid, empty assignment
    assert commit(a.member_id, 1, 9) == 22  # ILLEGAL_GENERATION: generation 1 is over

    fetched = _ask(
        coord,
        of5.OffsetFetchRequest(
            group_id=group, topics=(of5.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),)
        ),
        of5r.OffsetFetchResponse,
    )
    p = fetched.topics[0].partitions[0]
    assert (fetched.error_code, p.committed_offset, p.metadata) == (0, 7, "meta")
    left = _ask(
        coord,
        lg3.LeaveGroupRequest(
            group_id=group,
            members=(
                lg3.MemberIdentity(member_id=a.member_id, group_instance_id=None),
                lg3.MemberIdentity(member_id=b.member_id, group_instance_id=None),
            ),
        ),
        lg3r.LeaveGroupResponse,
    )
    assert left.error_code == 0 and [m.error_code for m in left.members] == [0, 0]
