"""Where the controller keeps the metadata: its write-ahead metadata log and its writes to the cluster's GCS
KV (``ClusterKV``). Called by the controller shell only (one owner: the live controller); uses
storage/checkpoint.py for the snapshot's rename and actors/metadata/kv.py for KV. The metadata log
(``data_dir/controller/metadata.log``), one frame per record::

    frame   := length:u32be crc:u32be payload[length]      crc = CRC32 (zlib) of payload
    payload := msgpack(record dict)
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from typing import BinaryIO

from actors.metadata.image import MetadataImage
from actors.metadata.kv import GcsKV
from protocol import kv as K
from protocol.kv import pack as _pack
from protocol.kv import unpack as _unpack
from storage.checkpoint import write_atomically

log = logging.getLogger("rafka.controller")

FRAME = struct.Struct(">II")


class MetadataLog:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._f: BinaryIO | None = None
        self.records_since_snapshot = 0

    def read_all(self, repair: bool = True) -> list[dict]:
        """Every intact record; truncates the file after the last intact frame (``repair``; a reader that does not
        own the log, a peer's copy being compared, leaves it as it is)."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            data = f.read()
        out, pos = [], 0
        while pos + FRAME.size <= len(data):
            length, crc = FRAME.unpack_from(data, pos)
            end = pos + FRAME.size + length
            if end > len(data):
                break
            payload = data[pos + FRAME.size : end]
            if zlib.crc32(payload) != crc:
                break
            try:
                rec = _unpack(payload)
            except Exception:  # noqa: BLE001 - an undecodable frame ends the valid prefix
                break
            out.append(rec)
            pos = end
        if pos != len(data) and repair:
            with open(self.path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        self.records_since_snapshot = len(out)
        return out

    def _file(self) -> BinaryIO:
        if self._f is None:
            self._f = open(self.path, "ab")
        return self._f

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        buf = bytearray()
        for r in records:
            payload = _pack(r)
            buf += FRAME.pack(len(payload), zlib.crc32(payload))
            buf += payload
        f = self._file()
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
        self.records_since_snapshot += len(records)

    def rewrite(self, records: list[dict]) -> None:
        self.close()
        buf = bytearray()
        for r in records:
            payload = _pack(r)
            buf += FRAME.pack(len(payload), zlib.crc32(payload))
            buf += payload
        write_atomically(self.path, bytes(buf))
        self.records_since_snapshot = len(records)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class ClusterKV(GcsKV):
    """The cluster's metadata keys in GCS KV, as the controller writes them."""

    # ---- controller epoch ----------------------------------------------------------------------
    def latest_controller_epoch(self) -> int:
        epochs = [int(K.key_suffix(k)) for k in self.keys(K.CONTROLLER_EPOCHS)]
        return max(epochs, default=0)

    def claim_controller_epoch(self, info: dict) -> int:
        """Put-if-absent of ``controller_epoch/<N>`` for N = latest + 1, + 2, ... until one is ours."""
        n = self.latest_controller_epoch() + 1
        while not self.put_if_absent(K.controller_epoch_key(n), info):
            n += 1
        return n

    # ---- the image -----------------------------------------------------------------------------
    def has_image(self) -> bool:
        """Whether a controller has written the image here (not so in a new Ray cluster's GCS)."""
        return self.get(K.METADATA_VERSION) is not None

    def load_image(self) -> MetadataImage | None:
        version = self.get(K.METADATA_VERSION)
        if version is None:
            return None
        brokers = [b for b in (self.get(k) for k in self.keys(K.BROKERS)) if b is not None]
        topics = [t for t in (self.get(k) for k in self.keys(K.TOPICS)) if t is not None]
        return MetadataImage.from_kv(brokers, topics, version, self.get(K.PRODUCER_ID_BLOCK) or 0)

    def persist(self, image: MetadataImage, topics: set[str], brokers: set[int], producer_ids: bool) -> None:
        for name in topics:
            t = image.topics.get(name)
            if t is None:
                self.delete(K.topic_key(name))
            else:
                self.put(K.topic_key(name), t.to_dict())
        for b in brokers:
            self.put(K.broker_key(b), image.brokers[b].to_dict())
        if producer_ids:
            self.put(K.PRODUCER_ID_BLOCK, image.next_producer_id)
        self.put(K.METADATA_VERSION, image.version)

    def write_all(self, image: MetadataImage) -> None:
        for k in self.keys(K.TOPICS):
            if K.key_suffix(k) not in image.topics:
                self.delete(k)
        self.persist(image, set(image.topics), set(image.brokers), True)


def load_image(kv: ClusterKV, mlog: MetadataLog) -> tuple[MetadataImage, MetadataImage | None, list[dict]]:
    """A new controller's image: GCS KV when it is at least as new as the local metadata log, else the log
    (a whole-cluster restart: GCS is in memory, the log on disk is the durable copy; KV is rewritten from
    it). Either way the log is rewritten as a snapshot in a new file, so a replaced controller's open
    descriptor can only append to the old one.

    Also returns what the previous controller wrote to the log but not yet to KV: the image at KV's version
    and the records after it. A controller logs a commit's lines after its append and before its KV write,
    so a controller killed in between (its host broker's process died mid-commit: the fencing of that very
    broker) left records no controller.log line describes; the caller logs them. ``(image, None, [])``
    when KV is absent (a whole-cluster restart) or not behind the log."""
    local: MetadataImage | None = None
    records: list[dict] = []
    base: MetadataImage | None = None
    tail: list[dict] = []
    try:
        records = mlog.read_all()
        local = MetadataImage.from_records(records) if records else None
    except Exception as e:  # noqa: BLE001 - an unreadable local log loses to KV
        log.error("metadata log unusable (%s); relying on GCS KV", e)
    kv_img = kv.load_image()
    if kv_img is not None and (local is None or kv_img.version >= local.version):
        image = kv_img
    else:
        image = local or MetadataImage()
        kv.write_all(image)
        if kv_img is not None:
            base, tail = _split_at(records, kv_img.version)
    mlog.rewrite(image.snapshot_records())
    return image, base, tail


def _split_at(records: list[dict], version: int) -> tuple[MetadataImage | None, list[dict]]:
    """The image at metadata ``version`` and the records after it; ``(None, [])`` when the log does not hold
    that version. After the log's last snapshot (its SnapshotVersion record sets the version) each record is
    one version, so the split index follows from the versions alone; the prefix is replayed once."""
    snap = max((i for i, r in enumerate(records) if r["type"] == "SnapshotVersion"), default=-1)
    at = snap + 1 + version - (records[snap]["version"] if snap >= 0 else 0)
    if not snap + 1 <= at <= len(records):
        return None, []
    return MetadataImage.from_records(records[:at]), records[at:]
