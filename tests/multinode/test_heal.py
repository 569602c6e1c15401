"""Self-healing on real nodes (rafka.testkit): 4 broker nodes, RF 3, min.insync.replicas 2, an acks=all load from
confluent-kafka in a namespace of its own. A broker node is SIGKILLed; past replica.auto.heal.delay.ms the
controller's partition balancer moves its replicas to the live brokers through the reassignment protocol, and every
partition's RF is back with a full ISR, no ISR ever below min.insync.replicas; nothing acknowledged is lost, per-key
order holds, offsets are dense. The node comes back with its disk: the replicas it no longer hosts are deleted from
it; `rafka cluster balance --dry-run` shows a plan giving it replicas and starts nothing, `--execute` runs it until
the brokers are within the tolerance (join balancing is off here, so that the deletion is seen before anything is
given back), and still nothing is lost or duplicated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from actors.metadata.partition_balancer import tolerance_band
from rafka.testkit.deployment import deploy, driver, finish_watch
from rafka.testkit.kafka_workload import windows

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

BROKER_LABEL = "rafka.io/broker"
NAME, BROKERS, RF = "heal", 4, 3
HEAL_DELAY_MS = 8000  # replica.auto.heal.delay.ms (10 min by default)
CONFIG = {
    "listeners": "PLAINTEXT://:9092",
    "broker.session.timeout.ms": 6000,
    "broker.heartbeat.interval.ms": 1000,
    "replica.auto.heal.delay.ms": HEAL_DELAY_MS,
    "replica.balance.check.interval.ms": 1000,
    "replica.auto.balance.enable": "false",  # balanced by `rafka cluster balance --execute` below
}
MIN_ISR = {"min.insync.replicas": "2"}
# "loss": the load across the node loss and the heal; "back": the load across its return and the balancing;
# "bulk": data at rest, so that the heal moves megabytes (the per-GB figure)
TOPICS = [
    {"name": "loss", "partitions": 6, "rf": RF, "configs": MIN_ISR},
    {"name": "back", "partitions": 6, "rf": RF, "configs": MIN_ISR},
    {"name": "bulk", "partitions": 4, "rf": RF, "configs": MIN_ISR},
]

# argv[1]: {"victim", "until", "timeout", "epoch0"}: the controller's metadata and balancer status polled every
# 0.5 s until state ``until``; prints {"first": {state: wall-clock time first seen}, "min_isr": {partition: fewest
# in-sync replicas seen}, "metadata", "status", "timed_out"}. States: "fenced" (the victim not alive), "moving" (a
# reassignment in progress), "healed" (no replica on the victim, every partition RF replicas all in sync, nothing
# moving), "registered" (the victim alive under an epoch above epoch0), "balanced" (registered, every partition in
# sync, nothing moving, replicas and leaders per live broker within the balancer's tolerance band).
WATCH = """
import json, sys, time, ray, rafka
from actors.bootstrap import ServerHandle
from actors.metadata.partition_balancer import tolerance_band
a = json.loads(sys.argv[1])
rafka.connect(cluster="%s", timeout_s=30)
s = ServerHandle("%s", %d, "", None, None)
victim, until, rf = a["victim"], a["until"], %d
first, min_isr, md, status = {}, {}, None, None
deadline = time.monotonic() + a["timeout"]
print("watching", flush=True)
while True:
    try:
        ctl = s.controller(5)
        md = ray.get(ctl.metadata.remote(), timeout=5)
        status = ray.get(ctl.partition_balancer_status.remote(), timeout=5)
    except Exception:  # the controller moving (its node lost) or slow: poll again
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
        continue
    now = time.time()
    parts = [(t["name"], p) for t in md["topics"] for p in t["partitions"]]
    alive = {b["id"] for b in md["brokers"] if b["alive"]}
    me = next(b for b in md["brokers"] if b["id"] == victim)
    for n, p in parts:
        k = f"{n}-{p['partition']}"
        min_isr[k] = min(min_isr.get(k, 99), len(p["isr"]))
    moving = any(p["adding"] or p["removing"] for _, p in parts)
    in_sync = all(sorted(p["isr"]) == sorted(p["replicas"]) for _, p in parts)
    reps = {b: sum(b in p["replicas"] for _, p in parts) for b in alive}
    leads = {b: sum(p["leader"] == b for _, p in parts) for b in alive}
    rband = tolerance_band(sum(reps.values()), len(alive), 10)
    lband = tolerance_band(sum(leads.values()), len(alive), 10)
    registered = me["alive"] and me["epoch"] > a["epoch0"]
    seen = {
        "fenced": victim not in alive,
        "moving": moving,
        "healed": in_sync and not moving
        and all(victim not in p["replicas"] and len(p["replicas"]) == rf for _, p in parts),
        "registered": registered,
        "balanced": registered and in_sync and not moving
        and all(rband[0] <= n <= rband[1] for n in reps.values())
        and all(lband[0] <= n <= lband[1] for n in leads.values()),
    }
    for k, v in seen.items():
        if v and k not in first:
            first[k] = now
    if until in first or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(json.dumps({"first": first, "min_isr": min_isr, "metadata": md, "status": status,
                  "timed_out": until not in first}))
