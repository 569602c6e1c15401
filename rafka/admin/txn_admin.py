"""Transaction admin operations behind ``Admin.list_transactions / describe_transactions /
describe_producers / abort_transaction`` and ``rafka txn`` (Kafka's kafka-transactions.sh).

A transactional id lives on the coordinator of its ``__transaction_state`` partition; ``list_transactions``
asks every broker's transaction coordinator (each answers for its own ids). ``describe_producers`` asks a
partition's leader replica for the producers it tracks (Kafka's DescribeProducers) and the first offset of
each one's open transaction; ``abort_transaction`` writes an ABORT marker for one producer straight to that
partition (Kafka's ``kafka-transactions.sh abort``: a *hanging* transaction, one the coordinator no longer
knows, which would otherwise hold the partition's last stable offset forever). ``find_hanging`` lists the
open transactions of a partition older than ``max_age_ms`` (default: the broker's
``transaction.max.timeout.ms``) whose producer has no ongoing transaction at its coordinator.
"""

from __future__ import annotations

import time

from protocol.errors import KafkaError, NotLeaderOrFollowerError, for_code
from protocol.names import RAY_NAMESPACE, txn_coordinator_name
from protocol.txn_messages import DescribeTransactionsRequest, ListTransactionsRequest, WriteTxnMarkersRequest
from rafka.coordinator_client import RETRIABLE_COORDINATOR, TxnCoordinatorClient
from rafka.structs import TopicPartition

DEFAULT_MAX_TXN_TIMEOUT_MS = 900000


def list_transactions(admin, states=(), producer_ids=()) -> list[dict]:
    """``[{transactional_id, producer_id, state}]`` from every live broker's transaction coordinator."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    seen: dict[str, dict] = {}
    req = ListTransactionsRequest(tuple(states), tuple(producer_ids))
    for bid in sorted(admin.metadata.brokers()):
        try:
            tc = ray.get_actor(txn_coordinator_name(admin.cluster_name, bid), namespace=RAY_NAMESPACE)
            res = ray.get(tc.list_transactions.remote(req), timeout=admin.config.request_timeout_ms / 1000.0)
        except (ValueError, RayActorError, GetTimeoutError):
            continue  # no transaction coordinator on that broker (yet), or it is gone
        for t in res["transaction_states"]:
            seen[t["transactional_id"]] = t
    return sorted(seen.values(), key=lambda t: t["transactional_id"])


def describe_transaction(admin, transactional_id: str) -> dict:
    """``{transactional_id, state, producer_id, producer_epoch, transaction_timeout_ms,
    transaction_start_time_ms, topics}`` from the id's coordinator."""
    client = TxnCoordinatorClient(admin.cluster_name, admin.metadata, transactional_id, admin.config.retry_backoff_ms)
    deadline = time.monotonic() + admin.config.default_api_timeout_ms / 1000
    while True:
        left_ms = max(1.0, (deadline - time.monotonic()) * 1000)
        res = client.call(DescribeTransactionsRequest((transactional_id,)), timeout_ms=left_ms)
        state = res["transaction_states"][0]
        code = state.get("error_code")
        # the id's own answer can say the coordinator is loading or moved (after a failover): Kafka's admin
        # client retries those until default.api.timeout.ms, finding the coordinator again
        if code in RETRIABLE_COORDINATOR and time.monotonic() < deadline:
            client.forget()
            time.sleep(client.backoff)
            continue
        if code:
            raise for_code(code)(state.get("error_message"))
        return {k: v for k, v in state.items() if k not in ("error_code", "error_message")}


def _leader_replica(admin, tp: TopicPartition):
    leader = admin.metadata.leader(tp)
    if leader is None:
        raise NotLeaderOrFollowerError(f"{tp} has no leader")
    return leader[0]


def describe_producers(admin, tp: TopicPartition) -> list[dict]:
    """``[{producer_id, producer_epoch, last_sequence, last_timestamp, coordinator_epoch,
    current_txn_start_offset}]`` of the partition's leader (Kafka's DescribeProducers)."""
    import ray

    admin.metadata.wait_for_topic(tp.topic, admin.config.default_api_timeout_ms)
    res = ray.get(
        _leader_replica(admin, tp).describe_producers.remote(), timeout=admin.config.request_timeout_ms / 1000
    )
    if res.get("error_code"):
        raise for_code(res["error_code"])(res.get("error_message"))
    return res["producers"]


def find_hanging(admin, tp: TopicPartition, max_age_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS) -> list[dict]:
    """The partition's open transactions older than ``max_age_ms`` whose producer id no transactional id
    at any coordinator has Ongoing (Kafka's ``find-hanging``)."""
    now = int(time.time() * 1000)
    ongoing = {t["producer_id"] for t in list_transactions(admin, ("Ongoing", "PrepareCommit", "PrepareAbort"))}
    return [
        p
        for p in describe_producers(admin, tp)
        if p["current_txn_start_offset"] >= 0
        and now - p["last_timestamp"] >= max_age_ms
        and p["producer_id"] not in ongoing
    ]


def abort_transaction(admin, tp: TopicPartition, producer_id: int) -> dict:
    """Write an ABORT marker for ``producer_id``'s open transaction on ``tp`` (epoch and coordinator epoch
    from the leader's producer state)."""
    import ray

    producers = {p["producer_id"]: p for p in describe_producers(admin, tp)}
    p = producers.get(producer_id)
    if p is None or p["current_txn_start_offset"] < 0:
        raise KafkaError(f"producer {producer_id} has no open transaction on {tp}")
    req = WriteTxnMarkersRequest(producer_id, p["producer_epoch"], False, max(0, p["coordinator_epoch"]), "admin-abort")
    res = ray.get(
        _leader_replica(admin, tp).write_txn_markers.remote(req), timeout=admin.config.request_timeout_ms / 1000
    )
    if res.get("error_code"):
        raise for_code(res["error_code"])(res.get("error_message"))
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": producer_id,
        "aborted_from": p["current_txn_start_offset"],
    }


def abort_hanging(admin, topic: str, partitions=None, max_age_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS) -> list[dict]:
    """Abort every hanging transaction (``find_hanging``) on ``partitions`` of ``topic`` (all of them when
    None): one ``abort_transaction`` per hanging producer. Returns what each abort answered."""
    if partitions is None:
        partitions = [d["partition"] for d in admin.describe_topics([topic])[0]["partitions"]]
    out = []
    for p in partitions:
        tp = TopicPartition(topic, int(p))
        for h in find_hanging(admin, tp, max_age_ms):
            out.append(abort_transaction(admin, tp, h["producer_id"]))
    return out
