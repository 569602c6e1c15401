"""The clickstream job: per-page click counts and per-user sessions over a click topic, in Spark (RayDP).

    summary = run(cluster, spark, topic="clicks", group="clickstream", parquet_dir="/tmp/clickstream")
    read_results(cluster, "clickstream-results")   # {"pages": {...}, "sessions": [...], ...}

Input: records keyed by user whose values are JSON events ``{"id", "user", "seq", "page", "ts" (epoch ms),
"referrer", "device"}`` (``jobs.demo.ClickStream``). Values that are not JSON objects with a string
``user``, a string ``page`` and an integer ``ts`` are skipped and counted, never fatal. A session is a
user's clicks with gaps of at most ``session_gap_ms``; it is reported as ``{user, start, end, clicks,
pages}`` (``pages``: the distinct pages in first-visit order).

Outputs: the compacted results topic (created when missing: one partition, ``cleanup.policy=compact``,
RF min(3, brokers)) holds the current state, one key per fact; Parquet holds each run's output
(``<parquet_dir>/page_counts/run=N/``, ``<parquet_dir>/sessions/run=N/``). Then the group's committed
offsets move to the end of what was read, so the next run processes only newer records.

Exactly-once output per offset range (a crash anywhere never double counts):

1. Each run is numbered. Before computing, the job writes the plan ``__plan__/<group>`` = ``{run,
   topic, ranges: {partition: [start, end)}, committed: {partition: offset | None}}`` to the results
   topic: ``start`` is the group's committed offset (the log start when it has none), ``end`` the high
   watermark at planning time.
2. On start, if the latest plan's ``committed`` equals the group's committed offsets now, that plan
   was never committed (the previous run crashed somewhere after writing it): the job redoes exactly
   that plan, with the same run number, whatever arrived since. Otherwise it plans run N+1.
3. Cumulative records carry the run that wrote them and the state they were computed from:
   ``page/<page>`` = ``{page, count, run: N, base}`` with ``count = base + clicks in run N``. Run N
   takes ``base`` from a record it wrote itself (a redo) and ``count`` from an older run's record, so
   redoing N gives the same totals. ``user/<user>`` = ``{run: N, prev, open}`` carries the user's last
   session (``open``) across the run boundary, and ``prev`` (the one run N started from) for redos: a
   session continued by the next run is re-emitted under its unchanged key
   ``session/<user>/<start>`` with the larger end and counts, and compaction keeps the latest.
4. Parquet is written per run directory in overwrite mode, so a redo replaces the crashed attempt's
   files. Only then are the offsets committed (``Admin.alter_consumer_group_offsets``: the job is not a
   group member, so the group must have no active members).

A crash after committing but before anything else leaves nothing to redo: the committed offsets no
longer match the plan. One results topic serves one group (the cumulative records are not keyed by
group); resetting the group's offsets by hand makes the next run count those records again (on purpose).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import pyarrow as pa

from rafka.errors import KafkaError, TopicAlreadyExistsError
from rafka.structs import TopicPartition

__all__ = ["run", "read_results", "sessionize", "JobCrashed"]

PLAN_PREFIX = "__plan__/"


class JobCrashed(RuntimeError):
    """The fault-injection point (``crash_after_output=True``): outputs written, offsets not committed."""


# -- the results topic ------------------------------------------------------------------------------------
def ensure_results_topic(admin, name: str) -> None:
    """Create the compacted results topic when it is missing (one partition: the plan and the state are
    read back whole at every run, in order)."""
    if admin.metadata.topic(name) is not None:
        return
    brokers = [b for b in admin.describe_cluster()["brokers"] if b.get("alive", True)]
    try:
        admin.create_topic(name, 1, min(3, max(1, len(brokers))), {"cleanup.policy": "compact"})
    except TopicAlreadyExistsError:
        pass  # created meanwhile by another run


def load_state(cluster: Any, results_topic: str) -> dict[str, dict]:
    """The latest value of every key of the results topic (tombstones remove keys)."""
    from jobs.datasource import plan_ranges, read_partition
    from rafka.cluster import resolve_cluster

    name = resolve_cluster(cluster)
    state: dict[str, dict] = {}
    for p, (s, e) in plan_ranges(name, results_topic).items():
        for table in read_partition(name, results_topic, p, s, e):
            for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
                if k is None:
                    continue
                if v is None:
                    state.pop(k.decode(), None)
                else:
                    state[k.decode()] = json.loads(v)
    return state


def read_results(cluster: Any, results_topic: str = "clickstream-results") -> dict:
    """The job's current results: ``{"pages": {page: total}, "sessions": [session...] (by user, start),
    "open_sessions": {user: session}, "plans": {group: plan}}``."""
    state = load_state(cluster, results_topic)
    out: dict[str, Any] = {"pages": {}, "sessions": [], "open_sessions": {}, "plans": {}}
    for key, v in state.items():
        kind = key.split("/", 1)[0]
        if kind == "page":
            out["pages"][v["page"]] = v["count"]
        elif kind == "session":
            out["sessions"].append({k: v[k] for k in ("user", "start", "end", "clicks", "pages")})
        elif kind == "user" and v.get("open"):
            out["open_sessions"][key.split("/", 1)[1]] = v["open"]
        elif key.startswith(PLAN_PREFIX):
            out["plans"][key[len(PLAN_PREFIX) :]] = v
    out["sessions"].sort(key=lambda s: (s["user"], s["start"]))
    return out


# -- planning -------------------------------------------------------------------------------------------
def _committed(admin, topic: str, group: str) -> dict[int, int]:
    return {tp.partition: off for tp, off in admin.list_consumer_group_offsets(group).items() if tp.topic == topic}


def _plan(admin, cluster: str, topic: str, group: str, state: dict) -> tuple[dict | None, bool, int]:
    """``(plan, redo, last run)``: the unfinished previous plan to redo, a new plan, or None (nothing new)."""
    from jobs.datasource import plan_ranges

    prev = state.get(PLAN_PREFIX + group)
    committed = _committed(admin, topic, group)
    last_run = prev["run"] if prev else 0
    if prev is not None and prev["topic"] == topic:
        then = {int(p): o for p, o in prev["committed"].items()}
        if {p: committed.get(p) for p in then} == then:
            return prev, True, last_run
    ranges = plan_ranges(cluster, topic, "earliest", "latest", group=group)
    if all(s == e for s, e in ranges.values()):
        return None, False, last_run
    plan = {
        "run": last_run + 1,
        "group": group,
        "topic": topic,
        "ranges": {str(p): [s, e] for p, (s, e) in sorted(ranges.items())},
        "committed": {str(p): committed.get(p) for p in sorted(ranges)},
        "planned_at": int(time.time() * 1000),
    }
    return plan, False, last_run


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
        **read_options,
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
def _produce(cluster: str, topic: str, records: list[tuple[str, dict]]) -> None:
    """Write ``(key, value)`` records with an idempotent acks=all producer; raise the first failure."""
    from rafka.producer import Producer

    errors: list[BaseException] = []
    with Producer(cluster, acks="all", linger_ms=20, batch_size=262144) as producer:
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
        base = 0 if prev is None else (prev["base"] if prev["run"] == run_no else prev["count"])
        out.append((f"page/{page}", {"page": page, "count": base + n, "run": run_no, "base": base}))
    return out


def _user_input(state: dict, run_no: int) -> list[dict]:
    """Each user's open session as run ``run_no`` must start from (``prev`` when redoing that run)."""
    out = []
    for key, v in state.items():
        if key.startswith("user/"):
            s = v["prev"] if v["run"] == run_no else v["open"]
            if s:
                out.append(s)
    return out


