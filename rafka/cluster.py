"""The handles a user holds on a cluster: ``ClusterHandle`` (``connect``: attach to a running one) and
``LocalCluster`` (embedded: a ``ClusterHandle`` that starts and stops its cluster).

    with rafka.LocalCluster(brokers=3, data_dir="/tmp/rafka") as cluster:
        producer = cluster.producer()         # or rafka.Producer(cluster)
    cluster = rafka.connect("ray://head:10001", cluster="prod")
    cluster = rafka.deploy("10.0.0.1:6379", brokers=3, data_dir="/var/lib/rafka")   # onto a running Ray cluster

Called by users and the CLI; imports the client classes (for ``admin()``/``producer()``/``consumer()``),
rafka/client_utils.py (finding the cluster) and, in ``start()``, actors/bootstrap.py.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from protocol.names import RAY_NAMESPACE, controller_name
from rafka.admin.admin import Admin
from rafka.client_utils import DEFAULT_CLUSTER, attach, bootstrap_servers, metrics_url
from rafka.consumer.consumer import Consumer
from rafka.output import quiet_worker_pool_warnings
from rafka.producer.producer import Producer
from rafka.ray_session import start_local_ray

__all__ = ["LocalCluster", "ClusterHandle", "Deployment", "connect", "deploy", "DEFAULT_CLUSTER", "WORKER_NICENESS"]

# The nice value of the worker processes on a node that rafka starts (LocalCluster, `rafka cluster start`),
# Ray's ``worker_niceness``: Kafka's brokers run at the normal priority (Ray's default is 15; the
# measurements are in docs/internals.md, cost model).
WORKER_NICENESS = 0


class ClusterHandle:
    """A connection to a running rafka cluster: its name and the Ray address it lives on, and the clients
    made for it."""

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
        """The brokers' Kafka listeners (``listeners`` config; 127.0.0.1:9092+id by default), ``host:port,...``:
        the ``bootstrap.servers`` of kcat, confluent-kafka, kafka-python and the other Kafka clients."""
        return bootstrap_servers(self.name)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus scrape URL (docs/metrics.md), None when the exporter is off."""
        return metrics_url(self.name)

    def admin(self, **config) -> Admin:
        return Admin(self, **config)

    def producer(self, **config) -> Producer:
        return Producer(self, **config)

    def consumer(self, **config) -> Consumer:
        return Consumer(self, **config)


def connect(address: str | None = None, cluster: str | None = None, timeout_s: float = 5.0) -> ClusterHandle:
    """Attach to a running cluster. ``address``: a Ray address (``host:port``), ``"auto"``, or
    ``ray://host:10001`` (Ray Client, e.g. from a notebook outside the cluster); by default
    ``RAY_ADDRESS``, else the head recorded by ``rafka cluster start``, else ``"auto"``.
    Raises ``ClusterNotFoundError`` (a ``ConnectionError``) when there is no such cluster."""
    return ClusterHandle(*attach(address, cluster, timeout_s))


class Deployment(ClusterHandle):
    """A rafka cluster this process started on a Ray cluster it did not start (``deploy``): ``stop()`` stops
    the rafka actors it started there and leaves Ray running."""

    def __init__(self, name: str, address: str | None, server, data_dir: str):
        super().__init__(name, address)
        self.server, self.data_dir = server, data_dir

    def stop(self) -> None:
        """Stop the brokers, the controller and the exporter (logs closed cleanly); Ray keeps running."""
        if self.server is not None:
            self.server.shutdown()
            self.server = None

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def deploy(
    address: str | None = None,
    brokers: int = 3,
    data_dir: str = "/var/lib/rafka",
    name: str = DEFAULT_CLUSTER,
    broker_config: dict | None = None,
    brokers_per_node: int | None = None,
    node_label: str | None = None,
    node_resource: str | None = None,
) -> Deployment:
    """Start a rafka cluster on a running Ray cluster (``rafka cluster start --address``): ``brokers`` brokers,
    one per node while a chosen node has none (``brokers_per_node`` caps it), on the nodes with ``node_label``
    (``key`` or ``key=value``) or ``node_resource``; each broker's log directory is ``data_dir`` on its own
    node (a node's ``RAFKA_DATA_DIR`` wins). ``address``: as ``connect``'s (default ``RAY_ADDRESS``, else
    ``auto``). Raises ``ClusterNotFoundError`` when no Ray answers there, ``ClusterAlreadyRunningError``
    when a rafka cluster of that name runs there, ``InvalidConfigError`` when no node matches."""
    import ray

    from actors.bootstrap import start_cluster
    from actors.server.broker_placement import BrokerPlacement
    from rafka.ray_session import attach_ray

    if not ray.is_initialized():
        address = attach_ray(address or os.environ.get("RAY_ADDRESS") or "auto")
    placement = BrokerPlacement(node_label, node_resource, brokers_per_node)
    server = start_cluster(
        name, brokers, str(data_dir), broker_config=broker_config or None, placement=placement, supervise=True
    )
    return Deployment(name, address or ray.get_runtime_context().gcs_address, server, str(data_dir))


class LocalCluster(ClusterHandle):
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
        super().__init__(name, None)
        self.num_brokers = brokers
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

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalCluster(name={self.name!r}, brokers={self.num_brokers}, data_dir={self.data_dir!r})"
