"""Kafka's RecordBatch v2 (magic 2), the on-disk, replication and wire format byte for byte: the records inside
a batch, the builder and the decoders (the fixed header is storage/batch_header.py, re-exported here). Called by
the Log, the producer and the consumer; the hot decode runs in the C extension ``storage._crecords`` when built.
Every malformed input raises ``CorruptMessageError`` or ``InvalidRecordError``. Big-endian; ``varint``/``varlong``
are zigzag base-128::

    RecordBatch => header (storage/batch_header.py, BATCH_OVERHEAD 61 bytes), Records => [Record]
                   (compressed as one block when compression != 0)
    Record  => Length varint, Attributes Int8 (0), TimestampDelta varlong, OffsetDelta varint,
               KeyLength varint (-1: null), Key, ValueLength varint (-1: null), Value,
               HeadersCount varint, [Header => KeyLength varint, Key utf-8, ValueLength varint (-1), Value]
    Control record (isControlBatch): Key => Version Int16 (0), Type Int16 (0 ABORT, 1 COMMIT);
                                     Value => Version Int16 (0), CoordinatorEpoch Int32
"""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple

from crc32c import crc32c as _crc32c

from protocol.errors import InvalidRecordError, InvalidTimestampError, UnsupportedCompressionTypeError
from storage.batch_header import (  # noqa: F401 (re-exported: the header half of this format)
    ATTRIBUTES_POS,
    BASE_OFFSET_POS,
    BASE_TIMESTAMP_POS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_MASK,
    CRC_POS,
    DELETE_HORIZON_MASK,
    GZIP,
    LAST_OFFSET_DELTA_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    LZ4,
    MAGIC,
    MAGIC_POS,
    MAX_BATCH_LENGTH,
    MAX_TIMESTAMP_POS,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    NONE,
    PARTITION_LEADER_EPOCH_POS,
    PRODUCER_ID_POS,
    RECORDS_COUNT_POS,
    RECORDS_POS,
    SNAPPY,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ZSTD,
    BatchHeader,
    _pack_I,
    crc_ok,
    iter_batch_headers,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from storage.codecs import compress, decompress
from storage.varint import _UVARINT, _ZZ1, _ZZ2, _slow_varint, decode_varint, encode_varint  # noqa: F401 (re-exported)

__all__ = [
    "BATCH_HEADER",
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "BatchHeader",
    "Record",
    "parse_header",
    "crc_ok",
    "validate_batch",
    "iter_batch_headers",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "RecordBatchBuilder",
    "RecordBatch",
    "iter_batches",
    "iter_records",
    "decode_records",
    "encode_varint",
    "decode_varint",
    "COMPRESSION_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "DELETE_HORIZON_MASK",
    "BASE_OFFSET_POS",
    "LENGTH_POS",
    "PARTITION_LEADER_EPOCH_POS",
    "MAGIC_POS",
    "CRC_POS",
    "ATTRIBUTES_POS",
    "LAST_OFFSET_DELTA_POS",
    "BASE_TIMESTAMP_POS",
    "MAX_TIMESTAMP_POS",
    "PRODUCER_ID_POS",
    "RECORDS_COUNT_POS",
    "RECORDS_POS",
    "ACCELERATED",
]

# ---------------------------------------------------------------------------------------------
# Records


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple  # of (str, bytes | None)


_new_record = tuple.__new__
_INT64_MAX = 2**63 - 1
_EMPTY = ()


def _as_bytes(data, what: str):
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"record {what} must be bytes, bytearray, memoryview or None, not {type(data).__name__}")


