"""`rafka verify`, the shipped no-loss checker, in its short form: one fault of every kind (broker SIGKILL,
replica SIGKILL, controller SIGKILL, SIGSTOP pause, whole-cluster restart) against a real 3-broker
cluster under an idempotent acks=all workload; nothing acknowledged may be lost, duplicated, reordered or
moved, and every partition must take writes again within the recovery bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rafka.tools.nemesis import KINDS
from rafka.tools.verify import VerifyConfig, format_report, run_verify

RAFKA = str(Path(sys.executable).with_name("rafka"))


@pytest.mark.cluster
@pytest.mark.slow
def test_verify_short_nemesis_run(fault_cluster):
    """On the fault suites' shared 3-broker cluster (tests/client/faults/conftest.py; replica.lag.time.max.ms 3 s):
    the last user of that cluster in this package, so its whole-cluster restart disturbs no other test."""
    cluster = fault_cluster
    cfg = VerifyConfig(
        partitions=3,
        keys=30,
        rate=400,
        faults=len(KINDS),
        kinds=KINDS,
        # calm time after each fault: run_verify already waits for every partition's full ISR before it, so
        # this is only the workload's time to get acks through the healed cluster (~200 records at 400/s)
        interval_s=0.5,
        down_s=2.0,
        pause_s=4.0,
        max_recovery_s=30.0,
        settle_s=60.0,
        seed=7,
    )
    rep = run_verify(cluster, cluster.server, cfg)
    print(format_report(rep))
    assert sorted(f["kind"] for f in rep["faults"]) == sorted(KINDS)
    assert rep["acknowledged"] > 1000, rep
    assert rep["ok"], json.dumps({k: rep[k] for k in ("violations", "faults", "examples")}, indent=1)
    assert (rep["lost"], rep["duplicated"], rep["reordered"], rep["moved"]) == (0, 0, 0, 0)
    assert all(f["writable_s"] is not None for f in rep["faults"])


def test_verify_usage_errors():
    for args in (["--nemesis", "meteor"], ["--faults", "-3"], ["--rate", "0"], ["-p", "x"]):
        proc = subprocess.run([RAFKA, "verify", "--local", *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        assert "usage" in proc.stderr.lower(), proc.stderr
