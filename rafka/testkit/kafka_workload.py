"""A real Kafka client's workload for the multi-node suites and benchmarks, run as a script in a namespace of its
own (``python -m rafka.testkit.kafka_workload produce|check ...``): confluent-kafka (librdkafka) produces keyed,
numbered records ``<key>:<seq>`` at a steady rate with acks=all and idempotence, and records every delivery
report (partition, offset, error, send and ack times) as a JSON history; ``check`` reads every partition back
and checks the history against the log: nothing acknowledged lost or moved, per-key order, dense offsets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict


def produce(bootstrap: str, topic: str, seconds: float, rate: float, keys: int, out: str, value_bytes: int) -> dict:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "socket.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    history: list[list] = []  # [key, seq, partition, offset, error name or "", sent_at, acked_at]
    seqs = [0] * keys
    pad = b"x" * max(0, value_bytes)

    def report(err, msg, key, seq, sent):
        history.append(
            [
                key,
                seq,
                msg.partition(),
                msg.offset() if err is None else -1,
                err.name() if err else "",
                sent,
                time.time(),
            ]
        )

    start = time.time()
    n = 0
    while time.time() - start < seconds:
        due = start + n / rate
        while time.time() < due:
            p.poll(min(0.01, max(0.0, due - time.time())))
        k = n % keys
        seq = seqs[k]
        seqs[k] += 1
        sent = time.time()
        while True:
            try:
                p.produce(
                    topic,
                    key=f"k{k}".encode(),
                    value=f"k{k}:{seq}:".encode() + pad,
                    on_delivery=lambda err, msg, k=k, seq=seq, sent=sent: report(err, msg, k, seq, sent),
                )
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        p.poll(0)
    left = p.flush(120)
    summary = {"sent": n, "acked": sum(1 for h in history if not h[4]), "unflushed": left, "history": history}
    with open(out, "w") as f:
        json.dump(summary, f)
    return {k: v for k, v in summary.items() if k != "history"}


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition, from the start to the end offset each had when the read began."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "enable.auto.commit": False})
    ends = {}
    for q in range(partitions):
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, q), timeout=30)
        ends[q] = (lo, hi)
    c.assign([TopicPartition(topic, q, ends[q][0]) for q in range(partitions)])
    got: dict[int, list[tuple[int, str]]] = defaultdict(list)
    deadline = time.time() + 300
    while any((got[q][-1][0] + 1 if got[q] else ends[q][0]) < ends[q][1] for q in ends):
        if time.time() > deadline:
            raise TimeoutError(f"read stopped short of the end offsets {ends}")
        for m in c.consume(500, 1.0):
            if m.error() is None and m.offset() < ends[m.partition()][1]:
                key, seq, _pad = m.value().split(b":", 2)
                got[m.partition()].append((m.offset(), f"{key.decode()}:{seq.decode()}"))
    c.close()
    return {q: got[q] for q in ends}


def check(history: list[list], log: dict[int, list[tuple[int, str]]]) -> dict:
    """The history against the log: ``lost`` (acknowledged, absent), ``moved`` (found at another offset),
    ``reordered`` (a key's sequence numbers not increasing in offset order), ``gaps`` (holes in a partition's
    offsets), ``duplicated`` (one record at two offsets)."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    gaps = 0
    for q, recs in log.items():
        for (a, _), (b, _) in zip(recs, recs[1:]):
            gaps += b - a - 1
        for off, rec in recs:
            where[rec].append((q, off))
    lost = moved = 0
    for key, seq, q, off, err, _sent, _acked in history:
        if err:
            continue
        found = where.get(f"k{key}:{seq}")
        if not found:
            lost += 1
        elif (q, off) not in found:
            moved += 1
    duplicated = sum(1 for v in where.values() if len(v) > 1)
    reordered = 0
    last: dict[str, tuple[int, int]] = {}
    for q, recs in log.items():
        for _off, rec in recs:
            k, s = rec.split(":")
            prev = last.get(k)
            if prev is not None and prev[0] == q and prev[1] >= int(s):
                reordered += 1
            last[k] = (q, int(s))
    return {
        "lost": lost,
        "moved": moved,
        "duplicated": duplicated,
        "reordered": reordered,
        "gaps": gaps,
        "records": sum(len(r) for r in log.values()),
    }


def windows(history: list[list], fault_at: float) -> dict:
    """Per partition, seconds from ``fault_at`` to the first acknowledgement of a record sent after it (how long the
    partition was not writable), and the error names of the failed deliveries."""
    first: dict[int, float] = {}
    errors: dict[str, int] = defaultdict(int)
    for _k, _s, q, _off, err, sent, acked in history:
        if err:
            errors[err] += 1
        elif sent >= fault_at:
            first[q] = min(first.get(q, acked), acked)
    return {"writable_s": {q: round(t - fault_at, 3) for q, t in sorted(first.items())}, "errors": dict(errors)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kafka_workload")
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("bootstrap")
    pr.add_argument("topic")
    pr.add_argument("--seconds", type=float, default=30)
    pr.add_argument("--rate", type=float, default=200)
    pr.add_argument("--keys", type=int, default=20)
    pr.add_argument("--value-bytes", type=int, default=0)
    pr.add_argument("--out", required=True)
    ck = sub.add_parser("check")
    ck.add_argument("bootstrap")
    ck.add_argument("topic")
    ck.add_argument("--partitions", type=int, required=True)
    ck.add_argument("--history", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "produce":
        res = produce(a.bootstrap, a.topic, a.seconds, a.rate, a.keys, a.out, a.value_bytes)
    else:
        with open(a.history) as f:
            hist = json.load(f)["history"]
        res = check(hist, read_all(a.bootstrap, a.topic, a.partitions))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
