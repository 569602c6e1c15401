"""Type stub of the C extension storage._crecords (storage/_crecords*.c: the hot record loops and the LogValidator's walk).

Built by ``pip install -e .``; storage/records.py and storage/log_validator.py fall back to their pure-Python
twins when it is missing. Argument and result meanings: the C docstrings and those twins.
"""

from typing import Any

from typing_extensions import Buffer

def set_record_type(cls: type, /) -> None:
    """The Record NamedTuple ``decode_into`` builds (storage.records.Record)."""

def decode_into(
    data: Buffer,
    start: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_timestamp: int | None,
    out: list[Any],
    /,
) -> bool:
    """Append the Records of the uncompressed region ``data[start:end]`` to ``out``; False (nothing
    appended) when a timestamp or offset exceeds 64 bits; ValueError for a malformed record."""

def encode_many(
    items: list[tuple[int, bytes | None, bytes | None, Any]],
    start: int,
    base_ts: int | None,
    last_delta: int,
    size: int,
    batch_size: int,
    count: int,
    headroom: int = 0,
    /,
) -> tuple[bytes | bytearray, int, int | None, int, int]:
    """``(blob, next, base_ts, size, max_ts)``: encode ``(timestamp, key, value, headers)`` items from
    ``start`` while they fit the batch and take the fast path. With ``headroom`` the blob is a bytearray whose
    first ``headroom`` bytes (zeros) precede the records."""

def validate_records(
    data: Buffer,
    start: int,
    end: int,
    count: int,
    base_timestamp: int,
    log_append_time: bool,
    compacted: bool,
    ts_low: int,
    ts_high: int,
    /,
) -> tuple[int, int, Any]:
    """``(status, index, detail)``: ``(0, count, max_timestamp)`` or the first failure ``(1, i, message)``,
    ``(2, i, None)`` null key on a compacted topic, ``(3, i, timestamp)`` out of ``[ts_low, ts_high]``."""

def append_one(builder: Any, timestamp_ms: int, key: bytes | None, value: bytes | None, /) -> bool | None:
    """RecordBatchBuilder.append's fast path for a record without headers: True appended, False the batch is
    full, None not taken (the caller appends through Python)."""

def batch_append(batch: Any, timestamp_ms: int, key: bytes | None, value: bytes | None, /) -> int | bool | None:
    """Unless ``batch.closed``, ``append_one`` to ``batch.builder`` in one step under the GIL: the record's
    index in the batch, False (closed or full) or None (not taken)."""

def place_plain(
    records: list[Any] | tuple[Any, ...],
    start: int,
    override: Any,
    lists: list[Any],
    valid: Any,
    num_partitions: int,
    limit: int,
    default_ts: int,
    sticky: int,
    sticky_bytes: int,
    batch_size: int,
    default_partitioner: bool,
    where: Any,
    /,
) -> tuple[int, int]:
    """``Producer.send_batch``'s placement of plain records from ``start`` (storage/_crecords_place.c): each taken
    record's ``(timestamp, key, value, ())`` goes to ``lists[partition]`` and its partition to ``where``;
    ``(next, sticky_bytes)``, ``next`` the first record left to the Python loop."""

def murmur2(data: bytes, /) -> int:
    """Kafka's ``Utils.murmur2`` (the Java client's, signed 32-bit)."""