def _write_parquet(spark, rows: list, schema: str, path: str) -> None:
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(path)


# -- the job --------------------------------------------------------------------------------------------
def run(
    cluster: Any,
    spark: Any,
    topic: str = "clicks",
    group: str = "clickstream",
    results_topic: str = "clickstream-results",
    parquet_dir: str = "clickstream-output",
    session_gap_ms: int = 1_800_000,
    crash_after_output: bool = False,
    progress: Callable[[str], None] | None = None,
    read_options: dict | None = None,
) -> dict:
    """One run of the job (see the module doc); returns its summary. ``progress(step)`` is told each step;
    ``read_options`` go to ``TopicDatasource`` (e.g. ``{"num_cpus": 0.25}``)."""
    from pyspark.sql import functions as F

    from rafka.admin import Admin
    from rafka.cluster import resolve_cluster

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
    admin = Admin(name)
    if admin.metadata.topic(topic) is None:
        from rafka.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    ensure_results_topic(admin, results_topic)
    say("loading state")
    state = load_state(name, results_topic)
    plan, redo, last_run = _plan(admin, name, topic, group, state)
    summary: dict[str, Any] = {"topic": topic, "group": group, "results_topic": results_topic}
    if plan is None:
        pages = {v["page"]: v["count"] for k, v in state.items() if k.startswith("page/")}
        return {
            **summary,
            "run": last_run,
            "redo": False,
            "records": 0,
            "skipped": 0,
            "ranges": {},
            "sessions": 0,
            "pages": pages,
            "top_pages": _top(pages),
            "parquet": {},
            "elapsed_s": round(time.monotonic() - t0, 3),
        }
    run_no = plan["run"]
    if not redo:
        _produce(name, results_topic, [(PLAN_PREFIX + group, plan)])
    say(f"run {run_no}{' (redo)' if redo else ''}: reading {topic} into Spark")
    flagged, events = _events(spark, name, plan, dict(read_options or {}))
    say("counting pages")
    # one pass: clicks per page, the malformed records under a null page
    tally = flagged.groupBy(F.when(F.col("ok"), F.col("page")).alias("page")).count().collect()
    counts = {r["page"]: int(r["count"]) for r in tally if r["page"] is not None}
    records = sum(int(r["count"]) for r in tally)
    good = sum(counts.values())
    say("sessionizing")
    sessions = [r.asDict() for r in sessionize(spark, events, _user_input(state, run_no), session_gap_ms).collect()]
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
    say(f"writing {results_topic}")
    _produce(name, results_topic, page_recs + _session_records(state, sessions, run_no))
    if crash_after_output:
        raise JobCrashed(f"run {run_no}: crashing after writing the outputs, before committing (fault injection)")
    say(f"committing offsets of group {group}")
    admin.alter_consumer_group_offsets(group, {TopicPartition(topic, int(p)): r[1] for p, r in plan["ranges"].items()})
    pages = {v["page"]: v["count"] for k, v in state.items() if k.startswith("page/")}
    pages.update({v["page"]: v["count"] for _, v in page_recs})
    say(None)
    return {
        **summary,
        "run": run_no,
        "redo": redo,
        "records": records,
        "skipped": records - good,
        "ranges": {int(p): tuple(r) for p, r in plan["ranges"].items()},
        "sessions": len(sessions),
        "pages": pages,
        "top_pages": _top(pages),
        "parquet": paths,
        "steps_s": steps,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }


def _session_records(state: dict, sessions: list[dict], run_no: int) -> list[tuple[str, dict]]:
    """``session/<user>/<start>`` per session touched, then ``user/<user>`` with the user's last session."""
    out, last = [], {}
    for s in sorted(sessions, key=lambda s: (s["user"], s["start"])):
        s = {"user": s["user"], "start": s["start"], "end": s["end"], "clicks": s["clicks"], "pages": list(s["pages"])}
        out.append((f"session/{s['user']}/{s['start']}", {**s, "run": run_no}))
        last[s["user"]] = s
    for user, s in last.items():
        prev = state.get(f"user/{user}")
        before = None if prev is None else (prev["prev"] if prev["run"] == run_no else prev["open"])
        out.append((f"user/{user}", {"run": run_no, "prev": before, "open": s}))
    return out


def _top(pages: dict[str, int], n: int = 10) -> list[tuple[str, int]]:
    return sorted(pages.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
