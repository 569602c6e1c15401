"""The wire admin APIs and topic auto-creation without Ray: KafkaApis in front of an in-memory Backend whose
admin methods run the controller's real pure logic (actors/metadata/controller_logic.py over a MetadataImage with 3
brokers), so the error codes and messages are the controller's own. Each request is encoded as a client
would send it and the response decoded from the bytes the listener writes."""

from __future__ import annotations

import asyncio
import datetime
import random
import uuid

import msgpack
from kio.index import load_response_schema
from kio.schema.api_versions.v3 import ApiVersionsRequest, ApiVersionsResponse
from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_topics.v2 import request as ct2
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.delete_records.v2 import request as dr2
from kio.schema.delete_topics.v1 import request as dt1
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.describe_cluster.v2 import request as dc2
from kio.schema.describe_configs.v1 import request as dcf1
from kio.schema.describe_configs.v4 import request as dcf4
from kio.schema.elect_leaders.v2 import request as el2
from kio.schema.incremental_alter_configs.v1 import request as iac1
from kio.schema.metadata.v3 import request as md3
from kio.schema.metadata.v12 import request as md12

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.server import auto_topic_creation as atc
from protocol.errors import KafkaError, error_response
from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis
from serve.kafka_wire.topic_ids import topic_uuid

T = datetime.timedelta
NIL = uuid.UUID(int=0)


class AdminBackend:
    """Brokers 0-2 (this is broker 0) over the controller's real logic; writes replay into its image like
    ControllerActor._write does (through msgpack, as the metadata log stores them)."""

    broker_id = 0
    cluster_id = "unit"

    def __init__(self, broker_config: dict | None = None):
        self.config = dict(broker_config or {})
        self.logic = ControllerLogic(MetadataImage(), ControllerConfig.from_props(self.config), random.Random(5))
        for b in range(3):
            self._apply(self.logic.register_broker(b, {"log_dir": f"/d/{b}"})[0])
        self.records: dict[tuple[str, int], dict] = {}  # DeleteRecords: {hw, log_start} per partition
        self.auto_created: list[str] = []

    def _apply(self, records):
        for r in records:
            self.logic.image.replay(msgpack.unpackb(msgpack.packb(r), strict_map_key=False))

    def _write(self, decide, *args):
        records, res = decide(*args)
        self._apply(records)
        return res

    @property
    def auto_create_topics_enable(self) -> bool:
        return atc.enabled(self.config)

    def broker_config(self) -> dict:
        return dict(self.config)

    async def metadata(self, fresh=False):
        img = self.logic.image
        return {
            "brokers": [b.to_dict() for b in img.brokers.values()],
            "topics": {n: t.to_dict() for n, t in img.topics.items()},
        }

    async def endpoints(self, brokers):
        return {b["id"]: ("127.0.0.1", 19092 + b["id"], None) for b in brokers if b.get("alive", True)}

    async def controller_id(self):
        return 1

    async def auto_create_topic(self, name):
        try:
            spec = atc.creatable_topic(name, self.config)
        except KafkaError as e:
            code, msg = error_response(e)
            return {"error_code": code, "error_message": msg}
        (res,) = self._write(self.logic.create_topics, [spec])
        if not res["error_code"]:
            self.auto_created.append(name)
        return res

    async def create_topics(self, topics, timeout_ms, validate_only):
        if validate_only:
            return self.logic.create_topics(topics)[1]
        return self._write(self.logic.create_topics, topics)

    async def delete_topics(self, names, timeout_ms):
        return self._write(self.logic.delete_topics, names)

    async def create_partitions(self, name, count, assignment, timeout_ms, validate_only):
        if validate_only:
            return self.logic.create_partitions(name, count, assignment)[1]
        return self._write(self.logic.create_partitions, name, count, assignment)

    async def delete_records(self, topic, partition, req):
        if self.logic.image.partition(topic, partition) is None:
            return {"error_code": 3, "error_message": "unknown"}
        st = self.records.setdefault((topic, partition), {"hw": 10, "log_start": 0})
        offset = st["hw"] if req.offset == -1 else req.offset
        if offset < 0 or offset > st["hw"]:
            return {"error_code": 1, "error_message": "out of range"}
        st["log_start"] = max(st["log_start"], offset)
        return {"error_code": 0, "low_watermark": st["log_start"]}

    async def describe_configs(self, topic):
        return self.logic.describe_configs(topic)

    async def alter_configs(self, topic, set_, delete, validate_only, replace=False):
        if validate_only:
            return self.logic.alter_configs(topic, set_, delete, replace)[1]
        return self._write(self.logic.alter_configs, topic, set_, delete, replace)

    async def elect_leaders(self, partitions, election_type):
        return self._write(self.logic.elect_leaders, partitions, election_type)


