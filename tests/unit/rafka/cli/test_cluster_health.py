"""rafka/cli/health.py: each partition state and the cluster's exit code, from controller-shaped metadata;
actors/metadata/controller_events.py: the controller's log lines for a commit; actors/server/server_log.py's line shape."""

from __future__ import annotations

import json
import logging

from actors.metadata import controller_events
from actors.server import server_log
from rafka.cli.health import EXIT_CODES, cluster_health, partition_state


def _p(partition, leader, replicas, isr):
    return {"partition": partition, "leader": leader, "replicas": replicas, "isr": isr}


def _md(alive, dead, topics):
    brokers = [{"id": b, "alive": True} for b in alive] + [{"id": b, "alive": False} for b in dead]
    return {"brokers": brokers, "topics": topics}


def test_partition_states():
    alive = {0, 1}
    assert partition_state(_p(0, 0, [0, 1], [0, 1]), alive, 1) == "healthy"
    assert partition_state(_p(0, 0, [0, 1, 2], [0, 1]), alive, 1) == "under-replicated"
    assert partition_state(_p(0, 0, [0, 2], [0, 2]), alive, 1) == "under-replicated"  # an ISR member's broker died
    assert partition_state(_p(0, 0, [0, 1, 2], [0]), alive, 2) == "under-min-isr"
    assert partition_state(_p(0, -1, [0, 2], [0]), alive, 1) == "leaderless"  # a live ISR member: election due
    assert partition_state(_p(0, 2, [2, 0], [2, 0]), alive, 1) == "leaderless"  # leader's broker is dead
    assert partition_state(_p(0, -1, [2, 3], [2]), alive, 1) == "offline"
    assert partition_state(_p(0, -1, [0, 2], [2]), alive, 1) == "offline"  # only an out-of-sync replica lives


def test_worst_partition_decides_the_status_and_exit_code():
    healthy = {"name": "a", "configs": {}, "partitions": [_p(0, 0, [0, 1], [0, 1])]}
    r = cluster_health(_md([0, 1], [], [healthy]))
    assert (r["status"], r["exit_code"], r["partitions"], r["unhealthy"]) == ("healthy", 0, 1, [])
    under = {"name": "b", "configs": {"min.insync.replicas": "2"}, "partitions": [_p(0, 1, [1, 2], [1])]}
    off = {"name": "c", "configs": {}, "partitions": [_p(0, -1, [2], [2]), _p(1, 0, [0, 2], [0])]}
    r = cluster_health(_md([0, 1], [2], [healthy, under, off]))
    assert r["status"] == "offline" and r["exit_code"] == EXIT_CODES["offline"] == 7
    assert r["counts"] == {"healthy": 1, "under-replicated": 1, "under-min-isr": 1, "leaderless": 0, "offline": 1}
    assert [(u["topic"], u["partition"], u["state"]) for u in r["unhealthy"]] == [
        ("c", 0, "offline"),
        ("b", 0, "under-min-isr"),
        ("c", 1, "under-replicated"),
    ]
    assert r["brokers_dead"] == [2] and r["unhealthy"][0]["offline_replicas"] == [2]
    assert len(set(EXIT_CODES.values())) == 5 and 3 not in EXIT_CODES.values()  # 3 stays "no cluster"


def test_controller_lines_for_a_commit():
    prior = {("t", 0): {"replicas": [0, 1], "isr": [0, 1], "leader": 0, "leader_epoch": 3, "partition_epoch": 7}}
    recs = [
        {"type": "FenceBroker", "broker_id": 0, "broker_epoch": 4},
        {"type": "PartitionChange", "topic": "t", "partition": 0, "replicas": [0, 1], "isr": [1], "leader": 1}
        | {"leader_epoch": 4, "partition_epoch": 8},
        {"type": "PartitionChange", "topic": "t", "partition": 0, "replicas": [0, 1], "isr": [1], "leader": -1}
        | {"leader_epoch": 5, "partition_epoch": 9},
        {"type": "Topic", "name": "n", "topic_id": "x"},
        {"type": "SnapshotVersion", "version": 3},
    ]
    lines = controller_events.describe(recs, prior)
    assert lines == [
        (logging.WARNING, "Fenced broker 0 (broker epoch 4)"),
        (logging.INFO, "Elected leader 1 for partition t-0 (was 0) at leader epoch 4, ISR [1]"),
        (logging.INFO, "Shrunk ISR of t-0 from [0, 1] to [1] (partition epoch 8)"),
        (logging.WARNING, "Partition t-0 has no leader (was 1): OfflinePartition, ISR [1], leader epoch 5"),
        (logging.INFO, "Created topic n with topic id x"),
    ]


