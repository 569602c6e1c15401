"""Ray Data datasource/datasink over topics, the Spark (RayDP) bridges and the clickstream job, against the
session's 3-broker cluster (tests/e2e/conftest.py). One Spark session serves the module (it takes ~15 s
to start); the CLI test runs first, before that session exists, since it starts Spark in its own process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray

import rafka
from jobs import clickstream
from jobs.datasource import SCHEMA, TopicDatasink, TopicDatasource, read_topic, write_topic
from jobs.demo import ClickStream
from protocol.errors import UnknownTopicOrPartitionError
from rafka import TopicPartition
from rafka.producer.partitioner import partition_for_key

pytestmark = pytest.mark.cluster

RAFKA = str(Path(sys.executable).with_name("rafka"))
EXECUTOR_CPU = {"spark.ray.raydp_spark_executor.actor.resource.cpu": "0.5"}  # 2-CPU head: leave room for reads
READ = {"num_cpus": 0.25}
GAP_MS = 40  # ClickStream events are 1 ms apart: a small gap gives users many sessions, some across runs


def produce(cluster, topic: str, pairs, timestamps=None, headers=None) -> list[tuple[int, int, bytes | None, bytes]]:
    """Send ``(key, value)`` pairs; ``[(partition, offset, key, value)]`` in send order."""
    with rafka.Producer(cluster, linger_ms=10, batch_size=65536) as p:
        futs = [
            p.send(
                topic,
                v,
                key=k,
                timestamp_ms=None if timestamps is None else timestamps[i],
                headers=None if headers is None else headers[i],
            )
            for i, (k, v) in enumerate(pairs)
        ]
        p.flush()
        mds = [f.get(timeout=60) for f in futs]
    return [(md.partition, md.offset, k, v) for md, (k, v) in zip(mds, pairs)]


def rows_of(ds) -> list[tuple[int, int, bytes | None, bytes]]:
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in ds.take_all())


# -- the CLI (first: it starts its own Spark in a subprocess) ------------------------------------------
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_terminal_tour() -> list[str]:
    """The README's terminal tour (the bash block that starts a cluster), one command per entry: lines
    continued with ``\\`` or a trailing ``|`` are joined."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    (block,) = [b for b in blocks if "rafka cluster start" in b]
    commands, cur = [], ""
    for line in block.splitlines():
        cur += line + "\n"
        if not line.rstrip().endswith(("\\", "|")):
            commands.append(cur)
            cur = ""
    return commands


