"""`rafka job ...` verbs (a `rafka.commands` entry point, pyproject.toml).

    rafka job list
    rafka job run clickstream [--topic clicks] [--group clickstream] [--results-topic clickstream-results]
                              [--parquet DIR] [--session-gap-ms MS] [--executors 1] [--json]

Without ``--parquet`` the job writes its Parquet under the cluster's data directory (the parent of the brokers'
log directories, as ``rafka cluster info`` lists them): ``<data_dir>/jobs/clickstream/<group>/`` (never the current
directory). ``job run`` attaches to the cluster like every verb (``--address``/``RAY_ADDRESS``/the started cluster),
starts Spark on that Ray cluster through RayDP (~15 s), runs the job and stops Spark. Progress goes to
stderr: one line per step of the job and Spark's console progress bar per stage; the summary goes to
stdout (a table, or JSON with ``--json``). RayDP and PySpark are imported only when a job runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time

JOBS = {
    "clickstream": "per-page click counts and per-user sessions of a click topic, to a compacted "
    "results topic and Parquet; results and the group's offsets in one transaction (exactly-once)"
}


def register(groups, common) -> None:
    jp = groups.add_parser("job", help="Spark jobs over topics (RayDP)").add_subparsers(dest="verb", required=True)
    jp.add_parser("list", parents=[common], help="the jobs that can run").set_defaults(func=cmd_job_list)
    s = jp.add_parser("run", parents=[common], help="run a job on the cluster's Ray through Spark (RayDP)")
    s.add_argument("job", choices=sorted(JOBS), help="the job to run (`rafka job list`)")
    s.add_argument("--topic", default="clicks", help="input topic (default clicks)")
    s.add_argument("--group", default="clickstream", help="consumer group whose offsets track progress")
    s.add_argument("--results-topic", default="clickstream-results", help="compacted results topic")
    s.add_argument(
        "--parquet",
        default=None,
        help="Parquet output directory (default <data_dir>/jobs/clickstream/<group>, under the cluster's data directory)",
    )
    s.add_argument("--session-gap-ms", type=int, default=1_800_000, help="inactivity that ends a session")
    s.add_argument("--executors", type=int, default=1, help="Spark executors (Ray actors)")
    s.add_argument("--executor-cores", type=int, default=1, help="cores per Spark executor (default 1)")
    s.add_argument("--executor-memory", default="1G", help="memory per Spark executor (default 1G)")
    s.set_defaults(func=cmd_job_run)


def cmd_job_list(args) -> int:
    from rafka.cli.support import EXIT_OK, print_result, table

    print_result(
        args,
        [{"name": n, "description": d} for n, d in JOBS.items()],
        table([[n, d] for n, d in JOBS.items()], ["JOB", "DESCRIPTION"]),
    )
    return EXIT_OK


class SparkStartError(RuntimeError):
    """Spark (its JVMs, RayDP) did not start: the first line of why."""


class SparkStart:
    """``start()`` (a SparkSession factory) run on a thread of its own from construction; ``session()``
    waits for it (raising ``SparkStartError`` when it failed), ``stop(stop_fn)`` waits for the start to end
    either way and stops what it started. PySpark sets its SIGINT handler only on the main thread, so a
    Ctrl-C during the start is Python's KeyboardInterrupt as before."""

    def __init__(self, start):
        import concurrent.futures

        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-start")
        self._future = self._pool.submit(start)

    def session(self):
        try:
            return self._future.result()
        except Exception as exc:  # noqa: BLE001 - whatever the JVM start raised, as one line
            text = str(exc).strip()
            raise SparkStartError(text.splitlines()[0] if text else type(exc).__name__) from exc

    def stop(self, stop_fn) -> None:
        try:
            self._future.result()
        except Exception:  # noqa: BLE001 - reported by session(); a half-started Spark is stopped below too
            pass
        finally:
            self._pool.shutdown(wait=True)
            stop_fn()


