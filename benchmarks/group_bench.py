"""Consumer-group throughput and rebalance time on an embedded 3-broker LocalCluster.

    python benchmarks/group_bench.py --json [--records 200000] [--partitions 6]

(a) ``group_consume``: a topic of ``--partitions`` partitions (RF 3) pre-filled with ``--records``
100-byte records; ``--members`` consumers (one thread each, same ``group_id``, manual commits every
``--commit-every`` polls) consume until every partition's highest consumed offset reaches its log end.
Reports records/s (distinct records over the wall time from ``subscribe`` to the last record, which
includes the initial join), records delivered (a rebalance can re-deliver uncommitted ones), commits.

(b) ``rebalance``: a group of 3 polling members, then 3 -> 4 (a member subscribes) and 4 -> 2 (two
members ``close()``, i.e. LeaveGroup). Time from the join/leave until every remaining member reports
the same new generation, the assignments are disjoint and cover every partition, and
``Admin.describe_groups`` says ``Stable``. Group timings are shortened (broker
``group.initial.rebalance.delay.ms``, consumer heartbeat interval) and reported in the output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rafka  # noqa: E402
from protocol.errors import (
    KafkaError,  # noqa: E402
    TopicAlreadyExistsError,  # noqa: E402
)
from rafka import TopicPartition  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

VALUE_BYTES = 100
BROKER_CONFIG = {
    "group.min.session.timeout.ms": 500,
    "group.initial.rebalance.delay.ms": 100,
    "offsets.topic.num.partitions": 3,
    "replica.lag.time.max.ms": 10000,
}
CONSUMER = dict(
    session_timeout_ms=6000,
    heartbeat_interval_ms=200,
    max_poll_interval_ms=30000,
    auto_offset_reset="earliest",
    enable_auto_commit=False,
)


def prefill(cluster, topic: str, n: int) -> float:
    payload = os.urandom(VALUE_BYTES)
    t = time.monotonic()
    with rafka.Producer(cluster, acks=1, linger_ms=5, batch_size=65536) as p:
        for i in range(n):
            p.send(topic, payload, key=str(i % 1000).encode())
        p.flush()
    # acks=1: the high watermark (what consumers can read) follows once the followers caught up
    admin = rafka.Admin(cluster)
    tps = {TopicPartition(topic, p): "latest" for p in range(len(admin.describe_topics([topic])[0]["partitions"]))}
    deadline = time.monotonic() + 120
    while sum(o.offset for o in admin.list_offsets(tps).values()) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("high watermarks did not reach the records produced")
        time.sleep(0.05)
    return time.monotonic() - t


class Member(threading.Thread):
    """One consumer polling in its own thread; publishes (generation, assignment) after every poll."""

    def __init__(self, cluster, group: str, topic: str, commit_every: int, on_records=None):
        super().__init__(daemon=True)
        self.consumer = rafka.Consumer(cluster, group_id=group, **CONSUMER)
        self.topic, self.commit_every, self.on_records = topic, commit_every, on_records
        self.stop_flag = threading.Event()
        self.close_on_stop = True
        self.state: tuple[int, frozenset] = (-1, frozenset())
        self.delivered = 0
        self.commits = 0
        self.commit_errors = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        c = self.consumer
        try:
            c.subscribe([self.topic])
            polls = 0
            while not self.stop_flag.is_set():
                got = c.poll(timeout_ms=100)
                self.state = (c.group_metadata()["generation_id"], frozenset(c.assignment()))
                n = sum(len(v) for v in got.values())
                self.delivered += n
                if n and self.on_records is not None:
                    self.on_records(got)
                polls += 1
                if self.commit_every and polls % self.commit_every == 0 and c.assignment():
                    try:
                        c.commit()
                        self.commits += 1
                    except KafkaError:
                        self.commit_errors += 1  # rebalance in progress: the next poll rejoins
        except BaseException as e:  # noqa: BLE001 - reported in the JSON
            self.error = e
        finally:
            if self.close_on_stop:
                c.close()


def group_consume(cluster, topic: str, partitions: int, members: int, commit_every: int, timeout_s: float) -> dict:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp: o.offset for tp, o in rafka.Admin(cluster).list_offsets({tp: "latest" for tp in tps}).items()}
    total = sum(ends.values())
    lock = threading.Lock()
    high = {tp: 0 for tp in tps}
    done = threading.Event()

    first = []

    def on_records(got):
        with lock:
            if not first:
                first.append(time.monotonic())
            for tp, recs in got.items():
                high[tp] = max(high[tp], recs[-1].offset + 1)
            if all(high[tp] >= ends[tp] for tp in tps):
                done.set()

    group = "bench-" + uuid.uuid4().hex[:8]
    ms = [Member(cluster, group, topic, commit_every, on_records) for _ in range(members)]
    t0 = time.monotonic()
    for m in ms:
        m.start()
    finished = done.wait(timeout_s)
    dt = time.monotonic() - t0
    for m in ms:
        m.stop_flag.set()
    for m in ms:
        m.join(30)
    delivered = sum(m.delivered for m in ms)
    errors = [repr(m.error) for m in ms if m.error]
    return {
        "members": members,
        "records": total,
        "completed": finished,
        "seconds": round(dt, 2),
        "records_per_s": round(total / dt) if finished else None,
        "mb_per_s": round(total * VALUE_BYTES / dt / 1e6, 2) if finished else None,
        "first_record_after_s": round(first[0] - t0, 2) if first else None,
        "records_per_s_after_first_record": round(total / (t0 + dt - first[0])) if finished and first else None,
        "records_delivered": delivered,
        "redelivered": delivered - total,
        "commit_every_polls": commit_every,
        "commits": sum(m.commits for m in ms),
        "commit_errors": sum(m.commit_errors for m in ms),
        "errors": errors,
    }


def wait_settled(admin, group: str, ms: list[Member], partitions: int, after_gen: int, timeout_s: float):
    """Seconds until every member in ``ms`` has one generation > ``after_gen``, the assignments are
    disjoint and complete, and the coordinator reports Stable; (None, gen) on timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        states = [m.state for m in ms]
        gens = {g for g, _ in states}
        owned = [a for _, a in states]
        union = frozenset().union(*owned)
        if len(gens) == 1 and min(gens) > after_gen and sum(len(a) for a in owned) == len(union) == partitions:
            t_members = time.monotonic() - t0
            while time.monotonic() - t0 < timeout_s:
                (d,) = admin.describe_groups([group])
                if d["state"] == "Stable":
                    return time.monotonic() - t0, t_members, gens.pop()
                time.sleep(0.01)
            break
        time.sleep(0.005)
    return None, None, max(g for g, _ in (m.state for m in ms))


