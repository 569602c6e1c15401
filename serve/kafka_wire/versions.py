"""The API versions this listener serves: advertised by ApiVersions exactly as handled (pure).

Floors follow Kafka 4.0 (KIP-896) where kio has them; caps are where a version would need a feature
rafka does not serve yet (Produce 12 = transaction version 2, 13 = topic ids; ListOffsets 8+ = tiered
storage offsets; Metadata 13 adds nothing clients need). Served and advertised: FindCoordinator, the
consumer-group APIs (handlers/groups.py), the transaction APIs (transaction version 2 is not: EndTxn and
TxnOffsetCommit stop at 4) and the admin APIs (handlers/admin.py, handlers/configs.py); nothing is
advertised before it is served: librdkafka decides features from this list.
"""

from __future__ import annotations

API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 18, 3, 0, 1, 2, 23
INIT_PRODUCER_ID, FIND_COORDINATOR = 22, 10
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DELETE_RECORDS = 19, 20, 37, 21
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER, ELECT_LEADERS = 32, 44, 60, 43
JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH = 11, 14, 12, 13, 8, 9
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 16, 15, 42, 47

# api key -> (min version, max version)
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    INIT_PRODUCER_ID: (0, 5),  # idempotent and transactional (v5 knows TRANSACTION_ABORTABLE; 6 is KIP-939)
    FIND_COORDINATOR: (0, 6),  # key types 0 (group) and 1 (transaction); v4+ batches keys (KIP-699)
    API_VERSIONS: (0, 3),
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
    DESCRIBE_CLUSTER: (0, 2),
    ELECT_LEADERS: (0, 2),  # preferred; unclean from v1
    JOIN_GROUP: (2, 9),  # v0-1 gone in Kafka 4.0 (KIP-896); v4+ MEMBER_ID_REQUIRED once, v9 skip_assignment
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


def supports(api_key: int, version: int) -> bool:
    rng = SUPPORTED.get(api_key)
    return rng is not None and rng[0] <= version <= rng[1]
