"""The gateway's error shape: Confluent REST Proxy's ``{"error_code", "message"}`` plus Kafka's own code.

Every failure leaves the gateway as JSON (never a traceback)::

    HTTP 404  {"error_code": 40401, "kafka_error_code": 3, "message": "topic 'x' does not exist"}

``error_code`` is Confluent's five-digit code (the HTTP status then a sequence number, so a REST Proxy
client's checks keep working); ``kafka_error_code`` is Kafka's protocol error code (``protocol/errors.py``)
when a Kafka error caused the failure, else null. ``from_exception`` maps any exception onto that shape.
"""

from __future__ import annotations

from protocol import errors as E
from protocol.errors import ClusterNotFoundError, CommitFailedError, IllegalStateError, KafkaError, KafkaTimeoutError

# Confluent's codes where it has one; the rest follow its "HTTP status + sequence" scheme.
MALFORMED = 40001  # body is not valid JSON/msgpack, or misses required fields
BAD_KAFKA_REQUEST = 40002  # the cluster refused the request: topic exists, invalid config / partitions / RF
BAD_PARAMETER = 42202  # a query parameter has a bad value
TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
INSTANCE_NOT_FOUND = 40403
NOT_FOUND = 40404  # cluster id, consumer group, route
METHOD_NOT_ALLOWED = 40501
NOT_ACCEPTABLE = 40601
REQUEST_TIMEOUT = 40801  # the request body did not arrive in time
INSTANCE_EXISTS = 40902
ILLEGAL_STATE = 40903  # e.g. assign() on a subscribed instance, commit after a rebalance
TOO_LARGE = 41301
UNSUPPORTED_MEDIA = 41501
BAD_RECORD = 42201  # invalid base64, a key/value of the wrong type, bad JSON value
BAD_CONSUMER_CONFIG = 42204
KAFKA_ERROR = 50002  # a non-retriable Kafka error without a better HTTP status
INTERNAL = 50001
UNAVAILABLE = 50301  # not enough replicas, no leader, timeouts: try again
NO_CLUSTER = 50302


class GatewayError(Exception):
    """A failure with its HTTP status, Confluent-style ``error_code`` and optional Kafka code."""

    def __init__(self, status: int, error_code: int, message: str, kafka_error_code: int | None = None):
        super().__init__(message)
        self.status, self.error_code, self.message = status, error_code, message
        self.kafka_error_code = kafka_error_code

    def body(self) -> dict:
        return {"error_code": self.error_code, "kafka_error_code": self.kafka_error_code, "message": self.message}

    def __reduce__(self):  # crosses Serve handle calls (consumer instances) intact
        return (GatewayError, (self.status, self.error_code, self.message, self.kafka_error_code))


_TOO_LARGE = {E.MessageTooLargeError.code, E.RecordListTooLargeError.code}
_BAD_RECORD = {E.CorruptMessageError.code, E.InvalidTimestampError.code, E.InvalidRecordError.code}
_NOT_FOUND = {E.UnknownTopicOrPartitionError.code, E.GroupIdNotFoundError.code, E.UnknownTopicIdError.code}
_BAD_REQUEST = {
    E.TopicAlreadyExistsError.code,
    E.InvalidTopicError.code,
    E.InvalidPartitionsError.code,
    E.InvalidReplicationFactorError.code,
    E.InvalidConfigError.code,
    E.InvalidRequestError.code,
    E.InvalidReplicaAssignmentError.code,
}
_CONFLICT = {
    E.IllegalGenerationError.code,
    E.UnknownMemberIdError.code,
    E.RebalanceInProgressError.code,
    E.NonEmptyGroupError.code,
    E.FencedInstanceIdError.code,
}


def from_kafka(exc: KafkaError) -> GatewayError:
    """The HTTP status a Kafka error deserves: 404 unknown, 413 too large, 422 invalid record, 503 when a
    retry may succeed (no leader, not enough replicas, timeouts), 409 group conflicts, else 500."""
    code = exc.code
    if isinstance(exc, ClusterNotFoundError):
        return GatewayError(503, NO_CLUSTER, exc.message, code)
    if isinstance(exc, (IllegalStateError, CommitFailedError)) or code in _CONFLICT:
        return GatewayError(409, ILLEGAL_STATE, f"{exc.name}: {exc.message}", code)
    if code in _NOT_FOUND:
        return GatewayError(
            404,
            TOPIC_NOT_FOUND if code != E.GroupIdNotFoundError.code else NOT_FOUND,
            f"{exc.name}: {exc.message}",
            code,
        )
    if code in _BAD_REQUEST:  # Confluent answers a create of an existing topic, a bad config, ... with 400
        return GatewayError(400, BAD_KAFKA_REQUEST, f"{exc.name}: {exc.message}", code)
    if code in _TOO_LARGE:
        return GatewayError(413, TOO_LARGE, f"{exc.name}: {exc.message}", code)
    if code in _BAD_RECORD:
        return GatewayError(422, BAD_RECORD, f"{exc.name}: {exc.message}", code)
    if exc.retriable or isinstance(exc, KafkaTimeoutError):
        return GatewayError(503, UNAVAILABLE, f"{exc.name}: {exc.message}", code)
    return GatewayError(500, KAFKA_ERROR, f"{exc.name}: {exc.message}", code)


def from_exception(exc: BaseException) -> GatewayError:
    """Any exception as a ``GatewayError``; unexpected ones become a 500 with the exception's one-line text."""
    if isinstance(exc, GatewayError):
        return exc
    cause = getattr(exc, "cause", None)  # a RayTaskError wraps what the actor raised
    if isinstance(cause, BaseException) and cause is not exc:
        return from_exception(cause)
    if isinstance(exc, KafkaError):
        return from_kafka(exc)
    if isinstance(exc, TimeoutError):
        return GatewayError(503, UNAVAILABLE, f"timed out: {exc}", E.RequestTimedOutError.code)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return GatewayError(500, INTERNAL, f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
