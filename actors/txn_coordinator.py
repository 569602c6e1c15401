"""The transaction coordinator: one async actor per broker, a thin shell over ``TxnCoordinatorShard``.

Named ``txn_coordinator_name(cluster, broker_id)`` (protocol/names.py), created by its broker as a
non-detached child pinned to the broker's node (it dies with the broker). It serves the transactional ids
whose ``__transaction_state`` partition (``partition_for(transactional_id, n)``) this broker's replica
leads; the broker tells it ``on_elected`` / ``on_resigned`` in LeaderAndIsr order, exactly as for the
group coordinator (actors/server/coordinator_host.py).

Load (Kafka's TransactionStateManager.loadTransactionsForTxnTopicPartition): wait until the replica leads
at our epoch with its HW over its takeover LEO, read the partition to the HW through ``fetch``, replay every
record (latest value per id), then resume the markers of every transaction found in a Prepare state.
Meanwhile requests answer COORDINATOR_LOAD_IN_PROGRESS; ids of partitions not led here NOT_COORDINATOR.

Per request: the shard's handler (pure, actors/txn/shard.py) returns records and a response; the records
go to the replica as one RecordBatch with acks=all at our leader epoch; once acknowledged they are replayed
and the response goes out (a failed append releases the id's pending mark and answers Kafka's mapped error).
A replayed Prepare record starts its :class:`MarkerJob`: WriteTxnMarkers to the leader replica of every
partition, retried (with a metadata refresh) until each took it, then CompleteCommit/CompleteAbort.
Timers abort transactions past their timeout and remove expired transactional ids.
Every method answers a plain dict with Kafka error codes, never an exception out of the actor.
"""

from __future__ import annotations

import asyncio
import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors.channels.coordinator_channel import CoordinatorListener
from actors.channels.data_channel import loop_channel, produce_timeout_s
from actors.coordinator.leadership import LeaderEpochs
from actors.coordinator.runtime import records_batch
from actors.group.records import partition_for as group_partition_for
from actors.group.service import OFFSETS_TOPIC, offsets_partitions
from actors.server import server_log
from actors.server.metrics import txn_metrics
from actors.txn import service as svc
from actors.txn.markers import TxnMarkerChannel
from actors.txn.partition_tasks import TxnPartitionTasks, now_ms
from actors.txn.service import ACTIVE, LOADING, TxnPartition
from actors.txn.shard import ONGOING, STATE_NAMES, TxnResult
from protocol import errors as E
from protocol.channel_frames import API_PRODUCE, internal_produce_fields
from protocol.kv import GcsKV
from protocol.messages import ProduceRequest
from protocol.names import RAY_NAMESPACE, broker_name
from protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    TxnResponse,
)
from protocol.txn_tokens import cluster_key, sign

log = logging.getLogger("rafka.txn_coordinator")

PARK_S = 1.0  # how long an AddPartitionsToTxn waits for the id's previous transaction to complete
PUSH_S = 5.0  # a verification push not answered by then counts as refused (its connection is closed)
FIRST_PUSH_WAIT_S = 1.0  # how long a partition's first add waits for its pushes to be taken before answering


def _error(exc: E.KafkaError) -> dict:
    return {"error_code": exc.code, "error_message": str(exc)}


