"""The cluster's one Prometheus scrape endpoint: a detached actor per cluster running ``prometheus_client``'s
HTTP server, whose Collector pulls the actors' ``metrics()`` on each scrape and renders Kafka's metric names
(docs/metrics.md). Started by actors/bootstrap.py; calls the brokers, controller, replicas and coordinators
under ``metrics.scrape.timeout.ms``. docs/internals.md ("Metrics") has the scrape and the endpoint.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector, CollectorRegistry
from ray.exceptions import RayError

from actors.metadata.kv import GcsKV
from actors.server.metrics import LATENCY_BUCKETS_MS, REQUESTS, ReplicaStats
from protocol.kv import GATEWAY_METRICS, read_cluster
from protocol.kv import METRICS_URL as METRICS_URL_KEY
from protocol.names import (
    RAY_NAMESPACE,
    broker_name,
    controller_name,
    group_coordinator_name,
    metrics_exporter_name,
    txn_coordinator_name,
)

log = logging.getLogger("rafka.metrics")

DEFAULT_LISTENER = "127.0.0.1:9404"
DEFAULT_SCRAPE_TIMEOUT_MS = 5000

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
B, T, P = "broker", "topic", "partition"

# name -> (type, labels, help). Counters are listed without their ``_total`` suffix (prometheus_client adds it).
CATALOG: dict[str, tuple[str, tuple[str, ...], str]] = {
    # -- BrokerTopicMetrics (kafka.server:type=BrokerTopicMetrics,name=...,topic=...), per broker and topic
    "kafka_server_brokertopicmetrics_messagesin": (COUNTER, (B, T), "Records appended to leader replicas"),
    "kafka_server_brokertopicmetrics_bytesin": (COUNTER, (B, T), "Bytes of record batches appended by producers"),
    "kafka_server_brokertopicmetrics_bytesout": (COUNTER, (B, T), "Bytes of record batches sent to consumers"),
    "kafka_server_brokertopicmetrics_replicationbytesout": (
        COUNTER,
        (B, T),
        "Bytes of record batches sent to follower replicas",
    ),
    "kafka_server_brokertopicmetrics_bytesrejected": (COUNTER, (B, T), "Bytes of produce requests that failed"),
    "kafka_server_brokertopicmetrics_totalproducerequests": (COUNTER, (B, T), "Produce requests (per partition)"),
    "kafka_server_brokertopicmetrics_failedproducerequests": (COUNTER, (B, T), "Produce requests answered an error"),
    "kafka_server_brokertopicmetrics_totalfetchrequests": (COUNTER, (B, T), "Consumer fetch requests (per partition)"),
    "kafka_server_brokertopicmetrics_failedfetchrequests": (COUNTER, (B, T), "Consumer fetches answered an error"),
    # -- RequestMetrics (kafka.network:type=RequestMetrics,name=...,request=...)
    "kafka_network_requestmetrics_requests": (COUNTER, (B, "request"), "Requests served by partition replicas"),
    "kafka_network_requestmetrics_totaltimems": (
        HISTOGRAM,
        (B, "request"),
        "Time from a request reaching the replica to its answer (ms), purgatory waits included",
    ),
    # -- ReplicaManager (kafka.server:type=ReplicaManager,name=...)
    "kafka_server_replicamanager_partitioncount": (GAUGE, (B,), "Partition replicas hosted by the broker"),
    "kafka_server_replicamanager_leadercount": (GAUGE, (B,), "Partitions the broker leads"),
    "kafka_server_replicamanager_underreplicatedpartitions": (
        GAUGE,
        (B,),
        "Partitions led here whose ISR is smaller than their replica set",
    ),
    "kafka_server_replicamanager_underminisrpartitioncount": (
        GAUGE,
        (B,),
        "Partitions led here whose ISR is below min.insync.replicas",
    ),
    "kafka_server_replicamanager_atminisrpartitioncount": (
        GAUGE,
        (B,),
        "Partitions led here whose ISR is exactly min.insync.replicas",
    ),
    "kafka_server_replicamanager_isrshrinks": (COUNTER, (B,), "ISR shrinks of partitions led by the broker"),
    "kafka_server_replicamanager_isrexpands": (COUNTER, (B,), "ISR expansions of partitions led by the broker"),
    # -- Partition (kafka.cluster:type=Partition,name=...,topic=...,partition=...), from the metadata
    "kafka_cluster_partition_underreplicated": (GAUGE, (T, P), "1 when the ISR is smaller than the replica set"),
    "kafka_cluster_partition_insyncreplicascount": (GAUGE, (T, P), "Replicas in the ISR"),
    "kafka_cluster_partition_replicascount": (GAUGE, (T, P), "Replicas assigned"),
    "kafka_cluster_partition_underminisr": (GAUGE, (T, P), "1 when the ISR is below min.insync.replicas"),
    "kafka_cluster_partition_atminisr": (GAUGE, (T, P), "1 when the ISR is exactly min.insync.replicas"),
    "kafka_cluster_partition_leader": (GAUGE, (T, P), "The leader broker id, -1 when offline (rafka)"),
    # -- Log (kafka.log:type=Log,name=...,topic=...,partition=...), per replica
    "kafka_log_log_size": (GAUGE, (B, T, P), "Bytes of the replica's log segments"),
    "kafka_log_log_numlogsegments": (GAUGE, (B, T, P), "Segments of the replica's log"),
    "kafka_log_log_logstartoffset": (GAUGE, (B, T, P), "The replica's log start offset"),
    "kafka_log_log_logendoffset": (GAUGE, (B, T, P), "The replica's log end offset"),
    "kafka_log_log_highwatermark": (GAUGE, (B, T, P), "The replica's high watermark (rafka)"),
    # -- KafkaController (kafka.controller:type=KafkaController,name=...)
    "kafka_controller_kafkacontroller_activecontrollercount": (
        GAUGE,
        (B,),
        "1 on the broker hosting the active controller, 0 on the others",
    ),
    "kafka_controller_kafkacontroller_epoch": (GAUGE, (), "The active controller's epoch"),
    "kafka_controller_kafkacontroller_offlinepartitionscount": (GAUGE, (), "Partitions without a leader"),
    "kafka_controller_kafkacontroller_globaltopiccount": (GAUGE, (), "Topics"),
    "kafka_controller_kafkacontroller_globalpartitioncount": (GAUGE, (), "Partitions"),
    "kafka_controller_kafkacontroller_activebrokercount": (GAUGE, (), "Registered, unfenced brokers"),
    "kafka_controller_kafkacontroller_fencedbrokercount": (GAUGE, (), "Registered brokers that are fenced"),
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount": (
        GAUGE,
        (),
        "Partitions not led by their preferred (first) replica",
    ),
    # -- ControllerStats (kafka.controller:type=ControllerStats,name=...), since this controller started
    "kafka_controller_controllerstats_leaderelections": (COUNTER, (), "Leader elections"),
    "kafka_controller_controllerstats_uncleanleaderelections": (
        COUNTER,
        (),
        "Leader elections of a replica outside the ISR",
    ),
    # -- GroupMetadataManager (kafka.coordinator.group:type=GroupMetadataManager,name=...), per coordinator
    "kafka_coordinator_group_groupmetadatamanager_numgroups": (GAUGE, (B,), "Groups on the broker's coordinator"),
    "kafka_coordinator_group_groupmetadatamanager_numgroupsbystate": (
        GAUGE,
        (B, "state"),
        "Groups by state (Kafka: NumGroupsStable, NumGroupsEmpty, ...)",
    ),
    "kafka_coordinator_group_groupmetadatamanager_numoffsets": (GAUGE, (B,), "Committed offsets held"),
    # -- consumer groups (kafka_exporter's names), per group
    "kafka_consumergroup_members": (GAUGE, ("consumergroup",), "Members of the group"),
    "kafka_consumergroup_state": (GAUGE, ("consumergroup", "state"), "1 for the group's current state"),
    "kafka_consumergroup_current_offset": (
        GAUGE,
        ("consumergroup", T, P),
        "The group's committed offset of a partition",
    ),
    "kafka_consumergroup_lag": (
        GAUGE,
        ("consumergroup", T, P),
        "High watermark minus the committed offset (0 at the least)",
    ),
    # -- transaction coordinator, per broker
    "kafka_coordinator_transaction_partitions": (GAUGE, (B,), "__transaction_state partitions led by the broker"),
    "kafka_coordinator_transaction_transactionalids": (
        GAUGE,
        (B, "state"),
        "Transactional ids by transaction state",
    ),
    "kafka_coordinator_transaction_completedtransactions": (COUNTER, (B,), "Transactions ended (commit or abort)"),
    "kafka_coordinator_transaction_abortedtimeouts": (COUNTER, (B,), "Transactions aborted on timeout"),
    "kafka_coordinator_transaction_markerswritten": (COUNTER, (B,), "Transaction markers written"),
    "kafka_coordinator_transaction_appends": (COUNTER, (B,), "__transaction_state appends"),
    # -- the REST gateway (serve/gateway_metrics.py; Confluent REST Proxy's kafka.rest:type=jersey-metrics)
    "kafka_rest_gateway_requests": (
        COUNTER,
        ("method", "route", "status"),
        "HTTP requests answered by the REST gateway, by route template and status",
    ),
    # -- the exporter itself
    "rafka_exporter_scrape_duration_seconds": (GAUGE, (), "How long this scrape took to gather"),
    "rafka_exporter_unreachable_actors": (
        GAUGE,
        ("kind",),
        "Actors that did not answer this scrape in time (dead or frozen)",
    ),
}

# ReplicaStats counter -> BrokerTopicMetrics family
_TOPIC_COUNTERS = {
    "messages_in": "kafka_server_brokertopicmetrics_messagesin",
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout",
    "replication_bytes_out": "kafka_server_brokertopicmetrics_replicationbytesout",
    "bytes_rejected": "kafka_server_brokertopicmetrics_bytesrejected",
    "total_produce_requests": "kafka_server_brokertopicmetrics_totalproducerequests",
    "failed_produce_requests": "kafka_server_brokertopicmetrics_failedproducerequests",
    "total_fetch_requests": "kafka_server_brokertopicmetrics_totalfetchrequests",
    "failed_fetch_requests": "kafka_server_brokertopicmetrics_failedfetchrequests",
}
assert set(_TOPIC_COUNTERS) == set(ReplicaStats.COUNTERS)

_GROUP_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")


def sample_names() -> set[str]:
    """Every sample name a scrape can carry (``_total`` for counters; ``_bucket``/``_sum``/``_count`` for
    histograms): what a dashboard may query."""
    out = set()
    for name, (kind, _, _) in CATALOG.items():
        if kind == COUNTER:
            out.add(name + "_total")
        elif kind == HISTOGRAM:
            out |= {name + "_bucket", name + "_sum", name + "_count"}
        else:
            out.add(name)
    return out


def parse_listener(value) -> tuple[str, int] | None:
    """``metrics.listener``: ``host:port`` (``http://`` allowed) -> (host, port); none/"" -> None (off)."""
    raw = str(value).strip()
    if raw.lower() in ("", "none", "off", "false"):
        return None
    if "://" in raw:
        raw = raw.split("://", 1)[1]
    host, sep, port = raw.rstrip("/").rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"metrics.listener {value!r}: expected host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


class _Families:
    def __init__(self):
        self.f: dict = {}
        for name, (kind, labels, doc) in CATALOG.items():
            cls = {COUNTER: CounterMetricFamily, GAUGE: GaugeMetricFamily, HISTOGRAM: HistogramMetricFamily}[kind]
            self.f[name] = cls(name, doc, labels=list(labels))

    def add(self, name: str, labels, value) -> None:
        self.f[name].add_metric([str(v) for v in labels], value)

    def hist(self, name: str, labels, snap: dict) -> None:
        acc, buckets = 0, []
        for bound, n in zip((*LATENCY_BUCKETS_MS, float("inf")), snap["buckets"]):
            acc += n
            buckets.append(("+Inf" if bound == float("inf") else str(bound), acc))
        self.f[name].add_metric([str(v) for v in labels], buckets, snap["sum"])


class ClusterCollector(Collector):
    """Gathers the cluster's figures on each scrape (see the module docstring)."""

    def __init__(self, cluster: str, timeout_s: float):
        self.cluster, self.timeout_s = cluster, timeout_s
        self.kv = GcsKV(cluster)
        self._handles: dict[str, object] = {}

    def _actor(self, name: str):
        h = self._handles.get(name)
        if h is None:
            try:
                h = self._handles[name] = ray.get_actor(name, namespace=RAY_NAMESPACE)
            except ValueError:  # not there (yet): a coordinator never needed, a broker down
                return None
        return h

    def _gather(self, calls: list[tuple[str, str, Any]], deadline: float, missing: dict) -> dict:
        """``[(kind, actor name, ObjectRef)]`` -> ``{actor name: answer}`` of those answering by the deadline."""
        if not calls:
            return {}
        refs = [c[2] for c in calls]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
        ready_set = set(ready)
        out = {}
        for kind, name, ref in calls:
            if ref not in ready_set:
                missing[kind] = missing.get(kind, 0) + 1
                continue
            try:
                out[name] = ray.get(ref, timeout=0)
            except RayError:
                self._handles.pop(name, None)  # dead: looked up afresh next time
                missing[kind] = missing.get(kind, 0) + 1
        return out

    def _call(self, calls: list, kind: str, name: str, method: str) -> None:
        h = self._actor(name)
        if h is not None:
            try:
                calls.append((kind, name, getattr(h, method).remote()))
            except RayError:
                self._handles.pop(name, None)

    def collect(self):
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        fam = _Families()
        missing: dict[str, int] = {}
        md = read_cluster(self.kv)
        brokers = md["brokers"]
        alive = [b["id"] for b in brokers if b.get("alive", True)]
        c = self.cluster
        calls: list = []
        for b in alive:
            self._call(calls, "broker", broker_name(c, b), "replica_handles")
            self._call(calls, "group_coordinator", group_coordinator_name(c, b), "metrics")
            self._call(calls, "txn_coordinator", txn_coordinator_name(c, b), "metrics")
        self._call(calls, "controller", controller_name(c), "metrics")
        first = self._gather(calls, deadline, missing)
        rcalls = []
        for b in alive:
            for key, h in (first.get(broker_name(c, b)) or {}).items():
                rcalls.append(("replica", f"{key[0]}-{key[1]}-b{b}", h.metrics.remote()))
        replicas = list(self._gather(rcalls, deadline, missing).values())

        self._replicas(fam, alive, replicas)
        hw = {(r["topic"], r["partition"]): r.get("high_watermark") for r in replicas if r["role"] == "leader"}
        min_isr = {(r["topic"], r["partition"]): r["min_isr"] for r in replicas}
        self._partitions(fam, md, min_isr)
        ctl = first.get(controller_name(c))
        self._controller(fam, alive, brokers, md, ctl)
        for b in alive:
            g = first.get(group_coordinator_name(c, b))
            if g is not None:
                self._groups(fam, b, g, hw)
            t = first.get(txn_coordinator_name(c, b))
            if t is not None:
                self._txns(fam, b, t)
        self._gateway(fam)
        for kind in ("broker", "replica", "controller", "group_coordinator", "txn_coordinator"):
            fam.add("rafka_exporter_unreachable_actors", [kind], missing.get(kind, 0))
        fam.add("rafka_exporter_scrape_duration_seconds", [], time.monotonic() - t0)
        yield from fam.f.values()

    # ---- renderers ----------------------------------------------------------------------------------
    def _gateway(self, fam: _Families) -> None:
        counts: dict[tuple, int] = {}
        for key in self.kv.keys(GATEWAY_METRICS):
            for m, r, s, n in (self.kv.get(key) or {}).get("counts", []):
                counts[(m, r, s)] = counts.get((m, r, s), 0) + n
        for labels, n in sorted(counts.items()):
            fam.add("kafka_rest_gateway_requests", labels, n)

    @staticmethod
    def _replicas(fam: _Families, alive: list[int], replicas: list[dict]) -> None:
        by_topic: dict[tuple[int, str], dict] = {}
        hist: dict[tuple[int, str], dict] = {}
        rm = {b: dict.fromkeys(("partitions", "leaders", "urp", "under_min", "at_min"), 0) for b in alive}
        for r in replicas:
            b, t = r["broker"], r["topic"]
            acc = by_topic.setdefault((b, t), dict.fromkeys(_TOPIC_COUNTERS, 0))
            for k, v in r["counters"].items():
                acc[k] = acc.get(k, 0) + v
            for req, snap in r["latency"].items():
                h = hist.setdefault((b, req), {"buckets": [0] * len(snap["buckets"]), "sum": 0.0, "count": 0})
                h["buckets"] = [x + y for x, y in zip(h["buckets"], snap["buckets"])]
                h["sum"] += snap["sum"]
                h["count"] += snap["count"]
            if r["role"] == "stopped":
                continue
            m = rm.setdefault(b, dict.fromkeys(("partitions", "leaders", "urp", "under_min", "at_min"), 0))
            m["partitions"] += 1
            if r["role"] == "leader":
                isr = len(r["isr"])
                m["leaders"] += 1
                m["urp"] += isr < len(r["replicas"])
                m["under_min"] += isr < r["min_isr"]
                m["at_min"] += isr == r["min_isr"]
            labels = [b, t, r["partition"]]
            if "size" in r:
                fam.add("kafka_log_log_size", labels, r["size"])
                fam.add("kafka_log_log_numlogsegments", labels, r["segments"])
                fam.add("kafka_log_log_logstartoffset", labels, r["log_start_offset"])
                fam.add("kafka_log_log_logendoffset", labels, r["log_end_offset"])
                fam.add("kafka_log_log_highwatermark", labels, r["high_watermark"])
        for (b, t), acc in sorted(by_topic.items()):
            for k, name in _TOPIC_COUNTERS.items():
                fam.add(name, [b, t], acc.get(k, 0))
        for b in sorted(rm):
            for req in REQUESTS:
                snap = hist.get((b, req))
                if snap is None:
                    continue
                fam.add("kafka_network_requestmetrics_requests", [b, req], snap["count"])
                fam.hist("kafka_network_requestmetrics_totaltimems", [b, req], snap)
            m = rm[b]
            fam.add("kafka_server_replicamanager_partitioncount", [b], m["partitions"])
            fam.add("kafka_server_replicamanager_leadercount", [b], m["leaders"])
            fam.add("kafka_server_replicamanager_underreplicatedpartitions", [b], m["urp"])
            fam.add("kafka_server_replicamanager_underminisrpartitioncount", [b], m["under_min"])
            fam.add("kafka_server_replicamanager_atminisrpartitioncount", [b], m["at_min"])

    @staticmethod
    def _partitions(fam: _Families, md: dict, min_isr: dict) -> None:
        for tname, topic in sorted(md["topics"].items()):
            configured = topic.get("configs", {}).get("min.insync.replicas")
            for p, s in sorted(topic["partitions"].items(), key=lambda kv: int(kv[0])):
                p = int(p)
                isr, reps = len(s["isr"]), len(s["replicas"])
                mi = int(min_isr.get((tname, p), configured or 1))
                labels = [tname, p]
                fam.add("kafka_cluster_partition_underreplicated", labels, int(isr < reps))
                fam.add("kafka_cluster_partition_insyncreplicascount", labels, isr)
                fam.add("kafka_cluster_partition_replicascount", labels, reps)
                fam.add("kafka_cluster_partition_underminisr", labels, int(isr < mi))
                fam.add("kafka_cluster_partition_atminisr", labels, int(isr == mi))
                fam.add("kafka_cluster_partition_leader", labels, s["leader"])

    @staticmethod
    def _controller(fam: _Families, alive: list[int], brokers: list[dict], md: dict, ctl: dict | None) -> None:
        host = ctl["host_broker_id"] if ctl and not ctl.get("resigned") else None
        for b in alive:
            fam.add("kafka_controller_kafkacontroller_activecontrollercount", [b], int(b == host))
        parts = [s for t in md["topics"].values() for s in t["partitions"].values()]
        fam.add("kafka_controller_kafkacontroller_offlinepartitionscount", [], sum(s["leader"] < 0 for s in parts))
        fam.add("kafka_controller_kafkacontroller_globaltopiccount", [], len(md["topics"]))
        fam.add("kafka_controller_kafkacontroller_globalpartitioncount", [], len(parts))
        fam.add("kafka_controller_kafkacontroller_activebrokercount", [], len(alive))
        fam.add("kafka_controller_kafkacontroller_fencedbrokercount", [], len(brokers) - len(alive))
        imbalance = sum(1 for s in parts if s["replicas"] and s["leader"] != s["replicas"][0])
        fam.add("kafka_controller_kafkacontroller_preferredreplicaimbalancecount", [], imbalance)
        if ctl is None:
            return
        fam.add("kafka_controller_kafkacontroller_epoch", [], ctl["controller_epoch"])
        fam.add("kafka_controller_controllerstats_leaderelections", [], ctl["leader_elections"])
        fam.add("kafka_controller_controllerstats_uncleanleaderelections", [], ctl["unclean_leader_elections"])
        for b in alive:
            fam.add("kafka_server_replicamanager_isrshrinks", [b], ctl["isr_shrinks"].get(b, 0))
            fam.add("kafka_server_replicamanager_isrexpands", [b], ctl["isr_expands"].get(b, 0))

    @staticmethod
    def _groups(fam: _Families, b: int, g: dict, hw: dict) -> None:
        groups = g["groups"]
        fam.add("kafka_coordinator_group_groupmetadatamanager_numgroups", [b], len(groups))
        for state in _GROUP_STATES:
            n = sum(1 for x in groups if x["state"] == state)
            fam.add("kafka_coordinator_group_groupmetadatamanager_numgroupsbystate", [b, state], n)
        fam.add("kafka_coordinator_group_groupmetadatamanager_numoffsets", [b], len(g["offsets"]))
        for x in groups:
            fam.add("kafka_consumergroup_members", [x["group"]], x["members"])
            fam.add("kafka_consumergroup_state", [x["group"], x["state"]], 1)
        for o in g["offsets"]:
            labels = [o["group"], o["topic"], o["partition"]]
            fam.add("kafka_consumergroup_current_offset", labels, o["offset"])
            end = hw.get((o["topic"], o["partition"]))
            if end is not None:
                fam.add("kafka_consumergroup_lag", labels, max(0, end - o["offset"]))

    @staticmethod
    def _txns(fam: _Families, b: int, t: dict) -> None:
        fam.add("kafka_coordinator_transaction_partitions", [b], t["partitions"])
        for state, n in sorted(t["by_state"].items()):
            fam.add("kafka_coordinator_transaction_transactionalids", [b, state], n)
        st = t["stats"]
        fam.add("kafka_coordinator_transaction_completedtransactions", [b], st.get("completed", 0))
        fam.add("kafka_coordinator_transaction_abortedtimeouts", [b], st.get("aborted_timeouts", 0))
        fam.add("kafka_coordinator_transaction_markerswritten", [b], st.get("markers_written", 0))
        fam.add("kafka_coordinator_transaction_appends", [b], st.get("appends", 0))


class MetricsExporter:
    """The actor: binds the HTTP server in ``__init__`` and publishes its URL in GCS KV."""

    def __init__(self, cluster: str, config: dict | None = None):
        config = dict(config or {})
        self.cluster = cluster
        configured = config.get("metrics.listener")
        host, port = parse_listener(configured or DEFAULT_LISTENER) or ("127.0.0.1", 0)
        timeout_s = int(config.get("metrics.scrape.timeout.ms", DEFAULT_SCRAPE_TIMEOUT_MS)) / 1000
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClusterCollector(cluster, timeout_s))
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            if port == 0 or configured:  # a listener the user chose is theirs or an error, never another
                raise OSError(e.errno, f"cluster {cluster}: metrics.listener {host}:{port} cannot bind: {e}") from e
            log.warning("metrics listener %s:%s not free (%s): binding an ephemeral port instead", host, port, e)
            self.server, self.thread = start_http_server(0, addr=host, registry=self.registry)
        bound = self.server.server_port
        # an every-interface bind is reached at the node's own address (what other machines see)
        shown = ray.util.get_node_ip_address() if host in ("0.0.0.0", "::") else host
        self.url = f"http://{shown}:{bound}/metrics"
        GcsKV(cluster).put(METRICS_URL_KEY, self.url)
        log.info("cluster %s: Prometheus metrics at %s", cluster, self.url)

    def metrics_url(self) -> str:
        return self.url

    def stop(self) -> dict:
        self.server.shutdown()
        self.server.server_close()
        return {"error_code": 0}


