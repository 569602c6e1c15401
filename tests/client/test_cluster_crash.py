"""`rafka cluster start` after the head it recorded crashed: the dead head's leftover processes (its raylet
and the broker workers still holding the log directories) are ended before a new head starts, so two
broker sets never open one log directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rafka.cli.clusterctl import pid_alive, proc_table, ray_processes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RAFKA = str(Path(sys.executable).with_name("rafka"))


def test_start_after_a_crashed_head_ends_its_leftovers_first(tmp_path):
    home = tmp_path / "home"
    data = tmp_path / "data"
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "RAFKA_HOME": str(home), "LANG": "C.UTF-8"}

    def run(*args, stdin=None, check=True, timeout=180):
        proc = subprocess.run([RAFKA, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"rafka {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    start = ("cluster", "start", "--brokers", "1", "--data-dir", str(data), "--num-cpus", "1", "--json")
    first = json.loads(run(*start).stdout)
    old = set()
    try:
        run("topic", "create", "kept", "-p", "1", "-r", "1")
        assert json.loads(run("topic", "produce", "kept", "--json", stdin="a\nb\n").stdout)["produced"] == 2
        old = ray_processes(first["temp_dir"])
        cmd, _ = proc_table()
        gcs = [p for p in old if "gcs_server" in cmd.get(p, "")]
        brokers = [p for p in old if "BrokerActor" in cmd.get(p, "")]
        assert gcs and brokers
        for p in gcs:  # the head crashes: its GCS is gone, its raylet and workers linger
            os.kill(p, signal.SIGKILL)
        time.sleep(1)
        assert all(pid_alive(p) for p in brokers), "the old broker should still hold its log directory"
        t0 = time.monotonic()
        second = json.loads(run(*start).stdout)
        print(f"\nstart after a crashed head: {time.monotonic() - t0:.1f}s")
        assert second["temp_dir"] != first["temp_dir"]
        left = [p for p in old if pid_alive(p)]
        assert not left, f"processes of the crashed head still running: {left}"
        out = run("topic", "consume", "kept", "-n", "2").stdout.splitlines()
        assert [json.loads(x)["value"] for x in out] == ["a", "b"]
    finally:
        run("cluster", "stop", check=False)
        for p in old:
            if pid_alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
