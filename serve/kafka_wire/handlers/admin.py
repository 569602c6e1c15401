"""Admin APIs, served by the controller through the broker's link (``Backend`` admin methods):

- CreateTopics (19, v2-7): ``num_partitions`` / ``replication_factor`` -1 take the broker defaults
  (``num.partitions``, ``default.replication.factor``); explicit ``assignments`` (then both must be -1,
  else INVALID_REQUEST); ``configs`` (INVALID_CONFIG on an unknown name or bad value); ``validate_only``
  answers without creating. The controller waits up to ``timeout`` for every partition's leader (Kafka's
  DelayedCreateTopics; REQUEST_TIMED_OUT if they do not come, the topic still exists); ``timeout`` <= 0
  answers at once. v5+ answers the partition count, replication factor and every config with its source;
  v7 the topic id. Errors: TOPIC_ALREADY_EXISTS 36, INVALID_PARTITIONS 37, INVALID_REPLICATION_FACTOR 38,
  INVALID_REPLICA_ASSIGNMENT 39, INVALID_CONFIG 40, INVALID_TOPIC_EXCEPTION 17, each with its message.
- DeleteTopics (20, v1-6): by name; v6 by name or topic id (an unknown id: UNKNOWN_TOPIC_ID 100).
- CreatePartitions (37, v0-3): grow a topic to ``count`` partitions, optionally with assignments.
- DeleteRecords (21, v0-2): each partition's leader replica moves its log start offset (``offset`` -1:
  the high watermark) and answers the new low watermark; followers follow on their next fetch.
- DescribeCluster (60, v0-2): the live brokers with their advertised listeners (v2: fenced ones on
  request) and the broker hosting the controller.
- ElectLeaders (43, v0-2): preferred (0) or unclean (1, v1+) election by the controller; null partitions
  means every partition, answering only those an election was tried for (not ELECTION_NOT_NEEDED).
- AlterPartitionReassignments (45, v0-1) / ListPartitionReassignments (46, v0): KIP-455 reassignments on the
  controller (a null replicas list cancels; null topics lists every one in progress); v1 KIP-860.

Controller unavailability answers NOT_CONTROLLER (41): the clients refresh metadata and retry.
"""

from __future__ import annotations

import asyncio
import uuid

from actors.metadata.topic_configs import effective_topic_configs
from protocol import errors as E
from protocol.messages import DeleteRecordsRequest
from serve.kafka_wire import responses
from serve.kafka_wire.handlers import configs as cfg
from serve.kafka_wire.topic_ids import topic_uuid

INVALID_REQUEST, UNKNOWN_TOPIC_ID, ELECTION_NOT_NEEDED, MISMATCHED_ENDPOINT_TYPE = 42, 100, 84, 114
REQUEST_TIMED_OUT = E.RequestTimedOutError.code
NIL = uuid.UUID(int=0)
NOT_REQUESTED = -(2**31)


def _ms(timeout) -> int:
    return int(timeout.total_seconds() * 1000)


def _spec(t) -> dict | tuple[int, str]:
    """The controller's create_topics entry of one CreatableTopic, or (error code, message)."""
    spec: dict = {
        "name": t.name,
        "num_partitions": int(t.num_partitions),
        "replication_factor": int(t.replication_factor),
        "configs": {c.name: c.value for c in t.configs},
    }
    if t.assignments:
        if spec["num_partitions"] != -1 or spec["replication_factor"] != -1:
            return INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set."
        spec["replica_assignment"] = {int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments}
    if any(v is None for v in spec["configs"].values()):
        return cfg.INVALID_CONFIG, "Null value not supported for topic configs: " + ", ".join(
            sorted(k for k, v in spec["configs"].items() if v is None)
        )
    return spec


