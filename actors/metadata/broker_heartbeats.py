"""The controller's view of broker liveness and its background loops (Kafka's BrokerHeartbeatManager and
the controller's periodic tasks), out of the actor shell actors/controller.py.

- ``BrokerSessions``: the brokers' ``broker_session`` long-polls (one pending future per broker, answered
  when this controller resigns or shuts down, or when the broker's next poll replaces it).
- ``probe_broker``: after a failover, is the broker the image says is alive this incarnation?
- ``session_checker(ctl)``: fences a broker silent for ``broker.session.timeout.ms``; a stall of the
  controller's own loop extends every session instead (the silence was ours).
- ``rebalancer(ctl)``: auto leader rebalance (preferred leader election of imbalanced partitions).

Runs on the controller's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.metadata.controller_logic import ELECT_PREFERRED
from protocol.names import RAY_NAMESPACE, broker_name

if TYPE_CHECKING:
    from actors.controller import ControllerActor

log = logging.getLogger("rafka.controller")

PROBE_TIMEOUT_S = 5.0


class BrokerSessions:
    """The pending ``broker_session`` call of each broker."""

    def __init__(self) -> None:
        self._futs: dict[int, asyncio.Future] = {}

    def open(self, broker_id: int, controller_epoch: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        old = self._futs.get(broker_id)
        if old is not None and not old.done():  # that broker's previous watch (its caller is gone)
            old.set_result({"reason": "replaced", "controller_epoch": controller_epoch})
        self._futs[broker_id] = fut
        return fut

    def end_all(self, reason: str, controller_epoch: int) -> None:
        for f in self._futs.values():
            if not f.done():
                f.set_result({"reason": reason, "controller_epoch": controller_epoch})


async def probe_broker(cluster: str, broker_id: int, broker_epoch: int):
    """The broker's handle when its incarnation is ``broker_epoch``, else None (gone, or another one)."""
    try:
        handle = ray.get_actor(broker_name(cluster, broker_id), namespace=RAY_NAMESPACE)
        inc = await asyncio.wait_for(handle.incarnation.remote(), PROBE_TIMEOUT_S)
        return handle if inc.get("broker_epoch") == broker_epoch else None
    except (ValueError, RayActorError, RayTaskError, asyncio.TimeoutError, GetTimeoutError):
        return None


async def session_checker(ctl: ControllerActor) -> None:
    period = max(0.05, ctl.config.heartbeat_interval_ms / 2000)
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(period)
        stalled = time.monotonic() - t0 - period
        if stalled > ctl.config.heartbeat_interval_ms / 1000:
            # this controller's own loop stalled (a loaded machine): heartbeats may be queued
            # unread, so the silence is ours, not the brokers'; give every session a fresh start
            log.warning("controller loop stalled %.2fs: extending broker sessions", stalled)
            ctl.heartbeats.extend(time.monotonic())
            continue
        deadline = ctl.heartbeats.deadline(time.monotonic())
        for b in sorted(ctl.image.alive_brokers()):
            if ctl.heartbeats.expired(b, deadline):
                log.warning("broker %s session timed out", b)
                await ctl.fence(b, ctl.image.brokers[b].broker_epoch)


async def rebalancer(ctl: ControllerActor) -> None:
    while ctl.config.auto_leader_rebalance:
        await asyncio.sleep(ctl.config.imbalance_check_interval_s)
        async with ctl.lock:
            tps = ctl.logic.imbalanced_partitions()
            if tps:
                log.info("auto leader rebalance: %s", tps)
                await ctl.commit(ctl.logic.elect_leaders(tps, ELECT_PREFERRED)[0])
