"""The Jepsen-style workload of the partition suite, run as a script in the client namespace (``python -m
rafka.testkit.jepsen_workload run|read ...``), all confluent-kafka (librdkafka): an idempotent acks=all producer of
numbered records ``<run>:<key>:<seq>`` (its delivery reports), a consumer reading concurrently (every record it
read, with the batch's leader epoch) that commits its positions in a group and reads the committed offsets back, a
transactional producer writing one record to each of two partitions per transaction (one in five aborted), and a
read_committed consumer of those. ``read`` reads the topics back after healing. The checks are rafka/tools/jepsen.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

TXN_ABORT_EVERY = 5  # every fifth transaction is aborted on purpose


def _consumer(bootstrap: str, group: str, **extra: Any):
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 1000,
        "socket.timeout.ms": 10000,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """The high watermark of each partition (where a run's records start)."""
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap, f"ends-{time.time()}")
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, q), timeout=30)[1] for q in range(partitions)]
    finally:
        c.close()


class Run:
    """One run's threads and their history; every list is appended to by one thread only."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.stop = threading.Event()
        self.produce: list[list] = []  # [key, seq, partition, offset, error name or "", sent, acked]
        self.reads: list[list] = []  # [partition, offset, value, leader epoch, read at]
        self.commits: list[list] = []  # [at, partition, offset, error or ""]: what the consumer committed
        self.committed: list[list] = []  # [at, partition, offset]: what OffsetFetch answered
        self.txns: list[list] = []  # [txn, "commit" | "abort" | "unknown: <error>", began, ended]
        self.txn_reads: list[list] = []  # [partition, offset, value, read at]
        self.errors: list[str] = []
        self.start_offsets = ends(a.bootstrap, a.topic, a.partitions)
        self.txn_start_offsets = ends(a.bootstrap, a.txn_topic, 2)
        self.sent = 0
        self.pos = list(self.start_offsets)  # the reader's positions
        self.txn_ready = threading.Event()  # the transactional producer has its producer id

    # -- the producer --
    def producer(self) -> None:
        from confluent_kafka import Producer

        a = self.a
        p = Producer(
            {
                "bootstrap.servers": a.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 20,
                "batch.num.messages": 2000,
                "message.timeout.ms": 120000,
                "socket.timeout.ms": 10000,
                "topic.metadata.refresh.interval.ms": 1000,
                "queue.buffering.max.messages": 200000,
            }
        )
        seqs = [0] * a.keys
        run = a.run

        def report(err, msg, key, seq, sent):
            self.produce.append(
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

        start, n = time.time(), 0
        while time.time() - start < a.seconds:
            due = start + n / a.rate
            if time.time() < due:
                p.poll(min(0.005, max(0.0, due - time.time())))
                continue
            k = n % a.keys
            seq = seqs[k]
            sent = time.time()
            try:
                p.produce(
                    a.topic,
                    key=f"k{k}".encode(),
                    value=f"{run}:{k}:{seq}".encode(),
                    on_delivery=lambda err, msg, k=k, seq=seq, sent=sent: report(err, msg, k, seq, sent),
                )
            except BufferError:
                p.poll(0.05)
                continue
            seqs[k] += 1
            n += 1
            if n % 200 == 0:
                p.poll(0)
        self.sent = n
        left = p.flush(180)
        if left:
            self.errors.append(f"producer: {left} records never reported")

    # -- the concurrent consumer, committing in a group --
    def consumer(self) -> None:
        from confluent_kafka import TopicPartition

        a = self.a
        c = _consumer(a.bootstrap, f"jepsen-{a.run}")
        tps = [TopicPartition(a.topic, q, self.start_offsets[q]) for q in range(a.partitions)]
        c.assign(tps)
        pos = self.pos = list(self.start_offsets)
        last_commit = last_fetch = time.time()
        try:
            while not self.stop.is_set():
                for m in c.consume(1000, 0.2):
                    if m.error() is not None:
                        continue
                    v = m.value().decode()
                    self.reads.append([m.partition(), m.offset(), v, m.leader_epoch(), time.time()])
                    pos[m.partition()] = m.offset() + 1
                now = time.time()
                if now - last_commit >= 0.5:
                    last_commit = now
                    offs = [TopicPartition(a.topic, q, pos[q]) for q in range(a.partitions)]
                    try:
                        c.commit(offsets=offs, asynchronous=False)
                        err = ""
                    except Exception as e:  # noqa: BLE001 - recorded: a failed commit is allowed
                        err = type(e).__name__ + ": " + str(e)[:200]
                    for q in range(a.partitions):
                        self.commits.append([now, q, pos[q], err])
                if now - last_fetch >= 1.0:
                    last_fetch = now
                    try:
                        got = c.committed([TopicPartition(a.topic, q) for q in range(a.partitions)], timeout=5)
                    except Exception as e:  # noqa: BLE001 - recorded: an unanswered OffsetFetch is allowed
                        self.errors.append(f"committed(): {type(e).__name__}: {str(e)[:200]}")
                        continue
                    t = time.time()
                    for tp in got:
                        if tp.error is None and tp.offset >= 0:
                            self.committed.append([t, tp.partition, tp.offset])
        finally:
            c.close()

    # -- transactions over two partitions --
    def transactions(self) -> None:
        from confluent_kafka import KafkaException, Producer

        a = self.a

        def make():
            p = Producer(
                {
                    "bootstrap.servers": a.bootstrap,
                    "transactional.id": f"jepsen-{a.run}",
                    "transaction.timeout.ms": 60000,
                    "linger.ms": 0,
                    "message.timeout.ms": 30000,
                    "socket.timeout.ms": 10000,
                    "topic.metadata.refresh.interval.ms": 1000,
                }
            )
            p.init_transactions(60)
            return p

        p = make()
        self.txn_ready.set()
        n = 0
        while not self.stop.is_set():
            began = time.time()
            abort = n % TXN_ABORT_EVERY == TXN_ABORT_EVERY - 1
            step = "begin"
            try:
                p.begin_transaction()
                for q in (0, 1):
                    p.produce(a.txn_topic, value=f"{a.run}:t{n}:{q}".encode(), partition=q)
                step = "abort" if abort else "commit"
                outcome = self._end(p, commit=not abort)
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    outcome = f"unknown: fatal {err.name()}"
                    p = make()  # a fatal error ends this instance; the next one fences it and aborts what it left
                elif err.retriable() and step == "commit":
                    outcome = self._end(p, commit=True, first=err)  # commit again: it may have gone through
                else:  # abortable (librdkafka's txn_requires_abort), or it failed before the commit
                    outcome = self._end(p, commit=False, first=err)
            self.txns.append([n, outcome, began, time.time()])
            n += 1

    def _end(self, p, commit: bool, first=None) -> str:
        """Commit or abort the current transaction with the same producer instance, asked again while the answer
        is retriable (librdkafka's rules: a second instance of the id would fence this one mid-way). The outcome:
        "commit"/"abort" once acknowledged, else "unknown: ..." (then the transaction may be either, but whole)."""
        from confluent_kafka import KafkaException

        errors = [first.name()] if first is not None else []
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if commit:
                    p.commit_transaction(30)
                    return "commit"
                p.abort_transaction(30)
                return "abort"
            except KafkaException as e:
                err = e.args[0]
                errors.append(err.name())
                if err.fatal():
                    return f"unknown: {', '.join(errors)}"
                if commit and err.txn_requires_abort():
                    commit = False  # the commit failed: abort it
                elif not err.retriable() and not err.txn_requires_abort():
                    return f"unknown: {', '.join(errors)}"
                time.sleep(0.2)
        return f"unknown: {', '.join(errors)} (gave up)"

    def txn_consumer(self) -> None:
        from confluent_kafka import TopicPartition

        a = self.a
        c = _consumer(a.bootstrap, f"jepsen-txn-{a.run}", **{"isolation.level": "read_committed"})
        c.assign([TopicPartition(a.txn_topic, q, self.txn_start_offsets[q]) for q in (0, 1)])
        try:
            while not self.stop.is_set():
                for m in c.consume(500, 0.2):
                    if m.error() is None:
                        self.txn_reads.append([m.partition(), m.offset(), m.value().decode(), time.time()])
        finally:
            c.close()

    def go(self) -> dict:
        threads = {
            name: threading.Thread(target=self._guard(name), name=name)
            for name in ("consumer", "transactions", "txn_consumer")
        }
        for t in threads.values():
            t.start()
        if not self.txn_ready.wait(180):
            self.errors.append("transactions: no producer id in 180 s")
        print("ready", flush=True)  # the driver times its fault from here
        self._guard("producer")()
        # the reader catches up with the last acknowledgements (20 s at most: it is a check, not a wait for ever)
        last = [-1] * self.a.partitions
        for row in self.produce:
            if not row[4]:
                last[row[2]] = max(last[row[2]], row[3])
        deadline = time.time() + 20
        while time.time() < deadline and any(p < e + 1 for p, e in zip(self.pos, last)):
            time.sleep(0.2)
        time.sleep(1)
        self.stop.set()
        for t in threads.values():
            t.join(240)
        return {
            "run": self.a.run,
            "topic": self.a.topic,
            "txn_topic": self.a.txn_topic,
            "partitions": self.a.partitions,
            "start_offsets": self.start_offsets,
            "txn_start_offsets": self.txn_start_offsets,
            "sent": self.sent,
            "produce": self.produce,
            "reads": self.reads,
            "commits": self.commits,
            "committed": self.committed,
            "txns": self.txns,
            "txn_reads": self.txn_reads,
            "errors": self.errors,
        }

    def _guard(self, name: str):
        def body():
            try:
                getattr(self, name)()
            except BaseException as e:  # noqa: BLE001 - a dead thread is a finding: reported
                self.errors.append(f"{name} died: {type(e).__name__}: {e}")
                self.stop.set()
                self.txn_ready.set()

        return body


def read_back(bootstrap: str, topic: str, partitions: int, start: list[int], isolation: str) -> dict:
    """Every record of every partition from ``start`` to the end it had when the read began: ``{partition:
    [[offset, value, leader epoch], ...]}`` (JSON keys are strings), and the ends."""
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap, f"read-{time.time()}", **{"isolation.level": isolation})
    hi = [c.get_watermark_offsets(TopicPartition(topic, q), timeout=30)[1] for q in range(partitions)]
    c.assign([TopicPartition(topic, q, start[q]) for q in range(partitions)])
    got: dict[int, list[list]] = {q: [] for q in range(partitions)}
    pos = list(start)
    deadline = time.time() + 600
    idle_since = time.time()
    # read_committed stops at the last stable offset: control records and aborted data leave the position short
    # of the high watermark, so it ends when nothing arrives for a while once the LSO is reached
    while any(pos[q] < hi[q] for q in range(partitions)):
        if time.time() > deadline:
            raise TimeoutError(f"read stopped at {pos}, short of the end offsets {hi}")
        batch = c.consume(2000, 0.5)
        if not batch and time.time() - idle_since > 10:
            if isolation == "read_committed":
                break
        for m in batch:
            if m.error() is None and m.offset() < hi[m.partition()]:
                got[m.partition()].append([m.offset(), m.value().decode(), m.leader_epoch()])
                pos[m.partition()] = m.offset() + 1
                idle_since = time.time()
    c.close()
    return {"log": got, "ends": hi}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="jepsen_workload")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("bootstrap")
    r.add_argument("--topic", required=True)
    r.add_argument("--txn-topic", required=True)
    r.add_argument("--partitions", type=int, required=True)
    r.add_argument("--run", required=True)
    r.add_argument("--seconds", type=float, default=30)
    r.add_argument("--rate", type=float, default=4000)
    r.add_argument("--keys", type=int, default=30)
    r.add_argument("--out", required=True)
    b = sub.add_parser("read")
    b.add_argument("bootstrap")
    b.add_argument("--topic", required=True)
    b.add_argument("--partitions", type=int, required=True)
    b.add_argument("--start", default="", help="comma-separated start offsets (default: 0 each)")
    b.add_argument("--isolation", default="read_uncommitted")
    b.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        res = Run(a).go()
    else:
        start = [int(x) for x in a.start.split(",")] if a.start else [0] * a.partitions
        res = read_back(a.bootstrap, a.topic, a.partitions, start, a.isolation)
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(json.dumps({k: (len(v) if isinstance(v, list | dict) else v) for k, v in res.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
