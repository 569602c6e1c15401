"""Ray Data and Spark (RayDP) over rafka topics, on an embedded 3-broker LocalCluster.

    python benchmarks/spark_bench.py --json [--records 1000000] [--job-events 200000]

A topic of 6 partitions (RF 3) is filled with ``--records`` records of 100 bytes, then:

- ``direct_read`` vs ``consumer_read``: six read tasks (one per partition, warm workers) through the
  datasource's read path (8 MiB fetches decoded straight into Arrow columns) and through
  ``rafka.Consumer`` (assign + seek + poll, records into Arrow columns): rows/s;
- ``ray_read``: topic -> Ray Dataset end to end (``TopicDatasource``, materialized): rows/s;
- ``to_spark``: topic -> Spark DataFrame (``topic_to_spark``): seconds until the DataFrame exists and
  rows/s of ``count()`` on it;
- ``from_spark``: Spark DataFrame -> topic (``spark_to_topic``, key + value columns): rows/s;
- ``clickstream``: the clickstream job over ``--job-events`` generated click events (6 partitions):
  records/s of one run (read, page counts, sessions, Parquet, results topic, commit).

Figures swing with machine load: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
import ray  # noqa: E402

import rafka  # noqa: E402
from rafka import TopicPartition  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

VALUE_BYTES = 100


def fill(cluster, topic: str, n: int) -> dict:
    """``n`` keyed 100-byte records with acks=all; waits until the high watermarks cover them."""
    payload = os.urandom(VALUE_BYTES)
    t = time.monotonic()
    with rafka.Producer(cluster, acks="all", linger_ms=10, batch_size=262144) as p:
        for i in range(n):
            p.send(topic, payload, key=str(i % 1000).encode())
        p.flush()
    return {
        "records": n,
        "elapsed_s": round(time.monotonic() - t, 2),
        "records_per_s": round(n / (time.monotonic() - t)),
    }


@ray.remote(num_cpus=0.5)
def _consumer_read(cluster: str, topic: str, partition: int, start: int, end: int) -> int:
    """One partition through ``rafka.Consumer`` into an Arrow table of the datasource's schema."""
    from jobs.datasource import SCHEMA

    c = rafka.Consumer(cluster, max_poll_records=100000, max_partition_fetch_bytes=8 << 20)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    c.seek(tp, start)
    cols: dict[str, list] = {n: [] for n in ("offset", "timestamp", "key", "value")}
    pos = start
    while pos < end:
        for r in c.poll(timeout_ms=1000).get(tp, []):
            if r.offset >= end:
                break
            cols["offset"].append(r.offset)
            cols["timestamp"].append(r.timestamp)
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            pos = r.offset + 1
    c.close()
    n = len(cols["offset"])
    table = pa.table(
        {
            "topic": pa.array([topic] * n),
            "partition": pa.array([partition] * n, pa.int32()),
            **{k: pa.array(v, SCHEMA.field(k).type) for k, v in cols.items()},
            "headers": pa.array([[]] * n, SCHEMA.field("headers").type),
        },
        schema=SCHEMA,
    )
    return table.num_rows


@ray.remote(num_cpus=0.5)
def _direct_read(cluster: str, topic: str, partition: int, start: int, end: int) -> int:
    """One partition through the datasource's read path (``read_partition``: big fetches, decode to Arrow)."""
    from jobs.datasource import read_partition

    return sum(t.num_rows for t in read_partition(cluster, topic, partition, start, end))


def _timed_tasks(fn, src, topic: str) -> tuple[int, float]:
    t = time.monotonic()
    rows = sum(ray.get([fn.remote(src.cluster, topic, p, s, e) for p, (s, e) in src.ranges.items()]))
    return rows, time.monotonic() - t


