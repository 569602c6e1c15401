"""The Kafka-style server logs (actors/server/server_log.py) of a real 2-broker cluster: the broker hosting the
controller and leading a partition is SIGKILLed; the files under ``<data_dir>/logs`` then hold the controller
failover, the fencing, the leader election and the ISR shrink, and, after the broker restarts, its replica
starting as follower and the leader expanding the ISR again; `rafka cluster health`'s report says
under-replicated (exit 4), then healthy. The files outlive the cluster's shutdown. On a 1-broker cluster: a
topic with a tiny internal.segment.bytes (segment.bytes is at least 1 MiB, KIP-1030) and retention.ms leaves its segment rolls and retention deletes in the broker's
file, and a consumer group's join leaves its rebalance lines there."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import ray
from support import SMALL_INTERNAL_TOPICS, clusters, part, wait_until

import rafka
from actors.server import server_log
from rafka.cli.health import health_report
from rafka.structs import TopicPartition

pytestmark = pytest.mark.cluster

LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (INFO|WARNING|ERROR) \[[^\]]+\] .+ \([\w.]+\)$")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _has(path: str, *needles: str):
    """The file's text when every needle is in it (else None, for wait_until)."""
    try:
        text = _read(path)
    except FileNotFoundError:
        return None
    return text if all(n in text for n in needles) else None


@pytest.mark.slow
def test_leader_change_and_controller_failover_are_in_the_logs_and_survive_shutdown(
    ray_cluster, cluster_name, tmp_path
):
    data_dir = str(tmp_path)
    with clusters(cluster_name, data_dir) as start:
        ch = start(num_brokers=2, config={**SMALL_INTERNAL_TOPICS, "replica.lag.time.max.ms": 3000})
        ch.create_topic("clicks", 2, 2)
        host = ray.get(ch.controller().describe_controller.remote())["host_broker_id"]
        other = 1 - host
        led = next(p for p in (0, 1) if part(ch, "clicks", p)["leader"] == host)
        tp = f"clicks-{led}"
        ctl_log, host_log = server_log.controller_log(data_dir), server_log.broker_log(data_dir, host)
        other_log = server_log.broker_log(data_dir, other)
        wait_until(lambda: _has(ctl_log, "Created topic clicks", f"Created partition {tp}"), 10, "topic lines")
        wait_until(lambda: _has(host_log, f"[Partition {tp} broker={host}] Leader {tp} starts"), 10, "leader line")
        wait_until(lambda: _has(other_log, f"[Partition {tp} broker={other}] Follower {tp} starts"), 10, "follower")

        pid = ray.get(ch.broker(host).incarnation.remote())["pid"]
        os.kill(pid, signal.SIGKILL)  # the broker's process, with its replicas and the controller
        wait_until(lambda: part(ch, "clicks", led)["leader"] == other, 60, "the survivor leads")
        needles = (
            f"Becoming the active controller of cluster {cluster_name} at epoch",
            f"Fenced broker {host}",
            f"Elected leader {other} for partition {tp} (was {host})",
            f"Shrunk ISR of {tp} from",
        )
        try:
            text = wait_until(lambda: _has(ctl_log, *needles), 30, "failover lines in controller.log")
        except AssertionError:
            body = _read(ctl_log)
            missing = [n for n in needles if n not in body]
            raise AssertionError(f"controller.log lacks {missing} after 30 s:\n{body[-4000:]}") from None
        epochs = re.findall(r"Becoming the active controller of cluster \S+ at epoch (\d+)", text)
        assert len(epochs) >= 2 and int(epochs[-1]) > int(epochs[0]), epochs
        wait_until(lambda: _has(other_log, f"[Partition {tp} broker={other}] Leader {tp} starts"), 10, "new leader")
        admin = rafka.Admin(cluster_name)
        report = health_report(admin)  # what `rafka cluster health` prints
        assert report["status"] == "under-replicated" and report["exit_code"] == 4, report
        assert report["brokers_dead"] == [host] and len(report["unhealthy"]) == 2

        ch.restart_broker(host)
        wait_until(lambda: sorted(part(ch, "clicks", led)["isr"]) == [0, 1], 60, "the restarted broker rejoins")
        wait_until(lambda: _has(other_log, f"Expanding ISR from [{other}] to"), 20, "ISR expand on the leader")
        wait_until(lambda: _has(ctl_log, f"Expanded ISR of {tp} from [{other}] to"), 20, "ISR expand in controller.log")
        wait_until(lambda: _has(host_log, "started (broker epoch"), 20, "broker restart line")
        wait_until(lambda: health_report(admin)["status"] == "healthy", 30, "cluster health back to healthy")
        admin.close()
    # every cluster started above is shut down now: its processes are gone, the files stay
    files = server_log.log_files(data_dir)
    assert [os.path.basename(f) for f in files] == ["controller.log", "broker-0.log", "broker-1.log"]
    for f in files:
        lines = _read(f).splitlines()
        assert lines, f
        bad = [x for x in lines if x.startswith("[") and not LINE.match(x)]  # (a traceback's lines follow its line)
        assert not bad, f"{f}: lines not in Kafka's shape: {bad[:3]}"
    assert "shutting down" in _read(other_log)


