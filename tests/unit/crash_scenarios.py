"""The Log operations the crash-point harness (crash_harness.py) kills, and the sweep that kills each at
every crash point. Everything is deterministic: fixed batches, fixed ``now_ms``, sorted directory walks.

Each scenario: ``prepare(tpl)`` builds a template directory once (in the test process); ``setup(dir)`` brings
a copy of it to the operation's start (in the child, not counted); ``op(dir, state)`` is the operation
(counted); ``expect(before, after, final)`` relates what recovery made of a crash to the log before and
after the operation (batches compared byte for byte).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable

from crash_harness import NOW, WRITE_KINDS, View, _check_indexes, copy_dir, read_index_files, scan_dir, verify, view_of

from storage.control import CONTROL_ABORT, build_control_batch
from storage.log import CLEAN_SHUTDOWN_FILE, EPOCH_FILE, Log, LogConfig
from storage.log_validator import CLIENT, COORDINATOR
from storage.records import RecordBatchBuilder

DELETE = LogConfig(internal_segment_bytes=600, index_interval_bytes=200)
COMPACT = LogConfig(internal_segment_bytes=600, index_interval_bytes=200, cleanup_policy="compact")


def ts(i: int) -> int:
    return NOW - (200 - i) * 60_000  # a minute apart, the first 200 minutes old


def epoch(i: int) -> int:
    return i // 6


def is_marker(i: int) -> bool:
    return i % 10 == 9


def make_batch(i: int, base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    """Batch ``i``: two keyed records; idempotent (producer 7) unless ``i % 5 == 4``: then a transactional
    batch of producer 9 (``i % 10 == 4``, opening a transaction) or its ABORT marker (``i % 10 == 9``), so
    the logs carry aborted transactions and ``.txnindex`` entries."""
    kw: dict = {}
    if i % 5 != 4:
        kw = dict(producer_id=7, producer_epoch=0, base_sequence=2 * (i - (i + 1) // 5))
    elif is_marker(i):
        return build_control_batch(CONTROL_ABORT, 9, 0, 0, ts(i), base_offset, leader_epoch)
    else:
        kw = dict(producer_id=9, producer_epoch=0, base_sequence=2 * (i // 10), is_transactional=True)
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=leader_epoch, **kw)
    for j in range(2):
        b.append(ts(i) + j, b"k%d" % ((2 * i + j) % 5), b"value-%d-%d" % (i, j) * (1 + i % 3))
    return b.build()


def append(lg: Log, lo: int, hi: int) -> Log:
    for i in range(lo, hi):
        lg.append_as_leader(make_batch(i), epoch(i), NOW, COORDINATOR if is_marker(i) else CLIENT)
    return lg


def build(d: str, cfg: LogConfig, n: int, flush_at: int | None = None, close: bool = True) -> Log:
    lg = Log(d, cfg, now_ms=NOW)
    for i in range(n):
        append(lg, i, i + 1)
        if flush_at == i + 1:
            lg.flush(NOW)
    lg.update_high_watermark(lg.log_end_offset)
    if flush_at is None:
        lg.flush(NOW)
    if close:
        lg.close()
    return lg


@dataclass
class Scenario:
    name: str
    config: LogConfig
    prepare: Callable[[str], None]
    setup: Callable[[str], Any]
    op: Callable[[str, Any], Any]  # returns the Log (or None when it closed it)
    expect: Callable[[View, View, View], None]
    reopen_sweep: bool = False  # also kill the recovery of every crash state at each of its points


# ---------------------------------------------------------------------------------------------- expectations


def grows(before: View, after: View, final: View) -> None:
    """Nothing written before is lost; what the op wrote is there or not, in order."""
    b, a, f = before.batches, after.batches, final.batches
    assert f == a[: len(f)] and len(f) >= len(b), f"batches: {len(f)}, expected between {len(b)} and {len(a)}"
    assert final.log_start == before.log_start


def same_as_after(before: View, after: View, final: View) -> None:
    assert final.batches == after.batches, f"batches: {len(final.batches)}, expected {len(after.batches)}"
    assert (final.log_start, final.leo) == (after.log_start, after.leo)


def prefix_of_before(before: View, after: View, final: View) -> None:
    """A truncation: what stays is a prefix of the old log, never shorter than the truncated one, no hole."""
    b, a, f = before.batches, after.batches, final.batches
    assert f == b[: len(f)] and len(f) >= len(a), (
        f"batches: {len(f)}, expected a prefix of the old {len(b)} at least {len(a)} long"
    )
    if not f and final.leo != after.leo:  # every segment gone before the new one existed: empty at the old start
        assert final.leo == before.log_start, f"empty log at {final.leo}"
    assert final.log_start == min(before.log_start, final.leo) or (not f and final.log_start == final.leo)


def suffix_of_before(before: View, after: View, final: View) -> None:
    """Deletion from the start: the old log minus whole segments from the bottom; log start in between."""
    b, a, f = before.batches, after.batches, final.batches
    assert f == b[len(b) - len(f) :] and len(a) <= len(f), (
        f"batches: {len(f)}, expected a suffix of the old {len(b)} at least {len(a)} long"
    )
    assert before.log_start <= final.log_start <= after.log_start, (
        f"log start {final.log_start} outside [{before.log_start}, {after.log_start}]"
    )


def compacted(before: View, after: View, final: View) -> None:
    """Each cleaned group is swapped in whole or not at all: every record of the result is an original
    record, every record the finished compaction keeps is there, the log end does not move."""
    b, a, f = set(before.records()), set(after.records()), final.records()
    assert len(set(f)) == len(f) and set(f) <= b, "records that were not in the log before compaction"
    missing = a - set(f)
    assert not missing, f"records the compaction keeps are gone: {sorted(missing)[:3]}"
    assert final.leo == before.leo and final.log_start == before.log_start


# ---------------------------------------------------------------------------------------------- scenarios


def _open(cfg):
    return lambda d, _state=None: Log(d, cfg, now_ms=NOW)


def _tpl(cfg, n, flush_at=None):
    return lambda tpl: build(tpl, cfg, n, flush_at)


def _corrupt_epochs(tpl):
    build(tpl, DELETE, 20)
    with open(os.path.join(tpl, EPOCH_FILE), "w") as f:
        f.write("0\n3\n1 2\n")


def _missing_epochs(tpl):
    build(tpl, DELETE, 20)
    os.remove(os.path.join(tpl, EPOCH_FILE))


def _crashed(tpl):
    """A log that was never closed (a crash copy), its last write torn in half, the active time index gone."""
    lg = build(tpl + ".live", DELETE, 14, flush_at=8, close=False)
    copy_dir(lg.dir, tpl)
    lg.close()
    active = sorted(n for n in os.listdir(tpl) if n.endswith(".log"))[-1]
    with open(os.path.join(tpl, active), "ab") as f:
        f.write(make_batch(14)[:70])
    os.remove(os.path.join(tpl, active.replace(".log", ".timeindex")))
    shutil.rmtree(tpl + ".live")


def _clean_torn(batches_in_active: int, garbage_index: bool):
    """A cleanly closed log whose active segment (``batches_in_active`` batches) got a torn batch after the
    shutdown; with ``garbage_index`` its offset index is garbage too."""

    def prepare(tpl):
        lg = build(tpl, DELETE, 12, close=False)
        lg.roll(NOW)
        append(lg, 12, 12 + batches_in_active)
        lg.flush(NOW)
        lg.close()
        active = sorted(n for n in os.listdir(tpl) if n.endswith(".log"))[-1]
        with open(os.path.join(tpl, active), "ab") as f:
            f.write(make_batch(12 + batches_in_active)[:70])
        if garbage_index:
            with open(os.path.join(tpl, active.replace(".log", ".index")), "wb") as f:
                f.write(bytes(range(7, 7 + 24)))

    return prepare


def _hole(clean: bool):
    """A log whose third segment is gone, what a truncation deleting segments lowest first left when killed
    (cleanly closed, or crashed: without the marker)."""

    def prepare(tpl):
        build(tpl, DELETE, 16)
        gone = sorted(n for n in os.listdir(tpl) if n.endswith(".log"))[2]
        for ext in (".log", ".index", ".timeindex"):
            os.remove(os.path.join(tpl, gone.replace(".log", ext)))
        if not clean:
            os.remove(os.path.join(tpl, CLEAN_SHUTDOWN_FILE))

    return prepare


def _interrupted_swap(tpl):
    """A compacted log killed after a cleaned segment replacing its first two was renamed ``.log.swap``
    (its ``.txnindex.swap``, renamed before it, carrying both segments' entries), with a half-written
    ``.cleaned`` segment of a later group left over."""
    build(tpl, COMPACT, 16)
    logs = sorted(n for n in os.listdir(tpl) if n.endswith(".log"))
    for ext in (".log", ".txnindex"):
        merged = b"".join(open(os.path.join(tpl, n.replace(".log", ext)), "rb").read() for n in logs[:2])
        with open(os.path.join(tpl, logs[0].replace(".log", ext) + ".swap"), "wb") as f:
            f.write(merged)
    merged = b"".join(open(os.path.join(tpl, n), "rb").read() for n in logs[:2])
    with open(os.path.join(tpl, logs[2] + ".cleaned"), "wb") as f:
        f.write(merged[:100])


def _damaged_txn_indexes(flip: bool):
    """A cleanly closed log whose ``.txnindex`` files with entries were damaged after the shutdown: cut
    in the middle of their first entry, or (``flip``) a bit flipped in the version of the first one's entry
    and in the high byte of the second one's first offset."""

    def prepare(tpl):
        build(tpl, DELETE, 24)
        paths = [os.path.join(tpl, n) for n in sorted(os.listdir(tpl)) if n.endswith(".txnindex")]
        paths = [p for p in paths if os.path.getsize(p)]
        assert len(paths) >= 2, "the template must hold two aborted transactions in two segments"
        for k, p in enumerate(paths[:2]):
            with open(p, "r+b") as f:
                if flip:
                    f.seek(1 if k == 0 else 10)
                    b = f.read(1)[0]
                    f.seek(-1, os.SEEK_CUR)
                    f.write(bytes([b ^ 0x40]))
                else:
                    f.truncate(17)

    return prepare


def _follower_op(d, lg):
    for lo in (10, 12):
        leo = lg.log_end_offset
        data, off = b"", leo
        for i in (lo, lo + 1):
            data += make_batch(i, base_offset=off, leader_epoch=epoch(i) + 1)
            off += 2
        lg.append_as_follower(data, now_ms=NOW)
    return lg


def _setup_append(lo, hi, cfg=DELETE):
    def setup(d):
        return append(Log(d, cfg, now_ms=NOW), lo, hi)

    return setup


def _op(fn):
    def op(d, lg):
        fn(lg)
        return lg

    return op


def _close(d, lg):
    lg.close()
    return lg


def _retention(ms):
    return LogConfig(internal_segment_bytes=600, index_interval_bytes=200, retention_ms=ms)


RETENTION_SOME, RETENTION_ALL = _retention((200 - 9) * 60_000), _retention(1)


def _scenarios() -> list[Scenario]:
    s = [
        Scenario("append", DELETE, _tpl(DELETE, 10), _setup_append(10, 12), _op(lambda lg: append(lg, 12, 16)), grows),
        Scenario("append_follower", DELETE, _tpl(DELETE, 10), _setup_append(10, 10), _follower_op, grows),
        Scenario("roll", DELETE, _tpl(DELETE, 10), _setup_append(10, 11), _op(lambda lg: lg.roll(NOW)), grows),
        Scenario("flush", DELETE, _tpl(DELETE, 10), _setup_append(10, 18), _op(lambda lg: lg.flush(NOW)), grows),
        Scenario(
            "truncate_to",
            DELETE,
            _tpl(DELETE, 24),
            _setup_append(24, 26),
            _op(lambda lg: lg.truncate_to(lg.segments[1].base_offset + 3, NOW)),
            prefix_of_before,
        ),
        Scenario(
            "truncate_to_segment_base",
            DELETE,
            _tpl(DELETE, 24),
            _setup_append(24, 24),
            _op(lambda lg: lg.truncate_to(lg.segments[2].base_offset, NOW)),
            prefix_of_before,
        ),
        Scenario(
            "truncate_fully",
            DELETE,
            _tpl(DELETE, 20),
            _setup_append(20, 21),
            _op(lambda lg: lg.truncate_fully_and_start_at(lg.log_end_offset + 100, NOW)),
            prefix_of_before,
        ),
        Scenario(
            "delete_records",
            DELETE,
            _tpl(DELETE, 24),
            _setup_append(24, 24),
            _op(lambda lg: lg.delete_records(lg.segments[2].base_offset + 3)),
            suffix_of_before,
        ),
        Scenario(
            "retention",
            RETENTION_SOME,
            _tpl(RETENTION_SOME, 24),
            _setup_append(24, 24, RETENTION_SOME),
            _op(lambda lg: lg.delete_old_segments(NOW)),
            suffix_of_before,
        ),
        Scenario(
            "retention_all",
            RETENTION_ALL,
            _tpl(RETENTION_ALL, 16),
            _setup_append(16, 16, RETENTION_ALL),
            _op(lambda lg: lg.delete_old_segments(NOW)),
            suffix_of_before,
        ),
        Scenario(
            "compaction",
            COMPACT,
            _tpl(COMPACT, 24),
            _setup_append(24, 24, COMPACT),
            _op(lambda lg: lg.compact(NOW)),
            compacted,
        ),
        Scenario("epoch_rebuild_corrupt", DELETE, _corrupt_epochs, lambda d: None, _open(DELETE), same_as_after),
        Scenario("epoch_rebuild_missing", DELETE, _missing_epochs, lambda d: None, _open(DELETE), same_as_after),
        Scenario(
            "producer_snapshot",
            DELETE,
            _tpl(DELETE, 10),
            _setup_append(10, 13),
            _op(lambda lg: lg.producer_state.take_snapshot(lg.log_end_offset)),
            grows,
        ),
        Scenario("close", DELETE, _tpl(DELETE, 10), _setup_append(10, 14), _close, grows),
        Scenario("open_after_crash", DELETE, _crashed, lambda d: None, _open(DELETE), same_as_after, reopen_sweep=True),
        Scenario(
            "open_clean_torn_tail",
            DELETE,
            _clean_torn(1, False),
            lambda d: None,
            _open(DELETE),
            same_as_after,
            reopen_sweep=True,
        ),
        Scenario(
            "open_clean_torn_tail_bad_index",
            DELETE,
            _clean_torn(4, True),
            lambda d: None,
            _open(DELETE),
            same_as_after,
            reopen_sweep=True,
        ),
        Scenario(
            "open_with_hole_clean", DELETE, _hole(True), lambda d: None, _open(DELETE), same_as_after, reopen_sweep=True
        ),
        Scenario(
            "open_with_hole", DELETE, _hole(False), lambda d: None, _open(DELETE), same_as_after, reopen_sweep=True
        ),
        Scenario(
            "open_torn_txn_index",
            DELETE,
            _damaged_txn_indexes(False),
            lambda d: None,
            _open(DELETE),
            same_as_after,
            reopen_sweep=True,
        ),
        Scenario(
            "open_flipped_txn_index",
            DELETE,
            _damaged_txn_indexes(True),
            lambda d: None,
            _open(DELETE),
            same_as_after,
            reopen_sweep=True,
        ),
        Scenario(
            "open_interrupted_swap",
            COMPACT,
            _interrupted_swap,
            lambda d: None,
            _open(COMPACT),
            same_as_after,
            reopen_sweep=True,
        ),
    ]
    out = {}
    for sc in s:
        out[sc.name] = sc
        if sc.reopen_sweep:  # its recovery, crashed again: reopening must reach the same log
            out[sc.name + "/reopen"] = Scenario(
                sc.name + "/reopen", sc.config, sc.prepare, lambda d: None, _open(sc.config), same_as_after
            )
    return out


SCENARIOS = _scenarios()
OPERATIONS = [n for n in SCENARIOS if not n.endswith("/reopen")]


# ---------------------------------------------------------------------------------------------- the sweep


def dir_digest(d: str) -> str:
    h = hashlib.sha1()
    for n in sorted(os.listdir(d)):
        h.update(n.encode())
        with open(os.path.join(d, n), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def check_files(d: str, where: str) -> None:
    """The index files on disk agree with the segment files (after a clean close)."""
    for sv in scan_dir(d):

        class _Seg:
            base_offset = sv.base
            index_path = os.path.join(d, sv.name.replace(".log", ".index"))
            time_index_path = os.path.join(d, sv.name.replace(".log", ".timeindex"))

        oi, ti = read_index_files(_Seg)
        _check_indexes(_Seg, sv, oi, ti, f"{where}: index files of {sv.name}")


def reference(sc: Scenario, root: str) -> tuple[str, View, View]:
    """Run the operation once in this process (not counted): the template and the views before and after."""
    tpl = os.path.join(root, "tpl")
    sc.prepare(tpl)
    ref = copy_dir(tpl, os.path.join(root, "ref"))
    state = sc.setup(ref)
    if state is None:
        before = View(scan_dir(ref, strict=False), -1, -1)
    else:
        before = View(
            scan_dir(ref, strict=False), state.log_start_offset, state.log_end_offset, state.epoch_cache.entries()
        )
    lg = sc.op(ref, state)
    after = view_of(lg)
    lg.close()
    check_files(ref, f"{sc.name}: reference run")
    return tpl, before, after


@dataclass
class SweepResult:
    points: list  # the (kind, file) of every crash point of the operation
    kills: int  # children killed (torn writes included)
    reopen_kills: int = 0


def sweep(server, sc: Scenario, root: str) -> SweepResult:
    """Kill the operation at each crash point in turn (and once more with each write torn in half),
    reopen and check every result; the run that reaches no crash point is checked too."""
    tpl, before, after = reference(sc, root)
    full = server.run(sc.name, copy_dir(tpl, os.path.join(root, "full")))
    assert full.status == "completed", f"{sc.name}: the operation failed in the child: {full.error}"
    verify(
        os.path.join(root, "full"),
        sc.config,
        lambda b, a, f: (sc.expect(b, a, f), same_as_after(b, a, f)),
        before,
        after,
        f"{sc.name}: completed",
    )
    points = [tuple(p[1:]) for p in full.points]
    res, seen, verified = SweepResult(points, 0), set(), set()
    for n, (kind, name) in enumerate(points, 1):
        for torn in (False, True) if kind in WRITE_KINDS else (False,):
            d = copy_dir(tpl, os.path.join(root, "crash"))
            run = server.run(sc.name, d, crash_at=n, torn=torn)
            where = f"{sc.name}: killed at crash point {n}/{len(points)} ({kind} {name}{', torn' if torn else ''})"
            assert run.status == "killed" and run.last == (kind, name), (
                f"{where}: not deterministic: {run.status} at {run.last} ({run.error})"
            )
            res.kills += 1
            if sc.reopen_sweep:
                digest = dir_digest(d)
                if digest not in seen:
                    seen.add(digest)
                    res.reopen_kills += _sweep_reopen(server, sc, d, root, before, after, where, verified)
            verify(d, sc.config, sc.expect, before, after, where)
    return res


def _sweep_reopen(server, sc, crashed, root, before, after, where, verified: set) -> int:
    """Kill the recovery of a crashed directory at each of its crash points; each must still recover (a
    state already verified, reached from another first crash, is not verified twice)."""
    name, kills = sc.name + "/reopen", 0
    probe = server.run(name, copy_dir(crashed, os.path.join(root, "probe")))
    assert probe.status == "completed", f"{where}, then reopened: {probe.error}"
    for n, (_, kind, fname) in enumerate(probe.points, 1):
        d = copy_dir(crashed, os.path.join(root, "crash2"))
        run = server.run(name, d, crash_at=n)
        assert run.status == "killed", f"{where}, then reopen killed at {n}: {run.status} {run.error}"
        kills += 1
        digest = dir_digest(d)
        if digest not in verified:
            verified.add(digest)
            verify(d, sc.config, sc.expect, before, after, f"{where}, then its recovery killed at {n} ({kind} {fname})")
    return kills
