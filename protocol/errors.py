"""Kafka's error codes as Python exceptions: a leaf module any layer may import (no Ray, no I/O).

Every error class carries, statically (a type checker sees ``NotLeaderOrFollowerError.code``), Kafka's
numeric ``code``, its protocol ``name`` (``NOT_LEADER_OR_FOLLOWER``), whether a client may try again
(``retriable``), whether the client's metadata is stale after it (``invalid_metadata``: Kafka's
``InvalidMetadataException`` family, aiokafka's flag of the same name) and a default ``message``
(Kafka's ``org.apache.kafka.common.protocol.Errors``). ``for_code(code)`` maps a wire code back to its
class; ``error_response(exc)`` / ``raise_for_code(code, message)`` convert between exceptions and the
``(error_code, error_message)`` pairs that travel in responses; ``refresh_metadata(code)`` says whether a
client re-reads metadata (and drops its cached leader handle) after a response carrying ``code``.

Exceptions pickle by their single ``message`` argument, so they cross Ray calls intact. The base class is
protocol/kafka_error.py; the group, coordinator and transaction errors are in protocol/errors_groups.py.
"""

from __future__ import annotations

from protocol.errors_groups import (  # noqa: F401 (re-exported: one module to import every Kafka error from)
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    DuplicateSequenceNumberError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidCommitOffsetSizeError,
    InvalidGroupIdError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidSessionTimeoutError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
    UnknownMemberIdError,
    UnknownProducerIdError,
    UnreleasedInstanceIdError,
    UnstableOffsetCommitError,
    UnsupportedAssignorError,
)
from protocol.kafka_error import KafkaError


class NoError(KafkaError):
    code, name, retriable = 0, "NONE", False
    default_message = ""


class UnknownServerError(KafkaError):
    code, name, retriable = -1, "UNKNOWN_SERVER_ERROR", False
    default_message = "The server experienced an unexpected error when processing the request."


class OffsetOutOfRangeError(KafkaError):
    code, name, retriable = 1, "OFFSET_OUT_OF_RANGE", False
    default_message = "The requested offset is not within the range of offsets maintained by the server."


class CorruptMessageError(KafkaError):
    code, name, retriable = 2, "CORRUPT_MESSAGE", True
    default_message = (
        "This message has failed its CRC checksum, exceeds the valid size, has a null key for a "
        "compacted topic, or is otherwise corrupt."
    )


class UnknownTopicOrPartitionError(KafkaError):
    code, name, retriable, invalid_metadata = 3, "UNKNOWN_TOPIC_OR_PARTITION", True, True
    default_message = "This server does not host this topic-partition."


class InvalidFetchSizeError(KafkaError):
    code, name, retriable = 4, "INVALID_FETCH_SIZE", False
    default_message = "The requested fetch size is invalid."


class LeaderNotAvailableError(KafkaError):
    code, name, retriable, invalid_metadata = 5, "LEADER_NOT_AVAILABLE", True, True
    default_message = "There is no leader for this topic-partition as we are in the middle of a leadership election."


class NotLeaderOrFollowerError(KafkaError):
    code, name, retriable, invalid_metadata = 6, "NOT_LEADER_OR_FOLLOWER", True, True
    default_message = (
        "For requests intended only for the leader, this error indicates that the broker is not the current leader."
    )


class RequestTimedOutError(KafkaError):
    code, name, retriable = 7, "REQUEST_TIMED_OUT", True
    default_message = "The request timed out."


class BrokerNotAvailableError(KafkaError):
    code, name, retriable = 8, "BROKER_NOT_AVAILABLE", False
    default_message = "The broker is not available."


class ReplicaNotAvailableError(KafkaError):
    code, name, retriable, invalid_metadata = 9, "REPLICA_NOT_AVAILABLE", True, True
    default_message = "The replica is not available for the requested topic-partition."


class MessageTooLargeError(KafkaError):
    code, name, retriable = 10, "MESSAGE_TOO_LARGE", False
    default_message = "The request included a message larger than the max message size the server will accept."


class StaleControllerEpochError(KafkaError):
    code, name, retriable = 11, "STALE_CONTROLLER_EPOCH", False
    default_message = "The controller moved to another broker."