def test_segment_roll_and_delete_and_group_rebalance_are_in_the_broker_log(ray_cluster, cluster_name, tmp_path):
    data_dir = str(tmp_path)
    config = {
        **SMALL_INTERNAL_TOPICS,
        "offsets.topic.replication.factor": 1,
        "log.retention.check.interval.ms": 200,  # retention runs every 200 ms instead of 5 min
        "group.initial.rebalance.delay.ms": 100,
    }
    with clusters(cluster_name, data_dir) as start:
        start(num_brokers=1, config=config)
        log0 = server_log.broker_log(data_dir, 0)
        admin = rafka.Admin(cluster_name)
        # internal.segment.bytes 200: every ~3 records of 60 bytes roll a segment; retention.ms 1000 deletes them
        admin.create_topic("segs", 1, 1, {"internal.segment.bytes": "200", "retention.ms": "1000"})
        with rafka.Producer(cluster_name, acks="all", linger_ms=0) as producer:
            for _ in range(12):
                producer.send("segs", b"x" * 60, partition=0).get(timeout=30)
        ctx = "[Partition segs-0 broker=0] "
        text = wait_until(lambda: _has(log0, ctx + "Rolled new log segment at offset"), 20, "segment roll line")
        rolls = [int(x) for x in re.findall(r"segs-0 broker=0\] Rolled new log segment at offset (\d+)", text)]
        assert len(rolls) >= 3 and rolls == sorted(rolls), rolls
        text = wait_until(
            lambda: _has(
                log0,
                ctx + "Deleting segments of ",
                "due to retention time 1000ms breach: LogSegment(baseOffset=0, size=",
                ctx + "Incremented log start offset to ",  # written after the segment files are gone
            ),
            30,
            "retention delete lines",
        )
        assert re.search(r"segs-0 broker=0\] Incremented log start offset to \d+ due to segment deletion", text)

        consumer = rafka.Consumer(cluster_name, group_id="g-logs", auto_offset_reset="earliest")
        consumer.subscribe(["segs"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert consumer.assignment() == {TopicPartition("segs", 0)}
        text = wait_until(
            lambda: _has(
                log0,
                "Preparing to rebalance group g-logs in state PreparingRebalance with old generation 0",
                "Stabilized group g-logs generation 1 with 1 member(s)",
            ),
            20,
            "group rebalance lines",
        )
        assert re.search(r"\[GroupCoordinator id=0\] Stabilized group g-logs generation 1 ", text), text[-2000:]
        consumer.close()
        wait_until(  # the member left: a rebalance of generation 1 that ends with nobody
            lambda: _has(
                log0,
                "Preparing to rebalance group g-logs in state PreparingRebalance with old generation 1",
                "Group g-logs with generation 2 is now empty",
            ),
            20,
            "the leave's rebalance lines",
        )
        admin.close()
    lines = _read(log0).splitlines()
    bad = [x for x in lines if x.startswith("[") and not LINE.match(x)]
    assert not bad, bad[:3]
