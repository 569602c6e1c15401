"""Start and stop a rafka cluster from a Ray driver (tests, benchmarks, the client's LocalCluster):
``start_cluster`` creates and starts the brokers and the metrics exporter and returns a ``ServerHandle``.
Blocking ``ray.get``: call it from a driver, never inside an async actor. Creates actors/broker.py and
actors/metrics_exporter.py. docs/internals.md ("Bootstrap") has what it waits for.
"""

from __future__ import annotations

import logging
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker import RemoteBroker
from actors.channels.replica_lookup import replica_handle
from actors.metadata.kv import GcsKV
from actors.metrics_exporter import start_exporter, stop_exporter
from protocol.errors import CoordinatorNotAvailableError, raise_for_code
from protocol.names import RAY_NAMESPACE, broker_name, controller_name

log = logging.getLogger("rafka.bootstrap")


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
        self, cluster: str, num_brokers: int, data_dir: str, broker_config: dict | None, node_ids: list[str] | None
    ):
        self.cluster, self.num_brokers, self.data_dir = cluster, num_brokers, data_dir
        self.broker_config = dict(broker_config or {})
        self.node_ids = list(node_ids) if node_ids else None
        self.brokers: dict[int, object] = {}
        self.timings: dict[str, float] = {}
        self.exporter = None  # the Prometheus exporter actor (start_cluster starts it)

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
        node = self.node_ids[i] if self.node_ids else None
        self.kill_broker(i)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                h = _broker_options(self.cluster, i, node).remote(self.cluster, i, self.data_dir, self.broker_config)
                break
            except ValueError:  # the killed incarnation still holds the name for a moment
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.brokers[i] = h
        return ray.get(h.start.remote(), timeout=timeout_s)

    def metrics_url(self, timeout_s: float = 60.0) -> str | None:
        """The Prometheus scrape URL (``http://host:port/metrics``), once the exporter has bound it; None
        when the exporter is off."""
        if self.exporter is None:
            return None
        return ray.get(self.exporter.metrics_url.remote(), timeout=timeout_s)

    # ---- shutdown ---------------------------------------------------------------------------------
    def shutdown(self, clear_kv: bool = True) -> None:
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


def start_cluster(
    cluster: str,
    num_brokers: int,
    data_dir: str,
    broker_config: dict | None = None,
    node_ids: list[str] | None = None,
    timeout_s: float = 120.0,
) -> ServerHandle:
    t0 = time.monotonic()
    ch = ServerHandle(cluster, num_brokers, data_dir, broker_config, node_ids)
    for i in range(num_brokers):
        node = node_ids[i] if node_ids else None
        ch.brokers[i] = _broker_options(cluster, i, node).remote(cluster, i, data_dir, ch.broker_config)
    try:
        ray.get([h.start.remote() for h in ch.brokers.values()], timeout=timeout_s)
        ch.wait_for(
            lambda md: {b["id"] for b in md["brokers"] if b["alive"]} >= set(range(num_brokers)),
            timeout_s,
            what="every broker registered",
        )
    except BaseException:
        ch.shutdown()
        raise
    ch.exporter = start_exporter(cluster, ch.broker_config)
    ch.timings["start_s"] = time.monotonic() - t0
    return ch
