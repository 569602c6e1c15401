"""`rafka perf` verbs: kafka-producer-perf-test and kafka-consumer-perf-test over the Python client."""

from __future__ import annotations

import sys

from rafka.cli.support import EXIT_ERROR, EXIT_OK, connect, echo, kv_pairs, print_result, table
from rafka.cli.types import count as _count
from rafka.cli.types import index as _index

_print, _table, _connect, _kv_pairs, _echo = print_result, table, connect, kv_pairs, echo


# -- perf ----------------------------------------------------------------------------------------------
def _progress(args, total: int, label: str):
    if args.json or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=__import__("rich.console").console.Console(stderr=True),
    )
    task = prog.add_task(label, total=total)
    prog.start()
    return (lambda done: prog.update(task, completed=done)), prog.stop


def cmd_perf_produce(args) -> int:
    from rafka.tools.perf import produce_perf

    handle = _connect(args)
    update, stop = _progress(args, args.records, "producing")
    cfg = {
        "acks": args.acks,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
        "compression_type": args.compression,
    }
    try:
        res = produce_perf(
            handle, args.topic, args.records, args.record_size, args.throughput, update, key_count=args.keys, **cfg
        )
    finally:
        stop()
    human = (
        f"{res['records']} records sent, {res['records_per_s']:.1f} records/sec "
        f"({res['mb_per_s']:.2f} MB/sec), {res['latency_avg_ms']:.2f} ms avg latency, "
        f"{res['latency_max_ms']:.2f} ms max latency, {res['latency_p50_ms']:.2f} ms 50th, "
        f"{res['latency_p95_ms']:.2f} ms 95th, {res['latency_p99_ms']:.2f} ms 99th"
        + (f", {res['errors']} errors (first: {res['first_error']})" if res["errors"] else "")
    )
    _print(args, res, human)
    return EXIT_ERROR if res["errors"] else EXIT_OK


def cmd_perf_consume(args) -> int:
    from rafka.tools.perf import consume_perf

    handle = _connect(args)
    update, stop = _progress(args, args.records, "consuming")
    try:
        res = consume_perf(handle, args.topic, args.records, args.timeout, update)
    finally:
        stop()
    human = (
        f"{res['records']} records consumed in {res['elapsed_s']:.2f} s, {res['records_per_s']:.1f} "
        f"records/sec ({res['mb_per_s']:.2f} MB/sec)" + (" (timed out)" if res["timed_out"] else "")
    )
    _print(args, res, human)
    return EXIT_ERROR if res["timed_out"] else EXIT_OK


def register(groups, common) -> None:
    pf = groups.add_parser("perf", help="throughput/latency tests").add_subparsers(dest="verb", required=True)
    s = pf.add_parser("produce", parents=[common], help="kafka-producer-perf-test")
    s.add_argument("--topic", required=True, help="topic to write")
    s.add_argument("--records", type=_count, required=True, help="records to send")
    s.add_argument("--record-size", type=_index, default=100, help="value bytes per record (default 100)")
    s.add_argument("--acks", default="all", help="0, 1 or all (default all)")
    s.add_argument("--throughput", type=int, default=-1, help="records/s cap (-1: none)")
    s.add_argument("--batch-size", type=_count, default=65536, help="batch.size in bytes (default 65536)")
    s.add_argument("--linger-ms", type=_index, default=5, help="linger.ms (default 5)")
    s.add_argument("--compression", default="none", help="none, gzip, snappy, lz4 or zstd")
    s.add_argument("--keys", type=_index, default=0, help="cycle through this many keys (0: null keys)")
    s.set_defaults(func=cmd_perf_produce)
    s = pf.add_parser("consume", parents=[common], help="kafka-consumer-perf-test")
    s.add_argument("--topic", required=True, help="topic to read")
    s.add_argument("--records", type=_count, required=True, help="records to read")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds")
    s.set_defaults(func=cmd_perf_consume)
