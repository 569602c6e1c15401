"""A failed Ray call to an actor as the Kafka error a client acts on, the one mapping (``kafka_error_for``): a dead or
unreachable actor -> NOT_LEADER_OR_FOLLOWER, a timeout -> REQUEST_TIMED_OUT, a raised KafkaError -> that error,
anything else -> UNKNOWN_SERVER_ERROR. Used by the producer's Sender and the consumer's Fetcher; Ray is imported
inside the function, so the module imports without it."""

from __future__ import annotations

from protocol.errors import KafkaError, NotLeaderOrFollowerError, RequestTimedOutError, UnknownServerError


def kafka_error_for(
    exc: BaseException, actor: str = "actor", call: str = "call", timeout_error: type[KafkaError] = RequestTimedOutError
) -> KafkaError:
    """``exc`` (raised by a Ray call to ``actor``) as a Kafka error; ``call`` names the call in messages."""
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    if isinstance(exc, RayActorError):
        return NotLeaderOrFollowerError(f"{actor} unavailable: {type(exc).__name__}")
    if isinstance(exc, GetTimeoutError):
        return timeout_error(str(exc))
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, KafkaError):
            return cause
        return UnknownServerError(f"{call} failed on the {actor}: {cause or exc}")
    return UnknownServerError(f"{type(exc).__name__}: {exc}")
