"""The controller's partition balancer on one Ray node (the multi-node run is tests/multinode/test_heal.py): a killed
broker's replicas healed onto the live brokers past replica.auto.heal.delay.ms, every record still there; the broker
back on its directory deletes the replicas it no longer hosts and is given its share again (balance on join);
with too few brokers left, the partitions that cannot be healed are reported with their reasons; a broker lost while
a (throttled) heal copies onto it is healed around."""

from __future__ import annotations

import os
import time

import pytest
import ray
from support import batch, clusters, read_values, wait_until

from protocol.messages import ProduceRequest
from rafka.admin.admin import Admin

pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # two clusters of 4 and 5 brokers, kills, a restart

CONFIG = {
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 10000,
    "replica.fetch.wait.max.ms": 100,
    "leader.imbalance.check.interval.seconds": 3600,
    "replica.auto.heal.delay.ms": 1500,
    "replica.balance.check.interval.ms": 300,
}
TOPIC, PARTITIONS = "h", 4


@pytest.fixture
def cluster(ray_cluster, cluster_name, tmp_path):
    with clusters(cluster_name, str(tmp_path), CONFIG) as start:
        yield start


def _parts(md):
    return next(t for t in md["topics"] if t["name"] == TOPIC)["partitions"]


def _dirs(data_dir, b):
    d = os.path.join(data_dir, f"broker-{b}")
    return {n for n in os.listdir(d) if n.startswith(f"{TOPIC}-")}


def _values(ch):
    out = {}
    for p in _parts(ch.metadata()):
        h = ch.replica(TOPIC, p["partition"], p["leader"])
        out[p["partition"]] = read_values(h)
    return out


def test_heal_then_back_then_too_few_brokers(cluster, tmp_path):
    ch = cluster(4)
    ch.create_topic(TOPIC, partitions=PARTITIONS, rf=2, configs={"min.insync.replicas": "1"})
    for p in range(PARTITIONS):
        res = ray.get(ch.leader_replica(TOPIC, p).produce.remote(ProduceRequest(batch([b"a%d" % p, b"b%d" % p]), -1)))
        assert res["error_code"] == 0, res
    written = _values(ch)
    host = ray.get(ch.controller().describe_controller.remote())["host_broker_id"]
    before = _parts(ch.metadata())
    victim = next(b for b in (3, 2, 1, 0) if b != host and any(b in p["replicas"] for p in before))
    mine = [p["partition"] for p in before if victim in p["replicas"]]

    # 1. healed: no replica on the victim, RF 2 and full ISRs again, every record readable
    t0 = time.monotonic()
    ch.kill_broker(victim)
    md = ch.wait_for(
        lambda md: (
            all(
                victim not in p["replicas"] and len(p["replicas"]) == len(p["isr"]) == 2 and not p["adding"]
                for p in _parts(md)
            )
            and md
        ),
        60,
        what="the lost broker's replicas healed",
    )
    print(f"broker {victim}'s {len(mine)} replicas healed {time.monotonic() - t0:.1f} s after its kill")
    for p in _parts(md):
        assert len(set(p["replicas"])) == 2 and p["leader"] in p["isr"], p
    status = ray.get(ch.controller().partition_balancer_status.remote())
    assert status["moves_started"] >= len(mine) and status["unhealable_partitions"] == [], status
    assert _values(ch) == written
    assert _dirs(str(tmp_path), victim) == {f"{TOPIC}-{q}" for q in mine}  # dead: its disk as it was
    # a file of no meaning to the log loader in each old replica: gone only if the directory was deleted (a
    # replica given back later is a new directory)
    markers = [os.path.join(str(tmp_path), f"broker-{victim}", f"{TOPIC}-{q}", "stale.marker") for q in mine]
    for m in markers:
        open(m, "w").close()

    # 2. back on its directory: told its whole (empty) partition set, it deletes the old replicas; then, holding
    # fewer than its share, it is given replicas until every broker holds 2 (8 replicas on 4 brokers)
    ch.restart_broker(victim)

    def balanced(md):
        parts = _parts(md)
        reps = [sum(b in p["replicas"] for p in parts) for b in range(4)]
        leads = [sum(p["leader"] == b for p in parts) for b in range(4)]
        in_sync = all(len(p["isr"]) == 2 and not p["adding"] and not p["removing"] for p in parts)
        return in_sync and reps == [2, 2, 2, 2] and leads == [1, 1, 1, 1] and md

    md = ch.wait_for(balanced, 90, what="the returned broker given its share of replicas and leaders")
    hosted = {f"{TOPIC}-{p['partition']}" for p in _parts(md) if victim in p["replicas"]}
    wait_until(lambda: _dirs(str(tmp_path), victim) == hosted, 30, "the returned broker's stale replicas deleted")
    assert not any(os.path.exists(m) for m in markers), "an old replica directory was kept"
    assert _values(ch) == written
    plan = Admin(ch.cluster).balance_plan()  # a dry run on a balanced cluster: nothing to do
    assert plan["moves"] == [] and plan["balanced"] and not plan["executed"], plan

    # 3. three brokers lost, only the controller's left: nothing can be healed, and it says why
    others = [b for b in range(4) if b != host]
    for b in others:
        ch.kill_broker(b)
    alone = [p["partition"] for p in _parts(md) if host in p["replicas"]]

    def reported():
        st = ray.get(ch.controller().partition_balancer_status.remote(), timeout=10)
        return len(st["unhealable_partitions"]) == PARTITIONS and st

    st = wait_until(reported, 60, "every partition reported as not healable")
    reasons = {u["partition"]: u["reason"] for u in st["unhealable_partitions"]}
    for q, why in reasons.items():
        if q in alone:
            assert why == "too few live brokers (1) for replication factor 2", reasons
        else:
            assert why.startswith("no live in-sync replica"), reasons
    assert ray.get(ch.controller().metrics.remote())["unhealable_partitions"] == PARTITIONS
    assert ray.get(ch.controller().list_partition_reassignments.remote()) == []


