"""The producer's Sender thread without Ray: over the fake transport, against real logs on temp dirs."""

from __future__ import annotations

import time

import pytest
from fake_transport import FakeCluster, FakeMetadata, FakeTransport

from protocol.errors import KafkaTimeoutError, NotEnoughReplicasError, NotLeaderOrFollowerError, RecordListTooLargeError
from rafka.config import ProducerConfig
from rafka.producer.accumulator import RecordAccumulator
from rafka.producer.sender import Sender
from rafka.structs import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Client:
    """A Sender with its accumulator and metadata, as Producer wires them."""

    def __init__(self, cluster: FakeCluster, **config):
        config.setdefault("linger_ms", 0)
        cfg = self.cfg = ProducerConfig(**config)
        self.acc = RecordAccumulator(
            cfg.batch_size,
            cfg.buffer_memory,
            cfg.linger_ms,
            cfg.compression_id,
            cfg.retry_backoff_ms,
            cfg.retry_backoff_max_ms,
            cfg.delivery_timeout_ms,
        )
        self.transport = FakeTransport(cluster)
        self.metadata = FakeMetadata(cluster, transport=self.transport)
        self.sender = Sender(cluster.name, cfg, self.acc, self.metadata, "test", transport=self.transport)
        self.sender.start()

    def send(self, tp: TopicPartition, value: bytes, key: bytes | None = None):
        return self.acc.append(tp, int(time.time() * 1000), key, value, (), None, 1000)

    def close(self) -> None:
        self.sender.running = False
        self.sender.wakeup()
        self.sender.join(10)
        if self.sender.is_alive():
            self.sender.force_close = True
            self.sender.wakeup()
            self.sender.join(5)
        self.transport.close()
        assert not self.sender.is_alive()
        assert self.sender.fatal_error is None


@pytest.fixture
def cluster(tmp_path):
    c = FakeCluster(tmp_path, brokers=2)
    c.create_topic("t", partitions=2, replicas=(0, 1))
    yield c
    c.close()


@pytest.fixture
def client_factory(cluster):
    made = []

    def make(**config) -> Client:
        cl = Client(cluster, **config)
        made.append(cl)
        return cl

    yield make
    for cl in made:
        cl.close()


def values(cluster: FakeCluster, tp: TopicPartition, broker: int | None = None) -> list:
    return [(r[0], r[3]) for r in cluster.replica(tp, broker).records()]


@pytest.mark.parametrize("idempotent", [True, False])
def test_batches_drained_and_acknowledged_with_their_offsets(cluster, client_factory, idempotent):
    cl = client_factory(enable_idempotence=idempotent, acks="all" if idempotent else 1)
    cluster.append(T1, [b"already", b"there"])
    futs = {
        tp: [cl.send(tp, b"%s-%d" % (tp.topic.encode() + bytes([48 + tp.partition]), i)) for i in range(20)]
        for tp in (T0, T1)
    }
    got = {tp: [f.get(timeout=10) for f in fs] for tp, fs in futs.items()}
    assert [md.offset for md in got[T0]] == list(range(20))
    assert [md.offset for md in got[T1]] == list(range(2, 22))
    assert {md.partition for md in got[T1]} == {1}
    assert values(cluster, T0) == [(i, b"t0-%d" % i) for i in range(20)]
    assert values(cluster, T1)[2:] == [(i + 2, b"t1-%d" % i) for i in range(20)]
    produces = cluster.methods_called(method="produce")
    assert 2 <= len(produces) < 40  # batched: fewer calls than records
    assert all(label.endswith("-b0") for _, label, _ in produces)  # the leaders only
    if idempotent:
        assert cl.sender.producer_id == 1000
        assert len(cluster.methods_called(method="init_producer_id")) == 1


def test_not_leader_is_retried_after_backoff_with_a_metadata_refresh(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=200, retry_backoff_max_ms=200)
    assert cl.send(T0, b"first").get(timeout=10).offset == 0
    refreshes = cl.metadata.refreshes
    cluster.move_leader(T0, 1)  # the client's metadata still names broker 0
    md = cl.send(T0, b"second").get(timeout=10)
    assert md.offset == 1
    assert values(cluster, T0, 1) == [(0, b"first"), (1, b"second")]
    assert values(cluster, T0, 0) == [(0, b"first")]  # the old leader refused it
    calls = cluster.methods_called(method="produce")
    assert [label for _, label, _ in calls] == ["t-0-b0", "t-0-b0", "t-0-b1"]
    assert calls[2][0] - calls[1][0] >= 0.15  # retry_backoff_ms
    assert cl.metadata.refreshes > refreshes


