"""Controller, brokers and bootstrap on a real Ray cluster (faults injected with ray.kill / node removal)."""

from __future__ import annotations

import time

import pytest
import ray
from support import batch, clusters, part

from protocol.control_messages import LeaderAndIsrRequest, StopReplicaRequest
from protocol.messages import FetchRequest, ProduceRequest
from storage.records import decode_records

pytestmark = pytest.mark.cluster

FAST = {
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 10000,
    "replica.fetch.wait.max.ms": 100,
    "leader.imbalance.check.interval.seconds": 3600,
}


@pytest.fixture
def cluster(ray_cluster, cluster_name, tmp_path):
    with clusters(cluster_name, str(tmp_path), FAST) as start:
        yield start


def produce(ch, topic, p, *values, acks=-1):
    res = ray.get(ch.leader_replica(topic, p).produce.remote(ProduceRequest(batch(values), acks, 10000)))
    assert res["error_code"] == 0, res
    return res["base_offset"]


def read_all(replica) -> list[bytes]:
    res = ray.get(replica.fetch.remote(FetchRequest(0, 1 << 20)))
    assert res["error_code"] == 0, res
    return [r.value for r in decode_records(res["records"])]


def wait_part(ch, topic, p, pred, what, timeout_s=30):
    return ch.wait_for(
        lambda md: pred(
            next(x for x in next(t for t in md["topics"] if t["name"] == topic)["partitions"] if x["partition"] == p)
        ),
        timeout_s,
        what=what,
    )


