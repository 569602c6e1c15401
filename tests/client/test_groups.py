"""Consumer groups from the client (real Ray, the package's shared 3-broker cluster): subscribe, rebalances
on join/leave/poll-timeout, committed offsets, at-least-once, regex subscription, static membership."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

import rafka
from rafka import TopicPartition

pytestmark = pytest.mark.cluster

FAST = dict(
    session_timeout_ms=3000,
    heartbeat_interval_ms=200,
    max_poll_interval_ms=8000,
    auto_offset_reset="earliest",
    fetch_max_wait_ms=100,
)


@pytest.fixture
def gcluster(rafka_cluster):
    """The package's shared cluster (tests/client/conftest.py: short group timings); every topic a test made
    is deleted after it, so the shared cluster does not accumulate replica actors."""
    yield rafka_cluster
    existing = set(rafka.Admin(rafka_cluster).list_topics())
    made = [t for t in _made if t in existing]
    _made.clear()
    if made:
        rafka.Admin(rafka_cluster).delete_topics(made)


@pytest.fixture
def gadmin(admin):
    return admin


_made: list[str] = []


def topic(admin, partitions: int, name: str | None = None) -> str:
    name = name or f"g-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, partitions, 1)
    _made.append(name)
    return name


def produce(cluster, name: str, n: int, start: int = 0) -> None:
    with rafka.Producer(cluster, linger_ms=1) as p:
        for i in range(start, start + n):
            p.send(name, str(i).encode(), key=str(i).encode())
        p.flush()


def group() -> str:
    return "grp-" + uuid.uuid4().hex[:8]


def poll_until(consumers, cond, timeout_s: float = 30.0, sink=None):
    """Poll every consumer in turn until ``cond()``; records go to ``sink`` (a list) when given."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in consumers:
            for recs in c.poll(timeout_ms=50).values():
                if sink is not None:
                    sink.extend(recs)


def owners_disjoint_and_complete(consumers, name: str, partitions: int) -> bool:
    gens = {c.group_metadata()["generation_id"] for c in consumers}
    owned = [c.assignment() for c in consumers]
    everything = set().union(*owned)
    return (
        len(gens) == 1
        and -1 not in gens
        and sum(len(o) for o in owned) == len(everything)
        and everything == {TopicPartition(name, p) for p in range(partitions)}
    )


class Recorder(rafka.ConsumerRebalanceListener):
    def __init__(self):
        self.events = []

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", set(lost)))


def test_members_split_partitions_and_take_over_on_close(gcluster, gadmin):
    name, g = topic(gadmin, 6), group()
    listeners = [Recorder() for _ in range(3)]
    cs = [rafka.Consumer(gcluster, group_id=g, **FAST) for _ in range(3)]
    try:
        for c, lst in zip(cs, listeners):
            c.subscribe([name], listener=lst)
        poll_until(cs, lambda: owners_disjoint_and_complete(cs, name, 6))
        assert all(len(c.assignment()) == 2 for c in cs)
        assert all(("assigned", cs[i].assignment()) in listeners[i].events for i in range(3))
        gen = cs[0].group_metadata()["generation_id"]
        cs[2].close()
        assert listeners[2].events[-1][0] == "revoked"
        rest = cs[:2]
        poll_until(
            rest,
            lambda: owners_disjoint_and_complete(rest, name, 6) and rest[0].group_metadata()["generation_id"] > gen,
        )
        assert sorted(len(c.assignment()) for c in rest) == [3, 3]
    finally:
        for c in cs:
            c.close()


def test_cooperative_sticky_keeps_unmoved_partitions(gcluster, gadmin):
    name, g = topic(gadmin, 4), group()
    cfg = dict(FAST, partition_assignment_strategy="cooperative-sticky")
    a_listener, b_listener = Recorder(), Recorder()
    a = rafka.Consumer(gcluster, group_id=g, **cfg)
    b = rafka.Consumer(gcluster, group_id=g, **cfg)
    try:
        a.subscribe([name], listener=a_listener)
        poll_until([a], lambda: len(a.assignment()) == 4)
        before = a.assignment()
        b.subscribe([name], listener=b_listener)
        poll_until(
            [a, b],
            lambda: (
                len(a.assignment()) == 2 and len(b.assignment()) == 2 and owners_disjoint_and_complete([a, b], name, 4)
            ),
        )
        revoked = set().union(*(tps for kind, tps in a_listener.events if kind == "revoked"))
        assert revoked == before - a.assignment() and len(revoked) == 2  # only the moved ones stopped
        assert a.assignment() <= before
        assert not any(kind == "lost" for kind, _ in a_listener.events)
    finally:
        a.close()
        b.close()


