"""Crash recovery: a log copied while open (what the OS holds at a process crash), then damaged -- cut at
random byte positions, random bytes flipped, index and checkpoint files deleted or corrupted -- must
reopen without raising, hold exactly the valid prefix of its batches (every flushed batch included), with
indexes consistent with a full scan, and keep working."""

from __future__ import annotations

import os
import random
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.log import EPOCH_FILE, RECOVERY_POINT_FILE, Log, LogConfig
from storage.records import RecordBatchBuilder, decode_records, iter_batch_headers
from storage.segment import log_file_name

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CFG = LogConfig(internal_segment_bytes=1800, index_interval_bytes=300)


def batch(i: int, producer: bool = False) -> bytes:
    kw = dict(producer_id=7, producer_epoch=0, base_sequence=2 * i) if producer else {}
    b = RecordBatchBuilder(**kw)
    for j in range(2):
        b.append(1000 + 10 * i + j, b"k%d" % (i % 5), b"value-%d-%d" % (i, j) * (1 + i % 4))
    return b.build()


def segment_files(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".log"))


def stored_batches(d):
    """Every batch in the directory's segment files, in order: (file name, position, bytes)."""
    out = []
    for name in segment_files(d):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        for pos, h in iter_batch_headers(data):
            out.append((name, pos, data[pos : pos + h.size_in_bytes]))
    return out