class RecordBatchBuilder:
    """Accumulates records into one RecordBatch v2 (single owner, not thread-safe).

    ``append`` returns False (the record is not added) when the batch already holds a record and this one
    would take the estimated (uncompressed) size past ``batch_size``: the caller starts a new batch, so a
    batch always takes at least one record however large. Timestamps are passed in, never read.
    ``offset`` (absolute, increasing) lets the cleaner rebuild a batch keeping the original offsets;
    ``delete_horizon_ms`` stamps the cleaner's delete horizon (attributes bit 6, in BaseTimestamp).
    """

    __slots__ = (
        "compression_type",
        "timestamp_type",
        "base_offset",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "is_transactional",
        "is_control",
        "partition_leader_epoch",
        "batch_size",
        "delete_horizon_ms",
        "_parts",
        "_size",
        "_count",
        "_base_ts",
        "_max_ts",
        "_last_delta",
        "_head",
    )

    def __init__(
        self,
        compression_type: int = NONE,
        timestamp_type: int = TIMESTAMP_CREATE_TIME,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        batch_size: int = 16384,
        delete_horizon_ms: int | None = None,
    ):
        if compression_type not in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
            raise UnsupportedCompressionTypeError(f"unknown compression type {compression_type}")
        if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
        self.compression_type = compression_type
        self.timestamp_type = timestamp_type
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.batch_size = batch_size
        self.delete_horizon_ms = delete_horizon_ms
        self._parts: list = []
        self._size = BATCH_OVERHEAD
        self._count = 0
        self._base_ts = delete_horizon_ms  # None until the first record unless a horizon is set
        self._max_ts = NO_TIMESTAMP
        self._last_delta = -1
        # the first part is a bytearray with BATCH_OVERHEAD bytes free in front (encode_many's headroom): an
        # uncompressed batch of that one part is sealed in place, its header written there (build)
        self._head = False

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def estimated_size(self) -> int:
        """Bytes of the batch before compression (an upper bound in practice once compressed)."""
        return self._size

    def append(self, timestamp_ms: int, key, value, headers=(), offset: int | None = None) -> bool:
        if not headers and offset is None and _c_append is not None:  # the compiled path (Producer.send)
            done = _c_append(self, timestamp_ms, key, value)
            if done is not None:
                return done
        if type(key) is not bytes and key is not None:
            key = _as_bytes(key, "key")
        if type(value) is not bytes and value is not None:
            value = _as_bytes(value, "value")
        base_ts = self._base_ts
        if base_ts is None:
            if not NO_TIMESTAMP <= timestamp_ms <= _INT64_MAX:
                raise InvalidTimestampError(f"invalid record timestamp {timestamp_ms}: negative or past 64 bits")
            base_ts = self._base_ts = timestamp_ms
        pos = _UVARINT  # encodings of 0..8191 (zigzag of n >= 0 is 2n)
        tsd = timestamp_ms - base_ts
        if 0 <= tsd < 8192:
            ts_b = pos[tsd]
        else:
            if not NO_TIMESTAMP <= timestamp_ms <= _INT64_MAX:
                raise InvalidTimestampError(f"invalid record timestamp {timestamp_ms}: negative or past 64 bits")
            ts_b = encode_varint(tsd)
        if offset is None:
            delta = self._last_delta + 1
        else:
            delta = offset - self.base_offset
            if delta <= self._last_delta or delta > 0x7FFFFFFF:
                raise ValueError(
                    f"record offset {offset} does not follow offset delta {self._last_delta} "
                    f"of base offset {self.base_offset}"
                )
        od_b = pos[delta] if delta < 8192 else encode_varint(delta)
        if key is None:
            rec = [b"\x00", ts_b, od_b, b"\x01"]
        else:
            klen = len(key)
            rec = [b"\x00", ts_b, od_b, pos[klen] if klen < 8192 else encode_varint(klen), key]
        if value is None:
            rec.append(b"\x01")
        else:
            vlen = len(value)
            rec += (pos[vlen] if vlen < 8192 else encode_varint(vlen), value)
        rec.append(_encode_headers(headers) if headers else b"\x00")
        body = b"".join(rec)
        n = len(body)
        len_b = pos[n] if n < 8192 else encode_varint(n)
        size = n + len(len_b)
        if self._size + size > self.batch_size and self._count:
            return False
        self._parts += (len_b, body)
        self._size += size
        self._count += 1
        self._last_delta = delta
        if timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        return True

    def append_many(self, items: list, start: int = 0) -> int:
        """Append ``items[start:]`` (``(timestamp_ms, key, value[, headers])`` tuples) in order while they fit,
        as ``append`` would one by one; returns the index of the first item left out (``len(items)`` when all
        went in). The compiled encoder takes runs of plain records (bytes or None keys and values, str/bytes
        header names); anything else goes through ``append``, which converts or raises."""
        if type(items) is not list:
            items = list(items)
        n, i, enc = len(items), start, _c_encode
        while i < n:
            if enc is not None:
                head = BATCH_OVERHEAD if not self._parts and not self.compression_type else 0
                blob, j, base_ts, size, max_ts = enc(
                    items, i, self._base_ts, self._last_delta, self._size, self.batch_size, self._count, head
                )
                if j > i:
                    self._head = self._head or head > 0
                    self._parts.append(blob)
                    self._size = size
                    self._count += j - i
                    self._last_delta += j - i
                    self._base_ts = base_ts
                    if max_ts > self._max_ts:
                        self._max_ts = max_ts
                    i = j
                    if i >= n:
                        break
            item = items[i]
            if not self.append(item[0], item[1], item[2], item[3] if len(item) > 3 else ()):
                break
            i += 1
        return i

    def build(self) -> bytes | bytearray:
        """The batch's bytes (the builder may keep being appended to and built again). A batch of one part with
        headroom (a run ``append_many`` encoded at once) is sealed in place: its header is written into that
        part's first bytes and the part itself is returned (a bytearray), not copied behind a new header
        (why: docs/internals.md, storage/records.py)."""
        parts = self._parts
        if self._head:
            if len(parts) == 1:
                return self._seal_in_place(parts[0])
            parts = [memoryview(parts[0])[BATCH_OVERHEAD:], *parts[1:]]
        records = b"".join(parts)
        if self.compression_type:
            records = compress(self.compression_type, records)
        header = bytearray(BATCH_OVERHEAD)
        self._pack_header(header, len(records))
        crc = _crc32c(records, _crc32c(memoryview(header)[ATTRIBUTES_POS:]))
        _pack_I(header, CRC_POS, crc)
        return bytes(header) + records

    def _seal_in_place(self, buf: bytearray) -> bytearray:
        self._pack_header(buf, len(buf) - BATCH_OVERHEAD)
        _pack_I(buf, CRC_POS, _crc32c(memoryview(buf)[ATTRIBUTES_POS:]))
        return buf

    def _pack_header(self, buf: bytearray, records_len: int) -> None:
        """The batch header (its CRC still 0) into ``buf[:BATCH_OVERHEAD]``, for ``records_len`` bytes of records."""
        BATCH_HEADER.pack_into(
            buf,
            0,
            self.base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD + records_len,
            self.partition_leader_epoch,
            MAGIC,
            0,
            self._attributes(),
            max(self._last_delta, 0),
            NO_TIMESTAMP if self._base_ts is None else self._base_ts,
            self._max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )

    def _attributes(self) -> int:
        attributes = self.compression_type
        if self.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.is_control:
            attributes |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
        return attributes


