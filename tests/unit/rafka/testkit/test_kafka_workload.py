"""The multi-node workload's checker (rafka/testkit/kafka_workload.py): each violation it exists to catch is caught."""

from __future__ import annotations

from rafka.testkit.kafka_workload import check, windows

# history rows: [key, seq, partition, offset, error, sent_at, acked_at]
HISTORY = [
    [0, 0, 0, 0, "", 1.0, 1.1],
    [0, 1, 0, 1, "", 2.0, 2.1],
    [1, 0, 1, 0, "", 2.5, 9.0],
    [1, 1, 1, -1, "_MSG_TIMED_OUT", 3.0, 9.5],
]
LOG = {0: [(0, "k0:0"), (1, "k0:1")], 1: [(0, "k1:0")]}


def test_a_faithful_log_passes():
    assert check(HISTORY, LOG) == {"lost": 0, "moved": 0, "duplicated": 0, "reordered": 0, "gaps": 0, "records": 3}


def test_lost_moved_duplicated_reordered_and_gaps_are_each_counted():
    assert check(HISTORY, {0: [(0, "k0:0")], 1: [(0, "k1:0")]})["lost"] == 1
    assert check(HISTORY, {0: [(0, "k0:0"), (2, "k0:1")], 1: [(0, "k1:0")]})["moved"] == 1
    assert check(HISTORY, {0: [(0, "k0:0"), (2, "k0:1")], 1: [(0, "k1:0")]})["gaps"] == 1
    dup = check(HISTORY, {0: [(0, "k0:0"), (1, "k0:1"), (2, "k0:1")], 1: [(0, "k1:0")]})
    assert dup["duplicated"] == 1 and dup["reordered"] == 1
    assert check(HISTORY, {0: [(0, "k0:1"), (1, "k0:0")], 1: [(0, "k1:0")]})["reordered"] == 1


def test_windows_are_the_wait_from_the_fault_to_the_first_ack_of_a_later_send():
    w = windows(HISTORY, fault_at=1.5)
    assert w == {"writable_s": {0: 0.6, 1: 7.5}, "errors": {"_MSG_TIMED_OUT": 1}}
