"""The controller's view of broker liveness (Kafka's BrokerHeartbeatManager): when each broker was last
heard from, the brokers' ``broker_session`` long-polls, the failover probe and the session checker that
fences a silent broker. Called by the controller shell (actors/controller.py) on its event loop; calls the
brokers through Ray and the controller only through the callables it is given. docs/internals.md
("Liveness", "Controller") has how the checks work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.metadata.image import MetadataImage
from protocol.names import RAY_NAMESPACE, broker_name

log = logging.getLogger("rafka.controller")

PROBE_TIMEOUT_S = 5.0


class BrokerHeartbeats:
    """When each live broker was last heard from. Times are seconds of a monotonic clock, passed in. A stall
    of the controller's own loop is not the brokers' fault: ``extend`` gives every session a fresh start."""

    def __init__(self, session_timeout_s: float):
        self.session_timeout_s = session_timeout_s
        self.last_seen: dict[int, float] = {}

    def seen(self, broker_id: int, now: float) -> None:
        self.last_seen[broker_id] = now

    def extend(self, now: float) -> None:
        for b in self.last_seen:
            self.last_seen[b] = now

    def deadline(self, now: float) -> float:
        """A broker last heard from before this is timed out."""
        return now - self.session_timeout_s

    def expired(self, broker_id: int, deadline: float) -> bool:
        seen = self.last_seen.get(broker_id)
        return seen is not None and seen < deadline


class BrokerSessions:
    """The pending ``broker_session`` call of each broker: answered when this controller resigns or shuts
    down, or when the broker's next poll replaces it."""

    def __init__(self) -> None:
        self._futs: dict[int, asyncio.Future] = {}

    def open(self, broker_id: int, controller_epoch: int) -> asyncio.Future:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        old = self._futs.get(broker_id)
        if old is not None and not old.done():  # that broker's previous watch (its caller is gone)
            old.set_result({"reason": "replaced", "controller_epoch": controller_epoch})
        self._futs[broker_id] = fut
        return fut

    def end_all(self, reason: str, controller_epoch: int) -> None:
        for f in self._futs.values():
            if not f.done():
                f.set_result({"reason": reason, "controller_epoch": controller_epoch})


async def probe_broker(cluster: str, broker_id: int, broker_epoch: int) -> Any:
    """The broker's handle when its incarnation is ``broker_epoch``, else None (gone, or another one)."""
    try:
        handle = ray.get_actor(broker_name(cluster, broker_id), namespace=RAY_NAMESPACE)
        inc: dict = await asyncio.wait_for(handle.incarnation.remote(), PROBE_TIMEOUT_S)
        return handle if inc.get("broker_epoch") == broker_epoch else None
    except (ValueError, RayActorError, RayTaskError, asyncio.TimeoutError, GetTimeoutError):
        return None


async def session_checker(
    heartbeats: BrokerHeartbeats,
    heartbeat_interval_ms: int,
    image: Callable[[], MetadataImage],
    fence: Callable[[int, int], Awaitable[None]],
) -> None:
    """Fences (``fence(broker_id, broker_epoch)``) each alive broker of ``image()`` silent for the session
    timeout; a stall of this loop itself extends every session instead (the silence was ours)."""
    period = max(0.05, heartbeat_interval_ms / 2000)
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(period)
        stalled = time.monotonic() - t0 - period
        if stalled > heartbeat_interval_ms / 1000:
            # heartbeats may be queued unread: give every session a fresh start
            log.warning("controller loop stalled %.2fs: extending broker sessions", stalled)
            heartbeats.extend(time.monotonic())
            continue
        deadline = heartbeats.deadline(time.monotonic())
        for b in sorted(image().alive_brokers()):
            if heartbeats.expired(b, deadline):
                log.warning("broker %s session timed out", b)
                await fence(b, image().brokers[b].broker_epoch)
