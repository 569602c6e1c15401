"""Start and stop a rafka cluster from a Ray driver (tests, benchmarks, the client's LocalCluster):
``start_cluster`` creates and starts the brokers and the metrics exporter and returns a ``ServerHandle``.
Blocking ``ray.get``: call it from a driver, never inside an async actor. Creates actors/broker.py and
actors/metrics_exporter.py. docs/internals.md ("Bootstrap") has what it waits for.
"""

from __future__ import annotations

import contextlib
import logging
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker import RemoteBroker
from actors.broker_supervisor import RemoteBrokerSupervisor, supervisor_name
from actors.channels.replica_lookup import replica_handle
from actors.metadata.kv import GcsKV
from actors.metrics_exporter import start_exporter, stop_exporter
from actors.server.broker_placement import BrokerPlacement, RayNode, node_indexes, place_brokers
from protocol.errors import ClusterAlreadyRunningError, CoordinatorNotAvailableError, KafkaError, raise_for_code
from protocol.names import RAY_NAMESPACE, broker_name, controller_name, metrics_exporter_name

log = logging.getLogger("rafka.bootstrap")


def alive_nodes() -> list[RayNode]:
    return [RayNode.from_ray(n) for n in ray.nodes() if n.get("Alive")]


def plan_nodes(
    num_brokers: int, placement: BrokerPlacement | None, node_ids: list[str] | None
) -> tuple[list[str], list[int], list[str]]:
    """``(node id, index on that node, node address)`` of each broker: ``node_ids`` as given, else
    ``placement`` (actors/server/broker_placement.py) over the alive nodes."""
    nodes = alive_nodes()
    if node_ids:
        by_id = {n.node_id: n for n in nodes}
        assigned = [by_id.get(nid, RayNode(nid, "")) for nid in node_ids[:num_brokers]]
    else:
        assigned = place_brokers(nodes, num_brokers, placement or BrokerPlacement())
    return [n.node_id for n in assigned], node_indexes(assigned), [n.address for n in assigned]


def check_name_free(cluster: str) -> None:
    """A second rafka cluster of one name on one Ray cluster would share actor names and KV keys: refused."""
    names = (
        controller_name(cluster),
        broker_name(cluster, 0),
        metrics_exporter_name(cluster),
        supervisor_name(cluster),
    )
    for name in names:
        try:
            ray.get_actor(name, namespace=RAY_NAMESPACE)
        except ValueError:
            continue
        raise ClusterAlreadyRunningError(
            f"a rafka cluster named {cluster!r} is already running on this Ray cluster (its actor {name!r} "
            "exists): stop it first, or choose another name"
        )


def _broker_options(cluster: str, broker_id: int, node_id: str | None):
    opts = {
        "name": broker_name(cluster, broker_id),
        "namespace": RAY_NAMESPACE,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_concurrency": 1000,
    }
    if node_id is not None:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    return RemoteBroker.options(**opts)


