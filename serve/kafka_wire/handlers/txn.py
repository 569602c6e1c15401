"""Transactions (KIP-98) over the wire: InitProducerId (api key 22, v0-5), AddPartitionsToTxn (24, v0-3),
AddOffsetsToTxn (25, v0-4), EndTxn (26, v0-4), TxnOffsetCommit (28, v0-4), DescribeTransactions (65, v0)
and ListTransactions (66, v0; v1's duration filter is not served). Each kio request becomes the typed message of protocol/txn_messages.py that
rafka's Python producer sends, and goes to the same actor:

- InitProducerId without a transactional id (idempotent producers): a fresh producer id from the broker's
  block (``Backend.init_producer_id``); with one, the transaction coordinator of the id, with the caller's
  producer id/epoch from v3 (KIP-360: a recovering producer keeps its id one epoch up, a stale one is
  fenced);
- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions: the transaction coordinator of the id
  (``Backend.txn_call``), which answers NOT_COORDINATOR (16) when this broker is not the id's coordinator and
  COORDINATOR_LOAD_IN_PROGRESS (14) while it loads ``__transaction_state``;
- TxnOffsetCommit: the group's coordinator (``Backend.txn_offset_commit``), offsets pending until the
  transaction's marker reaches ``__consumer_offsets``;
- ListTransactions: this broker's transaction coordinator only (the admin client asks every broker).

AddPartitionsToTxn checks the topics first as Kafka's KafkaApis does: a partition that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION (3) and the others OPERATION_NOT_ATTEMPTED (55); nothing is added. TxnOffsetCommit
answers 3 for such a partition alone and commits the others (with their leader epoch, v2+). Versions
before KIP-588 (InitProducerId < 4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < 2, TxnOffsetCommit < 3)
know no PRODUCER_FENCED (90): they get INVALID_PRODUCER_EPOCH (47), as Kafka answers them. Transaction
version 2 (EndTxn 5, TxnOffsetCommit 5, AddPartitionsToTxn 4+ broker batches) is not served.

Transactional Produce needs nothing here: the produce handler passes the request's transactional id to the
partition leader, which verifies the producer's transaction with the coordinator (KIP-890) exactly as for
the Python client, so a batch for a partition not added to the transaction gets INVALID_TXN_STATE (48).
"""

from __future__ import annotations

import asyncio
import datetime

from actors.txn.shard import STATE_NAMES
from protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
)
from serve.kafka_wire import responses
from serve.kafka_wire.handlers.groups import existing_partitions

UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED = 3, 47, 55, 90
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15
EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)

# the first version of each API that knows PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH
FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _code(api_key: int, version: int, code: int):
    if code == PRODUCER_FENCED and version < FENCED_SINCE[api_key]:
        code = INVALID_PRODUCER_EPOCH
    return responses.error_code(code)


def _ms(d: datetime.timedelta) -> int:
    return int(d.total_seconds() * 1000)


async def init_producer_id(backend, request, version: int):
    mod = responses.response_module(22, version)
    if request.transactional_id is None:
        r = await backend.init_producer_id()
    else:
        tid = request.transactional_id
        req = InitProducerIdRequest(
            tid,
            _ms(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
        r = await backend.txn_call(tid, req)
    return responses.make(
        mod,
        "InitProducerIdResponse",
        throttle_time=responses.ZERO,
        error_code=_code(22, version, r.get("error_code", 0)),
        producer_id=r.get("producer_id", -1),
        producer_epoch=r.get("producer_epoch", -1),
    )


async def add_partitions_to_txn(backend, request, version: int):
    mod = responses.response_module(24, version)
    tid = request.v3_and_below_transactional_id
    asked = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    missing = set(asked) - await existing_partitions(backend, asked)
    if missing:
        codes = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in missing else OPERATION_NOT_ATTEMPTED for tp in asked}
    else:
        req = AddPartitionsToTxnRequest(
            tid,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            tuple(asked),
        )
        r = await backend.txn_call(tid, req)
        per = {(x["topic"], x["partition"]): x["error_code"] for x in r.get("results") or ()}
        codes = {tp: per.get(tp, r.get("error_code", 0)) for tp in asked}
    per_topic = responses.by_topic(
        (
            t,
            responses.make(
                mod,
                "AddPartitionsToTxnPartitionResult",
                partition_index=p,
                partition_error_code=_code(24, version, codes[(t, p)]),
            ),
        )
        for t, p in asked
    )
    results = tuple(
        responses.make(mod, "AddPartitionsToTxnTopicResult", name=t, results_by_partition=ps)
        for t, ps in per_topic.items()
    )
    return responses.make(
        mod, "AddPartitionsToTxnResponse", throttle_time=responses.ZERO, results_by_topic_v3_and_below=results
    )


async def add_offsets_to_txn(backend, request, version: int):
    req = AddOffsetsToTxnRequest(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch), request.group_id
    )
    r = await backend.txn_call(request.transactional_id, req)
    mod = responses.response_module(25, version)
    return responses.make(
        mod,
        "AddOffsetsToTxnResponse",
        throttle_time=responses.ZERO,
        error_code=_code(25, version, r.get("error_code", 0)),
    )


