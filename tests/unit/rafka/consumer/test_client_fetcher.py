"""The consumer's Fetcher without Ray: over the fake transport, against real logs on temp dirs."""

from __future__ import annotations

import time

import pytest
from fake_transport import FakeCluster, FakeMetadata, FakeTransport

from protocol.errors import OffsetOutOfRangeError
from protocol.messages import FetchRequest, FetchResponse, ListOffsetsRequest
from rafka.config import ConsumerConfig
from rafka.consumer.fetcher import Fetcher
from rafka.structs import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def cluster(tmp_path):
    c = FakeCluster(tmp_path, brokers=2)
    c.create_topic("t", partitions=2, replicas=(0, 1))
    yield c
    c.close()


def fetcher(cluster, *tps, **config) -> Fetcher:
    config.setdefault("retry_backoff_ms", 20)
    transport = FakeTransport(cluster)
    f = Fetcher(FakeMetadata(cluster, transport=transport), ConsumerConfig(**config), transport)
    f.assign(tps or [T0])
    return f


def poll(f: Fetcher, want: int, timeout: float = 5.0, max_records: int = 500) -> list:
    """What Consumer.poll does, until ``want`` records came or ``timeout`` passed."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        f.resolve_positions(1000)
        f.send_fetches()
        f.wait(0.05)
        for recs in f.drain(max_records).values():
            out.extend(recs)
    return out


def test_records_are_decoded_and_positions_advance(cluster):
    cluster.append(T0, [b"a", b"b", b"c"], keys=[b"k0", b"k1", None])
    cluster.append(T0, [b"d", b"e"])
    f = fetcher(cluster, auto_offset_reset="earliest")
    recs = poll(f, 5)
    assert [(r.topic, r.partition, r.offset, r.key, r.value) for r in recs] == [
        ("t", 0, 0, b"k0", b"a"),
        ("t", 0, 1, b"k1", b"b"),
        ("t", 0, 2, None, b"c"),
        ("t", 0, 3, None, b"d"),
        ("t", 0, 4, None, b"e"),
    ]
    assert all(r.leader_epoch == 0 and r.timestamp > 0 for r in recs)
    st = f.state(T0)
    assert st.position == 5 and st.high_watermark == 5 and st.log_start_offset == 0
    cluster.append(T0, [b"f"])
    more = poll(f, 1)
    assert [(r.offset, r.value) for r in more] == [(5, b"f")]
    assert st.position == 6


def test_max_records_and_deserializers(cluster):
    cluster.append(T0, [b"%d" % i for i in range(10)])
    f = fetcher(cluster, auto_offset_reset="earliest", value_deserializer=lambda b: int(b))
    first = poll(f, 4, max_records=4)
    assert [r.value for r in first] == [0, 1, 2, 3]
    assert f.state(T0).position == 4
    rest = poll(f, 6)
    assert [r.value for r in rest] == list(range(4, 10))
    assert f.state(T0).position == 10


def test_fetch_stops_at_the_high_watermark(cluster):
    cluster.append(T0, [b"committed"])
    cluster.replica(T0).hw_held = True
    cluster.append(T0, [b"not-yet"])
    f = fetcher(cluster, auto_offset_reset="earliest")
    assert [r.value for r in poll(f, 2, timeout=0.5)] == [b"committed"]
    assert f.state(T0).position == 1 and f.state(T0).high_watermark == 1
    cluster.replica(T0).log.update_high_watermark(2)
    assert [r.value for r in poll(f, 1)] == [b"not-yet"]


def test_latest_starts_at_the_high_watermark(cluster):
    cluster.append(T0, [b"old1", b"old2"])
    f = fetcher(cluster, auto_offset_reset="latest")
    assert poll(f, 1, timeout=0.3) == []
    assert f.state(T0).position == 2
    cluster.append(T0, [b"new"])
    assert [(r.offset, r.value) for r in poll(f, 1)] == [(2, b"new")]


def test_out_of_range_resets_to_earliest(cluster):
    cluster.append(T0, [b"x%d" % i for i in range(5)])
    f = fetcher(cluster, auto_offset_reset="earliest")
    poll(f, 5)
    f.state(T0).seek(42)  # past the log end
    recs = poll(f, 5)
    assert [r.offset for r in recs] == [0, 1, 2, 3, 4]
    assert f.state(T0).position == 5
    offsets = cluster.methods_called(method="list_offsets")
    assert len(offsets) == 2  # the initial position and the reset


def test_out_of_range_after_the_log_start_moved_resets_to_earliest(cluster):
    cluster.append(T0, [b"gone%d" % i for i in range(3)])
    f = fetcher(cluster, auto_offset_reset="earliest")
    poll(f, 3)
    log = cluster.replica(T0).log
    log.truncate_fully_and_start_at(10)  # retention deleted everything up to 10
    log.update_high_watermark(10)
    cluster.append(T0, [b"kept"])
    recs = poll(f, 1)
    assert [(r.offset, r.value) for r in recs] == [(10, b"kept")]
    assert f.state(T0).log_start_offset == 10


def test_out_of_range_resets_to_latest(cluster):
    cluster.append(T0, [b"x%d" % i for i in range(5)])
    f = fetcher(cluster, auto_offset_reset="latest")
    f.resolve_positions(1000)
    f.state(T0).seek(2)
    cluster.replica(T0).log.truncate_fully_and_start_at(7)
    cluster.replica(T0).log.update_high_watermark(7)
    cluster.append(T0, [b"z7", b"z8", b"z9"])
    assert poll(f, 1, timeout=0.3) == []
    assert f.state(T0).position == 10  # reset to the end (the start is 7)
    cluster.append(T0, [b"y"])
    assert [(r.offset, r.value) for r in poll(f, 1)] == [(10, b"y")]


def test_out_of_range_with_reset_none_raises(cluster):
    cluster.append(T0, [b"x"])
    f = fetcher(cluster, auto_offset_reset="none")
    f.state(T0).seek(9)
    f.send_fetches()
    with pytest.raises(OffsetOutOfRangeError):
        f.wait(1.0)


def test_leader_change_is_followed_without_gaps_or_duplicates(cluster):
    cluster.append(T0, [b"e0-%d" % i for i in range(3)])
    f = fetcher(cluster, auto_offset_reset="earliest")
    assert len(poll(f, 3)) == 3
    refreshes = f.metadata.refreshes
    cluster.move_leader(T0, 1)
    cluster.append(T0, [b"e1-%d" % i for i in range(3)])  # written to the new leader
    recs = poll(f, 3)
    assert [(r.offset, r.value, r.leader_epoch) for r in recs] == [(3 + i, b"e1-%d" % i, 1) for i in range(3)]
    assert f.state(T0).position == 6
    labels = [label for _, label, _ in cluster.methods_called(method="fetch")]
    assert "t-0-b1" in labels and labels[labels.index("t-0-b1") :].count("t-0-b0") == 0
    assert f.metadata.refreshes > refreshes


@pytest.mark.parametrize("fault", [("dead",), ("lost",), ("error", 6)])
def test_failed_fetches_are_retried(cluster, fault):
    cluster.append(T0, [b"a", b"b"])
    f = fetcher(cluster, auto_offset_reset="earliest")
    cluster.replica(T0).inject("fetch", fault, fault)
    recs = poll(f, 2)
    assert [r.value for r in recs] == [b"a", b"b"]
    assert len(cluster.methods_called(method="fetch")) >= 3


def test_a_slow_fetch_is_waited_for_and_pipelines_per_partition(cluster):
    cluster.append(T0, [b"p0"])
    cluster.append(T1, [b"p1"])
    f = fetcher(cluster, T0, T1, auto_offset_reset="earliest")
    f.resolve_positions(1000)
    cluster.replica(T0).inject("fetch", ("slow", 0.4))
    f.send_fetches()
    assert f.wait(1.0) is True  # T1 answered at once
    assert {tp: [r.value for r in rs] for tp, rs in f.drain(10).items()} == {T1: [b"p1"]}
    f.send_fetches()  # T0 still in flight: no second fetch for it
    assert len(cluster.methods_called(label="t-0-b0", method="fetch")) == 1
    got = poll(f, 1)
    assert [r.value for r in got] == [b"p0"]


def test_a_seek_discards_the_reply_of_a_fetch_sent_before_it(cluster):
    cluster.append(T0, [b"r%d" % i for i in range(6)])
    f = fetcher(cluster, auto_offset_reset="earliest")
    f.resolve_positions(1000)
    cluster.replica(T0).inject("fetch", ("slow", 0.2))
    f.send_fetches()
    f.state(T0).seek(4)
    time.sleep(0.3)
    assert [(r.offset, r.value) for r in poll(f, 2)] == [(4, b"r4"), (5, b"r5")]


def test_fake_replica_takes_the_actors_typed_requests(cluster):
    """The fake answers like ReplicaActor: one protocol.messages request in, its response's dict out;
    anything else is INVALID_REQUEST (42), as the actor answers it."""
    cluster.append(T0, [b"a", b"b"])
    leader = cluster.replica(T0)
    fetched = FetchResponse.from_dict(leader.fetch(FetchRequest(0)))
    assert (fetched.error_code, fetched.next_offset, fetched.high_watermark) == (0, 2, 2)
    assert leader.list_offsets(ListOffsetsRequest(-1))["offset"] == 2
    for method, arg in (("fetch", 0), ("list_offsets", -1), ("produce", b"raw batches")):
        answer = getattr(leader, method)(arg)
        assert answer["error_code"] == 42 and f"{method} takes one" in answer["error_message"]
    assert leader.fetch(0)["records"] == b"" and leader.produce(0)["base_offset"] == -1
