"""The transaction coordinator: one async actor per broker, a thin shell over the coordinator runtime
(actors/coordinator/) with transactions plugged in: the pure shard (actors/txn/shard.py), its appends,
marker jobs and timers (actors/txn/state_manager.py) and the markers' channel (actors/txn/markers.py).
Created by its broker (actors/server/coordinator_host.py), which tells it ``on_elected`` / ``on_resigned``
per ``__transaction_state`` partition. Every method answers a plain dict with Kafka error codes, never an
exception. docs/internals.md ("Transaction coordinator").
"""

from __future__ import annotations

import asyncio
import logging
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors.channels.coordinator_channel import CoordinatorListener
from actors.coordinator.context import ACTIVE, LOADING, CoordinatorContext
from actors.group.records import partition_for as group_partition_for
from actors.group.service import offsets_partitions
from actors.metadata.kv import GcsKV, cluster_key
from actors.server import server_log
from actors.server.metrics import txn_metrics
from actors.txn import service as svc
from actors.txn.markers import TxnMarkerChannel
from actors.txn.shard import ONGOING, STATE_NAMES
from actors.txn.state_manager import TransactionStateManager
from protocol import errors as E
from protocol.clock import now_ms
from protocol.names import OFFSETS_TOPIC, RAY_NAMESPACE, broker_name
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
from protocol.txn_tokens import sign

log = logging.getLogger("rafka.txn_coordinator")

PARK_S = 1.0  # how long an AddPartitionsToTxn waits for the id's previous transaction to complete
PUSH_S = 5.0  # a verification push not answered by then counts as refused (its connection is closed)
FIRST_PUSH_WAIT_S = 1.0  # how long a partition's first add waits for its pushes to be taken before answering


def _error(exc: E.KafkaError) -> dict:
    return {"error_code": exc.code, "error_message": str(exc)}


class TxnCoordinatorActor:
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
        self._kv = GcsKV(cluster)
        self._spare_pid: int | None = None
        self.markers = TxnMarkerChannel(cluster, broker_id, self._kv)
        self.state = TransactionStateManager(
            self.broker_id, self.config, self.append_timeout_ms, self.markers, self.abort_check_s, self.expire_check_s
        )
        self.parts = self.state.runtime.parts  # the __transaction_state partitions led here, by number
        self.stats = self.state.stats
        # the producers' AddPartitionsToTxn / EndTxn ... on TCP (actors/channels/coordinator_channel.py)
        self._tasks: set[asyncio.Task] = set()  # verification pushes and lookups in flight (actors/txn/markers.py)
        self.clients = CoordinatorListener(lambda method: getattr(self, method), f"txn coordinator b{broker_id}")

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of ``__transaction_state-{partition}`` leads at ``leader_epoch``: load it."""
        return self.state.runtime.on_elected(partition, leader_epoch, replica)

    async def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        """This broker no longer leads the partition (follower at ``leader_epoch``, or stopped: None)."""
        return self.state.runtime.on_resigned(partition, leader_epoch)

    # ================================================================== the request pipeline
    def _route(self, transactional_id) -> tuple[CoordinatorContext | None, dict | None]:
        if not isinstance(transactional_id, str) or not transactional_id:
            return None, _error(E.InvalidRequestError("a non-empty transactional id is required"))
        part, code = self.state.runtime.route(svc.txn_partition_for(transactional_id, self.props))
        if code:
            return None, {"error_code": code, "error_message": E.for_code(code).default_message}
        return part, None

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
        ans = await self.state.apply(part, res, req.transactional_id)
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
            why = part.shard.verify_error(req.transactional_id, req.producer_id, req.producer_epoch)
            msg = why.message if why is not None else "partition not in the ongoing transaction" if first else None
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

    async def _add_partitions(self, part: CoordinatorContext, req: AddPartitionsToTxnRequest) -> dict:
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
            parked = self.state.parked(part)
            if res.response.get("error_code") != E.ConcurrentTransactionsError.code or left <= 0 or tid in parked:
                return await self.state.apply(part, res, tid)
            waiter = parked[tid] = svc.ParkedAdd(
                req.producer_id, req.producer_epoch, req.partitions, asyncio.get_running_loop().create_future()
            )
            self.stats["parked_adds"] += 1
            try:
                await asyncio.wait({waiter.fut}, timeout=left)
            finally:
                if parked.get(tid) is waiter:
                    del parked[tid]
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
        ans = await self.state.apply(part, res, req.transactional_id)
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
        ans = await self.state.apply(part, res, req.transactional_id)
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
