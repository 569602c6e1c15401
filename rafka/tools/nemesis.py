"""The nemesis of ``rafka verify``: real faults injected into a running cluster, the way crashes look.

Every fault acts on OS processes, not only on Ray's bookkeeping: the pid of an actor's worker process
comes from GCS's actor table (``Pid``, ``NodeID``), and the signal is sent from this process when the
actor lives on this node, else from a zero-CPU Ray task pinned to the actor's node.

Kinds (``KINDS``):

- ``broker-kill``: SIGKILL a broker's worker process (its replicas, and the controller if it hosts it, die
  with it: fate-sharing), keep it down ``down_s``, then start it again on its log directory.
- ``replica-kill``: SIGKILL the worker process of one partition replica (the leader two times in three,
  else a follower); nothing restarts it but the cluster itself (its broker's supervision).
- ``controller-kill``: SIGKILL the controller's worker process.
- ``pause``: SIGSTOP a broker, a leader replica or the controller for ``pause_s``, then SIGCONT (a GC
  pause, a hung disk, a VM migration).
- ``restart``: SIGKILL every broker at once (a power cut of the whole cluster), then start them all
  again on their directories.

``Nemesis.inject(kind)`` returns a ``Fault`` with what was hit; ``Nemesis.heal(fault)`` ends what the
fault left behind (SIGCONT; starting killed brokers again). Only the driver thread calls a Nemesis.
"""

from __future__ import annotations

import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from actors.channels.replica_lookup import replica_handle
from protocol.names import broker_id_of, cluster_prefix, controller_name, replica_name

__all__ = ["KINDS", "Fault", "Nemesis", "actor_processes"]

KINDS = ("broker-kill", "replica-kill", "controller-kill", "pause", "restart")


@dataclass
class Fault:
    kind: str
    target: str  # what was hit: an actor name, or "all brokers"
    at: float  # time.monotonic() when the fault struck
    pids: list[int] = field(default_factory=list)
    healed_at: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def actor_processes(prefix: str) -> dict[str, tuple[int, str]]:
    """``{actor name: (pid, node id)}`` of the alive actors whose name starts with ``prefix`` (GCS's actor
    table: no dashboard needed)."""
    import ray

    table = ray._private.state.state.actor_table(None, actor_state_name="ALIVE")
    return {
        v["Name"]: (int(v["Pid"]), v["Address"]["NodeID"])
        for v in table.values()
        if v.get("Name", "").startswith(prefix) and v.get("Pid")
    }


def actor_process(handle) -> tuple[int, str] | None:
    """``(pid, node id)`` of an alive actor's worker process (GCS's actor table), or None."""
    import ray

    from actors.replica_host import process_handle  # a hosted replica's process is its host's

    info = ray._private.state.state.actor_table(process_handle(handle)._actor_id.hex())
    if not info or info.get("State") != "ALIVE" or not info.get("Pid"):
        return None
    return int(info["Pid"]), info["Address"]["NodeID"]


