"""Kafka's ``.lock`` file in a log directory: ``LogDirLock`` holds ``flock`` on ``log_dir/.lock`` so that one
process at a time owns the directory; the kernel drops it when the holder dies. Used by the broker and
controller shells (``acquire`` in a thread); no Ray, no asyncio. docs/internals.md ("Liveness") has the rules.
"""

from __future__ import annotations

import fcntl
import os
import time

from protocol.errors import KafkaStorageError

LOCK_FILE = ".lock"


class LogDirLock:
    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        os.makedirs(self.log_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as e:
            os.close(fd)
            raise KafkaStorageError(f"Failed to lock log directory {self.log_dir}: {e}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def holder_pid(self) -> int | None:
        """The pid the holder wrote (best effort: None when unreadable)."""
        try:
            with open(self.path) as f:
                return int(f.read().strip() or "-1")
        except (OSError, ValueError):
            return None

    def acquire(self, timeout_s: float = 10.0, interval_s: float = 0.05) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise KafkaStorageError(
                    f"Failed to acquire lock on file {LOCK_FILE} in {self.log_dir}: another broker process "
                    f"(pid {self.holder_pid()}) has this log directory open. Two brokers must never share "
                    f"a log directory: stop the other one or use another data directory."
                )
            time.sleep(interval_s)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None
