"""The group coordinator's transactional side (Kafka's GroupCoordinator.commitTransactionalOffsets and
onTransactionCompleted), a mixin of GroupCoordinatorActor (actors/group_coordinator.py), whose write pipeline
it uses.

- ``txn_offset_commit(TxnOffsetCommitRequest)``: validated like OffsetCommit; the offset records go to the
  group's ``__consumer_offsets`` partition in a transactional batch of the producer (coordinator origin, the
  leader verifies the producer's transaction, KIP-890) and stay pending in the shard: OffsetFetch does not
  see them.
- ``complete_transaction(partition, producer_id, committed)``: the partition's replica took the transaction
  coordinator's marker (WriteTxnMarkers); the producer's pending offsets are committed or dropped. A marker
  arriving while the partition loads is applied after the load; a partition not led here ignores it (its
  leader loads the marker from the log).
"""

from __future__ import annotations

from actors.coordinator import writer as writer
from actors.group import service as svc
from actors.group.records import EndTxnMarker
from protocol.txn_messages import TxnOffsetCommitRequest


class GroupTxnApi:
    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> dict:
        if type(request) is not TxnOffsetCommitRequest:
            msg = f"txn_offset_commit takes one TxnOffsetCommitRequest, not {type(request).__name__}"
            return {"error_code": svc.INVALID_REQUEST, "error_message": msg, "topics": []}
        r = request
        by_topic: dict[str, list[dict]] = {}
        try:
            for topic, p, offset, metadata in r.offsets:
                by_topic.setdefault(topic, []).append(
                    {"partition_index": int(p), "committed_offset": int(offset), "committed_metadata": metadata}
                )
        except (TypeError, ValueError) as e:
            return {"error_code": svc.INVALID_REQUEST, "error_message": f"malformed offsets: {e}", "topics": []}
        topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        if not svc.valid_group(r.group_id):
            return svc.offset_commit_error(topics, svc.INVALID_GROUP_ID, svc.message(svc.INVALID_GROUP_ID))
        return await self._write(  # type: ignore[attr-defined]
            r.group_id,
            lambda s, now: s.txn_offset_commit(
                r.group_id,
                topics,
                r.producer_id,
                now,
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
            ),
            lambda c, m: svc.offset_commit_error(topics, c, m),
            too_large=svc.INVALID_COMMIT_OFFSET_SIZE,
            txn=writer.TxnWrite(r.producer_id, r.producer_epoch, r.transactional_id),
        )

    async def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> dict:
        part = self.parts.get(int(partition))  # type: ignore[attr-defined]
        if part is None:
            return {"error_code": 0, "error_message": None, "ignored": True}
        if part.state == svc.LOADING:
            part.markers.append(EndTxnMarker(int(producer_id), bool(committed)))
            return {"error_code": 0, "error_message": None, "queued": True}
        if part.state != svc.ACTIVE:
            return {"error_code": 0, "error_message": None, "ignored": True}
        result = part.shard.complete_transaction(int(producer_id), bool(committed))
        return await self._complete(  # type: ignore[attr-defined]
            part, result, lambda c, m: {"error_code": c, "error_message": m}, svc.UNKNOWN_SERVER_ERROR
        ) or {"error_code": 0, "error_message": None}
