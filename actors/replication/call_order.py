"""Kafka's per-connection request order at a replica: ``CallOrder`` lets the n-th ordered produce of a channel
(``order = (channel, n)``) start once call n-1 left, and skips a gap that does not fill within ``gap_wait_s``.
Held by the replica's write path (leader_writes.py); the client and produce listeners number their connections'
produces. Runs on the callee's event loop only; why: docs/internals.md, "Replication: module notes"."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from protocol.errors import InvalidRequestError

log = logging.getLogger("rafka.replica")

GAP_WAIT_S = 1.0  # how long call n waits for calls < n before they are taken as lost
MAX_CHANNELS = 4096


def check_order(order) -> tuple[str, int] | None:
    """``order`` if it is None or ``(channel: str, n: int >= 0)``, else INVALID_REQUEST."""
    if order is None:
        return None
    if (
        type(order) is not tuple
        or len(order) != 2
        or type(order[0]) is not str
        or type(order[1]) is not int
        or order[1] < 0
    ):
        raise InvalidRequestError(f"order must be (channel: str, n: int >= 0), got {order!r:.60}")
    return order


class _Channel:
    __slots__ = ("turn", "waiters")

    def __init__(self):
        self.turn = 0  # the lowest number that has not left; it only grows
        self.waiters: dict[int, asyncio.Future] = {}


class CallOrder:
    def __init__(self, gap_wait_s: float = GAP_WAIT_S, max_channels: int = MAX_CHANNELS):
        self.gap_wait_s = gap_wait_s
        self.max_channels = max_channels
        self._channels: OrderedDict[str, _Channel] = OrderedDict()
        self.stats = {"waited": 0, "gaps_skipped": 0, "late": 0}

    def _channel(self, name: str) -> _Channel:
        ch = self._channels.get(name)
        if ch is None:
            # a new channel starts at 0; one forgotten beyond max_channels comes back with a higher number,
            # and a number seen first cannot be told from either: waiting for 0 is bounded by the gap wait
            ch = self._channels[name] = _Channel()
            self._prune()
        else:
            self._channels.move_to_end(name)
        return ch

    def _prune(self) -> None:
        while len(self._channels) > self.max_channels:
            for name, ch in self._channels.items():  # least recently used first
                if not ch.waiters:
                    del self._channels[name]
                    break
            else:
                return

    async def enter(self, order) -> None:
        """Wait until every earlier call of ``order``'s channel left (at most ``gap_wait_s``)."""
        order = check_order(order)
        if order is None:
            return
        name, n = order
        ch = self._channel(name)
        if n < ch.turn:
            self.stats["late"] += 1
            return
        if n == ch.turn:
            return
        if n in ch.waiters:
            raise InvalidRequestError(f"call {n} of channel {name} came twice")
        fut = asyncio.get_running_loop().create_future()
        ch.waiters[n] = fut
        self.stats["waited"] += 1
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.gap_wait_s)
        except asyncio.TimeoutError:
            if n > ch.turn:
                log.warning(
                    "channel %s: calls %d..%d did not come within %.1f s: taken as lost, call %d goes on",
                    name,
                    ch.turn,
                    n - 1,
                    self.gap_wait_s,
                    n,
                )
                self.stats["gaps_skipped"] += 1
                ch.turn = n
                self._advance(ch)
        finally:
            if ch.waiters.get(n) is fut:
                del ch.waiters[n]

    def leave(self, order) -> None:
        """Call ``order`` did what had to happen in order: the channel's next call may start. Idempotent. A
        call only runs once ``turn`` reached its number, so it leaves at ``turn`` or (late) below it."""
        if order is None:
            return
        name, n = order
        ch = self._channels.get(name)
        if ch is None or n != ch.turn:
            return
        ch.turn = n + 1
        self._advance(ch)

    @staticmethod
    def _advance(ch: _Channel) -> None:
        for n, fut in ch.waiters.items():  # the next call, and any below it once a gap was skipped
            if n <= ch.turn and not fut.done():
                fut.set_result(None)

    def describe(self) -> dict:
        return {"channels": len(self._channels), **self.stats}
