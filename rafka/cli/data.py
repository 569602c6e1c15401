"""The data-plane verbs of the `rafka` CLI: ``rafka topic produce`` (lines or key<sep>value from stdin,
as kcat -P) and ``rafka topic consume`` (by partition and offset, or as a group member that commits after
each printed batch, as kcat -C / -G). The parser lives in rafka/cli/main.py."""

from __future__ import annotations

import json
import sys

from protocol.errors import KafkaError, UnknownTopicOrPartitionError
from rafka.cli.support import EXIT_OK, UsageError, bound, connect, echo, output_stream


def _headers(items: list[str] | None) -> list[tuple[str, bytes]]:
    """``-H k=v`` options (kcat's): the headers every produced record carries, in order (a key may repeat)."""
    out = []
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"-H expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        if not k:
            raise UsageError(f"-H needs a header key, got {item!r}")
        out.append((k, v.encode()))
    return out


def cmd_topic_produce(args) -> int:
    """One record per stdin line. The topic is checked before the first line is read (an unknown topic
    fails at once, unless the brokers auto-create it). Interactive (stdin a terminal) or ``--print-acks``:
    each record is sent as its line arrives and its acknowledgement printed as it comes; Ctrl-C flushes
    what was typed before exiting (130), so no line is silently lost."""
    import threading

    from rafka.producer.producer import Producer

    handle = connect(args)
    headers = _headers(args.header)
    interactive = sys.stdin.isatty()
    print_acks = args.print_acks or interactive
    sent, failed = [], []
    lock = threading.Lock()
    out, err = output_stream(), bound(sys.stderr)  # the acks are printed from the producer's thread

    def ack(md) -> None:
        if args.json:
            line = json.dumps({"partition": md.partition, "offset": md.offset, "timestamp": md.timestamp})
        else:
            line = f"Produced to partition {md.partition} at offset {md.offset}"
        with lock:
            out.write(line + "\n")
            out.flush()

    def nack(exc) -> None:
        with lock:
            print(f"rafka: a record failed: {exc}", file=err, flush=True)

    interrupted = False
    with Producer(handle, acks=args.acks, linger_ms=0 if interactive else args.linger_ms) as producer:
        producer.metadata.require_topic(args.name, producer.config.max_block_ms)
        if print_acks:
            print(
                f"rafka: producing to {args.name!r}: a record per line (Ctrl-C or end of input to stop)",
                file=sys.stderr,
                flush=True,
            )
        try:
            for line in sys.stdin:
                line = line.rstrip("\n")
                key, value = args.key, line
                if args.key_separator and args.key_separator in line:
                    key, value = line.split(args.key_separator, 1)
                fut = producer.send(
                    args.name,
                    value=value.encode(),
                    key=None if key is None else key.encode(),
                    headers=headers or None,
                    partition=args.partition,
                )
                if print_acks:
                    fut.add_callback(ack).add_errback(nack)
                sent.append(fut)
        except KeyboardInterrupt:  # Ctrl-C: what was typed so far still goes out (flush below)
            interrupted = True
        producer.flush()
    for fut in sent:
        if fut.failed():
            failed.append(str(fut.exception()))
    results = [fut.get() for fut in sent if fut.succeeded()]
    if print_acks:
        if not args.json:
            echo(f"{len(results)} record(s) produced" + (", then interrupted" if interrupted else ""))
    elif not args.json:
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
    if interrupted:
        raise KeyboardInterrupt
    return EXIT_OK


ENCODINGS = ("text", "hex", "base64")


def _encode(b, encoding: str) -> str | None:
    """Key, value or header bytes as printable text: UTF-8 (undecodable bytes as \\xNN escapes, so nothing is
    silently replaced), hex, or base64."""
    if b is None:
        return None
    if not isinstance(b, (bytes, bytearray, memoryview)):
        return str(b)
    if encoding == "hex":
        return bytes(b).hex()
    if encoding == "base64":
        import base64

        return base64.b64encode(bytes(b)).decode("ascii")
    return bytes(b).decode("utf-8", errors="backslashreplace")


