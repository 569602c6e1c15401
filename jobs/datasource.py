"""Ray Data over rafka topics: ``TopicDatasource`` (a bounded read) and ``TopicDatasink`` (a write).

    src = TopicDatasource(cluster, "clicks", start="earliest", end="latest")   # plans the ranges now
    ds = src.to_dataset()            # one read task per partition, columns below
    src.ranges                       # {partition: (start, end)}: what the dataset holds, to commit later
    ds = read_topic(cluster, "clicks", start={"timestamp": ms})
    write_topic(ds, cluster, "results", key_column="user", value_column="event", json_values=True)

Reading is planned on the driver when the source is built: each partition's range is
``[start, end)`` with ``start`` from explicit offsets, a timestamp, or a group's committed offsets
(``earliest``/``latest`` for partitions without one) and ``end`` the high watermark snapshotted then (or
given offsets); ``isolation_level='read_committed'`` ends them at the last stable offset instead and drops
aborted transactions' records, as Kafka's read_committed consumers do. A dataset built from the source
therefore holds exactly those records however late it runs, and the ranges are what a job commits once its
outputs are safe.

Each read task runs in a Ray worker: it finds the partition leader's replica actor through the cluster's
GCS metadata (the cluster *name* travels, every lookup names Ray namespace ``rafka`` explicitly, so the
driver's namespace does not matter), fetches large chunks (``fetch_max_bytes``, the next fetch in flight
while one is decoded) and decodes them with ``storage.records.decode_records`` (the C accelerator when
built) straight into Arrow columns: ``topic`` string, ``partition`` int32, ``offset`` int64,
``timestamp`` int64 (epoch ms, Kafka's record timestamp), ``key``/``value`` binary, ``headers``
list<struct<key: string, value: binary>>. Measured against a ``rafka.Consumer`` (assign + seek) in
``benchmarks/spark_bench.py``.

Writing: one idempotent ``acks=all`` ``rafka.Producer`` per write task, flushed and closed; a record
whose delivery fails fails the task, so a dataset write either succeeds for every record or raises.
Partitions come from the producer's partitioner (murmur2 of the key, as Kafka's Java client) unless a
``partition_column`` is given.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Iterator

import pyarrow as pa
import ray
from ray.data import Datasink, Datasource, ReadTask
from ray.data.block import BlockAccessor, BlockMetadata

from protocol.errors import (
    KafkaError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    for_code,
    refresh_metadata,
)
from protocol.messages import READ_COMMITTED as PROTOCOL_READ_COMMITTED
from protocol.messages import READ_UNCOMMITTED as PROTOCOL_READ_UNCOMMITTED
from protocol.messages import FetchRequest
from rafka.consumer.read_committed import AbortedTransactionFilter
from rafka.structs import TopicPartition

__all__ = ["SCHEMA", "TopicDatasource", "TopicDatasink", "plan_ranges", "read_partition", "read_topic", "write_topic"]

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
    ]
)
EARLIEST, LATEST = "earliest", "latest"
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


def _cluster_name(cluster: Any) -> str:
    """The name read tasks and write tasks carry (a LocalCluster or handle does not travel to workers)."""
    from rafka.client_utils import resolve_cluster

    return resolve_cluster(cluster)


# -- planning --------------------------------------------------------------------------------------------
def _partitions(admin, topic: str, partitions: Iterable[int] | None) -> list[int]:
    tm = admin.metadata.topic(topic)
    if tm is None:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    if partitions is None:
        return list(tm.partition_ids)
    wanted = sorted(set(int(p) for p in partitions))
    missing = [p for p in wanted if p not in tm.partitions]
    if missing:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition(s) {missing}")
    return wanted


def _offsets(
    admin, topic: str, parts: list[int], spec: Any, what: str, isolation: str = READ_UNCOMMITTED
) -> dict[int, int]:
    """Resolve ``spec`` to an offset per partition: 'earliest', 'latest' (the high watermark, or the last stable
    offset for ``read_committed``), an offset for all, a ``{partition: offset}`` dict, or ``{"timestamp": ms}``
    (the first offset at or after it, else the end)."""
    tps = {p: TopicPartition(topic, p) for p in parts}
    if spec in (EARLIEST, LATEST):
        got = admin.list_offsets({tp: spec for tp in tps.values()}, isolation_level=isolation)
        return {p: got[tp].offset for p, tp in tps.items()}
    if isinstance(spec, dict) and set(spec) == {"timestamp"}:
        ts = int(spec["timestamp"])
        found = admin.list_offsets({tp: ts for tp in tps.values()})
        ends = admin.list_offsets({tp: LATEST for tp in tps.values()}, isolation_level=isolation)
        return {p: found[tp].offset if found[tp].offset >= 0 else ends[tp].offset for p, tp in tps.items()}
    if isinstance(spec, dict):
        unknown = sorted(set(int(p) for p in spec) - set(parts))
        if unknown:
            raise ValueError(f"{what} names partition(s) {unknown} that are not being read")
        rest = [p for p in parts if p not in {int(k) for k in spec}]
        out = {int(p): int(o) for p, o in spec.items()}
        if rest:  # unnamed partitions: from the beginning (start) / to the high watermark or LSO (end)
            out.update(_offsets(admin, topic, rest, EARLIEST if what == "start" else LATEST, what, isolation))
        return out
    if isinstance(spec, int) and not isinstance(spec, bool):
        return {p: spec for p in parts}
    raise ValueError(
        f"{what} must be 'earliest', 'latest', an offset, {{partition: offset}} or {{'timestamp': ms}}, not {spec!r}"
    )


def plan_ranges(
    cluster: Any,
    topic: str,
    start: Any = EARLIEST,
    end: Any = LATEST,
    group: str | None = None,
    partitions: Iterable[int] | None = None,
    isolation_level: str = READ_UNCOMMITTED,
) -> dict[int, tuple[int, int]]:
    """``{partition: (start, end)}`` for a bounded read. With ``group``, partitions the group has committed
    offsets for start there and ``start`` applies to the others. Ranges are clamped into
    [log start, high watermark] so that a plan never asks for offsets the log cannot serve; for
    ``read_committed``, into [log start, last stable offset], so that no open transaction is in the plan."""
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ValueError(f"isolation_level must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}, not {isolation_level!r}")
    from rafka.admin.admin import Admin

    admin = Admin(cluster)
    parts = _partitions(admin, topic, partitions)
    tps = {p: TopicPartition(topic, p) for p in parts}
    low = admin.list_offsets({tp: EARLIEST for tp in tps.values()})
    high = admin.list_offsets({tp: LATEST for tp in tps.values()}, isolation_level=isolation_level)
    committed: dict[int, int] = {}
    if group is not None:
        committed = {
            tp.partition: off
            for tp, off in admin.list_consumer_group_offsets(group).items()
            if tp.topic == topic and tp.partition in tps
        }
    # 'earliest' / 'latest' are the offsets just listed: no second ListOffsets round for them
    known = {
        EARLIEST: {p: low[tp].offset for p, tp in tps.items()},
        LATEST: {p: high[tp].offset for p, tp in tps.items()},
    }

    def resolve(spec: Any, ps: list[int], what: str) -> dict[int, int]:
        if isinstance(spec, str) and spec in known:
            return {p: known[spec][p] for p in ps}
        return _offsets(admin, topic, ps, spec, what, isolation_level)

    rest = [p for p in parts if p not in committed]
    starts = {**(resolve(start, rest, "start") if rest else {}), **committed}
    ends = resolve(end, parts, "end")
    out = {}
    for p, tp in tps.items():
        lo, hi = low[tp].offset, high[tp].offset
        s = min(max(starts[p], lo), hi)
        out[p] = (s, max(s, min(ends[p], hi)))
    return out


# -- reading one partition ------------------------------------------------------------------------------
def _empty_table() -> pa.Table:
    return SCHEMA.empty_table()


def _to_table(topic: str, partition: int, records: list) -> pa.Table:
    """Arrow columns from decoded ``storage.records.Record`` tuples (offset, timestamp, key, value, headers)."""
    n = len(records)
    if n == 0:
        return _empty_table()
    offsets, stamps, keys, values, headers = zip(*records)
    if any(headers):
        hdr = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], HEADER_TYPE)
    else:  # the common case: n empty lists without building n Python lists
        hdr = pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), pa.array([], HEADER_TYPE.value_type))
    return pa.Table.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            hdr,
        ],
        schema=SCHEMA,
    )


class _PartitionReader:
    """Fetches ``[start, end)`` of one partition from its leader, one fetch in flight ahead of decoding."""

    def __init__(
        self,
        cluster: str,
        topic: str,
        partition: int,
        fetch_max_bytes: int,
        timeout_s: float,
        isolation_level: str = READ_UNCOMMITTED,
    ):
        from rafka.metadata import ClusterMetadata

        self.metadata = ClusterMetadata(cluster)
        self.tp = TopicPartition(topic, partition)
        self.fetch_max_bytes = fetch_max_bytes
        self.timeout_s = timeout_s
        self.committed = isolation_level == READ_COMMITTED

    def _send(self, offset: int):
        deadline = time.monotonic() + self.timeout_s
        while True:
            leader = self.metadata.leader(self.tp)
            if leader is not None:
                handle, _, epoch = leader
                req = FetchRequest(
                    offset,
                    int(self.fetch_max_bytes),
                    current_leader_epoch=epoch,
                    isolation_level=PROTOCOL_READ_COMMITTED if self.committed else PROTOCOL_READ_UNCOMMITTED,
                )
                return handle.fetch.remote(req)
            if time.monotonic() >= deadline:
                raise NotLeaderOrFollowerError(f"{self.tp} has no leader after {self.timeout_s:.0f} s")
            time.sleep(0.1)
            self.metadata.refresh([self.tp.topic], force=True)

    def _reply(self, ref, offset: int) -> tuple[bytes, list] | None:
        """``(records, aborted transactions)`` of a fetch reply, or None when it must be retried (leader moved,
        actor gone)."""
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            resp = ray.get(ref, timeout=self.timeout_s)
        except (RayActorError, GetTimeoutError):
            self.metadata.forget_handle(self.tp)
            return None
        code = resp.get("error_code", 0)
        if refresh_metadata(code) or code == RequestTimedOutError.code:  # leadership moved, timeouts: again
            self.metadata.forget_handle(self.tp)
            return None
        if code:
            raise for_code(code)(f"fetch {self.tp} at offset {offset}: {resp.get('error_message') or ''}".rstrip(": "))
        return resp.get("records") or b"", resp.get("aborted_transactions") or []

    def chunks(self, start: int, end: int) -> Iterator[list]:
        """Decoded records of ``[start, end)``, a fetch reply at a time."""
        from storage.records import decode_records, iter_batch_headers

        pos = start
        deadline = time.monotonic() + self.timeout_s
        ref = self._send(pos) if pos < end else None
        while ref is not None:
            reply = self._reply(ref, pos)
            raw, aborted = reply if reply is not None else (None, [])
            if raw is None or not raw:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"reading {self.tp} stalled at offset {pos} (range ends at {end})")
                time.sleep(0.05 if raw is None else 0.01)
                ref = self._send(pos)
                continue
            deadline = time.monotonic() + self.timeout_s
            last = None
            keep = AbortedTransactionFilter(aborted).keep if self.committed and aborted else None
            kept: list[bytes] = []  # read_committed with aborted transactions in the reply: the batches kept
            for at, h in iter_batch_headers(raw, validate=True):  # the CRC check happens here, once
                last = h
                if keep is not None and keep(h, raw, at):
                    kept.append(raw[at : at + h.size_in_bytes])
            nxt = last.next_offset
            ref = self._send(nxt) if nxt < end else None
            records = decode_records(raw if keep is None else b"".join(kept), validate=False)
            if records and (records[0][0] < pos or records[-1][0] >= end):
                records = [r for r in records if pos <= r[0] < end]
            pos = nxt
            yield records


def read_partition(
    cluster: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    fetch_max_bytes: int = 8 << 20,
    block_bytes: int = 64 << 20,
    timeout_s: float = 60.0,
    row_limit: int | None = None,
    isolation_level: str = READ_UNCOMMITTED,
) -> Iterator[pa.Table]:
    """Arrow tables (~``block_bytes`` each) holding the records of ``[start, end)`` of one partition; for
    ``read_committed``, without the records of aborted transactions (the leader's aborted transaction index,
    as a consumer drops them)."""
    reader = _PartitionReader(cluster, topic, partition, fetch_max_bytes, timeout_s, isolation_level)
    pending: list = []
    size = 0
    rows = 0
    for records in reader.chunks(start, end):
        if row_limit is not None and rows + len(records) > row_limit:
            records = records[: row_limit - rows]
        pending.extend(records)
        rows += len(records)
        size += sum(len(r[3] or b"") + len(r[2] or b"") + 24 for r in records)
        if size >= block_bytes:
            yield _to_table(topic, partition, pending)
            pending, size = [], 0
        if row_limit is not None and rows >= row_limit:
            break
    if pending or rows == 0:
        yield _to_table(topic, partition, pending)


# -- the datasource -------------------------------------------------------------------------------------
class TopicDatasource(Datasource):
    """A bounded read of ``topic`` as a Ray Dataset, one read task per partition (see the module doc).

    ``start``: 'earliest' (default), 'latest', an offset, ``{partition: offset}`` or ``{"timestamp": ms}``;
    with ``group``, the group's committed offsets win where there are some. ``end``: 'latest' (the high
    watermark now, default), an offset or ``{partition: offset}``. ``partitions`` restricts the read.
    ``isolation_level``: 'read_uncommitted' (default: every record, aborted transactions' too) or
    'read_committed' (the ranges end at the last stable offset, so no open transaction is read, and aborted
    transactions' records are dropped, as Kafka's read_committed consumers and Spark's
    ``kafka.isolation.level`` do). ``num_cpus`` per read task defaults to 0.5: a read mostly waits on the leader replica actors, and
    Spark executors beside it hold whole CPUs of their own."""

    def __init__(
        self,
        cluster: Any,
        topic: str,
        start: Any = EARLIEST,
        end: Any = LATEST,
        group: str | None = None,
        partitions: Iterable[int] | None = None,
        fetch_max_bytes: int = 8 << 20,
        block_bytes: int = 64 << 20,
        timeout_s: float = 60.0,
        num_cpus: float = 0.5,
        isolation_level: str = READ_UNCOMMITTED,
    ):
        self.cluster = _cluster_name(cluster)
        self.topic = topic
        self.group = group
        self.isolation_level = isolation_level
        self.ranges: dict[int, tuple[int, int]] = plan_ranges(
            self.cluster, topic, start, end, group, partitions, isolation_level
        )
        self.fetch_max_bytes = int(fetch_max_bytes)
        self.block_bytes = int(block_bytes)
        self.timeout_s = float(timeout_s)
        self.num_cpus = float(num_cpus)

    @property
    def num_offsets(self) -> int:
        """Offsets spanned by the ranges (the record count, unless compaction or markers left gaps)."""
        return sum(e - s for s, e in self.ranges.values())

    def end_offsets(self) -> dict[TopicPartition, int]:
        """The offsets to commit once everything read has been processed."""
        return {TopicPartition(self.topic, p): e for p, (s, e) in self.ranges.items()}

    def get_name(self) -> str:
        return f"rafka[{self.topic}]"

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # record sizes are unknown before reading

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        tasks = []
        todo = [(p, s, e) for p, (s, e) in sorted(self.ranges.items()) if e > s]
        if not todo:  # an empty read still has a schema (one task yielding an empty table)
            todo = [(min(self.ranges) if self.ranges else 0, 0, 0)]
        args = (self.cluster, self.topic)
        opts = dict(
            fetch_max_bytes=self.fetch_max_bytes,
            block_bytes=self.block_bytes,
            timeout_s=self.timeout_s,
            row_limit=per_task_row_limit,
            isolation_level=self.isolation_level,
        )
        for p, s, e in todo:
            # num_rows stays unknown: compaction and transaction markers leave offsets without records
            meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(lambda p=p, s=s, e=e: read_partition(*args, p, s, e, **opts), meta, schema=SCHEMA))
        return tasks

    def to_dataset(self) -> ray.data.Dataset:
        """The Dataset: ``override_num_blocks`` = the read tasks, so Ray Data does not split them into many
        tiny blocks (which ``to_spark`` pays for dearly)."""
        n = max(1, sum(1 for s, e in self.ranges.values() if e > s))
        return ray.data.read_datasource(self, override_num_blocks=n, num_cpus=self.num_cpus)


def read_topic(
    cluster: Any,
    topic: str,
    start: Any = EARLIEST,
    end: Any = LATEST,
    group: str | None = None,
    partitions: Iterable[int] | None = None,
    **options: Any,
) -> ray.data.Dataset:
    """``TopicDatasource(...).to_dataset()``; build the source yourself when you need its ``ranges``."""
    return TopicDatasource(cluster, topic, start, end, group, partitions, **options).to_dataset()


# -- the datasink ---------------------------------------------------------------------------------------
def _encode(v: Any, column: str, json_values: bool) -> bytes | None:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if json_values:
        return json.dumps(v, separators=(",", ":"), default=str).encode("utf-8")
    raise TypeError(
        f"column {column!r} holds {type(v).__name__} values: pass json_values=True to send them "
        "as JSON (bytes and str are sent as they are)"
    )


class TopicDatasink(Datasink):
    """Writes a Dataset to ``topic``: ``key_column`` (None: no keys) and ``value_column`` become each
    record's key and value (bytes as is, str UTF-8, anything else JSON with ``json_values=True``);
    optional ``headers_column`` (list of {key, value} / (key, value) pairs or a dict), ``partition_column``,
    ``timestamp_column`` (epoch ms). ``producer_config`` adds Producer settings (acks=all and idempotence
    stay on). The write result is ``{"records": n, "partitions": {p: count}}`` on ``self.result``."""

    def __init__(
        self,
        cluster: Any,
        topic: str,
        key_column: str | None = "key",
        value_column: str = "value",
        headers_column: str | None = None,
        partition_column: str | None = None,
        timestamp_column: str | None = None,
        json_values: bool = False,
        producer_config: dict | None = None,
        timeout_s: float = 120.0,
    ):
        from rafka.admin.admin import Admin

        self.cluster = _cluster_name(cluster)
        if Admin(self.cluster).metadata.topic(topic) is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        self.topic = topic
        self.columns = {
            "key": key_column,
            "value": value_column,
            "headers": headers_column,
            "partition": partition_column,
            "timestamp": timestamp_column,
        }
        self.json_values = json_values
        self.producer_config = {
            "linger_ms": 5,
            "batch_size": 262144,
            **(producer_config or {}),
            "acks": "all",
            "enable_idempotence": True,
        }
        self.timeout_s = timeout_s
        self.result: dict | None = None

    def get_name(self) -> str:
        return f"rafka[{self.topic}]"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        if schema is None:
            return
        missing = [c for c in self.columns.values() if c is not None and c not in schema.names]
        if missing:
            raise ValueError(
                f"writing to {self.topic!r}: the dataset has no column(s) {missing} (columns: {schema.names})"
            )

    def _rows(self, block) -> Iterator[tuple]:
        table = BlockAccessor.for_block(block).to_arrow()
        cols = {name: (table.column(c).to_pylist() if c is not None else None) for name, c in self.columns.items()}
        n = table.num_rows
        for i in range(n):
            yield tuple(None if v is None else v[i] for v in cols.values())

    def write(self, blocks: Iterable, ctx: Any) -> dict:
        from rafka.producer.producer import Producer

        c, jv = self.columns, self.json_values
        errors: list[BaseException] = []
        counts: dict[int, int] = {}

        def done(md, exc) -> None:
            if exc is not None:
                errors.append(exc)
            else:
                counts[md.partition] = counts.get(md.partition, 0) + 1

        producer = Producer(self.cluster, **self.producer_config)
        try:
            for block in blocks:
                for key, value, headers, partition, ts in self._rows(block):
                    if errors:
                        raise errors[0]
                    if isinstance(headers, dict):
                        headers = list(headers.items())
                    elif headers:
                        headers = [(h["key"], h["value"]) if isinstance(h, dict) else tuple(h) for h in headers]
                    producer.send(
                        self.topic,
                        _encode(value, c["value"], jv),
                        key=_encode(key, c["key"], jv) if key is not None else None,
                        headers=headers or None,
                        partition=partition,
                        timestamp_ms=ts,
                        callback=done,
                    )
            producer.flush(timeout=self.timeout_s)
        finally:
            producer.close(timeout=self.timeout_s)
        if errors:
            err = errors[0]
            raise err if isinstance(err, KafkaError) else KafkaError(f"writing to {self.topic!r} failed: {err}")
        return {"records": sum(counts.values()), "partitions": counts}

    def on_write_complete(self, write_result) -> None:
        total: dict[int, int] = {}
        for r in write_result.write_returns:
            for p, n in r["partitions"].items():
                total[p] = total.get(p, 0) + n
        self.result = {"records": sum(total.values()), "partitions": dict(sorted(total.items()))}


def write_topic(
    ds: ray.data.Dataset,
    cluster: Any,
    topic: str,
    key_column: str | None = "key",
    value_column: str = "value",
    **options: Any,
) -> dict:
    """Write ``ds`` to ``topic`` (see ``TopicDatasink``); returns ``{"records", "partitions"}``."""
    sink = TopicDatasink(cluster, topic, key_column, value_column, **options)
    ds.write_datasink(sink)
    return sink.result or {"records": 0, "partitions": {}}