@pytest.mark.slow
def test_cli_job_run_clickstream_as_the_readme_tour(ray_cluster, e2e_cluster, e2e_admin, tmp_path):
    """The terminal tour's steps as written (README.md): create `clicks`, produce its 4 clicks, consume them,
    `rafka job run clickstream --topic clicks`, on the shared cluster (``.venv/bin/rafka`` is this venv's CLI
    pointed at it). The job prints what the README says, and writes its Parquet under the cluster's data
    directory, nothing in the current directory."""
    tour = readme_terminal_tour()
    steps = [
        next(c for c in tour if c.startswith(".venv/bin/rafka topic create clicks ")),
        next(c for c in tour if c.startswith("printf ") and "topic produce clicks" in c),
        next(c for c in tour if c.startswith(".venv/bin/rafka topic consume clicks ")),
        next(c for c in tour if c.startswith(".venv/bin/rafka job run clickstream ")),
    ]
    # the session's Ray runs without token authentication; a CLI would enter token mode on its own when
    # ~/.ray/auth_token exists, and the GCS then cannot reach it as the owner of the actors it creates
    env = {**os.environ, "RAFKA_HOME": str(tmp_path / "home"), "RAY_AUTH_MODE": "disabled"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cli = f"{RAFKA} --address {ray_cluster.address} --cluster {e2e_cluster.name}"
    # `job list` and a run on a topic that does not exist (refused before Spark starts) run beside the tour's
    # steps (each CLI process pays its own Python and Ray start); checked after them
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    listing = subprocess.Popen([RAFKA, "job", "list", "--json"], **pipes)
    missing = subprocess.Popen([*cli.split(), "job", "run", "clickstream", "--topic", "no-such-topic"], **pipes)
    out = []
    try:
        for step in steps:
            t0 = time.monotonic()
            proc = subprocess.run(
                ["bash", "-c", "set -o pipefail\n" + step.replace(".venv/bin/rafka", cli)],
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=300,
            )
            assert proc.returncode == 0, f"{step}\n{proc.stdout}\n{proc.stderr[-3000:]}"
            print(f"{time.monotonic() - t0:6.2f}s {step.splitlines()[0][:70]}")
            out.append(proc)
        consumed = [json.loads(line) for line in out[2].stdout.splitlines()]
        assert sorted((r["key"], json.loads(r["value"])["page"]) for r in consumed) == [
            ("user-1", "/cart"),
            ("user-1", "/home"),
            ("user-2", "/home"),
            ("user-2", "/search"),
        ], out[2].stdout
        job = out[3]
        print("".join(f"    {line}\n" for line in job.stderr.splitlines() if line.startswith("[")))  # the steps
        # the README: records 4, pages /home 2, /cart 1, /search 1, 2 sessions
        rows = dict(re.findall(r"^(records|sessions \(this run\)|pages \(total\))\s+(\S+)", job.stdout, re.M))
        assert rows == {"records": "4", "sessions (this run)": "2", "pages (total)": "3"}, job.stdout
        tops = dict(re.findall(r"^(/\w+)\s+(\d+)\s*$", job.stdout, re.M))
        assert tops == {"/home": "2", "/cart": "1", "/search": "1"}, job.stdout
        assert "reading" in job.stderr and "committing the transaction" in job.stderr  # the step lines
        data_dir = Path(e2e_cluster.data_dir).resolve()
        out_dir = data_dir / "jobs" / "clickstream" / "clickstream"
        assert str(out_dir / "page_counts" / "run=1") in job.stdout, job.stdout
        pages = pq.read_table(out_dir / "page_counts" / "run=1").to_pylist()
        assert sorted((r["page"], r["clicks"]) for r in pages) == [("/cart", 1), ("/home", 2), ("/search", 1)]
        assert list(cwd.iterdir()) == []  # nothing written to the current directory
        assert sum(rafka.Admin(e2e_cluster).list_consumer_group_offsets("clickstream").values()) == 4
        listed, _ = listing.communicate(timeout=60)
        assert listing.returncode == 0 and [j["name"] for j in json.loads(listed)] == ["clickstream"]
        _, bad = missing.communicate(timeout=300)
        assert missing.returncode == 1 and bad.startswith("rafka: UnknownTopicOrPartitionError"), bad[-2000:]
    finally:
        for proc in (listing, missing):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        left = [t for t in ("clicks", "clickstream-results") if t in e2e_admin.list_topics()]
        if left:
            e2e_admin.delete_topics(left)


# -- datasource -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def loaded_topic(e2e_cluster, e2e_admin):
    """3 partitions x RF 1 with 900 keyed records, timestamps 1_000..1_899 in send order, a header on some
    (readers read leaders: followers would only be processes polling for the rest of the package; the topic
    is deleted with the module)."""
    topic = f"ds-{time.time_ns() % 10**8}"
    e2e_admin.create_topic(topic, 3, 1)
    pairs = [(f"k{i % 37}".encode(), f"v{i}".encode()) for i in range(900)]
    headers = [[("n", str(i).encode()), ("empty", None)] if i % 100 == 0 else None for i in range(900)]
    sent = produce(e2e_cluster, topic, pairs, timestamps=[1_000 + i for i in range(900)], headers=headers)
    yield topic, sent, {(p, o): [{"key": k, "value": v} for k, v in h] for (p, o, _, _), h in zip(sent, headers) if h}
    e2e_admin.delete_topics([topic])


def test_read_everything_with_schema_and_ranges(e2e_cluster, loaded_topic):
    topic, sent, headers = loaded_topic
    src = TopicDatasource(e2e_cluster, topic, **READ)
    ends = Counter(p for p, *_ in sent)
    assert src.ranges == {p: (0, ends[p]) for p in range(3)} and src.num_offsets == 900
    ds = src.to_dataset()
    assert ds.schema().base_schema == SCHEMA
    assert rows_of(ds) == sorted(sent)
    assert src.end_offsets() == {TopicPartition(topic, p): ends[p] for p in range(3)}
    stamps = {(p, o): 1_000 + i for i, (p, o, _, _) in enumerate(sent)}
    for r in ds.take_all():
        assert r["topic"] == topic and r["timestamp"] == stamps[r["partition"], r["offset"]]
        assert r["headers"] == headers.get((r["partition"], r["offset"]), [])


def test_read_explicit_offsets_end_and_partitions(e2e_cluster, loaded_topic):
    topic, sent, _ = loaded_topic
    ds = read_topic(e2e_cluster, topic, start={0: 10, 1: 5}, end=100, **READ)  # partition 2: from the start
    want = [r for r in sent if {0: 10, 1: 5, 2: 0}[r[0]] <= r[1] < 100]
    assert rows_of(ds) == sorted(want)
    ds = read_topic(e2e_cluster, topic, start=20, end={1: 30}, partitions=[1], **READ)
    assert rows_of(ds) == sorted(r for r in sent if r[0] == 1 and 20 <= r[1] < 30)
    with pytest.raises(UnknownTopicOrPartitionError):
        TopicDatasource(e2e_cluster, topic, partitions=[7])
    with pytest.raises(ValueError, match="start must be"):
        TopicDatasource(e2e_cluster, topic, start="yesterday")


def test_read_from_timestamp(e2e_cluster, loaded_topic):
    topic, sent, _ = loaded_topic
    ds = read_topic(e2e_cluster, topic, start={"timestamp": 1_600}, **READ)
    assert rows_of(ds) == sorted(r for i, r in enumerate(sent) if 1_000 + i >= 1_600)
    assert read_topic(e2e_cluster, topic, start={"timestamp": 99_999}, **READ).take_all() == []


def test_read_from_group_committed_offsets(e2e_cluster, e2e_admin, loaded_topic):
    topic, sent, _ = loaded_topic
    group = f"{topic}-readers"
    e2e_admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 50, TopicPartition(topic, 2): 7})
    src = TopicDatasource(e2e_cluster, topic, group=group, **READ)  # partition 1: none committed -> earliest
    assert src.ranges[0][0] == 50 and src.ranges[1][0] == 0 and src.ranges[2][0] == 7
    assert rows_of(src.to_dataset()) == sorted(r for r in sent if r[1] >= {0: 50, 1: 0, 2: 7}[r[0]])
    latest = TopicDatasource(e2e_cluster, topic, group=group, start="latest", **READ)
    assert latest.ranges[1][0] == latest.ranges[1][1]  # no committed offset -> the end: nothing to read
    assert rows_of(latest.to_dataset()) == sorted(r for r in sent if r[0] != 1 and r[1] >= {0: 50, 2: 7}[r[0]])


