"""The pure parts of benchmarks/multinode_bench.py: cluster sizes, which broker a fault hits, the writable window
over the partitions it led, the catch-up rate of an empty replica from log-size samples, and the sizing block."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_spec = importlib.util.spec_from_file_location(
    "multinode_bench", os.path.join(ROOT, "benchmarks", "multinode_bench.py")
)
assert _spec and _spec.loader
mb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mb)


def _md(leaders, replicas, controller=0):
    parts = [
        {"partition": q, "leader": ldr, "isr": list(r), "replicas": list(r)}
        for q, (ldr, r) in enumerate(zip(leaders, replicas))
    ]
    return {"controller_id": controller, "topics": [{"name": "t", "partitions": parts}], "brokers": []}


def test_sizes_need_three_nodes_for_rf_3():
    assert mb.parse_sizes("3,5") == [3, 5]
    assert mb.parse_sizes("") == []
    with pytest.raises(ValueError, match="at least 3"):
        mb.parse_sizes("1,3")


def test_brokers_map_to_the_node_whose_data_dir_holds_their_log_dir():
    brokers = [{"id": 0, "log_dir": "/r/n0/data/broker-0"}, {"id": 1, "log_dir": "/r/n1/data/broker-1"}]
    assert mb.node_of_brokers(brokers, ["/r/n0/data", "/r/n1/data", "/r/n10/data"]) == {0: 0, 1: 1}
    assert mb.node_of_brokers([{"id": 2, "log_dir": "/r/n10/data/broker-2"}], ["/r/n1/data", "/r/n10/data"]) == {2: 1}


def test_the_victim_is_off_the_head_and_leads_the_most():
    md = _md([0, 0, 0, 1, 2, 2], [[0, 1, 2]] * 6)
    assert mb.pick_victim(md, {0: 0, 1: 1, 2: 2}, ["t"]) == 2  # broker 0 leads more but is on the head
    # not the controller's host while another broker is off the head, even one leading less
    md = _md([1, 1, 2], [[0, 1, 2]] * 3, controller=1)
    assert mb.pick_victim(md, {0: 0, 1: 1, 2: 2}, ["t"]) == 2
    assert mb.pick_victim(md, {0: 0, 1: 1}, ["t"]) == 1  # the only one there is
    # by replicas: the broker holding the most
    md = _md([0, 0, 0], [[0, 1, 2], [0, 3, 2], [0, 3, 2]])
    assert mb.pick_victim(md, {0: 0, 1: 1, 2: 2, 3: 3}, ["t"], by="replica") == 2
    md = _md([0, 0], [[0, 1, 2], [0, 1, 2]])  # a tie, and no controller among them: the lowest id
    assert mb.pick_victim(md, {0: 0, 1: 1, 2: 2}, ["t"], by="replica") == 1
    with pytest.raises(ValueError):
        mb.pick_victim(md, {0: 0}, ["t"])


def test_worst_writable_is_none_when_a_partition_never_came_back():
    win = {"writable_s": {0: 1.5, 1: 3.0, 2: 0.2}}
    assert mb.worst_writable(win, [0, 1]) == 3.0
    assert mb.worst_writable(win, [0, 4]) is None
    assert mb.worst_writable(win, []) is None


def test_catchup_rate_is_counted_from_the_first_byte_not_from_the_node_start():
    # node started at 100, first byte at 110, 100 MB at 120 (ISR whole), registered at 108
    samples = [(100.0, 0), (105.0, 0), (110.0, 1), (112.0, 10_000_000), (119.0, 90_000_000), (120.0, 100_000_000)]
    samples.append((121.0, 100_000_000))
    out = mb.catchup_rate(samples, 120.0, 108.0)
    assert out["bytes"] == 100_000_000 and out["mb"] == 100.0
    assert out["first_byte_to_isr_s"] == 10.0 and out["mb_per_s"] == 10.0
    assert out["registered_to_isr_s"] == 12.0 and out["mb_per_s_from_registration"] == pytest.approx(8.33, abs=0.01)
    assert out["copy_10_90_mb_per_s"] == pytest.approx(80 / 7, abs=0.01)
    assert mb.catchup_rate([(1.0, 0)], 2.0, None) == {"bytes": 0, "mb": 0.0}


def test_sizing_from_a_run():
    res = {
        "nodes_3": {
            "nodes": 3,
            "produce": {"mb_per_s": 6.0},
            "catchup": {"mb_per_s": 20.0},
            "failover": {"kill": {"writable_s": 2.5}, "freeze": {"writable_s": None}},
        },
        "one_node_3_brokers": {"nodes": 1, "produce": {"mb_per_s": 9.0}},
        "date": "x",
    }
    assert mb.sizing(res) == {
        "nodes_3_produce_mb_per_s_per_node": 2.0,
        "nodes_3_rereplicate_s_per_gb": 50,
        "nodes_3_kill_writable_s": 2.5,
    }
