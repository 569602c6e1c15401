"""The consumer's group client (ConsumerCoordinator: rafka/consumer/consumer_coordinator.py) without Ray: JoinGroup, SyncGroup,
heartbeats and commits over the fake transport, against the real pure GroupCoordinatorShard."""

from __future__ import annotations

import time

import pytest
from fake_transport import FakeCluster, FakeMetadata, FakeTransport

from actors.group.records import OffsetCommitKey
from protocol.errors import CommitFailedError
from rafka.config import ConsumerConfig
from rafka.consumer.consumer_coordinator import ConsumerCoordinator
from rafka.consumer.fetcher import Fetcher
from rafka.consumer.subscription import SubscriptionState
from rafka.structs import OffsetAndMetadata, TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Member:
    """A consumer's group side, wired as Consumer wires it: one SubscriptionState shared by the Fetcher and
    the ConsumerCoordinator (no private consumer methods involved)."""

    def __init__(self, cluster: FakeCluster, client_id: str, **config):
        config.setdefault("partition_assignment_strategy", ("range",))
        config.setdefault("enable_auto_commit", False)
        config.setdefault("auto_offset_reset", "earliest")
        config.setdefault("session_timeout_ms", 6000)
        config.setdefault("heartbeat_interval_ms", 100)
        config.setdefault("retry_backoff_ms", 20)
        self.config = ConsumerConfig(group_id="g", client_id=client_id, **config)
        self.cluster_name = cluster.name
        self.client_id = client_id
        self.transport = FakeTransport(cluster)
        self.metadata = FakeMetadata(cluster, transport=self.transport)
        self.subscriptions = SubscriptionState()
        self._fetcher = Fetcher(self.metadata, self.config, self.transport, subscriptions=self.subscriptions)
        self.events: list[tuple[str, set]] = []
        self.group = ConsumerCoordinator(
            self.subscriptions, self.metadata, self.config, self.cluster_name, client_id, "g", self.transport
        )

    # the rebalance listener
    def on_partitions_revoked(self, tps):
        self.events.append(("revoked", set(tps)))

    def on_partitions_assigned(self, tps):
        self.events.append(("assigned", set(tps)))

    def on_partitions_lost(self, tps):
        self.events.append(("lost", set(tps)))

    def subscribe(self, *topics):
        self.group.subscribe(topics, None, self)

    def poll_once(self, wait_s: float = 0.05) -> None:
        self.group.on_poll(time.monotonic() + wait_s)


