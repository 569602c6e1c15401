"""``rafka verify``: the no-loss checker, run against your own cluster while a nemesis breaks it.

In the spirit of Jepsen and Kafka's ducktape tests. A producer (idempotent, ``acks=all``) writes keyed,
numbered records ``<run>:<key>:<seq>`` at a steady rate to a fresh topic (replication factor 3 and
``min.insync.replicas=2`` by default) while the nemesis (rafka/tools/nemesis.py) injects faults one after
another: broker kills, replica and controller SIGKILLs, SIGSTOP pauses, whole-cluster restarts. After
the last fault is healed and the cluster is whole again, everything is read back from the beginning of
every partition and checked against what the producer was told:

- ``lost``: acknowledged, nowhere in the log;
- ``moved``: acknowledged at (partition, offset) but found elsewhere (an acknowledged offset must never
  change: truncation of acknowledged data shows up here);
- ``duplicated``: one (key, seq) at two offsets (the idempotent producer must prevent it);
- ``reordered``: a key's sequence numbers not increasing in offset order;
- ``offset_gaps``: holes in a partition's offsets (offsets are dense);
- ``unavailable``: faults after which some partition did not take a write within ``max_recovery_s``.

A record whose send failed may or may not be in the log (``unacked_present`` counts those that are):
that is allowed. Time to recovery per fault: ``writable_s`` is, over the topic's partitions, the
longest wait from the fault to the first acknowledgement of a record sent after it; ``controller_s``
(controller faults) the time until a controller answers again.

Exit status: 0 when nothing was violated, 1 otherwise (2 usage, 3 no cluster).

Network partitions on real nodes (tests/multinode/test_partitions.py, docs/jepsen.md) reuse check_history and add
the checks of rafka/tools/jepsen.py: reads later truncated, committed offsets regressing, leader epochs going back,
read_committed atomicity and the unavailability window of each fault.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

from rafka.structs import TopicPartition
from rafka.tools.nemesis import KINDS, Fault, Nemesis

__all__ = ["VerifyConfig", "Workload", "check_history", "run_verify", "register"]

VIOLATIONS = ("lost", "moved", "duplicated", "reordered", "offset_gaps", "unavailable")


@dataclass
class VerifyConfig:
    topic: str | None = None  # default: a fresh "rafka-verify-<run>"
    partitions: int = 6
    replication_factor: int = 3
    min_insync_replicas: int = 2
    keys: int = 60
    rate: int = 2000  # records/s offered
    faults: int = 5
    kinds: tuple[str, ...] = KINDS
    interval_s: float = 4.0  # calm time between a fault's recovery and the next fault
    down_s: float = 3.0  # a killed broker stays down this long
    pause_s: float = 8.0  # SIGSTOP length
    max_recovery_s: float = 60.0  # a partition not writable by then is a violation
    settle_s: float = 120.0  # wait for every partition to have its full ISR before reading back
    seed: int | None = None
    keep_topic: bool = False


# ------------------------------------------------------------------------------------------- workload


class Workload:
    """The producer side: keyed, numbered records at ``rate``/s on a thread; every acknowledgement (or
    failure) is recorded by the producer's callback."""

    def __init__(self, cluster: Any, topic: str, run_id: str, keys: int, rate: int):
        from rafka.producer.producer import Producer

        self.topic, self.run_id, self.keys, self.rate = topic, run_id, keys, rate
        self.producer = Producer(
            cluster, acks="all", enable_idempotence=True, linger_ms=5, delivery_timeout_ms=300000, max_block_ms=300000
        )
        self.lock = threading.Lock()
        self.acked: dict[tuple[int, int], tuple[int, int]] = {}  # (key, seq) -> (partition, offset)
        self.failed: dict[tuple[int, int], str] = {}
        self.sent = 0
        # per partition: send and acknowledgement times of every acknowledged record (monotonic seconds)
        self.sent_at: dict[int, array] = {}
        self.acked_at: dict[int, array] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verify-workload", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _callback(self, key: int, seq: int, sent: float):
        def cb(md, exc):
            with self.lock:
                if exc is not None:
                    self.failed[(key, seq)] = f"{type(exc).__name__}: {exc}"
                    return
                self.acked[(key, seq)] = (md.partition, md.offset)
                self.sent_at.setdefault(md.partition, array("d")).append(sent)
                self.acked_at.setdefault(md.partition, array("d")).append(time.monotonic())

        return cb

    def _run(self) -> None:
        seqs = [0] * self.keys
        start, i = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                delay = start + i / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                k = i % self.keys
                seq = seqs[k]
                seqs[k] += 1
                self.producer.send(
                    self.topic,
                    f"{self.run_id}:{k}:{seq}".encode(),
                    key=f"key-{k}".encode(),
                    callback=self._callback(k, seq, time.monotonic()),
                )
                i += 1
                self.sent = i
        except BaseException as e:  # noqa: BLE001 - reported, and the run fails
            self.error = e

    def stop(self, timeout_s: float = 300.0) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(timeout=timeout_s)
        self.producer.close()

    def first_ack_after(self, t: float) -> dict[int, float | None]:
        """Per partition, when the first record sent at or after ``t`` was acknowledged (None: not yet)."""
        out: dict[int, float | None] = {}
        with self.lock:
            for p, sent in self.sent_at.items():
                acked, best = self.acked_at[p], None
                for j in range(len(sent) - 1, -1, -1):  # acknowledgements arrive roughly in send order
                    if sent[j] >= t and (best is None or acked[j] < best):
                        best = acked[j]
                    elif sent[j] < t - 5.0:
                        break
                out[p] = best
        return out


