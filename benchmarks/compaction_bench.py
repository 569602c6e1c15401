"""What a compaction pass costs the partitions beside it: produce latency on a partition hosted in the same
process (a ReplicaHost, the default) while another partition's log is compacted, against the same partition's
latency before the pass.

    .venv/bin/python benchmarks/compaction_bench.py --json [--records 1000000] [--keys 2000]

One broker (so both partitions share one ReplicaHost), topic ``big`` (1 partition, RF 1, ``segment.bytes``
8 MiB, ``cleanup.policy`` delete while it fills) filled with ``--records`` keyed records over ``--keys`` keys
(100 B values), and topic ``live`` (1 partition, RF 1). A probe thread produces to ``live`` one record at a
time (acks=1, linger 0, each send waited for) the whole run. After ``--baseline-s`` of baseline, ``big``'s
``cleanup.policy`` is set to compact: its next cleaner tick (``log.cleaner.backoff.ms`` 200) compacts every
closed segment. Prints the probe's latency p50/p99/max before the change (``baseline``) and from the change
until the replica reports the pass done (``until_pass_done``: the wait for the tick, the pass, the poll), the
probe sends in each, and the pass's duration (the replica's ``compaction_last_pass_ms``, where reported) and
records removed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray  # noqa: E402

import rafka  # noqa: E402
from actors.channels.replica_lookup import replica_handle  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402


def quantiles(xs: list[float]) -> dict:
    if len(xs) < 2:
        return {"sends": len(xs)}
    q = statistics.quantiles(xs, n=100)
    return {"sends": len(xs), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2), "max_ms": round(max(xs), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--baseline-s", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = claim_stdout()
    conf = {"log.cleaner.backoff.ms": 200}
    with rafka.LocalCluster(brokers=1, broker_config=conf) as cluster:
        admin = rafka.Admin(cluster)
        admin.create_topic(
            "big",
            1,
            1,
            {"cleanup.policy": "delete", "segment.bytes": str(8 << 20)},
        )
        admin.create_topic("live", 1, 1)
        value = os.urandom(100)
        p = rafka.Producer(cluster, acks=1)
        for i in range(0, a.records, 50_000):
            p.send_batch("big", [(b"key-%06d" % ((i + j) % a.keys), value) for j in range(min(50_000, a.records - i))])
        p.flush()
        big = replica_handle(cluster.name, "big", 0, cluster.broker_ids()[0])
        live_p = rafka.Producer(cluster, acks=1, linger_ms=0)
        samples: list[tuple[float, float]] = []  # (send time, latency ms)
        stop = threading.Event()

        def probe() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                live_p.send("live", value).get(timeout=30)
                samples.append((t, (time.perf_counter() - t) * 1000))

        th = threading.Thread(target=probe, daemon=True)
        th.start()
        time.sleep(a.baseline_s)
        altered = time.perf_counter()
        admin.alter_configs("big", set={"cleanup.policy": "compact"})
        deadline = altered + 600
        stats: dict = {}
        while time.perf_counter() < deadline:
            stats = ray.get(big.state.remote(), timeout=30)["stats"]
            if stats.get("compaction_passes"):
                break
            time.sleep(0.05)
        done = time.perf_counter()
        time.sleep(1.0)
        stop.set()
        th.join(60)
        live_p.close()
        p.close()
        result = {
            "benchmark": "compaction_cohosted_latency",
            "records": a.records,
            "keys": a.keys,
            "pass_ms": stats.get("compaction_last_pass_ms"),
            "records_removed": stats.get("compaction_records_removed"),
            "baseline": quantiles([ms for t, ms in samples if t < altered]),
            "until_pass_done_s": round(done - altered, 2),
            "until_pass_done": quantiles([ms for t, ms in samples if altered <= t <= done]),
        }
    print(json.dumps(result) if a.json else json.dumps(result, indent=1), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
