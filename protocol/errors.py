"""Kafka's errors as Python exceptions, the one errors module (Kafka's ``org.apache.kafka.common.protocol.Errors``).

Each class has, statically, its wire ``code``, protocol ``name``, ``retriable``, ``invalid_metadata`` and a
default message; ``for_code`` maps a code back to its class. The client's own exceptions (KafkaTimeoutError,
IllegalStateError, ...) are at the end. Any layer imports it; it imports only the stdlib.
"""

from __future__ import annotations

from typing import ClassVar


class KafkaError(Exception):
    """Base of every rafka error; ``code`` is Kafka's wire error code."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    default_message: ClassVar[str] = ""

    def __init__(self, message: str | None = None):
        self.message = message or self.default_message
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"[Error {self.code}] {self.name}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.message,))


class UnknownServerError(KafkaError):
    code, name, retriable = -1, "UNKNOWN_SERVER_ERROR", False
    default_message = "The server experienced an unexpected error when processing the request."


class NoError(KafkaError):
    code, name, retriable = 0, "NONE", False
    default_message = ""


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


class OffsetMetadataTooLargeError(KafkaError):
    code, name, retriable = 12, "OFFSET_METADATA_TOO_LARGE", False
    default_message = "The metadata field of the offset request was too large."


class NetworkError(KafkaError):
    code, name, retriable, invalid_metadata = 13, "NETWORK_EXCEPTION", True, True
    default_message = "The server disconnected before a response was received."


class CoordinatorLoadInProgressError(KafkaError):
    code, name, retriable = 14, "COORDINATOR_LOAD_IN_PROGRESS", True
    default_message = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailableError(KafkaError):
    code, name, retriable = 15, "COORDINATOR_NOT_AVAILABLE", True
    default_message = "The coordinator is not available."


class NotCoordinatorError(KafkaError):
    code, name, retriable = 16, "NOT_COORDINATOR", True
    default_message = "This is not the correct coordinator."


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


class IllegalGenerationError(KafkaError):
    code, name, retriable = 22, "ILLEGAL_GENERATION", False
    default_message = "Specified group generation id is not valid."


class InconsistentGroupProtocolError(KafkaError):
    code, name, retriable = 23, "INCONSISTENT_GROUP_PROTOCOL", False
    default_message = "The group member's supported protocols are incompatible with those of existing members."


class InvalidGroupIdError(KafkaError):
    code, name, retriable = 24, "INVALID_GROUP_ID", False
    default_message = "The configured groupId is invalid."


class UnknownMemberIdError(KafkaError):
    code, name, retriable = 25, "UNKNOWN_MEMBER_ID", False
    default_message = "The coordinator is not aware of this member."


class InvalidSessionTimeoutError(KafkaError):
    code, name, retriable = 26, "INVALID_SESSION_TIMEOUT", False
    default_message = "The session timeout is not within the range allowed by the broker."


class RebalanceInProgressError(KafkaError):
    code, name, retriable = 27, "REBALANCE_IN_PROGRESS", False
    default_message = "The group is rebalancing, so a rejoin is needed."


class InvalidCommitOffsetSizeError(KafkaError):
    code, name, retriable = 28, "INVALID_COMMIT_OFFSET_SIZE", False
    default_message = "The committing offset data size is not valid."


class TopicAuthorizationFailedError(KafkaError):
    code, name, retriable = 29, "TOPIC_AUTHORIZATION_FAILED", False
    default_message = "Topic authorization failed."


class GroupAuthorizationFailedError(KafkaError):
    code, name, retriable = 30, "GROUP_AUTHORIZATION_FAILED", False
    default_message = "Group authorization failed."


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


class OutOfOrderSequenceNumberError(KafkaError):
    code, name, retriable = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False
    default_message = "The broker received an out of order sequence number."


class DuplicateSequenceNumberError(KafkaError):
    code, name, retriable = 46, "DUPLICATE_SEQUENCE_NUMBER", False
    default_message = "The broker received a duplicate sequence number."


class InvalidProducerEpochError(KafkaError):
    code, name, retriable = 47, "INVALID_PRODUCER_EPOCH", False
    default_message = "Producer attempted to produce with an old epoch."


class InvalidTxnStateError(KafkaError):
    code, name, retriable = 48, "INVALID_TXN_STATE", False
    default_message = "The producer attempted a transactional operation in an invalid state."


class InvalidProducerIdMappingError(KafkaError):
    code, name, retriable = 49, "INVALID_PRODUCER_ID_MAPPING", False
    default_message = (
        "The producer attempted to use a producer id which is not currently assigned to its transactional id."
    )


class InvalidTransactionTimeoutError(KafkaError):
    code, name, retriable = 50, "INVALID_TRANSACTION_TIMEOUT", False
    default_message = "The transaction timeout is larger than the maximum value allowed by the broker."


class ConcurrentTransactionsError(KafkaError):
    code, name, retriable = 51, "CONCURRENT_TRANSACTIONS", True
    default_message = (
        "The producer attempted to update a transaction while another concurrent operation on the "
        "same transaction was ongoing."
    )


class TransactionCoordinatorFencedError(KafkaError):
    code, name, retriable = 52, "TRANSACTION_COORDINATOR_FENCED", False
    default_message = (
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the "
        "current coordinator for a given producer."
    )


class TransactionalIdAuthorizationFailedError(KafkaError):
    code, name, retriable = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False
    default_message = "Transactional Id authorization failed."


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


class UnknownProducerIdError(KafkaError):
    code, name, retriable = 59, "UNKNOWN_PRODUCER_ID", False
    default_message = (
        "This exception is raised by the broker if it could not locate the producer metadata "
        "associated with the producerId in question."
    )


class ReassignmentInProgressError(KafkaError):
    code, name, retriable = 60, "REASSIGNMENT_IN_PROGRESS", False
    default_message = "A partition reassignment is in progress."


class InvalidPrincipalTypeError(KafkaError):
    code, name, retriable = 67, "INVALID_PRINCIPAL_TYPE", False
    default_message = "Supplied principalType is not supported."


class NonEmptyGroupError(KafkaError):
    code, name, retriable = 68, "NON_EMPTY_GROUP", False
    default_message = "The group is not empty."


class GroupIdNotFoundError(KafkaError):
    code, name, retriable = 69, "GROUP_ID_NOT_FOUND", False
    default_message = "The group id does not exist."


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


class MemberIdRequiredError(KafkaError):
    code, name, retriable = 79, "MEMBER_ID_REQUIRED", False
    default_message = "The group member needs to have a valid member id before actually entering a consumer group."


class PreferredLeaderNotAvailableError(KafkaError):
    code, name, retriable = 80, "PREFERRED_LEADER_NOT_AVAILABLE", True
    default_message = "The preferred leader was not available."


class GroupMaxSizeReachedError(KafkaError):
    code, name, retriable = 81, "GROUP_MAX_SIZE_REACHED", False
    default_message = "The consumer group has reached its max size."


class FencedInstanceIdError(KafkaError):
    code, name, retriable = 82, "FENCED_INSTANCE_ID", False
    default_message = (
        "The broker rejected this static consumer since another consumer with the same "
        "group.instance.id has registered with a different member.id."
    )


class EligibleLeadersNotAvailableError(KafkaError):
    code, name, retriable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True
    default_message = "Eligible topic partition leaders are not available."


class ElectionNotNeededError(KafkaError):
    code, name, retriable = 84, "ELECTION_NOT_NEEDED", True
    default_message = "Leader election not needed for topic partition."


class NoReassignmentInProgressError(KafkaError):
    code, name, retriable = 85, "NO_REASSIGNMENT_IN_PROGRESS", False
    default_message = "No partition reassignment is in progress."


class GroupSubscribedToTopicError(KafkaError):
    code, name, retriable = 86, "GROUP_SUBSCRIBED_TO_TOPIC", False
    default_message = "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."


class InvalidRecordError(KafkaError):
    code, name, retriable = 87, "INVALID_RECORD", False
    default_message = "This record has failed the validation on broker and hence will be rejected."


class UnstableOffsetCommitError(KafkaError):
    code, name, retriable = 88, "UNSTABLE_OFFSET_COMMIT", True
    default_message = "There are unstable offsets that need to be cleared."


class ThrottlingQuotaExceededError(KafkaError):
    code, name, retriable = 89, "THROTTLING_QUOTA_EXCEEDED", True
    default_message = "The throttling quota has been exceeded."


class ProducerFencedError(KafkaError):
    code, name, retriable = 90, "PRODUCER_FENCED", False
    default_message = "There is a newer producer with the same transactionalId which fences the current one."


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


class TransactionalIdNotFoundError(KafkaError):
    code, name, retriable = 105, "TRANSACTIONAL_ID_NOT_FOUND", False
    default_message = "The transactionalId could not be found."


class IneligibleReplicaError(KafkaError):
    code, name, retriable = 107, "INELIGIBLE_REPLICA", False
    default_message = "The new ISR contains at least one ineligible replica."


class NewLeaderElectedError(KafkaError):
    code, name, retriable = 108, "NEW_LEADER_ELECTED", False
    default_message = "The AlterPartition request successfully updated the partition state but the leader has changed."


class FencedMemberEpochError(KafkaError):
    code, name, retriable = 110, "FENCED_MEMBER_EPOCH", False
    default_message = "The member epoch is fenced by the group coordinator."


class UnreleasedInstanceIdError(KafkaError):
    code, name, retriable = 111, "UNRELEASED_INSTANCE_ID", False
    default_message = "The instance ID is still used by another member in the consumer group."


class UnsupportedAssignorError(KafkaError):
    code, name, retriable = 112, "UNSUPPORTED_ASSIGNOR", False
    default_message = "The assignor or its version range is not supported by the consumer group."


class StaleMemberEpochError(KafkaError):
    code, name, retriable = 113, "STALE_MEMBER_EPOCH", False
    default_message = "The member epoch is stale."


class TransactionAbortableError(KafkaError):
    code, name, retriable = 120, "TRANSACTION_ABORTABLE", False
    default_message = "The server encountered an error with the transaction."


# The wire table: every error class above, in code order (the ones below it are not on the wire).
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


# Not on the wire table: internal to the broker, and the client's own exceptions.
class UnexpectedAppendOffsetError(KafkaError):
    """Follower append whose first offset does not continue the log (Kafka's UnexpectedAppendOffsetException).
    Internal to the broker; travels as UNKNOWN_SERVER_ERROR on the wire."""

    code, name, retriable = -1, "UNKNOWN_SERVER_ERROR", False
    default_message = "The first offset of the appended batches does not continue the log."


class RecordValidationError(KafkaError):
    """Kafka's RecordValidationException (KIP-467): records of one batch failed the leader's validation.
    ``record_errors``: ``((batch_index, message), ...)``, which Produce v8+ answers beside the error. Raised as
    one of the two below; ``code`` is theirs (INVALID_RECORD / INVALID_TIMESTAMP)."""

    def __init__(self, message: str | None = None, record_errors: tuple[tuple[int, str | None], ...] = ()):
        super().__init__(message)
        self.record_errors = tuple(record_errors)

    def __reduce__(self):
        return (type(self), (self.message, self.record_errors))


class InvalidRecordsError(RecordValidationError, InvalidRecordError):
    """Records of a batch are invalid (a compacted topic's records without a key): INVALID_RECORD (87)."""


class InvalidTimestampsError(RecordValidationError, InvalidTimestampError):
    """Records of a batch have timestamps out of range: INVALID_TIMESTAMP (32)."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A client-side deadline passed (Kafka's org.apache.kafka.common.errors.TimeoutException)."""

    code, name, retriable = 7, "REQUEST_TIMED_OUT", True
    default_message = "The operation timed out."


class RecordTooLargeError(KafkaError):
    """A record is larger than max_request_size or buffer_memory (Kafka's RecordTooLargeException)."""

    code, name, retriable = 10, "MESSAGE_TOO_LARGE", False
    default_message = "The record is larger than the producer accepts."


class IllegalStateError(KafkaError):
    """The client was used in a state that does not allow the call (closed, unassigned partition, ...)."""

    code, name, retriable = -1, "ILLEGAL_STATE", False
    default_message = "Illegal client state."


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """auto_offset_reset='none' and there is no valid position (Kafka's NoOffsetForPartitionException)."""

    code, name, retriable = 1, "OFFSET_OUT_OF_RANGE", False
    default_message = "No valid offset and no reset policy for the partition."


class ClusterNotFoundError(KafkaError, ConnectionError):
    """connect() found no Ray cluster, or no rafka cluster with that name on it."""

    code, name, retriable = -1, "CLUSTER_NOT_FOUND", False
    default_message = "No rafka cluster found."


class ClusterAlreadyRunningError(KafkaError):
    """A rafka cluster of that name already runs on this Ray cluster (its actors and KV keys would be shared)."""

    code, name, retriable = -1, "CLUSTER_ALREADY_RUNNING", False
    default_message = "A rafka cluster of that name is already running."


class CommitFailedError(KafkaError):
    """The commit cannot complete: the group rebalanced and the partitions may belong to another member
    (Kafka's CommitFailedException). Poll again (rejoining the group), then commit what you own."""

    code, name, retriable = -1, "COMMIT_FAILED", False
    default_message = "Commit cannot be completed since the group has already rebalanced."