THROTTLED = {  # Kafka's replication throttles, so that a heal's copy lasts seconds and a second loss lands inside it
    "leader.replication.throttled.rate": 1 << 20,
    "follower.replication.throttled.rate": 1 << 20,
    "replication.quota.window.num": 2,
    "replication.quota.window.size.seconds": 1,
    "replica.fetch.max.bytes": 256 << 10,
}


def test_a_second_broker_lost_while_it_receives_a_heal_is_healed_around(cluster):
    """A heal in progress (throttled) onto broker X, and X is lost: the move is planned again onto another live
    broker, the leader never changes, and every record is there."""
    ch = cluster(5, config=THROTTLED)
    host = ray.get(ch.controller().describe_controller.remote())["host_broker_id"]
    a, b = [x for x in range(5) if x != host][:2]
    configs = {
        "min.insync.replicas": "1",
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
    }
    res = ray.get(
        ch.controller().create_topics.remote([{"name": "m", "replica_assignment": [[a, b]], "configs": configs}])
    )
    assert res[0]["error_code"] == 0, res
    # a replica on the controller's broker, so that the heals go to the two idle brokers and the controller stays
    res = ray.get(ch.controller().create_topics.remote([{"name": "pin", "replica_assignment": [[host]]}]))
    assert res[0]["error_code"] == 0, res
    ch.wait_for(lambda md: _leader(md) == a and md, 30, what="the topic's leader")
    for i in range(6):  # 6 MB: about 6 s a copy at 1 MiB/s
        values = [b"%d-%d-" % (i, j) + b"x" * 100_000 for j in range(10)]
        r = ray.get(ch.leader_replica("m", 0).produce.remote(ProduceRequest(batch(values), -1, 30000)))
        assert r["error_code"] == 0, r
    written = read_values(ch.leader_replica("m", 0))
    leaders = set()

    def moving(md):
        p = _part_m(md)
        leaders.add(p["leader"])
        return p["adding"] and p

    ch.kill_broker(b)
    p = ch.wait_for(moving, 60, what="the heal of the lost broker's replica started")
    (x,) = p["adding"]
    assert p["removing"] == [b] and x not in (a, b, host), p
    still = ray.get(ch.controller().list_partition_reassignments.remote())
    assert [r["adding"] for r in still] == [[x]], still  # mid-copy when it is lost (the copy takes seconds)
    t0 = time.monotonic()
    ch.kill_broker(x)

    def healed(md):
        p = _part_m(md)
        leaders.add(p["leader"])
        ok = not p["adding"] and not p["removing"] and len(p["replicas"]) == len(p["isr"]) == 2
        return ok and not {b, x} & set(p["replicas"]) and p

    p = ch.wait_for(healed, 120, what="the partition healed around both lost brokers", interval_s=0.2)
    print(
        f"broker {x}, receiving broker {b}'s replica, lost mid-copy: healed onto {p['replicas']} "
        f"{time.monotonic() - t0:.1f} s later"
    )
    assert leaders == {a}, leaders  # the in-sync replica kept leading throughout
    assert read_values(ch.leader_replica("m", 0)) == written
    st = ray.get(ch.controller().partition_balancer_status.remote())
    assert st["unhealable_partitions"] == [] and st["moves_started"] >= 2, st


def _part_m(md):
    return next(t for t in md["topics"] if t["name"] == "m")["partitions"][0]


def _leader(md):
    t = next((t for t in md["topics"] if t["name"] == "m"), None)
    return t and t["partitions"][0]["leader"]