async def create_topics(backend, request, version: int):
    mod = responses.response_module(19, version)
    timeout_ms = _ms(request.timeout)
    names = [t.name for t in request.topics]
    answers: dict[int, dict] = {}
    specs: list[tuple[int, dict]] = []
    for i, t in enumerate(request.topics):
        s = _spec(t)
        if names.count(t.name) > 1:
            s = (INVALID_REQUEST, f"Create topics request from client has duplicate topic name {t.name!r}.")
        if isinstance(s, tuple):
            answers[i] = {"name": t.name, "error_code": s[0], "error_message": s[1]}
        else:
            specs.append((i, s))
    if specs:
        results = await backend.create_topics([s for _, s in specs], max(0, timeout_ms), bool(request.validate_only))
        for (i, s), r in zip(specs, results):
            if r.get("error_code") == REQUEST_TIMED_OUT and timeout_ms <= 0:  # asked not to wait for leaders
                r = {**r, "error_code": 0, "error_message": None}
            answers[i] = {**r, "spec": s}
    out = []
    broker_config = backend.broker_config() if version >= 5 else {}
    for i, t in enumerate(request.topics):
        a = answers[i]
        ok = not a.get("error_code")
        entries = None
        if version >= 5 and ok:
            overrides = a["spec"]["configs"]
            effective = effective_topic_configs(overrides)
            entries = tuple(
                responses.make(
                    mod,
                    "CreatableTopicConfigs",
                    name=e["name"],
                    value=e["value"],
                    read_only=e["read_only"],
                    config_source=e["source"],
                    is_sensitive=False,
                )
                for e in cfg.topic_entries(effective, overrides, broker_config)
            )
        tid = a.get("topic_id") if ok and not request.validate_only else None
        out.append(
            responses.make(
                mod,
                "CreatableTopicResult",
                name=t.name,
                topic_id=topic_uuid(tid) if tid else NIL,
                error_code=responses.error_code(a.get("error_code", 0)),
                error_message=a.get("error_message"),
                topic_config_error_code=0,
                num_partitions=int(a.get("num_partitions") or -1) if ok else -1,
                replication_factor=int(a.get("replication_factor") or -1) if ok else -1,
                configs=entries,
            )
        )
    return responses.make(mod, "CreateTopicsResponse", throttle_time=responses.ZERO, topics=tuple(out))


async def delete_topics(backend, request, version: int):
    mod = responses.response_module(20, version)
    if version >= 6:
        asked = [(t.name, t.topic_id) for t in request.topics]
    else:
        asked = [(n, None) for n in request.topic_names]
    md = await backend.metadata() if any(tid not in (None, NIL) for _, tid in asked) else {"topics": {}}
    by_id = {topic_uuid(t["topic_id"]): n for n, t in md["topics"].items()}
    answers: dict[int, dict] = {}
    names: list[tuple[int, str]] = []
    for i, (name, tid) in enumerate(asked):
        if name is None and tid not in (None, NIL):
            name = by_id.get(tid)
            if name is None:
                answers[i] = {"name": None, "topic_id": tid, "error_code": UNKNOWN_TOPIC_ID, "error_message": None}
                continue
        if name is None:
            answers[i] = {"error_code": INVALID_REQUEST, "error_message": "Neither topic name nor id was given."}
            continue
        names.append((i, name))
    if names:
        results = await backend.delete_topics([n for _, n in names], _ms(request.timeout))
        for (i, name), r in zip(names, results):
            answers[i] = {**r, "name": name}
    out = tuple(
        responses.make(
            mod,
            "DeletableTopicResult",
            name=a.get("name"),
            topic_id=a["topic_id"]
            if isinstance(a.get("topic_id"), uuid.UUID)
            else (topic_uuid(a["topic_id"]) if a.get("topic_id") else NIL),
            error_code=responses.error_code(a.get("error_code", 0)),
            error_message=a.get("error_message"),
        )
        for a in (answers[i] for i in range(len(asked)))
    )
    return responses.make(mod, "DeleteTopicsResponse", throttle_time=responses.ZERO, responses=out)


