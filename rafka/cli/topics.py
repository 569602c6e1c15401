"""The `rafka topic` / `rafka cluster` verbs for operators, past create/list/describe (rafka/cli/main.py):

    rafka topic trim-prefix NAME -o OFFSET|end [-p P ...]        Kafka's DeleteRecords (kafka-delete-records,
                                                                  rpk topic trim-prefix); alias delete-records
    rafka topic elect-leaders [NAME ...] [-p P ...] [--type preferred|unclean]   (kafka-leader-election)
    rafka topic reassign NAME -p P --replicas 1,2,0 | --cancel    (kafka-reassign-partitions --execute)
    rafka topic reassignments                                     the reassignments in progress
    rafka cluster configs [--broker N]                            every broker config with its source

Each prints a table, or one JSON document with ``--json``; a Kafka error is one line and exit code 1.
"""

from __future__ import annotations

from rafka.cli.support import EXIT_OK, UsageError, connect, print_result, table
from rafka.cli.types import index


def _partitions_of(admin, name: str, wanted: list[int] | None) -> list[int]:
    from protocol.errors import UnknownTopicOrPartitionError

    (d,) = admin.describe_topics([name])
    have = sorted(p["partition"] for p in d["partitions"])
    if wanted is None:
        return have
    missing = sorted(set(wanted) - set(have))
    if missing:
        raise UnknownTopicOrPartitionError(
            f"topic {name!r} has no partition {', '.join(map(str, missing))} (its partitions are 0..{len(have) - 1})"
        )
    return sorted(set(wanted))


def cmd_topic_trim_prefix(args) -> int:
    from rafka.admin.admin import Admin
    from rafka.structs import TopicPartition

    if args.offset in ("end", "latest", "hw"):
        offset = -1
    else:
        try:
            offset = int(args.offset)
        except ValueError:
            raise UsageError(
                f"-o/--offset must be an offset or end (the high watermark), got {args.offset!r}"
            ) from None
        if offset < 0:
            raise UsageError(f"-o/--offset must be >= 0 or end, got {args.offset!r}")
    admin = Admin(connect(args))
    parts = _partitions_of(admin, args.name, args.partition)
    low = admin.delete_records({TopicPartition(args.name, p): offset for p in parts})
    rows = [[tp.topic, tp.partition, lw] for tp, lw in sorted(low.items())]
    print_result(
        args,
        [{"topic": t, "partition": p, "low_watermark": lw} for t, p, lw in rows],
        table(rows, ["TOPIC", "PARTITION", "LOG-START-OFFSET"]),
    )
    return EXIT_OK


def cmd_topic_elect_leaders(args) -> int:
    from protocol.errors import for_code
    from rafka.admin.admin import Admin

    admin = Admin(connect(args))
    if args.partition is not None and len(args.names) != 1:
        raise UsageError("-p/--partition needs exactly one topic")
    parts = None
    if args.names:
        parts = [(n, p) for n in args.names for p in _partitions_of(admin, n, args.partition)]
    results = admin.elect_leaders(parts, election_type=args.type)
    rows = []
    for r in sorted(results, key=lambda r: (r["topic"], r["partition"])):
        code = r.get("error_code", 0)
        outcome = "elected" if not code else for_code(code).__name__.removesuffix("Error")
        rows.append([r["topic"], r["partition"], outcome, r.get("error_message") or ""])
    print_result(args, results, table(rows, ["TOPIC", "PARTITION", "RESULT", "MESSAGE"]))
    return EXIT_OK


def cmd_topic_reassign(args) -> int:
    from rafka.admin.admin import Admin
    from rafka.structs import TopicPartition

    if args.cancel == (args.replicas is not None):
        raise UsageError("reassign needs --replicas B1,B2,... or --cancel")
    replicas = None
    if args.replicas is not None:
        try:
            replicas = [int(x) for x in args.replicas.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--replicas is a comma-separated list of broker ids, got {args.replicas!r}") from None
        if not replicas:
            raise UsageError("--replicas names at least one broker")
    admin = Admin(connect(args))
    parts = _partitions_of(admin, args.name, args.partition)
    admin.alter_partition_reassignments({TopicPartition(args.name, p): replicas for p in parts})
    rows = [[args.name, p, "cancelled" if replicas is None else ",".join(map(str, replicas))] for p in parts]
    print_result(
        args,
        [{"topic": args.name, "partition": p, "target_replicas": replicas} for p in parts],
        table(rows, ["TOPIC", "PARTITION", "TARGET-REPLICAS"]),
    )
    return EXIT_OK


def cmd_topic_reassignments(args) -> int:
    from rafka.admin.admin import Admin

    items = Admin(connect(args)).list_partition_reassignments()
    rows = [[r.get("topic"), r.get("partition"), r.get("replicas"), r.get("adding"), r.get("removing")] for r in items]
    print_result(
        args, items, table(rows, ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"]) if rows else "(none)"
    )
    return EXIT_OK


def cmd_cluster_configs(args) -> int:
    from rafka.admin.admin import Admin

    by_broker = Admin(connect(args)).describe_broker_configs(args.broker)
    if args.json:
        print_result(args, {str(b): e for b, e in by_broker.items()})
        return EXIT_OK
    blocks = []
    for bid, entries in sorted(by_broker.items()):
        rows = [[e["name"], e["value"], e["source"]] for e in entries]
        blocks.append(f"BROKER {bid}\n" + table(rows, ["NAME", "VALUE", "SOURCE"]))
    print_result(args, None, "\n\n".join(blocks))
    return EXIT_OK


def register(tp, cl, common) -> None:
    """Add the verbs to the ``topic`` (``tp``) and ``cluster`` (``cl``) sub-parsers."""
    s = tp.add_parser(
        "trim-prefix",
        aliases=["delete-records"],
        parents=[common],
        help="delete the records below an offset (Kafka's DeleteRecords)",
    )
    s.add_argument("name", help="topic name")
    s.add_argument("-o", "--offset", required=True, help="the new log start offset, or end (the high watermark)")
    s.add_argument("-p", "--partition", type=index, action="append", default=None, help="repeatable; default all")
    s.set_defaults(func=cmd_topic_trim_prefix)
    s = tp.add_parser("elect-leaders", parents=[common], help="preferred (or unclean) leader election")
    s.add_argument("names", nargs="*", help="topics (default: every partition of the cluster)")
    s.add_argument("-p", "--partition", type=index, action="append", default=None, help="with one topic; repeatable")
    s.add_argument(
        "--type", choices=("preferred", "unclean"), default="preferred", help="preferred (default) or unclean"
    )
    s.set_defaults(func=cmd_topic_elect_leaders)
    s = tp.add_parser("reassign", parents=[common], help="move a partition's replicas to other brokers")
    s.add_argument("name", help="topic name")
    s.add_argument("-p", "--partition", type=index, action="append", default=None, help="repeatable; default all")
    s.add_argument("--replicas", default=None, help="the new replica list, preferred leader first: 1,2,0")
    s.add_argument("--cancel", action="store_true", help="cancel the reassignment in progress")
    s.set_defaults(func=cmd_topic_reassign)
    tp.add_parser("reassignments", parents=[common], help="reassignments in progress").set_defaults(
        func=cmd_topic_reassignments
    )
    s = cl.add_parser("configs", parents=[common], help="every broker config with its source (Kafka's names)")
    s.add_argument("--broker", type=index, default=None, help="only this broker")
    s.set_defaults(func=cmd_cluster_configs)