def settle(*members: Member, timeout: float = 10.0, until=None) -> None:
    """Poll every member from this one thread (as a test or notebook would) until all are stable."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll_once()
        if until() if until is not None else all(m.group._stable for m in members):
            return
    raise AssertionError(f"members did not settle: {[(m.client_id, m.group.generation) for m in members]}")


@pytest.fixture
def cluster(tmp_path):
    c = FakeCluster(tmp_path, brokers=2)
    c.create_topic("t", partitions=2, replicas=(0,))
    c.add_coordinator()
    yield c
    c.close()


@pytest.fixture
def members(cluster):
    made: list[Member] = []

    def make(client_id: str, **config) -> Member:
        m = Member(cluster, client_id, **config)
        made.append(m)
        return m

    yield make
    for m in made:
        m.group._stop.set()


def test_a_single_member_joins_syncs_and_owns_every_partition(cluster, members):
    a = members("a")
    a.subscribe("t")
    settle(a)
    g = a.group
    assert g.generation == 1 and g.member_id.startswith("a-") and g.leader == g.member_id
    assert g.protocol_name == "range"
    assert g.owned == {T0, T1}
    assert set(a._fetcher.states) == {T0, T1}
    assert a.events == [("assigned", {T0, T1})]
    joins = cluster.methods_called(method="join_group")
    assert len(joins) == 2  # MEMBER_ID_REQUIRED, then the join with the id given
    assert len(cluster.methods_called(method="sync_group")) == 1
    assert len(cluster.methods_called(method="find_coordinator")) == 1
    shard_group = cluster.coordinator.shard.group("g")
    assert shard_group.generation_id == 1 and set(shard_group.members) == {g.member_id}


def test_two_members_split_the_partitions_and_the_first_is_told_to_rejoin(cluster, members):
    a, b = members("a"), members("b")
    a.subscribe("t")
    settle(a)
    b.subscribe("t")
    settle(a, b, until=lambda: a.group._stable and b.group._stable and a.group.generation == b.group.generation >= 2)
    assert a.group.owned | b.group.owned == {T0, T1}
    assert len(a.group.owned) == len(b.group.owned) == 1
    assert a.group.leader == b.group.leader == a.group.member_id
    # eager protocol: a gave everything back before rejoining, then got its share
    assert a.events[:2] == [("assigned", {T0, T1}), ("revoked", {T0, T1})]
    assert a.events[-1] == ("assigned", a.group.owned)
    assert b.events == [("assigned", b.group.owned)]


def test_heartbeats_flow_while_stable(cluster, members):
    a = members("a", heartbeat_interval_ms=50)
    a.subscribe("t")
    settle(a)
    time.sleep(0.4)
    beats = cluster.methods_called(method="heartbeat")
    assert len(beats) >= 3
    assert a.group._stable and a.group.generation == 1


def test_commit_and_committed_round_trip_and_seed_positions(cluster, members):
    cluster.append(T0, [b"x"] * 8)
    a = members("a")
    a.subscribe("t")
    settle(a)
    assert a.group.committed({T0, T1}) == {T0: None, T1: None}
    a.group.commit({T0: OffsetAndMetadata(5, "five"), T1: 0})
    assert a.group.committed({T0, T1}) == {T0: OffsetAndMetadata(5, "five", -1), T1: OffsetAndMetadata(0, "", -1)}
    commits = {
        (r.key.topic, r.key.partition): (r.value.offset, r.value.metadata)
        for r in cluster.coordinator.records
        if isinstance(r.key, OffsetCommitKey)
    }
    assert commits == {("t", 0): (5, "five"), ("t", 1): (0, "")}  # what __consumer_offsets would get
    a.group.close()
    # a new member of the group starts from the committed offsets
    b = members("b")
    b.subscribe("t")
    settle(b)
    assert b.group.owned == {T0, T1}
    assert b._fetcher.state(T0).position == 5 and b._fetcher.state(T1).position == 0


def test_a_commit_with_a_stale_generation_fails(cluster, members):
    a = members("a")
    a.subscribe("t")
    settle(a)
    with a.group._lock:
        a.group.generation = 7
    with pytest.raises(CommitFailedError):
        a.group.commit({T0: 1})
    assert a.group.generation == -1 and a.group._rejoin  # it rejoins at the next poll
    settle(a)
    assert a.group.generation == 2


def test_not_coordinator_and_a_dead_coordinator_are_found_again(cluster, members):
    a = members("a")
    cluster.coordinator.inject("join_group", ("error", 16), ("dead",))
    a.subscribe("t")
    settle(a)
    assert a.group.owned == {T0, T1}
    assert len(cluster.methods_called(method="find_coordinator")) == 3
    assert len(cluster.methods_called(method="join_group")) == 4


def test_leave_on_close_hands_the_partitions_to_the_other_member(cluster, members):
    a, b = members("a"), members("b")
    a.subscribe("t")
    b.subscribe("t")
    settle(a, b, until=lambda: a.group._stable and b.group._stable and len(a.group.owned) == 1)
    gen = b.group.generation
    owned = set(a.group.owned)
    a.group.close()
    assert a.events[-1] == ("revoked", owned) and a.group.owned == set()
    assert len(cluster.methods_called(method="leave_group")) == 1
    settle(b, until=lambda: b.group._stable and b.group.generation > gen)
    assert b.group.owned == {T0, T1}
