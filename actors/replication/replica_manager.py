"""Kafka's ReplicaManager, one per broker per process (``replica_manager_of``): the Partitions online here, the
produce and fetch purgatories with their delayed operations (``DelayedProduce``, ``DelayedFetch``,
``SessionWatch``) keyed by partition, and the one dispatch from a Partition's ``LeaderHwChange`` to them.
Called by the replica shell (actors/replica.py), its write path (leader_writes.py) and the replication server's
session waits; it calls only the Partition and the purgatory. Also the replica's error answer shapes."""

from __future__ import annotations

import asyncio
import logging
from typing import TypeVar

from actors.replication.partition import Partition
from actors.replication.partition_state import FOLLOWER, LEADER, LeaderHwChange
from actors.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from protocol import errors as E
from protocol.messages import FetchRequest, FetchResponse

log = logging.getLogger("actors.replica")

# purgatory keys are (Partition, kind), Kafka's TopicPartitionOperationKey: the local replica's identity, so a
# stopped predecessor of a partition in this process never shares its watch lists. Kinds: acks=all produces
# wait on the HW; fetches by who asks (followers read to the LEO)
HW_KEY, FOLLOWER_KEY, CONSUMER_KEY = "hw", "follower", "consumer"


def _log_unexpected(exc: BaseException) -> None:
    if not isinstance(exc, E.KafkaError) and E.error_response(exc)[0] == E.UnknownServerError.code:
        log.exception("unexpected error")


def _err(exc: BaseException, **fields) -> dict:
    code, message = E.error_response(exc)
    _log_unexpected(exc)
    return {"error_code": code, "error_message": message, **fields}


def error_answer(response_cls, exc: BaseException, **fields) -> dict:
    """The dict of ``response_cls`` (a protocol.messages response) answering ``exc``."""
    _log_unexpected(exc)
    return response_cls.error(exc, **fields)


def fetch_error(partition: Partition, exc: BaseException) -> dict:
    """A fetch error answer: an OFFSET_OUT_OF_RANGE one carries the log's offsets."""
    if isinstance(exc, E.OffsetOutOfRangeError):
        snap = partition.log.fetch_offset_snapshot()
        return error_answer(
            FetchResponse,
            exc,
            log_start_offset=snap.log_start_offset,
            high_watermark=snap.high_watermark,
            log_end_offset=snap.log_end_offset,
        )
    return error_answer(FetchResponse, exc)


def fetch_answer(partition: Partition, req: FetchRequest) -> dict:
    """``Partition.read`` as the replica's fetch answer (errors as error fields)."""
    try:
        return partition.read(
            req.fetch_offset,
            req.max_bytes,
            req.replica_id,
            req.isolation_level,
            req.current_leader_epoch,
            req.min_one_message,
            req.fetch_only_leader,
        ).to_dict()
    except Exception as exc:
        return fetch_error(partition, exc)


class DelayedProduce(DelayedOperation):
    """acks=all: waits until the high watermark reaches ``required_offset`` (last offset + 1)."""

    def __init__(self, partition: Partition, timeout_ms: int, required_offset: int, response: dict):
        super().__init__(timeout_ms)
        self.partition, self.required_offset, self.response = partition, required_offset, response

    def try_complete(self) -> bool:
        p = self.partition
        if p.role != LEADER or p.log.high_watermark >= self.required_offset:
            return self.force_complete()
        return False

    def on_complete(self) -> dict:
        p = self.partition
        if self.expired:
            return {
                **self.response,
                "error_code": E.RequestTimedOutError.code,
                "error_message": f"acks=all: high watermark {p.log.high_watermark} did not reach "
                f"{self.required_offset} in {self.delay_ms:.0f} ms",
            }
        if p.role != LEADER:
            return {
                **self.response,
                **_err(E.NotLeaderOrFollowerError("leadership moved before the batch was replicated")),
            }
        min_isr = p.log.config.min_insync_replicas
        if len(p.isr) < min_isr:
            return {
                **self.response,
                **_err(
                    E.NotEnoughReplicasAfterAppendError(f"ISR {list(p.isr)} is below min.insync.replicas={min_isr}")
                ),
            }
        return self.response

    def on_cancel(self) -> dict:
        return {**self.response, **_err(E.NotLeaderOrFollowerError("replica stopped"))}


class _FetchWait(DelayedOperation):
    """A fetch of one partition parked until it can be answered: ``min_bytes`` readable past its offset (below
    the HW for consumers, the LEO for followers), its offset out of range, or the partition moved on
    (``generation``, role). ``DelayedFetch`` then reads the answer; ``SessionWatch`` wakes its session."""

    def __init__(self, partition: Partition, req: FetchRequest):
        super().__init__(req.max_wait_ms)
        self.partition, self.req, self.min_bytes = partition, req, max(1, req.min_bytes)
        self.gen = partition.generation

    def try_complete(self) -> bool:
        p, req, fetch_offset = self.partition, self.req, self.req.fetch_offset
        if p.generation != self.gen or (p.role != LEADER and (req.fetch_only_leader or p.role != FOLLOWER)):
            return self.force_complete()  # moved on; a KIP-392 consumer fetch waits on a follower too
        if fetch_offset < p.log.log_start_offset or fetch_offset > p.log.log_end_offset:
            return self.force_complete()  # the read will answer OFFSET_OUT_OF_RANGE
        end = p.log.log_end_offset if req.is_follower else p.fetchable_end(req.isolation_level)
        if end > fetch_offset and p.marks.bytes_between(fetch_offset, end) >= self.min_bytes:
            return self.force_complete()
        return False


