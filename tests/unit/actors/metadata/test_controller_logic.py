"""The controller's pure state machine: placement, elections, AlterPartition, reassignment, records."""

from __future__ import annotations

import random
from collections import Counter

import msgpack
import pytest

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.partition_change import (
    ELECT_PREFERRED,
    ELECT_UNCLEAN,
    NO_LEADER,
    MetadataInvariantError,
    PartitionRegistration,
)
from actors.metadata.placement import assign_replicas, rack_alternated, validate_topic_name
from protocol.errors import InvalidTopicError


def make(n_brokers=3, racks=None, **cfg) -> ControllerLogic:
    logic = ControllerLogic(MetadataImage(), ControllerConfig(**cfg), random.Random(7))
    for b in range(n_brokers):
        apply(logic, logic.register_broker(b, {"rack": racks[b] if racks else None, "log_dir": f"/d/{b}"})[0])
    return logic


def apply(logic: ControllerLogic, records: list[dict]) -> None:
    for r in records:
        # every record survives msgpack, as it must to reach the metadata log and GCS KV
        logic.image.replay(msgpack.unpackb(msgpack.packb(r), strict_map_key=False))


def create(logic, name="t", n=3, rf=3, **kw):
    recs, res = logic.create_topics([{"name": name, "num_partitions": n, "replication_factor": rf, **kw}])
    apply(logic, recs)
    return res[0]


def part(logic, topic="t", p=0) -> PartitionRegistration:
    return logic.image.partition(topic, p)


# ---- placement ------------------------------------------------------------------------------------


def test_round_robin_spreads_leaders_and_followers():
    out = assign_replicas({b: None for b in range(3)}, 6, 3, random.Random(1))
    assert all(len(set(r)) == 3 for r in out)
    assert Counter(r[0] for r in out) == {0: 2, 1: 2, 2: 2}
    assert Counter(r[1] for r in out) == {0: 2, 1: 2, 2: 2}


def test_random_start_index_varies():
    firsts = {assign_replicas({b: None for b in range(5)}, 1, 1, random.Random(s))[0][0] for s in range(30)}
    assert len(firsts) > 1


def test_rack_aware_puts_replicas_on_distinct_racks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert rack_alternated(racks) == [0, 2, 4, 1, 3, 5]
    for seed in range(10):
        for replicas in assign_replicas(racks, 12, 3, random.Random(seed)):
            assert len({racks[r] for r in replicas}) == 3
            assert len(set(replicas)) == 3


def test_node_ids_make_placement_node_aware():
    logic = ControllerLogic(MetadataImage(), ControllerConfig(), random.Random(3))
    for b, node in enumerate(["n1", "n1", "n2", "n2"]):
        apply(logic, logic.register_broker(b, {"node_id": node})[0])
    create(logic, n=8, rf=2)
    for p in range(8):
        nodes = {logic.image.brokers[r].node_id for r in part(logic, p=p).replicas}
        assert nodes == {"n1", "n2"}


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "x/y", "ü", None, 5, "ok\n"])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)
    logic = make()
    recs, res = logic.create_topics([{"name": name, "num_partitions": 1, "replication_factor": 1}])
    assert recs == [] and res[0]["error_code"] == 17


def test_legal_topic_names():
    for name in ["a", "a" * 249, "A.b_c-9", "..."]:
        validate_topic_name(name)


# ---- topics ---------------------------------------------------------------------------------------


def test_create_topic_records_and_leaders():
    logic = make()
    res = create(logic, n=3, rf=3)
    assert res["error_code"] == 0 and res["topic_id"]
    t = logic.image.topics["t"]
    assert t.topic_id == res["topic_id"] and len(t.partitions) == 3
    for s in t.partitions.values():
        assert s.leader == s.replicas[0] and s.isr == s.replicas
        assert (s.leader_epoch, s.partition_epoch) == (0, 0)
    assert sorted(s.leader for s in t.partitions.values()) == [0, 1, 2]


