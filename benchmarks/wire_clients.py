"""The librdkafka (confluent-kafka) side of benchmarks/wire_bench.py, run in a process of its own:

    python benchmarks/wire_clients.py produce|consume '{"bootstrap": ..., "topic": ..., ...}'

prints one JSON object (the figures). Why a process of its own: a Kafka client runs in the user's
application, not inside the process that holds a Ray driver and an embedded cluster. In that process
confluent-kafka's per-message objects (``Message``, its delivery callbacks) set off Python's cyclic collector,
which then walks the driver's whole heap: py-spy found 62% of the consuming thread in ``gc_collect_main``
under ``Message_new0``, and the same consumer read 0.95M records/s there against 1.36-1.47M in a process of
its own (one sitting). This module imports neither rafka nor Ray.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_util import CpuMeter  # noqa: E402

VALUE_BYTES = 100
PARTITIONS = 6
V4 = {"broker.address.family": "v4"}


def _q(lat: list[float]) -> dict:
    if not lat:
        return {}
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else lat * 99
    return {"p50_ms": round(statistics.median(lat), 2), "p99_ms": round(q[98], 2)}


def _rate(n: int, secs: float, value_bytes: int = VALUE_BYTES) -> dict:
    return {
        "records": n,
        "seconds": round(secs, 2),
        "records_per_s": round(n / secs),
        "mb_per_s": round(n * value_bytes / secs / 1e6, 1),
    }


def librdkafka_produce(
    bootstrap: str,
    topic: str,
    n: int,
    lat_n: int,
    errors_only: bool = False,
    partitions: int = PARTITIONS,
    value_bytes: int = VALUE_BYTES,
) -> dict:
    """``errors_only``: the throughput run with ``delivery.report.only.error`` (librdkafka reports failed
    messages only), so the client does not run a Python callback per message; the latency run always has
    one per message (it is what it measures). ``partitions``/``value_bytes``: the topic's partitions the records
    go round, and each record's value size (benchmarks/multinode_bench.py sets both)."""
    from confluent_kafka import Producer

    value = os.urandom(value_bytes)
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **V4}
    errors: list = []
    p = Producer(conf)
    # connections, metadata and the producer id first, outside the latency run (as rafka's below)
    for i in range(partitions):
        p.produce(topic, value, partition=i)
    p.flush(60)
    lat: list[float] = []
    for i in range(lat_n):  # paced (~1,000 records/s) on the idle cluster, before the throughput run
        t0 = time.perf_counter()
        p.produce(
            topic,
            value,
            partition=i % partitions,
            on_delivery=lambda e, _m, t0=t0: lat.append((time.perf_counter() - t0) * 1000),
        )
        p.poll(0)
        time.sleep(0.001)
    p.flush(60)
    if errors_only:
        p = Producer({**conf, "delivery.report.only.error": True, "on_delivery": lambda e, _m: errors.append(e)})
        p.produce(topic, value, partition=0)
        p.flush(60)
    t = time.monotonic()
    cpu = CpuMeter()
    for i in range(n):
        while True:
            try:
                if errors_only:
                    p.produce(topic, value, partition=i % partitions)
                else:
                    p.produce(topic, value, partition=i % partitions, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    out = _rate(n, time.monotonic() - t, value_bytes)
    out.update(cpu.stop(), **_q(lat), errors=len(errors) + left)
    return out


def librdkafka_consume(
    bootstrap: str, topic: str, n: int, partitions: int = PARTITIONS, value_bytes: int = VALUE_BYTES, **conf
) -> dict:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            **V4,
            **conf,
        }
    )
    c.assign([CTP(topic, p, 0) for p in range(partitions)])
    got = 0
    t = time.monotonic()
    cpu = CpuMeter()
    while got < n and time.monotonic() - t < 300:
        got += sum(1 for m in c.consume(num_messages=10000, timeout=1.0) if not m.error())
    out = {**_rate(got, time.monotonic() - t, value_bytes), **cpu.stop()}
    c.close()
    return {**out, "complete": got >= n}


def main() -> int:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    run = {"produce": librdkafka_produce, "consume": librdkafka_consume}[kind]
    print(json.dumps(run(**args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
