"""Deposing a silent controller on another node is a majority's call (actors/server/controller_link.py): a broker
cut off from the controller alone, as in a network partition, must not depose the controller the other brokers
still reach (issue 46 section 5's first fault; a KRaft controller is likewise elected by a majority)."""

from __future__ import annotations

from actors.server.controller_link import silent_majority, silent_vote_key


def test_a_broker_alone_in_finding_the_controller_silent_does_not_depose_it():
    assert not silent_majority({2: 1000}, brokers=3, now_ms=1500, fresh_ms=10_000)
    assert not silent_majority({2: 1000, 3: 1000}, brokers=5, now_ms=1500, fresh_ms=10_000)


def test_a_majority_of_the_brokers_deposes_it():
    assert silent_majority({0: 1000, 1: 1200}, brokers=3, now_ms=1500, fresh_ms=10_000)
    assert silent_majority({0: 1000, 1: 1000, 4: 1000}, brokers=5, now_ms=1500, fresh_ms=10_000)
    assert silent_majority({0: 1000}, brokers=1, now_ms=1500, fresh_ms=10_000)  # a one-broker cluster: itself


def test_stale_votes_do_not_count():
    # broker 0 voted long ago (then died, or heard the controller again without withdrawing): only 1 fresh vote
    assert not silent_majority({0: 1000, 1: 50_000}, brokers=3, now_ms=51_000, fresh_ms=10_000)
    assert silent_majority({0: 45_000, 1: 50_000}, brokers=3, now_ms=51_000, fresh_ms=10_000)


def test_votes_are_kept_per_controller_epoch():
    assert silent_vote_key(7, 2) == "controller_silent/7/2"
    assert silent_vote_key(7, 2) != silent_vote_key(8, 2)