def _encode_headers(headers) -> bytes:
    out = [encode_varint(len(headers))]
    for hk, hv in headers:
        if type(hk) is str:
            hk = hk.encode("utf-8")
        elif isinstance(hk, (bytes, bytearray, memoryview)):
            hk = bytes(hk)
        else:
            raise TypeError(f"record header key must be str, not {type(hk).__name__}")
        out.append(encode_varint(len(hk)))
        out.append(hk)
        if hv is None:
            out.append(b"\x01")
        else:
            hv = _as_bytes(hv, "header value")
            out.append(encode_varint(len(hv)))
            out.append(hv)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# Reading


def _load_accelerator() -> tuple:
    """``(decode_into, encode_many, append_one, batch_append)`` of ``storage._crecords`` (the decoder bound to
    ``Record``), or four Nones when it is not built or RAFKA_PURE_PYTHON is set. ``batch_append`` is the
    producer accumulator's lock-free append (rafka/producer/accumulator.py)."""
    if os.environ.get("RAFKA_PURE_PYTHON", "") not in ("", "0"):
        return None, None, None, None
    try:
        from storage import _crecords
    except ImportError:
        return None, None, None, None
    _crecords.set_record_type(Record)
    return _crecords.decode_into, _crecords.encode_many, _crecords.append_one, _crecords.batch_append


# read at each call, so tests can swap paths
_c_decode, _c_encode, _c_append, _c_batch_append = _load_accelerator()
ACCELERATED: bool = _c_decode is not None


