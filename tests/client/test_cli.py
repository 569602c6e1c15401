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
import time
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
    from rafka.cli.clusterctl import ray_processes

    assert stopped.returncode == 0 and js(stopped)["killed"] > 0
    assert not ray_processes(run.info["temp_dir"]) and not Path(run.info["temp_dir"]).exists()
    # the server logs outlive the cluster: `rafka logs` finds them with no cluster and no --data-dir
    after = run("logs", "--broker", "0", "-n", "20")
    assert after.stdout.startswith("[") and "INFO [Broker id=0] shutting down" in after.stdout, after.stdout


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
    # the one Prometheus scrape URL: printed by start, shown by info, answering with the cluster's figures
    assert info["metrics_url"].startswith("http://") and out["metrics_url"] == info["metrics_url"]
    assert f"metrics {info['metrics_url']}" in cli("cluster", "info").stdout
    import urllib.request

    body = urllib.request.urlopen(info["metrics_url"], timeout=60).read().decode()
    assert 'kafka_controller_kafkacontroller_activecontrollercount{broker="0"} 1.0' in body
    # the cluster's actors run at rafka's worker niceness, not Ray's 15 (rafka/cluster.py WORKER_NICENESS);
    # a topic makes the broker host a replica (its spare ReplicaHost process may not have started yet)
    from rafka.cli.clusterctl import ray_processes
    from rafka.cluster import WORKER_NICENESS

    cli("topic", "create", "nice-check", "-p", "1", "-r", "1")
    roles = ("ray::BrokerActor", "ray::ReplicaHost", "ray::ControllerActor")

    def niceness() -> dict:
        nice: dict = {}
        for pid in ray_processes(info["temp_dir"]):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                if title.startswith(roles):
                    nice.setdefault(title.split(".")[0], set()).add(os.getpriority(os.PRIO_PROCESS, pid))
            except (OSError, UnicodeDecodeError):
                continue  # a process that ended meanwhile
        return nice

    deadline = time.monotonic() + 60
    while set(nice := niceness()) != set(roles) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert nice == dict.fromkeys(roles, {WORKER_NICENESS}), nice
    cli("topic", "delete", "nice-check")


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
gcs = ray._private.worker.global_worker.gcs_client
while True:  # to every driver (job id nil), the way the raylet sends "N PYTHON worker processes ..." warnings
    publish_error_to_driver("rafka_test", POOL_WARNING, gcs)  # the raylet's own text: dropped by rafka's drivers
    publish_error_to_driver("rafka_test", "rafka-test: a cluster-wide warning", gcs)
    time.sleep(0.2)
