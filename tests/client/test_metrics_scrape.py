"""The Prometheus endpoint (actors/metrics_exporter.py, docs/metrics.md) scraped over HTTP during a workload
on the package's shared 3-broker cluster, parsed with prometheus_client's own text parser: the figures move
and agree with the data (records produced, log end offsets, committed offsets and lag, the ISR shrink and
expansion after a follower replica's process is SIGKILLed)."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until

import rafka
from actors.channels.replica_lookup import replica_handle
from actors.metrics_exporter import CATALOG

pytestmark = pytest.mark.cluster


def scrape(url: str) -> dict:
    """``{sample name: {frozenset(labels.items()): value}}`` and the family names, from one scrape."""
    body = urllib.request.urlopen(url, timeout=60).read().decode()
    out: dict = {"__families__": set()}
    for fam in text_string_to_metric_families(body):
        out["__families__"].add(fam.name)
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def value(m: dict, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there is none)."""
    want = {k: str(v) for k, v in labels.items()}.items()
    return sum(v for ls, v in m.get(name, {}).items() if want <= ls)


def samples(m: dict, name: str, **labels) -> dict:
    want = {k: str(v) for k, v in labels.items()}.items()
    return {ls: v for ls, v in m.get(name, {}).items() if want <= ls}


def test_scrape_figures_agree_with_the_data(rafka_cluster, new_topic):
    url = rafka_cluster.metrics_url
    assert url and url.startswith("http://") and url.endswith("/metrics")
    assert rafka.connect(cluster=rafka_cluster.name).metrics_url == url  # what `rafka cluster info` shows
    topic = new_topic(2, 3)
    before = scrape(url)
    # every family of the catalog is exposed (HELP/TYPE even without samples): the dashboard relies on it
    assert {n for n in CATALOG} <= before["__families__"]
    produce_before = value(before, "kafka_network_requestmetrics_requests_total", request="Produce")

    n, size = 300, 200
    with rafka.Producer(rafka_cluster, acks="all", linger_ms=5) as p:
        futs = [p.send(topic, value=b"v" * size, key=b"k%d" % i) for i in range(n)]
        p.flush()
        mds = [f.get(timeout=60) for f in futs]
    per_part = {q: sum(1 for md in mds if md.partition == q) for q in range(2)}

    m = scrape(url)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > n * size
    assert value(m, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) >= 2
    assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    assert value(m, "kafka_network_requestmetrics_requests_total", request="Produce") > produce_before
    hist_count = value(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == hist_count
    assert hist_count == value(m, "kafka_network_requestmetrics_requests_total", request="Produce")
    for q in range(2):
        # every replica's log (3 brokers) ends at the records produced to the partition once the HW passed them
        ends = samples(m, "kafka_log_log_logendoffset", topic=topic, partition=q)
        assert sorted(ends.values()) == [per_part[q]] * 3, ends
        assert all(v > 0 for v in samples(m, "kafka_log_log_size", topic=topic, partition=q).values())
        assert set(samples(m, "kafka_log_log_numlogsegments", topic=topic, partition=q).values()) == {1}
        assert value(m, "kafka_cluster_partition_insyncreplicascount", topic=topic, partition=q) == 3
        assert value(m, "kafka_cluster_partition_underreplicated", topic=topic, partition=q) == 0
    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_controller_kafkacontroller_activebrokercount") == 3
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(m, "kafka_controller_kafkacontroller_epoch") >= 1
    assert value(m, "rafka_exporter_unreachable_actors") == 0

    # a consumer group reads it all and commits: current offsets = log ends, lag 0; more records -> lag
    group = f"g-{topic}"
    c = rafka.Consumer(rafka_cluster, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        got += sum(len(r) for r in c.poll(timeout_ms=500).values())
    assert got == n
    c.commit()
    m = scrape(url)
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > n * size
    assert value(m, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) >= 2
    assert value(m, "kafka_consumergroup_members", consumergroup=group) == 1
    assert value(m, "kafka_consumergroup_state", consumergroup=group, state="Stable") == 1
    for q in range(2):
        assert (
            value(m, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition=q)
            == (per_part[q])
        )
        assert value(m, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition=q) == 0
    with rafka.Producer(rafka_cluster, acks="all") as p:
        for _ in range(7):
            p.send(topic, value=b"late", partition=0)
        p.flush()
    m = scrape(url)
    assert value(m, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition=0) == 7
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n + 7
    c.close()


def test_follower_replica_killed_shows_under_replicated_then_isr_shrink_and_expand(rafka_cluster, new_topic):
    url = rafka_cluster.metrics_url
    topic = new_topic(1, 3)
    with rafka.Producer(rafka_cluster, acks="all") as p:
        for i in range(20):
            p.send(topic, value=b"%d" % i)
        p.flush()
    desc = rafka_cluster.server.describe(topic)["partitions"][0]
    leader = desc["leader"]
    follower = next(b for b in desc["replicas"] if b != leader)
    before = scrape(url)
    shrinks0 = value(before, "kafka_server_replicamanager_isrshrinks_total", broker=leader)
    expands0 = value(before, "kafka_server_replicamanager_isrexpands_total", broker=leader)
    h = replica_handle(rafka_cluster.name, topic, 0, follower)
    pid = ray.get(h.state.remote(), timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)  # the broker's supervisor reports it: the controller shrinks the ISR

    # The broker replaces it at once from its warm pool, so the window between shrink and expansion can be
    # shorter than a scrape. Each replacement is SIGKILLed too until a scrape has seen the window: a replica
    # that keeps dying is recreated after the supervisor's growing backoff (0.5 s, 1 s, 2 s, ...), which holds
    # the partition under-replicated longer each time.
    killed = {pid}

    def kill_replacement(timeout_s: float) -> int | None:
        try:
            h2 = replica_handle(rafka_cluster.name, topic, 0, follower, timeout_s=timeout_s)
            pid2 = ray.get(h2.state.remote(), timeout=timeout_s)["pid"]
        except (ValueError, ray.exceptions.RayError):
            return None
        if pid2 in killed:
            return None
        killed.add(pid2)
        try:
            os.kill(pid2, signal.SIGKILL)
        except ProcessLookupError:  # it died on its own meanwhile
            pass
        return pid2

    wait_until(lambda: kill_replacement(5), timeout=60, what="the replaced follower", interval=0.05)

    # the window between shrink and expansion is seen by a scrape: under-replicated 1, on the leader's broker
    # too, and the ISR one short. The partition's figure comes from the controller's metadata, the broker's from
    # the leader replica, which learns of the shrink one LeaderAndIsr later: a scrape can fall in between, so
    # the follower is kept down (each new incarnation killed) until one scrape has all three
    def window_seen():
        m = scrape(url)
        if (
            value(m, "kafka_cluster_partition_underreplicated", topic=topic, partition=0) == 1
            and value(m, "kafka_server_replicamanager_underreplicatedpartitions", broker=leader) >= 1
            and value(m, "kafka_cluster_partition_insyncreplicascount", topic=topic, partition=0) == 2
        ):
            return m
        kill_replacement(0.5)
        return None

    m = wait_until(window_seen, timeout=90, what="a scrape with the partition under-replicated, ISR 2", interval=0)
    assert value(m, "kafka_server_replicamanager_isrshrinks_total", broker=leader) > shrinks0

    # the follower is recreated, catches up and rejoins: the expansion is counted, the partition is whole again
    def whole_again():
        m = scrape(url)
        expanded = value(m, "kafka_server_replicamanager_isrexpands_total", broker=leader) > expands0
        whole = value(m, "kafka_cluster_partition_underreplicated", topic=topic, partition=0) == 0
        return m if expanded and whole else None

    m = wait_until(whole_again, timeout=120, what="the ISR expanded back", interval=0.0)
    assert value(m, "kafka_cluster_partition_insyncreplicascount", topic=topic, partition=0) == 3
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