def call(backend, request):
    """``request`` through KafkaApis as bytes, the response decoded from the frame it answers."""
    frame = codec.encode_request(11, request)
    out = asyncio.run(KafkaApis(backend).handle(frame[4:]))
    assert out is not None
    cls = load_response_schema(request.__api_key__, request.__version__)
    correlation_id, resp = codec.decode_response(out[4:], cls)
    assert correlation_id == 11
    return resp


def topic(name, n=-1, rf=-1, configs=(), assignments=(), mod=ct7):
    return mod.CreatableTopic(
        name=name,
        num_partitions=n,
        replication_factor=rf,
        assignments=tuple(
            mod.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b)) for p, b in assignments
        ),
        configs=tuple(mod.CreatableTopicConfig(name=k, value=v) for k, v in configs),
    )


def create(backend, *topics, validate_only=False, timeout_ms=5000, mod=ct7):
    req = mod.CreateTopicsRequest(topics=topics, timeout=T(milliseconds=timeout_ms), validate_only=validate_only)
    return {t.name: t for t in call(backend, req).topics}


def test_api_versions_advertise_the_admin_apis():
    resp = call(AdminBackend(), ApiVersionsRequest(client_software_name="unit", client_software_version="1"))
    assert isinstance(resp, ApiVersionsResponse)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {k: got[k] for k in (19, 20, 37, 21, 32, 44, 60, 43)} == {
        19: (2, 7),
        20: (1, 6),
        37: (0, 3),
        21: (0, 2),
        32: (1, 4),
        44: (0, 1),
        60: (0, 2),
        43: (0, 2),
    }
    assert got == versions.advertised()  # SUPPORTED, with Produce listed from v0 (KAFKA-18659)


def test_create_topics_v7_answers_counts_configs_and_id():
    b = AdminBackend()
    r = create(b, topic("a", 3, 2, configs=[("retention.ms", "3600000")]))["a"]
    assert (r.error_code, r.error_message) == (0, None)
    assert (r.num_partitions, r.replication_factor) == (3, 2)
    assert r.topic_id == topic_uuid(b.logic.image.topics["a"].topic_id) != NIL
    cfgs = {c.name: (c.value, c.config_source, c.read_only) for c in r.configs}
    assert cfgs["retention.ms"] == ("3600000", 1, False)  # DYNAMIC_TOPIC_CONFIG
    assert cfgs["cleanup.policy"] == ("delete", 5, False)  # DEFAULT_CONFIG
    assert len(b.logic.image.topics["a"].partitions) == 3


def test_create_topics_errors_carry_kafka_codes_and_messages():
    b = AdminBackend()
    create(b, topic("a", 1, 1))
    rs = create(
        b,
        topic("a", 1, 1),
        topic("big", 1, 4),
        topic("zero", 0, 1),
        topic("cfg", 1, 1, configs=[("retention.ms", "soon")]),
        topic("unknown-cfg", 1, 1, configs=[("no.such.config", "1")]),
        topic("bad name!", 1, 1),
        topic("both", 2, 1, assignments=[(0, [0])]),
        topic("asg", assignments=[(0, [0, 9])]),
    )
    got = {n: (int(r.error_code), r.num_partitions) for n, r in rs.items()}
    assert got == {
        "a": (36, -1),
        "big": (38, -1),
        "zero": (37, -1),
        "cfg": (40, -1),
        "unknown-cfg": (40, -1),
        "bad name!": (17, -1),
        "both": (42, -1),
        "asg": (39, -1),
    }
    assert rs["a"].error_message == "Topic 'a' already exists."
    assert "larger than available brokers: 3" in rs["big"].error_message
    assert "no.such.config" in rs["unknown-cfg"].error_message
    assert rs["a"].configs is None and rs["a"].topic_id in (None, NIL)  # the zero uuid reads back as None
    assert set(b.logic.image.topics) == {"a"}


