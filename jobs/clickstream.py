"""The clickstream job: per-page click counts and per-user sessions over a click topic, in Spark (RayDP).

    summary = run(cluster, spark, topic="clicks", group="clickstream")   # Parquet under the cluster's data dir
    read_results(cluster, "clickstream-results")   # {"pages": {...}, "sessions": [...], ...}

Input: records keyed by user whose values are JSON events ``{"id", "user", "seq", "page", "ts" (epoch ms),
"referrer", "device"}`` (``jobs.demo.ClickStream``). Values that are not JSON objects with a string
``user``, a string ``page`` and an integer ``ts`` are skipped and counted, never fatal. A session is a
user's clicks with gaps of at most ``session_gap_ms``; it is reported as ``{user, start, end, clicks,
pages}`` (``pages``: the distinct pages in first-visit order).

Outputs: the compacted results topic (created when missing: one partition, ``cleanup.policy=compact``,
RF min(3, brokers)) holds the current state, one key per fact; Parquet holds each run's output
(``<parquet_dir>/page_counts/run=N/``, ``<parquet_dir>/sessions/run=N/``; by default ``parquet_dir`` is
``<data_dir>/jobs/clickstream/<group>`` under the cluster's data directory, ``default_output_dir``). The group's committed offsets
mark the end of what was counted, so the next run processes only newer records.

Exactly-once comes from Kafka's transactions (KIP-98), consume-transform-produce style:

1. Each run opens ``Producer(transactional_id="clickstream-<group>")`` and calls ``init_transactions``.
   The id is stable per group, so this fences any earlier instance (a crashed or hung run of the same
   group, whose later writes the leaders then refuse) and aborts the transaction it left open.
2. The state is read with ``isolation_level="read_committed"`` (``load_state``): up to the last stable
   offset, without aborted records, so an aborted or still open run is never seen. The run covers, per
   input partition, ``[the group's committed offset (the log start when it has none), the last stable
   offset now)``, read read_committed too (``INPUT_ISOLATION``): an upstream transactional producer's
   aborted records are not counted, and its open transaction ends the run's range.
3. Spark computes; Parquet is written; then ONE transaction holds every result record AND the group's
   new offsets (``send_offsets_to_transaction``, a TxnOffsetCommit: the job is not a group member, so it
   commits as ``generation -1`` and the group must have no active members) and is committed. Either
   both become visible or neither: a crash or a broker loss anywhere before the commit leaves the
   committed offsets and the committed state as they were, and the next run counts the same records
   again from the same state; after the commit there is nothing left to redo.

Cumulative records are computed from the committed state only: ``page/<page>`` = ``{page, count, run}``
(count = the committed count + this run's clicks) and ``user/<user>`` = ``{run, open}`` carries the
user's last session across the run boundary; a session continued by the next run is re-emitted under its
unchanged key ``session/<user>/<start>`` with the larger end and counts, and compaction keeps the latest.

One more record per group, ``__run__/<group>`` = ``{run, group, topic, ranges: {partition: [start,
end)}, committed_at}``, is written in the same transaction. It plays no part in exactly-once; it numbers
the runs (the Parquet directories ``run=N`` and the ``run`` field of the records: a run is the last
committed run + 1) and tells ``read_results`` which offsets the group's last run covered.

Parquet is outside the transaction: it is written in overwrite mode per run directory before the commit,
so an attempt that never committed leaves ``run=N`` files that the next attempt (also run N) replaces.
The summary's ``redo`` says that ``init_transactions`` found the previous attempt's transaction still
open and aborted it. One results topic serves one group (the cumulative records are not keyed by group);
resetting the group's offsets by hand makes the next run count those records again (on purpose).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import pyarrow as pa

from protocol.errors import KafkaError, TopicAlreadyExistsError
from rafka.structs import TopicPartition

__all__ = ["run", "default_output_dir", "read_results", "load_state", "sessionize", "transactional_id", "JobCrashed"]

RUN_PREFIX = "__run__/"


class JobCrashed(RuntimeError):
    """The fault-injection point (``crash_after_output=True``): every result record and the offsets are sent
    in the run's transaction, which is left open (neither committed nor aborted), as a crashed process
    leaves it."""


def transactional_id(group: str) -> str:
    """The job's transactional id for ``group``: stable, so each run fences the previous one."""
    return f"clickstream-{group}"