def _decode_records(data, p: int, end: int, count: int, base_offset: int, base_ts: int, out: list) -> None:
    """Decode ``count`` records from ``data[p:end]`` (bytes) onto ``out``: the consumer's hot loop (the
    reference and fallback of ``storage._crecords.decode_into``, which runs instead when built).

    Varints of 1 and 2 bytes are decoded inline through tables (a call per varint would double the
    cost); malformed input surfaces as IndexError/ValueError (UnicodeDecodeError is one), which the
    caller turns into InvalidRecordError.
    """
    new = _new_record
    R = Record
    add = out.append
    empty = _EMPTY
    zz1 = _ZZ1
    zz2 = _ZZ2
    slow = _slow_varint
    for _ in range(count):
        z = data[p]  # Length
        if z < 128:
            n = zz1[z]
            p += 1
        else:
            b = data[p + 1]
            if b < 128:
                n = zz2[z][b]
                p += 2
            else:
                n, p = slow(data, p)
        rend = p + n
        if n < 6 or rend > end:  # attributes + five 1-byte varints at least
            raise ValueError(f"record length {n} does not fit the batch")
        z = data[p + 1]  # TimestampDelta, after the (unused) Attributes byte
        if z < 128:
            ts = base_ts + zz1[z]
            p += 2
        else:
            n, p = slow(data, p + 1)
            ts = base_ts + n
        z = data[p]  # OffsetDelta
        if z < 128:
            offset = base_offset + zz1[z]
            p += 1
        else:
            b = data[p + 1]
            if b < 128:
                offset = base_offset + zz2[z][b]
                p += 2
            else:
                n, p = slow(data, p)
                offset = base_offset + n
        z = data[p]  # KeyLength, Key
        if z < 128:
            n = zz1[z]
            p += 1
        else:
            b = data[p + 1]
            if b < 128:
                n = zz2[z][b]
                p += 2
            else:
                n, p = slow(data, p)
        if n < 0:
            if n != -1:
                raise ValueError(f"record at offset {offset} has negative key length {n}")
            key = None
        else:
            key = data[p : p + n]
            p += n
        z = data[p]  # ValueLength, Value
        if z < 128:
            n = zz1[z]
            p += 1
        else:
            b = data[p + 1]
            if b < 128:
                n = zz2[z][b]
                p += 2
            else:
                n, p = slow(data, p)
        if n < 0:
            if n != -1:
                raise ValueError(f"record at offset {offset} has negative value length {n}")
            value = None
        else:
            value = data[p : p + n]
            p += n
            if p > rend:
                raise ValueError(f"record at offset {offset} overruns its declared length")
        if data[p]:  # HeadersCount
            headers, p = _decode_headers(data, p, rend)
        else:
            headers = empty
            p += 1
        if p != rend:
            raise ValueError(f"record at offset {offset} does not fill its declared length")
        add(new(R, (offset, ts, key, value, headers)))
    if p != end:
        raise ValueError(f"{end - p} bytes remain after the batch's {count} records")


def _decode_headers(data, p: int, rend: int) -> tuple[tuple, int]:
    count, p = decode_varint(data, p)
    if count < 0 or count > rend - p:
        raise ValueError(f"impossible record header count {count}")
    headers = []
    for _ in range(count):
        klen, p = decode_varint(data, p)
        if klen < 0 or p + klen > rend:
            raise ValueError(f"impossible record header key length {klen}")
        hkey = data[p : p + klen].decode("utf-8")
        p += klen
        vlen, p = decode_varint(data, p)
        if vlen == -1:
            hval = None
        elif vlen < 0 or p + vlen > rend:
            raise ValueError(f"impossible record header value length {vlen}")
        else:
            hval = data[p : p + vlen]
            p += vlen
        headers.append((hkey, hval))
    return tuple(headers), p