class NetworkError(KafkaError):
    code, name, retriable, invalid_metadata = 13, "NETWORK_EXCEPTION", True, True
    default_message = "The server disconnected before a response was received."


class InvalidTopicError(KafkaError):
    code, name, retriable = 17, "INVALID_TOPIC_EXCEPTION", False
    default_message = "The request attempted to perform an operation on an invalid topic."


class RecordListTooLargeError(KafkaError):
    code, name, retriable = 18, "RECORD_LIST_TOO_LARGE", False
    default_message = "The request included message batch larger than the configured segment size on the server."


class NotEnoughReplicasError(KafkaError):
    code, name, retriable = 19, "NOT_ENOUGH_REPLICAS", True
    default_message = "Messages are rejected since there are fewer in-sync replicas than required."


class NotEnoughReplicasAfterAppendError(KafkaError):
    code, name, retriable = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True
    default_message = "Messages are written to the log, but to fewer in-sync replicas than required."


class InvalidRequiredAcksError(KafkaError):
    code, name, retriable = 21, "INVALID_REQUIRED_ACKS", False
    default_message = "Produce request specified an invalid value for required acks."


class TopicAuthorizationFailedError(KafkaError):
    code, name, retriable = 29, "TOPIC_AUTHORIZATION_FAILED", False
    default_message = "Topic authorization failed."


class ClusterAuthorizationFailedError(KafkaError):
    code, name, retriable = 31, "CLUSTER_AUTHORIZATION_FAILED", False
    default_message = "Cluster authorization failed."


class InvalidTimestampError(KafkaError):
    code, name, retriable = 32, "INVALID_TIMESTAMP", False
    default_message = "The timestamp of the message is out of acceptable range."


class UnsupportedSaslMechanismError(KafkaError):
    code, name, retriable = 33, "UNSUPPORTED_SASL_MECHANISM", False
    default_message = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(KafkaError):
    code, name, retriable = 34, "ILLEGAL_SASL_STATE", False
    default_message = "Request is not valid given the current SASL state."


class UnsupportedVersionError(KafkaError):
    code, name, retriable = 35, "UNSUPPORTED_VERSION", False
    default_message = "The version of API is not supported."


class TopicAlreadyExistsError(KafkaError):
    code, name, retriable = 36, "TOPIC_ALREADY_EXISTS", False
    default_message = "Topic with this name already exists."


class InvalidPartitionsError(KafkaError):
    code, name, retriable = 37, "INVALID_PARTITIONS", False
    default_message = "Number of partitions is below 1."


class InvalidReplicationFactorError(KafkaError):
    code, name, retriable = 38, "INVALID_REPLICATION_FACTOR", False
    default_message = "Replication factor is below 1 or larger than the number of available brokers."


class InvalidReplicaAssignmentError(KafkaError):
    code, name, retriable = 39, "INVALID_REPLICA_ASSIGNMENT", False
    default_message = "Replica assignment is invalid."


class InvalidConfigError(KafkaError):
    code, name, retriable = 40, "INVALID_CONFIG", False
    default_message = "Configuration is invalid."


class NotControllerError(KafkaError):
    code, name, retriable = 41, "NOT_CONTROLLER", True
    default_message = "This is not the correct controller for this cluster."


class InvalidRequestError(KafkaError):
    code, name, retriable = 42, "INVALID_REQUEST", False
    default_message = (
        "This most likely occurs because of a request being malformed by the client library or the "
        "message was sent to an incompatible broker."
    )


class UnsupportedForMessageFormatError(KafkaError):
    code, name, retriable = 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False
    default_message = "The message format version on the broker does not support the request."


class PolicyViolationError(KafkaError):
    code, name, retriable = 44, "POLICY_VIOLATION", False
    default_message = "Request parameters do not satisfy the configured policy."


class SecurityDisabledError(KafkaError):
    code, name, retriable = 54, "SECURITY_DISABLED", False
    default_message = "Security features are disabled."


class OperationNotAttemptedError(KafkaError):
    code, name, retriable = 55, "OPERATION_NOT_ATTEMPTED", False
    default_message = "The broker did not attempt to execute this operation."


class KafkaStorageError(KafkaError):
    code, name, retriable = 56, "KAFKA_STORAGE_ERROR", True
    default_message = "Disk error when trying to access log file on the disk."


