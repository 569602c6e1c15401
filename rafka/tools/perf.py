"""``rafka perf``: the equivalents of ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``.

``produce_perf`` sends ``records`` records of ``record_size`` random-ish bytes as fast as the producer
takes them (or at ``throughput`` records/s), timing every 8th record from ``send`` to its
acknowledgement; ``consume_perf`` reads ``records`` records from the beginning of every partition.
Both return a dict of figures (records/s, MB/s, latency percentiles in ms) and can drive a progress
callback ``progress(done)``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from rafka.structs import TopicPartition

SAMPLE_EVERY = 8


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, max(0, int(round(q / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[i]


def produce_perf(
    cluster: Any,
    topic: str,
    records: int,
    record_size: int,
    throughput: int = -1,
    progress: Callable[[int], None] | None = None,
    key_count: int = 0,
    **producer_config: Any,
) -> dict:
    from rafka.producer.producer import Producer

    payloads = [os.urandom(record_size) for _ in range(64)]
    latencies: list[float] = []
    errors: list[BaseException] = []
    now = time.perf_counter

    def make_cb(sent_at: float):
        def cb(md, exc):
            if exc is not None:
                errors.append(exc)
            else:
                latencies.append((now() - sent_at) * 1000.0)

        return cb

    def err_cb(md, exc):
        if exc is not None:
            errors.append(exc)

    producer = Producer(cluster, **producer_config)
    try:
        producer.partitions_for(topic)  # metadata before the clock starts
        start = now()
        step = max(1, records // 200)
        for i in range(records):
            if throughput > 0:
                due = start + i / throughput
                delay = due - now()
                if delay > 0:
                    time.sleep(delay)
            key = None if not key_count else str(i % key_count).encode()
            cb = make_cb(now()) if i % SAMPLE_EVERY == 0 else err_cb
            producer.send(topic, payloads[i & 63], key=key, callback=cb)
            if progress is not None and i % step == 0:
                progress(i)
        producer.flush()
        elapsed = now() - start
    finally:
        producer.close()
    if progress is not None:
        progress(records)
    latencies.sort()
    return {
        "records": records,
        "record_size": record_size,
        "errors": len(errors),
        "first_error": str(errors[0]) if errors else None,
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(records * record_size / elapsed / 1e6, 2),
        "latency_avg_ms": round(sum(latencies) / len(latencies), 2) if latencies else 0.0,
        "latency_p50_ms": round(percentile(latencies, 50), 2),
        "latency_p95_ms": round(percentile(latencies, 95), 2),
        "latency_p99_ms": round(percentile(latencies, 99), 2),
        "latency_max_ms": round(latencies[-1], 2) if latencies else 0.0,
        "acks": producer.config.acks,
    }


def consume_perf(
    cluster: Any,
    topic: str,
    records: int,
    timeout_s: float = 60.0,
    progress: Callable[[int], None] | None = None,
    **consumer_config: Any,
) -> dict:
    from rafka.consumer.consumer import Consumer

    consumer = Consumer(cluster, auto_offset_reset="earliest", **consumer_config)
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        if not parts:
            raise ValueError(f"topic {topic!r} does not exist")
        consumer.assign([TopicPartition(topic, p) for p in parts])
        consumer.seek_to_beginning()
        for p in parts:
            consumer.position(TopicPartition(topic, p))
        got = nbytes = 0
        start = time.perf_counter()
        deadline = start + timeout_s
        last_report = 0
        while got < records and time.perf_counter() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=records - got)
            for recs in batch.values():
                got += len(recs)
                for r in recs:
                    if r.value is not None:
                        nbytes += len(r.value)
            if progress is not None and got - last_report >= max(1, records // 200):
                progress(got)
                last_report = got
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if progress is not None:
        progress(got)
    return {
        "records": got,
        "requested": records,
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(got / elapsed, 1) if elapsed else 0.0,
        "mb_per_s": round(nbytes / elapsed / 1e6, 2) if elapsed else 0.0,
        "timed_out": got < records,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m rafka.tools.perf``: the three client figures on an embedded 3-broker cluster, as JSON:
    acks=1 to RF 1, acks=all (idempotent) to RF 3 with min.insync.replicas 2, and consume."""
    import argparse
    import json

    from rafka.admin.admin import Admin
    from rafka.cluster import LocalCluster

    ap = argparse.ArgumentParser(prog="python -m rafka.tools.perf")
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--latency-rate", type=int, default=5000, help="records/s of the moderate-load latency run")
    args = ap.parse_args(argv)
    from rafka.output import claim_stdout

    stdout, out = claim_stdout(), {}
    with LocalCluster(brokers=3) as cluster:
        admin = Admin(cluster)
        admin.create_topic("perf-rf1", args.partitions, 1)
        admin.create_topic("perf-rf3", args.partitions, 3, {"min.insync.replicas": "2"})
        out["produce_acks1_rf1"] = produce_perf(
            cluster, "perf-rf1", args.records, args.record_size, acks=1, batch_size=args.batch_size
        )
        out["produce_acksall_rf3"] = produce_perf(
            cluster, "perf-rf3", args.records, args.record_size, acks="all", batch_size=args.batch_size
        )
        out["consume_rf1"] = consume_perf(cluster, "perf-rf1", args.records)
        out["latency_acksall_rf3_moderate"] = produce_perf(
            cluster,
            "perf-rf3",
            args.latency_rate * 5,
            args.record_size,
            throughput=args.latency_rate,
            acks="all",
            linger_ms=1,
        )
    print(json.dumps(out, indent=2), file=stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
