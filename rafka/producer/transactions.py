"""The transactional producer's calls (KIP-98 client side), driven from the user's thread by ``Producer``:
``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``. The state and its valid moves are :class:`rafka.producer.txn_manager.TransactionState`; the
Sender adds written partitions to the transaction before their batches go (AddPartitionsToTxn).

Every coordinator call is retried on Kafka's retriable answers (CONCURRENT_TRANSACTIONS while the previous
transaction's markers are still being written, a coordinator loading or moving) until ``timeout``.
"""

from __future__ import annotations

import time
from typing import Any

from protocol.errors import KafkaTimeoutError, for_code
from protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from rafka.coordinator_client import GroupCoordinatorClient, TxnCoordinatorClient
from rafka.producer.txn_manager import TransactionAbortedError, TransactionState


class Transactions:
    def __init__(self, producer: Any):
        cfg = producer.config
        self.producer = producer
        self.state = TransactionState(cfg.transactional_id, cfg.transaction_timeout_ms)
        self.client = TxnCoordinatorClient(  # on the producer's transport: TCP to the coordinator by default
            producer.cluster_name,
            producer.metadata,
            cfg.transactional_id,
            cfg.retry_backoff_ms,
            producer.sender.transport,
        )
        self.backoff_s = max(0.01, cfg.retry_backoff_ms / 1000)
        self.default_timeout_s = cfg.max_block_ms / 1000
        producer.sender.transaction_manager.use_transaction(self.state, self.client)

    def _call(self, request: Any, timeout: float | None, client: Any = None) -> dict:
        """``request`` until a non-retriable answer (returned) or the deadline (KafkaTimeoutError)."""
        client = client or self.client
        deadline = time.monotonic() + (self.default_timeout_s if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(f"{request.METHOD} of {self.state.transactional_id!r} did not complete in time")
            res = client.call(request, timeout_ms=left * 1000)
            code = res.get("error_code", 0)
            if not code or not self.state.is_retriable(code):
                return res
            time.sleep(min(self.backoff_s, max(0.0, deadline - time.monotonic())))

    def _raise(self, res: dict, from_end_txn: bool = False) -> None:
        code = res.get("error_code", 0)
        for t in res.get("topics") or ():  # TxnOffsetCommit answers per partition
            for p in t.get("partitions") or ():
                if p.get("error_code") and not code:
                    code = p["error_code"]
                    res = {"error_code": code, "error_message": f"{t.get('name')}-{p.get('partition_index')}"}
        if code:
            raise self.state.fail(for_code(code)(res.get("error_message")), from_end_txn)

    def init_transactions(self, timeout: float | None = None) -> None:
        """InitProducerId with the transactional id: fences any previous instance and aborts what it left
        open, then the producer is ready for ``begin_transaction``."""
        st = self.state
        st.start_init()
        try:
            res = self._call(InitProducerIdRequest(st.transactional_id, st.timeout_ms), timeout)
        except BaseException:
            st.state = "UNINITIALIZED"  # Kafka lets init_transactions be called again after a timeout
            raise
        code = res.get("error_code", 0)
        if code:
            err = for_code(code)(res.get("error_message"))
            st.state, st.error = "FATAL_ERROR", err
            raise err
        st.initialized(res["producer_id"], res["producer_epoch"])
        self.producer.sender.transaction_manager.set_producer(res["producer_id"], res["producer_epoch"])

    def begin_transaction(self) -> None:
        self.state.begin()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata or int}) for the consumer's group as part of
        this transaction: AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        st = self.state
        st.check_can_send()
        meta = (
            {"group_id": group_metadata}
            if isinstance(group_metadata, str)
            else dict(group_metadata)
            if isinstance(group_metadata, dict)
            else vars(group_metadata)
        )
        group_id = meta["group_id"]
        pid, epoch = self.producer.sender.producer_id, self.producer.sender.producer_epoch
        self._raise(self._call(AddOffsetsToTxnRequest(st.transactional_id, pid, epoch, group_id), timeout))
        st.offsets_groups.add(group_id)
        entries = []
        for tp, om in sorted(offsets.items()):
            offset = om if isinstance(om, int) else om.offset
            metadata = "" if isinstance(om, int) else (om.metadata or "")
            leader_epoch = -1 if isinstance(om, int) else getattr(om, "leader_epoch", -1)
            entries.append(
                (tp.topic, tp.partition, int(offset), metadata, -1 if leader_epoch is None else int(leader_epoch))
            )
        req = TxnOffsetCommitRequest(
            st.transactional_id,
            group_id,
            pid,
            epoch,
            tuple(entries),
            int(meta.get("generation_id", -1)),
            meta.get("member_id") or "",
            meta.get("group_instance_id"),
        )
        group_client = GroupCoordinatorClient(  # on the producer's transport too (a group coordinator: Ray calls)
            self.producer.cluster_name,
            self.producer.metadata,
            group_id,
            self.producer.config.retry_backoff_ms,
            self.producer.sender.transport,
        )
        self._raise(self._call(req, timeout, group_client))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush every record of the transaction, then EndTxn(commit). A failed record makes the commit
        raise its error; the transaction must then be aborted."""
        st = self.state
        st.start_commit()
        self.producer.flush(timeout)
        if st.state == "ABORTABLE_ERROR" and st.error is not None:
            raise st.error
        if st.has_partitions:
            pid, epoch = self.producer.sender.producer_id, self.producer.sender.producer_epoch
            res = self._call(EndTxnRequest(st.transactional_id, pid, epoch, True), timeout)
            self._raise(res, from_end_txn=True)
        st.completed()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records not yet sent (their futures fail with TransactionAbortedError), wait for those in
        flight, then EndTxn(abort): read_committed consumers never see any of them."""
        st = self.state
        st.start_abort()
        producer = self.producer
        err = TransactionAbortedError("the transaction was aborted before this record was sent")
        for batch in producer.accumulator.abort_all(err):
            producer.sender._fail(batch, err)
        producer.flush(timeout)
        deadline = time.monotonic() + (self.default_timeout_s if timeout is None else timeout)
        while producer.sender.transaction_manager._adding is not None and time.monotonic() < deadline:
            time.sleep(0.005)  # an AddPartitionsToTxn in flight: its partitions must be ended too
        if st.has_partitions:
            pid, epoch = producer.sender.producer_id, producer.sender.producer_epoch
            res = self._call(EndTxnRequest(st.transactional_id, pid, epoch, False), timeout)
            self._raise(res, from_end_txn=True)
        st.completed()
