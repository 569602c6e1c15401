"""The exactly-once step of ``make demo``: a transactional consume-transform-produce copier (jobs/eos_copy.py)
enriches the click topic into ``clicks-enriched`` while the broker hosting its transaction coordinator is
SIGKILLed part-way (and started again) and one transaction in five is aborted on purpose. A read_committed
consumer of the output must see exactly the plain-Python enrichment of every generated click, once each, in
each user's order; a read_uncommitted one shows the aborted records are physically in the log."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

OUT = "clicks-enriched"
EOS_GROUP = "click-enricher"
EOS_TXN_ID = "click-enricher-tx"


def enrich_event(e: dict) -> dict:
    """The transform, on a decoded click: its section, device class and hour of day."""
    section = e["page"].split("/")[1] or "home"
    return {
        "id": e["id"],
        "user": e["user"],
        "seq": e["seq"],
        "section": section,
        "mobile": e["device"] != "desktop",
        "hour": (e["ts"] // 3_600_000) % 24,
        "paid": e["referrer"] == "ads",
    }


def enrich(value: bytes) -> bytes:
    return json.dumps(enrich_event(json.loads(value)), separators=(",", ":")).encode()


def _coordinator_of(cluster, transactional_id: str) -> int:
    import ray

    from protocol.names import RAY_NAMESPACE, broker_name

    deadline = time.monotonic() + 30
    while True:
        for b in cluster.broker_ids():
            try:
                h = ray.get_actor(broker_name(cluster.name, b), namespace=RAY_NAMESPACE)
                ans = ray.get(h.find_coordinator.remote(transactional_id, 1), timeout=10)
            except Exception:  # noqa: BLE001 - a dead or restarting broker: ask another
                continue
            if ans.get("error_code") == 0:
                return ans["broker_id"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no transaction coordinator for {transactional_id!r}")
        time.sleep(0.2)


def _sigkill_broker(cluster, broker_id: int) -> int | None:
    import ray

    from actors.server.worker_process import actor_pid
    from protocol.names import RAY_NAMESPACE, broker_name

    pid = actor_pid(ray.get_actor(broker_name(cluster.name, broker_id), namespace=RAY_NAMESPACE))
    if pid:
        os.kill(pid, signal.SIGKILL)  # the broker's OS process: its replicas and coordinators die with it
    return pid


def eos_part(cluster, admin, events: list[dict], dead_broker: int, console) -> list:
    from jobs.eos_copy import Copier, read_all

    console.rule("[bold]Exactly-once: a transactional consume-transform-produce step")
    t = time.monotonic()
    cluster.restart_broker(dead_broker)
    console.print(f"Broker {dead_broker} (killed during the HTTP step) started again in {time.monotonic() - t:.1f} s")
    admin.create_topic(
        OUT, num_partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"}, timeout_ms=120000
    )
    total = len(events)
    copier = Copier(cluster, "clicks", OUT, EOS_GROUP, EOS_TXN_ID, enrich, batch=2000, poison_every=5)
    victim = _coordinator_of(cluster, EOS_TXN_ID)
    console.print(
        f"Copier [bold]{EOS_TXN_ID}[/] (group {EOS_GROUP}, read_committed) enriches {total:,} clicks into "
        f"[bold]{OUT}[/], one transaction per poll (<= 2,000 records) with the group's offsets; every 5th "
        f"transaction is aborted on purpose; broker {victim} (its transaction coordinator) is SIGKILLed at "
        f"{total // 3:,} ..."
    )
    kill: dict = {}

    def restart_later() -> None:
        time.sleep(2.0)
        t = time.monotonic()
        cluster.restart_broker(victim)
        kill["restart_s"] = time.monotonic() - t

    def on_commit(stats) -> None:
        if not kill and stats.copied >= total // 3:
            kill.update(at=stats.copied, pid=_sigkill_broker(cluster, victim))
            kill["thread"] = threading.Thread(target=restart_later, name="restart-broker", daemon=True)
            kill["thread"].start()
            console.print(f"  [bold red]SIGKILLed broker {victim}[/] (pid {kill['pid']}) after {stats.copied:,} copied")

    try:
        stats = copier.run(total, timeout_s=120, on_commit=on_commit)
    finally:
        copier.close()
        if "thread" in kill:
            kill["thread"].join(90)
    console.print(
        f"  {stats.copied:,} copied in {stats.elapsed_s:.1f} s ({stats.committed_txns} transactions committed, "
        f"{stats.poisoned_txns} aborted on purpose, {stats.failed_txns} aborted by the failure"
        + (f" [{', '.join(sorted(set(stats.errors)))}]" if stats.errors else "")
        + f", {stats.new_producers} producer re-inits); broker {victim} back "
        + (f"in {kill['restart_s']:.1f} s" if "restart_s" in kill else "[red]not restarted[/]")
    )
    committed = read_all(cluster, OUT, 6, "read_committed", total)
    by_user: dict[str, list[dict]] = {}
    for recs in committed.values():
        for _, v in recs:
            e = json.loads(v)
            by_user.setdefault(e["user"], []).append(e)
    want: dict[str, list[dict]] = {}
    for e in events:  # plain Python: each user's clicks in generation order, enriched
        want.setdefault(e["user"], []).append(enrich_event(e))
    got_n = sum(map(len, by_user.values()))
    ids = {e["id"] for es in by_user.values() for e in es}
    everything = read_all(cluster, OUT, 6, "read_uncommitted", total + stats.poisoned_records)
    physical = sum(map(len, everything.values()))
    console.print(
        f"  read_committed: {got_n:,} records, {len(ids):,} distinct clicks; read_uncommitted: {physical:,} "
        f"records, of which {physical - got_n:,} are aborted transactions' (filtered by read_committed)"
    )
    aborted_txns = stats.poisoned_txns + stats.failed_txns
    return [
        (
            "exactly-once: output = plain-Python enrichment",
            by_user == want and got_n == total == len(ids),
            f"{got_n:,}/{total:,} records, {len(ids):,} distinct, {len(want)} users each in order",
        ),
        (
            "exactly-once: across a broker SIGKILL",
            bool(kill.get("pid")) and "restart_s" in kill and stats.copied == total,
            f"coordinator broker {victim} killed at {kill.get('at', 0):,}; {stats.committed_txns} commits in "
            f"{stats.elapsed_s:.1f} s",
        ),
        (
            "read_committed never sees aborted data",
            stats.poisoned_txns > 0 and physical - got_n >= stats.poisoned_records and by_user == want,
            f"{aborted_txns} transactions aborted, {physical - got_n:,} aborted records in the log, 0 read",
        ),
    ]
