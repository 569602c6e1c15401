"""Loading a coordinator partition into a fresh shard (Kafka's CoordinatorLoader): wait until this broker's
replica leads at the context's epoch with its HW over the log end it held at takeover, read ``[log start,
HW)`` through the replica's ``fetch``, decode with the kind's decoder and ``load`` it into a new shard.
Driven by the runtime (actors/coordinator/runtime.py); calls the replica actor, nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from ray.exceptions import RayActorError, RayTaskError

from actors.coordinator.context import CoordinatorContext
from actors.coordinator.shard import CoordinatorKind, CoordinatorShard
from protocol import errors as E
from protocol.messages import FetchRequest
from storage.control import CONTROL_COMMIT, parse_control_record
from storage.records import RecordBatch, decode_records, iter_batch_headers

MOVED, FAILED = "moved", "failed"
RETRY_S = 0.05


class LoadRetry(Exception):
    """A transient condition while reading the partition: try the load again."""


async def load_shard(
    part: CoordinatorContext,
    kind: CoordinatorKind,
    is_current: Callable[[], bool],
    now_ms: Callable[[], int],
    broker_id: int,
    log: logging.Logger,
) -> CoordinatorShard | str | None:
    """The partition's shard once loaded; ``MOVED`` (a newer epoch took leadership away), ``FAILED`` (corrupt
    or undecodable: not served), or None when abandoned (``is_current()`` went False). Transient conditions
    (a replica call failing, a retriable Kafka error, a fetch returning no batch) retry every 50 ms."""
    t0 = time.monotonic()
    target = None
    name = f"b{broker_id}: {kind.topic}-{part.partition}"
    while is_current():
        try:
            st = await part.replica.state.remote()
            if st.get("leader_epoch", -1) > part.epoch and st.get("role") != "leader":
                return MOVED
            if st.get("role") == "leader" and st.get("leader_epoch") == part.epoch:
                target = st["log_end_offset"] if target is None else target
                if st["high_watermark"] >= target:
                    records = await read_partition(part, kind, st["log_start_offset"], st["high_watermark"])
                    if not is_current():
                        return None
                    shard = kind.new_shard(part.epoch)
                    part.loaded_records = shard.load(records, now_ms())
                    log.info(
                        "%s loaded at epoch %d: %d records, %s in %.0f ms",
                        name,
                        part.epoch,
                        part.loaded_records,
                        kind.summary(shard),
                        (time.monotonic() - t0) * 1000,
                    )
                    return shard
        except (RayActorError, RayTaskError, LoadRetry) as e:
            log.info("%s: loading, retrying (%s: %s)", name, type(e).__name__, e)
        except E.KafkaError as e:
            if isinstance(e, E.CorruptMessageError):
                log.error("%s is corrupt, not loading it: %s", name, e)
                return FAILED
            log.info("%s: loading: %s", name, e)
        except Exception:  # noqa: BLE001 - an undecodable partition: serve nothing rather than guess
            log.exception("%s: loading failed", name)
            return FAILED
        await asyncio.sleep(RETRY_S)
    return None


async def read_partition(part: CoordinatorContext, kind: CoordinatorKind, start: int, hw: int) -> list[Any]:
    """Every record in ``[start, hw)`` of the partition, through the replica's fetch, in log order, decoded:
    ``kind.decode(key, value, producer_id)`` per record (producer id -1 unless its batch is transactional)
    and ``kind.end_txn(producer_id, committed)`` per transaction marker; a None decoding is skipped."""
    out: list[Any] = []
    offset = start
    while offset < hw:
        res = await part.replica.fetch.remote(FetchRequest(offset, 1 << 20, current_leader_epoch=part.epoch))
        if res["error_code"]:
            E.raise_for_code(res["error_code"], res.get("error_message"))
        buf = res["records"]
        next_offset = res["next_offset"]  # the offset after the last batch (protocol.messages)
        if next_offset <= offset:
            raise LoadRetry(f"fetch at {offset} below HW {hw} returned no batches")
        for pos, h in iter_batch_headers(buf):
            if h.next_offset <= offset or h.base_offset >= hw:
                continue
            if h.is_control:
                records = RecordBatch(buf, pos, header=h).records()
                if records:
                    marker = kind.end_txn(h.producer_id, parse_control_record(records[0])[0] == CONTROL_COMMIT)
                    if marker is not None:
                        out.append(marker)
                continue
            pid = h.producer_id if h.is_transactional else -1
            for r in decode_records(buf[pos : pos + h.size_in_bytes]):
                if offset <= r.offset < hw:
                    rec = kind.decode(r.key, r.value, pid)
                    if rec is not None:
                        out.append(rec)
        offset = next_offset
    return out
