"""actors.channels.ray_errors: the one mapping from a failed Ray call to the Kafka error a client acts on."""

from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError, RayTaskError

from actors.channels.ray_errors import kafka_error_for
from protocol import errors as E


class _ClientTimeout(E.RequestTimedOutError):
    pass


def _task_error(cause: BaseException) -> RayTaskError:
    return RayTaskError("fetch", "traceback", cause)


def test_dead_actor_is_not_leader():
    for exc in (RayActorError(), ActorDiedError()):
        err = kafka_error_for(exc, "replica actor")
        assert isinstance(err, E.NotLeaderOrFollowerError) and err.invalid_metadata
        assert "replica actor unavailable" in err.message


def test_timeout_kafka_and_other_errors():
    assert type(kafka_error_for(GetTimeoutError("slow"))) is E.RequestTimedOutError
    assert type(kafka_error_for(GetTimeoutError("slow"), timeout_error=_ClientTimeout)) is _ClientTimeout
    own = E.FencedLeaderEpochError("old epoch")
    assert kafka_error_for(own) is own
    assert kafka_error_for(_task_error(own)) is own
    err = kafka_error_for(_task_error(ValueError("boom")), "leader replica actor", "produce")
    assert type(err) is E.UnknownServerError and "produce failed on the leader replica actor" in err.message
    assert type(kafka_error_for(OSError("disk"))) is E.UnknownServerError
