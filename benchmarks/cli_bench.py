"""How long each `rafka` CLI verb takes against a running cluster, through the cluster's CLI agent (the
default: the verb runs in an actor already attached to Ray, rafka/cli/remote.py) and attached to Ray itself
(``RAFKA_CLI_AGENT=0``), side by side in one run, each verb a fresh `rafka` process as a user runs it.

    python benchmarks/cli_bench.py --json [--brokers 3] [--repeat 5]

Starts its own cluster with `rafka cluster start` under a temporary RAFKA_HOME and stops it at the end.
Prints one JSON object: per verb the median and max wall time in seconds of each path, and the start and
stop times. Issue 18's goal: every verb against a running cluster well under a second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAFKA = str(Path(sys.executable).with_name("rafka"))

VERBS = [
    ("topic list", ["topic", "list"]),
    ("topic describe", ["topic", "describe", "bench"]),
    ("group list", ["group", "list"]),
    ("group describe", ["group", "describe", "bench-g"]),
    ("cluster info", ["cluster", "info"]),
    ("cluster health", ["cluster", "health"]),
    ("cluster configs", ["cluster", "configs", "--broker", "0"]),
    ("txn list", ["txn", "list"]),
    ("produce 10 records", ["topic", "produce", "bench"]),
    ("consume 10 records", ["topic", "consume", "bench", "-n", "10"]),
    ("topic create 1 x RF 3 / add-partitions / delete", None),  # three rows: each verb timed on its own
]
LIFECYCLE = ("topic create 1 x RF 3", "topic add-partitions +1", "topic delete")


def _run(env: dict, args: list[str], stdin: str | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([RAFKA, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"rafka {' '.join(args)} -> {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="rafka-cli-bench-")
    env = {**os.environ, "RAFKA_HOME": home}
    env.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    _run(env, ["cluster", "start", "--brokers", str(a.brokers), "--data-dir", os.path.join(home, "data")])
    out: dict = {"brokers": a.brokers, "repeat": a.repeat, "cluster_start_s": round(time.perf_counter() - t0, 2)}
    try:
        _run(env, ["topic", "create", "bench", "-p", "3", "-r", str(min(3, a.brokers))])
        _run(env, ["topic", "produce", "bench"], stdin="".join(f"v{i}\n" for i in range(100)))
        _run(env, ["topic", "consume", "bench", "-g", "bench-g", "-n", "10"])
        paths = {"agent": env, "ray": {**env, "RAFKA_CLI_AGENT": "0"}}
        verbs: dict = {}
        rf = str(min(3, a.brokers))
        for name, args in VERBS:
            rows: dict = {n: {} for n in (LIFECYCLE if args is None else (name,))}
            for path, penv in paths.items():  # interleaved: the two paths see the same machine state
                times: dict = {n: [] for n in rows}
                for i in range(a.repeat):
                    if args is None:  # a topic's life: create (replicas on 3 brokers), grow, delete
                        t = f"bench-{path}-{i}"
                        times[LIFECYCLE[0]].append(_run(penv, ["topic", "create", t, "-p", "1", "-r", rf]))
                        times[LIFECYCLE[1]].append(_run(penv, ["topic", "add-partitions", t, "-n", "1"]))
                        times[LIFECYCLE[2]].append(_run(penv, ["topic", "delete", t]))
                    else:
                        stdin = "".join(f"r{j}\n" for j in range(10)) if "produce" in args else None
                        times[name].append(_run(penv, args, stdin))
                for n, ts in times.items():
                    rows[n][path] = {"median_s": round(statistics.median(ts), 3), "max_s": round(max(ts), 3)}
            for n, row in rows.items():
                row["speedup"] = round(row["ray"]["median_s"] / row["agent"]["median_s"], 1)
                verbs[n] = row
        out["verbs"] = verbs
        out["agent_median_of_medians_s"] = round(statistics.median(v["agent"]["median_s"] for v in verbs.values()), 3)
        out["agent_worst_max_s"] = max(v["agent"]["max_s"] for v in verbs.values())
        out["ray_median_of_medians_s"] = round(statistics.median(v["ray"]["median_s"] for v in verbs.values()), 3)
    finally:
        t1 = time.perf_counter()
        subprocess.run([RAFKA, "cluster", "stop"], capture_output=True, env=env, timeout=120)
        out["cluster_stop_s"] = round(time.perf_counter() - t1, 2)
    if a.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