# -- the results topic ------------------------------------------------------------------------------------
def ensure_results_topic(admin, name: str) -> None:
    """Create the compacted results topic when it is missing (one partition: the state is read back whole
    at every run, in order)."""
    if admin.metadata.topic(name) is not None:
        return
    brokers = [b for b in admin.describe_cluster()["brokers"] if b.get("alive", True)]
    try:
        admin.create_topic(name, 1, min(3, max(1, len(brokers))), {"cleanup.policy": "compact"})
    except TopicAlreadyExistsError:
        pass  # created meanwhile by another run


def load_state(cluster: Any, results_topic: str, timeout_s: float = 120.0) -> dict[str, dict]:
    """The latest committed value of every key of the results topic (tombstones remove keys), read with
    ``isolation_level="read_committed"``: up to the last stable offset, aborted transactions left out."""
    from protocol.errors import KafkaTimeoutError
    from rafka.consumer.consumer import Consumer

    consumer = Consumer(cluster, isolation_level="read_committed", enable_auto_commit=False)
    state: dict[str, dict] = {}
    try:
        parts = consumer.metadata.wait_for_topic(results_topic, timeout_s * 1000).partitions
        tps = [TopicPartition(results_topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)  # read_committed: the last stable offsets
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"reading {results_topic} up to {ends} did not finish in {timeout_s:.0f} s")
            for tp, recs in consumer.poll(timeout_ms=500).items():
                for r in recs:
                    if r.key is None or r.offset >= ends[tp]:
                        continue
                    if r.value is None:
                        state.pop(r.key.decode(), None)
                    else:
                        state[r.key.decode()] = json.loads(r.value)
    finally:
        consumer.close()
    return state


def read_results(cluster: Any, results_topic: str = "clickstream-results") -> dict:
    """The job's current committed results: ``{"pages": {page: total}, "sessions": [session...] (by user,
    start), "open_sessions": {user: session}, "runs": {group: last committed run}}``."""
    state = load_state(cluster, results_topic)
    out: dict[str, Any] = {"pages": {}, "sessions": [], "open_sessions": {}, "runs": {}}
    for key, v in state.items():
        kind = key.split("/", 1)[0]
        if kind == "page":
            out["pages"][v["page"]] = v["count"]
        elif kind == "session":
            out["sessions"].append({k: v[k] for k in ("user", "start", "end", "clicks", "pages")})
        elif kind == "user" and v.get("open"):
            out["open_sessions"][key.split("/", 1)[1]] = v["open"]
        elif key.startswith(RUN_PREFIX):
            out["runs"][key[len(RUN_PREFIX) :]] = v
    out["sessions"].sort(key=lambda s: (s["user"], s["start"]))
    return out


# -- planning -------------------------------------------------------------------------------------------
# The input is read as Kafka's EOS consume-transform-produce reads it: what an upstream transactional producer
# aborted is not counted, and a run stops at the first offset of a transaction still open there.
INPUT_ISOLATION = "read_committed"


def _plan(cluster: str, topic: str, group: str, state: dict) -> tuple[dict | None, int]:
    """``(plan, last committed run)``: the next run over ``[committed offset, last stable offset)`` of every
    partition (the input is read read_committed: ``INPUT_ISOLATION``), or None when there is nothing new."""
    from jobs.datasource import plan_ranges

    prev = state.get(RUN_PREFIX + group)
    last_run = prev["run"] if prev else 0
    ranges = plan_ranges(cluster, topic, "earliest", "latest", group=group, isolation_level=INPUT_ISOLATION)
    if all(s == e for s, e in ranges.values()):
        return None, last_run
    plan = {
        "run": last_run + 1,
        "group": group,
        "topic": topic,
        "ranges": {str(p): [s, e] for p, (s, e) in sorted(ranges.items())},
    }
    return plan, last_run