def test_create_topic_errors():
    logic = make()
    create(logic, "t")
    cases = [
        ({"name": "t", "num_partitions": 1, "replication_factor": 1}, 36),
        ({"name": "u", "num_partitions": 0, "replication_factor": 1}, 37),
        ({"name": "u", "num_partitions": 1, "replication_factor": 4}, 38),
        ({"name": "u", "num_partitions": 1, "replication_factor": 0}, 38),
        ({"name": "u", "num_partitions": 1, "replication_factor": 1, "configs": {"bogus": 1}}, 40),
        ({"name": "u", "num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": "x"}}, 40),
        ({"name": "u", "replica_assignment": [[0, 0]]}, 39),
        ({"name": "u", "replica_assignment": [[0, 9]]}, 39),
        ({"name": "u", "replica_assignment": [[0, 1], [2]]}, 39),
    ]
    for req, code in cases:
        recs, res = logic.create_topics([req])
        assert (recs, res[0]["error_code"]) == ([], code), req
    create(logic, "a.b", n=1, rf=1)
    recs, res = logic.create_topics([{"name": "a_b", "num_partitions": 1, "replication_factor": 1}])
    assert res[0]["error_code"] == 17 and "collides" in res[0]["error_message"]


def test_create_many_in_one_request_and_duplicate_in_request():
    logic = make()
    recs, res = logic.create_topics(
        [
            {"name": "x", "num_partitions": 2, "replication_factor": 2},
            {"name": "x", "num_partitions": 1, "replication_factor": 1},
            {
                "name": "y",
                "replica_assignment": {0: [2, 1], 1: [1, 2]},
                "configs": {"retention.ms": 1000, "unclean.leader.election.enable": True},
            },
        ]
    )
    assert [r["error_code"] for r in res] == [0, 36, 0]
    apply(logic, recs)
    assert part(logic, "y", 0).replicas == [2, 1] and part(logic, "y", 0).leader == 2
    assert logic.image.topics["y"].configs == {"retention.ms": "1000", "unclean.leader.election.enable": "true"}
    assert logic.unclean_enabled("y") and not logic.unclean_enabled("x")


def test_defaults_for_minus_one():
    logic = make(num_partitions=4, default_replication_factor=2)
    res = create(logic, "d", n=-1, rf=-1)
    assert (res["num_partitions"], res["replication_factor"]) == (4, 2)


def test_delete_topic_and_recreate_gets_new_id():
    logic = make()
    tid = create(logic)["topic_id"]
    recs, res = logic.delete_topics(["t", "nope"])
    assert [r["error_code"] for r in res] == [0, 3]
    apply(logic, recs)
    assert "t" not in logic.image.topics
    assert create(logic)["topic_id"] != tid


def test_create_partitions():
    logic = make()
    create(logic, n=2, rf=2)
    for total, code in [(2, 37), (1, 37), ("x", 37)]:
        assert logic.create_partitions("t", total)[1]["error_code"] == code
    assert logic.create_partitions("nope", 5)[1]["error_code"] == 3
    assert logic.create_partitions("t", 3, [[0, 1, 2]])[1]["error_code"] == 39
    recs, res = logic.create_partitions("t", 5)
    assert res["error_code"] == 0
    apply(logic, recs)
    assert len(logic.image.topics["t"].partitions) == 5
    assert all(len(s.replicas) == 2 for s in logic.image.topics["t"].partitions.values())


def test_alter_configs():
    logic = make()
    create(logic)
    assert logic.alter_configs("t", {"nope": 1}, [])[1]["error_code"] == 40
    assert logic.alter_configs("zz", {"retention.ms": 1}, [])[1]["error_code"] == 3
    recs, res = logic.alter_configs("t", {"retention.ms": 5000, "segment.bytes": 1 << 20}, [])
    apply(logic, recs)
    assert logic.image.topics["t"].configs == {"retention.ms": "5000", "segment.bytes": "1048576"}
    apply(logic, logic.alter_configs("t", {}, ["retention.ms"])[0])
    assert logic.image.topics["t"].configs == {"segment.bytes": "1048576"}


