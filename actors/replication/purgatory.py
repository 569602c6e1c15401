"""Delayed operations on asyncio: Kafka's DelayedOperation / DelayedOperationPurgatory. An operation parked under
watch keys completes exactly once: when ``check_and_complete(key)`` finds its condition holds, when its timer
expires, or when it is cancelled. Used by the ReplicaManager (replica_manager.py); it runs on the owning actor's
one event loop (nothing here is thread-safe, nothing needs to be); the life of an operation: docs/internals.md."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Hashable, Iterable
from typing import Any


class DelayedOperation(abc.ABC):
    """An operation that completes when its condition holds, or expires after ``delay_ms``. An operation
    whose class sets ``timed = False`` gets no expiry timer: its waiter bounds the wait and cancels it."""

    timed = True

    def __init__(self, delay_ms: float):
        self.delay_ms = max(0.0, float(delay_ms))
        self._completed = False
        self._expired = False
        self._cancelled = False
        self._future: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._on_done: list = []

    # ---- hooks for subclasses ---------------------------------------------------------------------
    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Check whether the operation can complete now; if so return ``self.force_complete()``."""

    @abc.abstractmethod
    def on_complete(self) -> Any:
        """Build the response (runs exactly once, on success, expiry or ``force_complete``)."""

    def on_expiration(self) -> None:
        """Runs just before ``on_complete`` when the operation timed out (``self.expired`` is True)."""

    def on_cancel(self) -> Any:
        """The response for an operation cancelled by ``cancel()`` / purgatory shutdown.

        Raise ``asyncio.CancelledError`` (the default) to cancel the waiter instead of answering it."""
        raise asyncio.CancelledError()

    # ---- state ------------------------------------------------------------------------------------
    @property
    def completed(self) -> bool:
        return self._completed

    @property
    def expired(self) -> bool:
        return self._expired

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def bind(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future:
        """Attach the result future to ``loop`` (the running loop by default) and return it. Idempotent."""
        if self._future is None:
            self._future = (loop or asyncio.get_running_loop()).create_future()
        return self._future

    async def wait(self) -> Any:
        """The response (``on_complete``'s / ``on_cancel``'s return value, or its exception)."""
        return await self.bind()

    def result(self) -> Any:
        """The response of a completed operation (raises ``asyncio.InvalidStateError`` before)."""
        if self._future is None:
            raise asyncio.InvalidStateError("operation never bound to a loop")
        return self._future.result()

    # ---- completion -------------------------------------------------------------------------------
    def force_complete(self) -> bool:
        """Complete now (first caller wins): cancel the timer and resolve the waiter with
        ``on_complete()``. Returns False when the operation was already completed."""
        if self._completed:
            return False
        self._finish()
        try:
            value = self.on_complete()
        except BaseException as exc:  # the waiter gets the exception, the completer carries on
            self._set_exception(exc)
        else:
            self._set_result(value)
        return True

    def cancel(self) -> bool:
        """Complete through ``on_cancel()`` (shutdown, leadership loss). False if already completed."""
        if self._completed:
            return False
        self._cancelled = True
        self._finish()
        try:
            value = self.on_cancel()
        except asyncio.CancelledError:
            if self._future is not None and not self._future.done():
                self._future.cancel()
        except BaseException as exc:
            self._set_exception(exc)
        else:
            self._set_result(value)
        return True

    def _fail(self, exc: BaseException) -> bool:
        """Complete with ``exc`` for the waiter (``try_complete`` raised). False if already done."""
        if self._completed:
            return False
        self._finish()
        self._set_exception(exc)
        return True

    def _expire(self) -> None:
        self._timer = None
        if self._completed:
            return
        self._expired = True
        try:
            self.on_expiration()
        finally:
            self.force_complete()

    def _finish(self) -> None:
        self._completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        callbacks, self._on_done = self._on_done, []
        for cb in callbacks:
            cb(self)

    def _set_result(self, value: Any) -> None:
        fut = self.bind()
        if not fut.done():
            fut.set_result(value)

    def _set_exception(self, exc: BaseException) -> None:
        fut = self.bind()
        if not fut.done():
            fut.set_exception(exc)


class DelayedOperationPurgatory:
    """Watch lists of delayed operations keyed by what they wait on, plus their expiry timers.

    ``purge_interval``: once this many watch entries belong to already-completed operations (they
    completed through another key, expired or were cancelled), every watch list is swept.
    """

    def __init__(self, name: str = "purgatory", purge_interval: int = 1000):
        self.name = name
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._pending: set[DelayedOperation] = set()
        self._entries = 0  # watch entries over all keys, completed or not
        self._live_entries = 0  # watch entries of operations still pending
        self._shutdown = False

    # ---- registration -----------------------------------------------------------------------------
    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Try ``op`` once; if it cannot complete, watch it under every key and arm its timer.

        Returns True when the operation completed right away (its result is ready). Must run on the
        event loop. After shutdown the operation is cancelled at once."""
        loop = asyncio.get_running_loop()
        op.bind(loop)
        keys = list(dict.fromkeys(keys))
        if not keys:
            raise ValueError("a delayed operation needs at least one watch key")
        if op.try_complete():
            return True
        if self._shutdown:
            op.cancel()
            return True
        if op.completed:  # try_complete completed it but returned False: treat as done
            return True
        for key in keys:
            self._watchers.setdefault(key, []).append(op)
        self._entries += len(keys)
        self._live_entries += len(keys)
        self._pending.add(op)
        op._on_done.append(lambda o, n=len(keys): self._done(o, n))
        if op.timed:
            op._timer = loop.call_later(op.delay_ms / 1000.0, op._expire)
        return False

    def _done(self, op: DelayedOperation, n_keys: int) -> None:
        self._pending.discard(op)
        self._live_entries -= n_keys
        if self._entries - self._live_entries > self.purge_interval:
            self.purge_completed()

    # ---- completion -------------------------------------------------------------------------------
    def check_and_complete(self, key: Hashable) -> int:
        """Ask every operation watching ``key`` to complete; drop the completed ones from the list.
        Returns how many completed in this call."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):  # a snapshot: completing may watch new operations under this key
            if op.completed:
                continue
            try:
                finished = op.try_complete()
            except BaseException as exc:  # a broken check must not strand its waiter
                finished = op._fail(exc)
            if finished or op.completed:
                done += 1
        current = self._watchers.get(key, [])
        keep = [op for op in current if not op.completed]
        self._entries -= len(current) - len(keep)
        if keep:
            self._watchers[key] = keep
        else:
            self._watchers.pop(key, None)
        return done

    def check_all(self) -> int:
        """``check_and_complete`` over every key (state changes that affect all operations)."""
        return sum(self.check_and_complete(key) for key in list(self._watchers))

    def cancel_for_key(self, key: Hashable) -> int:
        """Cancel every pending operation watching ``key``; returns how many were cancelled."""
        ops = self._watchers.pop(key, [])
        self._entries -= len(ops)
        n = 0
        for op in ops:
            if op.cancel():
                n += 1
        return n

    def purge_completed(self) -> int:
        """Sweep completed operations out of every watch list; returns entries removed."""
        removed = 0
        for key in list(self._watchers):
            ops = self._watchers[key]
            keep = [op for op in ops if not op.completed]
            removed += len(ops) - len(keep)
            if keep:
                self._watchers[key] = keep
            else:
                del self._watchers[key]
        self._entries -= removed
        return removed

    def shutdown(self) -> int:
        """Cancel every pending operation (``on_cancel`` answers or cancels its waiter) and refuse
        new ones. Returns how many were cancelled."""
        self._shutdown = True
        pending = list(self._pending)
        for op in pending:
            op.cancel()
        self._watchers.clear()
        self._entries = self._live_entries = 0
        return len(pending)

    # ---- introspection ----------------------------------------------------------------------------
    def delayed(self) -> int:
        """Operations still pending (watched, not completed)."""
        return len(self._pending)

    def delayed_for(self, key: Hashable) -> int:
        """Operations still pending under ``key``."""
        return sum(1 for op in self._watchers.get(key, ()) if not op.completed)

    def watched(self) -> int:
        """Watch entries over all keys, including completed ones not yet purged."""
        return self._entries

    def num_keys(self) -> int:
        return len(self._watchers)

    @property
    def is_shutdown(self) -> bool:
        return self._shutdown
