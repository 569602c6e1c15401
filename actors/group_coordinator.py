"""The group coordinator: one async actor per broker, a thin shell over ``GroupCoordinatorShard``.

Named ``group_coordinator_name(cluster, broker_id)`` (protocol/names.py), created by its broker as a
non-detached child pinned to the broker's node (it dies with the broker, as Kafka's GroupCoordinator
lives in the broker process). It serves the consumer groups whose ``__consumer_offsets`` partition
(``partition_for(group_id, offsets.topic.num.partitions)``) this broker's replica leads.

``__consumer_offsets`` (its spec, error normalization, routing: actors/group/service.py) is created
lazily by the broker on the first FindCoordinator. docs/internals.md ("Group coordinator") has the rules.

Leadership (Kafka's onElection / onResignation). The broker calls ``on_elected(p, leader_epoch, replica)``
/ ``on_resigned(p, leader_epoch)`` (ordered per partition; older epochs ignored). On election the partition
is loaded (actors/coordinator/loader.py); meanwhile COORDINATOR_LOAD_IN_PROGRESS.

Per request (Kafka's CoordinatorRuntime, one event loop, no lock; per partition a CoordinatorContext,
actors/coordinator/runtime.py): the shard's handler with ``now_ms``, replay its records, append the durable
ones (actors/coordinator/writer.py), synchronously so appends keep handler order. The answer (and parked
JoinGroup/SyncGroup completions) goes out once that append and every earlier one are acknowledged; a failed
append fails the requests in flight, answers parked calls and reloads the shard from the partition. Timers:
one task per partition sleeps until ``shard.next_deadline()`` (``poll_expirations``); every
``offsets.retention.check.interval.ms`` ``cleanup_expired_offsets`` runs. Each API method takes its typed
request (protocol/group_messages.py) and answers a dict with Kafka error codes, never an exception.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import ray

from actors.coordinator import loader as loader
from actors.coordinator import writer as writer
from actors.coordinator.leadership import LeaderEpochs
from actors.coordinator.runtime import CoordinatorContext, list_groups
from actors.group import service as svc
from actors.group.classic_group import CoordinatorResult, Pending
from actors.group.records import partition_for
from actors.group.service import OFFSETS_TOPIC
from actors.group.shard import GroupCoordinatorShard
from actors.group.txn_offsets import GroupTxnApi
from actors.server import server_log
from actors.server.metrics import group_metrics
from protocol import group_messages as M

log = logging.getLogger("rafka.group_coordinator")


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinatorActor(GroupTxnApi):
    def __init__(self, cluster: str, broker_id: int, config: dict | None = None, log_file: str | None = None):
        self.cluster, self.broker_id = cluster, int(broker_id)
        if log_file:
            server_log.configure(log_file, f"GroupCoordinator id={self.broker_id}")
        self.props = dict(config or {})
        self.config = svc.coordinator_config(self.props)
        self.num_partitions = svc.offsets_partitions(self.props)
        self.commit_timeout_ms = int(self.props.get("offsets.commit.timeout.ms", svc.DEFAULT_COMMIT_TIMEOUT_MS))
        self.parts: dict[int, CoordinatorContext] = {}
        self.epochs = LeaderEpochs()  # newest leader epoch seen per partition

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of ``__consumer_offsets-{partition}`` leads at ``leader_epoch``: load it."""
        p, epoch = int(partition), int(leader_epoch)
        cur = self.parts.get(p)
        if not self.epochs.elected(
            p, epoch, None if cur is None else cur.epoch, cur is not None and cur.state != svc.FAILED
        ):
            return {"error_code": 0, "ignored": True}
        if cur is not None:
            self._unload(cur, svc.NOT_COORDINATOR)
        part = self.parts[p] = CoordinatorContext(p, epoch, replica, self.config)
        self._start_load(part)
        return {"error_code": 0}

    async def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        """This broker no longer leads the partition (follower at ``leader_epoch``, or stopped: None)."""
        p, cur = int(partition), self.parts.get(int(partition))
        unload = self.epochs.resigned(
            p, None if leader_epoch is None else int(leader_epoch), None if cur is None else cur.epoch
        )
        if unload is None:
            return {"error_code": 0, "ignored": True}
        if unload and cur is not None:
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
        """Load the partition (actors/coordinator/loader.py) and, if still current, serve the loaded shard."""
        outcome = await loader.load_shard(part, lambda: self._current(part, gen), now_ms, self.broker_id)
        if not self._current(part, gen):
            return
        if outcome == loader.MOVED:
            self._unload(part, svc.NOT_COORDINATOR)  # a newer epoch moved leadership away
        elif outcome == loader.FAILED:
            part.state = svc.FAILED
        elif isinstance(outcome, GroupCoordinatorShard):
            outcome.replay_all(part.take_markers())  # markers written here while it loaded
            part.shard, part.state = outcome, svc.ACTIVE
            self._rearm(part)
            part.tasks.append(asyncio.get_running_loop().create_task(self._cleanup_loop(part, gen)))

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
        txn: writer.TxnWrite | None = None,
    ):
        part, code = self._route(group_id)
        if code:
            return on_error(code, svc.message(code))
        try:
            result = handler(part.shard, now_ms())
        except Exception as exc:  # noqa: BLE001 - bad input must not kill the actor
            return on_error(*svc.bad_input(exc))
        return await self._complete(part, result, on_error, too_large, txn)

    async def _complete(self, part: CoordinatorContext, result: CoordinatorResult, on_error, too_large: int, txn=None):
        gen = part.gen
        part.shard.replay_all(result.records)
        waiter = part.park(result.response.key) if isinstance(result.response, Pending) else None
        durable = result.durable_records
        tail = writer.append(part, durable, self.commit_timeout_ms, now_ms(), txn) if durable else part.tail
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
        await self._internal(part, part.shard.poll_expirations, "group timers")  # a bug must not stop them
        self._rearm(part)

    async def _cleanup_loop(self, part: CoordinatorContext, gen: int) -> None:
        interval = max(0.01, self.config.offsets_retention_check_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            if not self._current(part, gen) or part.state != svc.ACTIVE:
                return
            await self._internal(part, part.shard.cleanup_expired_offsets, "offsets retention")

    async def _internal(self, part: CoordinatorContext, handler: Callable[[int], CoordinatorResult], what: str):
        """A write of the coordinator's own (timers, retention): no one to answer, failures logged."""
        try:
            await self._complete(part, handler(now_ms()), lambda c, m: None, svc.UNKNOWN_SERVER_ERROR)
        except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
            log.exception("b%d: %s of %s-%d", self.broker_id, what, OFFSETS_TOPIC, part.partition)

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
    # Each takes its typed request (protocol/group_messages.py); another argument: INVALID_REQUEST.
    async def join_group(self, request: M.JoinGroupRequest) -> dict:
        """JoinGroup; answers when the rebalance completes (parked meanwhile)."""
        if bad := M.wrong_type(request, M.JoinGroupRequest):
            return svc.join_error("", svc.INVALID_REQUEST, bad)
        r = request

        def on_error(code, msg):
            return svc.join_error(r.member_id, code, msg)

        rebalance = r.effective_rebalance_timeout_ms()
        return await self._write(
            r.group_id,
            lambda s, now: s.join_group(
                r.group_id,
                r.member_id,
                r.protocol_type,
                r.protocols,
                r.session_timeout_ms,
                rebalance,
                now,
                **r.member_options(),
            ),
            on_error,
        )

    async def sync_group(self, request: M.SyncGroupRequest) -> dict:
        """SyncGroup: the leader passes ``{member_id: assignment bytes}``; everyone gets their own assignment."""
        if bad := M.wrong_type(request, M.SyncGroupRequest):
            return svc.sync_error(svc.INVALID_REQUEST, bad)
        r = request
        kw = {"group_instance_id": r.group_instance_id, "protocol_type": r.protocol_type}
        return await self._write(
            r.group_id,
            lambda s, now: s.sync_group(
                r.group_id, r.member_id, r.generation_id, r.assignments, now, protocol_name=r.protocol_name, **kw
            ),
            svc.sync_error,
        )

    async def heartbeat(self, request: M.HeartbeatRequest) -> dict:
        if bad := M.wrong_type(request, M.HeartbeatRequest):
            return M.HeartbeatResponse(svc.INVALID_REQUEST, bad).to_dict()
        r, iid = request, request.group_instance_id
        return await self._write(
            r.group_id,
            lambda s, now: s.heartbeat(r.group_id, r.member_id, r.generation_id, now, group_instance_id=iid),
            lambda c, m: M.HeartbeatResponse(c, m).to_dict(),
        )

    async def leave_group(self, request: M.LeaveGroupRequest) -> dict:
        """LeaveGroup (v3+ batch): ``members=[{"member_id", "group_instance_id"}]``."""

        def on_error(code, msg):
            return M.LeaveGroupResponse(code, msg).to_dict()

        if bad := M.wrong_type(request, M.LeaveGroupRequest):
            return on_error(svc.INVALID_REQUEST, bad)
        r = request
        return await self._write(r.group_id, lambda s, now: s.leave_group(r.group_id, list(r.members), now), on_error)

    # ================================================================== offsets
    async def offset_commit(self, request: M.OffsetCommitRequest) -> dict:
        """OffsetCommit -> per-partition error codes."""
        if bad := M.wrong_type(request, M.OffsetCommitRequest):
            return M.OffsetCommitResponse([], svc.INVALID_REQUEST, bad).to_dict()
        r = request
        if not svc.valid_group(r.group_id):
            return M.OffsetCommitResponse([], svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID)).to_dict()
        return await self._write(
            r.group_id,
            lambda s, now: s.offset_commit(
                r.group_id,
                r.topics,
                now,
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
            ),
            lambda c, m: svc.offset_commit_error(r.topics, c, m),
            too_large=svc.INVALID_COMMIT_OFFSET_SIZE,
        )

    async def offset_fetch(self, request: M.OffsetFetchRequest) -> dict:
        """OffsetFetch: ``topics=None`` for every committed offset; -1 = nothing committed."""

        def on_error(code, msg):
            return M.OffsetFetchResponse(code, msg).to_dict()

        if bad := M.wrong_type(request, M.OffsetFetchRequest):
            return on_error(svc.INVALID_REQUEST, bad)
        r = request
        return await self._read(r.group_id, lambda s: s.offset_fetch(r.group_id, r.topics, r.require_stable), on_error)

    async def offset_delete(self, request: M.OffsetDeleteRequest) -> dict:
        """OffsetDelete (KIP-496)."""

        def on_error(code, msg):
            return M.OffsetFetchResponse(code, msg).to_dict()  # the same shape: {error_code, topics}

        if bad := M.wrong_type(request, M.OffsetDeleteRequest):
            return on_error(svc.INVALID_REQUEST, bad)
        r = request
        return await self._write(r.group_id, lambda s, now: s.offset_delete(r.group_id, r.topics), on_error)

    # ================================================================== admin
    async def list_groups(self, request: M.ListGroupsRequest) -> dict:
        """ListGroups over every partition this coordinator leads; COORDINATOR_LOAD_IN_PROGRESS (with the
        groups of the loaded partitions) while one is still loading."""
        if bad := M.wrong_type(request, M.ListGroupsRequest):
            return {"error_code": svc.INVALID_REQUEST, "error_message": bad, "groups": []}
        try:
            groups, code, tails = list_groups(self.parts, request.states_filter, request.types_filter)
        except Exception as exc:  # noqa: BLE001
            c, m = svc.bad_input(exc)
            return {"error_code": c, "error_message": m, "groups": []}
        codes = [svc.append_error(c) for c in [await asyncio.shield(t) for t in tails]]
        code = code or next((c for c in codes if c), svc.NONE)
        return {"error_code": code, "error_message": svc.message(code) or None, "groups": groups}

    async def describe_groups(self, request: M.DescribeGroupsRequest) -> dict:
        """DescribeGroups: one entry per group (its own error code when this is not its coordinator)."""
        if bad := M.wrong_type(request, M.DescribeGroupsRequest):
            return {"error_code": svc.INVALID_REQUEST, "error_message": bad, "groups": []}

        async def one(gid):
            return await self._read(
                gid, lambda s: s.describe_groups([gid])["groups"][0], lambda c, m: svc.describe_group_error(gid, c, m)
            )

        return {"groups": list(await asyncio.gather(*(one(g) for g in request.group_ids)))}

    async def delete_groups(self, request: M.DeleteGroupsRequest) -> dict:
        """DeleteGroups: Empty groups only (NON_EMPTY_GROUP otherwise); their offsets are tombstoned too."""
        if bad := M.wrong_type(request, M.DeleteGroupsRequest):
            return {"error_code": svc.INVALID_REQUEST, "error_message": bad, "results": []}
        group_ids = request.group_ids
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

    def metrics(self) -> dict:
        """The exporter's scrape (actors/metrics_exporter.py): groups, members and committed offsets."""
        return {"broker_id": self.broker_id, **group_metrics(self.parts)}

    def ping(self) -> int:
        return self.broker_id


RemoteGroupCoordinator = ray.remote(GroupCoordinatorActor)
