"""A cleaner pass built on a worker thread while the Log's owner goes on (storage/log.py): the owner
appends and reads during the build, and every operation that removes segments aborts the pass, which then
swaps nothing and leaves no ``.cleaned`` file; the replica's housekeeping keeps its event loop serving while
a pass builds. Real files, real threads, no Ray."""

from __future__ import annotations

import asyncio
import os
import threading
import types

import pytest
from test_cleaner import T0, config, put, ready, records

from actors.replication.housekeeping import ReplicaHousekeeping
from storage import cleaner
from storage.cleaner import CleanerGate, CleaningAborted
from storage.log import Log


class PausingGate(CleanerGate):
    """Stops the build after its ``pause_at``-th segment item (outside the lock, as a slow pass would be
    between two reads) until ``go`` is set; ``reached`` tells the owner the build is there."""

    def __init__(self, pause_at: int = 2):
        super().__init__()
        self.pause_at, self.seen = pause_at, 0
        self.reached, self.go = threading.Event(), threading.Event()

    def guarded(self, it):
        for item in super().guarded(it):
            self.seen += 1
            if self.seen == self.pause_at:
                self.reached.set()
                assert self.go.wait(30)
            yield item


def compacted_log(logdir, segments=4, keys=5):
    """``segments`` closed segments of ``keys`` keys each overwritten, every one below the HW."""
    lg = Log(logdir, config(), now_ms=T0)
    for s in range(segments):
        for k in range(keys):
            put(lg, [(b"k%d" % k, b"v%d" % s)])
        lg.roll()
    ready(lg)
    return lg


def start_build(lg, gate):
    p = lg.begin_clean(T0)
    assert p is not None
    p.gate = gate
    outcome: dict = {}

    def run():
        try:
            outcome["stats"] = p.build()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    assert gate.reached.wait(30)
    return p, t, outcome


def leftovers(logdir):
    return sorted(f for f in os.listdir(logdir) if f.endswith((".cleaned", ".swap")))


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "topic-0")


def test_owner_appends_and_reads_while_the_pass_builds(logdir):
    lg = compacted_log(logdir)
    before = [(r.offset, r.key, r.value) for r in records(lg)]
    gate = PausingGate()
    p, t, outcome = start_build(lg, gate)
    # the owner goes on: appends to the active segment, reads a segment the pass is reading
    put(lg, [(b"k0", b"late"), (b"new", b"x")])
    assert len(lg.read(0, 1 << 20).records) > 0
    gate.go.set()
    t.join(30)
    assert "error" not in outcome
    stats = lg.end_clean(p)
    assert stats is not None and stats.segments_cleaned == 4 and stats.groups_swapped >= 1
    got = [(r.offset, r.key, r.value) for r in records(lg)]
    # latest of each key from the cleaned range, then the active segment untouched
    assert got[:5] == [o for o in before if o[0] >= 15]
    assert got[5:] == [(20, b"k0", b"late"), (21, b"new", b"x")]
    assert leftovers(logdir) == []
    lg.close()
    again = Log(logdir, config(), now_ms=T0)
    assert [(r.offset, r.key, r.value) for r in records(again)] == got


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda lg: lg.truncate_to(7), id="truncate"),
        pytest.param(lambda lg: lg.truncate_fully_and_start_at(100), id="truncate_fully"),
        pytest.param(lambda lg: lg.delete_records(10), id="delete_records"),
        pytest.param(lambda lg: lg.close(), id="close"),
    ],
)
def test_removing_segments_aborts_the_pass_and_swaps_nothing(logdir, change):
    lg = compacted_log(logdir)
    gate = PausingGate()
    p, t, outcome = start_build(lg, gate)
    change(lg)  # returns at once: the build holds no read while it is paused
    assert gate.aborted
    gate.go.set()
    t.join(30)
    assert isinstance(outcome.get("error"), CleaningAborted)
    assert lg.end_clean(p) is None
    assert leftovers(logdir) == []
    closed = lg._closed
    expect = None if closed else [(r.offset, r.key, r.value) for r in records(lg)]
    if not closed:
        lg.close()
    again = Log(logdir, config(), now_ms=T0)
    if closed:  # closed mid-pass: the log is what it was, uncleaned
        assert len(records(again)) == 20
    else:
        assert [(r.offset, r.key, r.value) for r in records(again)] == expect


def test_abort_waits_for_the_read_in_progress(logdir):
    """``abort`` returns only once no segment read is under way: a read holding the gate delays it."""
    gate = CleanerGate()
    inside, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow_items():
        inside.set()
        assert release.wait(30)
        yield 1

    def reader():
        try:
            list(gate.guarded(slow_items()))
        except CleaningAborted:
            pass

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(30)
    aborter = threading.Thread(target=lambda: (gate.abort(), done.set()))
    aborter.start()
    assert not done.wait(0.2)  # held by the read
    release.set()
    assert done.wait(30)
    t.join(30)
    aborter.join(30)
    with pytest.raises(CleaningAborted):
        list(gate.guarded(iter([1])))