def rebalance(cluster, topic: str, partitions: int, timeout_s: float) -> dict:
    admin = rafka.Admin(cluster)
    group = "bench-rb-" + uuid.uuid4().hex[:8]
    ms = [Member(cluster, group, topic, 0) for _ in range(3)]
    t0 = time.monotonic()
    for m in ms:
        m.start()
    initial, _, gen = wait_settled(admin, group, ms, partitions, -1, timeout_s)
    out = {"initial_join_3_s": None if initial is None else round(initial, 3)}
    if initial is None:
        out["error"] = f"3 members did not settle in {timeout_s}s ({time.monotonic() - t0:.1f}s)"
        return out
    # 3 -> 4
    m4 = Member(cluster, group, topic, 0)
    ms.append(m4)
    m4.start()
    s, members_s, gen2 = wait_settled(admin, group, ms, partitions, gen, timeout_s)
    out["join_3_to_4_s"] = None if s is None else round(s, 3)
    out["join_3_to_4_members_assigned_s"] = None if members_s is None else round(members_s, 3)
    out["sizes_after_join"] = sorted(len(m.state[1]) for m in ms)
    if s is None:
        out["error"] = "3->4 did not settle"
    else:
        # 4 -> 2: two members close() (LeaveGroup); the timer starts as the first one begins to leave
        leaving, ms = ms[:2], ms[2:]
        t = time.monotonic()
        for m in leaving:
            m.stop_flag.set()
        for m in leaving:
            m.join(30)
        close_s = time.monotonic() - t
        s2, members_s2, _ = wait_settled(admin, group, ms, partitions, gen2, timeout_s)
        out["leave_4_to_2_s"] = None if s2 is None else round(s2 + close_s, 3)
        out["leave_4_to_2_members_assigned_s"] = None if members_s2 is None else round(members_s2 + close_s, 3)
        out["leave_close_calls_s"] = round(close_s, 3)
        out["sizes_after_leave"] = sorted(len(m.state[1]) for m in ms)
        if s2 is None:
            out["error"] = "4->2 did not settle"
    for m in ms:
        m.stop_flag.set()
    for m in ms:
        m.join(30)
    out["errors"] = [repr(m.error) for m in ms if m.error]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--commit-every", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()
    stdout = claim_stdout()
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rafka-gbench-") as d:
        cluster = rafka.LocalCluster(
            brokers=3, data_dir=d, name="gbench" + uuid.uuid4().hex[:6], broker_config=BROKER_CONFIG
        )
        try:
            start_s = time.monotonic() - t
            admin = rafka.Admin(cluster)
            topic = "gbench-" + uuid.uuid4().hex[:8]
            try:
                admin.create_topic(topic, num_partitions=args.partitions, replication_factor=3)
            except TopicAlreadyExistsError:
                pass  # a retried CreateTopics whose first attempt went through (the name is ours alone)
            fill_s = prefill(cluster, topic, args.records)
            # the first group lookup creates __consumer_offsets and loads its coordinators: a one-time
            # cost, timed here and kept out of the group figures
            t = time.monotonic()
            admin.describe_groups(["bench-warmup"])
            warm_s = time.monotonic() - t
            res = {
                "brokers": 3,
                "partitions": args.partitions,
                "replication_factor": 3,
                "value_bytes": VALUE_BYTES,
                "cluster_start_s": round(start_s, 2),
                "prefill": {
                    "records": args.records,
                    "seconds": round(fill_s, 2),
                    "records_per_s": round(args.records / fill_s),
                    "acks": 1,
                },
                "offsets_topic_warmup_s": round(warm_s, 2),
                "group_consume": group_consume(
                    cluster, topic, args.partitions, args.members, args.commit_every, args.timeout
                ),
                "rebalance": rebalance(cluster, topic, args.partitions, 60.0),
                "broker_group_config": BROKER_CONFIG,
                "consumer_config": {k: v for k, v in CONSUMER.items()},
                "cpus": os.cpu_count(),
            }
        finally:
            cluster.stop()
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    ok = res["group_consume"]["completed"] and not res["group_consume"]["errors"] and "error" not in res["rebalance"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