def bench_reads(cluster, topic: str, n: int) -> dict:
    """The same six read tasks two ways (after a warm-up pass that starts the workers), then the
    Dataset end to end (planning, Ray Data's executor, blocks in the object store)."""
    from jobs.datasource import TopicDatasource

    src = TopicDatasource(cluster, topic)
    _timed_tasks(_direct_read, src, topic)
    out = {}
    for name, fn in (("consumer_read", _consumer_read), ("direct_read", _direct_read)):
        rows, took = _timed_tasks(fn, src, topic)
        assert rows == n, f"{name} read {rows} of {n}"
        out[name] = {"rows": rows, "elapsed_s": round(took, 2), "rows_per_s": round(rows / took)}
    t = time.monotonic()
    ds = TopicDatasource(cluster, topic).to_dataset().materialize()
    rows = ds.count()
    took = time.monotonic() - t
    assert rows == n, f"read {rows} of {n}"
    out["ray_read"] = {
        "rows": rows,
        "elapsed_s": round(took, 2),
        "rows_per_s": round(rows / took),
        "blocks": ds.num_blocks(),
    }
    return out


def bench_spark(cluster, spark, topic: str, n: int) -> dict:
    from jobs.spark import spark_to_topic, topic_to_spark

    t = time.monotonic()
    df = topic_to_spark(spark, cluster, topic)
    first = time.monotonic() - t
    t = time.monotonic()
    rows = df.count()
    counted = time.monotonic() - t
    assert rows == n
    out = f"out-{uuid.uuid4().hex[:6]}"
    rafka.Admin(cluster).create_topic(out, 6, 3)
    t = time.monotonic()
    written = spark_to_topic(df.select("key", "value"), cluster, out)["records"]
    wrote = time.monotonic() - t
    assert written == n
    return {
        "to_spark": {
            "rows": rows,
            "first_dataframe_s": round(first, 2),
            "count_s": round(counted, 2),
            "rows_per_s": round(rows / (first + counted)),
        },
        "from_spark": {"rows": written, "elapsed_s": round(wrote, 2), "rows_per_s": round(written / wrote)},
    }


def bench_job(cluster, spark, events: int, out_dir: str) -> dict:
    from jobs import clickstream
    from jobs.demo import ClickStream

    topic = "clicks"
    rafka.Admin(cluster).create_topic(topic, 6, 3)
    stream = ClickStream(users=1000, seed=1)
    with rafka.Producer(cluster, linger_ms=10, batch_size=262144) as p:
        for k, v in stream.take(events):
            p.send(topic, v, key=k)
    summary = clickstream.run(cluster, spark, topic=topic, parquet_dir=out_dir)
    assert summary["records"] == events and sum(summary["pages"].values()) == events
    return {
        "clickstream": {
            "events": events,
            "elapsed_s": summary["elapsed_s"],
            "records_per_s": round(events / summary["elapsed_s"]),
            "sessions": summary["sessions"],
            "pages": len(summary["pages"]),
            "steps_s": summary["steps_s"],
        }
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--job-events", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stdout = claim_stdout()
    from jobs.spark import init_spark, stop_spark

    results: dict = {"records": args.records, "record_bytes": VALUE_BYTES, "partitions": 6, "replication_factor": 3}
    with (
        tempfile.TemporaryDirectory(prefix="rafka-spark-bench-") as tmp,
        rafka.LocalCluster(brokers=3, data_dir=os.path.join(tmp, "data")) as cluster,
    ):
        rafka.Admin(cluster).create_topic("bench", 6, 3)
        results["produce"] = fill(cluster, "bench", args.records)
        results.update(bench_reads(cluster, "bench", args.records))
        t = time.monotonic()
        spark = init_spark("rafka-bench")
        results["init_spark_s"] = round(time.monotonic() - t, 2)
        try:
            results.update(bench_spark(cluster, spark, "bench", args.records))
            results.update(bench_job(cluster, spark, args.job_events, os.path.join(tmp, "parquet")))
        finally:
            stop_spark()
    if args.json:
        print(json.dumps(results), file=stdout)
    else:
        for k, v in results.items():
            print(f"{k:16} {v}", file=stdout)


if __name__ == "__main__":
    main()