class ServerHandle:
    """The server side of a running cluster from a driver: its broker actors, controller, waits and faults
    (the client's ``rafka.ClusterHandle`` is only a cluster name and an address)."""

    def __init__(
        self,
        cluster: str,
        num_brokers: int,
        data_dir: str,
        broker_config: dict | None,
        node_ids: list[str] | None,
        node_indexes: list[int] | None = None,
        node_addresses: list[str] | None = None,
    ):
        self.cluster, self.num_brokers, self.data_dir = cluster, num_brokers, data_dir
        self.broker_config = dict(broker_config or {})
        self.node_ids = list(node_ids) if node_ids else None
        self.node_indexes = list(node_indexes) if node_indexes else [0] * num_brokers
        self.node_addresses = list(node_addresses) if node_addresses else None
        self.brokers: dict[int, object] = {}
        self.timings: dict[str, float] = {}
        self.exporter = None  # the Prometheus exporter actor (start_cluster starts it)

    @classmethod
    def of_running(cls, cluster: str, num_brokers: int, data_dir: str = "") -> "ServerHandle":
        """A handle on a cluster another process started (its brokers looked up by name; those down are left out),
        e.g. to stop it."""
        ch = cls(cluster, num_brokers, data_dir, None, None)
        for i in range(num_brokers):
            try:
                ch.brokers[i] = ray.get_actor(broker_name(cluster, i), namespace=RAY_NAMESPACE)
            except ValueError:
                continue
        return ch

    # ---- lookups ----------------------------------------------------------------------------------
    def controller(self, timeout_s: float = 30.0):
        """The current controller's handle (looked up by name: it changes on failover). One that does not
        answer within a second (frozen, or being replaced) is looked up again."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                h = ray.get_actor(controller_name(self.cluster), namespace=RAY_NAMESPACE)
                ray.get(h.ping.remote(), timeout=min(1.0, max(0.05, deadline - time.monotonic())))
                return h
            except (ValueError, RayActorError, GetTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def broker(self, i: int):
        return self.brokers[i]

    def _ask_controller(self, method: str, *args, timeout_s: float = 30.0):
        """One controller call, asked again of the next controller if this one dies under it (failover)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return ray.get(getattr(self.controller(timeout_s), method).remote(*args))
            except RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def metadata(self) -> dict:
        return self._ask_controller("metadata")

    def describe(self, topic: str) -> dict:
        return self._ask_controller("describe_topics", [topic])[0]

    def leader_replica(self, topic: str, partition: int):
        s = self.describe(topic)["partitions"][partition]
        if s["leader"] < 0:
            return None
        return replica_handle(self.cluster, topic, partition, s["leader"])

    def replica(self, topic: str, partition: int, broker_id: int):
        """Broker ``broker_id``'s replica actor of the partition (actors/channels/replica_lookup.py); ValueError if
        it hosts none."""
        return replica_handle(self.cluster, topic, partition, broker_id)

    def find_coordinator(self, group_id: str, timeout_s: float = 30.0) -> dict:
        """FindCoordinator through any live broker, retried while the group's offsets partition has no
        leader (COORDINATOR_NOT_AVAILABLE); the first call creates ``__consumer_offsets``."""
        deadline = time.monotonic() + timeout_s
        last = None
        while True:
            for i in sorted(self.brokers):
                try:
                    last = ray.get(self.brokers[i].find_coordinator.remote(group_id), timeout=timeout_s)
                except (RayActorError, GetTimeoutError):
                    continue
                if last["error_code"] == 0:
                    return last
                if last["error_code"] != CoordinatorNotAvailableError.code:
                    raise_for_code(last["error_code"], last["error_message"])
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.cluster}: no coordinator for group {group_id!r}: {last}")
            time.sleep(0.05)

    def group_coordinator(self, group_id: str, timeout_s: float = 30.0):
        """``(handle, find_coordinator answer)`` of the actor coordinating ``group_id``. A name not (yet)
        registered -- metadata names the new leader before its broker has applied the LeaderAndIsr -- is
        Kafka's NOT_COORDINATOR: find again."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.find_coordinator(group_id, timeout_s)
            try:
                return ray.get_actor(info["coordinator"], namespace=RAY_NAMESPACE), info
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # ---- admin ------------------------------------------------------------------------------------
    def create_topic(
        self, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None, timeout_ms: int = 60000
    ) -> dict:
        res = ray.get(
            self.controller().create_topics.remote(
                [{"name": name, "num_partitions": partitions, "replication_factor": rf, "configs": configs or {}}],
                timeout_ms,
            )
        )[0]
        raise_for_code(res["error_code"], res["error_message"])
        return res

    def delete_topic(self, name: str) -> dict:
        res = ray.get(self.controller().delete_topics.remote([name]))[0]
        raise_for_code(res["error_code"], res["error_message"])
        return res

    def wait_for(self, predicate, timeout_s: float = 30.0, interval_s: float = 0.05, what: str = "condition"):
        """Poll ``predicate(metadata)`` until truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                v = predicate(self.metadata())
            except (RayActorError, ValueError, GetTimeoutError):  # controller failing over
                v = None
            if v:
                return v
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.cluster}: timed out waiting for {what}")
            time.sleep(interval_s)

    # ---- faults -----------------------------------------------------------------------------------
    def kill_broker(self, i: int) -> None:
        """Kill broker ``i``'s process (its replicas, and the controller if it hosts it, die with it)."""
        h = self.brokers.get(i)
        if h is not None:
            ray.kill(h, no_restart=True)

    def restart_broker(self, i: int, timeout_s: float = 60.0) -> dict:
        """Start broker ``i`` again on the same directory (after ``kill_broker``, or after its process was
        killed: the dead actor's handle is killed first, which frees its name at once)."""
        node = self.node_of(i)
        self.kill_broker(i)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                h = _broker_options(self.cluster, i, node).remote(
                    self.cluster, i, self.data_dir, self.broker_config, self.node_indexes[i]
                )
                break
            except ValueError:  # the killed incarnation still holds the name for a moment
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.brokers[i] = h
        return ray.get(h.start.remote(), timeout=timeout_s)

    def node_of(self, i: int) -> str | None:
        """The node broker ``i`` starts on again: its node, or the alive node now at that node's address (a
        machine whose Ray node was started again has a new node id); None when none is known."""
        if not self.node_ids:
            return None
        nid = self.node_ids[i]
        nodes = alive_nodes()
        if any(n.node_id == nid for n in nodes) or not self.node_addresses:
            return nid
        same = [n.node_id for n in nodes if n.address == self.node_addresses[i]]
        if same:
            self.node_ids[i] = same[0]
            return same[0]
        return nid

    def metrics_url(self, timeout_s: float = 60.0) -> str | None:
        """The Prometheus scrape URL (``http://host:port/metrics``), once the exporter has bound it; None
        when the exporter is off."""
        if self.exporter is None:
            return None
        return ray.get(self.exporter.metrics_url.remote(), timeout=timeout_s)

    # ---- shutdown ---------------------------------------------------------------------------------
    def shutdown(self, clear_kv: bool = True) -> None:
        try:  # first: nothing starts a broker again while they stop
            sup = ray.get_actor(supervisor_name(self.cluster), namespace=RAY_NAMESPACE)
            with contextlib.suppress(Exception):
                ray.get(sup.stop.remote(), timeout=10)
            ray.kill(sup, no_restart=True)
            del sup
        except ValueError:
            pass
        self.exporter = None  # no handle held while it dies: its name is freed at once
        stop_exporter(self.cluster)
        live = []
        for h in self.brokers.values():
            try:
                ray.get(h.prepare_shutdown.remote(), timeout=10)
                live.append(h)
            except Exception:  # noqa: BLE001 - a dead broker has nothing to stop
                continue
        try:
            ctl = ray.get_actor(controller_name(self.cluster), namespace=RAY_NAMESPACE)
        except ValueError:  # no controller left (its host broker is gone)
            ctl = None
        if ctl is not None:
            try:
                ray.get(ctl.shutdown.remote(), timeout=10)
            except Exception as e:  # noqa: BLE001 - it is being killed anyway
                log.info("controller shutdown of %s: %s", self.cluster, e)
            ray.kill(ctl, no_restart=True)
        for h in live:
            try:
                ray.get(h.shutdown.remote(), timeout=30)
            except Exception:  # noqa: BLE001
                continue
        for h in self.brokers.values():
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001
                continue
        self.brokers.clear()
        if clear_kv:
            GcsKV(self.cluster).clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


