"""KIP-392 in rafka's consumer without Ray: ``client_rack`` travels in every fetch, a leader's
preferred_read_replica sends the partition's fetches to that replica, an error there (out of range included:
no offset reset) or ``metadata_max_age_ms`` passing sends them back to the leader. Over the fake transport: the
leader (b0) names b1 to clients of rack "b", and b1 serves KIP-392 fetches up to its own HW."""

from __future__ import annotations

import time

import pytest
from fake_transport import FakeCluster, FakeMetadata, FakeReplica, FakeTransport

from protocol import errors as E
from protocol.messages import FetchRequest, FetchResponse
from rafka.config import ConsumerConfig
from rafka.consumer.fetcher import Fetcher
from rafka.structs import TopicPartition

T0 = TopicPartition("t", 0)


class RackReplica(FakeReplica):
    """A FakeReplica that acts as a RackAwareReplicaSelector leader (b0, rack "a"; b1 is rack "b") and, as a
    follower, serves fetches that carry client metadata from its own log up to its own HW."""

    def fetch(self, req: FetchRequest) -> dict:
        self.cluster.seen.append((self.broker_id, req))
        if self.role == "leader" and req.client_rack == "b" and self.cluster.redirect:
            snap = self.log.fetch_offset_snapshot()
            return FetchResponse(
                high_watermark=snap.high_watermark, next_offset=req.fetch_offset, preferred_read_replica=1
            ).to_dict()
        if self.role == "follower" and not req.fetch_only_leader:
            self.role = "leader"  # the read FakeReplica does, without its leader check
            try:
                return super().fetch(req)
            finally:
                self.role = "follower"
        return super().fetch(req)


@pytest.fixture
def cluster(tmp_path):
    c = FakeCluster(tmp_path, brokers=2)
    c.create_topic("t", partitions=1, replicas=(0, 1))
    for b in (0, 1):
        old = c.replicas[("t", 0, b)]
        old.log.close()
        r = RackReplica(c, T0, b, str(tmp_path / f"rack-b{b}"))
        r.role = old.role
        c.replicas[("t", 0, b)] = r
        for name, ep in list(c.named.items()):
            if ep is old:
                c.named[name] = r
    c.seen, c.redirect = [], True
    yield c
    c.close()


def replicate(cluster) -> None:
    """The follower b1 copies what it lacks of b0's log and takes b0's HW (its fetch loop, in one step)."""
    lead, f = cluster.replica(T0, 0), cluster.replica(T0, 1)
    with cluster.lock:
        leo = f.log.log_end_offset
        if lead.log.log_end_offset > leo:
            f.log.append_as_follower(bytes(lead.log.read(leo, 1 << 30, min_one_message=True).records))
        f.log.update_high_watermark(lead.log.high_watermark)


def fetcher(cluster, **config) -> Fetcher:
    config.setdefault("retry_backoff_ms", 20)
    config.setdefault("auto_offset_reset", "earliest")
    transport = FakeTransport(cluster)
    f = Fetcher(FakeMetadata(cluster, transport=transport), ConsumerConfig(**config), transport)
    f.assign([T0])
    return f


def poll(f: Fetcher, want: int, timeout: float = 3.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        f.resolve_positions(1000)
        f.send_fetches()
        f.wait(0.05)
        for recs in f.drain(500).values():
            out.extend(recs)
    return out


def fetched_from(cluster) -> list[int]:
    return [b for b, _ in cluster.seen]


def test_the_consumer_follows_the_preferred_read_replica(cluster):
    cluster.append(T0, [b"a", b"b", b"c"])
    replicate(cluster)
    f = fetcher(cluster, client_rack="b")
    recs = poll(f, 3)
    assert [(r.offset, r.value) for r in recs] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert fetched_from(cluster)[:2] == [0, 1]  # asked the leader once, then read from b1
    assert all(req.client_rack == "b" for _, req in cluster.seen)
    assert f.state(T0).preferred_read_replica == 1
    cluster.append(T0, [b"d"])  # b1 does not have it yet: its answers are empty, the consumer waits there
    assert poll(f, 1, timeout=0.3) == []
    replicate(cluster)
    assert [r.value for r in poll(f, 1)] == [b"d"]
    assert set(fetched_from(cluster)[1:]) == {1}


def test_an_error_from_the_follower_sends_the_consumer_back_to_the_leader_without_a_reset(cluster):
    cluster.append(T0, [b"a", b"b"])
    replicate(cluster)
    f = fetcher(cluster, client_rack="b")
    assert len(poll(f, 2)) == 2
    cluster.redirect = False  # from now on the leader serves the rack itself
    follower = cluster.replica(T0, 1)
    cluster.append(T0, [b"c"])
    with cluster.lock:  # b1 lost its log's tail (a restart): the consumer's position 2 is past its LEO
        follower.log.truncate_to(1)
    n = len(cluster.seen)
    recs = poll(f, 1)
    assert [(r.offset, r.value) for r in recs] == [(2, b"c")]  # from the leader; position kept, no reset to 0
    after = cluster.seen[n:]
    assert after[0][0] == 1 and FetchResponse.from_dict(follower.fetch(after[0][1])).error_code == (
        E.OffsetOutOfRangeError.code
    )
    assert after[1][0] == 0 and f.state(T0).preferred_read_replica is None


def test_the_preferred_replica_expires_after_metadata_max_age(cluster):
    cluster.append(T0, [b"a"])
    replicate(cluster)
    f = fetcher(cluster, client_rack="b", metadata_max_age_ms=200, fetch_max_wait_ms=0)
    assert len(poll(f, 1)) == 1
    assert f.state(T0).preferred_read_replica == 1
    time.sleep(0.25)
    n = len(cluster.seen)
    f.send_fetches()
    assert cluster.seen[n][0] == 0  # back to the leader, which names b1 again
    f.wait(0.1)
    assert f.state(T0).preferred_read_replica == 1


def test_without_client_rack_the_consumer_reads_from_the_leader_only(cluster):
    cluster.append(T0, [b"a"])
    f = fetcher(cluster)
    assert len(poll(f, 1)) == 1
    assert {b for b, _ in cluster.seen} == {0} and all(req.client_rack is None for _, req in cluster.seen)
    with pytest.raises(ValueError, match="client_rack"):
        ConsumerConfig(client_rack=5)