def build(d, n=60, producer=False, flush_after=None):
    lg = Log(d, CFG, now_ms=0)
    for i in range(n):
        lg.append_as_leader(batch(i, producer), i // 10, now_ms=0)
        if flush_after is not None and i + 1 == flush_after:
            lg.flush()
    return lg


def crash_copy(src, dst):
    """The directory as the OS holds it now, as a process crash would leave it."""
    shutil.copytree(src, dst)
    return dst


def epoch_of(b: bytes) -> int:
    return struct.unpack_from(">i", b, 12)[0]


def expected_after(batches: list[bytes], damaged: int | None, damaged_batch: bytes | None) -> list[bytes]:
    """The valid prefix: stop at the damaged batch unless only its (CRC-free) leader epoch changed, and at
    the first batch whose epoch is below an earlier one."""
    out, running = [], -1
    for j, b in enumerate(batches):
        if j == damaged:
            if damaged_batch is None:
                break
            b = damaged_batch
        if running >= 0 and epoch_of(b) < running:
            break
        out.append(b)
        running = max(running, epoch_of(b))
    return out


def check_consistent(lg: Log, expected: list[bytes]):
    """The reopened log holds exactly ``expected``; its indexes agree with a full scan; it keeps working."""
    got = [b for _, _, b in stored_batches(lg.dir)]
    assert got == expected
    leo = lg.log_end_offset
    if expected:
        last = list(iter_batch_headers(expected[-1]))[0][1]
        assert leo == last.next_offset
    assert lg.epoch_cache.entries() == [] or lg.epoch_cache.entries()[-1][1] < max(leo, 1)
    for seg in lg.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        scan = list(iter_batch_headers(data))
        by_pos = {p: h for p, h in scan}
        for p, h in scan:  # first: a corrupt entry that passed the sanity check is caught when used
            for o in (h.base_offset, h.last_offset):
                assert seg.translate_offset(o) == (p, h)
        oi, ti = seg.offset_index, seg.time_index
        for i in range(oi.entries):
            off, pos = oi.entry(i)
            assert pos in by_pos and by_pos[pos].last_offset == off
        running, max_by_offset = -1, {}
        for _p, h in scan:
            running = max(running, h.max_timestamp)
            max_by_offset[h.last_offset] = running
        for i in range(ti.entries):
            ts, off = ti.entry(i)
            assert max_by_offset[off] == ts
        assert seg.next_offset == (scan[-1][1].next_offset if scan else seg.base_offset)
    lg.update_high_watermark(leo)
    records = []
    off = lg.log_start_offset
    while off < leo:
        r = lg.read(off, 3000)
        records += decode_records(r.records)
        off = r.next_offset
    assert [r.offset for r in records] == list(range(lg.log_start_offset, leo))
    info = lg.append_as_leader(batch(999), 100, now_ms=0)
    assert info.first_offset == leo
    lg.update_high_watermark(lg.log_end_offset)
    assert decode_records(lg.read(leo, 10**6).records)[0].value == batch_value(999)


def batch_value(i):
    return b"value-%d-%d" % (i, 0) * (1 + i % 4)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """One open log of 60 batches over several segments, never flushed (all of it is recovered)."""
    d = str(tmp_path_factory.mktemp("orig") / "t-0")
    lg = build(d)
    assert len(lg.segments) >= 4
    yield lg
    lg.close()


_counter = iter(range(10**9))


def fresh_copy(lg, tmp_root):
    return crash_copy(lg.dir, os.path.join(tmp_root, f"copy{next(_counter)}"))


def pick(data: st.DataObject, batches):
    total = sum(len(b) for _, _, b in batches)
    return data.draw(st.integers(0, total - 1), label="global position")


def locate(batches, gpos):
    """(batch index, offset inside it) of a global byte position over all segment files."""
    for j, (_, _, b) in enumerate(batches):
        if gpos < len(b):
            return j, gpos
        gpos -= len(b)
    raise AssertionError


@SETTINGS
@given(data=st.data())
def test_cut_log_file_at_random_position(original, tmp_path_factory, data):
    d = fresh_copy(original, str(tmp_path_factory.getbasetemp()))
    batches = stored_batches(d)
    j, inner = locate(batches, pick(data, batches))
    name, pos, _ = batches[j]
    with open(os.path.join(d, name), "r+b") as f:
        f.truncate(pos + inner)
    lg = Log(d, CFG, now_ms=0)
    check_consistent(lg, [b for _, _, b in batches[:j]])
    lg.close()
    shutil.rmtree(d)


@SETTINGS
@given(data=st.data())
def test_flip_random_byte(original, tmp_path_factory, data):
    d = fresh_copy(original, str(tmp_path_factory.getbasetemp()))
    batches = stored_batches(d)
    j, inner = locate(batches, pick(data, batches))
    mask = data.draw(st.integers(1, 255), label="xor mask")
    name, pos, b = batches[j]
    with open(os.path.join(d, name), "r+b") as f:
        f.seek(pos + inner)
        old = f.read(1)[0]
        f.seek(pos + inner)
        f.write(bytes([old ^ mask]))
    damaged = bytearray(b)
    damaged[inner] ^= mask
    still_valid = 12 <= inner < 16  # only the partition leader epoch is outside the CRC and unchecked
    lg = Log(d, CFG, now_ms=0)
    check_consistent(lg, expected_after([x for _, _, x in batches], j, bytes(damaged) if still_valid else None))
    lg.close()
    shutil.rmtree(d)


@SETTINGS
@given(data=st.data())
def test_damage_after_flush_never_loses_flushed_batches(tmp_path_factory, data):
    root = str(tmp_path_factory.mktemp("flushed"))
    flushed = data.draw(st.integers(1, 40), label="batches flushed")
    lg = build(os.path.join(root, "t-0"), n=50, flush_after=flushed)
    rp_batches = stored_batches(lg.dir)[:flushed]
    d = crash_copy(lg.dir, os.path.join(root, "copy"))
    lg.close()
    batches = stored_batches(d)
    first_unflushed = sum(len(b) for _, _, b in batches[:flushed])
    total = sum(len(b) for _, _, b in batches)
    j, inner = locate(batches, data.draw(st.integers(first_unflushed, total - 1), label="position"))
    name, pos, _ = batches[j]
    if data.draw(st.booleans(), label="cut"):
        with open(os.path.join(d, name), "r+b") as f:
            f.truncate(pos + inner)
        expected = [b for _, _, b in batches[:j]]
    else:
        at = pos + (inner + 17 if inner < 17 else inner)  # a CRC-covered byte of the batch
        with open(os.path.join(d, name), "r+b") as f:
            f.seek(at)
            old = f.read(1)
            f.seek(at)
            f.write(b"\xee" if old != b"\xee" else b"\x11")
        expected = [b for _, _, b in batches[:j]]
    lg = Log(d, CFG, now_ms=0)
    got = [b for _, _, b in stored_batches(d)]
    assert got[:flushed] == [b for _, _, b in rp_batches]
    check_consistent(lg, expected)
    lg.close()
    shutil.rmtree(root)


def test_cut_in_middle_segment_drops_later_segments(original, tmp_path):
    d = fresh_copy(original, str(tmp_path))
    files = segment_files(d)
    with open(os.path.join(d, files[1]), "r+b") as f:
        f.truncate(os.path.getsize(f.name) - 5)
    lg = Log(d, CFG, now_ms=0)
    assert segment_files(d) == files[:2]
    batches = stored_batches(original.dir)
    kept = [b for name, _, b in batches if name == files[0]] + [b for name, _, b in batches if name == files[1]][:-1]
    check_consistent(lg, kept)
    assert lg.epoch_cache.entries()[-1][1] < lg.log_end_offset
    lg.close()


def test_garbage_appended_and_empty_files(original, tmp_path):
    d = fresh_copy(original, str(tmp_path))
    batches = [b for _, _, b in stored_batches(d)]
    last = os.path.join(d, segment_files(d)[-1])
    with open(last, "ab") as f:
        f.write(os.urandom(100))
    with open(os.path.join(d, log_file_name(10**6)), "wb"):
        pass  # an empty segment file past a torn one
    lg = Log(d, CFG, now_ms=0)
    check_consistent(lg, batches)
    lg.close()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("drop_index", [False, True])
def test_tail_damaged_after_clean_shutdown(tmp_path, seed, drop_index):
    rng = random.Random(seed)
    d = str(tmp_path / "t-0")
    build(d).close()
    batches = stored_batches(d)
    active = segment_files(d)[-1]
    mine = [(pos, b) for name, pos, b in batches if name == active]
    cut = rng.randrange(1, sum(len(b) for _, b in mine))
    with open(os.path.join(d, active), "r+b") as f:
        f.truncate(cut)
    if drop_index:
        os.remove(os.path.join(d, active.replace(".log", ".index")))
    lg = Log(d, CFG, now_ms=0)
    keep = [b for name, pos, b in batches if name != active or pos + len(b) <= cut]
    check_consistent(lg, keep)
    lg.close()


# ---------------------------------------------------------------------------------------------- indexes


@pytest.mark.parametrize("how", ["delete", "odd-size", "garbage", "flip", "empty", "stale-entries"])
@pytest.mark.parametrize("clean", [True, False])
def test_damaged_indexes_are_rebuilt(tmp_path, how, clean):
    rng = random.Random(hash((how, clean)) & 0xFFFF)
    d = str(tmp_path / "t-0")
    lg = build(d)
    expected = [b for _, _, b in stored_batches(d)]
    if clean:
        lg.close()
    else:
        d = crash_copy(d, str(tmp_path / "copy"))
        lg.close()
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if not name.endswith((".index", ".timeindex")):
            continue
        size = os.path.getsize(path)
        if how == "delete":
            os.remove(path)
        elif how == "odd-size":
            with open(path, "ab") as f:
                f.write(b"\x01\x02\x03")
        elif how == "garbage":
            with open(path, "wb") as f:
                f.write(bytes(rng.getrandbits(8) for _ in range(96)))
        elif how == "flip" and size and name.endswith(".index"):
            with open(path, "r+b") as f:
                p = rng.randrange(size)
                f.seek(p)
                v = f.read(1)[0]
                f.seek(p)
                f.write(bytes([v ^ (1 << rng.randrange(8))]))
        elif how == "empty":
            open(path, "wb").close()
        elif how == "stale-entries" and name.endswith(".index"):
            with open(path, "ab") as f:
                f.write(struct.pack(">ii", 10**6, 10**6))
    lg = Log(d, CFG, now_ms=0)
    check_consistent(lg, expected)
    for seg in lg.segments[:-1]:
        assert seg.max_timestamp_so_far == max(h.max_timestamp for _, h in seg.iter_headers())
    lg.close()


# ---------------------------------------------------------------------------------------------- checkpoints, state


def test_corrupt_or_missing_checkpoints(tmp_path):
    d = str(tmp_path / "t-0")
    lg = build(d)
    lg.update_high_watermark(100)
    lg.flush()
    entries = lg.epoch_cache.entries()
    expected = [b for _, _, b in stored_batches(d)]
    lg.close()
    for name in (RECOVERY_POINT_FILE, "high-watermark-checkpoint", "log-start-offset-checkpoint"):
        with open(os.path.join(d, name), "w") as f:
            f.write("garbage\n")
    with open(os.path.join(d, EPOCH_FILE), "w") as f:
        f.write("0\n5\n1 2\n")
    os.remove(os.path.join(d, ".kafka_cleanshutdown"))
    lg = Log(d, CFG, now_ms=0)
    assert lg.epoch_cache.entries() == entries  # rebuilt from the batches' leader epochs
    assert lg.high_watermark == 0 and lg.log_start_offset == 0
    check_consistent(lg, expected)
    lg.close()
    os.remove(os.path.join(d, EPOCH_FILE))
    lg = Log(d, CFG, now_ms=0)
    assert lg.epoch_cache.entries() == entries + [(100, 120)]
    lg.close()


def test_producer_state_survives_crash(tmp_path):
    d = str(tmp_path / "t-0")
    lg = build(d, n=30, producer=True)
    d2 = crash_copy(d, str(tmp_path / "copy"))
    lg.close()
    lg = Log(d2, CFG, now_ms=0)
    assert lg.producer_state.last_entry(7).last_seq == 59
    dup = lg.append_as_leader(batch(29, producer=True), 3, now_ms=0)
    assert dup.duplicate and dup.first_offset == 58
    lg.close()


def test_interrupted_swap_is_completed(tmp_path):
    d = str(tmp_path / "t-0")
    lg = build(d)
    expected = [b for _, _, b in stored_batches(d)]
    lg.close()
    files = segment_files(d)
    merged = b"".join(open(os.path.join(d, f), "rb").read() for f in files[:2])
    with open(os.path.join(d, files[0] + ".swap"), "wb") as f:
        f.write(merged)  # a cleaned segment replacing the first two, renamed .swap, then a crash
    with open(os.path.join(d, files[2] + ".cleaned"), "wb") as f:
        f.write(b"half-written")
    os.rename(
        os.path.join(d, files[0].replace(".log", ".index")), os.path.join(d, files[0].replace(".log", ".index.swap"))
    )
    lg = Log(d, CFG, now_ms=0)
    assert segment_files(d) == [files[0]] + files[2:]
    assert not [n for n in os.listdir(d) if n.endswith((".swap", ".cleaned"))]
    check_consistent(lg, expected)
    lg.close()