class BrokerStartError(KafkaError):
    """A broker of the cluster did not start; the message names it and says why (its own error's words)."""

    code, name, retriable = -1, "BROKER_START_FAILED", False


def _await_starts(brokers: dict[int, object], timeout_s: float) -> None:
    """Every broker's ``start``; the first failure raises BrokerStartError with the broker's own message
    (a held log directory, a listener that cannot bind) rather than Ray's traceback, and the broker's
    Kafka error (KafkaStorageError for a held directory) as its ``__cause__``."""
    refs = {i: h.start.remote() for i, h in brokers.items()}
    ready, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    for i, ref in refs.items():
        if ref in pending:
            raise BrokerStartError(f"broker {i} did not start within {timeout_s:.0f} s")
        try:
            ray.get(ref)
        except (RayTaskError, RayActorError) as e:
            cause = e.cause if isinstance(e, RayTaskError) and e.cause is not None else e
            raise BrokerStartError(f"broker {i} did not start: {_first_line(cause)}") from (
                cause if isinstance(cause, KafkaError) else None
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    last = [ln for ln in text.splitlines() if ln.strip()]
    return last[-1] if last else type(exc).__name__


def start_cluster(
    cluster: str,
    num_brokers: int,
    data_dir: str,
    broker_config: dict | None = None,
    node_ids: list[str] | None = None,
    timeout_s: float = 120.0,
    placement: BrokerPlacement | None = None,
    supervise: bool = False,
) -> ServerHandle:
    """Start ``num_brokers`` brokers (each on its node: ``node_ids``, else ``placement``) and the exporter;
    returns once every broker has registered and the exporter has bound its listener. A broker that cannot
    start (its log directory held, a listener that cannot bind) fails the start with its own error, and
    everything started is stopped again. ``supervise``: a broker supervisor starts a broker again on its machine
    when the machine's Ray node comes back after a loss (actors/broker_supervisor.py; deployments use it)."""
    t0 = time.monotonic()
    check_name_free(cluster)
    nodes, indexes, addresses = plan_nodes(num_brokers, placement, node_ids)
    ch = ServerHandle(cluster, num_brokers, data_dir, broker_config, nodes, indexes, addresses)
    try:
        for i in range(num_brokers):
            ch.brokers[i] = _broker_options(cluster, i, nodes[i]).remote(
                cluster, i, data_dir, ch.broker_config, indexes[i]
            )
        ch.exporter = start_exporter(cluster, ch.broker_config)  # binds while the brokers start
        _await_starts(ch.brokers, timeout_s)
        ch.wait_for(
            lambda md: {b["id"] for b in md["brokers"] if b["alive"]} >= set(range(num_brokers)),
            timeout_s,
            what="every broker registered",
        )
        ch.metrics_url(timeout_s)
        if supervise:
            homes = {i: {"node_id": nodes[i], "address": addresses[i]} for i in range(num_brokers)}
            sup = RemoteBrokerSupervisor.options(
                name=supervisor_name(cluster),
                namespace=RAY_NAMESPACE,
                lifetime="detached",
                num_cpus=0,
                max_restarts=-1,
                max_task_retries=-1,
                # beside the driver that deployed (the head, for the CLI): Ray moves it if that node is lost
                scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True),
            ).remote(cluster, data_dir, ch.broker_config, homes, dict(enumerate(indexes)))
            ray.get(sup.ping.remote(), timeout=timeout_s)
    except BaseException:
        ch.shutdown()
        raise
    ch.timings["start_s"] = time.monotonic() - t0
    return ch
