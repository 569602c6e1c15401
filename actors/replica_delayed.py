"""The replica's delayed operations and error answers (split out of actors/replica.py).

``DelayedProduce`` (acks=all: waits until the high watermark passes the batch) and ``DelayedFetch`` (long
poll until ``min_bytes`` are readable, a role change, or ``max_wait_ms``) run on the replica's event loop
through ``actors.purgatory``; they read the replica's state (role, log, ISR, marks) and answer in the
replica's response shapes. ``_err`` turns an exception into ``{error_code, error_message, **fields}``.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from actors.partition import LEADER
from actors.purgatory import DelayedOperation
from protocol import errors as E

if TYPE_CHECKING:
    from actors.replica import ReplicaActor

log = logging.getLogger("actors.replica")


def _err(exc: BaseException, **fields) -> dict:
    code, message = E.error_response(exc)
    if code == E.UnknownServerError.code and not isinstance(exc, E.KafkaError):
        log.exception("unexpected error")
    return {"error_code": code, "error_message": message, **fields}


_PRODUCE_ERR = {"base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
_FETCH_ERR = {"high_watermark": -1, "log_start_offset": -1, "last_stable_offset": -1, "records": b"", "next_offset": -1}
_LIST_ERR = {"offset": -1, "timestamp": -1, "leader_epoch": -1}
_EPOCH_ERR = {"leader_epoch": -1, "end_offset": -1}


class DelayedProduce(DelayedOperation):
    """acks=all: waits until the high watermark reaches ``required_offset`` (last offset + 1)."""

    def __init__(self, replica: "ReplicaActor", timeout_ms: int, required_offset: int, response: dict):
        super().__init__(timeout_ms)
        self.replica, self.required_offset, self.response = replica, required_offset, response

    def try_complete(self) -> bool:
        r = self.replica
        if r.role != LEADER or r.log.high_watermark >= self.required_offset:
            return self.force_complete()
        return False

    def on_complete(self) -> dict:
        r = self.replica
        if self.expired:
            return {**self.response, "error_code": E.RequestTimedOutError.code,
                    "error_message": f"acks=all: high watermark {r.log.high_watermark} did not reach "
                                     f"{self.required_offset} in {self.delay_ms:.0f} ms"}
        if r.role != LEADER:
            return {**self.response, **_err(E.NotLeaderOrFollowerError("leadership moved before the "
                                                                        "batch was replicated"))}
        if len(r.isr) < r.config.min_insync_replicas:
            return {**self.response, **_err(E.NotEnoughReplicasAfterAppendError(
                f"ISR {list(r.isr)} is below min.insync.replicas={r.config.min_insync_replicas}"))}
        return self.response

    def on_cancel(self) -> dict:
        return {**self.response, **_err(E.NotLeaderOrFollowerError("replica stopped"))}


class DelayedFetch(DelayedOperation):
    """Long poll: completes when ``min_bytes`` are readable (below the HW for consumers, the LEO for
    followers), on a role change, or after ``max_wait_ms`` with whatever there is."""

    def __init__(self, replica: "ReplicaActor", max_wait_ms: int, args: tuple, min_bytes: int,
                 epoch: int):
        super().__init__(max_wait_ms)
        self.replica, self.args, self.min_bytes, self.epoch = replica, args, min_bytes, epoch
        self.gen = replica._gen

    def try_complete(self) -> bool:
        r = self.replica
        if r._gen != self.gen or r.role != LEADER:
            return self.force_complete()
        fetch_offset, _max_bytes, replica_id, isolation = self.args
        end = r.log.log_end_offset if replica_id >= 0 else r._fetchable_end(isolation)
        if fetch_offset < r.log.log_start_offset or fetch_offset > r.log.log_end_offset:
            return self.force_complete()  # the read will answer OFFSET_OUT_OF_RANGE
        if end > fetch_offset and r._marks.bytes_between(fetch_offset, end) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> dict:
        return self.replica._read(*self.args, epoch=self.epoch)

    def on_cancel(self) -> dict:
        return _err(E.NotLeaderOrFollowerError("replica stopped"), **_FETCH_ERR)