def test_legacy_replace_deletes_the_overrides_of_the_image_it_commits_against():
    # Kafka's ConfigurationControlManager.legacyAlterConfigResource: the overrides not given are deleted, read
    # from the controller's current state in the same operation that writes the given ones
    logic = make()
    create(logic)
    apply(logic, logic.alter_configs("t", {"retention.ms": 5000, "preallocate": "true"}, [])[0])
    recs, res = logic.alter_configs("t", {"max.message.bytes": "65536"}, ["ignored"], replace=True)
    assert res["error_code"] == 0
    assert sorted((r["name"], r["value"]) for r in recs) == [
        ("max.message.bytes", "65536"),
        ("preallocate", None),
        ("retention.ms", None),
    ]
    apply(logic, recs)
    assert logic.image.topics["t"].configs == {"max.message.bytes": "65536"}
    # two replaces decided one after the other (the controller's lock) leave the second's set only
    apply(logic, logic.alter_configs("t", {"retention.ms": "1"}, [], replace=True)[0])
    apply(logic, logic.alter_configs("t", {"compression.type": "lz4"}, [], replace=True)[0])
    assert logic.image.topics["t"].configs == {"compression.type": "lz4"}
    # a refused value changes nothing; an empty set deletes every override
    recs, res = logic.alter_configs("t", {"retention.ms": "soon"}, [], replace=True)
    assert res["error_code"] == 40 and recs == []
    apply(logic, logic.alter_configs("t", {}, [], replace=True)[0])
    assert logic.image.topics["t"].configs == {}
    assert logic.alter_configs("zz", {}, [], replace=True)[1]["error_code"] == 3


# ---- brokers: loss, return, unclean election -------------------------------------------------------


def test_broker_loss_moves_leadership_within_isr():
    logic = make()
    create(logic, n=3, rf=3)
    led = [p for p, s in logic.image.topics["t"].partitions.items() if s.leader == 1]
    before = {p: (s.leader_epoch, s.partition_epoch) for p, s in logic.image.topics["t"].partitions.items()}
    apply(logic, logic.fence_broker(1))
    assert not logic.image.brokers[1].alive
    for p, s in logic.image.topics["t"].partitions.items():
        assert 1 not in s.isr and s.leader in (0, 2)
        assert s.leader_epoch == before[p][0] + 1 and s.partition_epoch == before[p][1] + 1
    assert led and all(part(logic, p=p).leader != 1 for p in led)
    assert logic.fence_broker(1) == []  # already fenced: nothing to do


def test_last_isr_member_loss_leaves_partition_offline_and_its_return_restores_it():
    logic = make()
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2]]}])[0])
    apply(logic, logic.fence_broker(1))
    apply(logic, logic.fence_broker(2))
    assert (part(logic).leader, part(logic).isr) == (0, [0])
    apply(logic, logic.fence_broker(0))
    s = part(logic)
    assert (s.leader, s.isr) == (NO_LEADER, [0])  # the ISR keeps the last member: it has the data
    # a non-ISR replica returns: unclean election is off, the partition stays offline
    recs, resp = logic.register_broker(2, {})
    apply(logic, recs)
    assert part(logic).leader == NO_LEADER
    assert logic.image.brokers[2].broker_epoch == resp["broker_epoch"]
    # the last ISR member returns and leads again, with a new leader epoch
    epoch = part(logic).leader_epoch
    apply(logic, logic.register_broker(0, {})[0])
    assert (part(logic).leader, part(logic).leader_epoch) == (0, epoch + 1)


def test_unclean_election_elects_live_out_of_sync_replica():
    logic = make(unclean_leader_election=True)
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1]]}])[0])
    apply(logic, logic.alter_partition("t", 0, 0, 0, [0], 0)[0])  # 1 fell out of the ISR
    apply(logic, logic.fence_broker(1))
    apply(logic, logic.fence_broker(0))
    assert part(logic).leader == NO_LEADER
    apply(logic, logic.register_broker(1, {})[0])
    assert (part(logic).leader, part(logic).isr) == (1, [1])


def test_unclean_per_topic_config_and_enable_triggers_election():
    logic = make()
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1]]}])[0])
    apply(logic, logic.alter_partition("t", 0, 0, 0, [0], 0)[0])
    apply(logic, logic.fence_broker(0))
    assert part(logic).leader == NO_LEADER
    recs, res = logic.alter_configs("t", {"unclean.leader.election.enable": "true"}, [])
    apply(logic, recs)
    assert (part(logic).leader, part(logic).isr) == (1, [1])


def test_unclean_elect_leaders_on_demand():
    logic = make()
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1]]}])[0])
    apply(logic, logic.alter_partition("t", 0, 0, 0, [0], 0)[0])
    apply(logic, logic.fence_broker(0))
    recs, res = logic.elect_leaders([("t", 0)], ELECT_PREFERRED)
    assert res[0]["error_code"] == 80
    recs, res = logic.elect_leaders([("t", 0), ("t", 9)], ELECT_UNCLEAN)
    assert [r["error_code"] for r in res] == [0, 3]
    apply(logic, recs)
    assert part(logic).leader == 1
    assert logic.elect_leaders([("t", 0)], ELECT_UNCLEAN)[1][0]["error_code"] == 84