def decode_batch_into(buf, pos: int, h: BatchHeader, out: list, shape: tuple | None = None) -> None:
    """Decode the records of the (already validated) batch at ``pos`` onto ``out``: ``Record``s, or with
    ``shape = (cls, topic, partition, leader_epoch, min_offset)`` the consumer's records
    ``cls(topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch)`` of the
    offsets from ``min_offset`` on, built in one step (rafka/consumer/fetcher.py)."""
    start = pos + RECORDS_POS
    end = pos + h.size_in_bytes
    attributes = h.attributes
    compression = attributes & COMPRESSION_MASK
    if start == end and not h.records_count:  # an emptied batch (the cleaner keeps these): nothing to decompress
        return
    if compression:
        with memoryview(buf) as mv:
            data = decompress(compression, mv[start:end])
        p, stop = 0, len(data)
    elif type(buf) is bytes:
        data, p, stop = buf, start, end
    else:
        with memoryview(buf) as mv:
            data = mv[start:end].tobytes()
        p, stop = 0, end - start
    count = h.records_count
    if count > stop - p:  # every record takes at least 7 bytes: reject absurd counts cheaply
        raise InvalidRecordError(f"record batch at offset {h.base_offset} claims {count} records in {stop - p} bytes")
    c_decode = _c_decode
    if c_decode is not None:
        try:
            if c_decode(
                data,
                p,
                stop,
                count,
                h.base_offset,
                h.base_timestamp,
                h.max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None,
                out,
                shape,
            ):
                return
        except ValueError as e:  # UnicodeDecodeError is a ValueError
            raise InvalidRecordError(f"record batch at offset {h.base_offset} holds a malformed record: {e}") from None
        # False: a timestamp or offset past 64 bits (hostile input); the reference decoder below is exact
    try:
        first = len(out)
        _decode_records(data, p, stop, count, h.base_offset, h.base_timestamp, out)
    except (IndexError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        detail = str(e) if not isinstance(e, IndexError) else "a record runs past the end of the batch"
        raise InvalidRecordError(f"record batch at offset {h.base_offset} holds a malformed record: {detail}") from None
    if attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record carries the batch's MaxTimestamp
        append_ts = h.max_timestamp
        out[first:] = [_new_record(Record, (r[0], append_ts, r[2], r[3], r[4])) for r in out[first:]]
    if shape is not None:
        cls, topic, partition, epoch, min_offset = shape
        tst = 1 if attributes & TIMESTAMP_TYPE_MASK else 0
        out[first:] = [
            _new_record(cls, (topic, partition, r[0], r[1], tst, r[2], r[3], r[4], epoch))
            for r in out[first:]
            if r[0] >= min_offset
        ]


class RecordBatch:
    """One batch over ``buf[pos:]``: ``.header`` at once (frame and CRC checked unless ``validate`` is
    False), the records decoded (and decompressed) only when iterated, one whole batch at a time."""

    __slots__ = ("buf", "pos", "header", "_records")

    def __init__(self, buf, pos: int = 0, validate: bool = True, header: BatchHeader | None = None):
        self.buf = buf
        self.pos = pos
        if header is None:
            header = validate_batch(buf, pos) if validate else parse_header(buf, pos)
        self.header = header
        self._records: list | None = None

    def records(self) -> list[Record]:
        if self._records is None:
            out: list = []
            decode_batch_into(self.buf, self.pos, self.header, out)
            self._records = out
        return self._records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __len__(self) -> int:
        return self.header.records_count

    def raw(self) -> bytes:
        """This batch's bytes."""
        return bytes(self.buf[self.pos : self.pos + self.header.size_in_bytes])

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset={h.last_offset}, "
            f"count={h.records_count}, compression={h.compression_type}, control={h.is_control})"
        )


def iter_batches(buf, validate: bool = True) -> Iterator[RecordBatch]:
    """Each batch of concatenated batches; CorruptMessageError at a torn or corrupt one."""
    for pos, h in iter_batch_headers(buf, validate):
        yield RecordBatch(buf, pos, header=h)


def iter_records(buf, include_control: bool = False, validate: bool = True) -> Iterator[Record]:
    """Records of concatenated batches, a batch decoded at a time. Control batches (transaction markers)
    are skipped unless ``include_control``, as a Kafka consumer does; ``validate=False`` skips the CRC
    (the consumer's ``check.crcs=false``), never the structural checks."""
    for pos, h in iter_batch_headers(buf, validate):
        if h.attributes & CONTROL_MASK and not include_control:
            continue
        out: list = []
        decode_batch_into(buf, pos, h, out)
        yield from out


def decode_records(buf, include_control: bool = False, validate: bool = True) -> list[Record]:
    """Every record of concatenated batches (CRC checked unless ``validate=False``), skipping control
    batches unless ``include_control``: the consumer's fast path."""
    out: list = []
    for pos, h in iter_batch_headers(buf, validate):
        if h.attributes & CONTROL_MASK and not include_control:
            continue
        decode_batch_into(buf, pos, h, out)
    return out
