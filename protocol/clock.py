"""The one clock for the whole code base: wall-clock and monotonic milliseconds.

Anyone may import it (protocol/ is the bottom layer); it calls only the stdlib ``time`` (reading the
clock is not I/O). ``now_ms`` is Kafka's ``Time.milliseconds()``, ``monotonic_ms`` its ``Time.hiResClockMs()``.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (record timestamps, deadlines stored or sent)."""
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """Monotonic milliseconds (timers and sessions that must not jump with the wall clock)."""
    return int(time.monotonic() * 1000)
