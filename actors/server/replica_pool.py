"""A broker's warm pool of unbound replica actors (``replica.warm.pool.size``, with
``replica.host.max.partitions`` = 1): ``ReplicaActor`` processes started ahead of need, taken and bound on
LeaderAndIsr, refilled in the background when the node has a whole idle core. Used by the broker shell on
its event loop; creates actors/replica.py. docs/internals.md ("Warm replica pool") has why and the rules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.replication.replica_config import WARM_POOL_DEFAULTS, WARM_POOL_MIN_IDLE_CPUS, WARM_POOL_SIZE

log = logging.getLogger("rafka.broker")

REFILL_QUIET_S = 0.5  # no take for this long before the pool refills
IDLE_SAMPLE_S = 0.5  # the window over which the node's idle CPU is measured before each start


def cpu_times() -> tuple[float, float] | None:
    """(idle + iowait, total) jiffies of this node (``/proc/stat``), or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + fields[4], sum(fields[:8])


async def idle_cpus(window_s: float = IDLE_SAMPLE_S) -> float | None:
    """Idle CPUs of this node over the next ``window_s`` (e.g. 1.4 of 2), or None when unknown."""
    a = cpu_times()
    await asyncio.sleep(window_s)
    b = cpu_times()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1)


class ReplicaPool:
    def __init__(self, broker, actor_cls):
        self.b = broker
        self.cls = actor_cls
        self.size = max(0, int(broker.config.get(WARM_POOL_SIZE, WARM_POOL_DEFAULTS[WARM_POOL_SIZE])))
        self.min_idle = float(broker.config.get(WARM_POOL_MIN_IDLE_CPUS, WARM_POOL_DEFAULTS[WARM_POOL_MIN_IDLE_CPUS]))
        self._warm: list = []  # unbound actors, oldest first
        self._pids: dict[int, int] = {}  # id(handle) -> pid once its ping answered
        self._polls: dict[int, asyncio.Task] = {}
        self._refill: asyncio.Task | None = None
        self._last_take = 0.0
        self.binding = 0  # actors taken whose bind has not answered yet (cold ones may still be starting)
        self._closed = False
        self.stats = {"taken": 0, "cold": 0, "started": 0, "died": 0, "deferred": 0, "preloaded": 0}

    # ---- actors ---------------------------------------------------------------------------------------
    def new_actor(self):
        """A fresh unbound ReplicaActor, a child of the broker pinned to its node (starting in the
        background: calls queue until the process is up)."""
        return self.cls.options(
            num_cpus=0,
            max_concurrency=1000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.b.node_id, soft=False),
        ).remote()

    def take(self):
        """An unbound actor to bind: the oldest warm one, else a cold one. The caller calls ``bound()`` once
        its bind answered (the refill waits for that: it must not compete with cold starts)."""
        self._last_take = time.monotonic()
        self.binding += 1
        if self._warm:
            h = self._warm.pop(0)
            self._forget(h)
            self.stats["taken"] += 1
        else:
            h = self.new_actor()
            self.stats["cold"] += 1
        return h

    def bound(self) -> None:
        """A taken actor's bind answered (or failed)."""
        self.binding -= 1
        self._last_take = time.monotonic()
        self.fill()

    def end(self, handle) -> None:
        """The broker gave ``handle`` up (stopped, dead, a failed bind): its process is ended."""
        try:
            ray.kill(handle, no_restart=True)
        except Exception as e:  # noqa: BLE001 - already gone
            log.debug("ray.kill of a replica actor: %s", e)

    def _forget(self, h) -> None:
        self._pids.pop(id(h), None)
        t = self._polls.pop(id(h), None)
        if t is not None:
            t.cancel()

    # ---- refill ---------------------------------------------------------------------------------------
    def fill(self) -> None:
        """Start the background refill unless it runs (or the pool is off / closed)."""
        if self.size and not self._closed and (self._refill is None or self._refill.done()):
            self._refill = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        while not self._closed and not self.b.stopping and len(self._warm) < self.size:
            quiet = REFILL_QUIET_S - (time.monotonic() - self._last_take)
            if quiet > 0 or self.binding:
                await asyncio.sleep(max(quiet, 0.05))
                continue
            if self.min_idle > 0:
                idle = await idle_cpus()
                if idle is not None and idle < self.min_idle:
                    self.stats["deferred"] += 1  # the node is busy: the pool waits for spare CPU
                    continue
                if self._closed or self.b.stopping or self.binding:
                    continue
            h = self.new_actor()
            self.stats["started"] += 1
            self._warm.append(h)
            self._polls[id(h)] = asyncio.get_running_loop().create_task(self._watch(h))
            try:
                pid = await h.ping.remote()
                # the classes a bound replica will call, loaded now (ReplicaActor.preload): ready means ready
                if (await h.preload.remote(self.b.cluster, self.b.broker_id))["loaded"]:
                    self.stats["preloaded"] += 1
            except (RayActorError, RayTaskError) as e:
                why = (str(e).strip().splitlines() or [""])[0]  # one log line, not Ray's multi-line text
                log.warning(
                    "broker %s: a warm replica actor failed to start: %s: %s", self.b.broker_id, type(e).__name__, why
                )
                self._drop(h)
                await asyncio.sleep(1.0)
                continue
            if any(w is h for w in self._warm):
                self._pids[id(h)] = pid

    async def _watch(self, h) -> None:
        """A warm actor's death long-poll: it leaves the pool, the refill replaces it."""
        try:
            await h.supervise.remote()
        except asyncio.CancelledError:
            return
        except (RayActorError, RayTaskError) as e:
            if any(w is h for w in self._warm):
                log.warning(
                    "broker %s: a warm replica actor died (%s): replacing it", self.b.broker_id, type(e).__name__
                )
                self.stats["died"] += 1
                self._drop(h)
                self.fill()

    def _drop(self, h) -> None:
        self._warm = [w for w in self._warm if w is not h]
        self._forget(h)
        self.end(h)

    # ---- views and shutdown ---------------------------------------------------------------------------
    def describe(self) -> dict:
        """``{size, warm, ready, pids, taken, cold, started, died, deferred, preloaded}``: ``pids`` of the ready
        warm actors; ``preloaded``: started actors whose ``preload`` loaded a class."""
        pids = [self._pids[id(h)] for h in self._warm if id(h) in self._pids]
        return {"size": self.size, "warm": len(self._warm), "ready": len(pids), "pids": pids, **self.stats}

    def shutdown(self) -> None:
        """Kill every warm actor; no refill after this."""
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
        for h in list(self._warm):
            self._drop(h)