async def create_partitions(backend, request, version: int):
    mod = responses.response_module(37, version)
    names = [t.name for t in request.topics]

    async def one(t) -> dict:
        if names.count(t.name) > 1:
            return {"error_code": INVALID_REQUEST, "error_message": f"Duplicate topic {t.name!r} in the request."}
        assignment = [[int(b) for b in a.broker_ids] for a in t.assignments] if t.assignments else None
        return await backend.create_partitions(
            t.name, int(t.count), assignment, max(0, _ms(request.timeout)), bool(request.validate_only)
        )

    results = await asyncio.gather(*(one(t) for t in request.topics))
    out = tuple(
        responses.make(
            mod,
            "CreatePartitionsTopicResult",
            name=t.name,
            error_code=responses.error_code(r.get("error_code", 0)),
            error_message=r.get("error_message"),
        )
        for t, r in zip(request.topics, results)
    )
    return responses.make(mod, "CreatePartitionsResponse", throttle_time=responses.ZERO, results=out)


async def delete_records(backend, request, version: int):
    mod = responses.response_module(21, version)
    calls, where = [], []
    for t in request.topics:
        for p in t.partitions:
            calls.append(backend.delete_records(t.name, int(p.partition_index), DeleteRecordsRequest(int(p.offset))))
            where.append((t.name, int(p.partition_index)))
    results = await asyncio.gather(*calls)
    per_topic = responses.by_topic(
        (
            name,
            responses.make(
                mod,
                "DeleteRecordsPartitionResult",
                partition_index=p,
                low_watermark=r.get("low_watermark", -1),
                error_code=responses.error_code(r.get("error_code", 0)),
            ),
        )
        for (name, p), r in zip(where, results)
    )
    topics = tuple(
        responses.make(mod, "DeleteRecordsTopicResult", name=n, partitions=ps) for n, ps in per_topic.items()
    )
    return responses.make(mod, "DeleteRecordsResponse", throttle_time=responses.ZERO, topics=topics)


async def describe_cluster(backend, request, version: int):
    mod = responses.response_module(60, version)
    endpoint_type = int(getattr(request, "endpoint_type", 1))
    if endpoint_type != 1:
        return responses.make(
            mod,
            "DescribeClusterResponse",
            throttle_time=responses.ZERO,
            error_code=responses.error_code(MISMATCHED_ENDPOINT_TYPE),
            error_message=f"The request was sent to a broker endpoint, asking for endpoint type {endpoint_type}",
            endpoint_type=endpoint_type,
            cluster_id=backend.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NOT_REQUESTED,
        )
    md = await backend.metadata()
    endpoints, controller = await asyncio.gather(backend.endpoints(md["brokers"]), backend.controller_id())
    fenced_too = bool(getattr(request, "include_fenced_brokers", False))
    brokers = []
    for b in md["brokers"]:
        alive = b.get("alive", True)
        ep = endpoints.get(b["id"])
        if (not alive and not fenced_too) or (alive and ep is None):
            continue
        host, port, rack = ep if ep is not None else ("", -1, b.get("rack"))
        brokers.append(
            responses.make(
                mod, "DescribeClusterBroker", broker_id=b["id"], host=host, port=port, rack=rack, is_fenced=not alive
            )
        )
    return responses.make(
        mod,
        "DescribeClusterResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(0),
        error_message=None,
        endpoint_type=1,
        cluster_id=backend.cluster_id,
        controller_id=controller if controller in endpoints else backend.broker_id,
        brokers=tuple(brokers),
        cluster_authorized_operations=NOT_REQUESTED,
    )


