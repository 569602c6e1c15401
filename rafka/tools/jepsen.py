"""The checker of the partition suite (issue 46, section 5), beside ``rafka verify``'s check_history: pure functions
over one run's history (rafka/testkit/jepsen_workload.py writes it) and the log read back after healing. Each
returns counts and a few examples; ``check_run`` runs them all and lists what was violated. No Ray, no I/O:
unit-tested in tests/unit/rafka/tools/test_jepsen_checker.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rafka.tools.verify import check_history

__all__ = [
    "VIOLATIONS",
    "check_run",
    "committed_regressions",
    "dense_offsets",
    "epoch_order",
    "reads_truncated",
    "txn_atomicity",
    "unavailability",
]

# what must be 0 under every fault
VIOLATIONS = (
    "lost",
    "moved",
    "duplicated",
    "reordered",
    "offset_gaps",
    "reads_truncated",
    "committed_regressions",
    "epoch_regressions",
    "epoch_conflicts",
    "txn_aborted_read",
    "txn_partial",
    "txn_committed_missing",
    "txn_duplicated",
)

Log = Mapping[int, Sequence[Sequence[Any]]]  # partition -> [(offset, value, leader epoch), ...] in offset order


def _by_offset(log: Log) -> dict[int, dict[int, tuple[str, int | None]]]:
    return {int(p): {int(r[0]): (r[1], r[2] if len(r) > 2 else None) for r in recs} for p, recs in log.items()}


def dense_offsets(log: Log, start: Mapping[int, int] | None = None) -> dict[str, Any]:
    """Holes in each partition's offsets, from ``start`` (where the read began) on: a non-transactional topic's
    offsets are dense (a transactional one's are not: its control records take offsets)."""
    gaps, examples = 0, []
    for p, recs in log.items():
        last = (start or {}).get(int(p), recs[0][0] if recs else 0) - 1
        for r in recs:
            if r[0] != last + 1:
                gaps += 1
                if len(examples) < 5:
                    examples.append({"partition": int(p), "after": last, "next": r[0]})
            last = r[0]
    return {"offset_gaps": gaps, "examples": examples}


def reads_truncated(reads: Iterable[Sequence[Any]], log: Log) -> dict[str, Any]:
    """Records a consumer read during the run, ``(partition, offset, value, ...)``, that the final log does not hold
    at that offset: read and later truncated (a consumer saw data above what was really committed), or the offset
    now holds another record. Consumers must only see the high watermark's side of the log."""
    final = _by_offset(log)
    bad = []
    n = 0
    for r in reads:
        n += 1
        p, off, value = int(r[0]), int(r[1]), r[2]
        got = final.get(p, {}).get(off)
        if got is None or got[0] != value:
            bad.append({"partition": p, "offset": off, "read": value, "final": None if got is None else got[0]})
    return {"reads": n, "reads_truncated": len(bad), "examples": bad[:5]}


def committed_regressions(observed: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The committed offsets a group's member read back (OffsetFetch), ``(at, partition, offset)``: per partition,
    in time order, they never go down (a committed offset that regresses was lost by the coordinator's log)."""
    seq: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for at, p, off in observed:
        seq[int(p)].append((float(at), int(off)))
    bad = []
    for p, obs in seq.items():
        obs.sort(key=lambda x: x[0])
        high = -1
        for at, off in obs:
            if off < high:
                bad.append({"partition": p, "at": at, "offset": off, "after": high})
            high = max(high, off)
    return {
        "committed_observed": sum(len(v) for v in seq.values()),
        "committed_regressions": len(bad),
        "examples": bad[:5],
    }


def epoch_order(log: Log, reads: Iterable[Sequence[Any]] = ()) -> dict[str, Any]:
    """Split brain: two leaders acknowledging in one leader epoch. What detects it is the offsets. Two leaders taking
    writes at once both assign the next offsets; only one log survives the heal, so the other leader's acknowledged
    records are not at their acknowledged offsets (``lost``/``moved`` of check_history) and what consumers read from it
    was truncated (``reads_truncated``). What this adds, from the leader epoch each batch carries
    (partitionLeaderEpoch): ``epoch_regressions``, a partition's final log whose epochs go down in offset order (an old
    leader's records after a newer leader's: appended where truncation by leader epoch should have removed them), and
    ``epoch_conflicts``, a record read during the run at an offset whose final record has another leader epoch (two
    leaders served that offset)."""
    regressions = []
    for p, recs in log.items():
        high = -1
        for r in recs:
            e = r[2] if len(r) > 2 else None
            if e is None or e < 0:
                continue
            if e < high:
                regressions.append({"partition": int(p), "offset": r[0], "epoch": e, "after_epoch": high})
            high = max(high, e)
    final = _by_offset(log)
    conflicts = []
    for r in reads:
        p, off, e = int(r[0]), int(r[1]), r[3] if len(r) > 3 else None
        got = final.get(p, {}).get(off)
        if got is not None and e is not None and e >= 0 and got[1] is not None and got[1] >= 0 and got[1] != e:
            conflicts.append({"partition": p, "offset": off, "read_epoch": e, "final_epoch": got[1]})
    return {
        "epoch_regressions": len(regressions),
        "epoch_conflicts": len(conflicts),
        "epochs": {int(p): sorted({r[2] for r in recs if len(r) > 2 and r[2] is not None}) for p, recs in log.items()},
        "examples": regressions[:5] + conflicts[:5],
    }


def _txn_of(value: str, run: str) -> tuple[int, int] | None:
    """``<run>:t<n>:<partition>`` -> (n, partition); another run's record -> None."""
    parts = value.split(":")
    if len(parts) != 3 or parts[0] != run or not parts[1].startswith("t"):
        return None
    return int(parts[1][1:]), int(parts[2])


def txn_atomicity(
    txns: Iterable[Sequence[Any]], reads: Iterable[Sequence[Any]], final: Log, run: str
) -> dict[str, Any]:
    """read_committed over transactions that each wrote one record to partition 0 and one to partition 1. ``txns``:
    ``(n, outcome, began, ended)``, outcome "commit", "abort" or "unknown: ..."; ``reads``: what a read_committed
    consumer saw during the run, ``(partition, offset, value, at)``; ``final``: the read_committed read-back.
    Violations: ``txn_aborted_read`` (a record of an aborted transaction seen, during the run or at the end),
    ``txn_partial`` (at the end, a transaction seen in one partition but not the other), ``txn_committed_missing``
    (a transaction whose commit was acknowledged is absent), ``txn_duplicated`` (one transaction's record twice in
    a partition). A transaction of unknown outcome may be there or not, but whole."""
    outcome = {int(t[0]): str(t[1]) for t in txns}
    aborted = {n for n, o in outcome.items() if o == "abort"}
    committed = {n for n, o in outcome.items() if o == "commit"}
    seen_during = [_txn_of(r[2], run) for r in reads]
    aborted_read = [{"txn": t[0], "partition": t[1], "when": "during"} for t in seen_during if t and t[0] in aborted]
    where: dict[int, dict[int, int]] = {0: defaultdict(int), 1: defaultdict(int)}
    for p, recs in final.items():
        for r in recs:
            t = _txn_of(r[1], run)
            if t is not None:
                where[int(p)][t[0]] += 1
                if t[0] in aborted:
                    aborted_read.append({"txn": t[0], "partition": int(p), "when": "final"})
    in0, in1 = set(where[0]), set(where[1])
    partial = sorted(in0 ^ in1)
    missing = sorted(committed - (in0 & in1))
    dups = sorted({n for q in (0, 1) for n, c in where[q].items() if c > 1})
    return {
        "txns": len(outcome),
        "txn_committed": len(committed),
        "txn_aborted": len(aborted),
        "txn_unknown": len(outcome) - len(committed) - len(aborted),
        "txn_reads": len(seen_during),
        "txn_aborted_read": len(aborted_read),
        "txn_partial": len(partial),
        "txn_committed_missing": len(missing),
        "txn_duplicated": len(dups),
        "examples": {"aborted_read": aborted_read[:5], "partial": partial[:5], "missing": missing[:5], "dup": dups[:5]},
    }


def unavailability(produce: Iterable[Sequence[Any]], fault_at: float, until: float) -> dict[str, Any]:
    """The window of unavailability of a fault: per partition, the longest gap between acknowledgements (delivery
    reports without error) from ``fault_at`` to ``until`` (the gap from the fault to the first acknowledgement
    included; a partition with none is unavailable the whole window). ``produce``: rows ``(key, seq, partition,
    offset, error, sent, acked)``."""
    acks: dict[int, list[float]] = defaultdict(list)
    parts = set()
    for row in produce:
        q, err, acked = int(row[2]), row[4], float(row[6])
        parts.add(q)
        if not err and fault_at <= acked <= until:
            acks[q].append(acked)
    gaps = {}
    for q in sorted(parts):
        ts = [fault_at, *sorted(acks[q])] if acks[q] else [fault_at, until]
        gaps[q] = round(max(b - a for a, b in zip(ts, ts[1:])), 3) if len(ts) > 1 else 0.0
    return {"gap_s": gaps, "max_gap_s": max(gaps.values(), default=0.0)}


def check_run(history: Mapping[str, Any], log: Log, txn_log: Log, fault_at: float, healed_at: float) -> dict[str, Any]:
    """Every check over one run: its history (``jepsen_workload run``'s JSON), the topic read back from the run's
    start offsets (``log``, read_uncommitted) and the transactional topic read back read_committed (``txn_log``).
    ``violations`` names every check that failed, with its count; ``ok`` when there is none."""
    run = history["run"]
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    failed: dict[tuple[int, int], str] = {}
    for key, seq, q, off, err, _sent, _acked in history["produce"]:
        if err:
            failed[(key, seq)] = err
        else:
            acked[(key, seq)] = (q, off)
    mine: dict[int, list[tuple[int, int, int]]] = {}
    for p, recs in log.items():
        rows = []
        for r in recs:
            parts = r[1].split(":")
            if len(parts) == 3 and parts[0] == run:
                rows.append((int(r[0]), int(parts[1]), int(parts[2])))
        mine[int(p)] = rows
    produce = check_history(acked, failed, mine)
    start = {q: off for q, off in enumerate(history.get("start_offsets", []))}
    dense = dense_offsets(log, start)
    produce["offset_gaps"] = dense["offset_gaps"]  # over every record from the run's start, not only this run's
    produce["examples"]["offset_gaps"] = dense["examples"]
    reads = reads_truncated(history["reads"], log)
    commits = committed_regressions(history["committed"])
    epochs = epoch_order(log, history["reads"])
    txn = txn_atomicity(history["txns"], history["txn_reads"], txn_log, run)
    ends = [float(r[6]) for r in history["produce"]]
    window = unavailability(history["produce"], fault_at, max(ends, default=healed_at))
    out: dict[str, Any] = {
        "operations": len(history["produce"])
        + len(history["reads"])
        + len(history["commits"])
        + len(history["committed"])
        + len(history["txns"])
        + len(history["txn_reads"]),
        "produce": produce,
        "reads": reads,
        "committed": commits,
        "epochs": epochs,
        "txn": txn,
        "unavailability": window,
        "workload_errors": list(history.get("errors", [])),
    }
    flat = {**produce, **reads, **commits, **epochs, **txn}
    out["violations"] = {k: flat[k] for k in VIOLATIONS if flat.get(k)}
    out["ok"] = not out["violations"]
    return out
