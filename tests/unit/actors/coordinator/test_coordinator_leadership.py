"""Which leadership news a coordinator acts on (actors/coordinator/leadership.py)."""

from __future__ import annotations

from actors.coordinator.leadership import LeaderEpochs


def test_elections_load_once_per_epoch_and_ignore_older_news():
    e = LeaderEpochs()
    assert e.elected(0, 3, None, False)  # first news: load
    assert not e.elected(0, 3, 3, True)  # the same epoch again, loaded: nothing to do
    assert e.elected(0, 3, 3, False)  # the same epoch but the load failed: load again
    assert not e.elected(0, 2, 3, True)  # older news
    assert e.elected(0, 4, 3, True) and e.newest[0] == 4
    assert e.elected(1, 0, None, False)  # partitions are independent


def test_resignations_unload_only_what_they_are_newer_than():
    e = LeaderEpochs()
    e.elected(0, 5, None, False)
    assert e.resigned(0, 4, 5) is None  # older than the election: stale
    assert e.resigned(0, 6, 5) is True and e.newest[0] == 6
    assert e.resigned(0, 6, None) is False  # nothing loaded
    assert e.resigned(0, None, 5) is True  # stopped: unload whatever is there