""" % (NAME, NAME, BROKERS, RF)


METADATA = """
import json, rafka
from actors.bootstrap import ServerHandle
rafka.connect(cluster="%s", timeout_s=30)
print(json.dumps(ServerHandle("%s", %d, "", None, None).metadata()))
""" % (NAME, NAME, BROKERS)
RAFKA = os.path.join(os.path.dirname(sys.executable), "rafka")  # the CLI, run on node 0 (RAY_ADDRESS is the head)


def _cli(c, *argv):
    out = c.run(0, [RAFKA, *argv, "--cluster", NAME, "--json"], timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def _watch(c, victim, until, epoch0, timeout):
    """The WATCH driver in the background, returned once it runs."""
    spec = json.dumps({"victim": victim, "until": until, "timeout": timeout, "epoch0": epoch0})
    proc = c.popen(0, [sys.executable, "-c", WATCH, spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "watching":
            return proc
    raise AssertionError(f"the watcher ended before it watched: {proc.stderr.read() if proc.stderr else ''}")


def _workload(c, argv, timeout=300):
    out = c.run(None, [sys.executable, "-m", "rafka.testkit.kafka_workload", *argv], timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


def _start_load(c, bootstrap, topic, hist, seconds, rate):
    argv = ["produce", bootstrap, topic, "--seconds", str(seconds), "--rate", str(rate), "--out", hist]
    return c.popen(
        None, [sys.executable, "-m", "rafka.testkit.kafka_workload", *argv], stdout=subprocess.PIPE, text=True
    )


def _check(c, bootstrap, topic, hist):
    verdict = _workload(c, ["check", bootstrap, topic, "--partitions", "6", "--history", hist])
    assert verdict["lost"] == verdict["moved"] == verdict["reordered"] == verdict["gaps"] == 0, verdict
    assert verdict["duplicated"] == 0, verdict
    return verdict


def _dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _partition_dirs(log_dir):
    """``{(topic, partition)}`` of the partition directories (``<topic>-<partition>``) in a broker's log dir, the
    internal topics' too."""
    out = set()
    for name in os.listdir(log_dir) if os.path.isdir(log_dir) else ():
        topic, _, p = name.rpartition("-")
        if topic and p.isdigit() and os.path.isdir(os.path.join(log_dir, name)):
            out.add((topic, int(p)))
    return out


def _hosted(md, broker):
    return {(t["name"], p["partition"]) for t in md["topics"] for p in t["partitions"] if broker in p["replicas"]}