def test_create_topics_defaults_assignments_validate_only_and_duplicates():
    b = AdminBackend({"num.partitions": "4", "default.replication.factor": "3"})
    rs = create(
        b,
        topic("d"),
        topic("m", assignments=[(0, [2, 1]), (1, [1, 0])]),
        topic("v", 2, 1),
        validate_only=False,
    )
    assert (rs["d"].num_partitions, rs["d"].replication_factor) == (4, 3)
    assert [list(p.replicas) for p in b.logic.image.topics["m"].partitions.values()] == [[2, 1], [1, 0]]
    rs = create(b, topic("only", 2, 1), validate_only=True)
    assert (rs["only"].error_code, rs["only"].num_partitions) == (0, 2) and rs["only"].topic_id in (None, NIL)
    assert "only" not in b.logic.image.topics
    rs = create(b, topic("dup", 1, 1), topic("dup", 1, 1))
    assert int(rs["dup"].error_code) == 42 and "dup" not in b.logic.image.topics


def test_create_topics_v2_and_delete_topics_v1_by_name():
    b = AdminBackend()
    r = create(b, topic("old", 2, 1, mod=ct2), mod=ct2)["old"]
    assert r.error_code == 0 and r.error_message is None
    resp = call(b, dt1.DeleteTopicsRequest(topic_names=("old", "never"), timeout=T(seconds=5)))
    assert {x.name: int(x.error_code) for x in resp.responses} == {"old": 0, "never": 3}
    assert "old" not in b.logic.image.topics


def test_delete_topics_v6_by_id_and_name():
    b = AdminBackend()
    create(b, topic("x", 1, 1), topic("y", 1, 1))
    xid = topic_uuid(b.logic.image.topics["x"].topic_id)
    ghost = uuid.uuid4()
    states = (
        dt6.DeleteTopicState(name=None, topic_id=xid),
        dt6.DeleteTopicState(name="y", topic_id=NIL),
        dt6.DeleteTopicState(name=None, topic_id=ghost),
    )
    resp = call(b, dt6.DeleteTopicsRequest(topics=states, timeout=T(seconds=5)))
    got = [(x.name, x.topic_id, int(x.error_code)) for x in resp.responses]
    assert got[0] == ("x", xid, 0) and got[1][0::2] == ("y", 0) and got[2] == (None, ghost, 100)
    assert not b.logic.image.topics


def test_create_partitions():
    b = AdminBackend()
    create(b, topic("p", 2, 2))

    def grow(name, count, assignments=None, validate_only=False):
        asg = None if assignments is None else tuple(cp3.CreatePartitionsAssignment(broker_ids=a) for a in assignments)
        req = cp3.CreatePartitionsRequest(
            topics=(cp3.CreatePartitionsTopic(name=name, count=count, assignments=asg),),
            timeout=T(seconds=5),
            validate_only=validate_only,
        )
        (r,) = call(b, req).results
        return int(r.error_code), r.error_message

    assert grow("p", 5, validate_only=True) == (0, None) and len(b.logic.image.topics["p"].partitions) == 2
    assert grow("p", 4) == (0, None) and len(b.logic.image.topics["p"].partitions) == 4
    assert grow("p", 5, assignments=[(2, 0)]) == (0, None)
    assert list(b.logic.image.topics["p"].partitions[4].replicas) == [2, 0]
    code, msg = grow("p", 3)
    assert code == 37 and "higher than or equal to the requested 3" in msg
    assert grow("nope", 3)[0] == 3
    assert grow("p", 6, assignments=[(0,)])[0] == 39  # replication factor 1 against the topic's 2


def test_delete_records():
    b = AdminBackend()
    create(b, topic("r", 2, 1))
    parts = (
        dr2.DeleteRecordsPartition(partition_index=0, offset=4),
        dr2.DeleteRecordsPartition(partition_index=1, offset=-1),
    )
    req = dr2.DeleteRecordsRequest(
        topics=(
            dr2.DeleteRecordsTopic(name="r", partitions=parts),
            dr2.DeleteRecordsTopic(name="r2", partitions=(dr2.DeleteRecordsPartition(partition_index=0, offset=1),)),
        ),
        timeout=T(seconds=5),
    )
    resp = call(b, req)
    got = {(t.name, p.partition_index): (p.low_watermark, int(p.error_code)) for t in resp.topics for p in t.partitions}
    assert got == {("r", 0): (4, 0), ("r", 1): (10, 0), ("r2", 0): (-1, 3)}
    bad = dr2.DeleteRecordsTopic(name="r", partitions=(dr2.DeleteRecordsPartition(partition_index=0, offset=11),))
    (t,) = call(b, dr2.DeleteRecordsRequest(topics=(bad,), timeout=T(seconds=5))).topics
    assert int(t.partitions[0].error_code) == 1  # OFFSET_OUT_OF_RANGE: above the high watermark