def test_read_committed_drops_aborted_transactions_and_stops_at_an_open_one(e2e_cluster, e2e_topic):
    """``isolation_level="read_committed"``: plain records and committed transactions are read, an aborted
    transaction's records are not, and the ranges end at the last stable offset (an open transaction's first
    offset), so the records after it wait until it ends; read_uncommitted reads all of them up to the high
    watermark. No marker is ever a row."""
    topic = e2e_topic(2, 1)
    values: dict[str, list[bytes]] = {}

    def send(p, tag: str) -> None:
        values[tag] = [b"%s-%d" % (tag.encode(), i) for i in range(10)]
        for i, v in enumerate(values[tag]):
            p.send(topic, v, partition=i % 2)
        p.flush()

    with rafka.Producer(e2e_cluster) as plain, rafka.Producer(e2e_cluster, transactional_id=topic + "-tx") as tx:
        tx.init_transactions()
        send(plain, "plain")
        for tag, commit in (("c1", True), ("ab", False), ("c2", True)):
            tx.begin_transaction()
            send(tx, tag)
            tx.commit_transaction() if commit else tx.abort_transaction()
        tx.begin_transaction()
        send(tx, "open")  # left open: the LSO stays at its first offset on both partitions
        send(plain, "late")

        def read(isolation: str) -> tuple[TopicDatasource, list[bytes]]:
            src = TopicDatasource(e2e_cluster, topic, isolation_level=isolation, **READ)
            return src, sorted(r["value"] for r in src.to_dataset().take_all())

        committed_src, got = read("read_committed")
        assert got == sorted(values["plain"] + values["c1"] + values["c2"])
        # plain 5 + c1 5 + COMMIT + ab 5 + ABORT + c2 5 + COMMIT: the open transaction's first offset
        assert committed_src.end_offsets() == {TopicPartition(topic, p): 23 for p in range(2)}
        _, got = read("read_uncommitted")
        assert got == sorted(v for vs in values.values() for v in vs)
        tx.commit_transaction()
        _, got = read("read_committed")
        assert got == sorted(v for tag, vs in values.items() if tag != "ab" for v in vs)
    with pytest.raises(ValueError, match="isolation_level"):
        TopicDatasource(e2e_cluster, topic, isolation_level="committed")


