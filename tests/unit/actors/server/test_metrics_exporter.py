"""The metrics' pure parts without Ray: the per-request counters (actors/server/metrics.py), the exporter's rendering
of actor answers into Kafka-named families (actors/metrics_exporter.py) read back with prometheus_client's
text parser, the catalog against docs/metrics.md, and the Grafana dashboard against the catalog."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from support import batch

from actors.metadata.partition_change import PartitionRegistration
from actors.metrics_exporter import CATALOG, ClusterCollector, _Families, parse_listener, sample_names
from actors.server.metrics import LATENCY_BUCKETS_MS, ControllerStats, LatencyHistogram, ReplicaStats, records_in

DOCS = Path(__file__).resolve().parents[4] / "docs"


def render(fam: _Families) -> dict:
    """``{sample name: {frozenset(labels): value}}`` through a real exposition and parse."""

    class Fixed(Collector):
        def collect(self):
            yield from fam.f.values()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())
    out: dict = {}
    for f in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in f.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def get(m: dict, name: str, **labels) -> float:
    want = {k: str(v) for k, v in labels.items()}.items()
    return sum(v for ls, v in m.get(name, {}).items() if want <= ls)


def test_records_in_reads_each_batch_header_once():
    b = batch([b"a"] * 7) + batch([b"b"] * 5) + batch([b"c"])
    assert records_in(b) == 13
    assert records_in(memoryview(b)) == 13
    assert records_in(b[:30]) == 0  # a torn header counts nothing
    assert records_in(b + b"\0" * 10) == 13


def test_latency_histogram_buckets():
    h = LatencyHistogram()
    for ms in (0.1, 0.5, 0.7, 30, 99999):
        h.observe(ms)
    snap = h.snapshot()
    assert snap["count"] == 5 and snap["sum"] == pytest.approx(0.1 + 0.5 + 0.7 + 30 + 99999)
    assert snap["buckets"][0] == 2  # <= 0.5 ms (Prometheus buckets are upper-inclusive)
    assert snap["buckets"][1] == 1  # <= 1 ms
    assert snap["buckets"][LATENCY_BUCKETS_MS.index(50)] == 1
    assert snap["buckets"][-1] == 1  # +Inf


def test_replica_stats_count_appends_not_duplicates_or_errors():
    s = ReplicaStats()
    b = batch([b"x" * 10] * 4)
    s.produced(b, {"error_code": 0, "duplicate": False}, 1.0)
    s.produced(b, {"error_code": 0, "duplicate": True}, 1.0)  # an idempotent retry appends nothing
    s.produced(b, {"error_code": 19}, 2.0)  # NOT_ENOUGH_REPLICAS
    s.fetched(False, {"error_code": 0, "records": b}, 3.0)
    s.fetched(True, {"error_code": 0, "records": b + b}, 3.0)
    s.fetched(False, {"error_code": 1, "records": b""}, 3.0)
    snap = s.snapshot()
    c = snap["counters"]
    assert c["messages_in"] == 4 and c["bytes_in"] == len(b)
    assert c["total_produce_requests"] == 3 and c["failed_produce_requests"] == 1 and c["bytes_rejected"] == len(b)
    assert c["bytes_out"] == len(b) and c["replication_bytes_out"] == 2 * len(b)
    assert c["total_fetch_requests"] == 2 and c["failed_fetch_requests"] == 1
    assert snap["latency"]["Produce"]["count"] == 3
    assert snap["latency"]["Fetch"]["count"] == 2 and snap["latency"]["FetchFollower"]["count"] == 1


def test_controller_stats_elections_and_isr_changes():
    st = ControllerStats()
    after = {
        ("t", 0): PartitionRegistration([0, 1, 2], [1, 2], 1, 1, 1),  # leader 0 lost: 1 elected, ISR shrank
        ("t", 1): PartitionRegistration([0, 1, 2], [0, 1, 2], 0, 0, 2),  # 2 rejoined: ISR expanded
        ("t", 2): PartitionRegistration([0, 1], [1], 1, 3, 3),  # unclean: 1 was not in the ISR [0]
    }
    prior = {
        ("t", 0): {"leader": 0, "isr": [0, 1, 2]},
        ("t", 1): {"leader": 0, "isr": [0, 1]},
        ("t", 2): {"leader": -1, "isr": [0]},
        "gone": {"name": "gone"},  # a removed topic
    }
    st.on_commit(prior, lambda t, p: after.get((t, p)))
    snap = st.snapshot()
    assert snap["leader_elections"] == 2 and snap["unclean_leader_elections"] == 1
    # t-2: [0] -> [1] is both (0 left, 1 joined), on the new leader 1
    assert snap["isr_shrinks"] == {1: 2} and snap["isr_expands"] == {0: 1, 1: 1}


def _replica(broker, topic, p, role, isr, replicas, min_isr=1, **kw):
    s = ReplicaStats()
    for _ in range(kw.pop("produced", 0)):
        s.produced(batch([b"v"] * 10), {"error_code": 0}, 2.0)
    return {
        "topic": topic,
        "partition": p,
        "broker": broker,
        "role": role,
        "isr": isr,
        "replicas": replicas,
        "min_isr": min_isr,
        "log_start_offset": 0,
        "log_end_offset": kw.get("leo", 0),
        "high_watermark": kw.get("hw", 0),
        "size": 100,
        "segments": 1,
        **s.snapshot(),
    }


def test_rendered_families_carry_the_figures():
    fam = _Families()
    replicas = [
        _replica(0, "t", 0, "leader", [0], [0, 1], min_isr=2, produced=3, leo=30, hw=30),
        _replica(1, "t", 0, "follower", [0], [0, 1], min_isr=2, leo=28),
        _replica(1, "t", 1, "leader", [1, 0], [1, 0], min_isr=2, produced=1, leo=10, hw=10),
    ]
    ClusterCollector._replicas(fam, [0, 1], replicas)
    md = {
        "topics": {
            "t": {
                "configs": {"min.insync.replicas": "2"},
                "partitions": {
                    "0": {"replicas": [0, 1], "isr": [0], "leader": 0},
                    "1": {"replicas": [1, 0], "isr": [1, 0], "leader": 1},
                    "2": {"replicas": [1, 0], "isr": [1], "leader": -1},
                },
            }
        }
    }
    ClusterCollector._partitions(fam, md, {("t", 0): 2, ("t", 1): 2})
    ctl = {
        "controller_epoch": 4,
        "host_broker_id": 1,
        "leader_elections": 3,
        "unclean_leader_elections": 0,
        "isr_shrinks": {0: 2},
        "isr_expands": {},
    }
    ClusterCollector._controller(fam, [0, 1], [{"id": 0}, {"id": 1}, {"id": 2, "alive": False}], md, ctl)
    groups = {
        "groups": [{"group": "g", "state": "Stable", "members": 2, "partition": 0}],
        "offsets": [{"group": "g", "topic": "t", "partition": 0, "offset": 25}],
    }
    ClusterCollector._groups(fam, 0, groups, {("t", 0): 30})
    ClusterCollector._txns(fam, 1, {"partitions": 1, "by_state": {"Ongoing": 2}, "stats": {"completed": 5}})
    m = render(fam)
    assert get(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 40
    assert get(m, "kafka_server_brokertopicmetrics_messagesin_total", broker=0, topic="t") == 30
    assert get(m, "kafka_network_requestmetrics_requests_total", broker=0, request="Produce") == 3
    assert get(m, "kafka_network_requestmetrics_totaltimems_bucket", broker=0, request="Produce", le="2.5") == 3
    assert get(m, "kafka_network_requestmetrics_totaltimems_bucket", broker=0, request="Produce", le="1.0") == 0
    assert get(m, "kafka_server_replicamanager_underreplicatedpartitions", broker=0) == 1
    assert get(m, "kafka_server_replicamanager_underminisrpartitioncount", broker=0) == 1
    assert get(m, "kafka_server_replicamanager_atminisrpartitioncount", broker=1) == 1
    assert get(m, "kafka_server_replicamanager_leadercount", broker=1) == 1
    assert get(m, "kafka_server_replicamanager_partitioncount", broker=1) == 2
    assert get(m, "kafka_log_log_logendoffset", broker=1, topic="t", partition=0) == 28
    assert get(m, "kafka_cluster_partition_underreplicated", topic="t", partition=0) == 1
    assert get(m, "kafka_cluster_partition_underreplicated", topic="t", partition=1) == 0
    assert get(m, "kafka_cluster_partition_underminisr", topic="t", partition=2) == 1  # from the topic config
    assert get(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert get(m, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
    assert get(m, "kafka_controller_kafkacontroller_activecontrollercount", broker=1) == 1
    assert get(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert get(m, "kafka_controller_kafkacontroller_epoch") == 4
    assert get(m, "kafka_controller_controllerstats_leaderelections_total") == 3
    assert get(m, "kafka_server_replicamanager_isrshrinks_total", broker=0) == 2
    assert get(m, "kafka_consumergroup_lag", consumergroup="g", topic="t", partition=0) == 5
    assert get(m, "kafka_consumergroup_members", consumergroup="g") == 2
    assert get(m, "kafka_coordinator_group_groupmetadatamanager_numgroupsbystate", broker=0, state="Stable") == 1
    assert get(m, "kafka_coordinator_transaction_transactionalids", broker=1, state="Ongoing") == 2
    assert get(m, "kafka_coordinator_transaction_completedtransactions_total", broker=1) == 5


def test_parse_listener():
    assert parse_listener("127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_listener("http://0.0.0.0:0/") == ("0.0.0.0", 0)
    assert parse_listener(":9404") == ("0.0.0.0", 9404)
    assert parse_listener("none") is None and parse_listener("") is None
    for bad in ("9404", "host:port", "h:70000"):
        with pytest.raises(ValueError):
            parse_listener(bad)


def test_every_metric_is_documented():
    doc = (DOCS / "metrics.md").read_text()
    undocumented = [n for n in CATALOG if f"`{n}" not in doc]
    assert not undocumented, undocumented


def test_grafana_dashboard_queries_only_exported_metrics():
    dash = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(dash["panels"])
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    used = {n for e in exprs for n in re.findall(r"\b(?:kafka|rafka)_[a-z0-9_]+", e)}
    assert exprs and used, "the dashboard queries nothing"
    assert used <= sample_names(), sorted(used - sample_names())
    # and it shows every family the exporter has (counters by their _total, histograms by a bucket query)
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    assert set(CATALOG) <= shown, sorted(set(CATALOG) - shown)
