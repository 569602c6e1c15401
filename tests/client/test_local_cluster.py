"""LocalCluster restarts from its data dir; connect() finds clusters by name or says clearly it can't."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import rafka
from protocol.errors import ClusterNotFoundError
from rafka import TopicPartition

pytestmark = pytest.mark.cluster


def test_restart_from_the_same_data_dir_keeps_topics_and_data(ray_cluster, tmp_path):
    name = "r" + uuid.uuid4().hex[:8]
    with rafka.LocalCluster(brokers=2, name=name, data_dir=tmp_path) as cluster:
        rafka.Admin(cluster).create_topic("kept", 2, 2)
        with rafka.Producer(cluster) as p:
            for i in range(100):
                p.send("kept", b"%d" % i, key=b"%d" % i)
    with rafka.LocalCluster(brokers=2, name=name, data_dir=tmp_path) as cluster:
        assert "kept" in rafka.Admin(cluster).list_topics()
        c = rafka.Consumer(cluster, auto_offset_reset="earliest")
        tps = [TopicPartition("kept", 0), TopicPartition("kept", 1)]
        c.assign(tps)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            for recs in c.poll(1000).values():
                got += recs
        assert sorted(int(r.value) for r in got) == list(range(100))
        ends = c.end_offsets(tps)
        with rafka.Producer(cluster) as p:
            md = p.send("kept", b"more", partition=0).get(30)
        assert md.offset == ends[tps[0]]  # offsets continue, never reused


def test_connect_by_name_and_clear_error_when_absent(rafka_cluster):
    handle = rafka.connect(cluster=rafka_cluster.name)
    assert handle.name == rafka_cluster.name
    assert rafka.Admin(handle).describe_cluster()["cluster"] == rafka_cluster.name
    t0 = time.monotonic()
    with pytest.raises(ClusterNotFoundError, match="no rafka cluster named 'nope'"):
        rafka.connect(cluster="nope", timeout_s=0.5)
    assert time.monotonic() - t0 < 5

    def refused(make) -> None:
        with pytest.raises(ConnectionError, match="'nope'"):  # ClusterNotFoundError is a ConnectionError
            make()

    # each client waits its 5 s for the cluster's controller before it gives up: both wait at once
    with ThreadPoolExecutor(2) as pool:
        for f in [
            pool.submit(refused, lambda: rafka.Producer(rafka.ClusterHandle("nope", None))),
            pool.submit(refused, lambda: rafka.Consumer("nope")),
        ]:
            f.result()


LEAN_START = """
import json, os, sys, tempfile
import ray
from ray._private import node
import rafka
from rafka.ray_session import SKIPPED

before = {n: node.Node.__dict__[n] for n in SKIPPED}
with tempfile.TemporaryDirectory() as d, rafka.LocalCluster(brokers=1, data_dir=d, lean_ray=sys.argv[1] == "lean") as c:
    kinds = sorted(ray._private.worker._global_node.all_processes)
    restored = all(node.Node.__dict__[n] is before[n] for n in SKIPPED)
    rafka.Admin(c).create_topic("t", 1, 1)
    with rafka.Producer(c) as p:
        p.send("t", b"v").get(60)
    with rafka.Consumer(c, auto_offset_reset="earliest") as k:
        k.assign([rafka.TopicPartition("t", 0)])
        got = []
        for _ in range(60):
            got += [r.value for rs in k.poll(timeout_ms=500).values() for r in rs]
            if got:
                break
print(json.dumps({"kinds": kinds, "restored": restored, "got": [g.decode() for g in got]}))
"""


@pytest.mark.parametrize("mode", ["lean", "full"])
def test_a_fresh_local_cluster_starts_ray_without_the_head_processes_it_does_not_use(mode):
    """In a process without Ray, LocalCluster starts Ray itself: lean (the default) without the dashboard's API
    server, the autoscaler monitor and the log monitor (rafka/ray_session.py), ``lean_ray=False`` with them; Ray's
    Node methods are restored after the start, and the cluster serves a produce and a consume either way."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    proc = subprocess.run(
        [sys.executable, "-c", LEAN_START, mode], capture_output=True, text=True, env=env, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    extras = {"dashboard", "monitor", "log_monitor"}
    if mode == "lean":
        assert set(out["kinds"]) == {"gcs_server", "raylet"}, out
    else:
        assert extras <= set(out["kinds"]), out
    assert out["restored"] and out["got"] == ["v"], out
