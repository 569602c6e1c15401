"""The counters each actor keeps for the Prometheus exporter (actors/metrics_exporter.py): ``ReplicaStats`` per
replica, ``ControllerStats`` per controller, the coordinators' ``group_metrics`` / ``txn_metrics``. Plain
Python, counted per request, never per record; read on scrape through each actor's ``metrics()``.
docs/metrics.md names each figure; docs/internals.md ("Metrics") has the costs.
"""

from __future__ import annotations

import struct
from bisect import bisect_left

# latency buckets in milliseconds (upper bounds; +Inf is implicit), Kafka's request times span ~0.1 ms..30 s
LATENCY_BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

# the request types a replica times (Kafka's RequestMetrics "request" tag; followers' fetches apart, as
# Kafka's FetchFollower vs FetchConsumer)
REQUESTS = ("Produce", "Fetch", "FetchFollower")

_BATCH_LENGTH = struct.Struct(">i")  # at offset 8: the bytes that follow the 12-byte prefix
_RECORDS_COUNT = struct.Struct(">i")  # at offset 57 of a RecordBatch v2 header
_PREFIX = 12
_COUNT_AT = 57
_HEADER = 61


def records_in(batches) -> int:
    """The records of a produce's RecordBatch v2 bytes, from each batch header's ``RecordsCount`` (one read
    per batch, none per record); a malformed tail stops the count (the log rejected it anyway)."""
    n, pos, end = 0, 0, len(batches)
    while pos + _HEADER <= end:
        (length,) = _BATCH_LENGTH.unpack_from(batches, pos + 8)
        (count,) = _RECORDS_COUNT.unpack_from(batches, pos + _COUNT_AT)
        if length <= 0:
            break
        n += max(0, count)
        pos += _PREFIX + length
    return n


class LatencyHistogram:
    """Bucket counts (non-cumulative here; the exporter makes them cumulative), sum and count in ms."""

    __slots__ = ("buckets", "sum", "count")

    def __init__(self):
        self.buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, ms: float) -> None:
        self.buckets[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum += ms
        self.count += 1

    def snapshot(self) -> dict:
        return {"buckets": list(self.buckets), "sum": self.sum, "count": self.count}


class ReplicaStats:
    """One replica's BrokerTopicMetrics and RequestMetrics (see the module docstring)."""

    __slots__ = ("counters", "latency")

    COUNTERS = (
        "messages_in",
        "bytes_in",
        "bytes_out",
        "replication_bytes_out",
        "bytes_rejected",
        "total_produce_requests",
        "failed_produce_requests",
        "total_fetch_requests",
        "failed_fetch_requests",
    )

    def __init__(self):
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self.latency = {r: LatencyHistogram() for r in REQUESTS}

    def produced(self, batches, answer: dict, elapsed_ms: float) -> None:
        """One produce request answered ``answer``; a duplicate (idempotent retry) appends nothing."""
        c = self.counters
        c["total_produce_requests"] += 1
        if answer.get("error_code"):
            c["failed_produce_requests"] += 1
            if isinstance(batches, (bytes, bytearray, memoryview)):
                c["bytes_rejected"] += len(batches)
        elif not answer.get("duplicate"):
            c["bytes_in"] += len(batches)
            c["messages_in"] += records_in(batches)
        self.latency["Produce"].observe(elapsed_ms)

    def fetched(self, follower: bool, answer: dict, elapsed_ms: float) -> None:
        c = self.counters
        records = answer.get("records")
        size = len(records) if records else 0
        if follower:
            c["replication_bytes_out"] += size
            self.latency["FetchFollower"].observe(elapsed_ms)
            return
        c["total_fetch_requests"] += 1
        if answer.get("error_code"):
            c["failed_fetch_requests"] += 1
        c["bytes_out"] += size
        self.latency["Fetch"].observe(elapsed_ms)

    def snapshot(self) -> dict:
        return {"counters": dict(self.counters), "latency": {r: h.snapshot() for r, h in self.latency.items()}}


class ControllerStats:
    """Leader elections and ISR changes, counted from each commit's partition states before and after.

    An election: a partition's leader changes to a live broker (``unclean`` when the new leader was not
    in the ISR before). An ISR shrink / expand: the ISR lost / gained members; counted per leader broker
    (Kafka counts them on the leader that changed the ISR)."""

    def __init__(self):
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        self.isr_shrinks: dict[int, int] = {}
        self.isr_expands: dict[int, int] = {}

    def on_commit(self, prior: dict, after) -> None:
        """``prior``: ``(topic, p) -> state dict`` before the commit (controller_requests.prior_state);
        ``after(topic, p)``: the partition's registration after it (None once deleted)."""
        for key, before in prior.items():
            if not isinstance(key, tuple):  # a removed topic
                continue
            now = after(*key)
            if now is None:
                continue
            if now.leader >= 0 and now.leader != before["leader"]:
                self.leader_elections += 1
                if now.leader not in before["isr"]:
                    self.unclean_leader_elections += 1
            old, new = set(before["isr"]), set(now.isr)
            who = now.leader
            if old - new:
                self.isr_shrinks[who] = self.isr_shrinks.get(who, 0) + 1
            if new - old:
                self.isr_expands[who] = self.isr_expands.get(who, 0) + 1

    def snapshot(self) -> dict:
        return {
            "leader_elections": self.leader_elections,
            "unclean_leader_elections": self.unclean_leader_elections,
            "isr_shrinks": dict(self.isr_shrinks),
            "isr_expands": dict(self.isr_expands),
        }


def group_metrics(parts: dict) -> dict:
    """A group coordinator's figures from its loaded ``__consumer_offsets`` partitions (CoordinatorContext
    by partition): per group its state, members and committed offsets; and the partitions by load state."""
    groups, offsets = [], []
    loading = 0
    for p in sorted(parts):
        part = parts[p]
        if part.state != "active":  # group_service.ACTIVE (loading or failed: not counted yet)
            loading += 1
            continue
        gs, offs = part.shard.metrics_view()
        groups += [{"group": g, "state": st, "members": n, "partition": p} for g, st, n in gs]
        offsets += [{"group": g, "topic": t, "partition": q, "offset": o} for g, t, q, o in offs]
    return {"partitions": len(parts), "loading": loading, "groups": groups, "offsets": offsets}


def txn_metrics(parts: dict, state_names: dict, stats: dict) -> dict:
    """A transaction coordinator's figures: transactional ids by state over its loaded partitions, and its
    counters (appends, completed, aborted on timeout, markers written)."""
    by_state: dict[str, int] = {}
    for part in parts.values():
        shard = getattr(part, "shard", None)
        for md in getattr(shard, "txns", {}).values():
            name = state_names.get(md.state, str(md.state))
            by_state[name] = by_state.get(name, 0) + 1
    return {"partitions": len(parts), "by_state": by_state, "stats": dict(stats)}