def describe(b, *resources, synonyms=True, docs=True, mod=dcf4):
    res = tuple(
        mod.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources
    )
    if mod is dcf4:
        req = mod.DescribeConfigsRequest(resources=res, include_synonyms=synonyms, include_documentation=docs)
    else:
        req = mod.DescribeConfigsRequest(resources=res, include_synonyms=synonyms)
    return call(b, req).results


def test_describe_configs_topic_sources_synonyms_types():
    b = AdminBackend({"log.retention.bytes": "1000"})
    create(b, topic("c", 1, 1, configs=[("retention.ms", "60000")]))
    (r,) = describe(b, (2, "c", None))
    assert r.error_code == 0 and r.resource_name == "c"
    cfg = {c.name: c for c in r.configs}
    assert set(cfg) >= {"retention.ms", "cleanup.policy", "min.insync.replicas", "max.message.bytes"}
    ms = cfg["retention.ms"]
    assert (ms.value, ms.config_source, ms.read_only, ms.is_sensitive, ms.config_type) == ("60000", 1, False, False, 5)
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("retention.ms", "60000", 1),
        ("log.retention.ms", "604800000", 5),
    ]
    assert ms.documentation and "segment" in ms.documentation
    rb = cfg["retention.bytes"]  # the broker's log.retention.bytes is what the replicas apply
    assert (rb.value, rb.config_source) == ("1000", 4)
    assert [(s.name, s.source) for s in rb.synonyms] == [("log.retention.bytes", 4), ("log.retention.bytes", 5)]
    assert (cfg["cleanup.policy"].value, cfg["cleanup.policy"].config_source, cfg["cleanup.policy"].config_type) == (
        "delete",
        5,
        7,
    )
    (only,) = describe(b, (2, "c", ("retention.ms", "no.such")), synonyms=False, docs=False)
    assert [(c.name, c.synonyms, c.documentation) for c in only.configs] == [("retention.ms", (), None)]


def test_describe_configs_broker_and_errors_v1():
    b = AdminBackend({"num.partitions": "3", "listeners": "PLAINTEXT://127.0.0.1:0"})
    mine, defaults, other, missing, group = describe(
        b, (4, "0", None), (4, "", None), (4, "2", None), (2, "nope", None), (32, "g", None), mod=dcf1
    )
    cfg = {c.name: c for c in mine.configs}
    assert (cfg["num.partitions"].value, cfg["num.partitions"].config_source, cfg["num.partitions"].read_only) == (
        "3",
        4,
        True,
    )
    assert [(s.value, s.source) for s in cfg["num.partitions"].synonyms] == [("3", 4), ("1", 5)]
    assert (cfg["auto.create.topics.enable"].value, cfg["auto.create.topics.enable"].config_source) == ("true", 5)
    assert cfg["listeners"].value == "PLAINTEXT://127.0.0.1:0"
    assert {c.name: c.value for c in defaults.configs}["num.partitions"] == "1"
    assert int(other.error_code) == 42 and "expected 0 but received 2" in other.error_message
    assert int(missing.error_code) == 3 and missing.configs == ()
    assert int(group.error_code) == 42


def alter(b, *resources, validate_only=False):
    res = tuple(
        iac1.AlterConfigsResource(
            resource_type=t,
            resource_name=n,
            configs=tuple(iac1.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops),
        )
        for t, n, ops in resources
    )
    return [
        (int(r.error_code), r.error_message)
        for r in call(b, iac1.IncrementalAlterConfigsRequest(resources=res, validate_only=validate_only)).responses
    ]


