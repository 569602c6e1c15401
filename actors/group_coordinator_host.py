"""The broker's side of group coordination: it hosts one ``GroupCoordinatorActor``
(actors/group_coordinator.py, ``group_coordinator_name(cluster, id)``, a non-detached child pinned to the
broker's node), created when the broker first leads a ``__consumer_offsets`` partition (an idle actor costs
~120 MiB, so clusters without consumer groups do not pay for it) and again if it died alone. The broker
tells it, in the partition's LeaderAndIsr order, when its replica of a ``__consumer_offsets`` partition
becomes leader or follower or is stopped (``notify``). ``find_coordinator(group_id)`` creates
``__consumer_offsets`` through the controller on first use (Kafka's auto-creation of the internal topic)
and answers the leader of the group's partition (``coordinator_answer``, pure).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from protocol.errors import CoordinatorNotAvailableError, InvalidRequestError, TopicAlreadyExistsError
from protocol.names import RAY_NAMESPACE, group_coordinator_name

from .controller_link import ControllerUnavailable
from .group_coordinator import RemoteGroupCoordinator
from .group_records import partition_for
from .group_service import OFFSETS_TOPIC, offsets_partitions, offsets_topic_spec

if TYPE_CHECKING:
    from actors.broker import BrokerActor

log = logging.getLogger("rafka.broker")

NOT_AVAILABLE = CoordinatorNotAvailableError.code


def coordinator_answer(
    cluster: str, code: int, msg: str | None = None, broker_id: int = -1, partition: int = -1
) -> dict:
    """A FindCoordinator answer: ``{error_code, error_message, broker_id, partition, coordinator}``."""
    return {
        "error_code": code,
        "error_message": msg,
        "broker_id": broker_id,
        "partition": partition,
        "coordinator": group_coordinator_name(cluster, broker_id) if broker_id >= 0 else None,
    }


def offsets_partition_state(topic: dict | None, p: int) -> dict | None:
    """Partition ``p`` of the ``__consumer_offsets`` topic metadata (keys may be ints or strings)."""
    parts = (topic or {}).get("partitions", {})
    return parts.get(p, parts.get(str(p)))


class GroupCoordinatorHost:
    def __init__(self, broker: BrokerActor):
        self.b = broker
        self.gc = None  # the group coordinator actor (created on first need)
        self._gc_lock: asyncio.Lock | None = None
        self.roles: dict[int, tuple[bool, int, object]] = {}  # p -> (leader?, epoch, replica)
        self._create_lock: asyncio.Lock | None = None

    async def coordinator(self):
        """This broker's group coordinator; (re)created on demand, then told every offsets partition it leads."""
        if self._gc_lock is None:
            self._gc_lock = asyncio.Lock()
        async with self._gc_lock:
            if self.gc is not None:
                return self.gc
            b = self.b
            name = group_coordinator_name(b.cluster, b.broker_id)
            for _ in range(200):
                try:
                    gc = RemoteGroupCoordinator.options(
                        name=name,
                        namespace=RAY_NAMESPACE,
                        num_cpus=0,
                        max_concurrency=1000,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(b.node_id, soft=False),
                    ).remote(b.cluster, b.broker_id, b.config)
                    break
                except ValueError:  # a previous incarnation still holds the name for a moment
                    await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"group coordinator name {name} stayed taken")
            leads = [(p, e, h) for p, (lead, e, h) in self.roles.items() if lead]
            await asyncio.gather(*(gc.on_elected.remote(p, e, h) for p, e, h in leads))
            self.gc = gc
            return gc

    async def notify(self, p: int, leader: bool, epoch: int | None, replica) -> None:
        """Tell the group coordinator that this broker leads / no longer leads ``__consumer_offsets-p``."""
        if leader:
            self.roles[p] = (True, epoch, replica)
        else:
            self.roles.pop(p, None)
            if self.gc is None:
                return  # no coordinator yet: it has nothing to unload (a new one learns only our leads)
        for _ in range(3):
            try:
                gc = await self.coordinator()
                if leader:
                    await gc.on_elected.remote(p, epoch, replica)
                else:
                    await gc.on_resigned.remote(p, epoch)
                return
            except RayActorError as e:  # it died alone: a new one is told every partition we lead
                log.warning("broker %s: group coordinator gone (%s), recreating", self.b.broker_id, type(e).__name__)
                self.gc = None
            except (RuntimeError, RayTaskError) as e:
                log.warning(
                    "broker %s: group coordinator not told about %s-%s: %s", self.b.broker_id, OFFSETS_TOPIC, p, e
                )
                return

    async def ensure_offsets_topic(self) -> dict:
        """Create ``__consumer_offsets`` (once; concurrent finders wait for the same creation)."""
        if self._create_lock is None:
            self._create_lock = asyncio.Lock()
        b = self.b
        async with self._create_lock:
            md = await b._fresh_metadata()
            if OFFSETS_TOPIC in md["topics"]:
                return {"error_code": 0, "error_message": None}
            alive = sum(1 for x in md["brokers"] if x.get("alive"))
            spec = offsets_topic_spec(b.config, alive)
            try:
                res = (await b.link.call("create_topics", [spec], 30000, timeout_s=40))[0]
            except (ControllerUnavailable, asyncio.TimeoutError):
                return {"error_code": NOT_AVAILABLE, "error_message": "controller unavailable"}
            log.info(
                "broker %s: created %s (%s partitions, rf %s): %s",
                b.broker_id,
                OFFSETS_TOPIC,
                spec["num_partitions"],
                spec["replication_factor"],
                res.get("error_message"),
            )
            await b._fresh_metadata()
            if res["error_code"] in (0, TopicAlreadyExistsError.code):  # another broker was first
                return {"error_code": 0, "error_message": None}
            return {"error_code": res["error_code"], "error_message": res.get("error_message")}

    async def find_coordinator(self, group_id: str, key_type: int = 0) -> dict:
        b = self.b

        def answer(code, msg=None, broker_id=-1, partition=-1):
            return coordinator_answer(b.cluster, code, msg, broker_id, partition)

        if key_type != 0:
            return answer(InvalidRequestError.code, f"key_type {key_type!r}: only group coordinators (0) are served")
        if not isinstance(group_id, str):
            return answer(InvalidRequestError.code, "group_id must be a string")
        md = await b.metadata()
        topic = md["topics"].get(OFFSETS_TOPIC)
        if topic is None:
            res = await self.ensure_offsets_topic()
            if res["error_code"]:
                return answer(NOT_AVAILABLE, f"{OFFSETS_TOPIC} could not be created: {res['error_message']}")
            topic = (await b.metadata())["topics"].get(OFFSETS_TOPIC)
        n = offsets_partitions(b.config)
        p = partition_for(group_id, n)
        state = offsets_partition_state(topic, p)
        if state is None or state.get("leader", -1) < 0:
            state = offsets_partition_state((await b._fresh_metadata())["topics"].get(OFFSETS_TOPIC), p)
        if state is None:
            return answer(NOT_AVAILABLE, f"{OFFSETS_TOPIC} has no partition {p} (offsets.topic.num.partitions={n})")
        if state.get("leader", -1) < 0:
            return answer(NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{p} has no leader", partition=p)
        return answer(0, None, state["leader"], p)