def _open_transaction_left(admin, tid: str) -> bool:
    """Whether ``tid``'s coordinator holds a transaction that a previous attempt left unfinished."""
    try:
        st = admin.describe_transactions([tid])[0]["state"]
    except KafkaError:  # an id never used (or a coordinator moving): nothing of ours is open
        return False
    return st in ("Ongoing", "PrepareAbort", "PrepareEpochFence")


# -- computing ------------------------------------------------------------------------------------------
EVENT_COLUMNS = pa.schema(
    [("user", pa.string()), ("page", pa.string()), ("ts", pa.int64()), ("ord", pa.int64()), ("ok", pa.bool_())]
)


def parse_clicks(batch: pa.Table) -> pa.Table:
    """Record columns -> ``user, page, ts, ord (offset), ok``: a value is an event when it is a JSON object
    with a string ``user``, a string ``page`` and an integer ``ts``; anything else gets ``ok = False``.
    Runs in the Ray read tasks (fused with the read), so Spark receives small typed columns rather than
    raw values: RayDP hands blocks to Spark through pandas, where binary payloads are the slow part."""
    users, pages, stamps, oks = [], [], [], []
    loads = json.loads
    for raw in batch.column("value").to_pylist():
        try:
            e = loads(raw)
            user, page, ts = e["user"], e["page"], e["ts"]
            ok = type(user) is str and type(page) is str and type(ts) is int
        except (ValueError, TypeError, KeyError):  # not JSON (UnicodeDecodeError is a ValueError), not an object
            ok = False
        if not ok:
            user = page = ts = None
        users.append(user)
        pages.append(page)
        stamps.append(ts)
        oks.append(ok)
    return pa.Table.from_arrays(
        [
            pa.array(users, pa.string()),
            pa.array(pages, pa.string()),
            pa.array(stamps, pa.int64()),
            batch.column("offset"),
            pa.array(oks, pa.bool_()),
        ],
        schema=EVENT_COLUMNS,
    )


def _events(spark, cluster: str, plan: dict, read_options: dict):
    """``(all records DataFrame (with ok), valid events DataFrame (user, page, ts, ord))`` for the plan."""
    from jobs.datasource import TopicDatasource

    ranges = {int(p): r for p, r in plan["ranges"].items() if r[1] > r[0]}
    src = TopicDatasource(
        cluster,
        plan["topic"],
        start={p: r[0] for p, r in ranges.items()},
        end={p: r[1] for p, r in ranges.items()},
        partitions=sorted(ranges),
        **{**read_options, "isolation_level": INPUT_ISOLATION},
    )
    ds = src.to_dataset().map_batches(parse_clicks, batch_format="pyarrow", batch_size=None, num_cpus=src.num_cpus)
    flagged = ds.to_spark(spark).cache()  # one pass through RayDP's conversion, every later step reads this
    return flagged, flagged.where("ok").select("user", "page", "ts", "ord")


