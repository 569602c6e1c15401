"""The group coordinator: one async actor per broker, a thin shell over ``GroupCoordinatorShard``.

Named ``group_coordinator_name(cluster, broker_id)`` (protocol/names.py), created by its broker as a
non-detached child pinned to the broker's node (it dies with the broker, as Kafka's GroupCoordinator
lives in the broker process). It serves the consumer groups whose ``__consumer_offsets`` partition
(``partition_for(group_id, offsets.topic.num.partitions)``) this broker's replica leads.

``__consumer_offsets`` is an internal compacted topic (``cleanup.policy=compact``) with
``offsets.topic.num.partitions`` partitions (default 5 here: the embedded cluster keeps few actors;
Kafka's default is 50) and replication factor ``min(offsets.topic.replication.factor (3), alive
brokers)``. Like Kafka, the broker creates it lazily on the first FindCoordinator.

Leadership (Kafka's onElection / onResignation). The broker calls ``on_elected(p, leader_epoch,
replica)`` after its replica of partition ``p`` became leader, and ``on_resigned(p, leader_epoch)``
after it became a follower or was stopped (notifications are ordered per partition by the broker's
partition lock; older epochs are ignored). On election the coordinator waits until the replica's high
watermark covers everything the replica held when it took over (the previous leader's tail becomes
committed once the ISR catches up), reads the partition from its log start to the HW through the local
replica's ``fetch`` and ``load``\\ s a fresh shard. Meanwhile requests for its groups get
COORDINATOR_LOAD_IN_PROGRESS; groups of partitions it does not lead get NOT_COORDINATOR.

Per request (Kafka's CoordinatorRuntime, in one event loop so no lock is needed): call the shard's
handler with ``now_ms``, replay all its records at once, and submit its durable records as one
RecordBatch to the replica's ``produce(acks=-1, current_leader_epoch=epoch)`` -- all synchronously, so
appends reach the replica in handler order. The caller's answer (and the completions of parked
JoinGroup/SyncGroup calls) is sent only once that append and every earlier one are acknowledged; a
request without durable records waits for the last pending append (read-your-writes). An append
failure fails that request and every later one in flight, answers every parked call, and reloads the
shard from the partition, which is the truth; errors are mapped as Kafka's coordinator does
(NOT_ENOUGH_REPLICAS / REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER ->
NOT_COORDINATOR, MESSAGE_TOO_LARGE -> UNKNOWN_SERVER_ERROR or INVALID_COMMIT_OFFSET_SIZE for commits).

Parked JoinGroup/SyncGroup calls are asyncio futures (``max_concurrency`` is sized for them); one timer
task per partition sleeps until ``shard.next_deadline()`` and runs ``poll_expirations``; every
``offsets.retention.check.interval.ms`` a task runs ``cleanup_expired_offsets``.

Every method answers a plain dict with Kafka error codes; bad input gets an error code and a message,
never an exception out of the actor.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors.group_model import (
    CoordinatorResult, GroupCoordinatorConfig, Pending, join_response, sync_response,
)
from actors.group_records import partition_for
from actors.group_state import GroupCoordinatorShard
from protocol import errors as E
from storage.records import RecordBatchBuilder, decode_records

log = logging.getLogger("rafka.group_coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 5
DEFAULT_OFFSETS_REPLICATION = 3
DEFAULT_OFFSETS_SEGMENT_BYTES = 104857600
DEFAULT_COMMIT_TIMEOUT_MS = 5000

NONE = 0
UNKNOWN_SERVER_ERROR = E.for_name("UNKNOWN_SERVER_ERROR").code
COORDINATOR_LOAD_IN_PROGRESS = E.for_name("COORDINATOR_LOAD_IN_PROGRESS").code
COORDINATOR_NOT_AVAILABLE = E.for_name("COORDINATOR_NOT_AVAILABLE").code
NOT_COORDINATOR = E.for_name("NOT_COORDINATOR").code
INVALID_GROUP_ID = E.for_name("INVALID_GROUP_ID").code
INVALID_REQUEST = E.for_name("INVALID_REQUEST").code
INVALID_COMMIT_OFFSET_SIZE = E.for_name("INVALID_COMMIT_OFFSET_SIZE").code
_RETRIABLE = (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)

# Kafka's GroupCoordinatorService.normalizeException for append failures.
_APPEND_ERRORS = {
    **{E.for_name(n).code: COORDINATOR_NOT_AVAILABLE for n in (
        "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT",
        "UNKNOWN_TOPIC_OR_PARTITION")},
    **{E.for_name(n).code: NOT_COORDINATOR for n in (
        "NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH")},
    **{E.for_name(n).code: UNKNOWN_SERVER_ERROR for n in (
        "MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")},
}
_TOO_LARGE = {E.for_name(n).code for n in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")}

LOADING, ACTIVE, FAILED = "loading", "active", "failed"


def now_ms() -> int:
    return int(time.time() * 1000)


def coordinator_config(props: dict | None) -> GroupCoordinatorConfig:
    """``GroupCoordinatorConfig`` from Kafka's broker config names (missing keys keep Kafka's defaults)."""
    props = props or {}
    names = {
        "group.min.session.timeout.ms": "group_min_session_timeout_ms",
        "group.max.session.timeout.ms": "group_max_session_timeout_ms",
        "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
        "group.max.size": "group_max_size",
        "offsets.retention.minutes": "offsets_retention_minutes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }
    return GroupCoordinatorConfig(**{field: int(props[k]) for k, field in names.items() if k in props})


def offsets_partitions(props: dict | None) -> int:
    return int((props or {}).get("offsets.topic.num.partitions", DEFAULT_OFFSETS_PARTITIONS))


def offsets_topic_spec(props: dict | None, alive_brokers: int) -> dict:
    """The CreateTopics request for ``__consumer_offsets`` (Kafka's auto-creation of the internal topic)."""
    props = props or {}
    rf = int(props.get("offsets.topic.replication.factor", DEFAULT_OFFSETS_REPLICATION))
    return {"name": OFFSETS_TOPIC, "num_partitions": offsets_partitions(props),
            "replication_factor": max(1, min(rf, alive_brokers)),
            "configs": {"cleanup.policy": "compact",
                        "segment.bytes": int(props.get("offsets.topic.segment.bytes",
                                                       DEFAULT_OFFSETS_SEGMENT_BYTES))}}


def _bad_input(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, E.KafkaError):
        return E.error_response(exc)
    if isinstance(exc, (TypeError, ValueError, KeyError, AttributeError, IndexError)):
        return INVALID_REQUEST, f"malformed request: {type(exc).__name__}: {exc}"
    return UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def _valid_group(group_id) -> bool:
    """Kafka's isGroupIdValid: a non-empty string."""
    return isinstance(group_id, str) and bool(group_id)


def _message(code: int) -> str:
    return E.for_code(code).default_message if code else ""


class _LoadRetry(Exception):
    """A transient condition while reading the partition: try the load again."""


class _Partition:
    """One ``__consumer_offsets`` partition this coordinator leads (or is loading)."""

    def __init__(self, partition: int, epoch: int, replica, config: GroupCoordinatorConfig):
        self.partition, self.epoch, self.replica, self.config = partition, epoch, replica, config
        self.shard = GroupCoordinatorShard(config)
        self.state = LOADING
        self.gen = 0                     # bumped on every (re)load and unload: stale tasks stop
        self.tail: asyncio.Task | None = None   # the latest append's outcome (error code, 0 = acked)
        self.parked: dict[tuple, list[asyncio.Future]] = {}
        self.timer: asyncio.Task | None = None
        self.timer_deadline: int | None = None
        self.tasks: list[asyncio.Task] = []  # load and cleanup
        self.loaded_records = 0
        self.appends = 0

    def fail_parked(self, code: int) -> None:
        for futs in self.parked.values():
            for f in futs:
                if not f.done():
                    f.set_result(code)
        self.parked.clear()

    def stop_tasks(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_deadline = None, None
        for t in self.tasks:
            t.cancel()
        self.tasks = []


class GroupCoordinatorActor:
    def __init__(self, cluster: str, broker_id: int, config: dict | None = None):
        self.cluster, self.broker_id = cluster, int(broker_id)
        self.props = dict(config or {})
        self.config = coordinator_config(self.props)
        self.num_partitions = offsets_partitions(self.props)
        self.commit_timeout_ms = int(self.props.get("offsets.commit.timeout.ms", DEFAULT_COMMIT_TIMEOUT_MS))
        self.parts: dict[int, _Partition] = {}
        self.epochs: dict[int, int] = {}  # newest leader epoch seen per partition

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of ``__consumer_offsets-{partition}`` leads at ``leader_epoch``: load it."""
        p, epoch = int(partition), int(leader_epoch)
        if epoch < self.epochs.get(p, -1):
            return {"error_code": 0, "ignored": True}
        cur = self.parts.get(p)
        if cur is not None and cur.epoch == epoch and cur.state != FAILED:
            return {"error_code": 0, "ignored": True}
        self.epochs[p] = epoch
        if cur is not None:
            self._unload(cur, NOT_COORDINATOR)
        part = self.parts[p] = _Partition(p, epoch, replica, self.config)
        self._start_load(part)
        return {"error_code": 0}

    async def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        """This broker no longer leads the partition (follower at ``leader_epoch``, or stopped: None)."""
        p = int(partition)
        if leader_epoch is not None:
            if int(leader_epoch) < self.epochs.get(p, -1):
                return {"error_code": 0, "ignored": True}
            self.epochs[p] = int(leader_epoch)
        cur = self.parts.get(p)
        if cur is not None and (leader_epoch is None or cur.epoch <= int(leader_epoch)):
            self._unload(cur, NOT_COORDINATOR)
        return {"error_code": 0}

    def _unload(self, part: _Partition, code: int) -> None:
        part.gen += 1
        part.state = FAILED
        part.stop_tasks()
        part.fail_parked(code)
        if self.parts.get(part.partition) is part:
            del self.parts[part.partition]
        log.info("b%d: unloaded %s-%d (epoch %d)", self.broker_id, OFFSETS_TOPIC, part.partition, part.epoch)

    def _start_load(self, part: _Partition) -> None:
        part.gen += 1
        part.state = LOADING
        part.stop_tasks()
        part.tail = None
        part.tasks.append(asyncio.get_running_loop().create_task(self._load(part, part.gen)))

    def _current(self, part: _Partition, gen: int) -> bool:
        return self.parts.get(part.partition) is part and part.gen == gen

    async def _load(self, part: _Partition, gen: int) -> None:
        """Wait until the replica leads at our epoch with its HW over its takeover LEO, read to the HW, load."""
        t0 = time.monotonic()
        target = None
        while self._current(part, gen):
            try:
                st = await part.replica.state.remote()
                if st.get("leader_epoch", -1) > part.epoch and st.get("role") != "leader":
                    self._unload(part, NOT_COORDINATOR)  # a newer epoch moved leadership away
                    return
                if st.get("role") == "leader" and st.get("leader_epoch") == part.epoch:
                    target = st["log_end_offset"] if target is None else target
                    if st["high_watermark"] >= target:
                        pairs = await self._read_partition(part, st["log_start_offset"], st["high_watermark"])
                        if not self._current(part, gen):
                            return
                        shard = GroupCoordinatorShard(self.config)
                        part.loaded_records = shard.load(pairs, now_ms())
                        part.shard, part.state = shard, ACTIVE
                        self._rearm(part)
                        part.tasks.append(asyncio.get_running_loop().create_task(self._cleanup_loop(part, gen)))
                        log.info("b%d: loaded %s-%d epoch %d: %d records, %d groups in %.0f ms", self.broker_id,
                                 OFFSETS_TOPIC, part.partition, part.epoch, part.loaded_records,
                                 len(shard.group_ids()), (time.monotonic() - t0) * 1000)
                        return
            except (RayActorError, RayTaskError, _LoadRetry) as e:
                log.info("b%d: loading %s-%d: retrying (%s: %s)", self.broker_id, OFFSETS_TOPIC,
                         part.partition, type(e).__name__, e)
            except E.KafkaError as e:
                if isinstance(e, E.CorruptMessageError):
                    log.error("b%d: %s-%d is corrupt, not loading it: %s", self.broker_id, OFFSETS_TOPIC,
                              part.partition, e)
                    part.state = FAILED
                    return
                log.info("b%d: loading %s-%d: %s", self.broker_id, OFFSETS_TOPIC, part.partition, e)
            except Exception:  # noqa: BLE001 - an undecodable partition: serve nothing rather than guess
                log.exception("b%d: loading %s-%d failed", self.broker_id, OFFSETS_TOPIC, part.partition)
                part.state = FAILED
                return
            await asyncio.sleep(0.05)

    async def _read_partition(self, part: _Partition, start: int, hw: int) -> list[tuple[bytes, bytes | None]]:
        pairs: list[tuple[bytes, bytes | None]] = []
        offset = start
        while offset < hw:
            res = await part.replica.fetch.remote(offset, 1 << 20, current_leader_epoch=part.epoch)
            if res["error_code"]:
                E.raise_for_code(res["error_code"], res.get("error_message"))
            buf = res["records"]
            next_offset = res["next_offset"]  # the offset after the last batch (protocol.messages)
            if next_offset <= offset:
                raise _LoadRetry(f"fetch at {offset} below HW {hw} returned no batches")
            for r in decode_records(buf):
                if offset <= r.offset < hw:
                    pairs.append((r.key, r.value))
            offset = next_offset
        return pairs

    # ================================================================== the request pipeline
    def _route(self, group_id) -> tuple[_Partition | None, int]:
        if not _valid_group(group_id):
            return None, INVALID_GROUP_ID
        part = self.parts.get(partition_for(group_id, self.num_partitions))
        if part is None:
            return None, NOT_COORDINATOR
        if part.state == LOADING:
            return None, COORDINATOR_LOAD_IN_PROGRESS
        if part.state != ACTIVE:
            return None, COORDINATOR_NOT_AVAILABLE
        return part, NONE

    async def _write(self, group_id, handler: Callable[[GroupCoordinatorShard, int], CoordinatorResult],
                     on_error: Callable[[int, str], Any], too_large: int = UNKNOWN_SERVER_ERROR):
        part, code = self._route(group_id)
        if code:
            return on_error(code, _message(code))
        try:
            result = handler(part.shard, now_ms())
        except Exception as exc:  # noqa: BLE001 - bad input must not kill the actor
            return on_error(*_bad_input(exc))
        return await self._complete(part, result, on_error, too_large)

    async def _complete(self, part: _Partition, result: CoordinatorResult, on_error, too_large: int):
        gen = part.gen
        part.shard.replay_all(result.records)
        waiter = None
        if isinstance(result.response, Pending):
            waiter = asyncio.get_running_loop().create_future()
            part.parked.setdefault(result.response.key, []).append(waiter)
        durable = result.durable_records
        tail = self._append(part, durable) if durable else part.tail
        self._rearm(part)
        raw = await asyncio.shield(tail) if tail is not None else NONE
        if raw:
            code = too_large if raw in _TOO_LARGE else _APPEND_ERRORS.get(raw, raw)
            self._append_failed(part, gen, code)
            if waiter is not None and not waiter.done():
                waiter.set_result(code)
            return on_error(code, _message(code))
        for key, response in result.completions:
            futs = part.parked.get(key)
            if futs:
                f = futs.pop(0)
                if not futs:
                    del part.parked[key]
                if not f.done():
                    f.set_result(response)
        if waiter is None:
            return result.response
        answer = await waiter
        return on_error(answer, _message(answer)) if isinstance(answer, int) else answer

    def _append(self, part: _Partition, records) -> asyncio.Task:
        ts = now_ms()
        size = sum(len(r.key_bytes()) + len(r.value_bytes() or b"") + 32 for r in records)
        b = RecordBatchBuilder(batch_size=size + 1024)
        for r in records:
            b.append(ts, r.key_bytes(), r.value_bytes())
        ref = part.replica.produce.remote(b.build(), -1, self.commit_timeout_ms, current_leader_epoch=part.epoch)
        part.appends += 1
        task = asyncio.get_running_loop().create_task(self._acked(ref, part.tail))
        part.tail = task
        return task

    @staticmethod
    async def _acked(ref, previous: asyncio.Task | None) -> int:
        """The replica's error code for this append (0 = acknowledged), or the first earlier failure."""
        try:
            res = await ref
            code = res["error_code"] or NONE
        except (RayActorError, RayTaskError):
            code = NOT_COORDINATOR
        if previous is not None:  # an append is acknowledged only if every earlier one was
            prev = await asyncio.shield(previous)
            code = prev or code
        return code

    def _append_failed(self, part: _Partition, gen: int, code: int) -> None:
        if not self._current(part, gen) or part.state != ACTIVE:
            return  # already unloaded or reloading
        log.warning("b%d: append to %s-%d failed (error %d): reloading", self.broker_id, OFFSETS_TOPIC,
                    part.partition, code)
        part.fail_parked(code)
        self._start_load(part)

    # ================================================================== timers
    def _rearm(self, part: _Partition) -> None:
        if part.state != ACTIVE:
            return
        deadline = part.shard.next_deadline()
        if deadline == part.timer_deadline and part.timer is not None:
            return
        if part.timer is not None:
            part.timer.cancel()
        part.timer, part.timer_deadline = None, deadline
        if deadline is not None:
            part.timer = asyncio.get_running_loop().create_task(self._fire(part, part.gen, deadline))

    async def _fire(self, part: _Partition, gen: int, deadline: int) -> None:
        await asyncio.sleep(max(0, deadline - now_ms()) / 1000)
        if not self._current(part, gen) or part.state != ACTIVE:
            return
        part.timer, part.timer_deadline = None, None  # this run is no longer cancellable by a re-arm
        try:
            await self._complete(part, part.shard.poll_expirations(now_ms()), lambda c, m: None, UNKNOWN_SERVER_ERROR)
        except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
            log.exception("b%d: group timers of %s-%d", self.broker_id, OFFSETS_TOPIC, part.partition)
        self._rearm(part)

    async def _cleanup_loop(self, part: _Partition, gen: int) -> None:
        interval = max(0.01, self.config.offsets_retention_check_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            if not self._current(part, gen) or part.state != ACTIVE:
                return
            try:
                await self._complete(part, part.shard.cleanup_expired_offsets(now_ms()), lambda c, m: None,
                                     UNKNOWN_SERVER_ERROR)
            except Exception:  # noqa: BLE001
                log.exception("b%d: offsets retention of %s-%d", self.broker_id, OFFSETS_TOPIC, part.partition)

    async def _read(self, group_id, reader: Callable[[GroupCoordinatorShard], dict], on_error):
        """A read: answered from the current state once every append it reflects is acknowledged."""
        part, code = self._route(group_id)
        if code:
            return on_error(code, _message(code))
        try:
            response = reader(part.shard)
        except Exception as exc:  # noqa: BLE001
            return on_error(*_bad_input(exc))
        gen, tail = part.gen, part.tail
        raw = await asyncio.shield(tail) if tail is not None else NONE
        if raw:
            code = _APPEND_ERRORS.get(raw, raw)
            self._append_failed(part, gen, code)
            return on_error(code, _message(code))
        return response

    # ================================================================== the API (JoinGroup & co)
    async def join_group(self, group_id: str, member_id: str, protocol_type: str, protocols,
                         session_timeout_ms: int, rebalance_timeout_ms: int = -1, **kw) -> dict:
        """JoinGroup; answers when the rebalance completes (parked meanwhile). Keywords as the shard's
        (``group_instance_id``, ``client_id``, ``client_host``, ``require_known_member_id``,
        ``supports_skip_assignment``). ``rebalance_timeout_ms=-1``: the session timeout (JoinGroup v0)."""
        def on_error(code, msg):
            return {**join_response(code, member_id if isinstance(member_id, str) else ""), "error_message": msg}
        if not _valid_group(group_id):
            return on_error(INVALID_GROUP_ID, _message(INVALID_GROUP_ID))
        rebalance = rebalance_timeout_ms if isinstance(rebalance_timeout_ms, int) and rebalance_timeout_ms >= 0 \
            else session_timeout_ms
        return await self._write(group_id, lambda s, now: s.join_group(
            group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance, now, **kw), on_error)

    async def sync_group(self, group_id: str, member_id: str, generation_id: int, assignments=None, **kw) -> dict:
        """SyncGroup: the leader passes ``{member_id: assignment bytes}``; everyone gets their own assignment."""
        def on_error(code, msg):
            return {**sync_response(code), "error_message": msg}
        if not _valid_group(group_id):
            return on_error(INVALID_GROUP_ID, _message(INVALID_GROUP_ID))
        return await self._write(group_id, lambda s, now: s.sync_group(
            group_id, member_id, generation_id, assignments, now, **kw), on_error)

    async def heartbeat(self, group_id: str, member_id: str, generation_id: int, **kw) -> dict:
        if not _valid_group(group_id):
            return {"error_code": INVALID_GROUP_ID, "error_message": _message(INVALID_GROUP_ID)}
        return await self._write(group_id, lambda s, now: s.heartbeat(group_id, member_id, generation_id, now, **kw),
                                 lambda c, m: {"error_code": c, "error_message": m})

    async def leave_group(self, group_id: str, members) -> dict:
        """LeaveGroup (v3+ batch): ``members=[{"member_id", "group_instance_id"}]``."""
        if not _valid_group(group_id):
            return {"error_code": INVALID_GROUP_ID, "error_message": _message(INVALID_GROUP_ID), "members": []}
        return await self._write(group_id, lambda s, now: s.leave_group(group_id, list(members), now),
                                 lambda c, m: {"error_code": c, "error_message": m, "members": []})

    # ================================================================== offsets
    async def offset_commit(self, group_id: str, topics, member_id: str = "", generation_id: int = -1,
                            group_instance_id: str | None = None) -> dict:
        """OffsetCommit: ``topics=[{"name", "partitions": [{"partition_index", "committed_offset",
        "committed_leader_epoch"?, "committed_metadata"?}]}]`` -> per-partition error codes."""
        if not _valid_group(group_id):
            return {"error_code": INVALID_GROUP_ID, "error_message": _message(INVALID_GROUP_ID), "topics": []}

        def on_error(code, msg):
            try:
                return {"topics": [{"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code} for p in t.get("partitions", [])]}
                    for t in topics], "error_message": msg}
            except (TypeError, KeyError, AttributeError):
                return {"error_code": code, "error_message": msg, "topics": []}
        return await self._write(group_id, lambda s, now: s.offset_commit(
            group_id, topics, now, member_id=member_id, generation_id=generation_id,
            group_instance_id=group_instance_id), on_error, too_large=INVALID_COMMIT_OFFSET_SIZE)

    async def offset_fetch(self, group_id: str, topics=None) -> dict:
        """OffsetFetch: ``topics=[{"name", "partition_indexes"}]`` or None for all; -1 = nothing committed."""
        if not _valid_group(group_id):
            return {"error_code": INVALID_GROUP_ID, "error_message": _message(INVALID_GROUP_ID), "topics": []}
        return await self._read(group_id, lambda s: s.offset_fetch(group_id, topics),
                                lambda c, m: {"error_code": c, "error_message": m, "topics": []})

    async def offset_delete(self, group_id: str, topics) -> dict:
        """OffsetDelete (KIP-496): ``topics=[{"name", "partitions": [{"partition_index"}]}]``."""
        if not _valid_group(group_id):
            return {"error_code": INVALID_GROUP_ID, "error_message": _message(INVALID_GROUP_ID), "topics": []}
        return await self._write(group_id, lambda s, now: s.offset_delete(group_id, topics),
                                 lambda c, m: {"error_code": c, "error_message": m, "topics": []})

    # ================================================================== admin
    async def list_groups(self, states_filter=None, types_filter=None) -> dict:
        """ListGroups over every partition this coordinator leads; COORDINATOR_LOAD_IN_PROGRESS (with the
        groups of the loaded partitions) while one is still loading."""
        groups, code, tails = [], NONE, []
        try:
            for p in sorted(self.parts):
                part = self.parts[p]
                if part.state == LOADING:
                    code = COORDINATOR_LOAD_IN_PROGRESS
                elif part.state == ACTIVE:
                    groups += part.shard.list_groups(states_filter, types_filter)["groups"]
                    if part.tail is not None:
                        tails.append(part.tail)
        except Exception as exc:  # noqa: BLE001
            c, m = _bad_input(exc)
            return {"error_code": c, "error_message": m, "groups": []}
        codes = [_APPEND_ERRORS.get(c, c) for c in [await asyncio.shield(t) for t in tails]]
        code = code or next((c for c in codes if c), NONE)
        return {"error_code": code, "error_message": _message(code) or None, "groups": groups}

    async def describe_groups(self, group_ids) -> dict:
        """DescribeGroups: one entry per group (its own error code when this is not its coordinator)."""
        if isinstance(group_ids, str) or not isinstance(group_ids, (list, tuple)):
            return {"error_code": INVALID_REQUEST, "error_message": "group_ids must be a list", "groups": []}

        async def one(gid):
            def on_error(code, msg):
                return {"error_code": code, "error_message": msg, "group_id": gid, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []}
            return await self._read(gid, lambda s: s.describe_groups([gid])["groups"][0], on_error)
        return {"groups": list(await asyncio.gather(*(one(g) for g in group_ids)))}

    async def delete_groups(self, group_ids) -> dict:
        """DeleteGroups: Empty groups only (NON_EMPTY_GROUP otherwise); their offsets are tombstoned too."""
        if isinstance(group_ids, str) or not isinstance(group_ids, (list, tuple)):
            return {"error_code": INVALID_REQUEST, "error_message": "group_ids must be a list", "results": []}
        by_part: dict[int, list] = {}
        results: dict = {}
        for gid in group_ids:
            if not _valid_group(gid):
                results[gid] = {"group_id": gid, "error_code": INVALID_GROUP_ID}
            else:
                by_part.setdefault(partition_for(gid, self.num_partitions), []).append(gid)

        async def batch(gids):
            res = await self._write(gids[0], lambda s, now: s.delete_groups(gids, now),
                                    lambda c, m: {"results": [{"group_id": g, "error_code": c} for g in gids]})
            for r in res["results"]:
                results[r["group_id"]] = r
        await asyncio.gather(*(batch(g) for g in by_part.values()))
        return {"results": [results[g] for g in dict.fromkeys(group_ids) if g in results]}

    # ================================================================== introspection
    def describe_coordinator(self) -> dict:
        """What this coordinator serves: per partition its state, leader epoch and group count."""
        return {"broker_id": self.broker_id, "num_partitions": self.num_partitions, "partitions": {
            p: {"state": part.state, "leader_epoch": part.epoch, "groups": part.shard.group_ids(),
                "loaded_records": part.loaded_records, "appends": part.appends,
                "parked": sum(len(v) for v in part.parked.values()), "next_deadline": part.timer_deadline}
            for p, part in sorted(self.parts.items())}}

    def ping(self) -> int:
        return self.broker_id


RemoteGroupCoordinator = ray.remote(GroupCoordinatorActor)


def is_retriable_coordinator_error(code: int) -> bool:
    """A client answers these by finding the coordinator again and retrying (Kafka's consumer does)."""
    return code in _RETRIABLE