def test_reregistration_of_alive_broker_fences_old_incarnation():
    logic = make()
    create(logic, n=1, rf=3)
    old = logic.image.brokers[0].broker_epoch
    recs, resp = logic.register_broker(0, {})
    assert [r["type"] for r in recs][:1] == ["FenceBroker"] and resp["broker_epoch"] > old
    apply(logic, recs)
    assert logic.image.brokers[0].alive and 0 not in part(logic).isr


def _lose_all_but_the_last_isr_member(logic):
    """t-0 on [0, 1, 2]: brokers 1 and 2 lost, then 0 (the ISR stops shrinking at its last member, [0])."""
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2]]}])[0])
    for b in (1, 2, 0):
        apply(logic, logic.fence_broker(b))
    assert part(logic).isr == [0] and part(logic).leader == NO_LEADER


def test_a_broker_back_with_its_disk_leads_again_but_one_back_with_an_empty_disk_never_leads_while_behind():
    """KIP-858/966's idea: the last ISR member back with the same log directory (its meta.properties directory.id)
    is elected; back with another one (a replaced or emptied disk), it has none of the data, so it leaves the ISR
    (even its last place) and the partition stays leaderless rather than led by an empty log."""
    same = make()
    apply(same, same.register_broker(0, {"directory_id": "dir-a"})[0])  # its first directory
    _lose_all_but_the_last_isr_member(same)
    apply(same, same.register_broker(0, {"directory_id": "dir-a"})[0])
    assert part(same).leader == 0 and part(same).isr == [0]

    empty = make()
    apply(empty, empty.register_broker(0, {"directory_id": "dir-a"})[0])
    _lose_all_but_the_last_isr_member(empty)
    recs, _ = empty.register_broker(0, {"directory_id": "dir-b"})
    apply(empty, recs)
    assert part(empty).leader == NO_LEADER and part(empty).isr == []
    assert empty.image.brokers[0].alive and empty.image.brokers[0].directory_id == "dir-b"
    # a broker with a new disk that is still in a larger ISR only leaves it; the leader keeps leading
    live = make()
    apply(live, live.register_broker(1, {"directory_id": "d1"})[0])
    apply(live, live.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2]]}])[0])
    apply(live, live.register_broker(1, {"directory_id": "d1-new"})[0])
    assert part(live).leader == 0 and part(live).isr == [0, 2]


# ---- AlterPartition -------------------------------------------------------------------------------


def test_alter_partition_validation_and_success():
    logic = make()
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2]]}])[0])
    s = part(logic)
    assert logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 1], s.partition_epoch + 1)[1]["error_code"] == 95
    assert logic.alter_partition("t", 0, 0, s.leader_epoch - 1, [0, 1], s.partition_epoch)[1]["error_code"] == 74
    assert logic.alter_partition("t", 0, 1, s.leader_epoch, [0, 1], s.partition_epoch)[1]["error_code"] == 42
    assert logic.alter_partition("t", 0, 0, s.leader_epoch, [1, 2], s.partition_epoch)[1]["error_code"] == 42
    assert logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 5], s.partition_epoch)[1]["error_code"] == 107
    assert logic.alter_partition("u", 0, 0, 0, [0], 0)[1]["error_code"] == 3
    recs, resp = logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 2], s.partition_epoch)
    assert resp["error_code"] == 0 and resp["isr"] == [0, 2] and resp["partition_epoch"] == 1
    apply(logic, recs)
    assert part(logic).leader_epoch == 0  # leader-driven ISR change keeps the leader epoch
    apply(logic, logic.fence_broker(1))
    recs, resp = logic.alter_partition("t", 0, 0, 0, [0, 1, 2], 1)
    assert resp["error_code"] == 107  # 1 is fenced
    # no-op change: same ISR, no record
    assert logic.alter_partition("t", 0, 0, 0, [0, 2], 1) == (
        [],
        {"error_code": 0, "error_message": None, "leader": 0, "leader_epoch": 0, "isr": [0, 2], "partition_epoch": 1},
    )


# ---- preferred election and imbalance --------------------------------------------------------------