def sessionize(spark, events, carried: list[dict], gap_ms: int):
    """Sessions touched by ``events`` (user, page, ts, ord), continuing each user's ``carried`` open
    session (``{user, start, end, clicks, pages}``): a DataFrame of ``user, start, end, clicks, pages``.

    Each event is a unit (first = last = ts); a carried session is one unit spanning its start..end. Units
    sorted by first time open a new session when they start more than ``gap_ms`` after the latest end
    seen so far for the user (a running max, so a late event inside a session does not split it)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BooleanType, LongType, StringType, StructField, StructType

    unit_schema = StructType(
        [
            StructField("user", StringType()),
            StructField("first", LongType()),
            StructField("last", LongType()),
            StructField("ord", LongType()),
            StructField("clicks", LongType()),
            StructField("pages", ArrayType(StringType())),
            StructField("carried", BooleanType()),
        ]
    )
    units = events.select(
        "user",
        F.col("ts").alias("first"),
        F.col("ts").alias("last"),
        "ord",
        F.lit(1).cast("long").alias("clicks"),
        F.array("page").alias("pages"),
        F.lit(False).alias("carried"),
    )
    if carried:
        rows = [(c["user"], c["start"], c["end"], -1, c["clicks"], list(c["pages"]), True) for c in carried]
        units = units.unionByName(spark.createDataFrame(rows, unit_schema))
    w = Window.partitionBy("user").orderBy("first", "ord")
    seen = F.max("last").over(w.rowsBetween(Window.unboundedPreceding, -1))
    starts = units.withColumn("new", F.when(seen.isNull() | (F.col("first") - seen > gap_ms), 1).otherwise(0))
    numbered = starts.withColumn("sid", F.sum("new").over(w.rowsBetween(Window.unboundedPreceding, 0)))
    ordered_pages = F.array_distinct(
        F.flatten(F.transform(F.array_sort(F.collect_list(F.struct("first", "ord", "pages"))), lambda u: u["pages"]))
    )
    sessions = numbered.groupBy("user", "sid").agg(
        F.min("first").alias("start"),
        F.max("last").alias("end"),
        F.sum("clicks").alias("clicks"),
        ordered_pages.alias("pages"),
        F.sum(F.when(F.col("carried"), 0).otherwise(1)).alias("fresh"),
    )
    return sessions.where("fresh > 0").select("user", "start", "end", "clicks", "pages")


# -- writing --------------------------------------------------------------------------------------------
def _send_all(producer, topic: str, records: list[tuple[str, dict]]) -> None:
    """Send ``(key, value)`` records in the producer's open transaction; raise the first failure."""
    errors: list[BaseException] = []
    for key, value in records:
        producer.send(
            topic,
            json.dumps(value, separators=(",", ":")).encode(),
            key=key.encode(),
            callback=lambda md, exc: exc is not None and errors.append(exc),
        )
    producer.flush()
    if errors:
        raise errors[0] if isinstance(errors[0], KafkaError) else KafkaError(str(errors[0]))


def _page_records(state: dict, counts: dict[str, int], run_no: int) -> list[tuple[str, dict]]:
    out = []
    for page, n in sorted(counts.items()):
        prev = state.get(f"page/{page}")
        out.append((f"page/{page}", {"page": page, "count": n + (prev["count"] if prev else 0), "run": run_no}))
    return out


def _user_input(state: dict) -> list[dict]:
    """Each user's open session as the committed state holds it."""
    return [v["open"] for key, v in state.items() if key.startswith("user/") and v.get("open")]


def _write_parquet(spark, rows: list, schema: str, path: str) -> None:
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(path)


# -- the job --------------------------------------------------------------------------------------------
def default_output_dir(cluster: Any, group: str) -> str:
    """``<data_dir>/jobs/clickstream/<group>``: the cluster's data directory is the parent of its brokers' log
    directories (``<data_dir>/broker-<id>``, as registered with the controller; the lowest broker id's)."""
    from rafka.admin.admin import Admin

    admin = Admin(cluster)
    try:
        brokers = sorted(admin.describe_cluster()["brokers"], key=lambda b: b["id"])
    finally:
        admin.close()
    dirs = [b["log_dir"] for b in brokers if b.get("log_dir")]
    if not dirs:
        raise ValueError("the cluster's brokers report no log directory: pass parquet_dir")
    return os.path.join(os.path.dirname(os.path.abspath(dirs[0])), "jobs", "clickstream", group)