def test_committed_offsets_survive_and_new_member_resumes(gcluster, gadmin):
    name, g = topic(gadmin, 2), group()
    produce(gcluster, name, 40)
    seen = []
    c1 = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, **FAST)
    c1.subscribe([name])
    poll_until([c1], lambda: len(seen) >= 40, sink=seen)
    c1.commit()
    tps = [TopicPartition(name, p) for p in range(2)]
    committed = {tp: c1.committed(tp).offset for tp in tps}
    assert sum(committed.values()) == 40
    c1.close()
    produce(gcluster, name, 10, start=40)
    c2 = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, **FAST)
    try:
        c2.subscribe([name])
        later = []
        poll_until([c2], lambda: len(later) >= 10, sink=later)
        assert sorted(int(r.value) for r in later) == list(range(40, 50))  # resumed at the commits
        assert {tp: c2.committed(tp).offset for tp in tps} == committed
        done = threading.Event()
        got = []
        c2.commit_async(callback=lambda offs, err: (got.append((offs, err)), done.set()))
        assert done.wait(10)
        assert got[0][1] is None
        assert sum(c2.committed(tp).offset for tp in tps) == 50
        # async commits land in the order they were made: the last one made is the one that stays
        tp0 = tps[0]
        order = []
        futures = [
            c2.commit_async({tp0: off}, callback=lambda offs, err: order.append((offs[tp0], err)))
            for off in range(1, 31)
        ]
        assert futures[-1].result(timeout=30) is None
        assert order == [(off, None) for off in range(1, 31)]
        assert c2.committed(tp0).offset == 30
    finally:
        c2.close()


def test_at_least_once_when_a_member_dies_before_committing(gcluster, gadmin):
    """The victim processes records and stops (no commit, no close, no more polls): it is removed after
    max_poll_interval_ms, and the survivor processes its uncommitted records again; nothing is lost."""
    name, g = topic(gadmin, 4), group()
    cfg = dict(FAST, enable_auto_commit=False)
    producer = rafka.Producer(gcluster, linger_ms=1)
    victim = rafka.Consumer(gcluster, group_id=g, **dict(cfg, max_poll_interval_ms=2000))
    survivor = rafka.Consumer(gcluster, group_id=g, **cfg)
    by_victim, by_survivor = [], []
    try:
        victim.subscribe([name])
        survivor.subscribe([name])
        # the group settles on an empty topic, so no record is read (and dropped) by a passing assignment
        poll_until([victim, survivor], lambda: owners_disjoint_and_complete([victim, survivor], name, 4))
        victim_parts, gen = victim.assignment(), victim.group_metadata()["generation_id"]
        for i in range(200):
            producer.send(name, str(i).encode(), key=str(i).encode())
        producer.flush()
        own = sum(survivor.end_offsets(survivor.assignment()).values())
        # both poll while the victim works (a survivor left unpolled for max_poll_interval_ms would be the one
        # removed, as seen on a loaded CI machine); the victim stops after 20 records
        victim_gen_at_stop, deadline = None, time.monotonic() + 30
        while victim_gen_at_stop is None or len(by_survivor) < own:
            assert time.monotonic() < deadline, (len(by_victim), len(by_survivor), own)
            if victim_gen_at_stop is None:
                for recs in victim.poll(timeout_ms=50).values():
                    by_victim.extend(recs)
                if len(by_victim) >= 20:
                    victim_gen_at_stop = victim.group_metadata()["generation_id"]
            for recs in survivor.poll(timeout_ms=50).values():
                by_survivor.extend(recs)
        assert victim_gen_at_stop == gen  # the victim read all it read in the settled generation
        survivor.commit()
        # the victim stops here: its heartbeat thread sees no poll for max_poll_interval_ms and leaves
        t0 = time.monotonic()
        poll_until([survivor], lambda: survivor.assignment() >= victim_parts, sink=by_survivor)
        assert time.monotonic() - t0 < 15
        poll_until([survivor], lambda: {int(r.value) for r in by_survivor} == set(range(200)), sink=by_survivor)
        again = {int(r.value) for r in by_victim}
        assert again and again <= {int(r.value) for r in by_survivor}  # processed again, none lost
        assert {r.topic for r in by_victim} == {name}
        assert {TopicPartition(r.topic, r.partition) for r in by_victim} <= victim_parts
        assert victim.group_metadata()["generation_id"] == -1  # it learned it is out of the group
    finally:
        survivor.close()
        victim.close()
        producer.close()