def test_incremental_alter_configs_set_delete_append_subtract():
    b = AdminBackend()
    create(b, topic("i", 1, 1))
    overrides = lambda: dict(b.logic.image.topics["i"].configs)  # noqa: E731
    assert alter(b, (2, "i", [("retention.ms", 0, "1000"), ("max.message.bytes", 0, "2000")])) == [(0, None)]
    assert overrides() == {"retention.ms": "1000", "max.message.bytes": "2000"}
    (r,) = describe(b, (2, "i", ("retention.ms",)))
    assert (r.configs[0].value, r.configs[0].config_source) == ("1000", 1)
    assert alter(b, (2, "i", [("max.message.bytes", 1, None)])) == [(0, None)]
    assert overrides() == {"retention.ms": "1000"}
    assert alter(b, (2, "i", [("cleanup.policy", 2, "compact")])) == [(0, None)]
    assert overrides()["cleanup.policy"] == "delete,compact"
    assert alter(b, (2, "i", [("cleanup.policy", 3, "delete")])) == [(0, None)]
    assert overrides()["cleanup.policy"] == "compact"
    assert alter(b, (2, "i", [("retention.ms", 0, "5")]), validate_only=True) == [(0, None)]
    assert overrides()["retention.ms"] == "1000"
    errs = alter(
        b,
        (2, "i", [("retention.ms", 2, "5")]),
        (2, "nope", [("retention.ms", 0, "5")]),
        (4, "0", [("num.partitions", 0, "5")]),
    )
    assert [c for c, _ in errs] == [40, 3, 40]
    assert "append is not allowed for config key: retention.ms" in errs[0][1]
    code, msg = alter(b, (2, "i", [("no.such", 0, "1")]))[0]
    assert code == 40 and "no.such" in msg
    assert alter(b, (2, "i", [("retention.ms", 0, "1"), ("retention.ms", 1, None)]))[0][0] == 42
    assert overrides() == {"retention.ms": "1000", "cleanup.policy": "compact"}


def test_describe_cluster_v2():
    b = AdminBackend()
    b._apply(b.logic.fence_broker(2))
    req = dc2.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False
    )
    resp = call(b, req)
    assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, "unit", 1)
    assert [(x.broker_id, x.host, x.port, x.is_fenced) for x in resp.brokers] == [
        (0, "127.0.0.1", 19092, False),
        (1, "127.0.0.1", 19093, False),
    ]
    req = dc2.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
    )
    assert [(x.broker_id, x.is_fenced) for x in call(b, req).brokers] == [(0, False), (1, False), (2, True)]
    req = dc2.DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=False
    )
    assert int(call(b, req).error_code) == 114  # MISMATCHED_ENDPOINT_TYPE: this is a broker endpoint


def test_elect_leaders_preferred_and_unclean():
    b = AdminBackend()
    create(b, topic("e", assignments=[(0, [1, 0]), (1, [2, 0])]))
    b._apply(b.logic.fence_broker(1))  # partition 0's leader moves to 0; partition 1 keeps leader 2
    assert b.logic.image.partition("e", 0).leader == 0
    b._apply(b.logic.register_broker(1, {"log_dir": "/d/1"})[0])
    b._apply(
        b.logic.alter_partition(
            "e",
            0,
            0,
            b.logic.image.partition("e", 0).leader_epoch,
            [0, 1],
            b.logic.image.partition("e", 0).partition_epoch,
        )[0]
    )

    def elect(kind, parts):
        tps = None if parts is None else tuple(el2.TopicPartitions(topic=t, partitions=ps) for t, ps in parts)
        resp = call(b, el2.ElectLeadersRequest(election_type=kind, topic_partitions=tps, timeout=T(seconds=5)))
        assert resp.error_code == 0
        return {
            (r.topic, p.partition_id): int(p.error_code)
            for r in resp.replica_election_results
            for p in r.partition_result
        }

    assert elect(0, [("e", (1, 7))]) == {("e", 1): 84, ("e", 7): 3}  # ELECTION_NOT_NEEDED, unknown
    assert elect(0, None) == {("e", 0): 0}  # every partition: only those elected are answered
    assert b.logic.image.partition("e", 0).leader == 1
    assert elect(1, [("e", (0,))]) == {("e", 0): 84}  # unclean: it has a leader