# ------------------------------------------------------------------------------------------- checker


def check_history(
    acked: dict[tuple[int, int], tuple[int, int]], failed: dict, log: dict[int, list[tuple[int, int, int]]]
) -> dict[str, Any]:
    """Compare what the producer was told with what the log holds. ``log``: per partition, ``(offset,
    key, seq)`` of this run's records in offset order. Pure: unit-tested without a cluster."""
    where: dict[tuple[int, int], list[tuple[int, int]]] = {}
    gaps, reordered = 0, []
    for p, recs in log.items():
        last_off, last_seq = None, {}
        for off, k, s in recs:
            where.setdefault((k, s), []).append((p, off))
            if last_off is not None and off != last_off + 1:
                gaps += 1
            last_off = off
            if k in last_seq and s <= last_seq[k]:
                reordered.append({"key": k, "seq": s, "after": last_seq[k], "partition": p, "offset": off})
            last_seq[k] = max(s, last_seq.get(k, -1))
    lost = [
        {"key": k, "seq": s, "partition": p, "offset": o} for (k, s), (p, o) in acked.items() if (k, s) not in where
    ]
    moved = [
        {"key": k, "seq": s, "acked_at": [p, o], "found_at": where[(k, s)]}
        for (k, s), (p, o) in acked.items()
        if (k, s) in where and (p, o) not in where[(k, s)]
    ]
    dups = [{"key": k, "seq": s, "at": locs} for (k, s), locs in where.items() if len(locs) > 1]
    return {
        "acknowledged": len(acked),
        "failed_sends": len(failed),
        "read": sum(len(v) for v in log.values()),
        "unacked_present": sum(1 for ks in where if ks not in acked),
        "lost": len(lost),
        "moved": len(moved),
        "duplicated": len(dups),
        "reordered": len(reordered),
        "offset_gaps": gaps,
        "examples": {"lost": lost[:5], "moved": moved[:5], "duplicated": dups[:5], "reordered": reordered[:5]},
    }


def read_back(
    cluster: Any, topic: str, run_id: str, partitions: int, timeout_s: float = 300.0
) -> dict[int, list[tuple[int, int, int]]]:
    """Every record of this run, per partition, from the log start to the high watermark."""
    from rafka.consumer.consumer import Consumer

    prefix = f"{run_id}:".encode()
    consumer = Consumer(cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, int, int]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read-back of {topic} did not reach the end offsets {ends}")
            for tp, recs in consumer.poll(timeout_ms=1000).items():
                for r in recs:
                    if r.value and r.value.startswith(prefix):
                        _, k, s = r.value.decode().split(":")
                        out[tp.partition].append((r.offset, int(k), int(s)))
        return out
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------- the run


