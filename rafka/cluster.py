"""Finding a rafka cluster: ``LocalCluster`` (embedded, the default) and ``connect`` (attach to one).

    with rafka.LocalCluster(brokers=3, data_dir="/tmp/rafka") as cluster:
        producer = rafka.Producer(cluster)

    cluster = rafka.connect()                 # RAY_ADDRESS, the `rafka cluster start` head, or "auto"
    cluster = rafka.connect("ray://head:10001", cluster="prod")

A cluster is a set of named actors in Ray namespace ``rafka`` (controller, brokers, replicas: their names
are built in ``protocol/names.py``) plus its metadata in GCS KV; clients only need the Ray
connection and the cluster name. Client constructors take a ``LocalCluster``/``ClusterHandle``, a
cluster name, or nothing (``connect()`` with the defaults).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from protocol.names import RAY_NAMESPACE, controller_name
from rafka.errors import ClusterNotFoundError
from rafka.output import quiet_worker_pool_warnings
from rafka.ray_session import attach_ray, start_local_ray

__all__ = [
    "LocalCluster",
    "ClusterHandle",
    "connect",
    "resolve_cluster",
    "state_file",
    "bootstrap_servers",
    "metrics_url",
    "DEFAULT_CLUSTER",
]

DEFAULT_CLUSTER = "rafka"
# The nice value of the worker processes on a node that rafka starts (LocalCluster, `rafka cluster start`),
# Ray's ``worker_niceness``. Ray's default, 15, makes every actor yield to the raylet and GCS, and so to any
# client process at nice 0 on the node too (CFS weights 36 vs 1024: a busy client gets ~28x a broker's CPU),
# so each hop of a request waits for the client to sleep. Kafka's brokers run at the normal priority. Set
# node-wide (it costs nothing at actor start; a per-actor runtime_env env var would make Ray start every
# replica through its runtime-env agent, ~0.3 s more each). Measured (docs/internals.md, cost model): end-to-end
# latency at 5,000 records/s acks=all RF 3 p50 136 -> 80 ms, p99 390 -> 217 ms (medians of 4 pairs); a client
# on the same node now shares its CPU with the servers (idempotent send_batch on 2 cores 74k -> 63k records/s).
WORKER_NICENESS = 0


def state_file() -> Path:
    """Where ``rafka cluster start`` records the Ray head it started (``$RAFKA_HOME`` or ``~/.rafka``)."""
    home = os.environ.get("RAFKA_HOME") or os.path.join(Path.home(), ".rafka")
    return Path(home) / "cluster.json"


def read_state() -> dict | None:
    try:
        return json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None


def bootstrap_servers(cluster: str, timeout_s: float = 10.0) -> str:
    """``host:port,...``: the Kafka wire listeners (serve/kafka_wire) of the cluster's live brokers, as a
    Kafka client's ``bootstrap.servers``; "" when no broker runs a listener. Needs Ray connected."""
    import ray

    from protocol.kv import GcsKV, read_cluster
    from protocol.names import RAY_NAMESPACE, broker_name

    brokers = [b["id"] for b in read_cluster(GcsKV(cluster))["brokers"] if b.get("alive", True)]
    refs = []
    for bid in brokers:
        try:
            refs.append(ray.get_actor(broker_name(cluster, bid), namespace=RAY_NAMESPACE).incarnation.remote())
        except ValueError:  # a broker that is down right now
            continue
    out = []
    for inc in ray.get(refs, timeout=timeout_s):
        if inc.get("listener"):
            host, port = inc["listener"]
            out.append(f"{host}:{port}")
    return ",".join(out)


def metrics_url(cluster: str) -> str | None:
    """The cluster's Prometheus scrape URL (``http://host:port/metrics``, published by its exporter in GCS
    KV; docs/metrics.md), None when no exporter runs. Needs Ray connected."""
    from protocol.kv import METRICS_URL, GcsKV

    return GcsKV(cluster).get(METRICS_URL)