class DelayedFetch(_FetchWait):
    """Long poll: completes when ``min_bytes`` are readable (below the HW for consumers, the LEO for
    followers), on a role change, or after ``max_wait_ms`` with whatever there is."""

    def on_complete(self) -> dict:
        return fetch_answer(self.partition, self.req)

    def on_cancel(self) -> dict:
        return error_answer(FetchResponse, E.NotLeaderOrFollowerError("replica stopped"))


class SessionWatch(_FetchWait):
    """A follower fetch session's wait on one of its partitions (actors/channels/replication_channel.py): done when a
    DelayedFetch of the same request would be, it reads nothing and resolves ``wake``, the future the session
    waits on for all of its partitions (under one timeout; then it cancels the others and reads them all). It
    has no timer of its own."""

    timed = False

    def __init__(self, partition: Partition, req: FetchRequest, wake: asyncio.Future | None = None):
        super().__init__(partition, req)
        self.wake = wake

    def on_complete(self) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def on_cancel(self) -> None:
        """Cancelled: by the session after its wait (``wake`` is done then), or by the purgatory's shutdown (the
        replica stops), which must end the session's wait at once, as it ends a DelayedFetch's."""
        self.on_complete()


_Parked = TypeVar("_Parked", bound=_FetchWait)


class ReplicaManager:
    """Kafka's ReplicaManager for one broker's replicas in this process (a ReplicaHost's, or a ReplicaActor's
    one): the Partitions online here, the produce and fetch purgatories with each operation watched under its
    partition, and the one place a :class:`LeaderHwChange` returned by a Partition becomes purgatory checks."""

    def __init__(self, broker_id: int = -1):
        self.broker_id = int(broker_id)
        self.partitions: dict[tuple[str, int], Partition] = {}  # Kafka's allPartitions (this process's share)
        self.produce_purgatory = DelayedOperationPurgatory("produce")
        self.fetch_purgatory = DelayedOperationPurgatory("fetch")

    def add_partition(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.partition)] = partition

    def stop_partition(self, partition: Partition) -> None:
        """StopReplica: the partition leaves, its parked requests are answered now (their ``on_cancel``)."""
        if self.partitions.get((partition.topic, partition.partition)) is partition:
            del self.partitions[(partition.topic, partition.partition)]
        self.produce_purgatory.cancel_for_key((partition, HW_KEY))
        self.fetch_purgatory.cancel_for_key((partition, FOLLOWER_KEY))
        self.fetch_purgatory.cancel_for_key((partition, CONSUMER_KEY))

    def complete_delayed_requests(self, partition: Partition, change: LeaderHwChange | None) -> None:
        """INCREASED: acks=all produces and every fetch may complete; SAME (new data below an unmoved
        HW): follower fetches may; NONE (or None): nothing changed."""
        if change is LeaderHwChange.INCREASED:
            self.produce_purgatory.check_and_complete((partition, HW_KEY))
            self.fetch_purgatory.check_and_complete((partition, FOLLOWER_KEY))
            self.fetch_purgatory.check_and_complete((partition, CONSUMER_KEY))
        elif change is LeaderHwChange.SAME:
            self.fetch_purgatory.check_and_complete((partition, FOLLOWER_KEY))

    def recheck_produces(self, partition: Partition) -> None:
        """The committed ISR or ``min.insync.replicas`` moved: waiting acks=all produces re-check."""
        self.produce_purgatory.check_and_complete((partition, HW_KEY))

    def role_changed(self, partition: Partition, produces: bool = True) -> None:
        """A LeaderAndIsr applied: parked requests re-check (and answer NOT_LEADER_OR_FOLLOWER if moved)."""
        if produces:
            self.produce_purgatory.check_and_complete((partition, HW_KEY))
        self.fetch_purgatory.check_and_complete((partition, FOLLOWER_KEY))
        self.fetch_purgatory.check_and_complete((partition, CONSUMER_KEY))

    async def wait_produce(self, op: DelayedProduce):
        self.produce_purgatory.try_complete_else_watch(op, [(op.partition, HW_KEY)])
        return await op.wait()

    def watch_fetch(self, op: _Parked) -> _Parked:
        """Park ``op`` (or complete it now); its ``wait()`` is the answer."""
        key = FOLLOWER_KEY if op.req.is_follower else CONSUMER_KEY
        self.fetch_purgatory.try_complete_else_watch(op, [(op.partition, key)])
        return op

    async def wait_fetch(self, op: DelayedFetch):
        return await self.watch_fetch(op).wait()

    def delayed(self, partition: Partition) -> tuple[int, int]:
        """(delayed produces, delayed fetches) of ``partition``."""
        fetches = self.fetch_purgatory.delayed_for((partition, FOLLOWER_KEY))
        return self.produce_purgatory.delayed_for((partition, HW_KEY)), fetches + self.fetch_purgatory.delayed_for(
            (partition, CONSUMER_KEY)
        )


_managers: dict[int, ReplicaManager] = {}


def replica_manager_of(broker_id: int) -> ReplicaManager:
    """This process's ReplicaManager of broker ``broker_id`` (a ReplicaHost's replicas, or one ReplicaActor's,
    share it: a process hosts replicas of one broker)."""
    manager = _managers.get(int(broker_id))
    if manager is None:
        manager = _managers[int(broker_id)] = ReplicaManager(broker_id)
    return manager
