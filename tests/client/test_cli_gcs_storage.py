"""`rafka cluster start --redis-address`: the head it starts keeps its GCS tables in that Redis (Ray's GCS fault
tolerance) under a namespace of its own, recorded in the state file; `rafka cluster stop` deletes them. A Redis that
does not answer, or the option beside --address, is a clear error before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RAFKA = str(Path(sys.executable).with_name("rafka"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis(tmp_path):
    """A redis-server on loopback (the Debian package .ci/system-deps.sh installs); its port."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: run .ci/system-deps.sh test")
    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while _redis(port, "ping") != "PONG":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.kill()
        proc.wait()


def _redis(port: int, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30
    ).stdout.strip()


def test_start_keeps_the_gcs_in_redis_and_stop_deletes_it(tmp_path, redis):
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "RAFKA_HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}

    def run(*args, stdin=None, check=True):
        proc = subprocess.run([RAFKA, *args], input=stdin, capture_output=True, text=True, env=env, timeout=180)
        if check and proc.returncode != 0:
            raise AssertionError(f"rafka {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    base = ("cluster", "start", "--brokers", "1", "--data-dir", str(tmp_path / "data"), "--num-cpus", "1")
    # no Redis there: refused before any Ray process starts, naming the address
    nobody = f"127.0.0.1:{_free_port()}"
    bad = run(*base, "--redis-address", nobody, check=False)
    assert bad.returncode != 0 and f"no Redis answers at {nobody}" in bad.stderr, bad.stderr
    assert not (tmp_path / "home" / "cluster.json").exists()
    bad = run(*base, "--redis-address", "nocolon", check=False)
    assert bad.returncode != 0 and "HOST:PORT" in bad.stderr, bad.stderr
    bad = run(*base, "--address", "127.0.0.1:1", "--redis-address", f"127.0.0.1:{redis}", check=False)
    assert bad.returncode == 2 and "--redis-address is for the head" in bad.stderr, bad.stderr

    info = json.loads(run(*base, "--redis-address", f"127.0.0.1:{redis}", "--json").stdout)
    try:
        storage = info["gcs_storage"]
        assert storage["redis_address"] == f"127.0.0.1:{redis}"
        keys = _redis(redis, "--scan", "--pattern", f"*{storage['namespace']}*").splitlines()
        assert keys, "the GCS wrote nothing to Redis"  # its node and actor tables live there now
        run("topic", "create", "ft", "-p", "1", "-r", "1")
        assert json.loads(run("topic", "produce", "ft", "--json", stdin="a\nb\n").stdout)["produced"] == 2
        assert [json.loads(x)["value"] for x in run("topic", "consume", "ft", "-n", "2").stdout.splitlines()] == [
            "a",
            "b",
        ]
    finally:
        run("cluster", "stop", check=False)
    assert _redis(redis, "--scan", "--pattern", f"*{storage['namespace']}*") == ""