@dataclass
class FaultReport:
    kind: str
    target: str
    at_s: float
    writable_s: float | None
    controller_s: float | None = None
    healed_s: float | None = None
    pids: list[int] = field(default_factory=list)


def _wait_whole(admin: Any, topic: str, rf: int, timeout_s: float) -> float | None:
    """Seconds until every partition has a leader and its full ISR (None: not within ``timeout_s``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            parts = admin.describe_topics([topic])[0]["partitions"]
            if all(p["leader"] >= 0 and len(p["isr"]) >= rf for p in parts):
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - the controller may be failing over
            pass
        time.sleep(0.2)
    return None


def _controller_back(admin: Any, old_epoch: int | None, t0: float, timeout_s: float) -> float | None:
    while time.monotonic() - t0 < timeout_s:
        try:
            info = admin.describe_cluster()
            if info.get("controller_epoch", -1) != old_epoch and info.get("controller_id", -1) >= 0:
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - failing over
            pass
        time.sleep(0.05)
    return None


def _recovery(workload: Workload, fault: Fault, partitions: int, timeout_s: float) -> float | None:
    deadline = fault.at + timeout_s
    while True:
        firsts = workload.first_ack_after(fault.at)
        if len(firsts) == partitions and all(v is not None for v in firsts.values()):
            return max(firsts.values()) - fault.at
        if time.monotonic() > deadline or workload.error is not None:
            return None
        time.sleep(0.05)


def run_verify(cluster: Any, server: Any, cfg: VerifyConfig, progress=None) -> dict[str, Any]:
    """Workload + nemesis + read-back against ``cluster`` (a LocalCluster/ClusterHandle/name);
    ``server`` is its ``actors.bootstrap.ServerHandle``. Returns the report (``ok`` False on any
    violation)."""
    from rafka.admin.admin import Admin

    say = progress or (lambda msg: None)
    rng = random.Random(cfg.seed)
    run_id = uuid.uuid4().hex[:8]
    topic = cfg.topic or f"rafka-verify-{run_id}"
    admin = Admin(cluster)
    name = admin.cluster_name
    if topic not in admin.list_topics():
        admin.create_topic(
            topic, cfg.partitions, cfg.replication_factor, {"min.insync.replicas": str(cfg.min_insync_replicas)}
        )
    nemesis = Nemesis(name, server, admin, topic, rng, cfg.down_s, cfg.pause_s)
    workload = Workload(cluster, topic, run_id, cfg.keys, cfg.rate)
    kinds = [cfg.kinds[i % len(cfg.kinds)] for i in range(cfg.faults)]
    rng.shuffle(kinds)
    t_start = time.monotonic()
    workload.start()
    reports: list[FaultReport] = []
    time.sleep(cfg.interval_s)
    for n, kind in enumerate(kinds, 1):
        epoch = None
        if kind == "controller-kill" or kind == "restart":
            try:
                epoch = admin.describe_cluster().get("controller_epoch")
            except Exception:  # noqa: BLE001
                epoch = None
        fault = nemesis.inject(kind)
        say(f"fault {n}/{len(kinds)}: {kind} {fault.target}")
        # heal first: a whole-cluster restart has no controller until its brokers are started again (the
        # heal of a controller kill is a no-op, so its time to a new controller is measured all the same)
        nemesis.heal(fault)
        ctl_s = None
        if kind in ("controller-kill", "restart"):
            ctl_s = _controller_back(admin, epoch, fault.at, cfg.max_recovery_s)
        writable = _recovery(workload, fault, cfg.partitions, cfg.max_recovery_s)
        reports.append(
            FaultReport(
                kind,
                fault.target,
                round(fault.at - t_start, 2),
                None if writable is None else round(writable, 3),
                None if ctl_s is None else round(ctl_s, 3),
                round(fault.healed_at - fault.at, 2),
                fault.pids,
            )
        )
        say(f"  writable again after {writable if writable is None else round(writable, 2)} s")
        if writable is not None and cfg.max_recovery_s:  # let the cluster heal fully before the next fault
            _wait_whole(admin, topic, cfg.replication_factor, cfg.max_recovery_s)
        time.sleep(cfg.interval_s)
    whole_s = _wait_whole(admin, topic, cfg.replication_factor, cfg.settle_s)
    say("stopping the workload and reading everything back")
    workload.stop()
    log = read_back(cluster, topic, run_id, cfg.partitions)
    result = check_history(workload.acked, workload.failed, log)
    result["unavailable"] = sum(1 for r in reports if r.writable_s is None)
    violations = {k: result[k] for k in VIOLATIONS if result[k]}
    if workload.error is not None:
        violations["workload_error"] = f"{type(workload.error).__name__}: {workload.error}"
    out = {
        "ok": not violations,
        "violations": violations,
        "cluster": name,
        "topic": topic,
        "run": run_id,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "duration_s": round(time.monotonic() - t_start, 1),
        "sent": workload.sent,
        **{k: v for k, v in result.items()},
        "whole_after_s": None if whole_s is None else round(whole_s, 2),
        "faults": [asdict(r) for r in reports],
        "recovery": _recovery_summary(reports),
    }
    if not cfg.keep_topic and out["ok"]:
        try:
            admin.delete_topics([topic])
        except Exception:  # noqa: BLE001 - best effort; the report stands
            pass
    admin.close()
    return out


def _recovery_summary(reports: list[FaultReport]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for kind in sorted({r.kind for r in reports}):
        vals = sorted(r.writable_s for r in reports if r.kind == kind and r.writable_s is not None)
        ctl = sorted(r.controller_s for r in reports if r.kind == kind and r.controller_s is not None)
        n = sum(1 for r in reports if r.kind == kind)
        row = {"faults": n, "unrecovered": n - len(vals)}
        if vals:
            row.update(writable_p50_s=vals[len(vals) // 2], writable_max_s=vals[-1])
        if ctl:
            row.update(controller_p50_s=ctl[len(ctl) // 2], controller_max_s=ctl[-1])
        out[kind] = row
    return out


def format_report(rep: dict) -> str:
    lines = [
        f"rafka verify: {'OK' if rep['ok'] else 'VIOLATIONS ' + str(rep['violations'])}",
        f"  topic {rep['topic']}  run {rep['run']}  {rep['duration_s']} s  sent {rep['sent']}  "
        f"acknowledged {rep['acknowledged']}  failed sends {rep['failed_sends']}  read {rep['read']}",
        f"  lost {rep['lost']}  moved {rep['moved']}  duplicated {rep['duplicated']}  reordered "
        f"{rep['reordered']}  offset gaps {rep['offset_gaps']}  unacked present {rep['unacked_present']}",
        "",
        f"  {'#':>3}  {'fault':<16} {'target':<34} {'at s':>7} {'writable s':>11} {'controller s':>13}",
    ]
    for i, f in enumerate(rep["faults"], 1):
        w = "NEVER" if f["writable_s"] is None else f"{f['writable_s']:.2f}"
        c = "" if f["controller_s"] is None else f"{f['controller_s']:.2f}"
        lines.append(f"  {i:>3}  {f['kind']:<16} {f['target'][:34]:<34} {f['at_s']:>7.1f} {w:>11} {c:>13}")
    lines.append("")
    for kind, row in rep["recovery"].items():
        lines.append(f"  {kind:<16} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- CLI


def register(groups, common) -> None:
    """Add ``rafka verify`` to the CLI's parser."""
    s = groups.add_parser(
        "verify",
        parents=[common],
        help="produce while a nemesis injects faults; check nothing "
        "acknowledged is lost, duplicated, reordered or moved",
        description=__doc__.split("\n\n")[0],
    )
    s.add_argument(
        "--local",
        action="store_true",
        help="run against a fresh embedded cluster (LocalCluster) instead of the running one",
    )
    s.add_argument("--brokers", type=_positive, default=3, help="brokers of the --local cluster (default 3)")
    s.add_argument("--topic", default=None, help="topic to write (default: a fresh rafka-verify-<run>)")
    s.add_argument("-p", "--partitions", type=_positive, default=6, help="partitions of the test topic (default 6)")
    s.add_argument("-r", "--replication-factor", type=_positive, default=3, help="replication factor (default 3)")
    s.add_argument("--min-insync-replicas", type=_positive, default=2, help="min.insync.replicas (default 2)")
    s.add_argument("--keys", type=_positive, default=60, help="distinct keys produced (default 60)")
    s.add_argument("--rate", type=_positive, default=2000, help="records/s offered (default 2000)")
    s.add_argument("--faults", type=_nonneg, default=5, help="faults to inject (default 5)")
    s.add_argument(
        "--nemesis",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds, mixed evenly (default {','.join(KINDS)})",
    )
    s.add_argument("--interval", type=float, default=4.0, help="seconds of calm between faults")
    s.add_argument("--down", type=float, default=3.0, help="seconds a killed broker stays down")
    s.add_argument("--pause", type=float, default=8.0, help="seconds of each SIGSTOP pause")
    s.add_argument(
        "--max-recovery",
        type=float,
        default=60.0,
        help="a partition not writable this long after a fault is a violation",
    )
    s.add_argument("--seed", type=int, default=None, help="random seed of the nemesis (default: random)")
    s.add_argument("--keep-topic", action="store_true", help="keep the test topic afterwards")
    s.add_argument("-c", "--config", action="append", help="broker config key=value for --local (repeatable)")
    s.set_defaults(func=cmd_verify)


