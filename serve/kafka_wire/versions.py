"""The API versions this listener serves: advertised by ApiVersions exactly as handled (pure).

Floors are Kafka 4's (KIP-896; kio's schemas are generated from Kafka 4's and start there), and ApiVersions
lists Produce from 0 as Kafka 4 does (``advertised``); caps are where a version would need a feature rafka does
not serve yet (Produce 12 = transaction version 2, 13 = topic ids; ListOffsets 8+ = tiered storage offsets;
DescribeGroups 6 = GROUP_ID_NOT_FOUND); docs/clients.md "Request versions" lists them. Served and advertised:
FindCoordinator, the consumer-group APIs (handlers/groups.py), the transaction APIs (transaction version 2 is
not: EndTxn and TxnOffsetCommit stop at 4) and the admin APIs (handlers/admin.py, handlers/configs.py); nothing
is advertised before it is served: librdkafka decides features from this list.
"""

from __future__ import annotations

API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 18, 3, 0, 1, 2, 23
INIT_PRODUCER_ID, FIND_COORDINATOR = 22, 10
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DELETE_RECORDS = 19, 20, 37, 21
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER, ELECT_LEADERS = 32, 44, 60, 43
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
ALTER_CONFIGS = 33
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH = 11, 14, 12, 13, 8, 9
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 16, 15, 42, 47

# api key -> (min version, max version)
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),  # ApiVersions lists 0..11 (ADVERTISED_MIN); 0-2 are refused (KIP-896)
    FETCH: (4, 17),  # 17 adds only a follower's directory id (KIP-853); 18 is a follower's high watermark
    LIST_OFFSETS: (1, 7),  # 8+ add the tiered-storage timestamps -4/-5/-6, not served
    METADATA: (0, 13),  # 13 adds a top-level error code (KIP-1102), always 0 here
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    INIT_PRODUCER_ID: (0, 5),  # idempotent and transactional (v5 knows TRANSACTION_ABORTABLE; 6 is KIP-939)
    FIND_COORDINATOR: (0, 6),  # key types 0 (group) and 1 (transaction); v4+ batches keys (KIP-699)
    API_VERSIONS: (0, 4),  # any other version is answered in v0 with UNSUPPORTED_VERSION (KIP-511)
    # transactions (handlers/txn.py); transaction version 2 (EndTxn 5, TxnOffsetCommit 5) is not served
    ADD_PARTITIONS_TO_TXN: (0, 3),  # 4+ batch transactional ids (broker-to-broker, KIP-890)
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 4),
    TXN_OFFSET_COMMIT: (0, 4),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 0),  # v1's duration filter is not served
    CREATE_TOPICS: (2, 7),  # admin APIs (handlers/admin.py, handlers/configs.py), served by the controller
    DELETE_TOPICS: (1, 6),  # v6: by topic id too
    CREATE_PARTITIONS: (0, 3),
    DELETE_RECORDS: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),  # topic and broker resources
    INCREMENTAL_ALTER_CONFIGS: (0, 1),  # topics: SET, DELETE, APPEND/SUBTRACT on cleanup.policy
    ALTER_CONFIGS: (0, 2),  # legacy, replace-all (handlers/configs.py)
    ALTER_REPLICA_LOG_DIRS: (1, 2),  # handlers/log_dirs.py: a replica moved to another of its broker's log.dirs
    DESCRIBE_LOG_DIRS: (1, 4),  # handlers/log_dirs.py; v0 was removed in Kafka 4.0, v5 adds KIP-1066 cordoning
    DESCRIBE_CLUSTER: (0, 2),
    ELECT_LEADERS: (0, 2),  # preferred; unclean from v1
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # KIP-455; v1 allow_replication_factor_change (KIP-860)
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    JOIN_GROUP: (0, 9),  # Kafka 4 keeps v0-1 (v0: rebalance timeout = session timeout); v4+ MEMBER_ID_REQUIRED
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),  # v3+ batched members (KIP-345)
    OFFSET_COMMIT: (2, 9),  # v10+ address topics by id
    OFFSET_FETCH: (1, 9),  # v8+ several groups (KIP-709); v10+ topic ids
    LIST_GROUPS: (0, 5),
    DESCRIBE_GROUPS: (0, 5),  # v6 is for KIP-848 groups
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
}


# Kafka 4's one deviation (KAFKA-18659, ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION): ApiVersions lists
# Produce from v0 although v0-2 are refused: librdkafka enables gzip/snappy/lz4/zstd only if Produce v0 is listed
# (librdkafka#4956: kcat's librdkafka 2.0.2 sends gzip batches uncompressed without it; 2.16 is fixed)
ADVERTISED_MIN: dict[int, int] = {PRODUCE: 0}


def advertised() -> dict[int, tuple[int, int]]:
    """What ApiVersions lists: SUPPORTED, with ADVERTISED_MIN's floors."""
    return {k: (ADVERTISED_MIN.get(k, lo), hi) for k, (lo, hi) in SUPPORTED.items()}


def supports(api_key: int, version: int) -> bool:
    rng = SUPPORTED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]
