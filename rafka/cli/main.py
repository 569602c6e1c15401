"""The ``rafka`` command line (Redpanda ``rpk``'s verbs).

    rafka cluster start [--brokers N] [--data-dir D]      a persistent local Ray head + detached actors
    rafka cluster start --address HOST:PORT [--brokers-per-node K] [--node-label L] [--node-resource R]
                                                         the actors alone, on a running Ray cluster
    rafka cluster info | stop | health [--json]                  health exits 0 healthy, 4-7 (rafka/cli/health.py)
    rafka logs [--broker N] [--controller] [-f] [-n LINES]     the server logs on disk (no Ray needed)
    rafka topic create NAME -p P -r R [-c key=value ...]   list | describe NAME | delete NAME
    rafka topic add-partitions NAME -n N | alter-config NAME --set k=v [--delete k]
    rafka topic trim-prefix NAME -o OFFSET | elect-leaders | reassign NAME -p P --replicas 1,2,0
    rafka cluster configs [--broker N]                      (rafka/cli/topics.py)
    rafka cluster balance --dry-run|--execute | balancer-status   the partition balancer (rafka/cli/balance.py)
    rafka topic produce NAME [-k KEY | --key-separator SEP] [-H k=v] [--print-acks]  (a record per stdin line)
    rafka topic consume NAME [-o start|end|N|-N|s@TS|P:SPEC] [-n N] [-e] [-f json|'%k %v %h\\n'] [-E hex] [-g G]
    rafka group list | describe G | seek G --to start|end|N [--topic T] | delete G
    rafka group reset-offsets G --to-earliest|--to-latest|--to-offset N|--to-datetime DT|--shift-by N
                              [--topic T[:P,P]] [--dry-run | --execute]
    rafka perf produce --topic T --records N --record-size B --acks all [--json]
    rafka perf consume --topic T --records N [--json]

Global: ``--cluster NAME`` (default: the started one, else ``rafka``), ``--address`` (Ray address),
``--json`` (machine-readable output). Errors are one line on stderr; exit codes: 0 ok, 1 Kafka/other
error, 2 usage, 3 no cluster, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from importlib.metadata import entry_points

from protocol.errors import ClusterNotFoundError, KafkaError
from protocol.names import INTERNAL_TOPICS
from rafka.cli import balance as cli_balance
from rafka.cli import clusterctl
from rafka.cli import groups as cli_groups
from rafka.cli import help as cli_help
from rafka.cli import logs as cli_logs
from rafka.cli import perf as cli_perf
from rafka.cli import support as cli_support
from rafka.cli import topics as cli_topics
from rafka.cli.agent import CliEntry
from rafka.cli.data import ENCODINGS, cmd_topic_consume, cmd_topic_produce
from rafka.cli.remote import run_remote
from rafka.cli.support import (
    EXIT_ERROR,
    EXIT_NO_CLUSTER,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    connect,
    echo,
    kv_pairs,
    print_result,
    table,
)
from rafka.cli.types import count as _count
from rafka.cli.types import index as _index
from rafka.output import claim_stdout

COMMANDS_GROUP = "rafka.commands"  # entry points: name -> register(groups, common) adding a verb group

# the shared verb helpers live in rafka.cli.support (serve/ and jobs/ use them too); the short names below
# are this module's own
_print, _table, _connect, _kv_pairs, _echo = print_result, table, connect, kv_pairs, echo


# -- cluster -------------------------------------------------------------------------------------------
def cmd_cluster_start(args) -> int:
    address = getattr(args, "address", None)
    if address and (args.redis_address or args.redis_password):
        raise UsageError(
            "--redis-address is for the head `rafka cluster start` starts itself: on a Ray cluster that runs "
            "already, GCS fault tolerance is its head's (RAY_REDIS_ADDRESS for its `ray start --head`)"
        )
    if address:  # onto a Ray cluster that runs already: no Ray process is started
        info = clusterctl.start_on(
            address,
            brokers=args.brokers,
            data_dir=args.data_dir,
            cluster=args.cluster or "rafka",
            config=_kv_pairs(args.config, "--config"),
            entry=ENTRY,
            brokers_per_node=args.brokers_per_node,
            node_label=args.node_label,
            node_resource=args.node_resource,
        )
        nodes = ", ".join(info["nodes"])
        _print(
            args,
            info,
            f"rafka cluster {info['cluster']!r} started on the Ray cluster at {info['address']}: "
            f"{info['brokers']} broker(s) on {nodes}\n"
            f"  data dir      {info['data_dir']} (on each node)\n"
            f"  kafka         {info.get('bootstrap_servers') or '(no listener)'}\n"
            f"  metrics       {info.get('metrics_url') or '(off)'}\n"
            f"Stop with: rafka cluster stop (Ray keeps running)",
        )
        return EXIT_OK
    if args.brokers_per_node or args.node_label or args.node_resource:
        raise UsageError(
            "--brokers-per-node, --node-label and --node-resource place brokers on a Ray cluster's "
            "nodes: give its --address"
        )
    info = clusterctl.start(
        brokers=args.brokers,
        data_dir=args.data_dir,
        cluster=args.cluster or "rafka",
        num_cpus=args.num_cpus,
        port=args.port,
        config=_kv_pairs(args.config, "--config"),
        entry=ENTRY,
        redis_address=args.redis_address,
        redis_password=args.redis_password,
    )
    gcs = info.get("gcs_storage")
    _print(
        args,
        info,
        f"rafka cluster {info['cluster']!r} started: {info['brokers']} broker(s)\n"
        f"  ray address   {info['address']}\n  ray client    {info['client_address']}\n"
        + (f"  gcs storage   redis {gcs['redis_address']} (namespace {gcs['namespace']})\n" if gcs else "")
        + f"  data dir      {info['data_dir']}\n  ray temp dir  {info['temp_dir']}\n"
        f"  kafka         {info.get('bootstrap_servers') or '(no listener)'}\n"
        f"  metrics       {info.get('metrics_url') or '(off)'}\n"
        f"Attach with: rafka.connect() or rafka.connect({info['address']!r})",
    )
    return EXIT_OK


def cmd_cluster_stop(args) -> int:
    info = clusterctl.stop()
    if info.get("temp_dir") is None:
        _print(
            args, info, f"stopped rafka cluster {info['cluster']!r} ({info['brokers_stopped']} broker(s)); Ray runs on"
        )
    else:
        _print(args, info, f"stopped rafka cluster {info['cluster']!r} ({info['killed']} Ray process(es))")
    return EXIT_OK


def cmd_cluster_health(args) -> int:
    """Exit code for scripts: 0 healthy, 4 under-replicated, 5 under-min-isr, 6 leaderless, 7 offline
    (rafka/cli/health.py); 3 when there is no cluster."""
    from rafka.admin.admin import Admin
    from rafka.cli.health import STATES, health_report

    report = health_report(Admin(_connect(args)))
    rows = [
        [u["topic"], u["partition"], u["state"], u["leader"], u["replicas"], u["isr"], u["offline_replicas"] or ""]
        for u in report["unhealthy"]
    ]
    dead = report["brokers_dead"]
    human = (
        f"cluster {report['cluster']}: {report['status']} (exit {report['exit_code']})\n"
        f"brokers alive {report['brokers_alive']}"
        + (f", dead {dead}" if dead else "")
        + f"; controller on broker {report['controller_id']} (epoch {report['controller_epoch']})\n"
        f"partitions {report['partitions']}: "
        + ", ".join(f"{s} {report['counts'][s]}" for s in STATES)
        + ("\n" + _table(rows, ["TOPIC", "PARTITION", "STATE", "LEADER", "REPLICAS", "ISR", "OFFLINE"]) if rows else "")
    )
    _print(args, report, human)
    return report["exit_code"]


def cmd_cluster_info(args) -> int:
    from rafka.admin.admin import Admin

    handle = _connect(args)
    desc = Admin(handle).describe_cluster()
    desc["address"] = handle.address
    desc["metrics_url"] = handle.metrics_url
    rows = [
        [b["id"], b.get("alive"), b.get("epoch", ""), b.get("rack") or "", b.get("log_dir", "")]
        for b in desc["brokers"]
    ]
    human = (
        f"cluster {desc['cluster']}  controller on broker {desc['controller_id']} "
        f"(epoch {desc['controller_epoch']})  "
        f"topics {desc['topics']}  metadata version {desc['metadata_version']}\n"
        f"metrics {desc['metrics_url'] or '(off)'}\n" + _table(rows, ["BROKER", "ALIVE", "EPOCH", "RACK", "LOG DIR"])
    )
    _print(args, desc, human)
    return EXIT_OK


# -- topics --------------------------------------------------------------------------------------------
def cmd_topic_create(args) -> int:
    from rafka.admin.admin import Admin, NewTopic

    admin = Admin(_connect(args))
    configs = _kv_pairs(args.config, "-c")
    ids = admin.create_topics([NewTopic(n, args.partitions, args.replicas, configs) for n in args.names])
    _print(
        args,
        [{"name": n, "topic_id": i} for n, i in ids.items()],
        _table([[n, "OK"] for n in ids], ["TOPIC", "STATUS"]),
    )
    return EXIT_OK


def cmd_topic_list(args) -> int:
    from rafka.admin.admin import Admin

    admin = Admin(_connect(args))
    names = [n for n in admin.list_topics() if args.internal or n not in INTERNAL_TOPICS]
    descs = admin.describe_topics(names) if names else []
    rows = [
        [d["name"], len(d["partitions"]), len(d["partitions"][0]["replicas"]) if d["partitions"] else 0] for d in descs
    ]
    _print(
        args,
        [{"name": r[0], "partitions": r[1], "replicas": r[2]} for r in rows],
        _table(rows, ["NAME", "PARTITIONS", "REPLICAS"]),
    )
    return EXIT_OK


def cmd_topic_describe(args) -> int:
    from rafka.admin.admin import Admin
    from rafka.structs import TopicPartition

    admin = Admin(_connect(args))
    descs = admin.describe_topics(args.names)
    out = []
    for d in descs:
        specs = {}
        for p in d["partitions"]:
            specs[TopicPartition(d["name"], p["partition"])] = "earliest"
        starts = admin.list_offsets(specs)
        ends = admin.list_offsets({tp: "latest" for tp in specs})
        for p in d["partitions"]:
            tp = TopicPartition(d["name"], p["partition"])
            p["log_start_offset"], p["high_watermark"] = starts[tp].offset, ends[tp].offset
        d["effective_configs"] = admin.describe_configs(d["name"])
        d["config_entries"] = admin.describe_config_entries(d["name"])
        out.append(d)
    if args.json:
        _print(args, out)
        return EXIT_OK
    for d in out:
        _echo(f"NAME        {d['name']}\nTOPIC ID    {d.get('topic_id')}\nPARTITIONS  {len(d['partitions'])}")
        rows = [
            [
                p["partition"],
                p["leader"],
                p.get("leader_epoch", ""),
                p["replicas"],
                p["isr"],
                p.get("offline_replicas") or "",
                p["log_start_offset"],
                p["high_watermark"],
            ]
            for p in d["partitions"]
        ]
        _echo(
            _table(rows, ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "HIGH-WATERMARK"])
        )
        shown = (
            d["config_entries"]
            if args.all_configs
            else [e for e in d["config_entries"] if e["source"] != "DEFAULT_CONFIG"]
        )
        if shown:
            _echo("\n" + _table([[e["name"], e["value"], e["source"]] for e in shown], ["CONFIG", "VALUE", "SOURCE"]))
        if not args.all_configs:
            _echo(f"({len(d['config_entries']) - len(shown)} configs at their defaults: -a shows every config)")
    return EXIT_OK


def cmd_topic_delete(args) -> int:
    from rafka.admin.admin import Admin

    Admin(_connect(args)).delete_topics(args.names)
    _print(
        args,
        [{"name": n, "deleted": True} for n in args.names],
        _table([[n, "OK"] for n in args.names], ["TOPIC", "STATUS"]),
    )
    return EXIT_OK


def cmd_topic_add_partitions(args) -> int:
    from rafka.admin.admin import Admin

    admin = Admin(_connect(args))
    totals = {}
    for d in admin.describe_topics(args.names):
        totals[d["name"]] = len(d["partitions"]) + args.num
    admin.create_partitions(totals)
    _print(
        args,
        [{"name": n, "partitions": t} for n, t in totals.items()],
        _table([[n, t] for n, t in totals.items()], ["TOPIC", "PARTITIONS"]),
    )
    return EXIT_OK


def cmd_topic_alter_config(args) -> int:
    from rafka.admin.admin import Admin

    sets = _kv_pairs(args.set, "--set")
    if not sets and not args.delete:
        raise UsageError("alter-config needs --set key=value or --delete key")
    admin = Admin(_connect(args))
    admin.alter_configs(args.name, set=sets, delete=args.delete)
    (d,) = admin.describe_topics([args.name])
    _print(
        args,
        {"name": args.name, "configs": d.get("configs", {})},
        "\n".join(f"{k}={v}" for k, v in sorted((d.get("configs") or {}).items())) or "(no overrides)",
    )
    return EXIT_OK


# -- parser --------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    # the global flags are accepted before or after the verb; SUPPRESS keeps a subcommand's parser from
    # overwriting a value given before it with its own default
    common = cli_help.Parser(add_help=False)
    common.add_argument("--cluster", default=argparse.SUPPRESS, help="rafka cluster name (default: the started one)")
    common.add_argument(
        "--address",
        default=argparse.SUPPRESS,
        help="Ray address: host:port, auto or ray://host:port (default: the started cluster)",
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable JSON output")
    p = cli_help.Parser(prog="rafka", description="rafka: Apache Kafka's design on Ray (rpk-style CLI)")
    p.add_argument("--cluster", default=None, help="rafka cluster name (default: the started one)")
    p.add_argument("--address", default=None, help="Ray address (default: the started cluster)")
    p.add_argument("--json", action="store_true", default=False, help="machine-readable JSON output")
    groups = p.add_subparsers(
        dest="group", required=True, metavar="{cluster,topic,group,txn,perf,logs,serve,job,verify}"
    )

    cl = groups.add_parser("cluster", help="start, stop and inspect a local cluster").add_subparsers(
        dest="verb", required=True
    )
    s = cl.add_parser("start", parents=[common], help="start a persistent local Ray head and a rafka cluster")
    s.add_argument("--brokers", type=int, default=3, help="brokers to start (default 3)")
    s.add_argument("--data-dir", default=None, help="log dirs (default ~/.rafka/data)")
    s.add_argument("--num-cpus", type=int, default=None, help="CPUs Ray may use (default: all)")
    s.add_argument("--port", type=int, default=None, help="Ray GCS port (default: a free one)")
    s.add_argument("-c", "--config", action="append", help="broker config key=value (repeatable)")
    s.add_argument("--brokers-per-node", type=int, default=None, help="with --address: at most N brokers on one node")
    s.add_argument(
        "--node-label", default=None, help="with --address: only nodes with this Ray label (key or key=value)"
    )
    s.add_argument("--node-resource", default=None, help="with --address: only nodes with this custom Ray resource")
    s.add_argument(
        "--redis-address",
        default=None,
        help="HOST:PORT of a Redis for the head's GCS (Ray's GCS fault tolerance; not with --address)",
    )
    s.add_argument("--redis-password", default=None, help="that Redis's password")
    s.set_defaults(func=cmd_cluster_start)
    cl.add_parser("stop", parents=[common], help="stop the cluster started here").set_defaults(func=cmd_cluster_stop)
    cl.add_parser("info", parents=[common], help="brokers, controller, topics").set_defaults(func=cmd_cluster_info)
    cl.add_parser(
        "health",
        parents=[common],
        help="per-partition health: healthy / under-replicated / under-min-isr / leaderless / offline",
        description="Exit code: 0 healthy, 4 under-replicated, 5 under-min-isr, 6 leaderless, 7 offline, 3 no cluster "
        "(the worst partition decides). --json prints the report.",
    ).set_defaults(func=cmd_cluster_health)

    tp = groups.add_parser("topic", help="create, inspect, produce to and consume from topics").add_subparsers(
        dest="verb", required=True
    )
    s = tp.add_parser("create", parents=[common], help="create topics (Kafka's CreateTopics)")
    s.add_argument("names", nargs="+", help="topic names")
    s.add_argument("-p", "--partitions", type=int, default=-1, help="partitions (default: the broker's num.partitions)")
    s.add_argument(
        "-r", "--replicas", type=int, default=-1, help="replication factor (default: default.replication.factor)"
    )
    s.add_argument("-c", "--config", action="append", help="topic config key=value (repeatable)")
    s.set_defaults(func=cmd_topic_create)
    s = tp.add_parser("list", parents=[common], help="topics with partition and replica counts")
    s.add_argument("-i", "--internal", action="store_true", help="include internal topics (__consumer_offsets, ...)")
    s.set_defaults(func=cmd_topic_list)
    s = tp.add_parser("describe", parents=[common], help="partitions, offsets and configs with their sources")
    s.add_argument("names", nargs="+", help="topic names")
    s.add_argument("-a", "--all-configs", action="store_true", help="print every config, defaults included")
    s.set_defaults(func=cmd_topic_describe)
    s = tp.add_parser("delete", parents=[common], help="delete topics and their data")
    s.add_argument("names", nargs="+", help="topic names")
    s.set_defaults(func=cmd_topic_delete)
    s = tp.add_parser("add-partitions", parents=[common], help="raise a topic's partition count")
    s.add_argument("names", nargs="+", help="topic names")
    s.add_argument("-n", "--num", type=int, required=True, help="partitions to add")
    s.set_defaults(func=cmd_topic_add_partitions)
    s = tp.add_parser("alter-config", parents=[common], help="set or reset topic config overrides")
    s.add_argument("name", help="topic name")
    s.add_argument("--set", action="append", help="key=value (repeatable)")
    s.add_argument("--delete", action="append", help="key to reset to the default (repeatable)")
    s.set_defaults(func=cmd_topic_alter_config)
    s = tp.add_parser("produce", parents=[common], help="one record per stdin line")
    s.add_argument("name", help="topic name")
    s.add_argument("-k", "--key", default=None, help="key for every record")
    s.add_argument("--key-separator", default=None, help="split each line into key SEP value")
    s.add_argument(
        "-H", "--header", action="append", default=None, help="header key=value on every record (repeatable)"
    )
    s.add_argument(
        "-p", "--partition", type=_index, default=None, help="this partition (default: the key's, else sticky)"
    )
    s.add_argument("--acks", default="all", help="0, 1 or all (default all)")
    s.add_argument("--linger-ms", type=_index, default=5, help="linger.ms of the producer (default 5; 0 on a terminal)")
    s.add_argument(
        "--print-acks", action="store_true", help="a line per record as it is acknowledged (default on a terminal)"
    )
    s.set_defaults(func=cmd_topic_produce)
    s = tp.add_parser("consume", parents=[common], help="print records (by partition and offset, or as a group member)")
    s.add_argument("name", help="topic name")
    s.add_argument(
        "-o",
        "--offset",
        action="append",
        default=None,
        help="start (default), end, N, -N (N before the end), s@TIMESTAMP; P:SPEC for partition P only (repeatable)",
    )
    s.add_argument("--from-timestamp", default=None, help="start at this time (ms or ISO date-time) in every partition")
    s.add_argument("-n", "--num", type=_count, default=None, help="stop after N records")
    s.add_argument("-e", "--exit-at-end", action="store_true", help="stop at the end offsets seen at start")
    s.add_argument(
        "-p",
        "--partition",
        type=_index,
        action="append",
        default=None,
        help="only this partition (repeatable; it must exist)",
    )
    s.add_argument(
        "-f", "--format", default="json", help="json, or a template: %%t %%p %%o %%T %%k %%v %%h %%K %%S (kcat's)"
    )
    s.add_argument(
        "-E",
        "--encoding",
        choices=ENCODINGS,
        default="text",
        help="keys, values and header values as text, hex or base64",
    )
    s.add_argument(
        "-g", "--group", dest="consumer_group", default=None, help="consume as a member of this consumer group"
    )
    s.set_defaults(func=cmd_topic_consume)

    cli_topics.register(tp, cl, common)
    cli_balance.register(cl, common)  # `rafka cluster balance` / `balancer-status` (rafka/cli/balance.py)

    cli_groups.register(groups, common)
    cli_perf.register(groups, common)
    cli_logs.register(groups, common)  # `rafka logs`: files on disk, no Ray

    # the gateway, the Spark jobs and verify own their verbs (serve/cli.py, jobs/cli.py, rafka/tools/verify.py),
    # found through the `rafka.commands` entry points (pyproject.toml): the client package never imports
    # the layers above it. Their modules import Serve / RayDP only when a verb runs.
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        ep.load()(groups, common)
    _mark_remote(groups)
    cli_help.add_examples(p)
    return p


# verbs that only talk to the cluster run in its CLI agent when one is recorded (rafka/cli/remote.py);
# cluster start/stop, logs, perf, serve, job and verify run in this process
REMOTE_VERBS = {
    "topic": None,
    "group": None,
    "txn": None,
    "cluster": {"info", "health", "configs", "balance", "balancer-status"},
}


def _mark_remote(groups) -> None:
    for group, verbs in REMOTE_VERBS.items():
        sub = groups.choices.get(group)
        actions = [a for a in (sub._actions if sub else ()) if isinstance(a, argparse._SubParsersAction)]
        for action in actions:
            for verb, parser in action.choices.items():
                if verbs is None or verb in verbs:
                    parser.set_defaults(remote=True, stdin=(group, verb) == ("topic", "produce"))


def main(argv: list[str] | None = None) -> int:
    """Run one command. Called without ``argv`` (the ``rafka`` script), sys.stdout stays on stderr until the
    process exits (Ray's listener thread may still print as the interpreter shuts down); called with
    ``argv`` (in-process use), it is given back on return."""
    parser = build_parser()
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    saved_output, saved_stdout = cli_support.OUTPUT, sys.stdout
    out = cli_support.OUTPUT = claim_stdout()
    try:
        if getattr(args, "remote", False):  # the cluster's CLI agent runs it: no Ray in this process
            code = run_remote(sys.argv[1:] if argv is None else list(argv), args, out)
            if code is not None:
                return code
        return _run(args)
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.flush()
        if argv is not None:
            cli_support.OUTPUT, sys.stdout = saved_output, saved_stdout


def _run(args) -> int:
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"rafka: usage error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClusterNotFoundError as exc:
        print(f"rafka: {exc.message}", file=sys.stderr)
        return EXIT_NO_CLUSTER
    except KafkaError as exc:
        print(f"rafka: {type(exc).__name__}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except (ValueError, TypeError, OSError, TimeoutError) as exc:
        print(f"rafka: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


# what the cluster's CLI agent runs (rafka/cli/agent.py), handed to it by `rafka cluster start`
ENTRY = CliEntry(build_parser, _run)

if __name__ == "__main__":
    sys.exit(main())
