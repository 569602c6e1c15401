"""Compression codecs of RecordBatch v2 (1 gzip, 2 snappy in xerial framing, 3 lz4 frames, 4 zstd), written as
Kafka's Java client writes them and read in every framing other clients use. Called by storage/records.py and the
leader's recompression (storage/log_validator.py, at the topic's KIP-390 level); every decoder caps its output at
``max_size`` and raises ``CorruptMessageError``. Formats: docs/internals.md (storage/).
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame as _lz4f
import zstandard as _zstd

from protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {v: k for k, v in NAMES.items()}
MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
_LZ4_STEP = 4 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compat
XERIAL_BLOCK_LENGTH = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024
SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"

_compress_raw = cramjam.snappy.compress_raw
_decompress_raw = cramjam.snappy.decompress_raw
_pack_block_length = XERIAL_BLOCK_LENGTH.pack
_unpack_block_length = XERIAL_BLOCK_LENGTH.unpack_from
_XERIAL_PREFIX = XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)
_ZSTD_COMPRESSOR = _zstd.ZstdCompressor(level=3)
_ZSTD_BY_LEVEL = {3: _ZSTD_COMPRESSOR}  # one compressor per level asked for (a topic's compression.zstd.level)
_LZ4_DEFAULT_LEVEL = 9  # Kafka's CompressionType.LZ4.defaultLevel()
_ZSTD_DECOMPRESSOR = _zstd.ZstdDecompressor()


def codec_name(compression_type: int) -> str:
    return NAMES.get(compression_type, f"unknown({compression_type})")


def _unsupported(compression_type: int) -> UnsupportedCompressionTypeError:
    return UnsupportedCompressionTypeError(
        f"unknown compression type {compression_type} (known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)"
    )


# --- writers ------------------------------------------------------------------------------------


def gzip_compress(data, level: int = -1) -> bytes:
    """``level``: 1-9, or -1 for deflate's default (6), as Kafka's GzipCompression passes it to the Deflater."""
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 16+15: gzip header and trailer
    return c.compress(data) + c.flush()


def snappy_compress(data) -> bytes:
    mv = memoryview(data)
    out = [_XERIAL_PREFIX]
    for i in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(_compress_raw(mv[i : i + XERIAL_BLOCK_SIZE]))
        out.append(_pack_block_length(len(block)))
        out.append(block)
    return b"".join(out)


def lz4_compress(data, level: int = _LZ4_DEFAULT_LEVEL) -> bytes:
    """``level`` 1-17: Kafka's Lz4BlockOutputStream uses lz4's fast compressor at the default level (9) and its
    high-compression one at ``level`` otherwise. lz4 frames take HC levels 3-16 (below 3 they are the fast
    compressor, liblz4 caps at 12), so 1-2 are written at HC 3 and 17 at 16."""
    hc = (
        0
        if level == _LZ4_DEFAULT_LEVEL
        else max(_lz4f.COMPRESSIONLEVEL_MINHC, min(int(level), _lz4f.COMPRESSIONLEVEL_MAX))
    )
    return _lz4f.compress(
        data,
        compression_level=hc,
        block_size=_lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def zstd_compress(data, level: int = 3) -> bytes:
    """``level``: -131072 to 22 (zstd's ZSTD_minCLevel..ZSTD_MAX_CLEVEL; 3 is its default)."""
    c = _ZSTD_BY_LEVEL.get(level)
    if c is None:
        c = _ZSTD_BY_LEVEL.setdefault(level, _zstd.ZstdCompressor(level=level))
    return c.compress(data)


_COMPRESSORS = {GZIP: gzip_compress, SNAPPY: snappy_compress, LZ4: lz4_compress, ZSTD: zstd_compress}
_LEVELLED = {GZIP: gzip_compress, LZ4: lz4_compress, ZSTD: zstd_compress}  # the codecs with levels (KIP-390)


def compress(compression_type: int, data, level: int | None = None) -> bytes:
    """``data`` compressed with codec ``compression_type`` (0 returns the bytes unchanged); ``level``: the codec's
    compression level (KIP-390; None: the codec's default, snappy has none)."""
    if compression_type == NONE:
        return bytes(data)
    fn = _COMPRESSORS.get(compression_type)
    if fn is None:
        raise _unsupported(compression_type)
    levelled = _LEVELLED.get(compression_type)
    if level is None or levelled is None:
        return fn(data)
    return levelled(data, level)


# --- readers ------------------------------------------------------------------------------------


def _too_big(name: str, max_size: int) -> CorruptMessageError:
    return CorruptMessageError(f"{name} records block decompresses to more than {max_size} bytes")


def gzip_decompress(data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    out = []
    total = 0
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(47)  # 32+15: gzip or zlib header, auto-detected
        chunk = d.decompress(rest, max_size - total + 1)
        total += len(chunk)
        out.append(chunk)
        if total > max_size:
            raise _too_big("gzip", max_size)
        if not d.eof:
            raise CorruptMessageError("gzip records block is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _snappy_raw(block, max_size: int) -> bytes:
    size = _raw_snappy_length(block)
    if size > max_size:
        raise CorruptMessageError(f"snappy block claims {size} bytes, more than {max_size}")
    return bytes(_decompress_raw(block))


def _raw_snappy_length(block) -> int:
    """The uncompressed length in a raw snappy block's varint preamble."""
    result = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
    raise CorruptMessageError("snappy block has a malformed length preamble")


def snappy_decompress(data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    mv = memoryview(data)
    if mv[:8] == XERIAL_MAGIC and len(mv) >= XERIAL_HEADER.size:
        blocks: list[bytes] = []
        total = 0
        pos, n = XERIAL_HEADER.size, len(mv)
        while pos < n:
            if pos + 4 > n:
                raise CorruptMessageError("xerial snappy stream has a torn block length")
            (size,) = _unpack_block_length(mv, pos)
            pos += 4
            if size < 0 or pos + size > n:
                raise CorruptMessageError(f"xerial snappy block length {size} exceeds the stream")
            block = _snappy_raw(mv[pos : pos + size], max_size - total)
            total += len(block)
            blocks.append(block)
            pos += size
        return b"".join(blocks)
    if mv[:10] == SNAPPY_FRAMED_MAGIC:
        d = cramjam.snappy.Decompressor()
        d.decompress(mv)
        out = bytes(d.flush())
        if len(out) > max_size:
            raise _too_big("snappy", max_size)
        return out
    return _snappy_raw(mv, max_size)


def lz4_decompress(data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    # Output is asked for in steps of at most _LZ4_STEP: python-lz4 allocates max_length up front (the cost
    # of one large buffer per call: docs/internals.md, storage/codecs.py).
    out = []
    total = 0
    rest = bytes(data)
    while rest:
        d = _lz4f.LZ4FrameDecompressor()
        chunk = d.decompress(rest, max_length=min(max_size - total + 1, _LZ4_STEP))
        while True:
            total += len(chunk)
            out.append(chunk)
            if total > max_size:
                raise _too_big("lz4", max_size)
            if d.eof:
                break
            if d.needs_input:
                raise CorruptMessageError("lz4 records block is truncated")
            chunk = d.decompress(b"", max_length=min(max_size - total + 1, _LZ4_STEP))
        rest = d.unused_data
    return b"".join(out)


def zstd_decompress(data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    # Fed in small slices so the output cap holds (zstd's decompressobj has no output limit of its own),
    # frame after frame, and a frame left unfinished is an error (zstandard's readers end silently).
    mv = memoryview(data)
    out = []
    total = pos = 0
    n = len(mv)
    dobj = _ZSTD_DECOMPRESSOR.decompressobj()
    fed = False
    while pos < n:
        chunk = mv[pos : pos + 1024]
        pos += len(chunk)
        fed = True
        piece = dobj.decompress(chunk)
        total += len(piece)
        if total > max_size:
            raise _too_big("zstd", max_size)
        out.append(piece)
        if dobj.eof:
            pos -= len(dobj.unused_data)
            dobj = _ZSTD_DECOMPRESSOR.decompressobj()
            fed = False
    if fed:
        raise CorruptMessageError("zstd records block is truncated")
    return b"".join(out)


_DECOMPRESSORS = {GZIP: gzip_decompress, SNAPPY: snappy_decompress, LZ4: lz4_decompress, ZSTD: zstd_decompress}


def decompress(compression_type: int, data, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Inverse of ``compress``. Raises ``CorruptMessageError`` for any malformed or oversized input and
    ``UnsupportedCompressionTypeError`` for an unknown codec id."""
    if compression_type == NONE:
        return bytes(data)
    fn = _DECOMPRESSORS.get(compression_type)
    if fn is None:
        raise _unsupported(compression_type)
    if not len(data):
        raise CorruptMessageError(f"{codec_name(compression_type)} records block is empty")
    try:
        return fn(data, max_size)
    except CorruptMessageError:
        raise
    except Exception as e:  # zlib.error, lz4/zstd/cramjam errors, EOFError, ValueError, ...
        raise CorruptMessageError(
            f"{codec_name(compression_type)} records block cannot be decompressed: {type(e).__name__}: {e}"
        ) from None
