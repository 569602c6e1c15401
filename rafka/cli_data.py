"""The data-plane verbs of the `rafka` CLI: ``rafka topic produce`` (lines or key<sep>value from stdin,
as kcat -P) and ``rafka topic consume`` (by partition and offset, or as a group member that commits after
each printed batch, as kcat -C / -G). The parser lives in rafka/cli.py."""

from __future__ import annotations

import json
import sys

from rafka.cli_support import EXIT_OK, UsageError, connect, echo, output_stream
from rafka.errors import KafkaError, UnknownTopicOrPartitionError


def cmd_topic_produce(args) -> int:
    from rafka.producer import Producer

    handle = connect(args)
    sent, failed = [], []
    with Producer(handle, acks=args.acks, linger_ms=args.linger_ms) as producer:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key, value = args.key, line
            if args.key_separator and args.key_separator in line:
                key, value = line.split(args.key_separator, 1)
            fut = producer.send(
                args.name, value=value.encode(), key=None if key is None else key.encode(), partition=args.partition
            )
            sent.append(fut)
        producer.flush()
    for fut in sent:
        if fut.failed():
            failed.append(str(fut.exception()))
    results = [fut.get() for fut in sent if fut.succeeded()]
    if not args.json:
        for md in results[-5:] if len(results) > 5 else results:
            echo(f"Produced to partition {md.partition} at offset {md.offset}")
        if len(results) > 5:
            echo(f"... {len(results)} records produced")
    else:
        echo(
            json.dumps(
                {
                    "produced": len(results),
                    "failed": len(failed),
                    "records": [{"partition": m.partition, "offset": m.offset} for m in results],
                }
            )
        )
    if failed:
        raise KafkaError(f"{len(failed)} record(s) failed: {failed[0]}")
    return EXIT_OK


def format_record(fmt: str, r) -> str:
    def text(b):
        if b is None:
            return ""
        return b.decode("utf-8", errors="replace") if isinstance(b, bytes) else str(b)

    if fmt == "json":
        return json.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": None if r.key is None else text(r.key),
                "value": None if r.value is None else text(r.value),
                "headers": {k: text(v) for k, v in r.headers},
            }
        )
    out = fmt.replace("\\n", "\n").replace("\\t", "\t")
    for code, val in (
        ("%t", r.topic),
        ("%p", r.partition),
        ("%o", r.offset),
        ("%d", r.timestamp),
        ("%k", text(r.key)),
        ("%v", text(r.value)),
    ):
        out = out.replace(code, str(val))
    return out


def cmd_topic_consume(args) -> int:
    from rafka.consumer import Consumer
    from rafka.structs import TopicPartition

    handle = connect(args)
    if args.consumer_group:
        return _consume_group(args, handle)
    consumer = Consumer(handle, auto_offset_reset="earliest")
    parts = consumer.partitions_for_topic(args.name)
    if parts is None:
        consumer.close()
        raise KafkaError(f"topic {args.name!r} does not exist")
    missing = sorted(set(args.partition or ()) - parts)
    if missing:
        consumer.close()
        raise UnknownTopicOrPartitionError(
            f"topic {args.name!r} has no partition {', '.join(map(str, missing))} (its partitions are "
            f"0..{len(parts) - 1})"
        )
    tps = [TopicPartition(args.name, p) for p in sorted(parts) if args.partition is None or p in args.partition]
    consumer.assign(tps)
    if args.offset in ("start", "oldest", "earliest"):
        consumer.seek_to_beginning()
    elif args.offset in ("end", "newest", "latest"):
        consumer.seek_to_end()
    else:
        try:
            off = int(args.offset)
        except ValueError:
            raise UsageError(f"--offset must be start, end or a number, got {args.offset!r}") from None
        for tp in tps:
            consumer.seek(tp, off)
    ends = consumer.end_offsets(tps) if args.exit_at_end else None
    fmt = "json" if args.json else args.format
    got = 0
    out = output_stream()
    try:
        while args.num is None or got < args.num:
            if ends is not None and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            limit = None if args.num is None else args.num - got
            for recs in consumer.poll(timeout_ms=500, max_records=limit).values():
                for r in recs:
                    text = format_record(fmt, r)
                    out.write(text if fmt != "json" and text.endswith("\n") else text + ("\n" if fmt == "json" else ""))
                    got += 1
            out.flush()
    finally:
        consumer.close()
    return EXIT_OK


def _consume_group(args, handle) -> int:
    """``topic consume NAME --group G``: a member of G (committed offsets, else --offset start|end);
    commits what it printed on exit. -e stops once every assigned partition reached its end."""
    import time

    from rafka.consumer import Consumer

    if args.partition is not None:
        raise UsageError("-p/--partition picks partitions by hand; with --group the group assigns them")
    if args.offset not in ("start", "oldest", "earliest", "end", "newest", "latest"):
        raise UsageError("with --group, --offset is start or end (the reset policy); use `rafka group seek`")
    reset = "earliest" if args.offset in ("start", "oldest", "earliest") else "latest"
    consumer = Consumer(handle, group_id=args.consumer_group, auto_offset_reset=reset, enable_auto_commit=False)
    if consumer.partitions_for_topic(args.name) is None:
        raise KafkaError(f"topic {args.name!r} does not exist")
    consumer.subscribe([args.name])
    fmt = "json" if args.json else args.format
    got, out = 0, output_stream()
    try:
        while args.num is None or got < args.num:
            limit = None if args.num is None else args.num - got
            batch = consumer.poll(timeout_ms=500, max_records=limit)
            for recs in batch.values():
                for r in recs:
                    text = format_record(fmt, r)
                    out.write(text if fmt != "json" and text.endswith("\n") else text + ("\n" if fmt == "json" else ""))
                    got += 1
            out.flush()
            if batch:
                consumer.commit()
            elif args.exit_at_end and consumer.assignment():
                tps = sorted(consumer.assignment())
                ends = consumer.end_offsets(tps)
                if all(consumer.position(tp) >= ends[tp] for tp in tps):
                    break
            time.sleep(0)
    finally:
        consumer.close()
    return EXIT_OK
