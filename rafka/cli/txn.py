"""``rafka txn ...``: what Kafka's kafka-transactions.sh offers (list, describe, describe-producers,
find-hanging, abort, abort-hanging), each with ``--json``. Registered through the ``rafka.commands`` entry point."""

from __future__ import annotations

from rafka.cli.support import EXIT_OK, connect, print_result, table
from rafka.structs import TopicPartition


def _admin(args):
    from rafka.admin.admin import Admin

    return Admin(connect(args))


def cmd_txn_list(args) -> int:
    txns = _admin(args).list_transactions(args.state or ())
    rows = [[t["transactional_id"], t["producer_id"], t["state"]] for t in txns]
    print_result(args, txns, table(rows, ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]))
    return EXIT_OK


def cmd_txn_describe(args) -> int:
    d = _admin(args).describe_transactions([args.transactional_id])[0]
    parts = ",".join(f"{t}-{p}" for t, p in d["topics"]) or "-"
    human = table(
        [
            [
                d["transactional_id"],
                d["producer_id"],
                d["producer_epoch"],
                d["state"],
                d["transaction_timeout_ms"],
                parts,
            ]
        ],
        ["TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS", "PARTITIONS"],
    )
    print_result(args, d, human)
    return EXIT_OK


def _producer_rows(producers: list[dict]) -> list[list]:
    return [
        [
            p["producer_id"],
            p["producer_epoch"],
            p["last_sequence"],
            p["coordinator_epoch"],
            p["current_txn_start_offset"],
        ]
        for p in producers
    ]


_PRODUCER_HEADER = ["PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "COORDINATOR-EPOCH", "TXN-START-OFFSET"]


def cmd_txn_producers(args) -> int:
    producers = _admin(args).describe_producers(TopicPartition(args.topic, args.partition))
    print_result(args, producers, table(_producer_rows(producers), _PRODUCER_HEADER))
    return EXIT_OK


def cmd_txn_find_hanging(args) -> int:
    hanging = _admin(args).find_hanging_transactions(TopicPartition(args.topic, args.partition), args.max_age_ms)
    print_result(args, hanging, table(_producer_rows(hanging), _PRODUCER_HEADER))
    return EXIT_OK


def cmd_txn_abort(args) -> int:
    res = _admin(args).abort_transaction(TopicPartition(args.topic, args.partition), args.producer_id)
    print_result(args, res, f"aborted the transaction of producer {args.producer_id} from offset {res['aborted_from']}")
    return EXIT_OK


def cmd_txn_abort_hanging(args) -> int:
    parts = None if args.partition is None else [args.partition]
    res = _admin(args).abort_hanging_transactions(args.topic, parts, args.max_age_ms)
    lines = [
        f"aborted producer {r['producer_id']} on {r['topic']}-{r['partition']} from offset {r['aborted_from']}"
        for r in res
    ]
    print_result(args, res, "\n".join(lines) or "no hanging transaction")
    return EXIT_OK


def register(groups, common) -> None:
    tx = groups.add_parser("txn", help="list, describe and abort transactions").add_subparsers(
        dest="verb", required=True
    )
    s = tx.add_parser("list", parents=[common], help="transactional ids and their states")
    s.add_argument("--state", action="append", help="only these states (Ongoing, PrepareCommit, ...)")
    s.set_defaults(func=cmd_txn_list)
    s = tx.add_parser("describe", parents=[common], help="one transactional id at its coordinator")
    s.add_argument("transactional_id", help="the producer's transactional.id")
    s.set_defaults(func=cmd_txn_describe)
    for name, func, helptext in (
        ("describe-producers", cmd_txn_producers, "the producers a partition's leader tracks"),
        ("find-hanging", cmd_txn_find_hanging, "open transactions no coordinator knows (hanging)"),
        ("abort", cmd_txn_abort, "write an ABORT marker for one producer's open transaction"),
        ("abort-hanging", cmd_txn_abort_hanging, "find-hanging, then abort each (one partition or all)"),
    ):
        s = tx.add_parser(name, parents=[common], help=helptext)
        s.add_argument("--topic", required=True, help="topic of the partition")
        s.add_argument("--partition", type=int, required=name != "abort-hanging", help="partition number")
        if name in ("find-hanging", "abort-hanging"):
            s.add_argument(
                "--max-age-ms",
                type=int,
                default=900000,
                dest="max_age_ms",
                help="older open transactions hang (default 900000)",
            )
        if name == "abort":
            s.add_argument(
                "--producer-id", type=int, required=True, dest="producer_id", help="the producer id to abort"
            )
        s.set_defaults(func=func)