class TxnCoordinatorActor(TxnPartitionTasks):
    def __init__(self, cluster: str, broker_id: int, config: dict | None = None, log_file: str | None = None):
        self.cluster, self.broker_id = cluster, int(broker_id)
        if log_file:
            server_log.configure(log_file, f"TransactionCoordinator id={self.broker_id}")
        self.props = dict(config or {})
        self.config = svc.txn_config(self.props)
        self.num_partitions = svc.txn_partitions(self.props)
        self.append_timeout_ms = int(
            self.props.get("transaction.state.log.append.timeout.ms", svc.DEFAULT_APPEND_TIMEOUT_MS)
        )
        self.abort_check_s = (
            int(
                self.props.get(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms", svc.DEFAULT_ABORT_CHECK_MS
                )
            )
            / 1000
        )
        self.expire_check_s = (
            int(
                self.props.get(
                    "transaction.remove.expired.transaction.cleanup.interval.ms", svc.DEFAULT_EXPIRE_CHECK_MS
                )
            )
            / 1000
        )
        self.parts: dict[int, TxnPartition] = {}
        self.epochs = LeaderEpochs()  # newest leader epoch seen per partition
        self._kv = GcsKV(cluster)
        self._spare_pid: int | None = None
        self.markers = TxnMarkerChannel(cluster, broker_id, self._kv)
        # the producers' AddPartitionsToTxn / EndTxn ... on TCP (actors/channels/coordinator_channel.py)
        self._tasks: set[asyncio.Task] = set()  # verification pushes and lookups in flight (actors/txn/markers.py)
        self.clients = CoordinatorListener(lambda method: getattr(self, method), f"txn coordinator b{broker_id}")
        # completed: transactions ended here; markers_ms / complete_ms: their total time writing markers and
        # then appending CompleteCommit/CompleteAbort (the window in which the id answers CONCURRENT_TRANSACTIONS)
        # parked_adds: AddPartitionsToTxn that waited for the previous transaction's markers; combined_appends:
        # those whose Ongoing record went out with the Complete one
        self.stats = {
            "appends": 0,
            "aborted_timeouts": 0,
            "completed": 0,
            "markers_ms": 0.0,
            "complete_ms": 0.0,
            "parked_adds": 0,
            "combined_appends": 0,
            "end_txns": 0,
            "end_txn_ms": 0.0,
            "verification_tokens": 0,  # KIP-890 tokens answered to rafka's producers instead of pushes
        }

    # ================================================================== the request pipeline
    def _route(self, transactional_id) -> tuple[TxnPartition | None, dict | None]:
        if not isinstance(transactional_id, str) or not transactional_id:
            return None, _error(E.InvalidRequestError("a non-empty transactional id is required"))
        part = self.parts.get(svc.txn_partition_for(transactional_id, self.props))
        code = svc.route_code(None if part is None else part.state)
        if code:
            return None, {"error_code": code, "error_message": E.for_code(code).default_message}
        return part, None

    async def _apply(self, part: TxnPartition, res: TxnResult, tid: str) -> dict:
        """Append ``res``'s records (acks=all), replay them, start the marker jobs they begin."""
        if not res.records:
            return res.response
        gen = part.gen
        self.stats["appends"] += 1
        req = ProduceRequest(
            records_batch(res.records, now_ms()), -1, self.append_timeout_ms, current_leader_epoch=part.epoch
        )
        try:  # on the replica's internal channel (actors/channels/data_channel.py), not a Ray call
            ans = await loop_channel(internal=True).submit_here(
                part.replica, API_PRODUCE, internal_produce_fields(req), req.records, produce_timeout_s(req)
            )
            code = ans["error_code"]
        except E.KafkaError:  # the replica died or its connection broke or timed out
            code = E.NotCoordinatorError.code
        if not self._current(part, gen):
            return _error(E.NotCoordinatorError(f"{svc.TXN_TOPIC}-{part.partition} moved while appending"))
        if code:
            part.shard.append_failed(tid)
            part.wake(tid)
            mapped = svc.append_error(code)
            return {"error_code": mapped, "error_message": f"{svc.TXN_TOPIC} append failed with error {code}"}
        for rec in res.records:
            job = part.shard.replay(rec)
            if job is not None:
                self._start_markers(part, job)
            part.wake(rec.transactional_id)
        return res.response

    async def _spare(self) -> None:
        """A fresh producer id from this broker, held for the next handler that needs one."""
        if self._spare_pid is None:
            broker = ray.get_actor(broker_name(self.cluster, self.broker_id), namespace=RAY_NAMESPACE)
            ans = await broker.init_producer_id.remote()
            if ans["error_code"]:
                E.raise_for_code(ans["error_code"], ans.get("error_message"))
            self._spare_pid = ans["producer_id"]

    def _take_pid(self) -> int:
        pid, self._spare_pid = self._spare_pid, None
        assert pid is not None, "a producer id is fetched before the handler runs"
        return pid

    async def init_producer_id(self, req: InitProducerIdRequest) -> dict:
        if not isinstance(req, InitProducerIdRequest):
            return InitProducerIdResponse(
                **_error(E.InvalidRequestError("InitProducerId takes an InitProducerIdRequest"))
            ).to_dict()
        part, err = self._route(req.transactional_id)
        if err is not None:
            return InitProducerIdResponse(**err).to_dict()
        try:
            await self._spare()
        except (E.KafkaError, RayActorError, RayTaskError, ValueError) as e:
            return InitProducerIdResponse(E.CoordinatorNotAvailableError.code, f"no producer id: {e}").to_dict()
        assert part is not None and req.transactional_id is not None
        res = part.shard.init_producer_id(
            req.transactional_id,
            req.transaction_timeout_ms,
            now_ms(),
            self._take_pid,
            req.producer_id,
            req.producer_epoch,
        )
        ans = await self._apply(part, res, req.transactional_id)
        return InitProducerIdResponse(
            ans["error_code"], ans.get("error_message"), ans.get("producer_id", -1), ans.get("producer_epoch", -1)
        ).to_dict()

    async def add_partitions_to_txn(self, req: AddPartitionsToTxnRequest) -> dict:
        if not isinstance(req, AddPartitionsToTxnRequest):
            return AddPartitionsToTxnResponse(
                **_error(E.InvalidRequestError("expected an AddPartitionsToTxnRequest"))
            ).to_dict()
        part, err = self._route(req.transactional_id)
        if err is not None:
            return AddPartitionsToTxnResponse(err["error_code"], err["error_message"]).to_dict()
        assert part is not None
        if req.verify_only:
            try:
                codes = part.shard.verify(req.transactional_id, req.producer_id, req.producer_epoch, req.partitions)
            except (TypeError, ValueError, IndexError) as e:
                return AddPartitionsToTxnResponse(E.InvalidRequestError.code, f"malformed partitions: {e}").to_dict()
            first = next((c for c in codes.values() if c), 0)
            results = tuple((t, p, c) for (t, p), c in sorted(codes.items()))
            msg = "partition not in the ongoing transaction" if first else None
            return AddPartitionsToTxnResponse(first, msg, results).to_dict()
        try:
            data_parts = [(t, int(n)) for t, n in req.partitions if t != OFFSETS_TOPIC]
        except (TypeError, ValueError):
            data_parts = []
        # the leaders' metadata and handles (and connections) looked up beside the append when not cached (a new
        # topic's first transaction), for the pushes below and the markers at the end: one after another after
        # the append, they took 24-26 ms of a transaction's first add to a fresh topic
        lookups = None if self.markers.cached(data_parts) else self._background(self.markers.prefetch(data_parts))
        key = asyncio.ensure_future(self._token_key()) if req.want_tokens else None
        ans = await self._add_partitions(part, req)
        md = part.shard.txns.get(req.transactional_id)
        tokens: tuple = ()
        if not ans["error_code"] and md is not None and md.state == ONGOING and md.producer_id == req.producer_id:
            parts = [(t, int(n)) for t, n in req.partitions if (t, int(n)) in md.partitions and t != OFFSETS_TOPIC]
            signing = None if key is None else await key
            if signing is not None:  # rafka's producer carries the verification to the leaders (txn_tokens.py)
                tid, pid, epoch, start = md.transactional_id, md.producer_id, md.producer_epoch, md.start_ms
                tokens = tuple((t, n, sign(signing, tid, pid, epoch, start, t, n)) for t, n in parts)
                self.stats["verification_tokens"] += len(tokens)
            else:  # a Kafka client's (or no key): pushed to the leaders, before the producer writes there
                if lookups is not None:
                    await lookups
                await self._push(md, parts, lookups is not None)
        try:
            results = tuple((t, int(p), ans["error_code"]) for t, p in req.partitions)
        except (TypeError, ValueError):
            results = ()
        start_ms = md.start_ms if tokens and md is not None else -1
        return AddPartitionsToTxnResponse(
            ans["error_code"], ans.get("error_message"), results, start_ms, tokens
        ).to_dict()

    def _background(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _token_key(self) -> bytes | None:
        """The cluster's verification-token key (protocol/txn_tokens.py); None if it cannot be read."""
        try:
            return await cluster_key(self.cluster)
        except (ValueError, ray.exceptions.RayError) as e:
            log.warning("b%d: no verification-token key, pushing instead: %s", self.broker_id, e)
            return None

    async def _push(self, md, parts: list, first: bool) -> None:
        """KIP-890 state of ``md``'s transaction pushed to the leaders of ``parts``. On connections just opened
        (``first``: this add looked them up) the producer's first batches would often get there before the
        pushes and have the leaders ask here instead (a Ray lookup and call each, 35-42 ms measured), so the
        answer then waits for the pushes to be taken; otherwise it does not: the pushes are written before the
        answer leaves, on open connections."""
        pushes = await self.markers.push_verified(
            md.transactional_id, md.producer_id, md.producer_epoch, md.start_ms, parts, PUSH_S
        )
        task = self._background(self.markers.count_taken(pushes))
        if first:
            await asyncio.wait({task}, timeout=FIRST_PUSH_WAIT_S)

    async def _add_partitions(self, part: TxnPartition, req: AddPartitionsToTxnRequest) -> dict:
        """The shard's add_partitions, appended. While the id's previous transaction is still completing
        (CONCURRENT_TRANSACTIONS: its markers are going out), the request waits here up to ``PARK_S`` for the
        state to move rather than sending the client into a retry backoff; if it is still waiting when the
        markers are done, its Ongoing record goes out in the same append as the CompleteCommit/CompleteAbort.
        Kafka answers CONCURRENT_TRANSACTIONS at once and the client retries every 20 ms; the answers here are
        the same, only sooner (a wait that runs out still answers CONCURRENT_TRANSACTIONS)."""
        tid = req.transactional_id
        deadline = time.monotonic() + PARK_S
        while True:
            res = part.shard.add_partitions(tid, req.producer_id, req.producer_epoch, req.partitions, now_ms())
            left = deadline - time.monotonic()
            if res.response.get("error_code") != E.ConcurrentTransactionsError.code or left <= 0 or tid in part.parked:
                return await self._apply(part, res, tid)
            waiter = part.parked[tid] = svc.ParkedAdd(
                req.producer_id, req.producer_epoch, req.partitions, asyncio.get_running_loop().create_future()
            )
            self.stats["parked_adds"] += 1
            try:
                await asyncio.wait({waiter.fut}, timeout=left)
            finally:
                if part.parked.get(tid) is waiter:
                    del part.parked[tid]
            got = waiter.fut.result() if waiter.fut.done() else None
            if got is not None:
                return got
            again, err = self._route(tid)
            if err is not None:
                return err
            assert again is not None
            part = again

    async def add_offsets_to_txn(self, req: AddOffsetsToTxnRequest) -> dict:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        if not isinstance(req, AddOffsetsToTxnRequest) or not isinstance(req.group_id, str) or not req.group_id:
            return TxnResponse(
                **_error(E.InvalidRequestError("expected an AddOffsetsToTxnRequest with a group id"))
            ).to_dict()
        part, err = self._route(req.transactional_id)
        if err is not None:
            return TxnResponse(err["error_code"], err["error_message"]).to_dict()
        assert part is not None
        tp = (OFFSETS_TOPIC, group_partition_for(req.group_id, offsets_partitions(self.props)))
        res = part.shard.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [tp], now_ms())
        ans = await self._apply(part, res, req.transactional_id)
        return TxnResponse(ans["error_code"], ans.get("error_message")).to_dict()

    async def end_txn(self, req: EndTxnRequest) -> dict:
        if not isinstance(req, EndTxnRequest):
            return TxnResponse(**_error(E.InvalidRequestError("EndTxn takes an EndTxnRequest"))).to_dict()
        part, err = self._route(req.transactional_id)
        if err is not None:
            return TxnResponse(err["error_code"], err["error_message"]).to_dict()
        assert part is not None
        t0 = time.perf_counter()
        res = part.shard.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed), now_ms()
        )
        ans = await self._apply(part, res, req.transactional_id)
        self.stats["end_txns"] += 1
        self.stats["end_txn_ms"] += round((time.perf_counter() - t0) * 1000, 2)
        return TxnResponse(ans["error_code"], ans.get("error_message")).to_dict()

    async def describe_transactions(self, req: DescribeTransactionsRequest) -> dict:
        out = []
        for tid in req.transactional_ids:
            part, err = self._route(tid)
            out.append({"transactional_id": tid, **err} if err is not None else part.shard.describe(tid))  # type: ignore[union-attr]
        return {"error_code": 0, "error_message": None, "transaction_states": out}

    async def list_transactions(self, req: ListTransactionsRequest) -> dict:
        out, code = [], 0
        for p in sorted(self.parts):
            part = self.parts[p]
            if part.state == LOADING:
                code = E.CoordinatorLoadInProgressError.code
            elif part.state == ACTIVE:
                out += part.shard.list(req.state_filters, req.producer_id_filters)
        return {"error_code": code, "error_message": None, "transaction_states": out}

    # ================================================================== introspection
    async def describe(self) -> dict:
        return {
            "broker_id": self.broker_id,
            "partitions": {
                p: {
                    "state": x.state,
                    "leader_epoch": x.epoch,
                    "transactional_ids": len(x.shard.txns),
                    "loaded_records": x.loaded_records,
                }
                for p, x in sorted(self.parts.items())
            },
            "stats": {**self.stats, **self.markers.stats},
            "client_listener": self.clients.describe(),
        }

    def metrics(self) -> dict:
        """The exporter's scrape (actors/metrics_exporter.py): transactional ids by state, counters."""
        return {
            "broker_id": self.broker_id,
            **txn_metrics(self.parts, STATE_NAMES, {**self.stats, **self.markers.stats}),
        }

    async def client_endpoint(self) -> dict:
        """Where clients send coordinator requests over TCP: host, port, token (the listener starts here)."""
        await self.clients.start(ray.util.get_node_ip_address())
        return {"error_code": 0, "error_message": None, **self.clients.endpoint()}

    def ping(self) -> int:
        return self.broker_id


RemoteTxnCoordinator = ray.remote(TxnCoordinatorActor)
