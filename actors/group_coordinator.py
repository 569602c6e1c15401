"""The group coordinator: one async actor per broker, a thin shell over ``GroupCoordinatorShard``.

Named ``group_coordinator_name(cluster, broker_id)`` (protocol/names.py), created by its broker as a
non-detached child pinned to the broker's node (it dies with the broker, as Kafka's GroupCoordinator
lives in the broker process). It serves the consumer groups whose ``__consumer_offsets`` partition
(``partition_for(group_id, offsets.topic.num.partitions)``) this broker's replica leads.

``__consumer_offsets`` (its spec, error normalization, routing: actors/group_service.py) is created
lazily by the broker on the first FindCoordinator. docs/internals.md ("Group coordinator") has the rules.

Leadership (Kafka's onElection / onResignation). The broker calls ``on_elected(p, leader_epoch, replica)``
/ ``on_resigned(p, leader_epoch)`` (ordered per partition; older epochs ignored). On election the
coordinator waits until the replica's HW covers what it held at takeover, reads the partition to the HW
through the replica's ``fetch`` and loads a fresh shard; meanwhile COORDINATOR_LOAD_IN_PROGRESS.

Per request (Kafka's CoordinatorRuntime, one event loop, no lock; per partition a CoordinatorContext,
actors/coordinator_runtime.py): the shard's handler with ``now_ms``, replay its records, submit the durable
ones as one RecordBatch to ``produce(acks=-1, current_leader_epoch=epoch)``, all synchronously so appends
keep handler order. The answer (and parked JoinGroup/SyncGroup completions) goes out once that append and
every earlier one are acknowledged; a failed append fails the requests in flight, answers parked calls and
reloads the shard from the partition. Timers: one task per partition sleeps until ``shard.next_deadline()``
(``poll_expirations``); every ``offsets.retention.check.interval.ms`` ``cleanup_expired_offsets`` runs.
Every method answers a plain dict with Kafka error codes, never an exception out of the actor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors import group_service as svc
from actors.coordinator_runtime import CoordinatorContext, LoadRetry, list_groups, records_batch
from actors.group_model import CoordinatorResult, Pending
from actors.group_records import partition_for
from actors.group_service import OFFSETS_TOPIC
from actors.group_state import GroupCoordinatorShard
from protocol import errors as E
from protocol.messages import FetchRequest, ProduceRequest
from storage.records import decode_records

log = logging.getLogger("rafka.group_coordinator")


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinatorActor:
    def __init__(self, cluster: str, broker_id: int, config: dict | None = None):
        self.cluster, self.broker_id = cluster, int(broker_id)
        self.props = dict(config or {})
        self.config = svc.coordinator_config(self.props)
        self.num_partitions = svc.offsets_partitions(self.props)
        self.commit_timeout_ms = int(self.props.get("offsets.commit.timeout.ms", svc.DEFAULT_COMMIT_TIMEOUT_MS))
        self.parts: dict[int, CoordinatorContext] = {}
        self.epochs: dict[int, int] = {}  # newest leader epoch seen per partition

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of ``__consumer_offsets-{partition}`` leads at ``leader_epoch``: load it."""
        p, epoch = int(partition), int(leader_epoch)
        if epoch < self.epochs.get(p, -1):
            return {"error_code": 0, "ignored": True}
        cur = self.parts.get(p)
        if cur is not None and cur.epoch == epoch and cur.state != svc.FAILED:
            return {"error_code": 0, "ignored": True}
        self.epochs[p] = epoch
        if cur is not None:
            self._unload(cur, svc.NOT_COORDINATOR)
        part = self.parts[p] = CoordinatorContext(p, epoch, replica, self.config)
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
            self._unload(cur, svc.NOT_COORDINATOR)
        return {"error_code": 0}

    def _unload(self, part: CoordinatorContext, code: int) -> None:
        part.gen += 1
        part.state = svc.FAILED
        part.stop_tasks()
        part.fail_parked(code)
        if self.parts.get(part.partition) is part:
            del self.parts[part.partition]
        log.info("b%d: unloaded %s-%d (epoch %d)", self.broker_id, OFFSETS_TOPIC, part.partition, part.epoch)

    def _start_load(self, part: CoordinatorContext) -> None:
        part.gen += 1
        part.state = svc.LOADING
        part.stop_tasks()
        part.tail = None
        part.tasks.append(asyncio.get_running_loop().create_task(self._load(part, part.gen)))

    def _current(self, part: CoordinatorContext, gen: int) -> bool:
        return self.parts.get(part.partition) is part and part.gen == gen

    async def _load(self, part: CoordinatorContext, gen: int) -> None:
        """Wait until the replica leads at our epoch with its HW over its takeover LEO, read to the HW, load."""
        t0 = time.monotonic()
        target = None
        while self._current(part, gen):
            try:
                st = await part.replica.state.remote()
                if st.get("leader_epoch", -1) > part.epoch and st.get("role") != "leader":
                    self._unload(part, svc.NOT_COORDINATOR)  # a newer epoch moved leadership away
                    return
                if st.get("role") == "leader" and st.get("leader_epoch") == part.epoch:
                    target = st["log_end_offset"] if target is None else target
                    if st["high_watermark"] >= target:
                        pairs = await self._read_partition(part, st["log_start_offset"], st["high_watermark"])
                        if not self._current(part, gen):
                            return
                        shard = GroupCoordinatorShard(self.config)
                        part.loaded_records = shard.load(pairs, now_ms())
                        part.shard, part.state = shard, svc.ACTIVE
                        self._rearm(part)
                        part.tasks.append(asyncio.get_running_loop().create_task(self._cleanup_loop(part, gen)))
                        log.info(
                            "b%d: loaded %s-%d epoch %d: %d records, %d groups in %.0f ms",
                            self.broker_id,
                            OFFSETS_TOPIC,
                            part.partition,
                            part.epoch,
                            part.loaded_records,
                            len(shard.group_ids()),
                            (time.monotonic() - t0) * 1000,
                        )
                        return
            except (RayActorError, RayTaskError, LoadRetry) as e:
                log.info(
                    "b%d: loading %s-%d: retrying (%s: %s)",
                    self.broker_id,
                    OFFSETS_TOPIC,
                    part.partition,
                    type(e).__name__,
                    e,
                )
            except E.KafkaError as e:
                if isinstance(e, E.CorruptMessageError):
                    log.error(
                        "b%d: %s-%d is corrupt, not loading it: %s", self.broker_id, OFFSETS_TOPIC, part.partition, e
                    )
                    part.state = svc.FAILED
                    return
                log.info("b%d: loading %s-%d: %s", self.broker_id, OFFSETS_TOPIC, part.partition, e)
            except Exception:  # noqa: BLE001 - an undecodable partition: serve nothing rather than guess
                log.exception("b%d: loading %s-%d failed", self.broker_id, OFFSETS_TOPIC, part.partition)
                part.state = svc.FAILED
                return
            await asyncio.sleep(0.05)

    async def _read_partition(self, part: CoordinatorContext, start: int, hw: int) -> list[tuple[bytes, bytes | None]]:
        pairs: list[tuple[bytes, bytes | None]] = []
        offset = start
        while offset < hw:
            res = await part.replica.fetch.remote(FetchRequest(offset, 1 << 20, current_leader_epoch=part.epoch))
            if res["error_code"]:
                E.raise_for_code(res["error_code"], res.get("error_message"))
            buf = res["records"]
            next_offset = res["next_offset"]  # the offset after the last batch (protocol.messages)
            if next_offset <= offset:
                raise LoadRetry(f"fetch at {offset} below HW {hw} returned no batches")
            for r in decode_records(buf):
                if offset <= r.offset < hw:
                    pairs.append((r.key, r.value))
            offset = next_offset
        return pairs

    # ================================================================== the request pipeline
    def _route(self, group_id) -> tuple[CoordinatorContext | None, int]:
        if not svc.valid_group(group_id):
            return None, svc.INVALID_GROUP_ID
        part = self.parts.get(partition_for(group_id, self.num_partitions))
        code = svc.route_code(None if part is None else part.state)
        return (None, code) if code else (part, code)

    async def _write(
        self,
        group_id,
        handler: Callable[[GroupCoordinatorShard, int], CoordinatorResult],
        on_error: Callable[[int, str], Any],
        too_large: int = svc.UNKNOWN_SERVER_ERROR,
    ):
        part, code = self._route(group_id)
        if code:
            return on_error(code, svc.message(code))
        try:
            result = handler(part.shard, now_ms())
        except Exception as exc:  # noqa: BLE001 - bad input must not kill the actor
            return on_error(*svc.bad_input(exc))
        return await self._complete(part, result, on_error, too_large)

    async def _complete(self, part: CoordinatorContext, result: CoordinatorResult, on_error, too_large: int):
        gen = part.gen
        part.shard.replay_all(result.records)
        waiter = part.park(result.response.key) if isinstance(result.response, Pending) else None
        durable = result.durable_records
        tail = self._append(part, durable) if durable else part.tail
        self._rearm(part)
        raw = await asyncio.shield(tail) if tail is not None else svc.NONE
        if raw:
            code = svc.append_error(raw, too_large)
            self._append_failed(part, gen, code)
            if waiter is not None and not waiter.done():
                waiter.set_result(code)
            return on_error(code, svc.message(code))
        part.complete(result.completions)
        if waiter is None:
            return result.response
        answer = await waiter
        return on_error(answer, svc.message(answer)) if isinstance(answer, int) else answer

    def _append(self, part: CoordinatorContext, records) -> asyncio.Task:
        ref = part.replica.produce.remote(
            ProduceRequest(
                records_batch(records, now_ms()), -1, self.commit_timeout_ms, current_leader_epoch=part.epoch
            )
        )
        part.appends += 1
        task = asyncio.get_running_loop().create_task(self._acked(ref, part.tail))
        part.tail = task
        return task

    @staticmethod
    async def _acked(ref, previous: asyncio.Task | None) -> int:
        """The replica's error code for this append (0 = acknowledged), or the first earlier failure."""
        try:
            res = await ref
            code = res["error_code"] or svc.NONE
        except (RayActorError, RayTaskError):
            code = svc.NOT_COORDINATOR
        if previous is not None:  # an append is acknowledged only if every earlier one was
            prev = await asyncio.shield(previous)
            code = prev or code
        return code

    def _append_failed(self, part: CoordinatorContext, gen: int, code: int) -> None:
        if not self._current(part, gen) or part.state != svc.ACTIVE:
            return  # already unloaded or reloading
        log.warning(
            "b%d: append to %s-%d failed (error %d): reloading", self.broker_id, OFFSETS_TOPIC, part.partition, code
        )
        part.fail_parked(code)
        self._start_load(part)

    # ================================================================== timers
    def _rearm(self, part: CoordinatorContext) -> None:
        if part.state != svc.ACTIVE:
            return
        deadline = part.shard.next_deadline()
        if deadline == part.timer_deadline and part.timer is not None:
            return
        if part.timer is not None:
            part.timer.cancel()
        part.timer, part.timer_deadline = None, deadline
        if deadline is not None:
            part.timer = asyncio.get_running_loop().create_task(self._fire(part, part.gen, deadline))

    async def _fire(self, part: CoordinatorContext, gen: int, deadline: int) -> None:
        await asyncio.sleep(max(0, deadline - now_ms()) / 1000)
        if not self._current(part, gen) or part.state != svc.ACTIVE:
            return
        part.timer, part.timer_deadline = None, None  # this run is no longer cancellable by a re-arm
        try:
            await self._complete(
                part, part.shard.poll_expirations(now_ms()), lambda c, m: None, svc.UNKNOWN_SERVER_ERROR
            )
        except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
            log.exception("b%d: group timers of %s-%d", self.broker_id, OFFSETS_TOPIC, part.partition)
        self._rearm(part)

    async def _cleanup_loop(self, part: CoordinatorContext, gen: int) -> None:
        interval = max(0.01, self.config.offsets_retention_check_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            if not self._current(part, gen) or part.state != svc.ACTIVE:
                return
            try:
                await self._complete(
                    part, part.shard.cleanup_expired_offsets(now_ms()), lambda c, m: None, svc.UNKNOWN_SERVER_ERROR
                )
            except Exception:  # noqa: BLE001
                log.exception("b%d: offsets retention of %s-%d", self.broker_id, OFFSETS_TOPIC, part.partition)

    async def _read(self, group_id, reader: Callable[[GroupCoordinatorShard], dict], on_error):
        """A read: answered from the current state once every append it reflects is acknowledged."""
        part, code = self._route(group_id)
        if code:
            return on_error(code, svc.message(code))
        try:
            response = reader(part.shard)
        except Exception as exc:  # noqa: BLE001
            return on_error(*svc.bad_input(exc))
        gen, tail = part.gen, part.tail
        raw = await asyncio.shield(tail) if tail is not None else svc.NONE
        if raw:
            code = svc.append_error(raw)
            self._append_failed(part, gen, code)
            return on_error(code, svc.message(code))
        return response

    # ================================================================== the API (JoinGroup & co)
    async def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols,
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        **kw,
    ) -> dict:
        """JoinGroup; answers when the rebalance completes (parked meanwhile). Keywords as the shard's
        (``group_instance_id``, ``client_id``, ``client_host``, ``require_known_member_id``,
        ``supports_skip_assignment``). ``rebalance_timeout_ms=-1``: the session timeout (JoinGroup v0)."""

        def on_error(code, msg):
            return svc.join_error(member_id, code, msg)

        if not svc.valid_group(group_id):
            return on_error(svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID))
        rebalance = (
            rebalance_timeout_ms
            if isinstance(rebalance_timeout_ms, int) and rebalance_timeout_ms >= 0
            else session_timeout_ms
        )
        return await self._write(
            group_id,
            lambda s, now: s.join_group(
                group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance, now, **kw
            ),
            on_error,
        )

    async def sync_group(self, group_id: str, member_id: str, generation_id: int, assignments=None, **kw) -> dict:
        """SyncGroup: the leader passes ``{member_id: assignment bytes}``; everyone gets their own assignment."""

        def on_error(code, msg):
            return svc.sync_error(code, msg)

        if not svc.valid_group(group_id):
            return on_error(svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID))
        return await self._write(
            group_id, lambda s, now: s.sync_group(group_id, member_id, generation_id, assignments, now, **kw), on_error
        )

    async def heartbeat(self, group_id: str, member_id: str, generation_id: int, **kw) -> dict:
        if not svc.valid_group(group_id):
            return {"error_code": svc.INVALID_GROUP_ID, "error_message": svc.message(svc.INVALID_GROUP_ID)}
        return await self._write(
            group_id,
            lambda s, now: s.heartbeat(group_id, member_id, generation_id, now, **kw),
            lambda c, m: {"error_code": c, "error_message": m},
        )

    async def leave_group(self, group_id: str, members) -> dict:
        """LeaveGroup (v3+ batch): ``members=[{"member_id", "group_instance_id"}]``."""
        if not svc.valid_group(group_id):
            return {
                "error_code": svc.INVALID_GROUP_ID,
                "error_message": svc.message(svc.INVALID_GROUP_ID),
                "members": [],
            }
        return await self._write(
            group_id,
            lambda s, now: s.leave_group(group_id, list(members), now),
            lambda c, m: {"error_code": c, "error_message": m, "members": []},
        )

    # ================================================================== offsets
    async def offset_commit(
        self, group_id: str, topics, member_id: str = "", generation_id: int = -1, group_instance_id: str | None = None
    ) -> dict:
        """OffsetCommit: ``topics=[{"name", "partitions": [{"partition_index", "committed_offset",
        "committed_leader_epoch"?, "committed_metadata"?}]}]`` -> per-partition error codes."""
        if not svc.valid_group(group_id):
            return {
                "error_code": svc.INVALID_GROUP_ID,
                "error_message": svc.message(svc.INVALID_GROUP_ID),
                "topics": [],
            }

        return await self._write(
            group_id,
            lambda s, now: s.offset_commit(
                group_id,
                topics,
                now,
                member_id=member_id,
                generation_id=generation_id,
                group_instance_id=group_instance_id,
            ),
            lambda c, m: svc.offset_commit_error(topics, c, m),
            too_large=svc.INVALID_COMMIT_OFFSET_SIZE,
        )

    async def offset_fetch(self, group_id: str, topics=None) -> dict:
        """OffsetFetch: ``topics=[{"name", "partition_indexes"}]`` or None for all; -1 = nothing committed."""
        if not svc.valid_group(group_id):
            return {
                "error_code": svc.INVALID_GROUP_ID,
                "error_message": svc.message(svc.INVALID_GROUP_ID),
                "topics": [],
            }
        return await self._read(
            group_id,
            lambda s: s.offset_fetch(group_id, topics),
            lambda c, m: {"error_code": c, "error_message": m, "topics": []},
        )

    async def offset_delete(self, group_id: str, topics) -> dict:
        """OffsetDelete (KIP-496): ``topics=[{"name", "partitions": [{"partition_index"}]}]``."""
        if not svc.valid_group(group_id):
            return {
                "error_code": svc.INVALID_GROUP_ID,
                "error_message": svc.message(svc.INVALID_GROUP_ID),
                "topics": [],
            }
        return await self._write(
            group_id,
            lambda s, now: s.offset_delete(group_id, topics),
            lambda c, m: {"error_code": c, "error_message": m, "topics": []},
        )

    # ================================================================== admin
    async def list_groups(self, states_filter=None, types_filter=None) -> dict:
        """ListGroups over every partition this coordinator leads; svc.COORDINATOR_LOAD_IN_PROGRESS (with the
        groups of the loaded partitions) while one is still loading."""
        try:
            groups, code, tails = list_groups(self.parts, states_filter, types_filter)
        except Exception as exc:  # noqa: BLE001
            c, m = svc.bad_input(exc)
            return {"error_code": c, "error_message": m, "groups": []}
        codes = [svc.append_error(c) for c in [await asyncio.shield(t) for t in tails]]
        code = code or next((c for c in codes if c), svc.NONE)
        return {"error_code": code, "error_message": svc.message(code) or None, "groups": groups}

    async def describe_groups(self, group_ids) -> dict:
        """DescribeGroups: one entry per group (its own error code when this is not its coordinator)."""
        if isinstance(group_ids, str) or not isinstance(group_ids, (list, tuple)):
            return {"error_code": svc.INVALID_REQUEST, "error_message": "group_ids must be a list", "groups": []}

        async def one(gid):
            return await self._read(
                gid, lambda s: s.describe_groups([gid])["groups"][0], lambda c, m: svc.describe_group_error(gid, c, m)
            )

        return {"groups": list(await asyncio.gather(*(one(g) for g in group_ids)))}

    async def delete_groups(self, group_ids) -> dict:
        """DeleteGroups: Empty groups only (NON_EMPTY_GROUP otherwise); their offsets are tombstoned too."""
        if isinstance(group_ids, str) or not isinstance(group_ids, (list, tuple)):
            return {"error_code": svc.INVALID_REQUEST, "error_message": "group_ids must be a list", "results": []}
        by_part, results = svc.group_ids_by_partition(group_ids, self.num_partitions)

        async def batch(gids):
            res = await self._write(
                gids[0],
                lambda s, now: s.delete_groups(gids, now),
                lambda c, m: {"results": [{"group_id": g, "error_code": c} for g in gids]},
            )
            for r in res["results"]:
                results[r["group_id"]] = r

        await asyncio.gather(*(batch(g) for g in by_part.values()))
        return {"results": [results[g] for g in dict.fromkeys(group_ids) if g in results]}

    # ================================================================== introspection
    def describe_coordinator(self) -> dict:
        """What this coordinator serves: per partition its state, leader epoch and group count."""
        return {
            "broker_id": self.broker_id,
            "num_partitions": self.num_partitions,
            "partitions": {p: part.describe() for p, part in sorted(self.parts.items())},
        }

    def ping(self) -> int:
        return self.broker_id


RemoteGroupCoordinator = ray.remote(GroupCoordinatorActor)