def test_preferred_election_and_imbalance():
    logic = make(imbalance_percentage=10)
    create(logic, n=3, rf=3)
    apply(logic, logic.fence_broker(0))
    apply(logic, logic.register_broker(0, {})[0])
    led0 = [p for p, s in logic.image.topics["t"].partitions.items() if s.replicas[0] == 0]
    assert all(part(logic, p=p).leader != 0 for p in led0)
    assert logic.imbalanced_partitions() == []  # 0 is not back in the ISR yet
    for p in led0:
        s = part(logic, p=p)
        apply(logic, logic.alter_partition("t", p, s.leader, s.leader_epoch, s.isr + [0], s.partition_epoch)[0])
    assert sorted(logic.imbalanced_partitions()) == [("t", p) for p in led0]
    recs, res = logic.elect_leaders(None, ELECT_PREFERRED)
    assert sorted(r["error_code"] for r in res) == sorted([0] * len(led0) + [84] * (3 - len(led0)))
    apply(logic, recs)
    assert all(s.leader == s.replicas[0] for s in logic.image.topics["t"].partitions.values())
    assert logic.imbalanced_partitions() == []


# ---- reassignment ---------------------------------------------------------------------------------


def test_reassignment_add_catch_up_switch_drop():
    logic = make(n_brokers=4)
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1]]}])[0])
    recs, res = logic.alter_partition_reassignments([{"topic": "t", "partition": 0, "replicas": [2, 3]}])
    assert res[0]["error_code"] == 0
    apply(logic, recs)
    s = part(logic)
    assert (s.replicas, s.adding, s.removing, s.leader) == ([2, 3, 0, 1], [2, 3], [0, 1], 0)
    assert logic.list_partition_reassignments() == [
        {"topic": "t", "partition": 0, "replicas": [2, 3, 0, 1], "adding": [2, 3], "removing": [0, 1]}
    ]
    recs, resp = logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 1, 2], s.partition_epoch)
    apply(logic, recs)
    assert part(logic).reassigning
    s = part(logic)
    recs, resp = logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 1, 2, 3], s.partition_epoch)
    assert resp["error_code"] == 108  # the leader moved off the removed replica
    apply(logic, recs)
    s = part(logic)
    assert (s.replicas, s.isr, s.leader, s.adding, s.removing) == ([2, 3], [2, 3], 2, [], [])
    assert logic.list_partition_reassignments() == []


def test_reassignment_errors_and_cancel():
    logic = make(n_brokers=4)
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1]]}])[0])
    bad = [
        {"topic": "t", "partition": 0, "replicas": [0, 0]},
        {"topic": "t", "partition": 0, "replicas": [9]},
        {"topic": "t", "partition": 7, "replicas": [1]},
        {"topic": "t", "partition": 0, "replicas": None},
        3,
    ]
    _, res = logic.alter_partition_reassignments(bad)
    assert [r["error_code"] for r in res] == [39, 39, 3, 85, 42]
    apply(logic, logic.alter_partition_reassignments([{"topic": "t", "partition": 0, "replicas": [0, 3]}])[0])
    assert part(logic).adding == [3]
    apply(logic, logic.alter_partition_reassignments([{"topic": "t", "partition": 0, "replicas": None}])[0])
    s = part(logic)
    assert (s.replicas, s.adding, s.removing, s.leader) == ([0, 1], [], [], 0)


def test_shrinking_reassignment_completes_at_once():
    logic = make()
    apply(logic, logic.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2]]}])[0])
    apply(logic, logic.alter_partition_reassignments([{"topic": "t", "partition": 0, "replicas": [1, 2]}])[0])
    s = part(logic)
    assert (s.replicas, s.isr, s.leader, s.reassigning) == ([1, 2], [1, 2], 1, False)
    assert s.leader_epoch == 1


# ---- producer ids, records, snapshots --------------------------------------------------------------


def test_producer_id_blocks_never_reused():
    logic = make()
    recs, (first, count) = logic.allocate_producer_ids(0, logic.image.brokers[0].broker_epoch)
    apply(logic, recs)
    recs2, (first2, _) = logic.allocate_producer_ids(1)
    apply(logic, recs2)
    assert (first, count, first2) == (0, 1000, 1000)
    img = MetadataImage.from_records(logic.image.snapshot_records())
    assert img.next_producer_id == 2000
    with pytest.raises(Exception) as e:
        logic.allocate_producer_ids(0, 12345)
    assert e.value.code == 77
    with pytest.raises(Exception) as e:
        logic.allocate_producer_ids(42)
    assert e.value.code == 102