def format_record(fmt: str, r, encoding: str = "text") -> str:
    """One record as JSON (``fmt == "json"``) or through a kcat-style template: %t topic, %p partition,
    %o offset, %T (or %d) timestamp ms, %k key, %v value, %h headers (k=v,k2=v2), %K / %S key / value
    length in bytes (-1 for null), %% a percent sign, \\n and \\t."""
    headers = [(k, _encode(v, encoding)) for k, v in (r.headers or ())]
    if fmt == "json":
        return json.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _encode(r.key, encoding),
                "value": _encode(r.value, encoding),
                "headers": [{"key": k, "value": v} for k, v in headers],
                **({} if encoding == "text" else {"encoding": encoding}),
            }
        )
    codes = {
        "t": r.topic,
        "p": r.partition,
        "o": r.offset,
        "T": r.timestamp,
        "d": r.timestamp,
        "k": _encode(r.key, encoding) or "",
        "v": _encode(r.value, encoding) or "",
        "h": ",".join(f"{k}={'' if v is None else v}" for k, v in headers),
        "K": -1 if r.key is None else len(r.key),
        "S": -1 if r.value is None else len(r.value),
        "%": "%",
    }
    out, i, text = [], 0, fmt.replace("\\n", "\n").replace("\\t", "\t")
    while i < len(text):
        c = text[i]
        if c == "%" and i + 1 < len(text) and text[i + 1] in codes:
            out.append(str(codes[text[i + 1]]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_offset_spec(spec: str) -> tuple[str, int | None]:
    """kcat's ``-o``: ``start``/``beginning``/``earliest``, ``end``/``latest``, an offset ``N``, ``-N`` (N records
    before the end), ``s@TS`` (the first record at or after TS, milliseconds or an ISO date-time) ->
    ``(kind, value)`` with kind in earliest / latest / absolute / relative / timestamp."""
    spec = spec.strip()
    if spec in ("start", "beginning", "oldest", "earliest"):
        return "earliest", None
    if spec in ("end", "newest", "latest"):
        return "latest", None
    if spec.startswith("s@"):
        return "timestamp", parse_timestamp(spec[2:])
    try:
        n = int(spec)
    except ValueError:
        raise UsageError(
            f"offset {spec!r}: expected start, end, an offset N, -N (N before the end) or s@TIMESTAMP"
        ) from None
    return ("relative", n) if spec.startswith("-") else ("absolute", n)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC unless it names a zone)."""
    from datetime import datetime, timezone

    try:
        return int(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"timestamp {text!r}: expected milliseconds or an ISO date-time (2026-11-26T10:00:00)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _start_positions(consumer, tps, specs: list[str], from_ts: str | None) -> dict:
    """``-o`` options (``SPEC`` for every partition, ``P:SPEC`` for one) -> ``{tp: offset}``, clamped to each
    partition's [log start, end]."""
    default: tuple[str, int | None] = ("earliest", None)
    per: dict[int, tuple[str, int | None]] = {}
    for spec in specs or ():
        head, sep, rest = spec.partition(":")
        if sep and head.strip().isdigit():
            per[int(head)] = parse_offset_spec(rest)
        else:
            default = parse_offset_spec(spec)
    if from_ts is not None:
        default = ("timestamp", parse_timestamp(from_ts))
    unknown = sorted(set(per) - {tp.partition for tp in tps})
    if unknown:
        raise UsageError(f"-o names partition(s) {', '.join(map(str, unknown))} that are not consumed")
    starts, ends = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    wanted = {tp: per.get(tp.partition, default) for tp in tps}
    by_ts = {tp: v for tp, (k, v) in wanted.items() if k == "timestamp"}
    found = consumer.offsets_for_times(by_ts) if by_ts else {}
    out = {}
    for tp, (kind, v) in wanted.items():
        lo, hi = starts[tp], ends[tp]
        if kind == "earliest":
            off = lo
        elif kind == "latest":
            off = hi
        elif kind == "absolute":
            off = v
        elif kind == "relative":
            off = hi + v
        else:
            hit = found.get(tp)
            off = hi if hit is None else hit.offset
        out[tp] = min(max(off, lo), hi)
    return out


def cmd_topic_consume(args) -> int:
    from rafka.consumer.consumer import Consumer
    from rafka.structs import TopicPartition

    handle = connect(args)
    if args.consumer_group:
        return _consume_group(args, handle)
    consumer = Consumer(handle, auto_offset_reset="earliest")
    parts = consumer.partitions_for_topic(args.name)
    if parts is None:
        consumer.close()
        raise UnknownTopicOrPartitionError(f"topic {args.name!r} does not exist")
    missing = sorted(set(args.partition or ()) - parts)
    if missing:
        consumer.close()
        raise UnknownTopicOrPartitionError(
            f"topic {args.name!r} has no partition {', '.join(map(str, missing))} (its partitions are "
            f"0..{len(parts) - 1})"
        )
    tps = [TopicPartition(args.name, p) for p in sorted(parts) if args.partition is None or p in args.partition]
    consumer.assign(tps)
    try:
        positions = _start_positions(consumer, tps, args.offset, args.from_timestamp)
    except BaseException:
        consumer.close()
        raise
    for tp, off in positions.items():
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
                    text = format_record(fmt, r, args.encoding)
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

    from rafka.consumer.consumer import Consumer

    if args.partition is not None:
        raise UsageError("-p/--partition picks partitions by hand; with --group the group assigns them")
    spec = (args.offset or ["start"])[-1]
    if (
        len(args.offset or ()) > 1
        or args.from_timestamp is not None
        or spec not in ("start", "beginning", "oldest", "earliest", "end", "newest", "latest")
    ):
        raise UsageError("with --group, -o is start or end (the reset policy); use `rafka group seek`")
    reset = "earliest" if spec in ("start", "beginning", "oldest", "earliest") else "latest"
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
                    text = format_record(fmt, r, args.encoding)
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