def test_a_second_pass_waits_for_the_first(logdir):
    lg = compacted_log(logdir)
    p = lg.begin_clean(T0)
    assert p is not None and lg.begin_clean(T0) is None
    p.build()
    assert lg.end_clean(p) is not None
    assert lg.begin_clean(T0) is not None


def test_housekeeping_loop_serves_while_a_pass_builds(logdir, monkeypatch):
    """The replica's compaction step builds on a worker thread: while it is paused mid-pass, the same event
    loop appends and reads; then the pass commits and the replica's stats count it."""
    lg = compacted_log(logdir)
    gate = PausingGate()
    monkeypatch.setattr(cleaner, "CleanerGate", lambda: gate)
    stats: dict = {}
    hk = ReplicaHousekeeping(types.SimpleNamespace(log=lg), stats, "t-0", T0)

    async def scenario():
        task = asyncio.ensure_future(hk.compact(T0))
        while not gate.reached.is_set():
            await asyncio.sleep(0.005)
        put(lg, [(b"k1", b"during")])  # the loop is free while the thread builds
        assert lg.read(20, 1 << 20).records
        assert not task.done()
        gate.go.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert stats["compaction_passes"] == 1 and stats["compaction_records_removed"] == 15
    assert [(r.offset, r.key) for r in records(lg)][-1] == (20, b"k1")
    assert leftovers(logdir) == []
    lg.close()


def test_segments_that_age_past_the_lag_are_cleaned_without_a_new_roll(logdir):
    """``min.compaction.lag.ms``: a pass asked too early cleans nothing and is asked again at the next backoff
    (not only after the next roll); once a pass cleaned the range, nothing is rewritten until more is
    cleanable."""
    lg = Log(logdir, config(min_compaction_lag_ms=1000, min_cleanable_dirty_ratio=0.1), now_ms=T0)
    for s in range(3):
        put(lg, [(b"k", b"v%d" % s)], now=T0)
        lg.roll(T0)
    ready(lg)
    stats: dict = {}
    hk = ReplicaHousekeeping(types.SimpleNamespace(log=lg), stats, "t-0", T0)
    asyncio.run(hk.compact(T0 + 10))  # too young
    assert "compaction_passes" not in stats and len(records(lg)) == 3
    asyncio.run(hk.compact(T0 + 2000))  # old enough now; no segment rolled in between
    assert stats["compaction_passes"] == 1 and [r.value for r in records(lg)] == [b"v2"]
    asyncio.run(hk.compact(T0 + 3000))  # nothing new past the last pass
    assert stats["compaction_passes"] == 1
    put(lg, [(b"k", b"v3")], now=T0 + 3000)
    lg.roll(T0 + 3000)
    ready(lg)
    asyncio.run(hk.compact(T0 + 5000))
    assert stats["compaction_passes"] == 2 and [r.value for r in records(lg)] == [b"v3"]
    lg.close()


def test_min_cleanable_dirty_ratio_and_max_compaction_lag_gate_later_passes(logdir):
    """After a pass, the next one waits until the dirty section (past the last pass) is over
    ``min.cleanable.dirty.ratio`` of the cleanable bytes, or its first record is older than
    ``max.compaction.lag.ms`` (Kafka's LogCleanerManager); the first pass has no clean section."""
    lg = Log(logdir, config(min_cleanable_dirty_ratio=0.6, max_compaction_lag_ms=50_000), now_ms=T0)
    for s in range(4):
        put(lg, [(b"k%d" % k, b"v%d" % s) for k in range(5)], now=T0)
        lg.roll(T0)
    ready(lg)
    stats: dict = {}
    hk = ReplicaHousekeeping(types.SimpleNamespace(log=lg), stats, "t-0", T0)
    asyncio.run(hk.compact(T0))
    assert stats["compaction_passes"] == 1  # clean section empty: ratio 1
    put(lg, [(b"k%d" % k, b"w") for k in range(5)], now=T0 + 1000)  # dirty = clean: ratio 0.5
    lg.roll(T0 + 1000)
    ready(lg)
    asyncio.run(hk.compact(T0 + 2000))
    assert stats["compaction_passes"] == 1 and len(records(lg)) == 10
    asyncio.run(hk.compact(T0 + 52_000))  # its first record is now older than max.compaction.lag.ms
    assert stats["compaction_passes"] == 2 and [r.value for r in records(lg)] == [b"w"] * 5
    for s in range(2):  # two dirty segments against one clean: ratio 2/3 > 0.6
        put(lg, [(b"k%d" % k, b"x%d" % s) for k in range(5)], now=T0 + 53_000)
        lg.roll(T0 + 53_000)
    ready(lg)
    asyncio.run(hk.compact(T0 + 53_000))
    assert stats["compaction_passes"] == 3 and [r.value for r in records(lg)] == [b"x1"] * 5
    lg.close()
