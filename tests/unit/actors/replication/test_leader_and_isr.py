"""The broker's pure LeaderAndIsr decisions (actors/replication/leader_and_isr.py) and its FindCoordinator answer."""

from __future__ import annotations

from actors.replication import leader_and_isr as lai
from actors.replication.replica_config import REPLICA_DEFAULTS
from actors.server.coordinator_host import coordinator_answer, offsets_partition_state
from protocol.control_messages import LeaderAndIsrPartitionError, LeaderAndIsrPartitionState
from protocol.errors import NotLeaderOrFollowerError, StaleControllerEpochError


def state(leader=1, replicas=(1, 2, 3), topic_id="id-a", **kw) -> LeaderAndIsrPartitionState:
    fields = {
        "topic": "t",
        "partition": 0,
        "controller_epoch": 2,
        "leader": leader,
        "leader_epoch": 4,
        "isr": replicas,
        "partition_epoch": 9,
        "replicas": replicas,
        "topic_id": topic_id,
        "configs": {"retention.ms": "5"},
    }
    return LeaderAndIsrPartitionState(**{**fields, **kw})


def test_stale_controller_epoch_is_refused_current_and_newer_are_not():
    res = lai.stale_controller_epoch(3, 4)
    assert res["error_code"] == StaleControllerEpochError.code and res["controller_epoch"] == 4
    assert "3 is older than 4" in res["error_message"]
    assert lai.stale_controller_epoch(4, 4) is None and lai.stale_controller_epoch(5, 4) is None
    assert lai.stale_controller_epoch(0, -1) is None  # nothing seen yet


def test_replica_action_create_recreate_update_not_a_replica():
    s = state()
    assert lai.replica_action(1, s, None).kind == lai.CREATE
    assert lai.replica_action(1, s, "id-a").kind == lai.UPDATE
    assert lai.replica_action(1, s, "id-old").kind == lai.RECREATE  # deleted and re-created topic
    assert lai.replica_action(7, s, "id-a").kind == lai.NOT_A_REPLICA
    assert lai.replica_action(1, s, None).make_leader and not lai.replica_action(2, s, None).make_leader


def test_replica_action_state_is_what_the_replica_is_given():
    s = state()
    assert lai.replica_action(2, s, "id-a").state is s


def test_partition_result():
    s = state()
    head = {"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 4}
    ok = lai.partition_result(s, {"error_code": 0})
    assert ok == LeaderAndIsrPartitionError("t", 0, 1, 4, 0, None)
    assert ok.to_dict() == {**head, "error_code": 0, "error_message": None}
    assert lai.partition_result(s, {"ignored": True, "error_message": "stale leader epoch"}).to_dict() == {
        **head,
        "error_code": 0,
        "error_message": "stale leader epoch",
        "ignored": True,
    }
    assert lai.partition_result(s, {"error_code": 6, "error_message": "x"}).error_code == 6
    err = lai.partition_result(s, error=lai.not_a_replica_error()).to_dict()
    assert err == {**head, "error_code": NotLeaderOrFollowerError.code, "error_message": "this broker is not a replica"}


def test_full_leader_and_isr_removes_unnamed_replicas_and_stray_dirs():
    states = [state(), state(partition=2), state(topic="a-b")]
    hosted = [("t", 0), ("t", 1), ("gone", 0), ("a-b", 0)]
    assert lai.replicas_to_remove(hosted, states) == [("t", 1), ("gone", 0)]
    listing = ["t-0", "t-1", "t-2", "a-b-0", "gone-0", ".lock", "meta.properties", "x-", "-3", "y-1a"]
    assert lai.stray_partition_dirs(listing, states) == ["t-1", "gone-0"]


def test_partition_dir_names_round_trip():
    assert lai.partition_dir_name("my-topic", 12) == "my-topic-12"
    assert lai.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert lai.parse_partition_dir(".lock") is None and lai.parse_partition_dir("-1") is None


def test_replica_props_broker_defaults_replica_settings_then_topic_overrides():
    broker = {
        "log.retention.ms": 100,
        "log.segment.bytes": 1024,
        "replica.lag.time.max.ms": 500,
        "broker.session.timeout.ms": 9000,
        "min.insync.replicas": 2,
    }
    props = lai.replica_props(broker, {"retention.ms": "7"})
    assert props == {
        "retention.ms": "7",
        "segment.bytes": 1024,
        "replica.lag.time.max.ms": 500,
        "min.insync.replicas": 2,
    }
    assert lai.replica_props({}, None) == {}
    # every replica-level setting of the broker reaches its replicas (log.cleaner.backoff.ms did not: the
    # cleaner kept Kafka's 15 s default whatever the broker was configured with)
    every = {k: 7 for k in REPLICA_DEFAULTS}
    assert lai.replica_props(every, None) == every


def test_find_coordinator_answer_and_partition_lookup():
    ok = coordinator_answer("c", 0, None, 2, 7)
    assert ok == {
        "error_code": 0,
        "error_message": None,
        "broker_id": 2,
        "partition": 7,
        "coordinator": "c:group-coordinator-2",
    }
    assert coordinator_answer("c", 15, "no leader")["coordinator"] is None
    topic = {"partitions": {0: {"leader": 1}, "1": {"leader": -1}}}
    assert offsets_partition_state(topic, 0) == {"leader": 1}
    assert offsets_partition_state(topic, 1) == {"leader": -1}  # KV keys may be strings
    assert offsets_partition_state(topic, 2) is None and offsets_partition_state(None, 0) is None
