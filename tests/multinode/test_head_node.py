"""The head node (Ray's GCS) lost under an acks=all load from confluent-kafka in a namespace of its own, on real
nodes (rafka.testkit). With Ray's GCS fault tolerance (an external Redis in a namespace of its own): produce and
fetch go on over TCP while the GCS is down, topic creation waits for it, the head comes back and the same Ray
cluster goes on with nothing lost. Without it: the head's loss ends the Ray cluster, and `rafka cluster start
--address` on a new one, on the same disks, brings back every acknowledged record and every committed offset."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import time

import pytest

from rafka.testkit.deployment import deploy, watch
from rafka.testkit.kafka_workload import windows
from tests.multinode.test_node_loss import PARTITIONS, SESSION_TIMEOUT_MS, TOPIC, _deployed, _start_load, _wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # real nodes: minutes each on 2 cores

# a Kafka client in the client namespace: commit a group's offsets, read them, create a topic; one JSON line each
CLIENT = """
import json, sys, time
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
verb, bootstrap = sys.argv[1], sys.argv[2]
t0 = time.time()
if verb == "commit":  # consume what is there in a group and commit it; the committed offsets
    group, topic, parts = sys.argv[3], sys.argv[4], int(sys.argv[5])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    tps = [TopicPartition(topic, q) for q in range(parts)]
    ends = {q: c.get_watermark_offsets(tp, timeout=30)[1] for q, tp in enumerate(tps)}
    c.assign(tps)
    pos = {q: 0 for q in range(parts)}
    while any(pos[q] < ends[q] for q in pos) and time.time() - t0 < 120:
        for m in c.consume(500, 1.0):
            if m.error() is None:
                pos[m.partition()] = m.offset() + 1
    c.commit(offsets=[TopicPartition(topic, q, pos[q]) for q in pos], asynchronous=False)
    print(json.dumps({"committed": pos, "s": round(time.time() - t0, 2)}))
elif verb == "committed":
    group, topic, parts = sys.argv[3], sys.argv[4], int(sys.argv[5])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    got = c.committed([TopicPartition(topic, q) for q in range(parts)], timeout=30)
    print(json.dumps({"committed": {tp.partition: tp.offset for tp in got}}))
elif verb == "create":
    a = AdminClient({"bootstrap.servers": bootstrap})
    fut = a.create_topics([NewTopic(sys.argv[3], 1, 3)], operation_timeout=float(sys.argv[4]),
                          request_timeout=float(sys.argv[4]) + 5)[sys.argv[3]]
    try:
        fut.result()
        print(json.dumps({"created": True, "s": round(time.time() - t0, 2)}))
    except Exception as e:
        print(json.dumps({"created": False, "error": str(e), "s": round(time.time() - t0, 2)}))