async def end_txn(backend, request, version: int):
    req = EndTxnRequest(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch), bool(request.committed)
    )
    r = await backend.txn_call(request.transactional_id, req)
    mod = responses.response_module(26, version)
    return responses.make(
        mod, "EndTxnResponse", throttle_time=responses.ZERO, error_code=_code(26, version, r.get("error_code", 0))
    )


async def txn_offset_commit(backend, request, version: int):
    offsets = tuple(
        (
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            p.committed_metadata or "",
            int(getattr(p, "committed_leader_epoch", -1)),  # v2+
        )
        for t in request.topics
        for p in t.partitions
    )
    # KafkaApis.handleTxnOffsetCommitRequest: partitions not in the metadata answer UNKNOWN_TOPIC_OR_PARTITION
    # and are not committed; the coordinator is asked for the others only (not at all when none is left)
    known = await existing_partitions(backend, [(o[0], o[1]) for o in offsets])
    valid = tuple(o for o in offsets if (o[0], o[1]) in known)
    per, top = {}, 0
    if valid:
        req = TxnOffsetCommitRequest(
            request.transactional_id,
            request.group_id,
            int(request.producer_id),
            int(request.producer_epoch),
            valid,
            int(getattr(request, "generation_id", -1)),
            getattr(request, "member_id", "") or "",
            getattr(request, "group_instance_id", None),
        )
        r = await backend.txn_offset_commit(request.group_id, req)
        per = {
            (t["name"], int(p["partition_index"])): p.get("error_code", 0)
            for t in r.get("topics") or ()
            for p in t.get("partitions") or ()
        }
        top = r.get("error_code", 0)

    def code(t: str, p: int) -> int:
        c = UNKNOWN_TOPIC_OR_PARTITION if (t, p) not in known else (per.get((t, p)) or top)
        # KafkaApis: clients of TxnOffsetCommit v0-1 (before KAFKA-7296) do not retry a loading coordinator
        return COORDINATOR_NOT_AVAILABLE if c == COORDINATOR_LOAD_IN_PROGRESS and version < 2 else c

    mod = responses.response_module(28, version)
    per_topic = responses.by_topic(
        (
            t,
            responses.make(
                mod, "TxnOffsetCommitResponsePartition", partition_index=p, error_code=_code(28, version, code(t, p))
            ),
        )
        for t, p, *_ in offsets
    )
    topics = tuple(
        responses.make(mod, "TxnOffsetCommitResponseTopic", name=t, partitions=ps) for t, ps in per_topic.items()
    )
    return responses.make(mod, "TxnOffsetCommitResponse", throttle_time=responses.ZERO, topics=topics)


async def describe_transactions(backend, request, version: int):
    mod = responses.response_module(65, version)
    ids = list(request.transactional_ids)
    answers = await asyncio.gather(*(backend.txn_call(tid, DescribeTransactionsRequest((tid,))) for tid in ids))
    states = []
    for tid, r in zip(ids, answers):
        s = (r.get("transaction_states") or [r])[0]
        code = r.get("error_code") or s.get("error_code", 0)
        ok = not code
        topics = responses.by_topic((t, p) for t, p in s.get("topics") or ()) if ok else {}
        states.append(
            responses.make(
                mod,
                "TransactionState",
                error_code=responses.error_code(code),
                transactional_id=tid,
                transaction_state=s.get("state", "") if ok else "",
                transaction_timeout=datetime.timedelta(milliseconds=s.get("transaction_timeout_ms", 0) if ok else 0),
                transaction_start_time=EPOCH
                + datetime.timedelta(milliseconds=max(0, s.get("transaction_start_time_ms", -1)) if ok else 0),
                producer_id=s.get("producer_id", -1) if ok else -1,
                producer_epoch=s.get("producer_epoch", -1) if ok else -1,
                topics=tuple(responses.make(mod, "TopicData", topic=t, partitions=ps) for t, ps in topics.items()),
            )
        )
    return responses.make(
        mod, "DescribeTransactionsResponse", throttle_time=responses.ZERO, transaction_states=tuple(states)
    )


async def list_transactions(backend, request, version: int):
    mod = responses.response_module(66, version)
    known = set(STATE_NAMES.values())
    states = tuple(request.state_filters)
    req = ListTransactionsRequest(
        tuple(s for s in states if s in known), tuple(int(p) for p in request.producer_id_filters)
    )
    r = await backend.list_transactions(req)
    unknown = tuple(s for s in states if s not in known)  # reported, and not filtered on (as Kafka does)
    listed = r.get("transaction_states") or ()
    return responses.make(
        mod,
        "ListTransactionsResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(r.get("error_code", 0)),
        unknown_state_filters=unknown,
        transaction_states=tuple(
            responses.make(
                mod,
                "TransactionState",
                transactional_id=x["transactional_id"],
                producer_id=x["producer_id"],
                transaction_state=x["state"],
            )
            for x in listed
        ),
    )