def _positive(v: str) -> int:
    import argparse

    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{v} must be positive")
    return n


def _nonneg(v: str) -> int:
    return 0 if v.strip() == "0" else _positive(v)


def cmd_verify(args) -> int:
    import sys

    from rafka.cli import support as cli_support

    kinds = tuple(k.strip() for k in args.nemesis.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise cli_support.UsageError(
            f"--nemesis: unknown fault kind(s) {bad or args.nemesis!r}; expected {', '.join(KINDS)}"
        )
    cfg = VerifyConfig(
        topic=args.topic,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        keys=args.keys,
        rate=args.rate,
        faults=args.faults,
        kinds=kinds,
        interval_s=args.interval,
        down_s=args.down,
        pause_s=args.pause,
        max_recovery_s=args.max_recovery,
        seed=args.seed,
        keep_topic=args.keep_topic,
    )
    quiet = getattr(args, "json", False)

    def say(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    if args.local:
        from rafka.cluster import LocalCluster

        with LocalCluster(
            brokers=args.brokers,
            name="verify-" + uuid.uuid4().hex[:6],
            broker_config=cli_support.kv_pairs(args.config, "--config") or None,
        ) as cluster:
            rep = run_verify(cluster, cluster.server, cfg, say)
    else:
        handle = cli_support.connect(args)
        rep = run_verify(handle, _server_handle(handle.name), cfg, say)
    cli_support.print_result(args, rep, format_report(rep))
    return cli_support.EXIT_OK if rep["ok"] else cli_support.EXIT_ERROR


def _server_handle(name: str):
    """An ``actors.bootstrap.ServerHandle`` for a running cluster (to start killed brokers again): its
    brokers found by name, their directory and configs from the state file `rafka cluster start` wrote."""
    import ray

    from actors.bootstrap import ServerHandle
    from protocol.names import RAY_NAMESPACE, broker_name
    from rafka.client_utils import read_state

    state = read_state() or {}
    if state.get("cluster") != name:
        raise ValueError(
            f"cluster {name!r} was not started by `rafka cluster start` here: its broker "
            "directories are unknown (use --local, or run on the machine that started it)"
        )
    server = ServerHandle(name, state["brokers"], state["data_dir"], state.get("config"), None)
    for i in range(state["brokers"]):
        try:
            server.brokers[i] = ray.get_actor(broker_name(name, i), namespace=RAY_NAMESPACE)
        except ValueError:
            continue
    return server
