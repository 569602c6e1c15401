"""A broker's replica hosts (``replica.host.max.partitions`` > 1): ``ReplicaHosts`` places replicas in fresh
slots of ``ReplicaHost`` processes, keeps one host with room started ahead of need (the warm host), and
watches and retires hosts. Used by the broker shell on its event loop in place of the warm pool; creates
actors/replica_host.py. docs/internals.md ("Replica hosts") has how and why.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import cast

import ray
from ray.actor import ActorClass
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.replica_host import HostedReplica, ReplicaHost

# ray.remote's stubs lack ``concurrency_groups``, so mypy sees ReplicaHost as the undecorated class
_HOST_ACTOR = cast(ActorClass, ReplicaHost)

log = logging.getLogger("rafka.broker")

HOST_MAX_CONCURRENCY = 10000  # parked calls of every hosted replica (supervise, long-polls) plus the answers


class _HostEntry:
    def __init__(self, handle) -> None:
        self.handle = handle
        self.slots: set[int] = set()
        self.pid: int | None = None
        self.retired = False  # ended by the broker (empty while another host has room): no death
        self.watch: asyncio.Task | None = None


class ReplicaHosts:
    def __init__(self, broker, max_partitions: int):
        self.b = broker
        self.max = max(1, int(max_partitions))
        self.hosts: list[_HostEntry] = []  # the live ones: a dead or retired host leaves the list
        self._slot = itertools.count(1)
        self._closed = False
        self.stats = {"hosts_started": 0, "hosts_died": 0, "hosts_retired": 0, "taken": 0, "ended": 0}

    # ---- hosts ----------------------------------------------------------------------------------------
    def _start(self) -> _HostEntry:
        h = _HostEntry(
            _HOST_ACTOR.options(
                num_cpus=0,
                max_concurrency=HOST_MAX_CONCURRENCY,
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.b.node_id, soft=False),
            ).remote()
        )
        self.hosts.append(h)
        self.stats["hosts_started"] += 1
        h.watch = asyncio.get_running_loop().create_task(self._watch(h))
        return h

    async def _watch(self, h: _HostEntry) -> None:
        try:
            h.pid = await h.handle.ping.remote()
            await h.handle.preload.remote(self.b.cluster, self.b.broker_id)
            await h.handle.supervise.remote()
        except asyncio.CancelledError:
            return
        except (RayActorError, RayTaskError) as e:
            if h.retired:
                return
            if not self._closed and not self.b.stopping:
                log.warning(
                    "broker %s: replica host (pid %s, %d replicas) died: %s",
                    self.b.broker_id,
                    h.pid,
                    len(h.slots),
                    type(e).__name__,
                )
            self.stats["hosts_died"] += 1
        self.hosts = [x for x in self.hosts if x is not h]
        self.fill()

    def _host_of(self, handle) -> _HostEntry | None:
        if isinstance(handle, HostedReplica):
            for h in self.hosts:
                if h.handle._actor_id == handle.host._actor_id:
                    return h
        return None

    # ---- the pool's calls -----------------------------------------------------------------------------
    def take(self) -> HostedReplica:
        """A fresh slot in the live host with the fewest replicas that has room (a new host if none has)."""
        room = [h for h in self.hosts if len(h.slots) < self.max]
        host = min(room, key=lambda h: len(h.slots)) if room else self._start()
        slot = next(self._slot)
        host.slots.add(slot)
        self.stats["taken"] += 1
        return HostedReplica(host.handle, slot)

    def bound(self) -> None:
        self.fill()

    def end(self, handle) -> None:
        """The broker gave ``handle`` up: drop its slot (the host lives on)."""
        h = self._host_of(handle)
        if h is not None:
            h.slots.discard(handle.slot)
        self.stats["ended"] += 1
        try:
            handle.host.drop.remote(handle.slot)
        except Exception as e:  # noqa: BLE001 - the host is gone: so is the slot
            log.debug("drop of a hosted replica: %s", e)
        if h is not None and not h.slots and any(x is not h and len(x.slots) < self.max for x in self.hosts):
            self._retire(h)  # an empty host while another has room: one spare is enough

    def _retire(self, h: _HostEntry) -> None:
        h.retired = True
        self.hosts = [x for x in self.hosts if x is not h]
        self.stats["hosts_retired"] += 1
        try:
            ray.kill(h.handle, no_restart=True)
        except Exception as e:  # noqa: BLE001 - already gone
            log.debug("ray.kill of a replica host: %s", e)

    def fill(self) -> None:
        """Keep one live host with room (started in the background)."""
        if self._closed or self.b.stopping:
            return
        if not any(len(h.slots) < self.max for h in self.hosts):
            self._start()

    def describe(self) -> dict:
        """``{max_partitions, hosts: [{pid, replicas}], size: 1, ready, ...stats}``: in the warm pool's terms,
        ``ready`` counts the started hosts with room (their pid answered), ``size`` the one spare kept."""
        hosts = [{"pid": h.pid, "replicas": len(h.slots)} for h in self.hosts]
        ready = sum(1 for h in self.hosts if h.pid is not None and len(h.slots) < self.max)
        return {"max_partitions": self.max, "hosts": hosts, "size": 1, "ready": ready, **self.stats}

    def shutdown(self) -> None:
        """Kill the hosts that hold no replica; no new host after this."""
        self._closed = True
        for h in list(self.hosts):
            if not h.slots:
                self._retire(h)