@pytest.mark.parametrize("fault", [("error", NotEnoughReplicasError.code), ("dead",), ("slow", 0.3)])
def test_retriable_failures_are_retried_until_the_batch_lands_once(cluster, client_factory, fault):
    cl = client_factory(retry_backoff_ms=50)
    cluster.replica(T0).inject("produce", fault, fault)
    futs = [cl.send(T0, b"v%d" % i) for i in range(5)]
    assert [f.get(timeout=10).offset for f in futs] == list(range(5))
    assert values(cluster, T0) == [(i, b"v%d" % i) for i in range(5)]
    attempts = len(cluster.methods_called(method="produce"))
    assert attempts == (1 if fault[0] == "slow" else 3)
    if fault == ("dead",):  # a dead leader actor is NOT_LEADER_OR_FOLLOWER: the handle is looked up again
        assert cl.metadata.refreshes >= 2


def test_idempotent_retry_after_a_lost_answer_writes_no_duplicate(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=20)
    cluster.replica(T0).inject("produce", ("lost",))  # appended, then the answer is lost (actor died)
    futs = [cl.send(T0, b"once-%d" % i) for i in range(3)]
    assert [f.get(timeout=10).offset for f in futs] == [0, 1, 2]
    assert len(cluster.methods_called(method="produce")) == 2  # it was resent ...
    assert values(cluster, T0) == [(0, b"once-0"), (1, b"once-1"), (2, b"once-2")]  # ... and written once
    assert cl.send(T0, b"next").get(timeout=10).offset == 3  # the sequence goes on from there


def test_without_idempotence_a_lost_answer_duplicates(cluster, client_factory):
    """The contrast that proves the previous test can fail: the same retry without producer ids."""
    cl = client_factory(retry_backoff_ms=20, enable_idempotence=False, acks=1)
    cluster.replica(T0).inject("produce", ("lost",))
    assert cl.send(T0, b"twice").get(timeout=10).offset == 1
    assert values(cluster, T0) == [(0, b"twice"), (1, b"twice")]


def test_delivery_timeout_fails_the_future_with_the_last_error(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=50, request_timeout_ms=100, delivery_timeout_ms=600)
    cluster.replica(T0).inject("produce", *[("error", NotEnoughReplicasError.code)] * 1000)
    t0 = time.monotonic()
    fut = cl.send(T0, b"never")
    with pytest.raises(KafkaTimeoutError) as ei:
        fut.get(timeout=10)
    took = time.monotonic() - t0
    assert 0.5 <= took < 5
    # expired either in the accumulator (waiting out a backoff) or on its last failed answer: either way the
    # leader's last answer is the cause, in the message and as __cause__
    assert "expiring 1 record(s) for t-0" in str(ei.value)
    assert "last error: [Error 19] NOT_ENOUGH_REPLICAS" in str(ei.value)
    assert isinstance(ei.value.__cause__, NotEnoughReplicasError)
    assert values(cluster, T0) == []
    assert len(cluster.methods_called(method="produce")) >= 3


def test_request_timeout_abandons_a_hung_call_and_expires_the_batch(cluster, client_factory):
    # the sender waits request_timeout_ms + 1 s for an answer (the leader answers REQUEST_TIMED_OUT first)
    cl = client_factory(retry_backoff_ms=50, request_timeout_ms=200, delivery_timeout_ms=400)
    cluster.replica(T0).inject("produce", ("hang",))
    t0 = time.monotonic()
    fut = cl.send(T0, b"stuck")
    with pytest.raises(KafkaTimeoutError) as ei:
        fut.get(timeout=10)
    assert 1.1 <= time.monotonic() - t0 < 5
    assert "expiring 1 record(s) for t-0" in str(ei.value)
    assert values(cluster, T0) == []


def test_request_timeout_retries_when_delivery_time_is_left(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=50, request_timeout_ms=200, delivery_timeout_ms=10000)
    cluster.replica(T0).inject("produce", ("hang",))
    assert cl.send(T0, b"late").get(timeout=10).offset == 0
    assert len(cluster.methods_called(method="produce")) == 2
    assert values(cluster, T0) == [(0, b"late")]


