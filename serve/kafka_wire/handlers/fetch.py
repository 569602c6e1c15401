"""Fetch (api key 1, v4-16): each partition is read from its leader replica with a consumer
``protocol.messages.FetchRequest``; the batch bytes are returned as the replica gave them.

Long-poll: a first pass reads every partition at once without waiting; if that holds fewer than
``min_bytes`` (and nothing failed), every partition is asked again with ``max_wait`` through the replica's
own DelayedFetch, and the answer goes out as soon as one of them returns data (the others are read again
without waiting, so their data rides along) or the wait is over. Topics by name below v13, by topic id
from v13 (an unknown id: UNKNOWN_TOPIC_ID, 100). Empty records are empty bytes, never null; no fetch
sessions (KIP-227): session id 0 always. read_committed answers the aborted transactions of the range. The
response holds at most the request's ``max_bytes`` of records (``fetch.max.bytes``, KIP-74), but for the
first partition with records, which is answered whole; and, as Kafka's ReplicaManager reads, a partition is
read for no more than the response has left (``_read_within``), so a consumer of many partitions with a small
``fetch.max.bytes`` does not make the replicas read ``max.partition.fetch.bytes`` of each only to drop it.
KIP-392 (v11+, the request's ``rack_id``): any replica this broker hosts serves the fetch up to its HW, and a
leader whose ``replica.selector.class`` picks another replica answers ``preferred_read_replica`` with no records
(then nothing waits: the response goes at once, as Kafka's)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from protocol import errors as E
from protocol.messages import FetchRequest
from serve.kafka_wire import responses
from serve.kafka_wire.topic_ids import topic_uuid

UNKNOWN_TOPIC_ID = E.UnknownTopicIdError.code


def _moved(r: dict) -> bool:
    """The leader named a preferred read replica (KIP-392): answered, nothing to wait for."""
    return int(r.get("preferred_read_replica", -1)) >= 0


def _drop(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # a long-poll nobody waits for any more: retrieve its outcome


async def _pass(backend, parts, reqs, max_wait_ms: int) -> list:
    return await asyncio.gather(
        *(backend.fetch(t, p, _with_wait(r, max_wait_ms)) for (t, p, _key), r in zip(parts, reqs))
    )


def _with_wait(r: FetchRequest, max_wait_ms: int) -> FetchRequest:
    return dataclasses.replace(r, max_wait_ms=max_wait_ms)


async def _read_within(backend, parts, reqs, budget: int | None, have: bool = False) -> list:
    """Every partition read once without waiting, within the response's ``budget`` (``max_bytes``; None: none),
    as Kafka's ReplicaManager.readFromLog reads: each partition for at most ``min(its max_bytes, what is
    left)``, and once the budget is spent the rest for their offsets only (nothing read). Kafka reads them
    one after another; here they go in parallel waves, a wave being the partitions, in request order, whose
    limits together fit in what is left (so one wave when the budget covers them all). Until some
    partition returned records (``have``: the response holds some already) each read may return one batch
    over its limit (minOneMessage); ``_within`` keeps the first and leaves the others for the next fetch."""
    if budget is None or (budget > 0 and sum(r.max_bytes for r in reqs) <= budget):
        return await _pass(backend, parts, reqs, 0)
    results: list = [None] * len(parts)
    left, i = budget, 0
    while i < len(parts):
        have = have or any(r.get("records") for r in results[:i])
        wave: list[tuple[int, FetchRequest]] = []
        room = left
        while i < len(parts) and (not wave or room > 0 or left <= 0):
            cap = max(0, min(reqs[i].max_bytes, room))
            wave.append((i, dataclasses.replace(reqs[i], max_bytes=cap, min_one_message=not have)))
            room -= cap
            i += 1
            if left > 0 and cap < reqs[i - 1].max_bytes:
                break  # this wave fills what is left: the next reads know what it took
        got = await _pass(backend, [parts[j] for j, _ in wave], [r for _, r in wave], 0)
        for (j, _), r in zip(wave, got):
            results[j] = r
            left -= len(r.get("records") or b"")
    return results


async def _long_poll(backend, parts, reqs, first: list, max_wait_ms: int, budget: int | None) -> list:
    """Every partition asked with the wait (each for at most the response's ``budget``, if any); when one
    answers with records (or an error) the others are read again at once, within what the budget has left."""
    capped = [r if budget is None else dataclasses.replace(r, max_bytes=min(r.max_bytes, budget)) for r in reqs]
    tasks = [
        asyncio.ensure_future(backend.fetch(t, p, _with_wait(r, max_wait_ms))) for (t, p, _), r in zip(parts, capped)
    ]
    pending = set(tasks)
    results = list(first)
    deadline = asyncio.get_running_loop().time() + max_wait_ms / 1000 + 1.0
    while pending:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        got = [tasks.index(d) for d in done]
        for i in got:
            results[i] = tasks[i].result()
        if any(results[i].get("records") or results[i].get("error_code") or _moved(results[i]) for i in got):
            break
    if pending:
        for task in pending:
            task.add_done_callback(_drop)
        idx = [i for i, task in enumerate(tasks) if task in pending]
        taken = sum(len(r.get("records") or b"") for r in results)
        left = None if budget is None else budget - taken
        again = await _read_within(backend, [parts[i] for i in idx], [reqs[i] for i in idx], left, taken > 0)
        for i, r in zip(idx, again):
            results[i] = r
    return results


async def handle(backend, request, version: int):
    mod = responses.response_module(1, version)
    by_id = version >= 13
    names: dict[uuid.UUID, str] = {}
    if by_id:
        md = await backend.metadata()
        names = {topic_uuid(t["topic_id"]): n for n, t in md["topics"].items()}
    isolation = int(getattr(request, "isolation_level", 0))
    rack = str(getattr(request, "rack_id", "") or "") if version >= 11 else None  # KIP-392's client metadata
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    parts, reqs, unknown = [], [], []
    for t in request.topics:
        key = t.topic_id if by_id else t.topic
        name = names.get(key) if by_id else key
        for p in t.partitions:
            if name is None:
                unknown.append((key, p.partition))
                continue
            parts.append((name, p.partition, key))
            reqs.append(
                FetchRequest(
                    fetch_offset=int(p.fetch_offset),
                    max_bytes=int(p.partition_max_bytes),
                    min_bytes=int(request.min_bytes),
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    isolation_level=isolation,
                    client_rack=rack,
                )
            )
    max_bytes = int(getattr(request, "max_bytes", 0) or 0)
    budget = max_bytes if max_bytes > 0 else None
    results = await _read_within(backend, parts, reqs, budget)
    size = sum(len(r.get("records") or b"") for r in results)
    if max_wait_ms > 0 and parts and not unknown and size < max(1, int(request.min_bytes)):
        if not any(r.get("error_code") or _moved(r) for r in results):
            results = await _long_poll(backend, parts, reqs, results, max_wait_ms, budget)
    results = _within(results, max_bytes)
    answers = [(key, _partition_data(mod, p, r)) for (_name, p, key), r in zip(parts, results)]
    for key, p in unknown:
        answers.append((key, _partition_data(mod, p, {"error_code": UNKNOWN_TOPIC_ID})))
    topics = tuple(
        responses.make(mod, "FetchableTopicResponse", topic=key, topic_id=key, partitions=ps)
        for key, ps in responses.by_topic(answers).items()
    )
    return responses.make(
        mod,
        "FetchResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(0),
        session_id=0,
        responses=topics,
    )


def _within(results: list, max_bytes: int) -> list:
    """The response's ``max_bytes`` (a consumer's ``fetch.max.bytes``, Fetch v3+, KIP-74): partitions are
    filled in request order until their records reach it; the first partition with records is answered
    whole even if it alone is over (so a consumer always progresses), and every later partition's records
    are left for the next fetch (empty bytes, its high watermark and offsets still answered)."""
    if max_bytes <= 0:
        return results
    out, total = [], 0
    for r in results:
        n = len(r.get("records") or b"")
        if n and total and total + n > max_bytes:
            r = {**r, "records": b"", "aborted_transactions": None if r.get("aborted_transactions") is None else ()}
            n = 0
        total += n
        out.append(r)
    return out


def _partition_data(mod, p: int, r: dict):
    """One partition's FetchResponse entry (records as bytes, empty never null)."""
    aborted = r.get("aborted_transactions")
    return responses.make(
        mod,
        "PartitionData",
        partition_index=p,
        error_code=responses.error_code(r.get("error_code", 0)),
        high_watermark=r.get("high_watermark", -1),
        last_stable_offset=r.get("last_stable_offset", -1),
        log_start_offset=r.get("log_start_offset", -1),
        aborted_transactions=None
        if aborted is None
        else tuple(
            responses.make(mod, "AbortedTransaction", producer_id=pid, first_offset=off) for pid, off in aborted
        ),
        preferred_read_replica=int(r.get("preferred_read_replica", -1)),
        records=bytes(r.get("records") or b""),
    )
