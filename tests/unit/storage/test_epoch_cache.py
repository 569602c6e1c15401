"""LeaderEpochCache: Kafka's LeaderEpochFileCache semantics, checkpoint format, and a model-based check."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.epoch_cache import (
    LeaderEpochCache,
    format_checkpoint,
    parse_checkpoint,
)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "leader-epoch-checkpoint")


def test_empty_cache(path):
    c = LeaderEpochCache(path)
    assert c.latest_epoch == -1
    assert c.entries() == []
    assert c.end_offset_for_epoch(0, 10) == (-1, -1)
    assert c.end_offset_for_epoch(-1, 10) == (-1, -1)
    assert c.epoch_for_offset(5) == -1
    assert not os.path.exists(path)  # nothing written until a mutation
    assert c.load_error is None


def test_assign_same_epoch_is_noop_and_new_epoch_appends(path):
    c = LeaderEpochCache(path)
    assert c.assign(2, 10) is True
    assert c.assign(2, 15) is False  # every batch of the current epoch: no change
    assert c.assign(2, 10) is False
    assert c.assign(3, 20) is True
    assert c.entries() == [(2, 10), (3, 20)]
    assert c.latest_epoch == 3
    with open(path) as f:
        assert f.read() == "0\n2\n2 10\n3 20\n"


def test_assign_same_epoch_lower_offset_replaces(path):
    c = LeaderEpochCache(path)
    c.assign(1, 0)
    c.assign(2, 10)
    assert c.assign(2, 5) is True
    assert c.entries() == [(1, 0), (2, 5)]


def test_assign_new_epoch_at_or_below_previous_start_removes_conflicts(path):
    c = LeaderEpochCache(path)
    for e, o in [(1, 0), (2, 10), (3, 20)]:
        c.assign(e, o)
    assert c.assign(4, 10) is True  # start <= starts of epochs 2 and 3 -> they go
    assert c.entries() == [(1, 0), (4, 10)]
    assert c.assign(5, 10) is True  # same start: epoch 4 never had data
    assert c.entries() == [(1, 0), (5, 10)]


def test_assign_lower_epoch_truncates_like_kafka(path):
    c = LeaderEpochCache(path)
    for e, o in [(1, 0), (3, 10), (5, 20)]:
        c.assign(e, o)
    assert c.assign(4, 30) is True  # Kafka removes entries with epoch >= 4
    assert c.entries() == [(1, 0), (3, 10), (4, 30)]


def test_assign_rejects_negative(path):
    c = LeaderEpochCache(path)
    with pytest.raises(ValueError):
        c.assign(-1, 0)
    with pytest.raises(ValueError):
        c.assign(0, -5)


def test_end_offset_for_epoch_kip279(path):
    c = LeaderEpochCache(path)
    for e, o in [(2, 10), (4, 20), (7, 35)]:
        c.assign(e, o)
    leo = 50
    assert c.end_offset_for_epoch(7, leo) == (7, 50)  # latest -> LEO
    assert c.end_offset_for_epoch(4, leo) == (4, 35)
    assert c.end_offset_for_epoch(5, leo) == (4, 35)  # unknown epoch in a gap -> largest below
    assert c.end_offset_for_epoch(6, leo) == (4, 35)
    assert c.end_offset_for_epoch(3, leo) == (2, 20)
    assert c.end_offset_for_epoch(2, leo) == (2, 20)
    assert c.end_offset_for_epoch(1, leo) == (1, 10)  # below the first epoch: Kafka's answer
    assert c.end_offset_for_epoch(8, leo) == (-1, -1)  # above the latest
    assert c.end_offset_for_epoch(-1, leo) == (-1, -1)


def test_epoch_for_offset(path):
    c = LeaderEpochCache(path)
    for e, o in [(2, 10), (4, 20)]:
        c.assign(e, o)
    assert [c.epoch_for_offset(x) for x in (0, 9, 10, 19, 20, 1000)] == [-1, -1, 2, 2, 4, 4]


def test_truncate_from_end(path):
    c = LeaderEpochCache(path)
    for e, o in [(1, 0), (2, 10), (3, 20)]:
        c.assign(e, o)
    c.truncate_from_end(25)
    assert c.entries() == [(1, 0), (2, 10), (3, 20)]
    c.truncate_from_end(20)
    assert c.entries() == [(1, 0), (2, 10)]
    c.truncate_from_end(5)
    assert c.entries() == [(1, 0)]
    c.truncate_from_end(-1)  # undefined: no-op
    assert c.entries() == [(1, 0)]
    c.truncate_from_end(0)
    assert c.entries() == []
    assert LeaderEpochCache(path).entries() == []


def test_truncate_from_start(path):
    c = LeaderEpochCache(path)
    for e, o in [(1, 0), (2, 10), (3, 20)]:
        c.assign(e, o)
    c.truncate_from_start(0)
    assert c.entries() == [(1, 0), (2, 10), (3, 20)]
    c.truncate_from_start(15)
    assert c.entries() == [(2, 15), (3, 20)]
    c.truncate_from_start(20)
    assert c.entries() == [(3, 20)]
    c.truncate_from_start(100)
    assert c.entries() == [(3, 100)]
    assert LeaderEpochCache(path).entries() == [(3, 100)]


def test_clear_and_persist(path):
    c = LeaderEpochCache(path)
    c.assign(1, 0)
    c.assign(2, 7)
    assert LeaderEpochCache(path).entries() == [(1, 0), (2, 7)]
    c.clear()
    assert c.entries() == [] and c.latest_epoch == -1
    with open(path) as f:
        assert f.read() == "0\n0\n"
    assert LeaderEpochCache(path).entries() == []


def test_flush_is_atomic_no_tmp_left(path, tmp_path):
    c = LeaderEpochCache(path)
    c.assign(0, 0)
    c.flush()
    assert sorted(os.listdir(tmp_path)) == ["leader-epoch-checkpoint"]


def test_stale_tmp_file_is_ignored(path):
    with open(path, "w") as f:
        f.write("0\n1\n4 40\n")
    with open(path + ".tmp", "w") as f:
        f.write("0\n1\n9 9")  # a crash mid-write leaves only the tmp torn
    assert LeaderEpochCache(path).entries() == [(4, 40)]


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\n2\n1 0\n",  # count mismatch
        "0\n1\n1 0 3\n",  # malformed line
        "0\n1\nx 0\n",  # not a number
        "0\n2\n2 10\n1 20\n",  # epochs not increasing
        "0\n2\n1 10\n2 10\n",  # offsets not increasing
        "0\n1\n-1 0\n",  # negative
        "0\n",  # truncated header
        "",  # empty file
    ],
)
def test_corrupt_checkpoint_is_treated_as_empty_with_log(path, text, caplog):
    with open(path, "w") as f:
        f.write(text)
    with caplog.at_level(logging.WARNING, logger="storage.epoch_cache"):
        c = LeaderEpochCache(path)
    assert c.entries() == []
    assert c.load_error
    assert "corrupt" in caplog.text
    c.assign(3, 30)  # usable, and the rewrite repairs the file
    assert LeaderEpochCache(path).entries() == [(3, 30)]


def test_binary_garbage_checkpoint(path):
    with open(path, "wb") as f:
        f.write(b"\xff\xfe\x00garbage")
    c = LeaderEpochCache(path)
    assert c.entries() == [] and c.load_error


def test_format_parse_round_trip():
    entries = [(0, 0), (3, 17), (9, 1 << 40)]
    assert parse_checkpoint(format_checkpoint(entries)) == entries
    assert format_checkpoint([]) == "0\n0\n"


def test_memory_only_cache():
    c = LeaderEpochCache(None)
    c.assign(1, 5)
    c.flush()
    assert c.entries() == [(1, 5)]


# ---------------------------------------------------------------------------- model-based
class Model:
    """The obvious list implementation of Kafka's rules, written independently of the real one."""

    def __init__(self):
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch, offset):
        if self.entries and self.entries[-1][0] == epoch and offset >= self.entries[-1][1]:
            return
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o < offset]
        self.entries.append((epoch, offset))

    def truncate_from_end(self, end):
        self.entries = [(e, o) for e, o in self.entries if o < end]

    def truncate_from_start(self, start):
        before = [(e, o) for e, o in self.entries if o <= start]
        after = [(e, o) for e, o in self.entries if o > start]
        self.entries = ([(before[-1][0], start)] if before else []) + after

    def end_offset_for(self, req, leo):
        if req == -1 or not self.entries:
            return (-1, -1)
        if req == self.entries[-1][0]:
            return (req, leo)
        higher = [(e, o) for e, o in self.entries if e > req]
        lower = [(e, o) for e, o in self.entries if e <= req]
        if not higher:
            return (-1, -1)
        if not lower:
            return (req, higher[0][1])
        return (lower[-1][0], higher[0][1])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 70), st.just(0)),
        st.tuples(st.just("start"), st.integers(-1, 70), st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_matches_model(tmp_path, ops):
    path = str(tmp_path / "leader-epoch-checkpoint")
    if os.path.exists(path):
        os.remove(path)
    c, m = LeaderEpochCache(path), Model()
    for op, a, b in ops:
        if op == "assign":
            c.assign(a, b)
            m.assign(a, b)
        elif op == "end":
            c.truncate_from_end(a)
            if a >= 0:
                m.truncate_from_end(a)
        elif op == "start":
            c.truncate_from_start(a)
            if a >= 0:
                m.truncate_from_start(a)
        else:
            c.clear()
            m.entries = []
        assert c.entries() == m.entries
        es = c.entries()
        assert all(x[0] < y[0] and x[1] < y[1] for x, y in zip(es, es[1:]))
        for req in range(-1, 14):
            assert c.end_offset_for_epoch(req, 99) == m.end_offset_for(req, 99), (req, es)
    assert LeaderEpochCache(path).entries() == m.entries  # what was persisted is what is in memory


def test_replace_installs_a_whole_list_with_one_write(path):
    with open(path, "w") as f:
        f.write("0\n3\n1 2\n")  # corrupt: the count lies
    c = LeaderEpochCache(path)
    assert c.load_error is not None and c.entries() == []
    mem = LeaderEpochCache(None)  # memory only: built entry by entry without touching a file
    for e, o in [(0, 0), (2, 5), (4, 9)]:
        mem.assign(e, o)
    c.replace(mem.entries())
    assert c.load_error is None and c.entries() == [(0, 0), (2, 5), (4, 9)]
    assert LeaderEpochCache(path).entries() == [(0, 0), (2, 5), (4, 9)]
    for bad in ([(1, 0), (1, 5)], [(0, 5), (1, 5)], [(-1, 0)]):
        with pytest.raises(ValueError):
            c.replace(bad)
        assert c.entries() == [(0, 0), (2, 5), (4, 9)]  # unchanged, in memory and on disk
    assert LeaderEpochCache(path).entries() == [(0, 0), (2, 5), (4, 9)]
    c.replace([])
    assert LeaderEpochCache(path).entries() == [] and os.path.exists(path)