def test_log_file_layout(tmp_path):
    d = str(tmp_path)
    assert server_log.broker_log_of_partition_dir(f"{d}/broker-2/clicks-0", 2) == server_log.broker_log(d, 2)
    assert server_log.log_files(d) == []
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in ("broker-10.log", "broker-2.log", "controller.log", "broker-2.log.1", ".__broker-2.lock"):
        (logs / n).write_text("")
    assert [f.rsplit("/", 1)[1] for f in server_log.log_files(d)] == ["controller.log", "broker-2.log", "broker-10.log"]


def test_ray_driver_warnings_go_to_the_log_file_errors_still_to_the_terminal(tmp_path):
    """What ray.init warns on small machines (e.g. ``ray._private.services``: the object store on /tmp for a
    small /dev/shm) lands in <data_dir>/logs/ray.log, not on the terminal; Ray's errors still reach it."""
    import io

    import ray  # noqa: F401 - installs Ray's stderr handler on the "ray" logger, as in a driver

    lg = logging.getLogger("ray")
    saved = [(h, h.level) for h in lg.handlers]
    terminal = io.StringIO()
    term_handler = logging.StreamHandler(terminal)  # stands for Ray's own stderr handler
    lg.addHandler(term_handler)
    try:
        path = server_log.route_ray_driver_logs(str(tmp_path))
        assert server_log.route_ray_driver_logs(str(tmp_path)) == path  # once
        logging.getLogger("ray._private.services").warning("WARNING: The object store is using /tmp instead")
        logging.getLogger("ray._private.services").error("a real Ray error")
        assert "object store" not in terminal.getvalue() and "a real Ray error" in terminal.getvalue()
        assert all(h.level == logging.ERROR for h, _ in saved if not isinstance(h, logging.FileHandler))
        with open(path) as f:
            text = f.read()
        assert (
            "WARNING [Ray driver pid=" in text and "object store is using /tmp" in text and "a real Ray error" in text
        )
    finally:
        for h in list(lg.handlers):
            if h not in [s for s, _ in saved]:
                lg.removeHandler(h)
                h.close()
        for h, level in saved:
            h.setLevel(level)


def test_logs_show_whole_lines_only(tmp_path, capsys):
    """`rafka logs` reads a file another process is appending to: a last line not yet ended (a write under way)
    is not shown as an entry of its own (it is --follow's to print once whole)."""
    from rafka.cli.main import main

    logs = tmp_path / "logs"
    logs.mkdir()
    whole = "[2026-11-27 03:00:00,000] INFO [Broker id=0] one (actors.broker)\n"
    (logs / "broker-0.log").write_text(whole + whole.replace("one", "two") + "[2026-11-27 03:00:01,0")
    assert main(["logs", "--data-dir", str(tmp_path), "--broker", "0", "-n", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [whole.strip(), whole.replace("one", "two").strip()], out


def test_logs_are_merged_in_time_order_when_a_file_is_nearly_ordered(tmp_path, capsys):
    """A broker's file also takes its replica processes' lines, so one process's line can land after another's
    later one (CI saw ,267 before ,266): `rafka logs` shows every file's entries sorted by time (stable)."""
    from rafka.cli.main import main

    logs = tmp_path / "logs"
    logs.mkdir()
    line = "[2026-11-27 03:00:00,{ms:03d}] INFO [Broker id={b}] {msg} (actors.broker)\n"
    (logs / "broker-0.log").write_text(
        line.format(ms=1, b=0, msg="a") + line.format(ms=267, b=0, msg="c") + line.format(ms=266, b=0, msg="b")
    )
    (logs / "broker-1.log").write_text(line.format(ms=100, b=1, msg="x") + line.format(ms=300, b=1, msg="y"))
    assert main(["logs", "--data-dir", str(tmp_path), "--json"]) == 0
    entries = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["message"] for e in entries] == ["a", "x", "b", "c", "y"], entries
