"""Kafka's ReplicaManager role for one partition replica: the delayed operations, their purgatories, and
the one dispatch from what a :class:`~actors.partition.Partition` call changed to the purgatories.

``DelayedProduce`` (acks=all: waits until the high watermark passes the batch) and ``DelayedFetch`` (long
poll until ``min_bytes`` are readable, a role change, or ``max_wait_ms``) run on the replica's event loop
through ``actors.purgatory``; they read the Partition (role, log, ISR, marks) and answer in the replica's
response shapes. :meth:`ReplicaManager.complete_delayed_requests` is Kafka's
``addCompletePurgatoryAction``: INCREASED -> produce and fetch purgatories, SAME -> fetch purgatory
(followers waiting for data), NONE -> nothing. ``_err`` turns an exception into
``{error_code, error_message, **fields}``.
"""

from __future__ import annotations

import logging

from actors.partition import Partition
from actors.partition_state import LEADER, LeaderHwChange
from actors.purgatory import DelayedOperation, DelayedOperationPurgatory
from protocol import errors as E

log = logging.getLogger("actors.replica")

# purgatory keys: acks=all produces wait on the HW; fetches by who asks (followers read to the LEO)
HW_KEY, FOLLOWER_KEY, CONSUMER_KEY = "hw", "follower", "consumer"


def _err(exc: BaseException, **fields) -> dict:
    code, message = E.error_response(exc)
    if code == E.UnknownServerError.code and not isinstance(exc, E.KafkaError):
        log.exception("unexpected error")
    return {"error_code": code, "error_message": message, **fields}


_PRODUCE_ERR = {"base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
_FETCH_ERR = {"high_watermark": -1, "log_start_offset": -1, "last_stable_offset": -1, "records": b"", "next_offset": -1}
_LIST_ERR = {"offset": -1, "timestamp": -1, "leader_epoch": -1}
_EPOCH_ERR = {"leader_epoch": -1, "end_offset": -1}


def fetch_error_extra(partition: Partition, exc: BaseException) -> dict:
    """The extra fields of a fetch error answer: an OFFSET_OUT_OF_RANGE one carries the log's offsets."""
    extra = dict(_FETCH_ERR)
    if isinstance(exc, E.OffsetOutOfRangeError):
        snap = partition.log.fetch_offset_snapshot()
        extra.update(
            log_start_offset=snap.log_start_offset,
            high_watermark=snap.high_watermark,
            log_end_offset=snap.log_end_offset,
        )
    return extra


def fetch_answer(
    partition: Partition, fetch_offset: int, max_bytes: int, replica_id: int, isolation_level: int, epoch: int
) -> dict:
    """``Partition.read`` as the replica's fetch answer (errors as error fields)."""
    try:
        return partition.read(fetch_offset, max_bytes, replica_id, isolation_level, epoch).to_dict()
    except Exception as exc:
        return _err(exc, **fetch_error_extra(partition, exc))


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


class DelayedFetch(DelayedOperation):
    """Long poll: completes when ``min_bytes`` are readable (below the HW for consumers, the LEO for
    followers), on a role change, or after ``max_wait_ms`` with whatever there is."""

    def __init__(self, partition: Partition, max_wait_ms: int, args: tuple, min_bytes: int, epoch: int):
        super().__init__(max_wait_ms)
        self.partition, self.args, self.min_bytes, self.epoch = partition, args, min_bytes, epoch
        self.gen = partition.generation

    def try_complete(self) -> bool:
        p = self.partition
        if p.generation != self.gen or p.role != LEADER:
            return self.force_complete()
        fetch_offset, _max_bytes, replica_id, isolation = self.args
        end = p.log.log_end_offset if replica_id >= 0 else p.fetchable_end(isolation)
        if fetch_offset < p.log.log_start_offset or fetch_offset > p.log.log_end_offset:
            return self.force_complete()  # the read will answer OFFSET_OUT_OF_RANGE
        if end > fetch_offset and p.marks.bytes_between(fetch_offset, end) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> dict:
        fetch_offset, max_bytes, replica_id, isolation = self.args
        return fetch_answer(self.partition, fetch_offset, max_bytes, replica_id, isolation, self.epoch)

    def on_cancel(self) -> dict:
        return _err(E.NotLeaderOrFollowerError("replica stopped"), **_FETCH_ERR)


class ReplicaManager:
    """Kafka's ReplicaManager for one local replica: its produce and fetch purgatories, and the one place
    a :class:`LeaderHwChange` returned by the Partition becomes purgatory checks."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.produce_purgatory = DelayedOperationPurgatory("produce")
        self.fetch_purgatory = DelayedOperationPurgatory("fetch")

    def complete_delayed_requests(self, change: LeaderHwChange | None) -> None:
        """INCREASED: acks=all produces and every fetch may complete; SAME (new data below an unmoved
        HW): follower fetches may; NONE (or None): nothing changed."""
        if change is LeaderHwChange.INCREASED:
            self.produce_purgatory.check_and_complete(HW_KEY)
            self.fetch_purgatory.check_and_complete(FOLLOWER_KEY)
            self.fetch_purgatory.check_and_complete(CONSUMER_KEY)
        elif change is LeaderHwChange.SAME:
            self.fetch_purgatory.check_and_complete(FOLLOWER_KEY)

    def isr_changed(self) -> None:
        """The committed ISR moved: waiting acks=all produces re-check min.insync.replicas."""
        self.produce_purgatory.check_and_complete(HW_KEY)

    def role_changed(self, produces: bool = True) -> None:
        """A LeaderAndIsr applied: parked requests re-check (and answer NOT_LEADER_OR_FOLLOWER if moved)."""
        if produces:
            self.produce_purgatory.check_all()
        self.fetch_purgatory.check_all()

    async def wait_produce(self, op: DelayedProduce):
        self.produce_purgatory.try_complete_else_watch(op, [HW_KEY])
        return await op.wait()

    async def wait_fetch(self, op: DelayedFetch, follower: bool):
        self.fetch_purgatory.try_complete_else_watch(op, [FOLLOWER_KEY if follower else CONSUMER_KEY])
        return await op.wait()

    def shutdown(self) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    def delayed(self) -> tuple[int, int]:
        """(delayed produces, delayed fetches)."""
        return self.produce_purgatory.delayed(), self.fetch_purgatory.delayed()