def test_create_describe_spread_and_controller_failover(cluster):
    ch = cluster()
    print(f"cluster start {ch.timings['start_s']:.2f}s")
    t0 = time.monotonic()
    res = ch.create_topic("orders", partitions=3, rf=3)
    print(f"create 3x3 topic {time.monotonic() - t0:.2f}s")
    d = ch.describe("orders")
    assert d["topic_id"] == res["topic_id"] and len(d["partitions"]) == 3
    leaders = sorted(p["leader"] for p in d["partitions"])
    assert leaders == [0, 1, 2]  # round robin: one leader per broker
    for p in d["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2] and p["leader"] in p["isr"]
        st = ray.get(ch.leader_replica("orders", p["partition"]).state.remote())
        assert st["role"] == "leader" and st["leader_epoch"] == p["leader_epoch"]

    def describe_controller() -> dict:
        # ray.kill is asynchronous: the old controller may still answer the lookup's ping, then die before the
        # next call reaches it (ActorDiedError); look again until a live one answers
        while True:
            try:
                return ray.get(ch.controller().describe_controller.remote())
            except ray.exceptions.RayActorError:
                time.sleep(0.02)

    old = describe_controller()
    ray.kill(ch.controller(), no_restart=True)
    t0 = time.monotonic()
    new = describe_controller()
    while new["controller_epoch"] == old["controller_epoch"]:
        time.sleep(0.02)
        new = describe_controller()
    took = time.monotonic() - t0
    print(f"controller failover {took:.2f}s")
    assert new["controller_epoch"] == old["controller_epoch"] + 1 and took < 5
    # every broker learns the new epoch, then refuses the old one
    for i in range(3):
        deadline = time.monotonic() + 5
        while ray.get(ch.broker(i).incarnation.remote())["controller_epoch"] < new["controller_epoch"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        res = ray.get(ch.broker(i).leader_and_isr.remote(LeaderAndIsrRequest(old["controller_epoch"])))
        assert res["error_code"] == 11  # STALE_CONTROLLER_EPOCH
        stop = StopReplicaRequest(old["controller_epoch"], [("orders", 0)], delete_partitions=True)
        assert ray.get(ch.broker(i).stop_replica.remote(stop))["error_code"] == 11

    # the metadata survived the failover and the brokers are still registered, nothing moved
    def moved(parts):
        return [(p["replicas"], p["leader"], p["leader_epoch"]) for p in parts]

    assert moved(ch.describe("orders")["partitions"]) == moved(d["partitions"])
    md = ch.metadata()
    assert all(b["alive"] for b in md["brokers"])


def test_producer_ids_and_zombie_controller_fencing(cluster):
    ch = cluster(num_brokers=2)
    a = ray.get(ch.broker(0).init_producer_id.remote())
    b = ray.get(ch.broker(0).init_producer_id.remote())
    c = ray.get(ch.broker(1).init_producer_id.remote())
    assert (a["producer_id"], b["producer_id"]) == (a["producer_id"], a["producer_id"] + 1)
    assert abs(c["producer_id"] - a["producer_id"]) == 1000  # another broker, another block
    ray.kill(ch.controller(), no_restart=True)
    time.sleep(0.2)
    first, count = ray.get(ch.controller().allocate_producer_ids.remote(0))
    assert (first, count) == (2000, 1000)
    # bad input gets an error, never a dead controller
    with pytest.raises(Exception) as e:
        ray.get(ch.controller().allocate_producer_ids.remote(42))
    assert "BROKER_ID_NOT_REGISTERED" in str(e.value)
    assert ray.get(ch.controller().ping.remote()) == 2

    # fencing: another controller claims epoch 3 in GCS KV and reaches broker 0 first; the controller
    # of epoch 2 learns it is stale (its long-poll on broker 0 answers STALE_CONTROLLER_EPOCH), resigns
    # and leaves, and the brokers elect a controller of epoch 4
    from actors.metadata.store import ClusterKV

    rival = ClusterKV(ch.cluster).claim_controller_epoch({"host_broker_id": -1})
    assert rival == 3
    assert ray.get(ch.broker(0).update_metadata.remote(rival, 0))["error_code"] == 0
    assert ray.get(ch.broker(0).update_metadata.remote(2, 0))["error_code"] == 11
    deadline = time.monotonic() + 10
    while True:
        try:
            if ray.get(ch.controller().ping.remote(), timeout=5) == 4:
                break
        except ray.exceptions.RayActorError:
            pass
        assert time.monotonic() < deadline, "no controller of epoch 4"
        time.sleep(0.05)
    ch.wait_for(
        lambda md: md["controller_epoch"] == 4 and all(b["alive"] for b in md["brokers"]),
        10,
        what="brokers kept by the new controller",
    )
    first, _ = ray.get(ch.controller().allocate_producer_ids.remote(1))
    assert first == 3000


def test_topic_admin_delete_add_partitions_configs(cluster, tmp_path):
    ch = cluster()
    ctl = ch.controller()
    bad = ray.get(
        ctl.create_topics.remote(
            [
                {"name": "bad name", "num_partitions": 1, "replication_factor": 1},
                {"name": "x", "num_partitions": 0, "replication_factor": 1},
                {"name": "y", "num_partitions": 1, "replication_factor": 4},
                {"name": "z", "num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "soon"}},
            ]
        )
    )
    assert [r["error_code"] for r in bad] == [17, 37, 38, 40]
    ch.create_topic("t", partitions=2, rf=2, configs={"retention.ms": 60000})
    assert (
        ray.get(ctl.create_topics.remote([{"name": "t", "num_partitions": 1, "replication_factor": 1}]))[0][
            "error_code"
        ]
        == 36
    )

    # add partitions: leaders running for the new ones too
    res = ray.get(ctl.create_partitions.remote("t", 3))
    assert res["error_code"] == 0
    d = ch.describe("t")
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    assert ray.get(ch.leader_replica("t", 2).state.remote())["role"] == "leader"
    assert ray.get(ctl.create_partitions.remote("t", 2))["error_code"] == 37

    # alter configs reaches the running replicas
    assert ray.get(ctl.alter_configs.remote("t", {"max.message.bytes": 200}, ["retention.ms"]))["error_code"] == 0
    assert ray.get(ctl.alter_configs.remote("t", {"max.message.bytes": "big"}))["error_code"] == 40
    desc = ray.get(ctl.describe_configs.remote("t"))
    assert desc["overrides"] == {"max.message.bytes": "200"} and desc["configs"]["retention.ms"] == "604800000"
    leader = ch.leader_replica("t", 0)
    deadline = time.monotonic() + 10
    while True:
        res = ray.get(leader.produce.remote(ProduceRequest(batch([b"x" * 500]), 1, 5000)))
        if res["error_code"] == 10 or time.monotonic() > deadline:  # MESSAGE_TOO_LARGE
            break
        time.sleep(0.05)
    assert res["error_code"] == 10

    # delete: every replica's log leaves the disk
    dirs = [tmp_path / f"broker-{r}" / f"t-{p['partition']}" for p in d["partitions"] for r in p["replicas"]]
    assert dirs and all(x.is_dir() for x in dirs)
    assert ray.get(ctl.delete_topics.remote(["t", "nope"]))[1]["error_code"] == 3
    assert not any(x.exists() for x in dirs)
    assert ch.describe("t")["error_code"] == 3
    assert all(not ray.get(ch.broker(i).hosted_partitions.remote()) for i in range(3))
    # a re-created topic of the same name gets a new id and empty logs
    ch.create_topic("t", partitions=1, rf=1)
    assert read_all(ch.leader_replica("t", 0)) == []


@pytest.mark.slow
def test_broker_loss_return_and_preferred_election(cluster):
    ch = cluster()
    ch.create_topic("p", partitions=3, rf=3, configs={"min.insync.replicas": 2})
    for i in range(3):
        produce(ch, "p", i, b"before-%d" % i)
    # settled: preferred leaders, full ISRs (a loaded machine may have fenced someone during the start)
    ch.wait_for(lambda md: all(len(p["isr"]) == 3 for p in md["topics"][0]["partitions"]), 60, what="full ISRs")
    ray.get(ch.controller().elect_leaders.remote(None, 0))
    ch.wait_for(
        lambda md: all(p["leader"] == p["replicas"][0] for p in md["topics"][0]["partitions"]),
        10,
        what="preferred leaders",
    )
    before = {p["partition"]: p for p in ch.describe("p")["partitions"]}
    # the hardest case: the broker that hosts the controller dies (the controller dies with it)
    host = ray.get(ch.controller().describe_controller.remote())["host_broker_id"]
    victim = host
    led = [p for p, s in before.items() if s["leader"] == victim]
    assert led
    t0 = time.monotonic()
    ch.kill_broker(victim)
    # (the dying controller may itself fence the victim in the ~50 ms before it follows its host)
    md = ch.wait_for(
        lambda md: (
            md["controller_epoch"] == 2 and not next(b for b in md["brokers"] if b["id"] == victim)["alive"] and md
        ),
        10,
        what="new controller, broker fenced",
    )
    print(f"broker loss detected in {time.monotonic() - t0:.2f}s (controller host {host}, victim {victim})")
    for p in md["topics"][0]["partitions"]:
        old = before[p["partition"]]
        assert victim not in p["isr"] and p["leader"] in old["isr"] and p["leader"] != victim
        assert p["leader_epoch"] == old["leader_epoch"] + 1
        assert p["partition_epoch"] > old["partition_epoch"]
        assert p["offline_replicas"] == [victim]
    q = led[0]
    wait_part(
        ch,
        "p",
        q,
        lambda p: ray.get(ch.leader_replica("p", q).state.remote())["role"] == "leader",
        "new leader running",
    )
    # a new leader's HW catches up only once its followers fetch again: wait for it, then compare
    wait_part(
        ch,
        "p",
        q,
        lambda p: read_all(ch.leader_replica("p", q)) == [b"before-%d" % q],
        "the new leader serves the acknowledged record",
    )
    assert read_all(ch.leader_replica("p", q)) == [b"before-%d" % q]
    produce(ch, "p", q, b"after")

    # the broker returns: follower of the new leader, catches up, re-enters the ISR
    ch.restart_broker(victim)
    for i in range(3):
        wait_part(ch, "p", i, lambda p: victim in p["isr"], f"broker {victim} back in the ISR of p-{i}")
    st = ray.get(ch.replica("p", q, victim).state.remote())
    assert st["role"] == "follower" and st["log_end_offset"] == 2

    # preferred leader election moves leadership back to the first replica
    moving = {p["partition"] for p in ch.describe("p")["partitions"] if p["leader"] != p["replicas"][0]}
    assert q in moving
    res = ray.get(ch.controller().elect_leaders.remote(None, 0))
    codes = {r["partition"]: r["error_code"] for r in res}
    assert codes == {i: 0 if i in moving else 84 for i in range(3)}  # 84: ELECTION_NOT_NEEDED
    d = ch.describe("p")
    assert all(p["leader"] == p["replicas"][0] for p in d["partitions"])
    assert part(ch, "p", q)["leader"] == victim
    wait_part(
        ch,
        "p",
        q,
        lambda p: ray.get(ch.leader_replica("p", q).state.remote())["role"] == "leader",
        "preferred leader running",
    )
    assert read_all(ch.leader_replica("p", q)) == [b"before-%d" % q, b"after"]


@pytest.mark.slow
def test_hung_broker_session_timeout_and_auto_rebalance(cluster):
    ch = cluster(config={"broker.session.timeout.ms": 2000, "leader.imbalance.check.interval.seconds": 1})
    ch.create_topic("h", partitions=3, rf=3)
    # settled: preferred leader, full ISR (a loaded machine may have fenced someone during the start)
    before = wait_part(
        ch, "h", 0, lambda p: p["leader"] == p["replicas"][0] and len(p["isr"]) == 3 and p, "partition settled", 60
    )
    hung = before["leader"]
    epoch = ray.get(ch.broker(hung).incarnation.remote())["broker_epoch"]
    ray.get(ch.broker(hung).suspend_heartbeats.remote(4000))
    t0 = time.monotonic()
    p = wait_part(ch, "h", 0, lambda p: p["leader"] != hung and p, "leadership moved off the hung broker", 10)
    print(f"hung broker fenced after {time.monotonic() - t0:.2f}s")
    assert p["leader_epoch"] > before["leader_epoch"] and p["leader"] in before["isr"]
    # it wakes up, learns it was fenced (STALE_BROKER_EPOCH), registers again with a new epoch ...
    md = ch.wait_for(
        lambda md: next(b for b in md["brokers"] if b["id"] == hung)["alive"] and md, 15, what="re-registered"
    )
    registered = next(b for b in md["brokers"] if b["id"] == hung)["epoch"]
    assert registered > epoch
    # the controller commits the registration before the broker reads its answer: poll the broker's own view
    deadline = time.monotonic() + 10
    while ray.get(ch.broker(hung).incarnation.remote())["broker_epoch"] != registered:
        assert time.monotonic() < deadline, "the broker never took its new broker epoch"
        time.sleep(0.05)
    # ... re-enters the ISR, and the periodic imbalance check gives it its preferred leadership back
    p = wait_part(ch, "h", 0, lambda p: p["leader"] == hung and p, "auto leader rebalance", 30)
    assert hung in p["isr"] and p["replicas"][0] == hung


def test_unclean_election_off_then_on(cluster):
    ch = cluster()
    ctl = ch.controller()
    res = ray.get(ctl.create_topics.remote([{"name": "u", "replica_assignment": [[0, 1]]}]))[0]
    assert res["error_code"] == 0
    produce(ch, "u", 0, b"a")
    ch.kill_broker(1)
    wait_part(ch, "u", 0, lambda p: p["isr"] == [0], "ISR shrunk to [0]")
    produce(ch, "u", 0, b"b")  # only broker 0 has it
    ch.kill_broker(0)
    wait_part(ch, "u", 0, lambda p: p["leader"] == -1 and p["isr"] == [0], "partition offline")
    ch.restart_broker(1)
    ch.wait_for(lambda md: next(b for b in md["brokers"] if b["id"] == 1)["alive"], 10, what="broker 1 back")
    time.sleep(1.0)
    p = part(ch, "u")
    assert (p["leader"], p["isr"]) == (-1, [0])  # unclean election off: stays offline
    assert ray.get(ch.controller().elect_leaders.remote([("u", 0)], 0))[0]["error_code"] == 80
    # turning unclean election on for the topic elects the live, out-of-sync replica (losing "b")
    assert (
        ray.get(ch.controller().alter_configs.remote("u", {"unclean.leader.election.enable": True}))["error_code"] == 0
    )
    p = wait_part(ch, "u", 0, lambda p: p["leader"] == 1 and p, "unclean leader")
    assert p["isr"] == [1]
    wait_part(
        ch,
        "u",
        0,
        lambda p: ray.get(ch.leader_replica("u", 0).state.remote())["role"] == "leader",
        "unclean leader running",
    )
    assert read_all(ch.leader_replica("u", 0)) == [b"a"]


def test_reassignment(cluster, tmp_path):
    ch = cluster()
    ctl = ch.controller()
    assert ray.get(ctl.create_topics.remote([{"name": "r", "replica_assignment": [[0, 1]]}]))[0]["error_code"] == 0
    produce(ch, "r", 0, b"one", b"two")
    res = ray.get(
        ctl.alter_partition_reassignments.remote(
            [{"topic": "r", "partition": 0, "replicas": [2, 1]}, {"topic": "r", "partition": 5, "replicas": [2]}]
        )
    )
    assert [r["error_code"] for r in res] == [0, 3]
    p = wait_part(ch, "r", 0, lambda p: not p["adding"] and not p["removing"] and p, "reassignment done")
    assert p["replicas"] == [2, 1] and sorted(p["isr"]) == [1, 2] and p["leader"] in (1, 2)
    assert ray.get(ctl.list_partition_reassignments.remote()) == []
    deadline = time.monotonic() + 10
    while (tmp_path / "broker-0" / "r-0").exists():
        assert time.monotonic() < deadline, "the removed replica's log stays on disk"
        time.sleep(0.05)
    assert ray.get(ch.broker(0).hosted_partitions.remote()) == []
    res = ray.get(ctl.elect_leaders.remote([("r", 0)], 0))[0]
    assert res["error_code"] in (0, 84)
    wait_part(ch, "r", 0, lambda p: p["leader"] == 2, "leader on the preferred replica 2")
    wait_part(
        ch, "r", 0, lambda p: ray.get(ch.leader_replica("r", 0).state.remote())["role"] == "leader", "leader running"
    )
    assert read_all(ch.leader_replica("r", 0)) == [b"one", b"two"]


@pytest.mark.slow
def test_whole_cluster_restart_keeps_topics_and_data(cluster, cluster_name, tmp_path):
    ch = cluster()
    tid = ch.create_topic("keep", partitions=2, rf=2)["topic_id"]
    produce(ch, "keep", 0, b"x", b"y")
    produce(ch, "keep", 1, b"z")
    ch.shutdown()  # GCS KV namespace cleared: the controller's metadata log is all that is left
    t0 = time.monotonic()
    ch2 = cluster()
    for p in range(2):
        wait_part(ch2, "keep", p, lambda s: s["leader"] >= 0 and len(s["isr"]) == 2, f"keep-{p} fully back")
    print(f"restart with 2x2 replicas {time.monotonic() - t0:.2f}s")
    assert ch2.describe("keep")["topic_id"] == tid
    assert read_all(ch2.leader_replica("keep", 0)) == [b"x", b"y"]
    assert read_all(ch2.leader_replica("keep", 1)) == [b"z"]


@pytest.mark.slow
def test_broker_on_removed_node_is_detected(ray_cluster, cluster):
    node = ray_cluster.add_node(num_cpus=0)
    ray_cluster.wait_for_nodes()
    head = ray.get_runtime_context().get_node_id()
    ch = cluster(num_brokers=3, node_ids=[head, head, node.node_id])
    assert ray.get(ch.broker(2).incarnation.remote())["node_id"] == node.node_id
    ch.create_topic("n", partitions=1, rf=3)
    t0 = time.monotonic()
    ray_cluster.remove_node(node)
    ch.wait_for(lambda md: not next(b for b in md["brokers"] if b["id"] == 2)["alive"], 30, what="broker 2 fenced")
    print(f"node loss detected in {time.monotonic() - t0:.2f}s")
    p = part(ch, "n")
    assert 2 not in p["isr"] and p["leader"] in (0, 1)


def test_commits_the_previous_controller_did_not_publish_are_found_and_described(ray_cluster, cluster_name, tmp_path):
    """A controller whose host broker's process dies fences that broker: its commit reaches the metadata log
    (write-ahead, fsync'd) and the process is killed before the lines are logged and KV is written. The next
    controller loads the newer log, and load_image hands back exactly the records past KV's version, with the
    image they apply to, so their lines are written after all. Real GCS KV and a real log file."""
    import random as _random

    from actors.metadata import controller_events
    from actors.metadata import controller_requests as cr
    from actors.metadata.controller_config import ControllerConfig
    from actors.metadata.controller_logic import ControllerLogic
    from actors.metadata.image import MetadataImage
    from actors.metadata.store import ClusterKV, MetadataLog, load_image

    kv = ClusterKV(cluster_name + "-unpub")
    kv.clear()
    logic = ControllerLogic(MetadataImage(), ControllerConfig(), _random.Random(3))
    mlog = MetadataLog(str(tmp_path / "controller" / "metadata.log"))

    def commit(records, publish=True):
        mlog.append(records)
        for r in records:
            logic.image.replay(r)
        if publish:
            kv.write_all(logic.image)

    for b in (0, 1):
        commit(logic.register_broker(b, {"rack": None, "log_dir": f"/d/{b}"})[0])
    recs, res = logic.create_topics([{"name": "clicks", "num_partitions": 2, "replication_factor": 2}])
    commit(recs)
    published = logic.image.version
    led = [p for p, s in logic.image.topics["clicks"].partitions.items() if s.leader == 0]
    commit(logic.fence_broker(0), publish=False)  # the kill lands between the log append and KV
    mlog.close()

    image, base, tail = load_image(kv, MetadataLog(mlog.path))
    assert image.version == logic.image.version > published
    assert base is not None and base.version == published and base.brokers[0].alive
    assert [r["type"] for r in tail][0] == "FenceBroker" and len(tail) == image.version - published
    lines = [line for _, line in controller_events.describe(tail, cr.prior_state(base, tail))]
    assert "Fenced broker 0 (broker epoch 0)" in lines[0]
    for p in led:
        assert any(f"Elected leader 1 for partition clicks-{p} (was 0)" in x for x in lines), lines
        assert any(f"Shrunk ISR of clicks-{p} from" in x for x in lines), lines
    assert kv.load_image().version == image.version  # KV caught up with the log
    # the next start finds nothing unpublished: KV and the (rewritten) log agree
    again, base2, tail2 = load_image(kv, MetadataLog(mlog.path))
    assert again.version == image.version and base2 is None and tail2 == []
    kv.clear()