RemoteMetricsExporter = ray.remote(MetricsExporter)


def start_exporter(cluster: str, config: dict | None):
    """Create the cluster's exporter actor (detached, ``num_cpus=0``) unless ``metrics.listener`` is none;
    returns its handle without waiting (``ray.get(handle.metrics_url.remote())`` waits for the bind)."""
    if parse_listener((config or {}).get("metrics.listener", DEFAULT_LISTENER)) is None:
        return None
    return RemoteMetricsExporter.options(
        name=metrics_exporter_name(cluster),
        namespace=RAY_NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        get_if_exists=True,
    ).remote(cluster, config)


def stop_exporter(cluster: str, timeout_s: float = 5.0) -> None:
    """Stop and kill the cluster's exporter if it runs."""
    try:
        h = ray.get_actor(metrics_exporter_name(cluster), namespace=RAY_NAMESPACE)
    except ValueError:
        return
    try:
        ray.get(h.stop.remote(), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - it is killed anyway
        log.info("metrics exporter of %s: %s", cluster, e)
    ray.kill(h, no_restart=True)
    del h
    # ray.kill is asynchronous: wait until the name is free, so a start_cluster right after (a restart on the
    # same data) creates a new exporter rather than getting this dying one back (get_if_exists)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(metrics_exporter_name(cluster), namespace=RAY_NAMESPACE)
        except ValueError:
            return
        time.sleep(0.02)
