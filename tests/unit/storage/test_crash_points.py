"""Crash-safe log mutations (issue 13, part 1): every Log operation killed at each of its mutating system
calls in turn (crash_harness.py, crash_scenarios.py), and one test per crash-ordering bug found that way,
each killing a child at the exact step that exposed it."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest
from crash_harness import CrashServer, copy_dir, read_index_files, verify
from crash_scenarios import OPERATIONS, SCENARIOS, make_batch, reference, sweep

from storage.segment import LogSegment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = CrashServer(str(tmp_path_factory.mktemp("crash-server") / "stderr.log"))
    yield s
    s.close()


@pytest.fixture
def root(tmp_path):
    """Where a test's directories go: tmpfs when there is one (a process crash leaves the same kernel state
    on any file system, and fsync costs nothing there), else the test's tmp_path."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="rafka-crash-", dir="/dev/shm")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def kill_at(server, root, scenario: str, select: list):
    """Run ``scenario`` in a child killed at the call ``select`` names, then reopen and check it."""
    sc = SCENARIOS[scenario]
    tpl, before, after = reference(sc, str(root))
    d = copy_dir(tpl, str(root / "crash"))
    run = server.run(scenario, d, select=select)
    assert run.status == "killed", f"the child was not killed ({run.status}): {run.error}"
    verify(d, sc.config, sc.expect, before, after, f"{scenario} killed at {run.last}")
    return run


# ---------------------------------------------------------------------------------------------- the bugs


def test_kill_inside_truncate_to_leaves_no_hole(server, root):
    """Killed as truncate_to deletes its second segment file: the log must be a prefix of the old one (it
    was: prefix, a hole where the first deleted segment was, then the data being truncated)."""
    kill_at(server, root, "truncate_to", ["remove", ".log", 2, False])


def test_kill_inside_delete_records_keeps_epochs_at_log_start(server, root):
    """Killed right after delete_records' first checkpoint rename: the epoch cache must still agree with the
    log start (it started above it: the epoch file was rewritten before the log start checkpoint)."""
    kill_at(server, root, "delete_records", ["replace", "checkpoint.tmp>", 1, True])


def test_kill_during_epoch_rebuild_rebuilds_again(server, root):
    """Killed right after the rebuilt leader epoch checkpoint is first renamed into place: the next open must
    hold every epoch (it trusted a valid, empty checkpoint written before the entries)."""
    kill_at(server, root, "epoch_rebuild_corrupt", ["replace", ">leader-epoch-checkpoint", 1, True])


def test_kill_during_torn_tail_repair_after_clean_shutdown(server, root):
    """Killed right after open cut the torn tail of the active segment of a cleanly closed log: the next open
    must not trust the half-rebuilt time index (the clean-shutdown marker was still there, and ListOffsets
    by timestamp missed the tail)."""
    tpl = str(root / "probe")
    SCENARIOS["open_clean_torn_tail"].prepare(tpl)
    active = sorted(n for n in os.listdir(tpl) if n.endswith(".log"))[-1]
    kill_at(server, root, "open_clean_torn_tail", ["ftruncate", active, 1, True])


@pytest.mark.parametrize("name", ["open_with_hole_clean", "open_with_hole"])
def test_open_deletes_segments_after_a_hole(root, name):
    """Open checks that every segment continues the previous one, not only those it scans: segments after a
    hole (an interrupted truncation) go, the log ends where the prefix does."""
    sc = SCENARIOS[name]
    tpl, before, after = reference(sc, str(root))
    assert len(after.segments) == 2 and after.leo == before.segments[1].next_offset
    verify(copy_dir(tpl, str(root / "open")), sc.config, sc.expect, before, after, name)


def test_segment_recover_closes_old_index_writers(tmp_path):
    """recover() replaced the index objects without closing them: their buffered entries were flushed into
    the rebuilt files when garbage collected, duplicating entries on disk."""
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=1)
    off = 0
    for i in range(6):
        b = bytearray(make_batch(i))
        b[0:8] = off.to_bytes(8, "big")
        seg.append(b, [(0, len(b), off + 1, 1000 + i)])
        off += 2
    seg.recover()
    seg.flush()
    oi, ti = read_index_files(seg)
    assert oi == [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    assert ti == [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    seg.close()


# ---------------------------------------------------------------------------------------------- the sweep

COUNTS: dict[str, tuple[int, int, int]] = {}


@pytest.mark.parametrize("name", OPERATIONS)
def test_crash_points(server, root, name):
    """Kill ``name`` at every crash point (and tear every write), reopen, check every invariant."""
    res = sweep(server, SCENARIOS[name], str(root))
    assert res.points, f"{name} made no mutating call"
    COUNTS[name] = (len(res.points), res.kills, res.reopen_kills)
    print(f"\n{name}: {len(res.points)} crash points, {res.kills} kills, {res.reopen_kills} kills of its recovery")