"""


def _client(c, *args, timeout=180):
    out = c.run(None, [sys.executable, "-c", CLIENT, *map(str, args)], timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


# the brokers' config of test_node_loss's deployment, for deploying again on the same disks
DEPLOY_CONFIG = {
    "listeners": "PLAINTEXT://:9092",
    "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    "broker.heartbeat.interval.ms": 1000,
}


def _produce(c, bootstrap, topic, hist, partitions=PARTITIONS, seconds=8, rate=300):
    argv = ["produce", bootstrap, topic, "--seconds", str(seconds), "--rate", str(rate), "--out", hist]
    out = c.run(None, [sys.executable, "-m", "rafka.testkit.kafka_workload", *argv], timeout=300).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["acked"] > 0 and res["unflushed"] == 0, res
    return res


def _check(c, bootstrap, hist, topic=TOPIC, partitions=PARTITIONS, timeout=300):
    argv = ["check", bootstrap, topic, "--partitions", str(partitions), "--history", hist]
    out = c.run(None, [sys.executable, "-m", "rafka.testkit.kafka_workload", *argv], timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


def _ack_gap(history, start, end):
    """The longest wait between acknowledgements (any partition) within [start, end]: how long writes stalled."""
    acks = sorted(h[6] for h in history if not h[4] and start <= h[6] <= end)
    edges = [start, *acks, end]
    return max(b - a for a, b in zip(edges, edges[1:]))


def test_the_head_lost_under_load_with_gcs_fault_tolerance(node_cluster, tmp_path):
    # the nodes' raylets wait this long for the GCS to come back (Ray's default 60 s): a margin for these 2 cores
    c, bootstrap, st, _node_of_broker, _ = _deployed(
        node_cluster, tmp_path, gcs_ft=True, env={"RAY_gcs_rpc_server_reconnect_timeout_s": "120"}
    )
    epochs = {b["id"]: b["epoch"] for b in st["brokers"]}
    before = _client(c, "commit", bootstrap, "g-before", TOPIC, PARTITIONS)
    hist = str(tmp_path / "history.json")
    load = _start_load(c, bootstrap, hist, 60, 300)
    time.sleep(8)
    fault_at = time.time()
    c.kill_node(0)  # the head: its GCS, its raylet, the deploying driver's node (the brokers are elsewhere)

    # while the GCS is down: fetch everything back over TCP, commit a group's offsets, try to create a topic
    nothing = tmp_path / "none.json"  # the load's history is written when it ends: read the log alone
    nothing.write_text('{"history": []}')
    t0 = time.monotonic()
    during_read = _check(c, bootstrap, str(nothing))
    read_s = time.monotonic() - t0
    during_commit = _client(c, "commit", bootstrap, "g-during", TOPIC, PARTITIONS)
    during_create = _client(c, "create", bootstrap, "made-while-down", 10)
    time.sleep(max(0.0, 25 - (time.time() - fault_at)))
    down_s = time.time() - fault_at
    back_s = c.restart_node(0)
    recovered_at = time.time()
    print(
        f"\nhead down {down_s:.1f} s: fetched {during_read['records']} records in {read_s:.1f} s while down, committed "
        f"{during_commit['committed']} in {during_commit['s']} s; CreateTopics: {during_create}; "
        f"head back as a node in {back_s:.1f} s"
    )
    assert during_read["gaps"] == during_read["duplicated"] == 0 and during_read["records"] > 0, during_read
    assert sum(during_commit["committed"].values()) > sum(before["committed"].values()), during_commit

    # the same Ray cluster goes on: the brokers never restarted (same epochs), the ISRs whole, and the GCS
    # answers again: the topic is made, the supervisor is back (Ray restarted it off the lost head)
    st = _wait(
        c,
        lambda s: all(len(p["isr"]) == 3 for p in s["partitions"]) and "restarts" in s["supervisor"],
        120,
        "the cluster whole after the head's return",
    )
    assert {b["id"]: b["epoch"] for b in st["brokers"]} == epochs, st["brokers"]
    after_create = _client(c, "create", bootstrap, "made-after", 60)
    assert after_create["created"], after_create
    out, _ = load.communicate(timeout=300)
    assert load.returncode == 0, out
    with open(hist) as f:
        history = json.load(f)["history"]
    stall = _ack_gap(history, fault_at, recovered_at)
    win = windows(history, fault_at)
    print(
        f"longest stall of acks while the GCS was down: {stall:.2f} s; delivery errors {win['errors']}; "
        f"a topic created {after_create['s']} s after asking, once back"
    )
    verdict = _check(c, bootstrap, hist)
    assert verdict["lost"] == verdict["moved"] == verdict["reordered"] == verdict["gaps"] == 0, verdict
    assert verdict["duplicated"] == 0, verdict
    committed = _client(c, "committed", bootstrap, "g-during", TOPIC, PARTITIONS)["committed"]
    assert committed == during_commit["committed"], committed


def _cmd(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _raylets_and_workers(c, nodes) -> dict[int, list[str]]:
    """The raylets and worker processes (brokers, replicas, coordinators) still running on ``nodes`` (Ray's
    dashboard and runtime-env agents outlive their raylet a while: not counted)."""
    out = {}
    for i in nodes:
        cmds = [_cmd(p) for p in c.network.pids(f"n{i}")]
        alive = [x[:60] for x in cmds if "raylet/raylet" in x or (x.startswith("ray::") and "Agent" not in x)]
        if alive:
            out[i] = alive
    return out


def _metadata(c, name="nl"):
    return watch(c, name, 3, "now", timeout=60)["metadata"]


def _epochs(md):
    """Per partition of every topic, its leader epoch (a controller on an older image would bring older ones)."""
    return {(t["name"], p["partition"]): p["leader_epoch"] for t in md["topics"] for p in t["partitions"]}


def test_without_gcs_fault_tolerance_a_head_loss_ends_ray_and_a_new_start_on_the_same_disks_has_everything(
    node_cluster, tmp_path
):
    """The controller moves first (its node lost and back), so the nodes' metadata logs differ: the new controller
    after the restart takes the newest, whichever node it is elected on; every acknowledged record and committed
    offset is back, and no leader epoch went back."""
    # Ray's own default is 60 s of GCS silence before a node's raylet gives up (each node reads it from its own
    # environment: the head's --system-config does not reach the others' raylets); 15 s keeps the test short
    c, bootstrap, st, node_of_broker, _ = _deployed(
        node_cluster, tmp_path, env={"RAY_gcs_rpc_server_reconnect_timeout_s": "15"}
    )
    hists = {TOPIC: str(tmp_path / "h1.json"), "after": str(tmp_path / "h2.json")}
    _produce(c, bootstrap, TOPIC, hists[TOPIC])
    g1 = _client(c, "commit", bootstrap, "g1", TOPIC, PARTITIONS)["committed"]

    # the controller's node is lost and comes back: the controller runs elsewhere from then on
    md = _metadata(c)
    first_ctl_node = node_of_broker[md["controller_id"]]
    c.kill_node(first_ctl_node)
    c.wait_dead(first_ctl_node)
    c.restart_node(first_ctl_node)
    md = watch(c, "nl", 3, "isr_full", timeout=180)["metadata"]
    assert node_of_broker[md["controller_id"]] != first_ctl_node, md["controller_id"]
    # written by the second controller alone: a topic, its records, a group's offsets
    assert _client(c, "create", bootstrap, "after", 60)["created"]
    _produce(c, bootstrap, "after", hists["after"], partitions=1)
    g2 = _client(c, "commit", bootstrap, "g2", "after", 1)["committed"]
    before = _metadata(c)
    logs = {
        i: os.path.getsize(os.path.join(c.node(i).data_dir, "controller", "metadata.log"))
        if os.path.exists(os.path.join(c.node(i).data_dir, "controller", "metadata.log"))
        else 0
        for i in (1, 2, 3)
    }
    print(f"\nmetadata log bytes per node before the head loss: {logs} (first controller on n{first_ctl_node})")

    # the head lost: without GCS fault tolerance every other node's raylet ends itself, and its brokers with it
    lost_at = time.monotonic()
    c.kill_node(0)
    deadline = time.monotonic() + 120
    while left := _raylets_and_workers(c, (1, 2, 3)):
        assert time.monotonic() < deadline, left
        time.sleep(0.5)
    print(
        f"the Ray cluster ended {time.monotonic() - lost_at:.1f} s after its head was lost (raylets and workers "
        f"gone; left: {sorted(_cmd(p)[:40] for i in (1, 2, 3) for p in c.network.pids(f'n{i}'))})"
    )

    # a new Ray cluster on the same machines and disks, and rafka deployed on it again
    c.restart_node(0)
    for i in (1, 2, 3):
        c.restart_node(i)
    t0 = time.monotonic()
    bootstrap = deploy(c, "nl", 3, DEPLOY_CONFIG, data_dir=str(tmp_path / "d"))
    md = watch(c, "nl", 3, "isr_full", timeout=180)["metadata"]
    print(
        f"deployed again in {time.monotonic() - t0:.1f} s; controller on n{node_of_broker[md['controller_id']]}; "
        f"metadata version {before['version']} before, {md['version']} after"
    )
    # the new controller compared the nodes' logs, and took another node's when its own was not the newest
    ctl_node = node_of_broker[md["controller_id"]]
    with open(os.path.join(c.node(ctl_node).data_dir, "logs", "controller.log"), encoding="utf-8") as f:
        ctl_log = f.read().split("GCS KV empty (a new cluster, or a whole-cluster restart)")[-1]
    print(f"the new controller on n{ctl_node}: {ctl_log.splitlines()[0].strip()}")
    peers = ast.literal_eval(re.search(r"brokers (\{[^}]*\})", ctl_log.splitlines()[0]).group(1))
    assert set(peers) == {0, 1, 2} - {md["controller_id"]}, peers  # every other broker's node answered
    if logs[ctl_node] < max(logs.values()):
        assert "Taking the metadata log of broker" in ctl_log, ctl_log[:2000]
    assert {t["name"] for t in md["topics"]} >= {TOPIC, "after", "__consumer_offsets"}, md["topics"]
    assert md["version"] >= before["version"]
    regressed = {k: (v, _epochs(md).get(k)) for k, v in _epochs(before).items() if _epochs(md).get(k, -1) < v}
    assert not regressed, regressed
    for topic, parts in ((TOPIC, PARTITIONS), ("after", 1)):
        verdict = _check(c, bootstrap, hists[topic], topic=topic, partitions=parts)
        assert verdict["lost"] == verdict["moved"] == verdict["gaps"] == verdict["duplicated"] == 0, verdict
    assert _client(c, "committed", bootstrap, "g1", TOPIC, PARTITIONS)["committed"] == g1
    assert _client(c, "committed", bootstrap, "g2", "after", 1)["committed"] == g2