def _remote_kill(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def send_signal(pid: int, node_id: str, sig: int) -> bool:
    """Signal ``pid`` on ``node_id`` (locally, or through a task pinned to that node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if node_id == ray.get_runtime_context().get_node_id():
        return _remote_kill(pid, sig)
    task = ray.remote(num_cpus=0, max_retries=0)(_remote_kill).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    )
    return bool(ray.get(task.remote(pid, sig), timeout=30))


class Nemesis:
    """Faults against cluster ``name``; ``server`` is its ``actors.bootstrap.ServerHandle`` (it starts
    killed brokers again), ``admin`` a ``rafka.Admin`` (leaders and replicas of ``topic``)."""

    def __init__(
        self,
        name: str,
        server: Any,
        admin: Any,
        topic: str,
        rng: random.Random,
        down_s: float = 3.0,
        pause_s: float = 8.0,
    ):
        self.name, self.server, self.admin, self.topic = name, server, admin, topic
        self.rng, self.down_s, self.pause_s = rng, down_s, pause_s

    # -- targets -----------------------------------------------------------------------------------
    def _procs(self) -> dict[str, tuple[int, str]]:
        return actor_processes(cluster_prefix(self.name))

    def _brokers(self, procs) -> dict[int, str]:
        out = {}
        for n in procs:
            broker_id = broker_id_of(self.name, n)
            if broker_id is not None:
                out[broker_id] = n
        return out

    def _controller(self, procs) -> str | None:
        name = controller_name(self.name)
        return name if name in procs else None

    def _replica(self, procs, leader: bool) -> str | None:
        """A live replica of the topic (its leader, else a follower), labelled ``replica_name(...)`` and
        added to ``procs``: replicas are unnamed, found through their brokers (actors/channels/replica_lookup.py)."""
        parts = self.admin.describe_topics([self.topic])[0]["partitions"]
        choices = []
        for p in parts:
            ids = [p["leader"]] if leader else [b for b in p["replicas"] if b != p["leader"]]
            for b in ids:
                if b < 0:
                    continue
                label = replica_name(self.name, self.topic, p["partition"], b)
                try:
                    proc = actor_process(replica_handle(self.name, self.topic, p["partition"], b, timeout_s=5.0))
                except ValueError:
                    continue
                if proc is not None:
                    procs[label] = proc
                    choices.append(label)
        return self.rng.choice(choices) if choices else None

    # -- faults ------------------------------------------------------------------------------------
    def _kill(self, procs, name: str) -> int:
        pid, node = procs[name]
        send_signal(pid, node, signal.SIGKILL)
        return pid

    def _kill_brokers(self, ids: list[int], procs) -> list[int]:
        import ray

        brokers, pids = self._brokers(procs), []
        for i in ids:
            if i in brokers:
                pids.append(self._kill(procs, brokers[i]))
            h = self.server.brokers.get(i)
            if h is not None:  # free the dead actor's name for the restart (ray-notes: a held handle keeps it)
                try:
                    ray.kill(h, no_restart=True)
                except Exception:  # noqa: BLE001 - it is dead already
                    pass
        return pids

    def inject(self, kind: str) -> Fault:
        procs, now = self._procs(), time.monotonic
        if kind == "broker-kill":
            ids = sorted(self._brokers(procs))
            if not ids:
                raise RuntimeError("no live broker to kill")
            i = self.rng.choice(ids)
            f = Fault(kind, f"broker-{i}", now(), detail={"broker_ids": [i]})
            f.pids = self._kill_brokers([i], procs)
        elif kind == "replica-kill":
            name = self._replica(procs, leader=self.rng.random() < 2 / 3) or self._replica(procs, leader=True)
            if name is None:
                raise RuntimeError(f"no live replica of {self.topic}")
            f = Fault(kind, name[len(self.name) + 1 :], now())
            f.pids = [self._kill(procs, name)]
        elif kind == "controller-kill":
            name = self._controller(procs)
            if name is None:
                raise RuntimeError("no live controller")
            f = Fault(kind, name[len(self.name) + 1 :], now())
            f.pids = [self._kill(procs, name)]
        elif kind == "pause":
            options = [n for n in (self._controller(procs), self._replica(procs, True)) if n]
            options += list(self._brokers(procs).values())
            name = self.rng.choice(options)
            pid, node = procs[name]
            f = Fault(kind, name[len(self.name) + 1 :], now(), [pid], detail={"node": node, "pause_s": self.pause_s})
            send_signal(pid, node, signal.SIGSTOP)
        elif kind == "restart":
            ids = sorted(self.server.brokers)
            f = Fault(kind, "all brokers", now(), detail={"broker_ids": ids})
            f.pids = self._kill_brokers(ids, procs)
        else:
            raise ValueError(f"unknown fault kind {kind!r}: expected one of {', '.join(KINDS)}")
        return f

    def heal(self, fault: Fault) -> None:
        """Undo what the fault left: SIGCONT after ``pause_s``, start killed brokers again after ``down_s``."""
        if fault.kind == "pause":
            time.sleep(max(0.0, fault.at + self.pause_s - time.monotonic()))
            send_signal(fault.pids[0], fault.detail["node"], signal.SIGCONT)
        elif fault.kind in ("broker-kill", "restart"):
            time.sleep(max(0.0, fault.at + self.down_s - time.monotonic()))
            ids = fault.detail["broker_ids"]
            # all at once: after a whole-cluster crash the first broker back elects a controller that
            # waits for the others' registrations, as a real cluster restarting
            with ThreadPoolExecutor(len(ids)) as pool:
                list(pool.map(self.server.restart_broker, ids))
        fault.healed_at = time.monotonic()