# -- datasink -------------------------------------------------------------------------------------------
def test_write_dataset_to_topic_partitions_by_key(e2e_cluster, e2e_topic):
    topic = e2e_topic(3, 1)  # partitioning by key is the point, not replication: 3 replica processes, not 9
    items = [{"user": f"user-{i % 11}", "event": {"n": i, "page": f"/p/{i % 5}"}} for i in range(500)]
    ds = ray.data.from_items(items, override_num_blocks=4)
    result = write_topic(ds, e2e_cluster, topic, key_column="user", value_column="event", json_values=True)
    assert result["records"] == 500 and sum(result["partitions"].values()) == 500
    c = rafka.Consumer(e2e_cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in range(3)])
    got = []
    while len(got) < 500:
        batch = c.poll(timeout_ms=5000)
        assert batch, f"only {len(got)} of 500 records came back"
        got.extend(r for recs in batch.values() for r in recs)
    c.close()
    assert sorted(json.loads(r.value)["n"] for r in got) == list(range(500))
    for r in got:
        assert r.partition == partition_for_key(r.key, 3)
        assert json.loads(r.value)["page"] == f"/p/{json.loads(r.value)['n'] % 5}"
        assert r.key.decode() == f"user-{json.loads(r.value)['n'] % 11}"


def test_write_failures_surface(e2e_cluster, e2e_topic):
    topic = e2e_topic(1, 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        TopicDatasink(e2e_cluster, "no-such-topic")
    ds = ray.data.from_items([{"key": "a", "value": {"x": 1}}])
    with pytest.raises(Exception, match="json_values=True"):  # dict values without json_values: the write fails
        write_topic(ds, e2e_cluster, topic)
    with pytest.raises(ValueError, match="no column"):
        write_topic(ray.data.from_items([{"k": "a", "v": "b"}]), e2e_cluster, topic)
    assert TopicDatasource(e2e_cluster, topic).num_offsets == 0


# -- Spark bridges --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark(ray_cluster, e2e_cluster):
    from jobs.spark import init_spark, stop_spark

    session = init_spark("rafka-tests", configs=EXECUTOR_CPU)
    yield session
    stop_spark()


def test_topic_to_spark_and_back(e2e_cluster, e2e_topic, loaded_topic, spark):
    from jobs.spark import spark_to_topic, topic_to_spark

    topic, sent, _ = loaded_topic
    df = topic_to_spark(spark, e2e_cluster, topic, **READ)
    assert df.columns == SCHEMA.names
    assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in df.collect()) == sorted(
        sent
    )
    out = e2e_topic(3, 1)
    shouted = df.selectExpr("CAST(key AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
    assert spark_to_topic(shouted, e2e_cluster, out)["records"] == 900
    back = rows_of(read_topic(e2e_cluster, out, **READ))
    assert sorted((k, v) for _, _, k, v in back) == sorted((k, v.upper()) for _, _, k, v in sent)
    assert all(p == partition_for_key(k, 3) for p, _, k, _ in back)


# -- the clickstream job --------------------------------------------------------------------------------
def expected(events: list[dict], gap_ms: int) -> tuple[dict[str, int], list[dict]]:
    """Plain-Python page totals and sessions over every event."""
    pages = Counter(e["page"] for e in events)
    by_user: dict[str, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e["ts"], e["id"])):
        by_user[e["user"]].append(e)
    sessions = []
    for user, evs in by_user.items():
        cur = None
        for e in evs:
            if cur is not None and e["ts"] - cur["end"] <= gap_ms:
                cur["end"] = max(cur["end"], e["ts"])
                cur["clicks"] += 1
                if e["page"] not in cur["pages"]:
                    cur["pages"].append(e["page"])
            else:
                cur = {"user": user, "start": e["ts"], "end": e["ts"], "clicks": 1, "pages": [e["page"]]}
                sessions.append(cur)
    return dict(pages), sorted(sessions, key=lambda s: (s["user"], s["start"]))


MALFORMED = [
    (b"user-x", b"not json"),
    (b"user-x", b'{"user": "user-x"}'),
    (b"user-x", b"[1, 2]"),
    (None, b'{"user": 7, "page": "/", "ts": "soon"}'),
]


