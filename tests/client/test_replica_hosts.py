"""Replica hosts (``replica.host.max.partitions`` > 1, actors/replica_host.py): a broker's replicas share
ReplicaHost processes. On a real 3-broker cluster in that mode: each broker's replicas live in one process,
data flows through them as through replica actors, a deleted topic frees its slots (and its directories'
locks) while the host lives on; and the faults (slow): the host's process SIGKILLed under an acks=all
producer (every replica in it is recreated, in a new host, nothing acknowledged is lost or duplicated) and
SIGSTOPped (found frozen after the session timeout, killed, its replicas recreated)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import ray
from support import SMALL_INTERNAL_TOPICS, wait_until

import rafka
from actors.server.worker_process import worker_title
from protocol.names import RAY_NAMESPACE, broker_name
from rafka import TopicPartition

pytestmark = pytest.mark.cluster

HOSTED = {
    **SMALL_INTERNAL_TOPICS,
    "replica.host.max.partitions": 4,
    "replica.lag.time.max.ms": 3000,
    "broker.session.timeout.ms": 4000,
    "broker.heartbeat.interval.ms": 500,
}


@pytest.fixture(scope="module")
def hosted(ray_cluster, tmp_path_factory):
    cluster = rafka.LocalCluster(
        brokers=3,
        name="rh" + uuid.uuid4().hex[:6],
        data_dir=tmp_path_factory.mktemp("rafka-hosts"),
        broker_config=HOSTED,
    )
    yield cluster
    cluster.stop()


def broker(cluster, b: int):
    return ray.get_actor(broker_name(cluster.name, b), namespace=RAY_NAMESPACE)


def replica_pids(cluster, topic: str) -> dict[int, dict[int, int]]:
    """broker id -> {partition: pid of the process running that broker's replica of it}."""
    out: dict[int, dict[int, int]] = {}
    for b in cluster.broker_ids():
        hs = ray.get(broker(cluster, b).replica_handles.remote(), timeout=30)
        out[b] = {p: ray.get(h.state.remote(), timeout=30)["pid"] for (t, p), h in hs.items() if t == topic}
    return out


def produce(cluster, topic: str, n: int, **config) -> list:
    errors: list = []
    with rafka.Producer(cluster, acks="all", **config) as prod:
        for i in range(n):
            prod.send(topic, b"%d" % i, key=b"k%d" % (i % 13), callback=lambda md, exc: exc and errors.append(exc))
        prod.flush()
    assert errors == []
    return errors


def consume_all(cluster, topic: str, partitions: int, n: int, timeout: float = 60.0) -> list:
    got: list = []
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(500).values():
            got.extend(recs)
    c.close()
    return got


def test_a_broker_keeps_its_replicas_in_host_processes_and_data_flows_through_them(hosted):
    admin = rafka.Admin(hosted)
    topic = "hosted-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    pids = replica_pids(hosted, topic)
    for b, by_part in pids.items():
        assert sorted(by_part) == list(range(6))
        hosts = set(by_part.values())
        assert len(hosts) == 2, (b, by_part)  # 6 replicas, at most 4 per host: two processes, not six
        for pid in hosts:
            assert "ray::ReplicaHost" in (worker_title(pid) or ""), pid
        pool = ray.get(broker(hosted, b).replica_pool.remote(), timeout=30)
        counts = [h["replicas"] for h in pool["hosts"]]
        assert pool["max_partitions"] == 4 and sum(counts) == 6 and max(counts) <= 4, pool
    assert len({pid for by_part in pids.values() for pid in by_part.values()}) == 6  # no host shared by brokers
    produce(hosted, topic, 3000)
    got = consume_all(hosted, topic, 6, 3000)
    assert sorted(int(r.value) for r in got) == list(range(3000))
    for p in range(6):
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(len(offs)))  # dense from 0, in order
    admin.delete_topics([topic])
    admin.close()


def test_a_deleted_topic_frees_its_slots_and_the_same_name_binds_again_in_the_live_hosts(hosted):
    admin = rafka.Admin(hosted)
    topic = "hosted-del-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 2, 3)
    before = replica_pids(hosted, topic)
    produce(hosted, topic, 200)
    admin.delete_topics([topic])

    def freed():
        return all(not ray.get(broker(hosted, b).replica_handles.remote(), timeout=30) for b in hosted.broker_ids())

    wait_until(freed, 30, "every replica of the deleted topic stopped")
    for b in hosted.broker_ids():  # one empty host is kept (the others retired), with no death
        pool = ray.get(broker(hosted, b).replica_pool.remote(), timeout=30)
        assert pool["hosts_died"] == 0 and [h["replicas"] for h in pool["hosts"]] == [0], pool
    admin.create_topic(topic, 2, 3)  # same name, same directories: each bind takes the lock again
    after = replica_pids(hosted, topic)
    for b in hosted.broker_ids():
        assert len(set(after[b].values())) == 1  # both replicas in the broker's one spare host
        assert set(after[b].values()) <= set(before[b].values()) | {
            h["pid"] for h in ray.get(broker(hosted, b).replica_pool.remote(), timeout=30)["hosts"]
        }
    produce(hosted, topic, 100)
    got = consume_all(hosted, topic, 2, 100)
    assert sorted(int(r.value) for r in got) == list(range(100))  # the old topic's 200 are gone
    admin.delete_topics([topic])
    admin.close()


def _faulted_topic(cluster, admin, prefix: str) -> tuple[str, int, int]:
    """A fresh 3 x RF 3 topic (min.insync.replicas 2) and (broker id, host pid) of a broker leading one of its
    partitions."""
    topic = prefix + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    b = cluster.server.describe(topic)["partitions"][0]["leader"]
    return topic, b, replica_pids(cluster, topic)[b][0]


