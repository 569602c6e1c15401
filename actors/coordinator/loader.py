"""Loading a ``__consumer_offsets`` partition into a fresh shard (Kafka's CoordinatorLoader): wait until
this broker's replica leads at the coordinator's epoch with its HW over the log end it held at takeover,
read the partition to the HW through the replica's ``fetch`` and replay it into a new
``GroupCoordinatorShard``. Transient conditions (a replica call failing, a retriable Kafka error, a fetch
returning no batch) are retried every 50 ms; a corrupt or undecodable partition is not served.

``load_shard`` is driven by the coordinator actor (actors/group_coordinator.py), which installs the
outcome: the loaded shard, ``MOVED`` (a newer epoch took leadership away), ``FAILED``, or None when the
load was abandoned (``is_current()`` went False: the partition was unloaded or reloaded meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ray.exceptions import RayActorError, RayTaskError

from actors.coordinator.runtime import CoordinatorContext, LoadRetry
from actors.group.records import EndTxnMarker
from actors.group.service import OFFSETS_TOPIC
from actors.group.shard import GroupCoordinatorShard
from protocol import errors as E
from protocol.messages import FetchRequest
from storage.control import CONTROL_COMMIT, parse_control_record
from storage.records import RecordBatch, decode_records, iter_batch_headers

log = logging.getLogger("rafka.group_coordinator")

MOVED, FAILED = "moved", "failed"
RETRY_S = 0.05


async def load_shard(
    part: CoordinatorContext, is_current: Callable[[], bool], now_ms: Callable[[], int], broker_id: int
) -> GroupCoordinatorShard | str | None:
    """The partition's shard once loaded (see the module docstring for the other outcomes)."""
    t0 = time.monotonic()
    target = None
    name = f"b{broker_id}: {OFFSETS_TOPIC}-{part.partition}"
    while is_current():
        try:
            st = await part.replica.state.remote()
            if st.get("leader_epoch", -1) > part.epoch and st.get("role") != "leader":
                return MOVED
            if st.get("role") == "leader" and st.get("leader_epoch") == part.epoch:
                target = st["log_end_offset"] if target is None else target
                if st["high_watermark"] >= target:
                    pairs = await read_partition(part, st["log_start_offset"], st["high_watermark"])
                    if not is_current():
                        return None
                    shard = GroupCoordinatorShard(part.config)
                    part.loaded_records = shard.load(pairs, now_ms())
                    log.info(
                        "%s loaded at epoch %d: %d records, %d groups in %.0f ms",
                        name,
                        part.epoch,
                        part.loaded_records,
                        len(shard.group_ids()),
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


async def read_partition(part: CoordinatorContext, start: int, hw: int) -> list:
    """Every record in ``[start, hw)`` of the partition, through the replica's fetch, in log order: a
    ``(key, value, producer_id)`` triple per record (producer id -1 unless its batch is transactional) and an
    ``EndTxnMarker`` per transaction marker."""
    pairs: list = []
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
                    kind = parse_control_record(records[0])[0]
                    pairs.append(EndTxnMarker(h.producer_id, kind == CONTROL_COMMIT))
                continue
            pid = h.producer_id if h.is_transactional else -1
            for r in decode_records(buf[pos : pos + h.size_in_bytes]):
                if offset <= r.offset < hw:
                    pairs.append((r.key, r.value, pid))
        offset = next_offset
    return pairs
