"""Storage engine benchmark: append, read, decode, recovery, compaction and validation figures as JSON.

    python benchmarks/storage_bench.py --json            # 1M records of 100 bytes, 1 GB recovery log
    python benchmarks/storage_bench.py --records 200000 --recovery-mb 256
    python benchmarks/storage_bench.py --only validate --json   # the LogValidator's cost alone

``validate``: leader appends (``Log.append_as_leader``) of the same batches with the full LogValidator
(storage/log_validator.py: decompression and a walk over every record) and with the frame-only checks the
leader did before it (length, magic, CRC, max.message.bytes, count == last offset delta + 1), runs
interleaved, best of ``--validate-rounds``; uncompressed, lz4 and zstd batches of 16 KiB and 1 MiB.

Everything runs in this process on real files (a temporary directory unless ``--dir``). No Ray.
Figures vary with machine load: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from protocol.errors import InvalidRecordError, MessageTooLargeError  # noqa: E402
from storage import log_validator  # noqa: E402
from storage.log import Log, LogConfig  # noqa: E402
from storage.records import LOG_OVERHEAD, LZ4, NONE, ZSTD, RecordBatchBuilder, decode_records, validate_batch  # noqa: E402


def build_batches(
    n_records: int,
    record_size: int,
    batch_bytes: int,
    keys: int | None = None,
    producer_id: int = -1,
    codec: int = NONE,
) -> list[bytes]:
    """Pre-built RecordBatch v2 bytes holding ``n_records`` records of ``record_size`` value bytes."""
    rnd = random.Random(7)
    value = bytes(rnd.getrandbits(8) for _ in range(record_size))
    batches: list[bytes] = []
    ts = 1_700_000_000_000
    i = 0
    seq = 0
    while i < n_records:
        b = RecordBatchBuilder(
            batch_size=batch_bytes,
            producer_id=producer_id,
            compression_type=codec,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=seq if producer_id >= 0 else -1,
        )
        while i < n_records:
            key = (b"user-%d" % (i % keys)) if keys else None
            if not b.append(ts + i, key, value):
                break
            i += 1
        seq += b.record_count
        batches.append(b.build())
    return batches


def build_many(n_records: int, record_size: int, batch_bytes: int) -> int:
    """Batches built through ``RecordBatchBuilder.append_many`` (the producer's ``send_batch`` path: one C
    call, ``storage._crecords.encode_many``, per run of records); returns the batch count."""
    value = bytes(random.Random(7).getrandbits(8) for _ in range(record_size))
    items = [(1_700_000_000_000 + i, b"user-%d" % (i % 1000), value, ()) for i in range(n_records)]
    i = batches = 0
    while i < n_records:
        b = RecordBatchBuilder(batch_size=batch_bytes)
        i = b.append_many(items, i)
        b.build()
        batches += 1
    return batches


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_append(root: str, batches: list[bytes], fsync_each: bool, label: str) -> dict:
    d = os.path.join(root, f"append-{label}")
    props = {"segment.bytes": 256 * 1024 * 1024}
    if fsync_each:
        props["flush.messages"] = 1
    log = Log(d, LogConfig.from_props(props), now_ms=int(time.time() * 1000))
    total = sum(len(b) for b in batches)
    records = 0

    def run():
        nonlocal records
        now = int(time.time() * 1000)
        for b in batches:
            info = log.append_as_leader(b, leader_epoch=0, now_ms=now)
            records += info.record_count

    secs, _ = timed(run)
    log.close()
    return {
        "batches": len(batches),
        "batch_bytes": total // len(batches),
        "records": records,
        "seconds": round(secs, 3),
        "MB_per_s": round(total / secs / 1e6, 1),
        "records_per_s": round(records / secs),
        "fsync_per_batch": fsync_each,
        "dir": d,
    }


def bench_read(d: str, max_bytes: int) -> dict:
    log = Log(d, LogConfig(), now_ms=int(time.time() * 1000))
    leo = log.log_end_offset
    chunks: list[bytes] = []

    def run():
        off = log.log_start_offset
        n = 0
        while off < leo:
            data = log.read(off, max_bytes)
            n += len(data.records)
            chunks.append(data.records)
            off = data.next_offset
        return n

    secs, nbytes = timed(run)
    dsecs, nrec = timed(lambda: sum(len(decode_records(c)) for c in chunks))
    log.close()
    return {
        "read_MB_per_s": round(nbytes / secs / 1e6, 1),
        "read_seconds": round(secs, 3),
        "read_max_bytes": max_bytes,
        "decode_records_per_s": round(nrec / dsecs),
        "decoded_records": nrec,
    }


def bench_recovery(root: str, target_bytes: int) -> dict:
    d = os.path.join(root, "recovery")
    log = Log(d, LogConfig.from_props({"segment.bytes": 256 * 1024 * 1024}), now_ms=int(time.time() * 1000))
    batch = build_batches(9000, 100, 1024 * 1024)[0]
    now = int(time.time() * 1000)
    written = 0
    while written < target_bytes:
        log.append_as_leader(batch, leader_epoch=0, now_ms=now)
        written += len(batch)
    leo = log.log_end_offset
    log.flush()
    # An unclean shutdown: the recovery point stays at the start, so open must scan every byte.
    log_files = [f for f in os.listdir(d)]
    del log  # no close(): checkpoints are not rewritten
    for f in log_files:
        if f.endswith(".index") or f.endswith(".timeindex") or f == "recovery-point-checkpoint":
            os.remove(os.path.join(d, f))
    secs, log2 = timed(lambda: Log(d, LogConfig(), now_ms=int(time.time() * 1000)))
    ok = log2.log_end_offset == leo
    log2.close()
    return {
        "recovery_bytes": written,
        "recovery_seconds": round(secs, 3),
        "recovery_MB_per_s": round(written / secs / 1e6, 1),
        "recovered_leo_matches": ok,
    }


def bench_compaction(root: str, n_records: int, keys: int) -> dict:
    d = os.path.join(root, "compact")
    log = Log(
        d,
        LogConfig.from_props(
            {"cleanup.policy": "compact", "segment.bytes": 8 * 1024 * 1024, "min.compaction.lag.ms": 0}
        ),
        now_ms=int(time.time() * 1000),
    )
    now = int(time.time() * 1000)
    for b in build_batches(n_records, 100, 16 * 1024, keys=keys):
        log.append_as_leader(b, leader_epoch=0, now_ms=now)
    log.roll()
    # Compaction never passes the last stable offset, which is at most the high watermark (as in Kafka).
    log.update_high_watermark(log.log_end_offset)
    before = log.size_in_bytes
    secs, stats = timed(lambda: log.compact(int(time.time() * 1000)))
    after = log.size_in_bytes
    log.close()
    return {
        "compaction_records": n_records,
        "compaction_keys": keys,
        "compaction_seconds": round(secs, 3),
        "compaction_records_per_s": round(n_records / secs),
        "bytes_before": before,
        "bytes_after": after,
    }


def _frame_only(buf, config, now_ms, origin=log_validator.CLIENT):
    """The leader's checks before the LogValidator: frame, CRC and counts, no record decoded."""
    out, pos, n = [], 0, len(buf)
    while pos < n:
        h = validate_batch(buf, pos)
        size = LOG_OVERHEAD + h[1]
        if size > config.max_message_bytes:
            raise MessageTooLargeError(f"batch of {size} bytes")
        if h[12] != h[6] + 1:
            raise InvalidRecordError("count")
        out.append((pos, size, h))
        pos += size
    return out