def _step_printer(args):
    """Each job step as a line on stderr (with the time since the start), unless --json."""
    t0 = time.monotonic()
    if args.json:
        return lambda step: None
    return lambda step: print(f"[{time.monotonic() - t0:6.1f}s] {step}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send fd 1 to stderr while Spark runs: the JVMs it starts (driver, RayDP's AppMaster) print log4j
    notices on stdout, which must carry only the summary (it may be --json)."""
    from rafka.cli.support import output_stream

    for stream in (sys.stdout, output_stream()):
        stream.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        for stream in (sys.stdout, output_stream()):
            stream.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_job_run(args) -> int:
    from jobs import clickstream
    from jobs.spark import init_spark, stop_spark
    from rafka.cli.support import EXIT_ERROR, EXIT_OK, UsageError, connect, print_result

    if args.executors < 1 or args.executor_cores < 1:
        raise UsageError("--executors and --executor-cores must be >= 1")
    if args.session_gap_ms < 0:
        raise UsageError("--session-gap-ms must be >= 0")
    handle = connect(args)
    from protocol.errors import UnknownTopicOrPartitionError
    from rafka.admin.admin import Admin

    if Admin(handle).metadata.topic(args.topic) is None:  # before paying for a Spark start
        raise UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist")
    parquet = args.parquet or clickstream.default_output_dir(handle, args.group)
    say = _step_printer(args)
    # the step lines and Spark's bar are the progress: Ray Data's per-dataset INFO reports would bury them
    import ray.data  # noqa: F401 - Ray Data configures its loggers on import: quiet them after that

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    say(f"starting Spark ({args.executors} executor(s) on Ray)")
    with _stdout_to_stderr():
        # Spark's start (~12 s: JVMs, RayDP's AppMaster, the executor) runs beside the job's first steps
        # (fencing earlier runs, reading the state, planning), which only use rafka: the job waits for Spark
        # only when it computes, and a run with nothing new does not wait for it at all
        starting = SparkStart(
            lambda: init_spark(f"rafka-job-{args.job}", args.executors, args.executor_cores, args.executor_memory)
        )
        try:
            summary = clickstream.run(
                handle,
                starting.session,
                topic=args.topic,
                group=args.group,
                results_topic=args.results_topic,
                parquet_dir=parquet,
                session_gap_ms=args.session_gap_ms,
                progress=say,
            )
        except SparkStartError as exc:  # a JVM/RayDP start failure is one line, not a Java trace
            print(f"rafka: Spark did not start: {exc}", file=sys.stderr)
            return EXIT_ERROR
        finally:
            say("stopping Spark")
            starting.stop(stop_spark)
    print_result(args, summary, _summary_text(summary))
    return EXIT_OK


def _summary_text(s: dict) -> str:
    from rafka.cli.support import table

    if not s["records"]:
        return f"nothing new in {s['topic']!r} for group {s['group']!r} (last run {s['run']})"
    ranges = ", ".join(f"{p}:[{a},{b})" for p, (a, b) in sorted(s["ranges"].items()))
    rows = [
        ["run", f"{s['run']}{' (redo: the uncommitted attempt was aborted)' if s['redo'] else ''}"],
        ["records", s["records"]],
        ["skipped (malformed)", s["skipped"]],
        ["offset ranges", ranges],
        ["sessions (this run)", s["sessions"]],
        ["pages (total)", len(s["pages"])],
        ["parquet", s["parquet"].get("page_counts", "")],
        ["", s["parquet"].get("sessions", "")],
        ["results topic", s["results_topic"]],
        ["elapsed", f"{s['elapsed_s']:.1f} s"],
    ]
    top = table([[p, n] for p, n in s["top_pages"]], ["TOP PAGE", "CLICKS (TOTAL)"])
    return table(rows, ["CLICKSTREAM", ""]) + "\n\n" + top
