"""The group coordinator: one async actor per broker, a thin shell over the coordinator runtime
(actors/coordinator/) with the consumer groups' kind plugged in (actors/group/: shard, service, records).
Created by its broker (actors/server/coordinator_host.py), which tells it ``on_elected`` / ``on_resigned``
per ``__consumer_offsets`` partition. Each API method takes its typed request (protocol/group_messages.py)
and answers a dict with Kafka error codes, never an exception. docs/internals.md ("Group coordinator").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import ray

from actors.coordinator.context import CoordinatorContext
from actors.coordinator.partition_view import PartitionView
from actors.coordinator.runtime import CoordinatorRuntime
from actors.coordinator.writer import TxnWrite
from actors.group import service as svc
from actors.group.classic_group import CoordinatorResult, Pending
from actors.group.records import EndTxnMarker, partition_for
from actors.group.shard import GroupCoordinatorShard
from actors.server import server_log
from actors.server.metrics import group_metrics
from protocol import group_messages as M
from protocol.clock import now_ms
from protocol.kv import read_topics
from protocol.txn_messages import TxnOffsetCommitRequest

log = logging.getLogger("rafka.group_coordinator")


class GroupCoordinatorActor:
    def __init__(self, cluster: str, broker_id: int, config: dict | None = None, log_file: str | None = None):
        self.cluster, self.broker_id = cluster, int(broker_id)
        if log_file:
            server_log.configure(log_file, f"GroupCoordinator id={self.broker_id}")
        self.props = dict(config or {})
        self.config = svc.coordinator_config(self.props)
        self.num_partitions = svc.offsets_partitions(self.props)
        self.commit_timeout_ms = int(self.props.get("offsets.commit.timeout.ms", svc.DEFAULT_COMMIT_TIMEOUT_MS))
        self.runtime = CoordinatorRuntime(
            svc.group_kind(self.config),
            self.broker_id,
            self.commit_timeout_ms,
            log,
            on_loaded=self._on_loaded,
            on_deadline=lambda part: self._internal(part, part.shard.poll_expirations, "group timers"),
            now_ms=now_ms,
        )
        self.parts = self.runtime.parts  # the __consumer_offsets partitions led here, by number
        self.partition_view = PartitionView()  # which partitions exist, for the offset commits' check
        self._kv: Any = None  # the cluster's GCS KV (actors/metadata/kv.py), opened on first need
        self._kv_reads: Any = None  # its bounded reads: a commit is not held up by a GCS outage

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of ``__consumer_offsets-{partition}`` leads at ``leader_epoch``: load it."""
        return self.runtime.on_elected(partition, leader_epoch, replica)

    async def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        """This broker no longer leads the partition (follower at ``leader_epoch``, or stopped: None)."""
        return self.runtime.on_resigned(partition, leader_epoch)

    def _on_loaded(self, part: CoordinatorContext, gen: int) -> None:
        part.spawn(self._cleanup_loop(part, gen))

    # ================================================================== the request pipeline
    def _route(self, group_id) -> tuple[CoordinatorContext | None, int]:
        if not svc.valid_group(group_id):
            return None, svc.INVALID_GROUP_ID
        return self.runtime.route(partition_for(group_id, self.num_partitions))

    async def _write(
        self,
        group_id,
        handler: Callable[[GroupCoordinatorShard, int], CoordinatorResult],
        on_error: Callable[[int, str], Any],
        too_large: int = svc.UNKNOWN_SERVER_ERROR,
        txn: TxnWrite | None = None,
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
        """Replay the handler's records at once, append the durable ones (chained), answer once acknowledged."""
        gen = part.gen
        part.shard.replay_all(result.records)
        waiter = part.park(result.response.key) if isinstance(result.response, Pending) else None
        durable = result.durable_records
        tail = self.runtime.append(part, durable, txn) if durable else part.tail
        self.runtime.rearm(part)
        raw = await asyncio.shield(tail) if tail is not None else svc.NONE
        if raw:
            code = svc.append_error(raw, too_large)
            self.runtime.reload(part, gen, code)
            if waiter is not None and not waiter.done():
                waiter.set_result(code)
            return on_error(code, svc.message(code))
        part.complete(result.completions)
        if waiter is None:
            return result.response
        answer = await waiter
        return on_error(answer, svc.message(answer)) if isinstance(answer, int) else answer

    async def _cleanup_loop(self, part: CoordinatorContext, gen: int) -> None:
        interval = max(0.01, self.config.offsets_retention_check_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval)
            if not self.runtime.serving(part, gen):
                return
            await self._internal(part, part.shard.cleanup_expired_offsets, "offsets retention")

    async def _internal(self, part: CoordinatorContext, handler: Callable[[int], CoordinatorResult], what: str):
        """A write of the coordinator's own (timers, retention): no one to answer, failures logged."""
        try:
            await self._complete(part, handler(now_ms()), lambda c, m: None, svc.UNKNOWN_SERVER_ERROR)
        except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
            log.exception("b%d: %s of %s-%d", self.broker_id, what, svc.OFFSETS_TOPIC, part.partition)

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
            self.runtime.reload(part, gen, code)
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
    async def _existing_partitions(self, topics) -> set[tuple[str, int]] | None:
        """Those of a commit's partitions the cluster's metadata holds (Kafka's KafkaApis check of an
        OffsetCommit / TxnOffsetCommit against the metadataCache, done here for every client: rafka's own and
        the Kafka listener's). Read from GCS KV by topic, cached (``PartitionView``); None when the request is
        malformed (the shard answers it) or KV cannot be read in time (the head node down): the commit is then
        not held back."""
        try:
            asked = {(t["name"], int(p["partition_index"])) for t in topics for p in t.get("partitions", [])}
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
        names = self.partition_view.to_read(asked, now_ms())
        if names:
            try:
                if self._kv is None:
                    from actors.metadata.kv import BoundedKVReads, GcsKV

                    self._kv, self._kv_reads = GcsKV(self.cluster), BoundedKVReads()
                found = await self._kv_reads.call(read_topics, self._kv, names)
            except Exception as e:  # noqa: BLE001 - GCS unreachable: commits go on unchecked
                log.warning("b%d: topic metadata unreadable, offset commit not checked: %s", self.broker_id, e)
                return None
            self.partition_view.update(names, found, now_ms())
        return self.partition_view.existing(asked)

    async def offset_commit(self, request: M.OffsetCommitRequest) -> dict:
        """OffsetCommit -> per-partition error codes; a partition the cluster does not have answers
        UNKNOWN_TOPIC_OR_PARTITION and is not stored (``_existing_partitions``)."""
        if bad := M.wrong_type(request, M.OffsetCommitRequest):
            return M.OffsetCommitResponse([], svc.INVALID_REQUEST, bad).to_dict()
        r = request
        if not svc.valid_group(r.group_id):
            return M.OffsetCommitResponse([], svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID)).to_dict()
        existing = await self._existing_partitions(r.topics)
        return await self._write(
            r.group_id,
            lambda s, now: s.offset_commit(
                r.group_id,
                r.topics,
                now,
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
                api_version=r.api_version,
                existing=existing,
            ),
            lambda c, m: svc.offset_commit_error(r.topics, c, m, existing),
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

    # ================================================================== transactional offsets
    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> dict:
        """TxnOffsetCommit (Kafka's commitTransactionalOffsets): validated like OffsetCommit; the records go in a
        transactional batch of the producer and stay pending in the shard until its marker."""
        if type(request) is not TxnOffsetCommitRequest:
            msg = f"txn_offset_commit takes one TxnOffsetCommitRequest, not {type(request).__name__}"
            return {"error_code": svc.INVALID_REQUEST, "error_message": msg, "topics": []}
        r = request
        by_topic: dict[str, list[dict]] = {}
        try:
            for topic, p, offset, metadata, epoch in r.offsets:
                by_topic.setdefault(topic, []).append(
                    {
                        "partition_index": int(p),
                        "committed_offset": int(offset),
                        "committed_leader_epoch": int(epoch),
                        "committed_metadata": metadata,
                    }
                )
        except (TypeError, ValueError) as e:
            return {"error_code": svc.INVALID_REQUEST, "error_message": f"malformed offsets: {e}", "topics": []}
        topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        if not svc.valid_group(r.group_id):
            return svc.offset_commit_error(topics, svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID))
        existing = await self._existing_partitions(topics)
        return await self._write(
            r.group_id,
            lambda s, now: s.txn_offset_commit(
                r.group_id,
                topics,
                r.producer_id,
                now,
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
                existing=existing,
            ),
            lambda c, m: svc.offset_commit_error(topics, c, m, existing),
            too_large=svc.INVALID_COMMIT_OFFSET_SIZE,
            txn=TxnWrite(r.producer_id, r.producer_epoch, r.transactional_id),
        )

    async def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> dict:
        """The partition's replica took a transaction marker (Kafka's onTransactionCompleted): the producer's
        pending offsets are committed or dropped; while loading, after the load; not led here: ignored."""
        part = self.parts.get(int(partition))
        if part is None:
            return {"error_code": 0, "error_message": None, "ignored": True}
        if part.state == svc.LOADING:
            part.deferred.append(EndTxnMarker(int(producer_id), bool(committed)))
            return {"error_code": 0, "error_message": None, "queued": True}
        if part.state != svc.ACTIVE:
            return {"error_code": 0, "error_message": None, "ignored": True}
        result = part.shard.complete_transaction(int(producer_id), bool(committed))
        return await self._complete(
            part, result, lambda c, m: {"error_code": c, "error_message": m}, svc.UNKNOWN_SERVER_ERROR
        ) or {"error_code": 0, "error_message": None}

    # ================================================================== admin
    async def list_groups(self, request: M.ListGroupsRequest) -> dict:
        """ListGroups over every partition this coordinator leads; COORDINATOR_LOAD_IN_PROGRESS (with the
        groups of the loaded partitions) while one is still loading."""
        if bad := M.wrong_type(request, M.ListGroupsRequest):
            return {"error_code": svc.INVALID_REQUEST, "error_message": bad, "groups": []}
        try:
            groups, code, tails = svc.list_groups(self.parts, request.states_filter, request.types_filter)
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
            "partitions": {
                p: {**part.describe(), "groups": part.shard.group_ids()} for p, part in sorted(self.parts.items())
            },
        }

    def metrics(self) -> dict:
        """The exporter's scrape (actors/metrics_exporter.py): groups, members and committed offsets."""
        return {"broker_id": self.broker_id, **group_metrics(self.parts)}

    def ping(self) -> int:
        return self.broker_id


RemoteGroupCoordinator = ray.remote(GroupCoordinatorActor)
