"""The partition suite's checker (rafka.tools.jepsen): each check sees its violation in a small history, and a clean
history has none. Pure: no cluster."""

from __future__ import annotations

from rafka.tools.jepsen import (
    check_run,
    committed_regressions,
    dense_offsets,
    epoch_order,
    reads_truncated,
    txn_atomicity,
    unavailability,
)

RUN = "r1"


def clean():
    """A history of one run and the logs read back: 2 partitions of the topic (another run's record first on
    partition 0), transactions 0 (committed), 1 (aborted), 2 (commit unknown, there whole)."""
    produce = [
        # key, seq, partition, offset, error, sent, acked
        [0, 0, 0, 1, "", 10.0, 10.1],
        [1, 0, 1, 0, "", 10.0, 10.1],
        [0, 1, 0, 2, "", 11.0, 11.2],
        [1, 1, 1, 1, "", 11.0, 11.3],
        [0, 2, 0, -1, "_MSG_TIMED_OUT", 12.0, 20.0],
        [1, 2, 1, 2, "", 12.0, 16.0],
    ]
    log = {
        0: [[0, "r0:5:5", 0], [1, "r1:0:0", 0], [2, "r1:0:1", 1]],
        1: [[0, "r1:1:0", 0], [1, "r1:1:1", 0], [2, "r1:1:2", 2]],
    }
    txn_log = {0: [[0, "r1:t0:0", 0], [5, "r1:t2:0", 0]], 1: [[0, "r1:t0:1", 0], [5, "r1:t2:1", 0]]}
    history = {
        "run": RUN,
        "start_offsets": [0, 0],
        "produce": produce,
        "reads": [[0, 1, "r1:0:0", 0, 10.2], [1, 2, "r1:1:2", 2, 16.1]],
        "commits": [[10.5, 0, 2, ""]],
        "committed": [[10.6, 0, 2], [11.6, 0, 3], [11.6, 1, 1]],
        "txns": [[0, "commit", 10.0, 10.1], [1, "abort", 10.2, 10.3], [2, "unknown: _TIMED_OUT", 10.4, 11.0]],
        "txn_reads": [[0, 0, "r1:t0:0", 10.2]],
        "errors": [],
    }
    return history, log, txn_log


def test_a_clean_history_passes_every_check():
    history, log, txn_log = clean()
    rep = check_run(history, log, txn_log, fault_at=12.0, healed_at=15.0)
    assert rep["ok"], rep["violations"]
    assert rep["operations"] == 6 + 2 + 1 + 3 + 3 + 1
    assert rep["produce"]["acknowledged"] == 5 and rep["produce"]["failed_sends"] == 1
    assert rep["txn"]["txn_committed"] == 1 and rep["txn"]["txn_unknown"] == 1


def test_a_lost_acknowledged_write_and_a_truncated_read():
    history, log, txn_log = clean()
    log[1] = log[1][:2] + [[2, "r1:9:9", 2]]  # offset 2 now holds another record: (1, 2) lost, its read truncated
    rep = check_run(history, log, txn_log, 12.0, 15.0)
    assert rep["violations"] == {"lost": 1, "reads_truncated": 1}
    assert rep["reads"]["examples"][0] == {"partition": 1, "offset": 2, "read": "r1:1:2", "final": "r1:9:9"}


def test_reads_past_the_final_end_were_truncated():
    _, log, _ = clean()
    r = reads_truncated([[0, 3, "r1:0:2", 1, 1.0]], log)
    assert r["reads_truncated"] == 1 and r["examples"][0]["final"] is None


def test_offset_gaps_count_from_the_start_offset():
    _, log, _ = clean()
    assert dense_offsets(log)["offset_gaps"] == 0
    assert dense_offsets(log, {1: 0, 0: 0})["offset_gaps"] == 0
    assert dense_offsets({0: [[3, "a", 0]]}, {0: 1})["offset_gaps"] == 1  # offsets 1 and 2 missing
    assert dense_offsets({0: [[0, "a", 0], [2, "b", 0]]})["examples"] == [{"partition": 0, "after": 0, "next": 2}]