@pytest.fixture
def click_job(e2e_admin, e2e_topic, tmp_path):
    """``click_job(rf)`` -> the job's arguments: a fresh 3-partition input topic of that replication factor,
    its outputs' names. The results topic the job creates (1 x RF 3) is deleted after the test with the input,
    so its replica processes do not outlive it on the shared cluster."""
    made: list[str] = []

    def make(rf: int) -> dict:
        topic = e2e_topic(3, rf)
        made.append(f"{topic}-results")
        return {
            "topic": topic,
            "group": f"{topic}-job",
            "results_topic": f"{topic}-results",
            "parquet_dir": str(tmp_path / "parquet"),
            "session_gap_ms": GAP_MS,
        }

    yield make
    left = [t for t in made if t in e2e_admin.list_topics()]
    if left:
        e2e_admin.delete_topics(left)


def run_job(e2e_cluster, spark, job: dict, **kw) -> dict:
    done = clickstream.run(e2e_cluster, spark, **job, read_options=READ, **kw)
    print(f"run {done['run']}: {done['records']} records in {done['elapsed_s']}s {done.get('steps_s', {})}")
    return done


def runs_in_log(e2e_cluster, results_topic: str) -> list[int]:
    """The ``run`` of every result record physically in the log (read_uncommitted: aborted ones too)."""
    c = rafka.Consumer(e2e_cluster, isolation_level="read_uncommitted")
    tp = TopicPartition(results_topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    end = c.end_offsets([tp])[tp]
    runs: list[int] = []
    deadline = time.monotonic() + 60
    while c.position(tp) < end and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            runs.extend(json.loads(r.value)["run"] for r in recs if r.value is not None and r.offset < end)
    c.close()
    return runs


@pytest.mark.slow
def test_job_incremental_runs_crash_redo_and_idle(e2e_cluster, e2e_admin, spark, click_job):
    job = click_job(1)  # no broker is lost here: RF 1 (3 replica processes, not 9)
    stream = ClickStream(users=40, seed=11)
    produce(e2e_cluster, job["topic"], stream.take(2500) + MALFORMED)
    first = run_job(e2e_cluster, spark, job)
    pages, sessions = expected(stream.events, GAP_MS)
    assert first["run"] == 1 and not first["redo"] and first["records"] == 2504 and first["skipped"] == 4
    assert first["pages"] == pages and sum(first["pages"].values()) == 2500
    results = clickstream.read_results(e2e_cluster, job["results_topic"])
    assert results["pages"] == pages and results["sessions"] == sessions
    assert results["runs"][job["group"]]["run"] == 1
    assert first["sessions"] == len(sessions)
    assert pq.read_table(first["parquet"]["page_counts"]).num_rows == len(pages)
    parquet_sessions = pq.read_table(first["parquet"]["sessions"]).to_pylist()
    assert sorted((s["user"], s["start"], s["clicks"]) for s in parquet_sessions) == [
        (s["user"], s["start"], s["clicks"]) for s in sessions
    ]
    committed = {tp.partition: o for tp, o in e2e_admin.list_consumer_group_offsets(job["group"]).items()}
    assert committed == {p: r[1] for p, r in first["ranges"].items()}

    # run 2 sends its outputs and its offsets in its transaction, then crashes before committing it
    produce(e2e_cluster, job["topic"], stream.take(1500))  # sessions continue across the run boundary
    with pytest.raises(clickstream.JobCrashed):
        run_job(e2e_cluster, spark, job, crash_after_output=True)
    assert 2 in runs_in_log(e2e_cluster, job["results_topic"])  # run 2's records are in the log ...
    results = clickstream.read_results(e2e_cluster, job["results_topic"])  # ... but not committed
    assert results["runs"][job["group"]]["run"] == 1 and results["pages"] == first["pages"]
    assert {tp.partition: o for tp, o in e2e_admin.list_consumer_group_offsets(job["group"]).items()} == committed
    produce(e2e_cluster, job["topic"], stream.take(300))
    redo = run_job(e2e_cluster, spark, job)  # fences the crashed attempt (its transaction aborts), redoes run 2
    assert redo["redo"] and redo["run"] == 2 and redo["records"] == 1800 and redo["skipped"] == 0
    assert {p: r[0] for p, r in redo["ranges"].items()} == committed
    pages, sessions = expected(stream.events, GAP_MS)
    results = clickstream.read_results(e2e_cluster, job["results_topic"])
    assert redo["pages"] == pages and results["pages"] == pages and results["sessions"] == sessions
    assert sum(r["clicks"] for r in pq.read_table(redo["parquet"]["page_counts"]).to_pylist()) == 1800  # replaced

    # an upstream transactional producer aborts 100 valid clicks on the input: the job reads it read_committed
    with rafka.Producer(e2e_cluster, transactional_id=job["topic"] + "-upstream") as upstream:
        upstream.init_transactions()
        upstream.begin_transaction()
        for i in range(100):
            click = {"id": f"ab-{i}", "user": "user-aborted", "seq": i, "page": "/aborted", "ts": 10**12 + i}
            upstream.send(job["topic"], json.dumps(click).encode(), key=b"user-aborted", partition=i % 3)
        upstream.flush()
        upstream.abort_transaction()
    produce(e2e_cluster, job["topic"], stream.take(200))
    third = run_job(e2e_cluster, spark, job)  # only what is new since run 2, without the aborted clicks
    assert third["run"] == 3 and not third["redo"] and third["records"] == 200
    assert {p: r[0] for p, r in third["ranges"].items()} == {p: r[1] for p, r in redo["ranges"].items()}
    pages, sessions = expected(stream.events, GAP_MS)
    results = clickstream.read_results(e2e_cluster, job["results_topic"])
    assert results["pages"] == pages and third["pages"] == pages and results["sessions"] == sessions
    # the group's offsets are past the aborted clicks and their 3 ABORT markers too
    assert sum(e2e_admin.list_consumer_group_offsets(job["group"]).values()) == 4504 + 100 + 3

    idle = run_job(e2e_cluster, spark, job)  # nothing new: no run, no output, same results
    assert idle["records"] == 0 and idle["run"] == 3 and idle["parquet"] == {} and idle["pages"] == pages
    assert clickstream.read_results(e2e_cluster, job["results_topic"])["sessions"] == sessions
    assert sorted(os.listdir(Path(job["parquet_dir"]) / "sessions")) == ["run=1", "run=2", "run=3"]


@pytest.mark.slow
def test_job_exactly_once_across_a_broker_kill(e2e_cluster, e2e_admin, spark, click_job):
    """The results partition's leader is SIGKILLed (its OS process) just before the run's transaction:
    the run completes, or a rerun does, and the totals equal plain Python's, no double count, no loss."""
    from actors.server.worker_process import actor_pid
    from protocol.names import RAY_NAMESPACE, broker_name

    job = click_job(3)  # RF 3: the broker kill leaves every input partition readable
    stream = ClickStream(users=30, seed=5)
    produce(e2e_cluster, job["topic"], stream.take(2000))
    clickstream.ensure_results_topic(e2e_admin, job["results_topic"])
    victim = e2e_admin.describe_topics([job["results_topic"]])[0]["partitions"][0]["leader"]
    killed: list[int] = []

    def kill_at_the_transaction(step: str) -> None:
        if "one transaction" in step and not killed:
            pid = actor_pid(ray.get_actor(broker_name(e2e_cluster.name, victim), namespace=RAY_NAMESPACE))
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # the broker's process dies with its replicas and coordinators
            killed.append(pid)

    try:
        try:
            done = run_job(e2e_cluster, spark, job, progress=kill_at_the_transaction)
        except Exception:  # noqa: BLE001 - allowed: the rerun below must then finish the work exactly once
            done = run_job(e2e_cluster, spark, job)
        assert killed and done["run"] == 1
    finally:
        e2e_cluster.restart_broker(victim)
    pages, sessions = expected(stream.events, GAP_MS)
    results = clickstream.read_results(e2e_cluster, job["results_topic"])
    assert results["pages"] == pages and results["sessions"] == sessions and done["pages"] == pages
    assert sum(e2e_admin.list_consumer_group_offsets(job["group"]).values()) == 2000
    produce(e2e_cluster, job["topic"], stream.take(500))  # the next run starts from what the kill left
    after = run_job(e2e_cluster, spark, job)
    assert after["run"] == 2 and after["records"] == 500
    pages, sessions = expected(stream.events, GAP_MS)
    results = clickstream.read_results(e2e_cluster, job["results_topic"])
    assert results["pages"] == pages and results["sessions"] == sessions
