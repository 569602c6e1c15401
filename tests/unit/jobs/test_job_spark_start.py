"""``rafka job run`` starts Spark on a thread beside the job's first steps (jobs/cli.py ``SparkStart``): the
session is waited for only when asked, a failed start is one line, and stop always waits for the start to end
before stopping what it started."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.cli import SparkStart, SparkStartError


def test_the_start_runs_beside_the_caller_and_session_waits_for_it():
    release = threading.Event()
    started_on = []

    def start():
        started_on.append(threading.current_thread().name)
        release.wait(10)
        return "session"

    t0 = time.monotonic()
    s = SparkStart(start)
    assert time.monotonic() - t0 < 1  # the constructor does not wait for the start
    threading.Timer(0.2, release.set).start()
    assert s.session() == "session"
    assert started_on and started_on[0].startswith("spark-start")
    stopped = []
    s.stop(lambda: stopped.append(True))
    assert stopped == [True]


def test_a_failed_start_is_one_line_and_is_still_stopped():
    def start():
        raise RuntimeError("Java gateway process exited before sending its port number\n\tat java.lang...")

    s = SparkStart(start)
    with pytest.raises(SparkStartError, match=r"^Java gateway process exited before sending its port number$"):
        s.session()
    stopped = []
    s.stop(lambda: stopped.append(True))  # a half-started Spark (RayDP's AppMaster) is cleaned up too
    assert stopped == [True]


def test_stop_waits_for_a_start_still_under_way():
    release = threading.Event()
    order = []

    def start():
        release.wait(10)
        order.append("started")
        return "session"

    s = SparkStart(start)
    threading.Timer(0.3, release.set).start()
    s.stop(lambda: order.append("stopped"))  # the run needed no Spark: stop still comes after the start
    assert order == ["started", "stopped"]