def run(
    cluster: Any,
    spark: Any,
    topic: str = "clicks",
    group: str = "clickstream",
    results_topic: str = "clickstream-results",
    parquet_dir: str | None = None,
    session_gap_ms: int = 1_800_000,
    crash_after_output: bool = False,
    progress: Callable[[str], None] | None = None,
    read_options: dict | None = None,
    timeout_s: float = 120.0,
) -> dict:
    """One run of the job (see the module doc); returns its summary. ``spark`` is a SparkSession, or a
    callable that returns one, called only when the run computes (``rafka job run`` starts Spark beside the
    first steps and passes the wait for it); ``progress(step)`` is told each step;
    ``read_options`` go to ``TopicDatasource`` (e.g. ``{"num_cpus": 0.25}``); ``timeout_s`` bounds each
    transaction call (a coordinator or leader moving after a broker loss is waited for that long)."""
    from rafka.admin.admin import Admin
    from rafka.client_utils import resolve_cluster
    from rafka.producer.producer import Producer

    t0 = time.monotonic()
    steps: dict[str, float] = {}  # seconds per step, in the summary
    last = [t0, None]

    def say(step: str | None) -> None:  # None: the last step ended
        now = time.monotonic()
        if last[1] is not None:
            steps[last[1]] = round(steps.get(last[1], 0.0) + now - last[0], 3)
        last[0], last[1] = now, None if step is None else step.split(": ", 1)[-1]
        if progress is not None and step is not None:
            progress(step)

    if session_gap_ms < 0:
        raise ValueError(f"session_gap_ms must be >= 0, got {session_gap_ms}")
    name = resolve_cluster(cluster)
    if parquet_dir is None:
        parquet_dir = default_output_dir(name, group)
    admin = Admin(name)
    if admin.metadata.topic(topic) is None:
        from protocol.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    ensure_results_topic(admin, results_topic)
    tid = transactional_id(group)
    say(f"fencing earlier runs of group {group} (transactional id {tid})")
    redo = _open_transaction_left(admin, tid)
    producer = Producer(name, transactional_id=tid, acks="all", linger_ms=20, batch_size=262144)
    try:
        producer.init_transactions(timeout=timeout_s)  # aborts what a crashed attempt left open
        say("loading state (read_committed)")
        state = load_state(name, results_topic, timeout_s)
        plan, last_run = _plan(name, topic, group, state)
        summary: dict[str, Any] = {"topic": topic, "group": group, "results_topic": results_topic, "redo": redo}
        if plan is None:
            pages = {v["page"]: v["count"] for k, v in state.items() if k.startswith("page/")}
            return {
                **summary,
                "run": last_run,
                "records": 0,
                "skipped": 0,
                "ranges": {},
                "sessions": 0,
                "pages": pages,
                "top_pages": _top(pages),
                "parquet": {},
                "elapsed_s": round(time.monotonic() - t0, 3),
            }
        if callable(spark):
            say("waiting for Spark")
            spark = spark()
        out = _compute(spark, name, plan, state, session_gap_ms, parquet_dir, read_options, say)
        run_no = plan["run"]
        say(f"writing {results_topic} and the offsets of group {group} in one transaction")
        producer.begin_transaction()
        done = {**plan, "committed_at": int(time.time() * 1000)}
        _send_all(producer, results_topic, out["records"] + [(RUN_PREFIX + group, done)])
        offsets = {TopicPartition(topic, int(p)): r[1] for p, r in plan["ranges"].items()}
        producer.send_offsets_to_transaction(offsets, group, timeout=timeout_s)
        if crash_after_output:
            raise JobCrashed(f"run {run_no}: crashing with the transaction open, before committing (fault injection)")
        say("committing the transaction")
        producer.commit_transaction(timeout=timeout_s)
        _wait_complete(admin, tid, timeout_s)
    except JobCrashed:
        raise  # as a dead process would: no EndTxn, the transaction stays open
    except BaseException:
        _abort_quietly(producer)
        raise
    finally:
        producer.close(timeout=5)
    pages = {v["page"]: v["count"] for k, v in state.items() if k.startswith("page/")}
    pages.update({v["page"]: v["count"] for _, v in out["page_records"]})
    say(None)
    return {
        **summary,
        "run": run_no,
        "records": out["records_read"],
        "skipped": out["skipped"],
        "ranges": {int(p): tuple(r) for p, r in plan["ranges"].items()},
        "sessions": out["sessions"],
        "pages": pages,
        "top_pages": _top(pages),
        "parquet": out["parquet"],
        "steps_s": steps,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }


