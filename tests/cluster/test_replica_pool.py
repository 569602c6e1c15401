"""The brokers' warm pools of replica actors (actors/server/replica_pool.py) on real Ray: a topic's replicas are
pre-started processes (their pids existed before the create), the pool refills, a SIGKILLed bound replica
is replaced and found again through its broker (actors/channels/replica_lookup.py) with its data, a SIGKILLed warm
actor costs nothing but a refill, and a broker's end takes its pool's processes with it."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import ray
from support import batch, clusters, full_isr, read_values, rstate, wait_until

from actors.replica import ReplicaActor
from protocol.messages import ProduceRequest
from protocol.names import broker_name

pytestmark = pytest.mark.cluster

POOL = 2


@pytest.fixture(scope="module")
def pool_cluster(ray_cluster, tmp_path_factory):
    name = "wp" + uuid.uuid4().hex[:10]
    with clusters(name, str(tmp_path_factory.mktemp("pool"))) as start:
        # min.idle.cpus 0: the pools fill even on a busy machine (by default they wait for spare CPU)
        config = {
            "replica.host.max.partitions": 1,  # a ReplicaActor process per replica: the pool's mode
            "replica.warm.pool.size": POOL,
            "replica.warm.pool.min.idle.cpus": 0,
            "replica.lag.time.max.ms": 30000,
        }
        yield start(config=config)


def pools(ch) -> dict[int, dict]:
    return {i: ray.get(ch.broker(i).replica_pool.remote(), timeout=30) for i in sorted(ch.brokers)}


def full_pools(ch, timeout: float = 60.0) -> dict[int, dict]:
    return wait_until(
        lambda: (lambda ps: ps if all(p["ready"] == POOL for p in ps.values()) else None)(pools(ch)),
        timeout,
        "every broker's warm pool full",
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


def replica_pids(ch, topic: str, partitions: int) -> dict[tuple[int, int], int]:
    return {(p, b): rstate(ch.replica(topic, p, b))["pid"] for p in range(partitions) for b in sorted(ch.brokers)}


def test_topic_create_binds_warm_actors_and_the_pool_refills(pool_cluster):
    ch = pool_cluster
    before = full_pools(ch)
    t0 = time.monotonic()
    ch.create_topic("warm", partitions=POOL, rf=3)
    took = time.monotonic() - t0
    pids = replica_pids(ch, "warm", POOL)
    for (p, b), pid in pids.items():
        assert pid in before[b]["pids"], f"warm-{p} on broker {b} runs in pid {pid}, not a warm one {before[b]}"
    after = full_pools(ch)
    for b, st in after.items():
        assert st["taken"] - before[b]["taken"] == POOL and st["cold"] == before[b]["cold"], st
        assert not set(st["pids"]) & set(pids.values()), st  # refilled with new processes
    print(f"create of {POOL} x RF 3 from warm pools: {took:.2f} s")


def test_sigkill_of_a_bound_replica_is_replaced_and_found_through_its_broker(pool_cluster):
    ch = pool_cluster
    ch.create_topic("bound", partitions=1, rf=3)
    leader, h = full_isr(ch, "bound", 3)
    r = ray.get(h.produce.remote(ProduceRequest(batch([b"a", b"b", b"c"]), acks=-1)), timeout=30)
    assert r["error_code"] == 0, r
    victim = next(b for b in sorted(ch.brokers) if b != leader)
    old = ch.replica("bound", 0, victim)
    pid = rstate(old)["pid"]
    os.kill(pid, signal.SIGKILL)

    def replaced():
        h2 = ch.replica("bound", 0, victim)
        st = rstate(h2)
        return h2 if st["pid"] != pid and st["log_end_offset"] == 3 else None

    h2 = wait_until(replaced, 60, "the killed replica replaced and caught up")
    assert h2 != old
    assert read_values(ch.replica("bound", 0, leader)) == [b"a", b"b", b"c"]
    full_isr(ch, "bound", 3, timeout=60)  # it rejoined the ISR


def test_warm_actors_load_the_classes_of_the_actors_a_replica_calls(pool_cluster):
    """ReplicaActor.preload: Ray imports an actor class's module at a process's first handle of that class
    (actors.broker: 200-360 ms under load, paid by a leader at its first transactional produce); a warm
    actor has it done before it is bound."""
    ch = pool_cluster
    for b, st in full_pools(ch).items():
        assert st["ready"] == POOL and st["preloaded"] >= st["ready"], (b, st)
    fresh = ReplicaActor.options(num_cpus=0, max_concurrency=1000).remote()  # unbound, as the pool starts them
    try:
        none = ray.get(fresh.preload.remote("no-such-cluster", 0), timeout=60)
        assert none == {"loaded": [], "modules": []}, none  # a replica's own imports do not include them
        ans = ray.get(fresh.preload.remote(ch.cluster, 1), timeout=60)
        assert ans == {
            "loaded": [broker_name(ch.cluster, 1)],
            "modules": ["actors.broker", "actors.group_coordinator", "actors.txn_coordinator"],
        }, ans
    finally:
        ray.kill(fresh)


def test_sigkill_of_a_warm_actor_is_harmless(pool_cluster):
    ch = pool_cluster
    before = full_pools(ch)
    pid = before[0]["pids"][0]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: pools(ch)[0]["died"] == before[0]["died"] + 1, 30, "the warm actor's death noticed")
    after = full_pools(ch)
    assert pid not in after[0]["pids"]
    ch.create_topic("after-warm-kill", partitions=1, rf=3)
    full_isr(ch, "after-warm-kill", 3, timeout=60)


def test_a_broker_end_leaves_no_pool_process(pool_cluster):
    ch = pool_cluster
    ps = full_pools(ch)
    killed = ps[2]["pids"] + [rstate(ch.replica("warm", p, 2))["pid"] for p in range(POOL)]
    ch.kill_broker(2)  # fate-sharing: its warm and bound replicas die with it
    wait_until(lambda: not any(alive(p) for p in killed), 30, "broker 2's replica processes gone")
    rest = [p for b in (0, 1) for p in ps[b]["pids"]]
    rest += [rstate(ch.replica("warm", p, b))["pid"] for p in range(POOL) for b in (0, 1)]
    ch.shutdown()  # the orderly stop: shutdown() kills the warm actors, the replicas close their logs
    wait_until(lambda: not any(alive(p) for p in rest), 30, "every replica process gone after shutdown")
