"""A partition's deadline timer (Kafka's CoordinatorTimer): one asyncio task sleeping until the shard's
``next_deadline()``, re-armed by the runtime (actors/coordinator/runtime.py) after every write.
Plain asyncio, no Ray; it knows nothing of what firing does (the runtime's owner says)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine


class CoordinatorTimer:
    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.deadline: int | None = None

    def arm(self, deadline: int | None, fire: Callable[[int], Coroutine[Any, Any, None]]) -> None:
        """Sleep until ``deadline`` then run ``fire(deadline)``; a timer already at that deadline stays."""
        if deadline == self.deadline and self.task is not None:
            return
        self.cancel()
        self.deadline = deadline
        if deadline is not None:
            self.task = asyncio.get_running_loop().create_task(fire(deadline))

    def fired(self) -> None:
        """The running fire is no longer cancellable by a re-arm (it re-arms itself when done)."""
        self.task, self.deadline = None, None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.task, self.deadline = None, None