class LogDirNotFoundError(KafkaError):
    code, name, retriable = 57, "LOG_DIR_NOT_FOUND", False
    default_message = "The user-specified log directory is not found in the broker config."


class SaslAuthenticationFailedError(KafkaError):
    code, name, retriable = 58, "SASL_AUTHENTICATION_FAILED", False
    default_message = "SASL Authentication failed."


class ReassignmentInProgressError(KafkaError):
    code, name, retriable = 60, "REASSIGNMENT_IN_PROGRESS", False
    default_message = "A partition reassignment is in progress."


class InvalidPrincipalTypeError(KafkaError):
    code, name, retriable = 67, "INVALID_PRINCIPAL_TYPE", False
    default_message = "Supplied principalType is not supported."


class FetchSessionIdNotFoundError(KafkaError):
    code, name, retriable = 70, "FETCH_SESSION_ID_NOT_FOUND", True
    default_message = "The fetch session ID was not found."


class InvalidFetchSessionEpochError(KafkaError):
    code, name, retriable = 71, "INVALID_FETCH_SESSION_EPOCH", True
    default_message = "The fetch session epoch is invalid."


class ListenerNotFoundError(KafkaError):
    code, name, retriable, invalid_metadata = 72, "LISTENER_NOT_FOUND", True, True
    default_message = (
        "There is no listener on the leader broker that matches the listener on which metadata request was processed."
    )


class TopicDeletionDisabledError(KafkaError):
    code, name, retriable = 73, "TOPIC_DELETION_DISABLED", False
    default_message = "Topic deletion is disabled."


class FencedLeaderEpochError(KafkaError):
    code, name, retriable, invalid_metadata = 74, "FENCED_LEADER_EPOCH", True, True
    default_message = "The leader epoch in the request is older than the epoch on the broker."


class UnknownLeaderEpochError(KafkaError):
    code, name, retriable = 75, "UNKNOWN_LEADER_EPOCH", True
    default_message = "The leader epoch in the request is newer than the epoch on the broker."


class UnsupportedCompressionTypeError(KafkaError):
    code, name, retriable = 76, "UNSUPPORTED_COMPRESSION_TYPE", False
    default_message = "The requesting client does not support the compression type of given partition."


class StaleBrokerEpochError(KafkaError):
    code, name, retriable = 77, "STALE_BROKER_EPOCH", False
    default_message = "Broker epoch has changed."


class OffsetNotAvailableError(KafkaError):
    code, name, retriable = 78, "OFFSET_NOT_AVAILABLE", True
    default_message = (
        "The leader high watermark has not caught up from a recent leader election so the offsets "
        "cannot be guaranteed to be monotonically increasing."
    )


class PreferredLeaderNotAvailableError(KafkaError):
    code, name, retriable = 80, "PREFERRED_LEADER_NOT_AVAILABLE", True
    default_message = "The preferred leader was not available."


class EligibleLeadersNotAvailableError(KafkaError):
    code, name, retriable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True
    default_message = "Eligible topic partition leaders are not available."


class ElectionNotNeededError(KafkaError):
    code, name, retriable = 84, "ELECTION_NOT_NEEDED", True
    default_message = "Leader election not needed for topic partition."


class NoReassignmentInProgressError(KafkaError):
    code, name, retriable = 85, "NO_REASSIGNMENT_IN_PROGRESS", False
    default_message = "No partition reassignment is in progress."


class InvalidRecordError(KafkaError):
    code, name, retriable = 87, "INVALID_RECORD", False
    default_message = "This record has failed the validation on broker and hence will be rejected."


class ThrottlingQuotaExceededError(KafkaError):
    code, name, retriable = 89, "THROTTLING_QUOTA_EXCEEDED", True
    default_message = "The throttling quota has been exceeded."


class ResourceNotFoundError(KafkaError):
    code, name, retriable = 91, "RESOURCE_NOT_FOUND", False
    default_message = "A request illegally referred to a resource that does not exist."


class DuplicateResourceError(KafkaError):
    code, name, retriable = 92, "DUPLICATE_RESOURCE", False
    default_message = "A request illegally referred to the same resource twice."


class InvalidUpdateVersionError(KafkaError):
    code, name, retriable = 95, "INVALID_UPDATE_VERSION", False
    default_message = "The given update version was invalid."