def test_metadata_auto_creates_then_answers_the_topic():
    b = AdminBackend({"num.partitions": "2"})

    def ask(*names, allow=True):
        tps = tuple(md12.MetadataRequestTopic(topic_id=NIL, name=n) for n in names)
        req = md12.MetadataRequest(
            topics=tps, allow_auto_topic_creation=allow, include_topic_authorized_operations=False
        )
        return {t.name: t for t in call(b, req).topics}

    first = ask("fresh", "__consumer_offsets", "bad name!")
    assert {n: int(t.error_code) for n, t in first.items()} == {"fresh": 5, "__consumer_offsets": 3, "bad name!": 17}
    assert b.auto_created == ["fresh"] and len(b.logic.image.topics["fresh"].partitions) == 2
    again = ask("fresh")["fresh"]
    assert again.error_code == 0 and [p.partition_index for p in again.partitions] == [0, 1]
    assert int(ask("other", allow=False)["other"].error_code) == 3 and "other" not in b.logic.image.topics
    v3 = call(b, md3.MetadataRequest(topics=(md3.MetadataRequestTopic(name="v3topic"),)))  # v0-3 always ask
    assert int(v3.topics[0].error_code) == 5 and "v3topic" in b.logic.image.topics


class CachingBackend(AdminBackend):
    """A broker whose metadata cache lags the controller (its UpdateMetadata not arrived yet): ``metadata()``
    answers the cache, ``metadata(fresh=True)`` reads what the controller committed (KV) into it."""

    def __init__(self, broker_config: dict | None = None):
        super().__init__(broker_config)
        self.cache = None
        self.fresh_reads = 0

    async def metadata(self, fresh=False):
        if self.cache is None or fresh:
            self.fresh_reads += fresh
            self.cache = await super().metadata()
        return self.cache


def test_a_topic_the_cache_lacks_is_looked_up_before_it_is_called_unknown():
    """Item 7 of issue 45: the Metadata after an auto-creation lists the topic although this broker's cache
    has not heard of it; a known topic does not cost a lookup."""
    b = CachingBackend()

    def ask(name, allow):
        req = md12.MetadataRequest(
            topics=(md12.MetadataRequestTopic(topic_id=NIL, name=name),),
            allow_auto_topic_creation=allow,
            include_topic_authorized_operations=False,
        )
        (t,) = call(b, req).topics
        return t

    assert int(ask("late", allow=True).error_code) == 5 and b.auto_created == ["late"]
    reads = b.fresh_reads
    listed = ask("late", allow=False)  # the cache still lacks it: one lookup, and it is listed
    assert int(listed.error_code) == 0 and len(listed.partitions) == 1 and b.auto_created == ["late"]
    assert b.fresh_reads == reads + 1
    assert int(ask("late", allow=False).error_code) == 0 and b.fresh_reads == reads + 1  # cached now
    assert int(ask("nowhere", allow=False).error_code) == 3


def test_metadata_auto_creation_off_or_over_replicated_refused():
    off = AdminBackend({"auto.create.topics.enable": "false"})
    req = md12.MetadataRequest(
        topics=(md12.MetadataRequestTopic(topic_id=NIL, name="t"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    assert int(call(off, req).topics[0].error_code) == 3 and not off.logic.image.topics
    over = AdminBackend({"default.replication.factor": "4"})  # capped like Kafka: 3 live brokers
    assert int(call(over, req).topics[0].error_code) == 38 and not over.logic.image.topics


def test_elect_leaders_unclean_elects_a_live_out_of_sync_replica():
    b = AdminBackend()
    create(b, topic("u", assignments=[(0, [1, 2])]))
    b._apply(b.logic.fence_broker(2))  # ISR [1]
    b._apply(b.logic.fence_broker(1))  # no leader; 1 stays the last ISR member
    assert b.logic.image.partition("u", 0).leader == -1
    b._apply(b.logic.register_broker(2, {"log_dir": "/d/2"})[0])  # alive again, not in the ISR
    assert b.logic.image.partition("u", 0).leader == -1

    def elect(kind):
        tps = (el2.TopicPartitions(topic="u", partitions=(0,)),)
        resp = call(b, el2.ElectLeadersRequest(election_type=kind, topic_partitions=tps, timeout=T(seconds=5)))
        (r,) = resp.replica_election_results
        return int(r.partition_result[0].error_code), r.partition_result[0].error_message

    code, msg = elect(0)
    assert code == 80 and "not alive or not in the ISR" in msg  # PREFERRED_LEADER_NOT_AVAILABLE
    assert elect(1) == (0, None)
    assert b.logic.image.partition("u", 0).leader == 2
