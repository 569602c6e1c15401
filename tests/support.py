"""What the cluster suites share: record batches, waiting for a condition, reading a partition back, the
replica's state, and started clusters that are shut down after the test (``import support``; tests/ is on
sys.path through its conftest). Pure helpers; each suite keeps only what is particular to it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.bootstrap import start_cluster
from protocol.messages import FetchRequest
from storage.records import RecordBatchBuilder, decode_records

# Shared test clusters: internal topics of 2 partitions (Kafka 50, rafka 5): each partition replica is an
# actor (~0.5 s to start), so __consumer_offsets and __transaction_state at the defaults cost ~10 s each.
SMALL_INTERNAL_TOPICS = {"offsets.topic.num.partitions": 2, "transaction.state.log.num.partitions": 2}


def batch(
    values: Iterable[bytes],
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    ts: int | None = None,
    key: bytes | None = None,
) -> bytes:
    """One RecordBatch v2 of ``values`` (non-idempotent unless ``pid`` is given), timestamped now or ``ts``."""
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 22)
    now = int(time.time() * 1000) if ts is None else ts
    for v in values:
        assert b.append(now, key, v)
    return b.build()


def keyed_batch(pairs: Iterable[tuple[bytes | None, bytes | None]]) -> bytes:
    b = RecordBatchBuilder(batch_size=1 << 22)
    now = int(time.time() * 1000)
    for k, v in pairs:
        assert b.append(now, k, v)
    return b.build()


def wait_until(fn: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.05):
    """``fn()``'s first truthy value; a dead or not-yet-named actor (or a timed-out call) counts as not yet.
    Raises AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except (RayActorError, ValueError, GetTimeoutError):
            v = None
        if v is not None and v is not False:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def rstate(h) -> dict:
    """A replica actor's ``state()``."""
    return ray.get(h.state.remote(), timeout=30)


def part(ch, topic: str, p: int = 0) -> dict:
    """The controller's view of partition ``p`` of ``topic`` (leader, replicas, ISR, epochs)."""
    return ch.describe(topic)["partitions"][p]


def leader_of(ch, topic: str, p: int = 0):
    """(leader broker id, its replica actor) of partition ``p``, as the controller has it."""
    info = part(ch, topic, p)
    return info["leader"], ch.replica(topic, p, info["leader"])


def full_isr(ch, topic: str, n: int = 3, timeout: float = 30.0, p: int = 0):
    """Wait until the leader replica itself has ``n`` replicas in its ISR; returns (leader id, handle)."""

    def ok():
        b, h = leader_of(ch, topic, p)
        st = rstate(h)
        return (b, h) if st["role"] == "leader" and len(st["isr"]) == n else None

    return wait_until(ok, timeout, f"{topic}-{p}: ISR of {n}")


def read_records(h, start: int = 0, isolation: int = 0) -> list:
    """Every record from ``start`` up to the leader's high watermark (``isolation`` 1: the LSO)."""
    out, offset = [], start
    while True:
        r = ray.get(h.fetch.remote(FetchRequest(offset, 1 << 20, isolation_level=isolation)), timeout=30)
        assert r["error_code"] == 0, r
        recs = [x for x in decode_records(r["records"]) if x.offset >= offset]
        if not recs:
            return out
        out += recs
        offset = recs[-1].offset + 1


def read_values(h, start: int = 0, isolation: int = 0) -> list[bytes]:
    return [r.value for r in read_records(h, start, isolation)]


@contextmanager
def clusters(default_name: str, default_dir: str, defaults: dict | None = None):
    """Yields ``start(num_brokers=3, config=None, node_ids=None, data_dir=None, name=None)``, which starts a
    cluster (named ``default_name``, on ``default_dir``, with ``defaults`` under ``config``); every cluster
    started is shut down on exit."""
    started = []

    def start(
        num_brokers: int = 3,
        config: dict | None = None,
        node_ids=None,
        data_dir: str | None = None,
        name: str | None = None,
    ):
        ch = start_cluster(
            name or default_name,
            num_brokers,
            str(data_dir or default_dir),
            {**(defaults or {}), **(config or {})},
            node_ids=node_ids,
        )
        started.append(ch)
        return ch

    try:
        yield start
    finally:
        for ch in started:
            ch.shutdown()


async def read_until_closed(reader) -> bytes:
    """What a peer got before the server closed its connection; a reset (the server closed with our request
    unread, so the kernel resets) counts as closed with nothing answered."""
    try:
        return await asyncio.wait_for(reader.read(), 15)
    except ConnectionResetError:
        return b""


def coordinator_of(cluster, key: str, key_type: int = 1, via: int | None = None) -> int:
    """The broker id of the coordinator of ``key``, a transactional id (``key_type`` 1) or a group (0):
    FindCoordinator asked of broker ``via`` (default: the cluster's first) until it answers without an error
    (60 s)."""
    from protocol.names import RAY_NAMESPACE, broker_name

    bid = sorted(cluster.broker_ids())[0] if via is None else via
    broker = ray.get_actor(broker_name(cluster.name, bid), namespace=RAY_NAMESPACE)
    ans = wait_until(
        lambda: (a := ray.get(broker.find_coordinator.remote(key, key_type), timeout=30))["error_code"] == 0 and a,
        60,
        f"the coordinator (key type {key_type}) of {key!r}",
    )
    return ans["broker_id"]


def rafka_read(cluster, tps: list[tuple[str, int]], expected: int, settle_s: float = 2.0) -> list[bytes]:
    """Values read by rafka's read_committed consumer (assigned ``tps`` from the start) until ``expected`` came,
    then for ``settle_s`` more: anything extra (an aborted record, a duplicate) shows up."""
    import rafka

    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level="read_committed")
    c.assign([rafka.TopicPartition(t, p) for t, p in tps])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    end = time.monotonic() + settle_s
    while time.monotonic() < end:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    c.close()
    return got


def confluent_read(
    bootstrap: str,
    tps: list[tuple[str, int]],
    isolation: str,
    expected: int,
    settle_s: float = 2.0,
    strict: bool = True,
    timeout_s: float = 60.0,
) -> list[bytes]:
    """Values read by a confluent-kafka consumer (``tps`` assigned from the beginning, ``isolation``) until
    ``expected`` arrived, then for ``settle_s`` more: anything extra (an aborted record, a duplicate) shows up.
    ``strict``: a consumer error fails the read; else it is skipped (a read right after a failover)."""
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle_until = None
    try:
        while time.monotonic() < deadline:
            if settle_until is None and len(got) >= expected:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() > settle_until:
                break
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                assert not strict, msg.error()
                continue
            got.append(msg.value())
    finally:
        c.close()
    return got
