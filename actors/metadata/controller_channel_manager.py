"""The controller's channels to the brokers (Kafka's ControllerChannelManager): one ordered request queue
per live broker incarnation, carrying the controller's epoch, and the controller's ``controller_session``
long-poll on each broker (its death detector). Called by the controller shell (actors/controller.py) on its
event loop; calls the brokers through Ray and the controller only through ``ChannelOwner``.
docs/internals.md ("Controller") has the ordering and fencing rules.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from ray.exceptions import RayActorError, RayTaskError

from actors.metadata.controller_requests import BrokerRequestBatch
from protocol.control_messages import LeaderAndIsrRequest, StopReplicaRequest
from protocol.errors import KafkaError, StaleControllerEpochError

log = logging.getLogger("rafka.controller")


class ChannelOwner(Protocol):
    """What a channel needs of the controller: its epoch, and where broker answers and losses go."""

    epoch: int

    def resign(self, why: str) -> None: ...

    def on_broker_response(self, broker_id: int, method: str, args: tuple, res: Any) -> None: ...

    def schedule_fence(self, broker_id: int, broker_epoch: int) -> None: ...


def _observe(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class BrokerChannel:
    """Ordered requests to one broker incarnation (Kafka's ControllerChannelManager queue)."""

    def __init__(self, ctl: ChannelOwner, broker_id: int, broker_epoch: int, handle):
        self.ctl, self.broker_id, self.broker_epoch, self.handle = ctl, broker_id, broker_epoch, handle
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False
        self.want_version = -1
        self._version_queued = False
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.watch = asyncio.get_running_loop().create_task(self._watch())

    def send(self, method: str, *args) -> asyncio.Future:
        """An untyped request: the controller's epoch goes first."""
        return self._queue(method, (self.ctl.epoch, *args))

    def send_request(self, method: str, request: LeaderAndIsrRequest | StopReplicaRequest) -> asyncio.Future:
        """A typed request, which carries the controller epoch itself."""
        return self._queue(method, (request,))

    def _queue(self, method: str, args: tuple) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_observe)  # callers may drop the future: a dead broker is not an error
        if self.closed:
            fut.set_exception(RuntimeError(f"broker {self.broker_id} is gone"))
        else:
            self.queue.put_nowait((method, args, fut))
        return fut

    def send_version(self, version: int) -> None:
        """UpdateMetadata, coalesced: at most one queued, carrying the newest version."""
        self.want_version = max(self.want_version, version)
        if not self._version_queued and not self.closed:
            self._version_queued = True
            self.queue.put_nowait(("update_metadata", None, None))

    async def _run(self):
        while True:
            method, args, fut = await self.queue.get()
            if method == "update_metadata" and args is None:
                self._version_queued = False
                args = (self.ctl.epoch, self.want_version)
            try:
                res = await getattr(self.handle, method).remote(*args)
            except RayActorError as e:
                self._fail(fut, e)
                continue
            except (RayTaskError, KafkaError) as e:
                log.warning("broker %s %s failed: %s", self.broker_id, method, e)
                self._fail(fut, e)
                continue
            if isinstance(res, dict) and res.get("error_code") == StaleControllerEpochError.code:
                self.ctl.resign(f"broker {self.broker_id} knows a newer controller")
            self.ctl.on_broker_response(self.broker_id, method, args, res)
            if fut is not None and not fut.done():
                fut.set_result(res)

    @staticmethod
    def _fail(fut, e):
        if fut is not None and not fut.done():
            fut.set_exception(e)

    async def _watch(self):
        """The long-poll: returns when the broker shuts down, raises when it dies."""
        try:
            res = await self.handle.controller_session.remote(self.ctl.epoch)
            reason = res.get("reason") if isinstance(res, dict) else None
            if isinstance(res, dict) and res.get("error_code") == StaleControllerEpochError.code:
                self.ctl.resign(f"broker {self.broker_id} knows a newer controller")
                return
            log.info("broker %s ended its session: %s", self.broker_id, reason)
        except RayActorError:
            log.info("broker %s died", self.broker_id)
        except asyncio.CancelledError:
            return
        if not self.closed:
            self.ctl.schedule_fence(self.broker_id, self.broker_epoch)

    def close(self):
        self.closed = True
        for t in (self.task, self.watch):
            if t is not asyncio.current_task():
                t.cancel()
        while not self.queue.empty():
            _, _, fut = self.queue.get_nowait()
            if fut is not None and not fut.done():
                fut.set_exception(RuntimeError(f"broker {self.broker_id} is gone"))


class ControllerChannelManager:
    """The controller's channels, one per live broker incarnation (Kafka's ControllerChannelManager): opens
    and closes them and sends one commit's ``BrokerRequestBatch`` (actors/metadata/controller_requests.py)."""

    def __init__(self, ctl: ChannelOwner):
        self.ctl = ctl
        self.channels: dict[int, BrokerChannel] = {}

    def __contains__(self, broker_id: int) -> bool:
        return broker_id in self.channels

    def broker_ids(self) -> list[int]:
        return list(self.channels)

    def open(self, broker_id: int, broker_epoch: int, handle) -> None:
        self.close(broker_id)
        self.channels[broker_id] = BrokerChannel(self.ctl, broker_id, broker_epoch, handle)

    def close(self, broker_id: int) -> None:
        ch = self.channels.pop(broker_id, None)
        if ch is not None:
            ch.close()

    def close_all(self) -> None:
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()

    def send_full_state(self, broker_id: int, request: LeaderAndIsrRequest) -> None:
        """A FULL LeaderAndIsr (the broker's whole partition set)."""
        self.channels[broker_id].send_request("leader_and_isr", request)

    def send_batch(self, batch: BrokerRequestBatch) -> list[asyncio.Future]:
        """StopReplica, topic configs, LeaderAndIsr to the brokers with a channel, then UpdateMetadata to
        every channel; returns the StopReplica futures."""
        stops = [
            self.channels[b].send_request("stop_replica", request)
            for b, request in batch.stop_replica.items()
            if b in self.channels
        ]
        for b, topic_configs in batch.topic_configs.items():
            ch = self.channels.get(b)
            for name, configs in topic_configs:
                if ch is not None:
                    ch.send("update_topic_config", name, configs)
        for b, request in batch.leader_and_isr.items():
            ch = self.channels.get(b)
            if ch is not None:
                ch.send_request("leader_and_isr", request)
        self.publish_version(batch.metadata_version)
        return stops

    def publish_version(self, version: int) -> None:
        """UpdateMetadata(version) to every live broker."""
        for ch in self.channels.values():
            ch.send_version(version)