def test_regex_subscription_picks_up_new_topic(gcluster, gadmin):
    prefix = "rx" + uuid.uuid4().hex[:6]
    first = topic(gadmin, 2, f"{prefix}-a")
    c = rafka.Consumer(gcluster, group_id=group(), metadata_max_age_ms=300, **FAST)
    try:
        c.subscribe(pattern=rf"{prefix}-.*")
        poll_until([c], lambda: len(c.assignment()) == 2)
        assert {tp.topic for tp in c.assignment()} == {first}
        second = topic(gadmin, 3, f"{prefix}-b")
        topic(gadmin, 1, f"other-{prefix}")
        poll_until([c], lambda: len(c.assignment()) == 5)
        assert {tp.topic for tp in c.assignment()} == {first, second}
        produce(gcluster, second, 5)
        got = []
        poll_until([c], lambda: len(got) >= 5, sink=got)
        assert {r.topic for r in got} == {second}
    finally:
        c.close()


def test_static_member_restart_within_session_timeout_keeps_generation(gcluster, gadmin):
    name, g = topic(gadmin, 4), group()
    cfg = dict(FAST, session_timeout_ms=6000)
    a = rafka.Consumer(gcluster, group_id=g, group_instance_id="a", **cfg)
    b = rafka.Consumer(gcluster, group_id=g, group_instance_id="b", **cfg)
    try:
        a.subscribe([name])
        b.subscribe([name])
        poll_until([a, b], lambda: owners_disjoint_and_complete([a, b], name, 4))
        gen, a_parts = a.group_metadata()["generation_id"], a.assignment()
        a.close()  # a static member does not leave on close
        a = rafka.Consumer(gcluster, group_id=g, group_instance_id="a", **cfg)
        a.subscribe([name])
        poll_until([a, b], lambda: a.assignment() == a_parts)
        deadline = time.monotonic() + 1.5  # b keeps heartbeating: no rebalance is started
        while time.monotonic() < deadline:
            a.poll(timeout_ms=50)
            b.poll(timeout_ms=50)
        assert a.group_metadata()["generation_id"] == gen
        assert b.group_metadata()["generation_id"] == gen
        assert owners_disjoint_and_complete([a, b], name, 4)
    finally:
        a.close()
        b.close()


def test_admin_lists_describes_resets_and_deletes_groups(gcluster, gadmin):
    name, g = topic(gadmin, 2), group()
    produce(gcluster, name, 30)
    c = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, client_id="lagger", **FAST)
    seen = []
    c.subscribe([name])
    poll_until([c], lambda: len(seen) >= 30, sink=seen)
    tps = sorted(c.assignment())
    c.commit({tps[0]: 10, tps[1]: 5})
    assert g in {x["group_id"] for x in gadmin.list_groups()}
    d = gadmin.describe_groups([g])[0]
    assert d["state"] == "Stable" and d["protocol_type"] == "consumer"
    assert [m["client_id"] for m in d["members"]] == ["lagger"]
    assert sorted(d["members"][0]["assignment"]) == tps
    ends = c.end_offsets(tps)
    lag = {(o["topic"], o["partition"]): (o["committed"], o["log_end"], o["lag"]) for o in d["offsets"]}
    assert lag == {
        (tps[0].topic, 0): (10, ends[tps[0]], ends[tps[0]] - 10),
        (tps[1].topic, 1): (5, ends[tps[1]], ends[tps[1]] - 5),
    }
    with pytest.raises(rafka.errors.KafkaError):  # active members: offsets cannot be altered, nor deleted
        gadmin.delete_groups([g])
    c.close()
    assert gadmin.reset_consumer_group_offsets(g, "latest") == ends
    assert gadmin.list_consumer_group_offsets(g) == ends
    assert gadmin.reset_consumer_group_offsets(g, "earliest") == {tp: 0 for tp in tps}
    gadmin.alter_consumer_group_offsets(g, {tps[0]: 3})
    assert gadmin.list_consumer_group_offsets(g)[tps[0]] == 3
    c2 = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, **FAST)
    again = []
    c2.subscribe([name])
    poll_until([c2], lambda: len(again) >= 30 - 3, sink=again)
    assert len([r for r in again if r.partition == tps[0].partition]) == ends[tps[0]] - 3
    c2.close()
    gadmin.delete_groups([g])
    assert g not in {x["group_id"] for x in gadmin.list_groups()}
    assert gadmin.list_consumer_group_offsets(g) == {}


