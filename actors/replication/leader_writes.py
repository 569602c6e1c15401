"""The leader's write path of one partition replica, a collaborator the replica shell (actors/replica.py) holds:
Produce with acks 0/1/all, WriteTxnMarkers and the KIP-890 verification pushes (Kafka's
ReplicaManager.appendRecords -> Partition.appendRecordsToLeader, with its DelayedProduce). It calls the
Partition, the broker's ReplicaManager, the TxnVerifier and, for markers on ``__consumer_offsets``, this
broker's group coordinator."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.channels.replica_lookup import named_actor_async
from actors.replication.call_order import CallOrder
from actors.replication.partition import Partition
from actors.replication.replica_manager import DelayedProduce, ReplicaManager, error_answer
from actors.replication.txn_verification import TxnVerifier
from actors.server.metrics import ReplicaStats
from protocol import errors as E
from protocol.clock import now_ms
from protocol.messages import ProduceRequest, ProduceResponse, check_request
from protocol.names import OFFSETS_TOPIC, group_coordinator_name
from protocol.txn_messages import TxnResponse, TxnVerifiedRequest, WriteTxnMarkersRequest
from storage.batch_header import BATCH_OVERHEAD as HEADER_SIZE
from storage.batch_header import parse_header

log = logging.getLogger("actors.replica")


class LeaderWrites:
    """One replica's appends as leader. ``stats`` is the replica's own counters dict (acks=all and marker
    waits); ``metrics`` its per-request metrics, shared with its fetches."""

    def __init__(
        self,
        cluster: str,
        partition: Partition,
        replica_manager: ReplicaManager,
        metrics: ReplicaStats,
        stats: dict,
    ):
        self.cluster, self.partition, self.replica_manager = cluster, partition, replica_manager
        self.metrics, self.stats = metrics, stats
        self.broker_id, self.topic = partition.broker_id, partition.topic
        self.tp = f"{partition.topic}-{partition.partition}"
        self.verifier = TxnVerifier(
            cluster, self.broker_id, partition.topic, partition.partition, lambda: partition.leader_epoch
        )
        # per-connection produce order of the wire listener's and the client listener's connections
        self.call_order = CallOrder()
        self._group_coordinator: Any = None  # this broker's, told of markers on __consumer_offsets partitions

    # ---- produce ----------------------------------------------------------------------------------
    async def produce(self, req: ProduceRequest) -> dict:
        t0 = time.perf_counter()
        order = getattr(req, "order", None)
        try:
            await self.call_order.enter(order)  # a channel's earlier produce calls append first
        except Exception as exc:
            order = None
            answer = error_answer(ProduceResponse, exc)
        else:
            try:
                answer = await self._produce(req, order)
            finally:
                self.call_order.leave(order)
        self.metrics.produced(getattr(req, "records", b""), answer, (time.perf_counter() - t0) * 1000)
        return answer

    async def _produce(self, req: ProduceRequest, order=None) -> dict:
        """The append, then (acks=all) the wait for the high watermark; ``order``'s turn is passed on
        (``CallOrder.leave``) as soon as the append is done or refused, not after the wait."""
        p = self.partition
        try:
            req = check_request(req, ProduceRequest, "produce")
            if req.acks not in (0, 1, -1):
                raise E.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {req.acks!r}")
            err = p.check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            batches = req.records
            if not isinstance(batches, (bytes, bytearray, memoryview)) or len(batches) == 0:
                raise E.CorruptMessageError("produce needs one or more record batches as bytes")
            h = parse_header(batches, 0) if len(batches) >= HEADER_SIZE else None
            if h is not None and h.is_transactional and not h.is_control and not p.in_open_transaction(h.producer_id):
                await self.verifier.verify(  # KIP-890 (a token from rafka's producer, or the coordinator asked)
                    req.transactional_id, h.producer_id, h.producer_epoch, req.txn_start_ms, req.txn_token
                )
                err = p.check_leader(req.current_leader_epoch)  # still the leader after the wait?
                if err is not None:
                    raise err
            try:
                info, change = p.append_records_to_leader(batches, req.acks, now_ms(), req.origin)
            finally:
                self.call_order.leave(order)
            self.replica_manager.complete_delayed_requests(p, change)
            response = ProduceResponse(
                base_offset=info.first_offset,
                log_append_time=info.log_append_time,
                log_start_offset=p.log.log_start_offset,
                duplicate=bool(info.duplicate),
            ).to_dict()
            if req.acks != -1:
                return response
            op = DelayedProduce(p, req.timeout_ms, info.last_offset + 1, response)
            t0 = time.perf_counter()
            result = await self.replica_manager.wait_produce(op)
            self.stats["acks_all_produces"] += 1
            self.stats["acks_all_wait_ms"] += (time.perf_counter() - t0) * 1000
            return result
        except E.RecordValidationError as exc:  # which records of the batch were bad (KIP-467)
            return error_answer(ProduceResponse, exc, record_errors=exc.record_errors)
        except Exception as exc:
            return error_answer(ProduceResponse, exc)

    async def write_txn_markers(self, req: WriteTxnMarkersRequest) -> dict:
        """WriteTxnMarkers from the transaction coordinator: the COMMIT/ABORT marker, acks=all."""
        p = self.partition
        try:
            if type(req) is not WriteTxnMarkersRequest:
                raise E.InvalidRequestError(f"write_txn_markers takes one WriteTxnMarkersRequest, got {req!r:.60}")
            err = p.check_leader(-1)
            if err is not None:
                raise err
            info, change = p.append_txn_marker(
                req.producer_id, req.producer_epoch, bool(req.committed), req.coordinator_epoch, now_ms()
            )
            self.verifier.state.marker_written(req.producer_id, req.txn_start_ms)
            self.replica_manager.complete_delayed_requests(p, change)
            done = TxnResponse().to_dict()
            t0 = time.perf_counter()
            ans = await self.replica_manager.wait_produce(DelayedProduce(p, 30000, info.last_offset + 1, done))
            self.stats["markers"] += 1  # each marker's acks=all wait (benchmarks/txn_bench.py's breakdown)
            self.stats["markers_wait_ms"] += (time.perf_counter() - t0) * 1000
            if not ans["error_code"] and self.topic == OFFSETS_TOPIC:
                await self._offsets_marker(req.producer_id, bool(req.committed))
            return ans
        except Exception as exc:
            return TxnResponse(*E.error_response(exc)).to_dict()

    async def txn_verified(self, req: TxnVerifiedRequest) -> dict:
        """The transaction coordinator's push (actors/replication/txn_verification.py): the producer's ongoing transaction
        includes this partition. Taken only by the leader at the push's leader epoch; ``taken`` says whether
        it was (a refused push leaves the transaction's first produce to ask the coordinator)."""
        if type(req) is not TxnVerifiedRequest:
            return TxnResponse(E.InvalidRequestError.code, "txn_verified takes one TxnVerifiedRequest").to_dict()
        err = (
            self.partition.check_leader(req.leader_epoch)
            if req.leader_epoch >= 0
            else E.InvalidRequestError("a verification push names the leader epoch it is for")
        )
        if err is not None:
            return TxnResponse(*E.error_response(err)).to_dict()
        taken = self.verifier.state.pushed(req.producer_id, req.producer_epoch, req.txn_start_ms)
        return {**TxnResponse().to_dict(), "taken": taken}

    async def _offsets_marker(self, producer_id: int, committed: bool) -> None:
        """A marker on a ``__consumer_offsets`` partition: this broker's group coordinator applies the
        producer's pending offsets (Kafka's onTransactionCompleted). If it is not there, the partition's next
        load reads the marker from the log."""
        try:
            gc = self._group_coordinator
            if gc is None:  # looked up once, off the event loop
                gc = await named_actor_async(group_coordinator_name(self.cluster, self.broker_id))
                self._group_coordinator = gc
            await asyncio.wait_for(gc.complete_transaction.remote(self.partition.partition, producer_id, committed), 30)
        except (ValueError, ray.exceptions.RayError, asyncio.TimeoutError) as e:
            self._group_coordinator = None  # gone or restarted: look it up again next time
            log.warning("%s b%d: group coordinator not told of a marker: %s", self.tp, self.broker_id, e)
