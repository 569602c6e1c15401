"""The checker of `rafka verify` (rafka.tools.verify.check_history): each violation class is seen, and a clean
history has none. Pure: no cluster."""

from __future__ import annotations

from rafka.tools.verify import check_history


def clean_history():
    # two keys on partition 0, one on partition 1; everything acknowledged where it is
    log = {0: [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)], 1: [(5, 2, 0), (6, 2, 1)]}
    acked = {(0, 0): (0, 0), (1, 0): (0, 1), (0, 1): (0, 2), (1, 1): (0, 3), (2, 0): (1, 5), (2, 1): (1, 6)}
    return acked, log


def test_clean_history_has_no_violation():
    acked, log = clean_history()
    r = check_history(acked, {}, log)
    assert (r["lost"], r["moved"], r["duplicated"], r["reordered"], r["offset_gaps"]) == (0, 0, 0, 0, 0)
    assert r["acknowledged"] == 6 and r["read"] == 6 and r["unacked_present"] == 0


def test_lost_record():
    acked, log = clean_history()
    log[0] = [rec for rec in log[0] if rec[0] != 3] + [(3, 0, 2)]  # key 1 seq 1 replaced by an unacked record
    r = check_history(acked, {(0, 2): "timeout"}, log)
    assert r["lost"] == 1 and r["examples"]["lost"][0] == {"key": 1, "seq": 1, "partition": 0, "offset": 3}
    assert r["unacked_present"] == 1 and r["failed_sends"] == 1


def test_moved_record():
    acked, log = clean_history()
    log[1] = [(5, 2, 0), (6, 9, 9), (7, 2, 1)]  # (2, 1) acknowledged at offset 6, found at 7
    r = check_history(acked, {}, log)
    assert r["moved"] == 1 and r["examples"]["moved"][0]["found_at"] == [(1, 7)]
    assert r["lost"] == 0


def test_duplicated_record():
    acked, log = clean_history()
    log[1].append((7, 2, 1))
    r = check_history(acked, {}, log)
    assert r["duplicated"] == 1 and r["examples"]["duplicated"][0]["at"] == [(1, 6), (1, 7)]
    assert r["reordered"] == 1  # seq 1 again after seq 1


def test_reordered_records():
    acked, log = clean_history()
    log[0] = [(0, 0, 1), (1, 1, 0), (2, 0, 0), (3, 1, 1)]
    acked[(0, 1)], acked[(0, 0)] = (0, 0), (0, 2)
    r = check_history(acked, {}, log)
    assert r["reordered"] == 1 and r["examples"]["reordered"][0]["seq"] == 0 and r["lost"] == 0


def test_offset_gap():
    acked, log = clean_history()
    log[1] = [(5, 2, 0), (8, 2, 1)]
    acked[(2, 1)] = (1, 8)
    r = check_history(acked, {}, log)
    assert r["offset_gaps"] == 1 and r["moved"] == 0
