"""`rafka group` verbs: list, describe, seek, reset-offsets (kafka-consumer-groups --reset-offsets) and delete."""

from __future__ import annotations

import sys
from typing import Any

from rafka.cli.support import EXIT_OK, UsageError, connect, echo, kv_pairs, print_result, table
from rafka.cli.types import index as _index

_print, _table, _connect, _kv_pairs, _echo = print_result, table, connect, kv_pairs, echo


# -- groups --------------------------------------------------------------------------------------------
def cmd_group_list(args) -> int:
    from rafka.admin.admin import Admin

    groups = Admin(_connect(args)).list_groups()
    _print(
        args,
        groups,
        _table([[g["group_id"], g["group_state"], g["protocol_type"]] for g in groups], ["GROUP", "STATE", "TYPE"]),
    )
    return EXIT_OK


def cmd_group_describe(args) -> int:
    from rafka.admin.admin import Admin

    d = Admin(_connect(args)).describe_groups([args.group_id])[0]
    client = {m["member_id"]: m["client_id"] for m in d["members"]}
    rows = [
        [
            o["topic"],
            o["partition"],
            "-" if o["committed"] is None else o["committed"],
            "-" if o["log_end"] is None else o["log_end"],
            "-" if o["lag"] is None else o["lag"],
            o["member_id"] or "-",
            client.get(o["member_id"], "-"),
        ]
        for o in d["offsets"]
    ]
    total = sum(o["lag"] or 0 for o in d["offsets"])
    human = f"GROUP {d['group_id']}  STATE {d['state']}  MEMBERS {len(d['members'])}  TOTAL-LAG {total}\n" + _table(
        rows, ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "MEMBER-ID", "CLIENT-ID"]
    )
    _print(args, d, human)
    return EXIT_OK


def cmd_group_seek(args) -> int:
    from rafka.admin.admin import Admin

    to: Any = {"start": "earliest", "earliest": "earliest", "end": "latest", "latest": "latest"}.get(args.to)
    if to is None:
        try:
            to = int(args.to)
        except ValueError:
            raise UsageError(f"--to must be start, end or an offset, got {args.to!r}") from None
    new = Admin(_connect(args)).reset_consumer_group_offsets(args.group_id, to, args.topic)
    rows = [[tp.topic, tp.partition, off] for tp, off in sorted(new.items())]
    _print(
        args,
        [{"topic": tp.topic, "partition": tp.partition, "offset": off} for tp, off in sorted(new.items())],
        _table(rows, ["TOPIC", "PARTITION", "NEW-OFFSET"]),
    )
    return EXIT_OK


def _reset_target(args) -> Any:
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_offset is not None:
        return args.to_offset
    if args.shift_by is not None:
        return {"shift_by": args.shift_by}
    from datetime import datetime

    try:
        when = datetime.fromisoformat(args.to_datetime)  # no zone: local time, as Kafka's tool
    except ValueError:
        raise UsageError(
            f"--to-datetime expects YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM|Z], got {args.to_datetime!r}"
        ) from None
    return {"timestamp": int(when.timestamp() * 1000)}


def _topic_partitions(specs: list[str] | None) -> tuple[list[str] | None, dict[str, list[int]]]:
    """``--topic T`` or ``--topic T:0,2`` (Kafka's form) -> topics, {topic: partitions}."""
    if not specs:
        return None, {}
    topics, parts = [], {}
    for spec in specs:
        name, _, plist = spec.partition(":")
        topics.append(name)
        if plist:
            try:
                parts[name] = sorted({int(x) for x in plist.split(",")})
            except ValueError:
                raise UsageError(f"--topic expects TOPIC or TOPIC:P,P..., got {spec!r}") from None
    return topics, parts


def cmd_group_reset_offsets(args) -> int:
    """kafka-consumer-groups --reset-offsets: a plan by default (--dry-run), applied with --execute."""
    from rafka.admin.admin import Admin
    from rafka.structs import TopicPartition

    to = _reset_target(args)
    topics, parts = _topic_partitions(args.topic)
    admin = Admin(_connect(args))
    plan = admin.plan_consumer_group_offsets_reset(args.group_id, to, topics, parts)
    if not plan:
        raise UsageError(
            f"nothing to reset: group {args.group_id!r} has no committed offsets (name the topics with --topic)"
        )
    execute = args.execute and not args.dry_run
    if execute:
        admin.alter_consumer_group_offsets(
            args.group_id, {TopicPartition(r["topic"], r["partition"]): r["new"] for r in plan}
        )
    elif not args.dry_run:
        print("rafka: dry run (the default, as Kafka's tool): add --execute to apply", file=sys.stderr)
    rows = [
        [args.group_id, r["topic"], r["partition"], "-" if r["current"] is None else r["current"], r["new"]]
        for r in plan
    ]
    _print(
        args,
        {"group_id": args.group_id, "executed": execute, "partitions": plan},
        _table(rows, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]),
    )
    return EXIT_OK


def cmd_group_delete(args) -> int:
    from rafka.admin.admin import Admin

    Admin(_connect(args)).delete_groups([args.group_id])
    _print(args, {"deleted": args.group_id}, f"deleted group {args.group_id}")
    return EXIT_OK


def register(groups, common) -> None:
    gp = groups.add_parser("group", help="list, describe, seek and delete consumer groups").add_subparsers(
        dest="verb", required=True
    )
    gp.add_parser("list", parents=[common], help="consumer groups and their state").set_defaults(func=cmd_group_list)
    s = gp.add_parser("describe", parents=[common], help="members and the per-partition lag table")
    s.add_argument("group_id", metavar="GROUP", help="consumer group id")
    s.set_defaults(func=cmd_group_describe)
    s = gp.add_parser("seek", parents=[common], help="reset committed offsets (the group must be empty)")
    s.add_argument("group_id", metavar="GROUP", help="consumer group id")
    s.add_argument("--to", required=True, help="start, end or an offset")
    s.add_argument("--topic", action="append", default=None, help="only these topics (default: committed ones)")
    s.set_defaults(func=cmd_group_seek)
    s = gp.add_parser("delete", parents=[common], help="delete a group with no active members")
    s.add_argument("group_id", metavar="GROUP", help="consumer group id")
    s.set_defaults(func=cmd_group_delete)
    s = gp.add_parser(
        "reset-offsets",
        parents=[common],
        help="kafka-consumer-groups --reset-offsets: show the plan (--dry-run, the default) or --execute it",
        description="Reset a group's committed offsets (the group must have no active members). The new offsets "
        "are clamped to each partition's [log start, log end]. Example: rafka group reset-offsets g --topic "
        "clicks:0,1 --shift-by -10 --execute",
    )
    s.add_argument("group_id", metavar="GROUP", help="consumer group id")
    how = s.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end offset")
    how.add_argument("--to-offset", type=_index, default=None, help="this offset")
    how.add_argument("--to-datetime", default=None, help="the first offset at or after YYYY-MM-DDTHH:MM:SS[.sss][zone]")
    how.add_argument("--shift-by", type=int, default=None, help="the committed offset plus N (N may be negative)")
    s.add_argument(
        "--topic", action="append", default=None, help="TOPIC or TOPIC:P,P (repeatable; default: committed ones)"
    )
    run = s.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    run.add_argument("--execute", action="store_true", help="apply the plan")
    s.set_defaults(func=cmd_group_reset_offsets)
