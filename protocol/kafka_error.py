"""The base of every Kafka error class (protocol/errors.py, protocol/errors_groups.py, rafka/errors.py):
its wire ``code``, protocol ``name``, ``retriable``, ``invalid_metadata`` and default message, all class
attributes a type checker sees. Exceptions pickle by their single ``message``, so they cross Ray calls."""

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
