"""Kafka's zigzag varints (base-128, little-endian groups of 7 bits; the sign folded into bit 0).

    varint(n)  = uvarint((n << 1) ^ (n >> 63))          # zigzag, then unsigned base-128
    uvarint(z) = 7 bits per byte, low groups first, high bit set on every byte but the last

Writers take a table for the small values (``encode_varint``); the hot decode loops of storage/records.py and
storage/cleaner.py read 1- and 2-byte varints through ``_ZZ1`` / ``_ZZ2`` inline and call ``_slow_varint``
for the rest. Pure, no state: safe from any thread.
"""

from __future__ import annotations

from protocol.errors import InvalidRecordError


def _encode_unsigned(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_VARINT_TABLE_SIZE = 1 << 14  # zigzag values encoded in 1 or 2 bytes
_VARINT = [_encode_unsigned(z) for z in range(_VARINT_TABLE_SIZE)]
_UVARINT = _VARINT[::2]  # _UVARINT[n]: the varint of a non-negative n < 8192


def encode_varint(n: int) -> bytes:
    """Zigzag varint/varlong of a signed 64-bit ``n``."""
    z = (n << 1) ^ (n >> 63)
    if z < _VARINT_TABLE_SIZE:
        return _VARINT[z]
    if z >> 64:
        raise ValueError(f"{n} does not fit in a signed 64-bit varlong")
    return _encode_unsigned(z)


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """``(value, next_pos)`` of the zigzag varint/varlong at ``buf[pos]``; InvalidRecordError if malformed."""
    z = shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise InvalidRecordError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint is longer than 10 bytes")


def _slow_varint(data, p: int) -> tuple[int, int]:
    """``(value, next_pos)`` of a zigzag varint of any length (the decode loop's rare path)."""
    z = s = 0
    while True:
        b = data[p]
        p += 1
        z |= (b & 127) << s
        if b < 128:
            return (z >> 1) ^ -(z & 1), p
        s += 7
        if s > 63:
            raise ValueError("a varint is longer than 10 bytes")


# Zigzag-decoded values of 1-byte varints (_ZZ1[b0]) and of 2-byte varints (_ZZ2[b0][b1], b0 >= 128):
# list indexing is specialised by the interpreter, shifts and xors are not.
_ZZ1 = [(z >> 1) ^ -(z & 1) for z in range(128)]
_ZZ2: list = [None] * 128 + [
    [((b0 & 127 | b1 << 7) >> 1) ^ -((b0 & 127 | b1 << 7) & 1) for b1 in range(128)] for b0 in range(128, 256)
]