def test_a_lost_node_is_healed_and_back_with_its_disk_its_stale_replicas_go_and_it_receives_load(
    node_cluster, tmp_path
):
    # a broker on every node, the head's too (one raylet fewer on 2 cores); the head (drivers, Ray's GCS) is never lost
    c = node_cluster(BROKERS, labels=[{BROKER_LABEL: "yes"} for _ in range(BROKERS)])
    bootstrap = deploy(c, NAME, BROKERS, CONFIG, TOPICS, data_dir=str(tmp_path / "d"))
    _workload(
        c,
        ["produce", bootstrap, "bulk", "--seconds", "10", "--rate", "400", "--value-bytes", "8000"]
        + ["--out", str(tmp_path / "bulk.json")],
    )
    md = driver(c, 0, METADATA)
    log_dirs = {b["id"]: b["log_dir"] for b in md["brokers"]}
    node_of = {b: next(i for i in range(BROKERS) if d.startswith(c.node(i).data_dir)) for b, d in log_dirs.items()}
    leaders = [p["leader"] for t in md["topics"] for p in t["partitions"] if node_of[p["leader"]] != 0]
    victim = max(set(leaders), key=leaders.count)  # off the head, leading the most partitions
    epoch0 = next(b["epoch"] for b in md["brokers"] if b["id"] == victim)
    before = _hosted(md, victim)
    before_replicas = {(t["name"], p["partition"]): p["replicas"] for t in md["topics"] for p in t["partitions"]}
    on_disk_before = _partition_dirs(log_dirs[victim])
    assert on_disk_before == before

    # 1. the node hosting the most leaders is lost under load: healed once replica.auto.heal.delay.ms has passed
    hist = str(tmp_path / "loss.json")
    watch = _watch(c, victim, "healed", epoch0, 400)
    load = _start_load(c, bootstrap, "loss", hist, 60, 200)
    time.sleep(8)
    fault_at = time.time()
    c.kill_node(node_of[victim])
    detected = c.wait_dead(node_of[victim])
    seen = finish_watch(watch, timeout=500)
    assert not seen["timed_out"], json.dumps(seen)[:4000]
    out, _ = load.communicate(timeout=300)
    assert load.returncode == 0, out
    first, md = seen["first"], seen["metadata"]
    moved = 0
    for t in md["topics"]:
        for p in t["partitions"]:
            for b in set(p["replicas"]) - set(before_replicas[(t["name"], p["partition"])]):
                moved += _dir_bytes(os.path.join(log_dirs[b], f"{t['name']}-{p['partition']}"))
    healed_s, copy_s = first["healed"] - fault_at, first["healed"] - first["moving"]
    print(
        f"broker {victim} (node {node_of[victim]}, {len(before)} replicas) lost: Ray marked the node dead after "
        f"{detected:.1f} s, fenced after {first['fenced'] - fault_at:.1f} s, heal started after "
        f"{first['moving'] - fault_at:.1f} s (replica.auto.heal.delay.ms {HEAL_DELAY_MS}), RF {RF} and full ISRs "
        f"back after {healed_s:.1f} s; {moved / 1e6:.1f} MB copied in {copy_s:.1f} s "
        f"({copy_s / max(moved / 1e9, 1e-9):.0f} s per GB of data moved); fewest in-sync replicas seen "
        f"{min(seen['min_isr'].values())}"
    )
    assert moved > 10e6, moved  # the bulk topic's replicas were copied, not only the small ones
    assert min(seen["min_isr"].values()) >= 2, seen["min_isr"]  # never below min.insync.replicas
    assert seen["status"]["unhealable_partitions"] == [] and seen["status"]["moves_started"] >= len(before)
    for t in md["topics"]:
        for p in t["partitions"]:
            assert len(set(p["replicas"])) == RF and victim not in p["replicas"], p
            assert p["leader"] in p["isr"], p
    win = windows(json.load(open(hist))["history"], fault_at)
    print(f"the load across the loss: writable again after {win['writable_s']}; delivery errors {win['errors']}")
    loss_verdict = _check(c, bootstrap, "loss", hist)

    # 2. the node back with its disk: its broker (started again by the supervisor) is told its whole partition set,
    # which is none of its old ones, and deletes them
    hist2 = str(tmp_path / "back.json")
    watch = _watch(c, victim, "registered", epoch0, 300)
    load = _start_load(c, bootstrap, "back", hist2, 90, 200)
    time.sleep(5)
    back_at = time.time()
    c.restart_node(node_of[victim])
    seen = finish_watch(watch, timeout=400)
    assert not seen["timed_out"], json.dumps(seen)[:4000]
    registered_s = seen["first"]["registered"] - back_at
    assert _hosted(seen["metadata"], victim) == set()
    deadline = time.monotonic() + 60
    while _partition_dirs(log_dirs[victim]):
        assert time.monotonic() < deadline, (
            f"stale replicas left on the returned broker: {_partition_dirs(log_dirs[victim])}"
        )
        time.sleep(0.5)
    print(
        f"broker {victim} back with its disk: registered after {registered_s:.1f} s; its {len(on_disk_before)} stale "
        f"replicas deleted after {time.time() - back_at:.1f} s"
    )

    # 3. rafka cluster balance: the dry run shows replicas going to the returned broker and starts nothing
    dry = _cli(c, "cluster", "balance", "--dry-run")
    assert not dry["executed"] and dry["moves"] and dry["lost_brokers"] == [], dry
    assert all(m["reason"] == "replicas" and victim in m["target"] for m in dry["moves"]), dry["moves"]
    assert dry["replicas_before"][str(victim)] == 0 < dry["replicas_per_broker"][str(victim)], dry
    assert not any(p["adding"] or p["removing"] for t in driver(c, 0, METADATA)["topics"] for p in t["partitions"])
    watch = _watch(c, victim, "balanced", epoch0, 400)
    run = _cli(c, "cluster", "balance", "--execute")
    assert run["executed"] and run["moves"], run
    seen = finish_watch(watch, timeout=500)
    assert not seen["timed_out"], json.dumps(seen)[:4000]
    out, _ = load.communicate(timeout=300)
    assert load.returncode == 0, out
    first, md = seen["first"], seen["metadata"]
    alive = sorted(b["id"] for b in md["brokers"] if b["alive"])
    parts = [p for t in md["topics"] for p in t["partitions"]]
    reps = {b: sum(b in p["replicas"] for p in parts) for b in alive}
    leads = {b: sum(p["leader"] == b for p in parts) for b in alive}
    sizes = {b: round(_dir_bytes(log_dirs[b]) / 1e6, 1) for b in alive}
    print(
        f"balance --execute: {len(run['moves'])} move(s) started ({run['deferred']} held back by the bound), "
        f"balanced after {first['balanced'] - back_at:.1f} s from the node's restart: replicas per broker {reps} (band "
        f"{tolerance_band(sum(reps.values()), len(alive), 10)}), leaders per broker {leads} (band "
        f"{tolerance_band(sum(leads.values()), len(alive), 10)}), MB per log dir {sizes}; fewest in-sync replicas "
        f"seen {min(seen['min_isr'].values())}"
    )
    assert alive == sorted(log_dirs) and reps[victim] > 0 and leads[victim] > 0
    assert min(seen["min_isr"].values()) >= 2, seen["min_isr"]
    assert _partition_dirs(log_dirs[victim]) == _hosted(md, victim)  # its disk holds what it hosts, no more
    win = windows(json.load(open(hist2))["history"], back_at)
    print(f"the load across the return: delivery errors {win['errors']}")
    _check(c, bootstrap, "back", hist2)
    again = _check(c, bootstrap, "loss", hist)  # the loss-phase records after the moves and the deletion
    assert again["records"] == loss_verdict["records"], (again, loss_verdict)