def bench_validate(root: str, n_records: int, record_size: int, rounds: int) -> dict:
    """Leader-append throughput with the full LogValidator and with frame-only checks, same batches."""
    full = log_validator.validate_leader_append
    out: dict = {"accelerated": log_validator.ACCELERATED, "rounds": rounds}
    for codec, cname in ((NONE, "none"), (LZ4, "lz4"), (ZSTD, "zstd")):
        for batch_bytes, bname in ((16 * 1024, "16k"), (1024 * 1024, "1m")):
            batches = build_batches(n_records, record_size, batch_bytes, codec=codec)
            wire = sum(len(b) for b in batches)
            best = {"validated": float("inf"), "frame_only": float("inf")}
            for r in range(rounds):
                for mode in ("frame_only", "validated") if r % 2 else ("validated", "frame_only"):
                    log_validator.validate_leader_append = full if mode == "validated" else _frame_only
                    try:
                        d = os.path.join(root, f"validate-{cname}-{bname}-{mode}-{r}")
                        log = Log(d, LogConfig.from_props({"segment.bytes": 1 << 30}), now_ms=int(time.time() * 1000))
                        now = int(time.time() * 1000)
                        t0 = time.perf_counter()
                        for b in batches:
                            log.append_as_leader(b, leader_epoch=0, now_ms=now)
                        best[mode] = min(best[mode], time.perf_counter() - t0)
                        log.close()
                        shutil.rmtree(d, ignore_errors=True)
                    finally:
                        log_validator.validate_leader_append = full
            now = int(time.time() * 1000)
            cfg = LogConfig()
            t0 = time.perf_counter()
            for b in batches:
                full(bytearray(b), cfg, now)
            alone = time.perf_counter() - t0
            t0 = time.perf_counter()
            for b in batches:
                decode_records(b)
            decode = time.perf_counter() - t0
            v, f = best["validated"], best["frame_only"]
            out[f"{cname}_{bname}"] = {
                "batches": len(batches),
                "records": n_records,
                "wire_MB": round(wire / 1e6, 1),
                "records_per_s_validated": round(n_records / v),
                "records_per_s_frame_only": round(n_records / f),
                "append_cost_pct": round((v - f) / f * 100, 1),
                "validator_alone_records_per_s": round(n_records / alone),
                "validator_alone_us_per_batch": round(alone / len(batches) * 1e6, 1),
                "decode_records_per_s": round(n_records / decode),
            }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument(
        "--fsync-batches",
        type=int,
        default=500,
        help="batches appended with an fsync each (fsync costs ms: a subset is enough)",
    )
    ap.add_argument("--recovery-mb", type=int, default=1024)
    ap.add_argument("--compaction-keys", type=int, default=10_000)
    ap.add_argument("--validate-records", type=int, default=300_000, help="records per validate figure")
    ap.add_argument("--validate-rounds", type=int, default=5)
    ap.add_argument("--only", choices=["validate"], default=None, help="run one section only")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir, removed after)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    root = args.dir or tempfile.mkdtemp(prefix="rafka-bench-")
    out: dict = {"records": args.records, "record_size": args.record_size}
    try:
        if args.only == "validate":
            out["validate"] = bench_validate(root, args.validate_records, args.record_size, args.validate_rounds)
            print(json.dumps(out) if args.json else json.dumps(out, indent=2))
            return 0
        b16 = build_batches(args.records, args.record_size, 16 * 1024)
        b1m = build_batches(args.records, args.record_size, 1024 * 1024)
        tb, _ = timed(lambda: build_batches(200_000, args.record_size, 16 * 1024))
        out["build_records_per_s"] = round(200_000 / tb)
        tm, _ = timed(lambda: build_many(200_000, args.record_size, 16 * 1024))
        out["build_many_records_per_s"] = round(200_000 / tm)
        a16 = bench_append(root, b16, False, "16k")
        a1m = bench_append(root, b1m, False, "1m")
        f16 = bench_append(root, b16[: args.fsync_batches], True, "16k-fsync")
        f1m = bench_append(root, b1m[: max(1, args.fsync_batches // 20)], True, "1m-fsync")
        out["append_16k"] = {k: v for k, v in a16.items() if k != "dir"}
        out["append_1m"] = {k: v for k, v in a1m.items() if k != "dir"}
        out["append_16k_fsync"] = {k: v for k, v in f16.items() if k != "dir"}
        out["append_1m_fsync"] = {k: v for k, v in f1m.items() if k != "dir"}
        out["read"] = bench_read(a1m["dir"], 1024 * 1024)
        out["recovery"] = bench_recovery(root, args.recovery_mb * 1024 * 1024)
        out["compaction"] = bench_compaction(root, args.records, args.compaction_keys)
        out["validate"] = bench_validate(root, args.validate_records, args.record_size, args.validate_rounds)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
