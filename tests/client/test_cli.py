"""The `rafka` CLI end to end, through subprocesses, against a cluster it starts itself (its own Ray head):
one `rafka cluster start` for the module (topic, perf, txn and serve verbs), stopped at its end."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.cluster

RAFKA = str(Path(sys.executable).with_name("rafka"))


def js(proc: subprocess.CompletedProcess):
    """The command's stdout as JSON; a failure shows what it printed."""
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not JSON:\n{proc.stdout}\n-- stderr --\n{proc.stderr}") from None


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    home = tmp_path_factory.mktemp("rafka-home")
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "RAFKA_HOME": str(home), "LANG": "C.UTF-8"}

    def run(*args, stdin: str | None = None, timeout: float = 120, check: bool = True):
        proc = subprocess.run([RAFKA, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"rafka {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    out = run("cluster", "start", "--brokers", "1", "--data-dir", str(home / "data"), "--num-cpus", "1", "--json")
    run.info = js(out)
    run.env = env
    yield run
    stopped = run("cluster", "stop", "--json", check=False)
    from rafka.clusterctl import ray_processes

    assert stopped.returncode == 0 and js(stopped)["killed"] > 0
    assert not ray_processes(run.info["temp_dir"]) and not Path(run.info["temp_dir"]).exists()


def test_start_attach_from_a_fresh_process(cli):
    info = cli.info
    assert info["brokers"] == 1 and Path(info["temp_dir"]).is_dir()
    code = (
        "import rafka, json; h = rafka.connect(%r); print(json.dumps(rafka.Admin(h).describe_cluster()))"
        % info["address"]
    )
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"}  # no RAFKA_HOME: only the address
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    desc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [b["id"] for b in desc["brokers"]] == [0] and desc["brokers"][0]["alive"]
    out = js(cli("cluster", "info", "--json"))
    assert out["address"] == info["address"] and out["controller_id"] == 0


def test_topic_lifecycle_and_round_trip(cli):
    cli("topic", "create", "events", "-p", "2", "-r", "1", "-c", "retention.ms=60000")
    assert js(cli("topic", "list", "--json")) == [{"name": "events", "partitions": 2, "replicas": 1}]
    lines = "".join(f"user-{i % 3}:click {i}\n" for i in range(6))
    produced = js(cli("topic", "produce", "events", "--key-separator", ":", "--json", stdin=lines))
    assert produced["produced"] == 6 and produced["failed"] == 0
    (desc,) = js(cli("topic", "describe", "events", "--json"))
    assert desc["configs"] == {"retention.ms": "60000"}
    assert sum(p["high_watermark"] for p in desc["partitions"]) == 6
    assert desc["effective_configs"]["retention.ms"] == "60000"
    recs = [json.loads(x) for x in cli("topic", "consume", "events", "-n", "6").stdout.splitlines()]
    assert sorted(r["value"] for r in recs) == sorted(f"click {i}" for i in range(6))
    for r in recs:  # one key, one partition
        assert all(o["partition"] == r["partition"] for o in recs if o["key"] == r["key"])
    text = cli("topic", "consume", "events", "-e", "-p", "0", "-f", "%k=%v\\n").stdout
    assert all("=" in line for line in text.splitlines())
    cli("topic", "add-partitions", "events", "-n", "1")
    assert len(js(cli("topic", "describe", "events", "--json"))[0]["partitions"]) == 3
    cli("topic", "alter-config", "events", "--set", "retention.ms=1000", "--delete", "nope.config", check=False)
    cli("topic", "alter-config", "events", "--set", "retention.ms=1000")
    assert js(cli("topic", "describe", "events", "--json"))[0]["configs"]["retention.ms"] == "1000"
    cli("topic", "delete", "events")
    assert js(cli("topic", "list", "--json")) == []


def test_errors_are_one_line_with_exit_codes(cli):
    bad = cli("topic", "describe", "missing", check=False)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("rafka: UnknownTopicOrPartitionError")
    cli("topic", "create", "dup")
    dup = cli("topic", "create", "dup", check=False)
    assert dup.returncode == 1 and "TopicAlreadyExistsError" in dup.stderr
    cfg = cli("topic", "create", "x", "-c", "no.such=1", check=False)
    assert cfg.returncode == 1 and "InvalidConfigError" in cfg.stderr and "no.such" in cfg.stderr
    usage = cli("topic", "create", "y", "-c", "novalue", check=False)
    assert usage.returncode == 2 and "key=value" in usage.stderr
    nowhere = cli("topic", "list", "--address", "127.0.0.1:1", check=False)
    assert nowhere.returncode == 3 and "no Ray cluster answers" in nowhere.stderr


def test_bad_partitions_counts_and_topic_names_fail_at_once(cli):
    """`consume -p 99` waited forever on a partition that does not exist, `-p -5` too; `perf produce
    --records -5` ran; producing to an illegal topic name waited max.block.ms (60 s). Each now fails at once
    with one line on stderr: 1 for what the cluster says, 2 for a usage error."""
    cli("topic", "create", "three", "-p", "3", "-r", "1")
    missing = cli("topic", "consume", "three", "-p", "1", "-p", "99", timeout=60, check=False)
    assert missing.returncode == 1 and missing.stdout == "" and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr == (
        "rafka: UnknownTopicOrPartitionError: topic 'three' has no partition 99 (its partitions are 0..2)\n"
    )
    for args, says in [
        (("topic", "consume", "three", "-p", "-5"), "-5 is not a valid index"),
        (("topic", "consume", "three", "-p", "1", "-g", "g"), "with --group"),
        (("topic", "consume", "three", "-n", "0"), "0 is not a positive number"),
        (("perf", "produce", "--topic", "three", "--records", "-5"), "-5 is not a positive number"),
        (("perf", "produce", "--topic", "three", "--records", "0"), "0 is not a positive number"),
        (("perf", "produce", "--topic", "three", "--records", "many"), "'many' is not an integer"),
        (("perf", "consume", "--topic", "three", "--records", "-1"), "-1 is not a positive number"),
        (("topic", "produce", "three", "-p", "-1"), "-1 is not a valid index"),
    ]:
        proc = cli(*args, timeout=60, check=False, stdin="")
        assert proc.returncode == 2 and says in proc.stderr and proc.stdout == "", (args, proc.stderr)
    for name in ("bad name", "..", "x" * 250):
        proc = cli("topic", "produce", name, stdin="v\n", timeout=30, check=False)
        assert proc.returncode == 1 and "InvalidTopicError" in proc.stderr, proc.stderr


def test_perf_json(cli):
    cli("topic", "create", "perf", "-p", "2", "-r", "1")
    res = js(
        cli(
            "perf",
            "produce",
            "--topic",
            "perf",
            "--records",
            "20000",
            "--record-size",
            "100",
            "--acks",
            "all",
            "--json",
        )
    )
    assert res["records"] == 20000 and res["errors"] == 0
    assert res["records_per_s"] > 0 and res["mb_per_s"] > 0
    assert 0 < res["latency_p50_ms"] <= res["latency_p99_ms"] <= res["latency_max_ms"]
    res = js(cli("perf", "consume", "--topic", "perf", "--records", "20000", "--json"))
    assert res["records"] == 20000 and res["bytes"] == 2_000_000 and not res["timed_out"]


PUBLISH_WARNINGS = """
import sys, time, ray, rafka
from ray._private.utils import publish_error_to_driver
rafka.connect(sys.argv[1])
while True:  # to every driver (job id nil), the way the raylet sends "N PYTHON worker processes ..." warnings
    publish_error_to_driver("rafka_test", "rafka-test: a cluster-wide warning", ray._private.worker.global_worker.gcs_client)
    time.sleep(0.2)
"""


def test_stdout_carries_only_the_commands_output(cli):
    """Ray's driver prints cluster-wide warnings (published to every driver, like the raylet's "N PYTHON worker
    processes have been started") on sys.stdout even with log_to_driver=False. A consumer that is attached
    while such warnings arrive still prints only its records on stdout; the warnings go to stderr."""
    cli("topic", "create", "quiet", "-p", "1", "-r", "1")
    consumer = subprocess.Popen(
        [RAFKA, "topic", "consume", "quiet", "-n", "3", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env,
    )
    publisher = subprocess.Popen(
        [sys.executable, "-c", PUBLISH_WARNINGS, cli.info["address"]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli.env,
    )
    err_lines: list[str] = []
    warned = threading.Event()

    def read_stderr():
        for line in consumer.stderr:
            err_lines.append(line)
            if "rafka-test: a cluster-wide warning" in line:
                warned.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert warned.wait(90), "the consumer never received the published warning:\n" + "".join(err_lines)
        cli("topic", "produce", "quiet", stdin="a\nb\nc\n")
        out, _ = consumer.communicate(timeout=60)
    finally:
        publisher.kill()
        consumer.kill()
        publisher.wait(timeout=30)
    reader.join(timeout=10)
    assert consumer.returncode == 0, "".join(err_lines)
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["a", "b", "c"], out


def test_txn_verbs_list_describe_and_abort_a_hanging_transaction(cli):
    cli("topic", "create", "hang", "-p", "1", "-r", "1")
    code = (
        "import os, rafka; h = rafka.connect(%r)\n"
        "p = rafka.Producer(h, transactional_id='cli-tx', linger_ms=1)\n"
        "p.init_transactions(timeout=90); p.begin_transaction()\n"
        "p.send('hang', value=b'open', partition=0).get(30)\n"
        "print(p.producer_id, flush=True); os._exit(0)  # dies with its transaction open\n"
    ) % cli.info["address"]
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout.strip().splitlines()[-1])
    listed = js(cli("txn", "list", "--json"))
    assert {"transactional_id": "cli-tx", "producer_id": pid, "state": "Ongoing"} in listed
    d = js(cli("txn", "describe", "cli-tx", "--json"))
    assert d["state"] == "Ongoing" and d["producer_id"] == pid and ["hang", 0] in [list(t) for t in d["topics"]]
    producers = js(cli("txn", "describe-producers", "--topic", "hang", "--partition", "0", "--json"))
    assert [p["current_txn_start_offset"] for p in producers if p["producer_id"] == pid] == [0]
    # its coordinator still has it Ongoing: not hanging
    assert js(cli("txn", "find-hanging", "--topic", "hang", "--partition", "0", "--max-age-ms", "0", "--json")) == []
    assert js(cli("txn", "abort-hanging", "--topic", "hang", "--max-age-ms", "0", "--json")) == []
    aborted = js(cli("txn", "abort", "--topic", "hang", "--partition", "0", "--producer-id", str(pid), "--json"))
    assert aborted["aborted_from"] == 0
    producers = js(cli("txn", "describe-producers", "--topic", "hang", "--partition", "0", "--json"))
    assert [p["current_txn_start_offset"] for p in producers if p["producer_id"] == pid] == [-1]
    bad = cli("txn", "describe", "no-such-id", check=False)
    assert bad.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in bad.stderr


# -- serve (last: the topic tests above expect an empty topic list) -----------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_verbs_start_status_stop(cli):
    """`rafka serve start/status/stop` on the cluster `rafka cluster start` started (its own Ray head)."""
    port = free_port()
    assert js(cli("serve", "status", "--json", check=False)) == {"running": False}
    cli("topic", "create", "clicks", "-p", "1", "-r", "1")
    started = js(cli("serve", "start", "--port", str(port), "--acks", "1", "--json", timeout=240))
    url = f"http://127.0.0.1:{port}"
    assert started["url"] == url and started["docs"] == f"{url}/docs" and started["acks"] == "1"
    body = {"records": [{"value": base64.b64encode(b"from http").decode()}]}
    r = requests.post(
        f"{url}/topics/clicks",
        data=json.dumps(body),
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
        timeout=60,
    )
    assert r.json()["offsets"] == [{"partition": 0, "offset": 0, "error_code": None, "error": None}]
    assert "from http" in cli("topic", "consume", "clicks", "-n", "1").stdout
    st = js(cli("serve", "status", "--json"))
    assert st["running"] and st["url"] == url and st["status"] == "RUNNING"
    assert set(st["deployments"]) == {"Gateway", "ConsumerInstances"}
    busy = cli("serve", "start", "--port", str(free_port()), check=False, timeout=240)
    assert busy.returncode == 1 and busy.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in busy.stderr
    assert js(cli("serve", "stop", "--json", timeout=240)) == {"stopped": True}
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/health", timeout=5)
    assert cli("serve", "status", check=False).returncode == 1