def _fault_run(cluster, topic: str, n: int, fault) -> list:
    """Produce ``n`` records acks=all (idempotent) while ``fault()`` runs once a third are sent; a consumer then
    reads each exactly once, in per-key order."""
    errors: list = []
    with rafka.Producer(cluster, acks="all", linger_ms=2, request_timeout_ms=2000, delivery_timeout_ms=120000) as prod:
        for i in range(n):
            if i == n // 3:
                fault()
            prod.send(topic, b"%d" % i, key=b"k%d" % (i % 13), callback=lambda md, exc: exc and errors.append(exc))
            if i % 100 == 0:
                time.sleep(0.01)
        prod.flush()
    assert errors == []
    got = consume_all(cluster, topic, 3, n, timeout=120)
    assert sorted(int(r.value) for r in got) == list(range(n))  # every acknowledged record, once
    for p in range(3):
        per_key: dict = {}
        for r in got:
            if r.partition == p:
                per_key.setdefault(r.key, []).append(int(r.value))
        assert all(v == sorted(v) for v in per_key.values())  # per-key order
    return got


def _recovered(cluster, topic: str, dead_pid: int) -> None:
    def ok():
        pids = replica_pids(cluster, topic)
        if any(sorted(by_part) != [0, 1, 2] or dead_pid in by_part.values() for by_part in pids.values()):
            return None
        return all(len(p["isr"]) == 3 for p in cluster.server.describe(topic)["partitions"])

    wait_until(ok, 90, "every replica recreated in a live host and the ISRs full again", interval=0.5)


@pytest.mark.slow
def test_a_sigkilled_host_takes_its_replicas_down_together_and_each_is_recreated_losing_nothing(hosted):
    admin = rafka.Admin(hosted)
    topic, b, pid = _faulted_topic(hosted, admin, "hosted-kill-")
    died_before = ray.get(broker(hosted, b).replica_pool.remote(), timeout=30)["hosts_died"]
    _fault_run(hosted, topic, 6000, lambda: os.kill(pid, signal.SIGKILL))
    _recovered(hosted, topic, pid)
    assert ray.get(broker(hosted, b).replica_pool.remote(), timeout=30)["hosts_died"] == died_before + 1
    admin.delete_topics([topic])
    admin.close()


@pytest.mark.slow
def test_a_sigstopped_host_is_found_frozen_killed_and_its_replicas_recreated(hosted):
    admin = rafka.Admin(hosted)
    topic, _, pid = _faulted_topic(hosted, admin, "hosted-stop-")
    resume = threading.Timer(20.0, lambda: os.kill(pid, signal.SIGCONT) if worker_title(pid) else None)

    def pause() -> None:
        os.kill(pid, signal.SIGSTOP)
        resume.start()  # a host never judged frozen would wake here and the checks below would fail

    try:
        _fault_run(hosted, topic, 4000, pause)
        wait_until(lambda: not worker_title(pid), 30, f"the frozen host {pid} killed")
        _recovered(hosted, topic, pid)
    finally:
        resume.cancel()
        if worker_title(pid):
            os.kill(pid, signal.SIGCONT)
    admin.delete_topics([topic])
    admin.close()


@pytest.mark.slow
def test_a_host_sigkilled_while_a_replica_compacts_on_its_thread_recovers_every_latest_value(hosted):
    """The cleaner builds a pass on a worker thread of the host (storage/log.py); the host's process is
    SIGKILLed while the pass has ``.cleaned`` segments on disk. The replica (RF 1: its directory is the only
    copy) is recreated from that directory, the loader finishes or drops the half-made pass, and every key's
    latest acknowledged value is read back, with no cleaner file left behind."""
    import glob

    admin = rafka.Admin(hosted)
    topic = "hosted-clean-" + uuid.uuid4().hex[:6]
    admin.create_topic(
        topic,
        1,
        1,
        {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01"},
    )
    (b,) = [b for b, by_part in replica_pids(hosted, topic).items() if by_part]
    pid = replica_pids(hosted, topic)[b][0]
    (pdir,) = glob.glob(os.path.join(str(hosted.data_dir), "**", f"{topic}-0"), recursive=True)

    def cleaner_files() -> list:
        return [f for f in os.listdir(pdir) if f.endswith((".cleaned", ".swap"))]

    keys, n = 3000, 300_000
    value = b"v" * 90
    with rafka.Producer(hosted, acks=1) as prod:
        for start in range(0, n, 10_000):
            prod.send_batch(topic, [(b"k%d" % (i % keys), b"%d:" % i + value) for i in range(start, start + 10_000)])
        prod.flush()
    seen = wait_until(lambda: cleaner_files() or None, 90, "a compaction pass with files on disk", interval=0.002)
    os.kill(pid, signal.SIGKILL)
    left_by_the_kill = cleaner_files()
    assert seen and left_by_the_kill, "the pass ended before the kill: the test would prove nothing"

    def recreated():
        pids = replica_pids(hosted, topic)[b]
        return pids.get(0) not in (None, pid) and not cleaner_files()

    wait_until(recreated, 90, "the replica recreated in a live host, its directory recovered", interval=0.5)
    latest = {b"k%d" % k: max(i for i in range(k, n, keys)) for k in range(keys)}
    got: dict = {}
    c = rafka.Consumer(hosted, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(got.get(k) != v for k, v in latest.items()):
        for recs in c.poll(500).values():
            for r in recs:
                i = int(r.value.split(b":")[0])
                assert i > got.get(r.key, -1), f"{r.key!r}: {i} after {got.get(r.key)}"  # per-key order
                got[r.key] = i
    c.close()
    assert got == latest  # every key's latest value survived the kill of the pass
