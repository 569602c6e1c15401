"""A deployment's broker supervisor (a StatefulSet's job, which Kafka leaves to its operators): one detached actor
per cluster that starts a broker again on its machine when that machine's Ray node comes back after a loss, on
the broker's own log directory (whatever the disk still holds). Started by actors/bootstrap.py for clusters
deployed onto a Ray cluster; Ray restarts it on another node if its own node is lost. Decides with
actors/server/broker_placement.py ``returned_nodes``; docs/deploying.md ("Node loss") has the rules.
"""

from __future__ import annotations

import logging
import threading
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker import RemoteBroker
from actors.server.broker_placement import RayNode, returned_nodes
from protocol.names import RAY_NAMESPACE, broker_name

log = logging.getLogger("rafka.supervisor")

CHECK_INTERVAL_S = 1.0
START_TIMEOUT_S = 120.0


def supervisor_name(cluster: str) -> str:
    return f"{cluster}:broker-supervisor"


class BrokerSupervisor:
    """``homes``: each broker's node when the cluster started (id, address); the broker constructor's other
    arguments are the cluster's. Checks from a thread of its own, started in ``__init__`` (so a supervisor Ray
    restarts elsewhere checks again at once); ``restarts`` records each start it made (broker, address, seconds)."""

    def __init__(self, cluster: str, data_dir: str, config: dict, homes: dict, node_indexes: dict):
        self.cluster, self.data_dir, self.config = cluster, data_dir, dict(config)
        self.homes = {int(b): RayNode(h["node_id"], h["address"]) for b, h in homes.items()}
        self.node_indexes = {int(b): int(i) for b, i in node_indexes.items()}
        self.restarts: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="broker-supervisor", daemon=True)
        self._thread.start()

    def status(self) -> dict:
        return {"homes": {b: [h.node_id, h.address] for b, h in self.homes.items()}, "restarts": list(self.restarts)}

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=START_TIMEOUT_S)
        return {"error_code": 0}

    def _loop(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            try:
                self.check_once()
            except Exception:  # noqa: BLE001 - the GCS recovering, a node flapping: try again next round
                log.exception("broker supervisor of %s: check failed", self.cluster)

    def check_once(self) -> list[int]:
        nodes = [RayNode.from_ray(n) for n in ray.nodes() if n.get("Alive")]
        running = {b for b in self.homes if self._broker_alive(b)}
        todo = returned_nodes(self.homes, nodes, running)
        for b, node in sorted(todo.items()):
            if not self._stop.is_set():
                self._restart(b, node)
        return sorted(todo)

    def _broker_alive(self, b: int) -> bool:
        try:
            h = ray.get_actor(broker_name(self.cluster, b), namespace=RAY_NAMESPACE)
        except ValueError:
            return False
        try:
            ray.get(h.ping.remote(), timeout=5.0)
            return True
        except (RayActorError, GetTimeoutError):
            return False

    def _restart(self, b: int, node: RayNode) -> None:
        t0 = time.monotonic()
        try:  # a dead incarnation holds the name while a handle to it lives: kill it to free the name
            ray.kill(ray.get_actor(broker_name(self.cluster, b), namespace=RAY_NAMESPACE), no_restart=True)
        except ValueError:
            pass
        deadline = t0 + START_TIMEOUT_S
        while True:
            try:
                h = RemoteBroker.options(
                    name=broker_name(self.cluster, b),
                    namespace=RAY_NAMESPACE,
                    lifetime="detached",
                    num_cpus=0,
                    max_concurrency=1000,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False),
                ).remote(self.cluster, b, self.data_dir, self.config, self.node_indexes.get(b, 0))
                break
            except ValueError:  # the name is not free yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        info = ray.get(h.start.remote(), timeout=START_TIMEOUT_S)
        self.homes[b] = node
        took = time.monotonic() - t0
        self.restarts.append({"broker": b, "address": node.address, "seconds": round(took, 3)})
        log.info("broker %d started again on %s (node %s) in %.2f s: %s", b, node.address, node.node_id, took, info)

    def ping(self) -> int:
        return 1


RemoteBrokerSupervisor = ray.remote(BrokerSupervisor)