def test_snapshot_and_kv_roundtrip():
    logic = make()
    create(logic, n=2, rf=2, configs={"retention.ms": 10})
    apply(logic, logic.fence_broker(2))
    snap = MetadataImage.from_records(logic.image.snapshot_records())
    kv = MetadataImage.from_kv(
        [b.to_dict() for b in logic.image.brokers.values()],
        [msgpack.unpackb(msgpack.packb(t.to_dict()), strict_map_key=False) for t in logic.image.topics.values()],
        logic.image.version,
        logic.image.next_producer_id,
    )
    for img in (snap, kv):
        assert img.version == logic.image.version
        assert {k: v.to_dict() for k, v in img.brokers.items()} == {
            k: v.to_dict() for k, v in logic.image.brokers.items()
        }
        assert img.topics["t"].to_dict() == logic.image.topics["t"].to_dict()


def test_replay_asserts_transitions():
    logic = make()
    create(logic, n=1, rf=3)
    s = part(logic).to_dict()
    base = {"type": "PartitionChange", "topic": "t", "partition": 0}
    o1, o2 = [r for r in s["replicas"] if r != s["leader"]]
    bad = [
        {**s, "partition_epoch": 0},  # epoch not bumped
        {**s, "partition_epoch": 1, "leader": o1},  # leader change without epoch bump
        {**s, "partition_epoch": 1, "leader": o1, "leader_epoch": 1, "isr": [s["leader"], o2]},  # outside ISR
        {**s, "partition_epoch": 1, "isr": [s["leader"], 7]},  # ISR outside replicas
        {**s, "partition_epoch": 1, "leader_epoch": -1},
    ]
    for b in bad:
        with pytest.raises(MetadataInvariantError):
            logic.image.replay({**base, **b})
    with pytest.raises(MetadataInvariantError):
        logic.image.replay({"type": "Bogus"})
    with pytest.raises(MetadataInvariantError):
        logic.image.replay({"type": "Topic", "name": "t", "topic_id": "x"})
    assert part(logic).to_dict() == s


def test_metadata_log_torn_tail_and_snapshot(tmp_path):
    from actors.metadata.store import MetadataLog

    path = str(tmp_path / "controller" / "metadata.log")
    logic = make()
    create(logic, n=2, rf=2)
    log = MetadataLog(path)
    log.append(logic.image.snapshot_records()[:-1])
    log.append([{"type": "ProducerIds", "broker_id": 0, "broker_epoch": 0, "next_producer_id": 1000}])
    log.close()
    good = len(MetadataLog(path).read_all())
    with open(path, "ab") as f:  # a crash in the middle of the next append
        f.write(b"\x00\x00\x01\x00garbage")
    size_before = (tmp_path / "controller" / "metadata.log").stat().st_size
    records = MetadataLog(path).read_all()
    assert len(records) == good
    assert (tmp_path / "controller" / "metadata.log").stat().st_size < size_before  # tail cut off
    img = MetadataImage.from_records(records)
    assert img.topics["t"].to_dict() == logic.image.topics["t"].to_dict() and img.next_producer_id == 1000
    # a flipped byte inside a record ends the valid prefix there
    data = bytearray((tmp_path / "controller" / "metadata.log").read_bytes())
    data[-3] ^= 0xFF
    (tmp_path / "controller" / "metadata.log").write_bytes(bytes(data))
    assert len(MetadataLog(path).read_all()) == good - 1
    # rewrite replaces the log atomically with a snapshot
    log = MetadataLog(path)
    log.rewrite(logic.image.snapshot_records())
    again = MetadataImage.from_records(MetadataLog(path).read_all())
    assert again.version == logic.image.version and again.topics["t"].to_dict() == logic.image.topics["t"].to_dict()


def test_topic_rule_lives_in_one_place():
    """storage/topic.py is Kafka's Topic.validate for the clients and the controller alike; a trailing
    newline no longer slips through (``$`` matched before it)."""
    import storage.topic
    from actors.metadata import placement

    assert placement.validate_topic_name is storage.topic.validate_topic_name
    for name in ("ok\n", "a\tb", "x" * 250, None, b"bytes", ["t"]):
        with pytest.raises(InvalidTopicError):
            storage.topic.validate_topic_name(name)
