"""Liveness judged by answers, and restarts with backoff: the pure logic under a broker's supervision of its
controller (``SessionTimer``) and of its replica actors (``ReplicaSupervision``). No Ray, no clock (every
method takes ``now_ms``); owned by controller_link and replica_supervisor on the broker's event loop.
docs/internals.md ("Liveness") has the rules. A replica incarnation's states, and their only transitions
(asserted)::

    STARTING --answered--> RUNNING           (or RUNNING at once: started with the pid its bind answered)
    STARTING | RUNNING --died--> DEAD        (its long-poll raised, or it stayed silent: frozen)
    STARTING | RUNNING --stopped--> STOPPED  (StopReplica, shutdown, a newer incarnation)
"""

from __future__ import annotations

from dataclasses import dataclass, field

STARTING, RUNNING, DEAD, STOPPED = "starting", "running", "dead", "stopped"
_TRANSITIONS = {STARTING: {RUNNING, DEAD, STOPPED}, RUNNING: {DEAD, STOPPED}, DEAD: set(), STOPPED: set()}

RESTART_BACKOFF_MS = 500
RESTART_BACKOFF_MAX_MS = 30_000
RESTART_STABLE_MS = 60_000


class SessionTimer:
    def __init__(self, timeout_ms: int, now_ms: int, stall_ms: int | None = None):
        if timeout_ms <= 0:
            raise ValueError(f"session timeout must be positive, got {timeout_ms}")
        self.timeout_ms = timeout_ms
        self.stall_ms = stall_ms if stall_ms is not None else max(1, timeout_ms // 2)
        self.last_answer_ms = now_ms  # a session starts alive
        self.last_tick_ms = now_ms

    def answered(self, sent_ms: int) -> None:
        """An answer came to a request sent at ``sent_ms``: the peer was alive then."""
        self.last_answer_ms = max(self.last_answer_ms, sent_ms)

    def tick(self, now_ms: int) -> None:
        if now_ms - self.last_tick_ms > self.stall_ms:  # we were not looking: not the peer's fault
            self.last_answer_ms = max(self.last_answer_ms, now_ms)
        self.last_tick_ms = max(self.last_tick_ms, now_ms)

    def silent_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.last_answer_ms)

    def expired(self, now_ms: int) -> bool:
        return self.silent_ms(now_ms) > self.timeout_ms


class InvalidTransition(AssertionError):
    """A supervision state change outside the documented transitions: a bug, never input."""


@dataclass
class Incarnation:
    key: tuple
    seq: int
    started_ms: int
    timer: SessionTimer
    state: str = STARTING
    pid: int | None = None

    def move(self, to: str) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise InvalidTransition(f"replica {self.key} incarnation {self.seq}: {self.state} -> {to}")
        self.state = to


@dataclass
class _Restarts:
    deaths: int = 0
    last_start_ms: int = 0


@dataclass
class ReplicaSupervision:
    session_timeout_ms: int
    current: dict = field(default_factory=dict)  # key -> Incarnation (the latest one)
    _restarts: dict = field(default_factory=dict)
    _seq: int = 0

    def started(self, key: tuple, now_ms: int, pid: int | None = None) -> Incarnation:
        """A new replica actor was created for ``key``; an older incarnation still tracked is stopped. With
        ``pid`` (its bind answered: its log is open) it is RUNNING at once, judged by its answers."""
        old = self.current.get(key)
        if old is not None and old.state in (STARTING, RUNNING):
            old.move(STOPPED)
        self._seq += 1
        inc = Incarnation(key, self._seq, now_ms, SessionTimer(self.session_timeout_ms, now_ms))
        if pid is not None:
            inc.move(RUNNING)
            inc.pid = pid
        self.current[key] = inc
        r = self._restarts.setdefault(key, _Restarts())
        if r.deaths and now_ms - r.last_start_ms >= RESTART_STABLE_MS:
            r.deaths = 0
        r.last_start_ms = now_ms
        return inc

    def _live(self, key: tuple, seq: int) -> Incarnation | None:
        inc = self.current.get(key)
        if inc is None or inc.seq != seq or inc.state not in (STARTING, RUNNING):
            return None
        return inc

    def answered(self, key: tuple, seq: int, sent_ms: int, pid: int | None = None) -> None:
        inc = self._live(key, seq)
        if inc is None:
            return
        if inc.state == STARTING:
            inc.move(RUNNING)
            inc.timer.last_answer_ms = sent_ms
        inc.timer.answered(sent_ms)
        if pid is not None:
            inc.pid = pid

    def tick(self, now_ms: int) -> None:
        for inc in self.current.values():
            inc.timer.tick(now_ms)

    def frozen(self, now_ms: int) -> list[Incarnation]:
        """RUNNING incarnations silent for longer than the session timeout."""
        return [inc for inc in self.current.values() if inc.state == RUNNING and inc.timer.expired(now_ms)]

    def died(self, key: tuple, seq: int, now_ms: int) -> bool:
        """True the first time the death of this (still current, live) incarnation is reported."""
        inc = self._live(key, seq)
        if inc is None:
            return False
        inc.move(DEAD)
        r = self._restarts.setdefault(key, _Restarts())
        if now_ms - r.last_start_ms >= RESTART_STABLE_MS:
            r.deaths = 0
        r.deaths += 1
        return True

    def stopped(self, key: tuple, seq: int | None = None) -> None:
        """StopReplica / shutdown: the incarnation (any, when ``seq`` is None) ends on purpose."""
        inc = self.current.get(key)
        if inc is None or (seq is not None and inc.seq != seq):
            return
        if inc.state in (STARTING, RUNNING):
            inc.move(STOPPED)
        del self.current[key]

    def forget(self, key: tuple) -> None:
        """The partition left this broker: no restart history kept."""
        self.stopped(key)
        self._restarts.pop(key, None)

    def restart_delay_ms(self, key: tuple) -> int:
        deaths = self._restarts.get(key, _Restarts()).deaths
        if deaths <= 1:
            return 0
        return min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_MS * (1 << min(deaths - 2, 16)))
