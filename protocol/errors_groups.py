"""Kafka's errors of consumer groups, coordinators, transactions and producer ids/sequences (the rest are
in protocol/errors.py, which indexes both by code and name)."""

from __future__ import annotations

from protocol.kafka_error import KafkaError


class OffsetMetadataTooLargeError(KafkaError):
    code, name, retriable = 12, "OFFSET_METADATA_TOO_LARGE", False
    default_message = "The metadata field of the offset request was too large."


class CoordinatorLoadInProgressError(KafkaError):
    code, name, retriable = 14, "COORDINATOR_LOAD_IN_PROGRESS", True
    default_message = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailableError(KafkaError):
    code, name, retriable = 15, "COORDINATOR_NOT_AVAILABLE", True
    default_message = "The coordinator is not available."


class NotCoordinatorError(KafkaError):
    code, name, retriable = 16, "NOT_COORDINATOR", True
    default_message = "This is not the correct coordinator."


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


class GroupAuthorizationFailedError(KafkaError):
    code, name, retriable = 30, "GROUP_AUTHORIZATION_FAILED", False
    default_message = "Group authorization failed."


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


class UnknownProducerIdError(KafkaError):
    code, name, retriable = 59, "UNKNOWN_PRODUCER_ID", False
    default_message = (
        "This exception is raised by the broker if it could not locate the producer metadata "
        "associated with the producerId in question."
    )


class NonEmptyGroupError(KafkaError):
    code, name, retriable = 68, "NON_EMPTY_GROUP", False
    default_message = "The group is not empty."


class GroupIdNotFoundError(KafkaError):
    code, name, retriable = 69, "GROUP_ID_NOT_FOUND", False
    default_message = "The group id does not exist."


class MemberIdRequiredError(KafkaError):
    code, name, retriable = 79, "MEMBER_ID_REQUIRED", False
    default_message = "The group member needs to have a valid member id before actually entering a consumer group."


class GroupMaxSizeReachedError(KafkaError):
    code, name, retriable = 81, "GROUP_MAX_SIZE_REACHED", False
    default_message = "The consumer group has reached its max size."


class FencedInstanceIdError(KafkaError):
    code, name, retriable = 82, "FENCED_INSTANCE_ID", False
    default_message = (
        "The broker rejected this static consumer since another consumer with the same "
        "group.instance.id has registered with a different member.id."
    )


class GroupSubscribedToTopicError(KafkaError):
    code, name, retriable = 86, "GROUP_SUBSCRIBED_TO_TOPIC", False
    default_message = "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."


class UnstableOffsetCommitError(KafkaError):
    code, name, retriable = 88, "UNSTABLE_OFFSET_COMMIT", True
    default_message = "There are unstable offsets that need to be cleared."


class ProducerFencedError(KafkaError):
    code, name, retriable = 90, "PRODUCER_FENCED", False
    default_message = "There is a newer producer with the same transactionalId which fences the current one."


class TransactionalIdNotFoundError(KafkaError):
    code, name, retriable = 105, "TRANSACTIONAL_ID_NOT_FOUND", False
    default_message = "The transactionalId could not be found."


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