async def elect_leaders(backend, request, version: int):
    mod = responses.response_module(43, version)
    election_type = int(getattr(request, "election_type", 0))
    every = request.topic_partitions is None
    parts = None if every else [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    results = await backend.elect_leaders(parts, election_type)
    if every:
        results = [r for r in results if r.get("error_code") != ELECTION_NOT_NEEDED]
    per_topic = responses.by_topic(
        (
            r["topic"],
            responses.make(
                mod,
                "PartitionResult",
                partition_id=r["partition"],
                error_code=responses.error_code(r.get("error_code", 0)),
                error_message=r.get("error_message"),
            ),
        )
        for r in results
    )
    out = tuple(
        responses.make(mod, "ReplicaElectionResult", topic=t, partition_result=ps) for t, ps in per_topic.items()
    )
    return responses.make(
        mod,
        "ElectLeadersResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(0),
        replica_election_results=out,
    )


def _timeout_ms(request) -> int:
    """The request's ``timeout_ms``: the controller's time to answer; a non-positive one takes Kafka's 60 s default."""
    ms = _ms(request.timeout)
    return ms if ms > 0 else 60_000


async def alter_partition_reassignments(backend, request, version: int):
    """KIP-455 on the controller: each partition's target replicas, or null to cancel (back to the original
    replicas); v1's ``allow_replication_factor_change`` false refuses a target of another length. Per-partition
    errors are the controller's (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
    INVALID_REPLICATION_FACTOR); a controller that does not answer within ``timeout_ms`` gives its error both at the
    top level and to every partition (Kafka's AlterPartitionReassignmentsRequest.getErrorResponse)."""
    mod = responses.response_module(45, version)
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    asked = [
        {
            "topic": t.name,
            "partition": int(p.partition_index),
            "replicas": None if p.replicas is None else [int(b) for b in p.replicas],
            "allow_replication_factor_change": allow_rf_change,
        }
        for t in request.topics
        for p in t.partitions
    ]
    top: dict = {"error_code": 0, "error_message": None}
    results: list[dict] = []
    if asked:
        res = await backend.alter_partition_reassignments(asked, _timeout_ms(request))
        if isinstance(res, dict):  # the controller did not answer
            top = {"error_code": res.get("error_code", 0), "error_message": res.get("error_message")}
            results = [{**a, **top} for a in asked]
        else:
            results = res
    per_topic = responses.by_topic(
        (
            a["topic"],
            responses.make(
                mod,
                "ReassignablePartitionResponse",
                partition_index=a["partition"],
                error_code=responses.error_code(r.get("error_code", 0)),
                error_message=r.get("error_message"),
            ),
        )
        for a, r in zip(asked, results)
    )
    return responses.make(
        mod,
        "AlterPartitionReassignmentsResponse",
        throttle_time=responses.ZERO,
        allow_replication_factor_change=allow_rf_change,
        error_code=responses.error_code(top["error_code"]),
        error_message=top["error_message"],
        responses=tuple(
            responses.make(mod, "ReassignableTopicResponse", name=n, partitions=ps) for n, ps in per_topic.items()
        ),
    )


async def list_partition_reassignments(backend, request, version: int):
    """The reassignments in progress: every one with null ``topics``, else those of the named partitions (a
    topic or partition that does not exist, or is not being reassigned, is left out, as Kafka's
    ReplicationControlManager does). Each lists its replicas, adding and removing replicas."""
    mod = responses.response_module(46, version)
    res = await backend.list_partition_reassignments(_timeout_ms(request))
    if isinstance(res, dict):  # the controller did not answer
        return responses.make(
            mod,
            "ListPartitionReassignmentsResponse",
            throttle_time=responses.ZERO,
            error_code=responses.error_code(res.get("error_code", 0)),
            error_message=res.get("error_message"),
            topics=(),
        )
    wanted = None if request.topics is None else {(t.name, int(p)) for t in request.topics for p in t.partition_indexes}
    per_topic = responses.by_topic(
        (
            r["topic"],
            responses.make(
                mod,
                "OngoingPartitionReassignment",
                partition_index=r["partition"],
                replicas=tuple(r["replicas"]),
                adding_replicas=tuple(r["adding"]),
                removing_replicas=tuple(r["removing"]),
            ),
        )
        for r in res
        if wanted is None or (r["topic"], r["partition"]) in wanted
    )
    return responses.make(
        mod,
        "ListPartitionReassignmentsResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(0),
        error_message=None,
        topics=tuple(
            responses.make(mod, "OngoingTopicReassignment", name=n, partitions=ps) for n, ps in per_topic.items()
        ),
    )