def test_a_non_retriable_error_fails_only_its_batch(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=20)
    cluster.replica(T0).inject("produce", ("error", RecordListTooLargeError.code))
    bad = cl.send(T0, b"refused")
    good = cl.send(T1, b"fine")
    with pytest.raises(RecordListTooLargeError):
        bad.get(timeout=10)
    assert good.get(timeout=10).offset == 0
    assert len(cluster.methods_called(label="t-0-b0", method="produce")) == 1  # not retried
    assert values(cluster, T0) == [] and values(cluster, T1) == [(0, b"fine")]
    # the partition keeps working, and with the same producer id (no reset for this error)
    pid = cl.sender.producer_id
    assert cl.send(T0, b"after").get(timeout=10).offset == 0
    assert cl.sender.producer_id == pid
    assert values(cluster, T0) == [(0, b"after")]


def test_retries_exhausted_fail_with_the_retriable_error(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=10, retries=2, enable_idempotence=False, acks=1)
    cluster.replica(T0).inject("produce", *[("error", NotLeaderOrFollowerError.code)] * 10)
    with pytest.raises(NotLeaderOrFollowerError):
        cl.send(T0, b"x").get(timeout=10)
    assert len(cluster.methods_called(method="produce")) == 3  # the first try and two retries


def test_a_dead_leader_actor_is_dropped_and_the_new_leader_looked_up(cluster, client_factory):
    cl = client_factory(retry_backoff_ms=20)
    assert cl.send(T0, b"before").get(timeout=10).offset == 0
    cluster.move_leader(T0, 1)
    cluster.replica(T0, 0).dead = True  # its broker died; the client still holds the actor handle
    assert cl.send(T0, b"after").get(timeout=10).offset == 1
    assert values(cluster, T0, 1) == [(0, b"before"), (1, b"after")]
    assert [label for _, label, _ in cluster.methods_called(method="produce")] == ["t-0-b0", "t-0-b0", "t-0-b1"]
    assert cl.metadata.replica_handle(T0, 0) is None  # forgotten, and not found again


def test_a_sequence_gap_at_the_leader_resequences_under_a_new_producer_id(cluster, client_factory):
    """KIP-360: the leader lost acknowledged batches (an unclean election truncated its log), so the
    producer's next sequence leaves a gap there: OUT_OF_ORDER_SEQUENCE_NUMBER for the very next batch.
    Kafka's idempotent producer then retries under a bumped epoch with sequences from 0; only what the
    leader lost is lost, every later record lands once and in order, and the producer goes on."""
    cl = client_factory(retry_backoff_ms=20, linger_ms=0)
    assert cl.send(T0, b"a").get(timeout=10).offset == 0
    assert cl.send(T0, b"b").get(timeout=10).offset == 1
    assert cl.send(T1, b"other").get(timeout=10).offset == 0
    pid = cl.sender.producer_id
    leader = cluster.replica(T0)
    with cluster.lock:
        leader.log.truncate_to(1)  # "b" is gone; the leader's producer state now ends at sequence 0
    futs = [cl.send(T0, b"c%d" % i) for i in range(5)] + [cl.send(T1, b"other-after")]
    got = [f.get(timeout=10) for f in futs]
    assert [md.offset for md in got[:5]] == [1, 2, 3, 4, 5] and got[5].offset == 1
    assert values(cluster, T0) == [(0, b"a")] + [(i + 1, b"c%d" % i) for i in range(5)]
    assert values(cluster, T1) == [(0, b"other"), (1, b"other-after")]
    assert cl.sender.producer_id != pid and cl.sender.transaction_manager.resets == 1
    assert cl.send(T0, b"d").get(timeout=10).offset == 6  # and it goes on with the new id
    assert values(cluster, T0)[-1] == (6, b"d")


def test_warm_looks_up_each_leader_once_and_asks_the_transport_to_open_it(cluster):
    """``TransactionManager._warm`` (run while an AddPartitionsToTxn is in flight): each partition's leader is looked up
    and handed to ``transport.warm`` once; a partition that does not exist is skipped, not raised."""
    cl = Client(cluster)
    try:
        s = cl.sender.transaction_manager
        s._warm([T0, T1, TopicPartition("missing", 0)])
        leaders = [cl.metadata.leader(tp)[0] for tp in (T0, T1)]
        assert cl.transport.warmed == leaders
        s._warm([T0, T1])
        assert cl.transport.warmed == leaders  # once each
        assert s._warmed == {T0, T1, TopicPartition("missing", 0)}
    finally:
        cl.close()
