"""LocalCluster restarts from its data dir; connect() finds clusters by name or says clearly it can't."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import rafka
from rafka import TopicPartition
from rafka.errors import ClusterNotFoundError

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
