"""KIP-392 fetch from follower, end to end: a 3-broker cluster of its own, each broker in its own ``broker.rack``
(az-0, az-1, az-2), ``replica.selector.class`` Kafka's RackAwareReplicaSelector. One partition, RF 3. A
confluent-kafka (librdkafka) consumer with ``client.rack`` set to a follower's rack, and rafka's own consumer with
``client_rack``, read the partition from the beginning.

What it shows, measured on the brokers (the replicas' own fetch counters, not timing): the leader answered a
preferred read replica naming the follower in the client's rack and served the consumers no record bytes; the
follower served every record, in order. Then the third replica's process is frozen (SIGSTOP) and records are
produced with acks=1: the follower has them (its LEO) but the HW cannot pass the frozen ISR member, and neither
consumer gets a record at or past the HW; thawed, the HW moves and both get the rest, offsets dense."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import ray
from support import SMALL_INTERNAL_TOPICS

import rafka
from rafka import TopicPartition

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "ffr"
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
FIRST, SECOND = 60, 40  # records before the freeze (acks=all) and during it (acks=1)


@pytest.fixture
def rack_cluster(ray_cluster, tmp_path):
    cluster = rafka.LocalCluster(
        brokers=3,
        name="ffr" + uuid.uuid4().hex[:8],
        data_dir=tmp_path,
        broker_config={
            **SMALL_INTERNAL_TOPICS,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "replica.selector.class": RACK_AWARE,
            **{f"broker.{b}.broker.rack": f"az-{b}" for b in range(3)},
        },
    )
    yield cluster
    cluster.stop()


def wait_for(what, cond, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def replica(cluster, b: int):
    return ray.get(cluster.server.brokers[b].replica_handle.remote(TOPIC, 0))


def counters(h) -> dict:
    """The replica's consumer-read side: its metrics' consumer bytes_out and fetches, and the KIP-392 counts."""
    st, m = ray.get([h.state.remote(), h.metrics.remote()])
    c = m["counters"]
    return {**st["read_replica"], "bytes_out": c["bytes_out"], "fetches": c["total_fetch_requests"], "st": st}


def produce(bootstrap: str, start: int, n: int, acks) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all", "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(TOPIC, value=b"v-%d" % i, partition=0)
    assert p.flush(30) == 0


def test_consumers_in_a_followers_rack_read_from_it_and_never_past_its_hw(rack_cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTP

    cluster = rack_cluster
    bootstrap = cluster.bootstrap_servers
    rafka.Admin(cluster).create_topic(TOPIC, 1, 3, {"min.insync.replicas": "1"})
    desc = rafka.Admin(cluster).describe_topics([TOPIC])[0]["partitions"][0]
    leader = desc["leader"]
    follower, frozen = [b for b in desc["replicas"] if b != leader]
    handles = {b: replica(cluster, b) for b in range(3)}
    wait_for("a full ISR", lambda: len(ray.get(handles[leader].state.remote())["isr"]) == 3)
    produce(bootstrap, 0, FIRST, "all")
    wait_for("the follower's HW", lambda: counters(handles[follower])["st"]["high_watermark"] == FIRST)
    before = {b: counters(h) for b, h in handles.items()}

    lib = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ffr-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "client.rack": f"az-{follower}",
            "fetch.wait.max.ms": 100,
        }
    )
    lib.assign([CTP(TOPIC, 0, OFFSET_BEGINNING)])
    own = rafka.Consumer(cluster, client_rack=f"az-{follower}", auto_offset_reset="earliest", fetch_max_wait_ms=100)
    own.assign([TopicPartition(TOPIC, 0)])
    got: dict[str, list[tuple[int, bytes]]] = {"librdkafka": [], "rafka": []}

    def drain(seconds: float, want: int | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in lib.consume(500, 0.05):
                if msg.error() is None:
                    got["librdkafka"].append((msg.offset(), msg.value()))
            for recs in own.poll(50).values():
                got["rafka"].extend((r.offset, r.value) for r in recs)
            if want is not None and all(len(v) >= want for v in got.values()):
                return

    def in_order(n: int) -> list[tuple[int, bytes]]:
        return [(i, b"v-%d" % i) for i in range(n)]

    try:
        drain(30, FIRST)
        assert got["librdkafka"] == in_order(FIRST) and got["rafka"] == in_order(FIRST)
        mid = {b: counters(h) for b, h in handles.items()}
        lead_d = {k: mid[leader][k] - before[leader][k] for k in ("redirects", "bytes_out")}
        fol_d = {k: mid[follower][k] - before[follower][k] for k in ("follower_fetches", "follower_bytes", "bytes_out")}
        print("leader", leader, lead_d, "follower", follower, fol_d, "frozen", frozen)
        assert lead_d["redirects"] >= 2 and mid[leader]["last_redirect"] == follower  # one per consumer at least
        assert lead_d["bytes_out"] == 0, "the leader served a consumer records"
        size = mid[leader]["st"]["size_bytes"]
        assert fol_d["follower_bytes"] >= 2 * size and fol_d["bytes_out"] == fol_d["follower_bytes"]
        assert mid[frozen]["bytes_out"] == before[frozen]["bytes_out"] == 0

        # the third ISR member frozen: acks=1 records reach the follower, the HW stays where it was
        pid = mid[frozen]["st"]["pid"]
        assert pid != os.getpid()
        os.kill(pid, signal.SIGSTOP)
        try:
            produce(bootstrap, FIRST, SECOND, 1)
            wait_for(
                "the follower's copy", lambda: counters(handles[follower])["st"]["log_end_offset"] == FIRST + SECOND
            )
            drain(2.0)
            fst = counters(handles[follower])["st"]
            assert fst["log_end_offset"] == FIRST + SECOND and fst["high_watermark"] == FIRST
            assert got["librdkafka"] == in_order(FIRST) and got["rafka"] == in_order(FIRST), "read past the HW"
        finally:
            os.kill(pid, signal.SIGCONT)
        drain(30, FIRST + SECOND)
        assert got["librdkafka"] == in_order(FIRST + SECOND) and got["rafka"] == in_order(FIRST + SECOND)
        end = {b: counters(h) for b, h in handles.items()}
        assert end[leader]["bytes_out"] == before[leader]["bytes_out"], "the leader served a consumer records"
        assert end[follower]["follower_fetches"] > mid[follower]["follower_fetches"]
    finally:
        lib.close()
        own.close()