""".replace(
    "POOL_WARNING",
    repr(
        "WARNING: 40 PYTHON worker processes have been started on node: n with address: 127.0.0.1, which is 20x the "
        "maximum expected startup concurrency (2). This could be a result of using a large number of actors, tasks "
        "blocked in ray.get() calls, or tasks with fractional CPU requests (e.g., num_cpus=0.1) allowing high "
        "concurrency. See https://github.com/ray-project/ray/issues/3644 for some discussion of workarounds."
    ),
)


def test_stdout_carries_only_the_commands_output(cli):
    """Ray's driver prints cluster-wide warnings (published to every driver, like the raylet's "N PYTHON worker
    processes have been started") on sys.stdout even with log_to_driver=False. A consumer that is attached
    while such warnings arrive still prints only its records on stdout; the warnings go to stderr. (Through the
    CLI agent the consumer process is no Ray driver at all; RAFKA_CLI_AGENT=0 makes it attach to Ray itself.)"""
    cli("topic", "create", "quiet", "-p", "1", "-r", "1")
    consumer = subprocess.Popen(
        [RAFKA, "topic", "consume", "quiet", "-n", "3", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli.env, "RAFKA_CLI_AGENT": "0"},
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
    # the raylet's worker-count warning (a rafka cluster is many num_cpus=0 processes) reaches neither stream
    assert not [x for x in err_lines if "worker processes have been started" in x], err_lines


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


def test_produce_headers_acks_and_consume_by_offset_timestamp_and_encoding(cli):
    """Kafka users' next steps: -H headers, an ack line per record, -o -N / P:OFF / s@TIMESTAMP, %h and
    binary-safe output (hex/base64), a topic auto-created on first produce (Kafka's default)."""
    import base64

    cli("topic", "create", "hdr", "-p", "2", "-r", "1")
    lines = "".join(f"v{i}\n" for i in range(10))
    out = cli("topic", "produce", "hdr", "-p", "0", "-H", "src=cli", "-H", "n=1", "--print-acks", stdin=lines).stdout
    acks = [ln for ln in out.splitlines() if ln.startswith("Produced to partition 0 at offset ")]
    assert [int(a.rsplit(" ", 1)[1]) for a in acks] == list(range(10)) and out.splitlines()[
        -1
    ] == "10 record(s) produced"
    cli("topic", "produce", "hdr", "-p", "1", stdin="\xff\n")
    recs = [json.loads(x) for x in cli("topic", "consume", "hdr", "-p", "0", "-e").stdout.splitlines()]
    assert [r["value"] for r in recs] == [f"v{i}" for i in range(10)]
    assert recs[0]["headers"] == [{"key": "src", "value": "cli"}, {"key": "n", "value": "1"}]
    tail = cli("topic", "consume", "hdr", "-p", "0", "-o", "-3", "-e", "-f", "%o %v %h\\n").stdout
    assert tail.splitlines() == [f"{o} v{o} src=cli,n=1" for o in (7, 8, 9)]
    per = cli("topic", "consume", "hdr", "-o", "0:8", "-o", "1:end", "-e", "-f", "%p:%o\\n").stdout
    assert per.splitlines() == ["0:8", "0:9"]
    ts = recs[5]["timestamp"]
    later = [
        json.loads(x)["offset"]
        for x in cli("topic", "consume", "hdr", "-p", "0", "-o", f"s@{ts}", "-e").stdout.splitlines()
    ]
    assert later[0] <= 5 and later[-1] == 9 and all(recs[o]["timestamp"] >= ts for o in later if o >= 5)
    (b64,) = [
        json.loads(x) for x in cli("topic", "consume", "hdr", "-p", "1", "-e", "-E", "base64").stdout.splitlines()
    ]
    assert base64.b64decode(b64["value"]) == "\xff".encode() and b64["encoding"] == "base64"
    assert (
        cli("topic", "consume", "hdr", "-p", "1", "-e", "-E", "hex", "-f", "%v\\n").stdout
        == "\xff".encode().hex() + "\n"
    )
    bad = cli("topic", "consume", "hdr", "-o", "soon", check=False)
    assert bad.returncode == 2 and "offset 'soon'" in bad.stderr
    made = js(cli("topic", "produce", "auto-made", "--json", stdin="x\n"))  # auto.create.topics.enable: default true
    assert made["produced"] == 1 and "auto-made" in [t["name"] for t in js(cli("topic", "list", "--json"))]


def test_produce_flushes_what_was_typed_when_interrupted(cli):
    """A line typed before Ctrl-C is sent, not lost: with a 60 s linger nothing would go out on its own, so
    the record reaching the topic is the SIGINT path flushing."""
    import signal
    import time

    cli("topic", "create", "ctrlc", "-p", "1", "-r", "1")
    proc = subprocess.Popen(
        [RAFKA, "topic", "produce", "ctrlc", "--linger-ms", "60000", "--print-acks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env,
        # Ctrl-C as at a terminal, even when pytest itself was started in the background (`cmd &` in a script
        # starts it with SIGINT ignored, which its children inherit, and the CLI would never see the signal)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    for line in proc.stderr:  # "producing to" is printed once the topic was checked and the producer is up
        seen.append(line)
        if "producing to 'ctrlc'" in line:
            break
    assert seen and "producing to 'ctrlc'" in seen[-1], "".join(seen)
    proc.stdin.write("typed before ctrl-c\n")
    proc.stdin.flush()
    time.sleep(2)  # the line is read and queued in the accumulator; with a 60 s linger it stays there
    hw = js(cli("topic", "describe", "ctrlc", "--json"))[0]["partitions"][0]["high_watermark"]
    assert hw == 0, "the record went out before the interrupt: the test would prove nothing"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + err
    assert "Produced to partition 0 at offset 0" in out and "1 record(s) produced, then interrupted" in out
    (rec,) = [json.loads(x) for x in cli("topic", "consume", "ctrlc", "-e").stdout.splitlines()]
    assert rec["value"] == "typed before ctrl-c"


def test_operator_verbs_list_internal_describe_sources_trim_elect_reassign(cli):
    cli("topic", "create", "ops", "-p", "2", "-r", "1", "-c", "retention.ms=99000")
    cli("topic", "produce", "ops", "-p", "0", stdin="".join(f"{i}\n" for i in range(8)))
    cli("group", "list")  # the group coordinator's __consumer_offsets exists once a group was looked up
    names = [t["name"] for t in js(cli("topic", "list", "--json"))]
    internal = [t["name"] for t in js(cli("topic", "list", "-i", "--json"))]
    assert "ops" in names and not any(n.startswith("__") for n in names)
    assert set(names) < set(internal) or names == internal
    (desc,) = js(cli("topic", "describe", "ops", "--json"))
    src = {e["name"]: e["source"] for e in desc["config_entries"]}
    assert src["retention.ms"] == "DYNAMIC_TOPIC_CONFIG" and src["segment.bytes"] == "DEFAULT_CONFIG"
    human = cli("topic", "describe", "ops").stdout
    assert "retention.ms  99000  DYNAMIC_TOPIC_CONFIG" in human and "-a shows every config" in human
    assert "segment.bytes" in cli("topic", "describe", "ops", "-a").stdout
    trimmed = js(cli("topic", "trim-prefix", "ops", "-p", "0", "-o", "5", "--json"))
    assert trimmed == [{"topic": "ops", "partition": 0, "low_watermark": 5}]
    first = json.loads(cli("topic", "consume", "ops", "-p", "0", "-e").stdout.splitlines()[0])
    assert first["offset"] == 5
    assert js(cli("topic", "delete-records", "ops", "-o", "end", "--json"))[0]["low_watermark"] == 8
    over = cli("topic", "trim-prefix", "ops", "-p", "1", "-o", "3", check=False)
    assert over.returncode == 1 and "OffsetOutOfRangeError" in over.stderr
    elected = js(cli("topic", "elect-leaders", "ops", "--json"))
    assert sorted(r["partition"] for r in elected) == [0, 1] and all(r["error_code"] == 84 for r in elected)
    assert "ElectionNotNeeded" in cli("topic", "elect-leaders", "ops", "-p", "1").stdout
    moved = js(cli("topic", "reassign", "ops", "-p", "1", "--replicas", "0", "--json"))
    assert moved == [{"topic": "ops", "partition": 1, "target_replicas": [0]}]
    nowhere = cli("topic", "reassign", "ops", "-p", "1", "--replicas", "7", check=False)
    assert nowhere.returncode == 1 and nowhere.stderr.startswith("rafka: ") and nowhere.stderr.count("\n") == 1
    assert cli("topic", "reassign", "ops", check=False).returncode == 2
    assert js(cli("topic", "reassignments", "--json")) == []
    confs = js(cli("cluster", "configs", "--json"))
    assert list(confs) == ["0"] and {e["source"] for e in confs["0"]} <= {"STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"}
    assert any(e["name"] == "num.partitions" for e in confs["0"])


def test_cluster_health_and_exit_code(cli):
    ok = cli("cluster", "health", "--json")
    report = js(ok)
    assert ok.returncode == 0 and report["status"] == "healthy" and report["exit_code"] == 0
    assert report["brokers_alive"] == [0] and report["brokers_dead"] == [] and report["unhealthy"] == []
    assert report["counts"]["healthy"] == report["partitions"]
    human = cli("cluster", "health").stdout
    assert human.startswith(f"cluster {report['cluster']}: healthy (exit 0)") and "offline 0" in human


def test_logs_from_disk_and_follow(cli):
    """`rafka logs` reads <data dir>/logs (found through the state file): Kafka-shaped lines, filters, JSON,
    a bad broker id as a usage error, and --follow printing a line written after it started."""
    cli("topic", "create", "logged", "-p", "1", "-r", "1")
    lines = cli("logs", "--controller").stdout.splitlines()
    assert any("] INFO [Controller id=0 epoch=" in x and "Created topic logged" in x for x in lines), lines[-5:]
    broker = cli("logs", "--broker", "0", "-n", "3").stdout.splitlines()
    assert len(broker) == 3 and all(x.startswith("[") and x.endswith(")") for x in broker), broker
    entries = [json.loads(x) for x in cli("logs", "--json").stdout.splitlines()]
    assert {e["file"] for e in entries} == {"controller.log", "broker-0.log"}
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)  # merged by time
    leader = [e for e in entries if e["message"].startswith("Leader logged-0 starts at leader epoch 0")]
    assert leader and leader[0]["context"] == "Partition logged-0 broker=0" and leader[0]["logger"] == "actors.replica"
    bad = cli("logs", "--broker", "7", check=False)
    assert bad.returncode == 2 and "broker-7.log" in bad.stderr and bad.stdout == ""
    follow = subprocess.Popen(
        [RAFKA, "logs", "--controller", "-f", "-n", "0"], stdout=subprocess.PIPE, text=True, env=cli.env
    )
    try:
        # A topic create (~0.2 s with warm replicas) can finish before `logs -f` has opened the file at its end:
        # topics are created until one of them is printed (each is written after the follower started).
        seen: list[str] = []

        def pump():
            for line in follow.stdout:
                seen.append(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        n = 0
        while not any("Created topic followed-" in x for x in seen) and time.monotonic() < deadline:
            cli("topic", "create", f"followed-{n}", "-p", "1", "-r", "1")
            n += 1
            wait_for = time.monotonic() + 2
            while time.monotonic() < wait_for and not any("Created topic followed-" in x for x in seen):
                time.sleep(0.05)
        assert any("Created topic followed-" in x for x in seen), seen
    finally:
        follow.kill()
        follow.wait()


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


NO_RAY = (
    "import json, sys\nfrom rafka.cli.main import main\ncode = main(sys.argv[1:])\n"
    "print(json.dumps({'code': code, 'ray': 'ray' in sys.modules}), file=sys.stderr)\n"
)


def _in_process(cli, *args, agent: bool = True, home: str | None = None):
    """`rafka ARGS` in a fresh interpreter that reports (last stderr line) whether it imported Ray."""
    env = {**cli.env, "RAFKA_CLI_AGENT": "1" if agent else "0", **({"RAFKA_HOME": home} if home else {})}
    proc = subprocess.run([sys.executable, "-c", NO_RAY, *args], capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, proc.stderr
    return proc.stdout, report["ray"]


def _listener_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:port (from /proc/net/tcp and the fds' socket inodes)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "0A":
            inodes.add(f[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:
            continue
        if any(f"socket:[{i}]" in links for i in inodes):
            return int(proc.name)
    raise AssertionError(f"nothing listens on port {port}")


def test_verbs_run_in_the_cluster_agent_without_ray_and_fall_back_to_ray(cli, tmp_path):
    """Through the agent `rafka cluster start` recorded, a verb's process never imports Ray, and prints what
    the same verb prints attached to Ray itself (RAFKA_CLI_AGENT=0). A state file whose agent is gone (a dead
    port) or is another cluster's (a wrong token) makes the CLI attach to Ray instead; it still answers."""
    cli("topic", "create", "agent-a", "agent-b", "-p", "2", "-r", "1")
    state = json.loads((Path(cli.env["RAFKA_HOME"]) / "cluster.json").read_text())
    assert oct(os.stat(Path(cli.env["RAFKA_HOME"]) / "cluster.json").st_mode & 0o777) == "0o600"
    assert state["cli_agent"]["token"] and "token" not in json.dumps(cli.info)  # never printed
    fast, used_ray = _in_process(cli, "topic", "describe", "agent-a", "agent-b", "--json")
    assert not used_ray
    slow, used_ray = _in_process(cli, "topic", "describe", "agent-a", "agent-b", "--json", agent=False)
    assert used_ray and json.loads(fast) == json.loads(slow)
    for name, agent in (
        ("dead-port", {**state["cli_agent"], "port": 1}),
        ("bad-token", {**state["cli_agent"], "token": "not-the-token"}),
    ):
        home = tmp_path / name
        home.mkdir()
        (home / "cluster.json").write_text(json.dumps({**state, "cli_agent": agent}))
        out, used_ray = _in_process(cli, "topic", "list", "--json", home=str(home))
        assert used_ray and {"agent-a", "agent-b"} <= {t["name"] for t in json.loads(out)}


def test_agent_streams_concurrent_verbs_apart_and_a_killed_agent_is_an_error_then_restarts(cli):
    """A consumer streaming through the agent and a producer sending through it at the same time each get
    only their own output. SIGKILL of the agent's process ends the streaming client with an error (not a
    hang, not exit 0); Ray restarts the agent on the same port and the next verb runs there again."""
    import time

    cli("topic", "create", "agent-stream", "-p", "1", "-r", "1")
    port = json.loads((Path(cli.env["RAFKA_HOME"]) / "cluster.json").read_text())["cli_agent"]["port"]
    consumer = subprocess.Popen(
        [RAFKA, "topic", "consume", "agent-stream", "-f", "%o %v\\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env,
    )
    try:
        produced = cli("topic", "produce", "agent-stream", stdin="one\ntwo\nthree\n").stdout
        assert produced.splitlines() == [f"Produced to partition 0 at offset {i}" for i in range(3)], produced
        lines = [consumer.stdout.readline() for _ in range(3)]
        assert lines == ["0 one\n", "1 two\n", "2 three\n"], lines
        pid = _listener_pid(port)
        os.kill(pid, 9)
        out, err = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
    assert consumer.returncode == 1 and "CLI agent went away" in err, (consumer.returncode, out, err)
    deadline = time.monotonic() + 90
    while True:  # the restarted agent binds the recorded port again (meanwhile verbs attach to Ray)
        out, used_ray = _in_process(cli, "topic", "list", "--json")
        assert "agent-stream" in {t["name"] for t in json.loads(out)}
        if not used_ray:
            break
        assert time.monotonic() < deadline, "the agent did not come back on its port"
        time.sleep(1)
    assert _listener_pid(port) != pid