def test_cli_group_commands_and_group_consume(gcluster, gadmin, capsys):
    from rafka.cli.main import main

    name, g = topic(gadmin, 2), group()
    produce(gcluster, name, 12)
    base = ["--address", gcluster.address, "--cluster", gcluster.name]

    def run(*argv):
        capsys.readouterr()
        assert main(base + list(argv)) == 0
        return capsys.readouterr().out

    out = run("--json", "topic", "consume", name, "--group", g, "-e")
    assert sorted(int(json.loads(line)["value"]) for line in out.splitlines()) == list(range(12))
    assert g in {x["group_id"] for x in json.loads(run("--json", "group", "list"))}
    d = json.loads(run("--json", "group", "describe", g))
    assert d["state"] == "Empty" and sum(o["committed"] for o in d["offsets"]) == 12
    assert all(o["lag"] == 0 for o in d["offsets"])
    assert "TOTAL-LAG 0" in run("group", "describe", g)
    seek = json.loads(run("--json", "group", "seek", g, "--to", "start"))
    assert sorted((s["partition"], s["offset"]) for s in seek) == [(0, 0), (1, 0)]
    assert "TOTAL-LAG 12" in run("group", "describe", g)
    out = run("--json", "topic", "consume", name, "--group", g, "-n", "12")
    assert len(out.splitlines()) == 12
    # kafka-consumer-groups --reset-offsets: a plan unless --execute, clamped to [log start, log end]
    offs = json.loads(run("--json", "group", "describe", g))["offsets"]
    committed = {o["partition"]: o["committed"] for o in offs}
    ends = {o["partition"]: o["log_end"] for o in offs}
    plan = json.loads(run("--json", "group", "reset-offsets", g, "--shift-by", "-2"))
    assert plan["executed"] is False
    assert {r["partition"]: r["new"] for r in plan["partitions"]} == {p: max(0, c - 2) for p, c in committed.items()}
    assert {o["partition"]: o["committed"] for o in json.loads(run("--json", "group", "describe", g))["offsets"]} == (
        committed
    )  # a dry run changes nothing
    assert "NEW-OFFSET" in run("group", "reset-offsets", g, "--to-earliest", "--dry-run")
    big = json.loads(run("--json", "group", "reset-offsets", g, "--to-offset", "1000000", "--execute"))
    assert big["executed"] and {r["partition"]: r["new"] for r in big["partitions"]} == ends
    one = json.loads(
        run("--json", "group", "reset-offsets", g, "--topic", f"{name}:0", "--shift-by", "-1000", "--execute")
    )
    assert [(r["partition"], r["current"], r["new"]) for r in one["partitions"]] == [(0, ends[0], 0)]
    old = json.loads(run("--json", "group", "reset-offsets", g, "--to-datetime", "2001-01-01T00:00:00Z", "--execute"))
    assert {r["partition"]: r["new"] for r in old["partitions"]} == {0: 0, 1: 0}
    new = json.loads(run("--json", "group", "reset-offsets", g, "--to-datetime", "2999-01-01T00:00:00", "--execute"))
    assert {r["partition"]: r["new"] for r in new["partitions"]} == ends
    assert main(base + ["group", "reset-offsets", "no-such-group-" + g, "--to-earliest"]) == 2  # nothing matched
    assert "nothing to reset" in capsys.readouterr().err
    assert main(base + ["group", "reset-offsets", g, "--to-datetime", "yesterday"]) == 2
    run("group", "delete", g)
    assert g not in {x["group_id"] for x in json.loads(run("--json", "group", "list"))}