class ClusterHandle:
    """A connection to a running rafka cluster: its name and the Ray address it lives on."""

    def __init__(self, name: str, address: str | None):
        self.name = name
        self.address = address

    def __repr__(self) -> str:
        return f"ClusterHandle(name={self.name!r}, address={self.address!r})"

    def controller(self):
        import ray

        return ray.get_actor(controller_name(self.name), namespace=RAY_NAMESPACE)

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' Kafka listeners, ``host:port,...``, for any Kafka client."""
        return bootstrap_servers(self.name)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus scrape URL (docs/metrics.md), None when the exporter is off."""
        return metrics_url(self.name)

    def admin(self, **config):
        from rafka.admin.admin import Admin

        return Admin(self, **config)

    def producer(self, **config):
        from rafka.producer.producer import Producer

        return Producer(self, **config)

    def consumer(self, **config):
        from rafka.consumer.consumer import Consumer

        return Consumer(self, **config)


def wait_for_controller(name: str, timeout_s: float) -> Any:
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get_actor(controller_name(name), namespace=RAY_NAMESPACE)
        except ValueError:
            if time.monotonic() >= deadline:
                raise ClusterNotFoundError(
                    f"no rafka cluster named {name!r} on this Ray cluster (no actor "
                    f"{controller_name(name)!r} in namespace {RAY_NAMESPACE!r})"
                ) from None
            time.sleep(0.1)


def connect(address: str | None = None, cluster: str | None = None, timeout_s: float = 5.0) -> ClusterHandle:
    """Attach to a running cluster. ``address``: a Ray address (``host:port``), ``"auto"``, or
    ``ray://host:10001`` (Ray Client, e.g. from a notebook outside the cluster); by default
    ``RAY_ADDRESS``, else the head recorded by ``rafka cluster start``, else ``"auto"``.
    Raises ``ClusterNotFoundError`` (a ``ConnectionError``) when there is no such cluster."""
    import ray

    state = read_state()
    if cluster is None:
        cluster = (state or {}).get("cluster", DEFAULT_CLUSTER)
    if not ray.is_initialized():
        if address is None:
            address = os.environ.get("RAY_ADDRESS") or (state or {}).get("address") or "auto"
        address = attach_ray(address)
    wait_for_controller(cluster, timeout_s)
    return ClusterHandle(cluster, address)


def resolve_cluster(cluster: Any, timeout_s: float = 5.0) -> str:
    """The cluster name a client constructor was given, after checking that the cluster is there
    (connecting to Ray first when needed); ``ClusterNotFoundError`` otherwise."""
    import ray

    if cluster is None:
        return connect(timeout_s=timeout_s).name
    if isinstance(cluster, str):
        if not ray.is_initialized():
            return connect(cluster=cluster, timeout_s=timeout_s).name
        name = cluster
    else:
        name = getattr(cluster, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"expected a LocalCluster, ClusterHandle or cluster name, not {type(cluster).__name__}")
        if not ray.is_initialized():
            raise ClusterNotFoundError(f"cluster {name!r} is not running (Ray is not initialized)")
    wait_for_controller(name, timeout_s)
    return name


class LocalCluster:
    """An embedded rafka cluster in this process's Ray: controller + ``brokers`` broker actors.

    Starts a local Ray instance when none is initialized (``num_cpus`` defaults to the machine's; without
    the dashboard, the autoscaler monitor and the log monitor unless ``lean_ray=False``:
    rafka/ray_session.py) and shuts it down on ``stop()`` only if it started it. ``data_dir`` holds every
    broker's logs and the controller's metadata log; starting again on the same ``data_dir`` recovers
    the topics and their data. Without ``data_dir`` a temporary directory is used and removed on stop.
    ``broker_config`` entries (Kafka's dotted names, e.g. ``{"replica.lag.time.max.ms": 5000}``) go
    to every broker and the controller.
    """

    def __init__(
        self,
        brokers: int = 3,
        data_dir: str | os.PathLike | None = None,
        name: str = DEFAULT_CLUSTER,
        num_cpus: int | None = None,
        start: bool = True,
        broker_config: dict | None = None,
        lean_ray: bool = True,
        **extra_config: Any,
    ):
        self.num_brokers = brokers
        self.name = name
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rafka-")
            data_dir = self._tmp.name
        self.data_dir = str(data_dir)
        self.num_cpus = num_cpus
        self.broker_config = {**(broker_config or {}), **{k.replace("_", "."): v for k, v in extra_config.items()}}
        self._started_ray = False
        self.lean_ray = lean_ray
        self._handle: Any = None
        self.address: str | None = None
        if start:
            self.start()

    def start(self) -> "LocalCluster":
        import ray

        from actors.bootstrap import start_cluster

        if not ray.is_initialized():
            import logging

            from actors.server.server_log import route_ray_driver_logs

            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            os.makedirs(self.data_dir, exist_ok=True)
            route_ray_driver_logs(self.data_dir)  # Ray's start-up warnings: to <data_dir>/logs/ray.log
            quiet_worker_pool_warnings()
            cpus = self.num_cpus or os.cpu_count() or 1
            # a cluster is many small actors (num_cpus=0): let Ray start workers 8 at a time, which also
            # keeps the raylet from warning about "too many worker processes" on small machines
            system = {"worker_maximum_startup_concurrency": max(8, cpus), "worker_niceness": WORKER_NICENESS}
            start_local_ray(cpus, RAY_NAMESPACE, system, lean=self.lean_ray)
            self._started_ray = True
        self.address = ray.get_runtime_context().gcs_address
        os.makedirs(self.data_dir, exist_ok=True)
        self._handle = start_cluster(
            self.name, self.num_brokers, self.data_dir, broker_config=self.broker_config or None
        )
        return self

    @property
    def handle(self) -> ClusterHandle:
        return ClusterHandle(self.name, self.address)

    def broker_ids(self) -> list[int]:
        return list(range(self.num_brokers))

    def kill_broker(self, broker_id: int) -> None:
        """Fault injection: kill one broker actor (its replicas die with it), as a crashed server."""
        self._handle.kill_broker(broker_id)

    def restart_broker(self, broker_id: int) -> None:
        """Start a killed broker again on its directory; it rejoins as follower and catches up."""
        self._handle.restart_broker(broker_id)

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' Kafka listeners (``listeners`` config; 127.0.0.1:9092+id by default), ``host:port,...``:
        the ``bootstrap.servers`` of kcat, confluent-kafka, kafka-python and the other Kafka clients."""
        return bootstrap_servers(self.name)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus scrape URL, ``http://127.0.0.1:9404/metrics`` by default (an ephemeral port when
        9404 is taken; ``metrics.listener`` in ``broker_config`` sets it, ``none`` turns it off). Every
        broker, topic, partition, group and transaction metric under Kafka's names: docs/metrics.md."""
        return None if self._handle is None else self._handle.metrics_url()

    @property
    def server(self):
        """The server-side ``actors.bootstrap.ServerHandle`` (fault injection, waits)."""
        return self._handle

    def stop(self) -> None:
        """Stop the brokers and controller (logs closed cleanly); shut Ray down if this started it."""
        import ray

        if self._handle is not None:
            self._handle.shutdown()
            self._handle = None
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
            self._started_ray = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    shutdown = stop

    def admin(self, **config):
        from rafka.admin.admin import Admin

        return Admin(self, **config)

    def producer(self, **config):
        from rafka.producer.producer import Producer

        return Producer(self, **config)

    def consumer(self, **config):
        from rafka.consumer.consumer import Consumer

        return Consumer(self, **config)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalCluster(name={self.name!r}, brokers={self.num_brokers}, data_dir={self.data_dir!r})"