def _wait_complete(admin, tid: str, timeout_s: float) -> None:
    """Wait for the committed transaction's markers: EndTxn answers once PrepareCommit is durable (as in
    Kafka), and read_committed readers see the results only once the markers moved the last stable offset,
    so a run returns when ``read_results`` shows it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if admin.describe_transactions([tid])[0]["state"] in ("CompleteCommit", "Empty"):
                return
        except KafkaError:  # the coordinator moving: ask again
            pass
        if time.monotonic() >= deadline:
            from protocol.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"the transaction of {tid!r} was committed but its markers did not complete")
        time.sleep(0.05)


def _abort_quietly(producer) -> None:
    """Best effort: abort the open transaction (else the next run's ``init_transactions`` or the
    transaction timeout does)."""
    try:
        producer.abort_transaction(timeout=30)
    except Exception:  # noqa: BLE001 - no transaction open, or the cluster is unreachable: the error raised matters
        pass


def _compute(spark, cluster: str, plan: dict, state: dict, gap_ms: int, parquet_dir: str, read_options, say) -> dict:
    """Spark's part of a run: counts, sessions, Parquet; the result records to write (not yet written)."""
    from pyspark.sql import functions as F

    run_no = plan["run"]
    say(f"run {run_no}: reading {plan['topic']} into Spark")
    flagged, events = _events(spark, cluster, plan, dict(read_options or {}))
    say("counting pages")
    # one pass: clicks per page, the malformed records under a null page
    tally = flagged.groupBy(F.when(F.col("ok"), F.col("page")).alias("page")).count().collect()
    counts = {r["page"]: int(r["count"]) for r in tally if r["page"] is not None}
    records = sum(int(r["count"]) for r in tally)
    say("sessionizing")
    sessions = [r.asDict() for r in sessionize(spark, events, _user_input(state), gap_ms).collect()]
    flagged.unpersist()
    page_recs = _page_records(state, counts, run_no)
    say("writing Parquet")
    out_dir = os.path.abspath(parquet_dir)
    paths = {
        "page_counts": os.path.join(out_dir, "page_counts", f"run={run_no}"),
        "sessions": os.path.join(out_dir, "sessions", f"run={run_no}"),
    }
    _write_parquet(
        spark,
        [(v["page"], counts[v["page"]], v["count"], run_no) for _, v in page_recs],
        "page STRING, clicks LONG, total LONG, run INT",
        paths["page_counts"],
    )
    _write_parquet(
        spark,
        [(s["user"], s["start"], s["end"], s["clicks"], list(s["pages"]), run_no) for s in sessions],
        "user STRING, start LONG, end LONG, clicks LONG, pages ARRAY<STRING>, run INT",
        paths["sessions"],
    )
    return {
        "records": page_recs + _session_records(sessions, run_no),
        "page_records": page_recs,
        "records_read": records,
        "skipped": records - sum(counts.values()),
        "sessions": len(sessions),
        "parquet": paths,
    }


def _session_records(sessions: list[dict], run_no: int) -> list[tuple[str, dict]]:
    """``session/<user>/<start>`` per session touched, then ``user/<user>`` with the user's last session."""
    out, last = [], {}
    for s in sorted(sessions, key=lambda s: (s["user"], s["start"])):
        s = {"user": s["user"], "start": s["start"], "end": s["end"], "clicks": s["clicks"], "pages": list(s["pages"])}
        out.append((f"session/{s['user']}/{s['start']}", {**s, "run": run_no}))
        last[s["user"]] = s
    out.extend((f"user/{user}", {"run": run_no, "open": s}) for user, s in last.items())
    return out


def _top(pages: dict[str, int], n: int = 10) -> list[tuple[str, int]]:
    return sorted(pages.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