CRASHING_MEMBER = r"""
import os, sys
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray, ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host
from protocol.names import RAY_NAMESPACE
ray.init(address=sys.argv[1], namespace=RAY_NAMESPACE, log_to_driver=False, logging_level="ERROR")
import rafka
c = rafka.Consumer(sys.argv[2], group_id=sys.argv[3], enable_auto_commit=False, session_timeout_ms=3000,
                   heartbeat_interval_ms=200, auto_offset_reset="earliest", fetch_max_wait_ms=100)
c.subscribe([sys.argv[4]])
while True:  # process (print) records, never commit; the test SIGKILLs this process
    for recs in c.poll(timeout_ms=100).values():
        for r in recs:  # one write per line: under PYTHONUNBUFFERED print() writes each piece on its own
            os.write(1, b"%d %d\n" % (r.partition, int(r.value)))
"""


def processed_lines(path) -> list:
    """The (partition, value) lines the member has finished writing (a line being written has no newline yet)."""
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f if line.endswith("\n")]


def test_crashed_member_is_expired_by_session_timeout_and_its_records_reprocessed(gcluster, gadmin, tmp_path):
    """A member process is SIGKILLed after processing records and before committing: no LeaveGroup, no
    heartbeats. Its session expires, the survivor takes its partitions and processes those records again."""
    import os
    import signal
    import subprocess
    import sys

    name, g = topic(gadmin, 2), group()
    produce(gcluster, name, 100)
    script = tmp_path / "member.py"
    script.write_text(CRASHING_MEMBER)
    out = open(tmp_path / "member.out", "w+")
    proc = subprocess.Popen(
        [sys.executable, str(script), gcluster.address, gcluster.name, g, name],
        stdout=out,
        stderr=subprocess.DEVNULL,
        cwd=os.getcwd(),
    )
    survivor = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, **FAST)
    mine = []
    try:
        deadline = time.monotonic() + 60
        while len(processed_lines(out.name)) < 10:  # the member joined and processed some records
            assert proc.poll() is None and time.monotonic() < deadline, "member process did not consume"
            time.sleep(0.1)
        survivor.subscribe([name])
        poll_until([survivor], lambda: len(survivor.assignment()) == 1, timeout_s=60, sink=mine)
        processed_by_crashed = processed_lines(out.name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        poll_until([survivor], lambda: len(survivor.assignment()) == 2, timeout_s=30, sink=mine)
        assert time.monotonic() - t0 >= 1.0  # it took the session timeout (3 s) to notice, not a LeaveGroup
        poll_until([survivor], lambda: {int(r.value) for r in mine} == set(range(100)), sink=mine)
        again = {v for _, v in processed_by_crashed}
        assert again and again <= {int(r.value) for r in mine}
    finally:
        if proc.poll() is None:
            proc.kill()
        survivor.close()
        out.close()


def test_commits_to_an_unknown_topic_or_partition_are_refused_and_not_stored(gcluster, gadmin):
    """rafka's consumer (and admin) commit through the group coordinator, which checks the partitions as Kafka's
    KafkaApis does for OffsetCommit: an unknown topic, or a partition past the topic's count, answers
    UNKNOWN_TOPIC_OR_PARTITION and nothing is stored for it; the request's other partitions are committed."""
    from protocol.errors import UnknownTopicOrPartitionError

    name, g = topic(gadmin, 1), group()
    produce(gcluster, name, 5)
    missing = f"nope-{uuid.uuid4().hex[:6]}"
    c = rafka.Consumer(gcluster, group_id=g, enable_auto_commit=False, **FAST)
    try:
        seen = []
        c.subscribe([name])
        poll_until([c], lambda: len(seen) >= 5, sink=seen)  # a member of the group, generation >= 1
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{missing}-0"):
            c.commit({TopicPartition(missing, 0): 3})
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{name}-4"):
            c.commit({TopicPartition(name, 4): 3})  # the topic has 1 partition
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{missing}-1"):
            c.commit({TopicPartition(name, 0): 4, TopicPartition(missing, 1): 2})
        assert c.committed(TopicPartition(name, 0)).offset == 4  # the known partition was committed
        assert c.committed(TopicPartition(missing, 0)) is None and c.committed(TopicPartition(name, 4)) is None
        c.commit({TopicPartition(name, 0): 5})  # the member is still in good standing
        assert c.committed(TopicPartition(name, 0)).offset == 5
    finally:
        c.close()
    assert gadmin.list_consumer_group_offsets(g) == {TopicPartition(name, 0): 5}
    with pytest.raises(UnknownTopicOrPartitionError, match=f"{missing}-0"):
        gadmin.alter_consumer_group_offsets(g, {TopicPartition(missing, 0): 1})
    assert gadmin.list_consumer_group_offsets(g) == {TopicPartition(name, 0): 5}