class PositionOutOfRangeError(KafkaError):
    code, name, retriable = 99, "POSITION_OUT_OF_RANGE", False
    default_message = "Requested position is not greater than or equal to zero, and less than the size of the snapshot."


class UnknownTopicIdError(KafkaError):
    code, name, retriable, invalid_metadata = 100, "UNKNOWN_TOPIC_ID", True, True
    default_message = "This server does not host this topic ID."


class DuplicateBrokerRegistrationError(KafkaError):
    code, name, retriable = 101, "DUPLICATE_BROKER_REGISTRATION", False
    default_message = "This broker ID is already in use."


class BrokerIdNotRegisteredError(KafkaError):
    code, name, retriable = 102, "BROKER_ID_NOT_REGISTERED", False
    default_message = "The given broker ID was not registered."


class InconsistentTopicIdError(KafkaError):
    code, name, retriable, invalid_metadata = 103, "INCONSISTENT_TOPIC_ID", True, True
    default_message = "The log's topic ID did not match the topic ID in the request."


class InconsistentClusterIdError(KafkaError):
    code, name, retriable = 104, "INCONSISTENT_CLUSTER_ID", False
    default_message = "The clusterId in the request does not match that found on the server."


class IneligibleReplicaError(KafkaError):
    code, name, retriable = 107, "INELIGIBLE_REPLICA", False
    default_message = "The new ISR contains at least one ineligible replica."


class NewLeaderElectedError(KafkaError):
    code, name, retriable = 108, "NEW_LEADER_ELECTED", False
    default_message = "The AlterPartition request successfully updated the partition state but the leader has changed."


# The table: every error class defined here or imported from protocol/errors_groups.py, in code order.
KAFKA_ERRORS: tuple[type[KafkaError], ...] = tuple(
    sorted(
        (
            cls
            for cls in list(globals().values())
            if isinstance(cls, type) and issubclass(cls, KafkaError) and cls is not KafkaError
        ),
        key=lambda cls: cls.code,
    )
)
_BY_CODE: dict[int, type[KafkaError]] = {cls.code: cls for cls in KAFKA_ERRORS}
_BY_NAME: dict[str, type[KafkaError]] = {cls.name: cls for cls in KAFKA_ERRORS}
assert len(_BY_CODE) == len(_BY_NAME) == len(KAFKA_ERRORS), "duplicate code or name in the error table"

# After these a client re-reads metadata and drops its cached leader: Kafka's InvalidMetadataException
# family, plus UNKNOWN_LEADER_EPOCH (the replica has not seen the client's newer epoch yet; Kafka's clients
# only retry, rafka's also refresh, which costs one KV read).
REFRESH_METADATA_CODES: frozenset[int] = frozenset(
    [cls.code for cls in KAFKA_ERRORS if cls.invalid_metadata] + [UnknownLeaderEpochError.code]
)


def for_code(code: int) -> type[KafkaError]:
    """The error class for a Kafka error code (UnknownServerError for codes rafka does not know)."""
    return _BY_CODE.get(code, UnknownServerError)


def for_name(name: str) -> type[KafkaError]:
    return _BY_NAME[name]


def refresh_metadata(code: int) -> bool:
    """Whether a client refreshes its metadata after a response carrying ``code``."""
    return code in REFRESH_METADATA_CODES


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the error for ``code`` unless it is 0 (NONE)."""
    if code:
        raise for_code(code)(message)


def error_response(exc: BaseException) -> tuple[int, str]:
    """(error_code, error_message) for any exception; non-Kafka exceptions become UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    return -1, f"{type(exc).__name__}: {exc}"


def all_errors() -> dict[int, type[KafkaError]]:
    return dict(_BY_CODE)


# Internal to the broker, so not in the wire table above.
class UnexpectedAppendOffsetError(KafkaError):
    """Follower append whose first offset does not continue the log (Kafka's UnexpectedAppendOffsetException).
    Internal to the broker; travels as UNKNOWN_SERVER_ERROR on the wire."""

    code, name, retriable = -1, "UNKNOWN_SERVER_ERROR", False
    default_message = "The first offset of the appended batches does not continue the log."


# Every error of the wire table above, in code order (UnexpectedAppendOffsetError is internal: not listed).
