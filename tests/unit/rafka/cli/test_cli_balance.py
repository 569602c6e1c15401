"""`rafka cluster balance`'s parsing and its rendering of a plan (the controller's partition_balancer_plan)."""

from __future__ import annotations

import random

import pytest

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.partition_balancer import plan
from rafka.cli.balance import cmd_cluster_balance, render_plan
from rafka.cli.main import build_parser
from rafka.cli.support import UsageError


def _plan(lost: bool) -> dict:
    logic = ControllerLogic(MetadataImage(), ControllerConfig(heal_delay_ms=0), random.Random(1))
    for b in range(4):
        for r in logic.register_broker(b, {"log_dir": f"/d/{b}"})[0]:
            logic.image.replay(r)
    recs, _ = logic.create_topics([{"name": "t", "replica_assignment": [[0, 1, 2], [1, 2, 3]]}])
    for r in recs:
        logic.image.replay(r)
    if lost:
        for r in logic.fence_broker(3):
            logic.image.replay(r)
    return plan(logic.image, logic.config, {3: 1} if lost else {}).to_dict()


def test_a_heal_plan_renders_its_moves_and_the_brokers_after_it():
    text = render_plan(_plan(lost=True))
    assert "TOPIC  PARTITION  REASON  REPLICAS  TARGET" in text
    assert "t      1          heal    1,2,3     1,2,0" in text
    assert "lost brokers (down past replica.auto.heal.delay.ms): [3]" in text
    assert "balance not planned: healing first" in text
    assert "BROKER  REPLICAS  PREFERRED-LEADERS" in text
    assert "0       1 -> 2    1 -> 1" in text  # broker 0 receives the lost broker's replica


def test_a_plan_with_nothing_to_do():
    text = render_plan(_plan(lost=False))
    # 6 replicas on 4 brokers: a mean of 1.5, so 1 or 2 each is within the band
    assert text.startswith("no moves") and "tolerance: replicas 1..2, leaders 0..1 per broker; balanced" in text


def test_balance_needs_one_of_dry_run_and_execute():
    p = build_parser()
    for argv in (["cluster", "balance"], ["cluster", "balance", "--dry-run", "--execute"]):
        args = p.parse_args(argv)
        with pytest.raises(UsageError, match="exactly one of --dry-run"):
            cmd_cluster_balance(args)
    assert p.parse_args(["cluster", "balance", "--execute", "--json"]).execute