def test_committed_offsets_that_go_back():
    ok = committed_regressions([[1.0, 0, 5], [2.0, 0, 5], [3.0, 0, 9], [1.5, 1, 2]])
    assert ok["committed_regressions"] == 0 and ok["committed_observed"] == 4
    bad = committed_regressions([[3.0, 0, 4], [1.0, 0, 5], [2.0, 0, 9]])  # in time order: 5, 9, 4
    assert bad["committed_regressions"] == 1 and bad["examples"][0] == {
        "partition": 0,
        "at": 3.0,
        "offset": 4,
        "after": 9,
    }


def test_split_brain_shows_as_epochs_going_back_and_as_conflicting_reads():
    log = {0: [[0, "a", 1], [1, "b", 2], [2, "c", 1], [3, "d", 3]]}  # an epoch-1 record after epoch 2
    r = epoch_order(log)
    assert r["epoch_regressions"] == 1 and r["epochs"] == {0: [1, 2, 3]}
    # a read of offset 1 from a leader of epoch 1, while the final record there came from epoch 2
    r = epoch_order({0: [[0, "a", 1], [1, "b", 2]]}, [[0, 1, "b", 1, 5.0]])
    assert r["epoch_conflicts"] == 1 and r["epoch_regressions"] == 0
    assert epoch_order({0: [[0, "a", None], [1, "b", 0]]}, [[0, 0, "a", None, 1.0]])["epoch_conflicts"] == 0


def test_split_brain_in_one_epoch_loses_the_other_leaders_acknowledgements():
    # two leaders both in epoch 4 acknowledged offset 3: only one record survives there
    history, log, txn_log = clean()
    history["produce"].append([0, 3, 0, 3, "", 13.0, 13.1])
    history["produce"].append([1, 3, 0, 3, "", 13.0, 13.2])
    log[0] = log[0] + [[3, "r1:1:3", 4]]
    rep = check_run(history, log, txn_log, 12.0, 15.0)
    assert rep["violations"]["lost"] == 1  # key 0 seq 3: acknowledged, but the other leader's record won


def test_read_committed_atomicity():
    history, _, txn_log = clean()
    txns, reads = history["txns"], history["txn_reads"]
    assert txn_atomicity(txns, reads, txn_log, RUN)["txn_partial"] == 0
    partial = {0: txn_log[0], 1: txn_log[1][:1]}  # transaction 2 only in partition 0
    r = txn_atomicity(txns, reads, partial, RUN)
    assert r["txn_partial"] == 1 and r["examples"]["partial"] == [2]
    missing = {0: txn_log[0][1:], 1: txn_log[1][1:]}  # the committed transaction 0 gone from both
    assert txn_atomicity(txns, reads, missing, RUN)["txn_committed_missing"] == 1
    aborted = txn_atomicity(txns, [*reads, [1, 3, "r1:t1:1", 11.0]], txn_log, RUN)  # the aborted one read
    assert aborted["txn_aborted_read"] == 1 and aborted["examples"]["aborted_read"][0]["when"] == "during"
    twice = {0: [*txn_log[0], [7, "r1:t0:0", 0]], 1: txn_log[1]}
    assert txn_atomicity(txns, reads, twice, RUN)["txn_duplicated"] == 1
    other_run = {0: [[9, "r0:t1:0", 0]], 1: []}  # another run's transaction 1 is none of this run's business
    assert txn_atomicity(txns, [], other_run, RUN)["txn_aborted_read"] == 0


def test_unavailability_is_the_longest_gap_between_acknowledgements_after_the_fault():
    history, _, _ = clean()
    w = unavailability(history["produce"], fault_at=11.1, until=20.0)
    # partition 0: acknowledged at 11.2 only (then nothing until 20.0, the error is no acknowledgement): 0.1 then
    # nothing more in the window; partition 1: 11.3 and 16.0
    assert w["gap_s"] == {0: 0.1, 1: 4.7} and w["max_gap_s"] == 4.7
    none = unavailability([[0, 0, 2, -1, "_MSG_TIMED_OUT", 1.0, 9.0]], fault_at=2.0, until=9.0)
    assert none["gap_s"] == {2: 7.0}
