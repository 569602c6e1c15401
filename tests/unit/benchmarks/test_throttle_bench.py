"""The pure part of benchmarks/throttle_bench.py: a phase's latency figures from the load's samples, by send time
(acknowledged records only; failed deliveries counted apart)."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_spec = importlib.util.spec_from_file_location("throttle_bench", os.path.join(ROOT, "benchmarks", "throttle_bench.py"))
assert _spec and _spec.loader
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)


def test_a_phase_takes_the_records_sent_in_it_and_counts_failures_apart():
    samples = [[100.0 + i / 100, float(i % 10 + 1)] for i in range(1000)]  # 10 s at 100/s, 1-10 ms
    samples += [[104.0, -1.0], [99.0, 500.0], [110.0, 500.0]]  # a failure inside, two records outside
    q = tb.quantiles(samples, 100.0, 110.0)
    assert (q["records"], q["errors"], q["seconds"]) == (1000, 1, 10.0)
    assert (q["p50_ms"], q["max_ms"]) == (5.5, 10.0) and q["p99_ms"] == 10.0


def test_a_phase_with_too_few_records_gives_only_its_counts():
    assert tb.quantiles([[1.0, 3.0], [1.5, -1.0]], 0.0, 2.0) == {"records": 1, "errors": 1}
