"""A whole-cluster restart's choice among the nodes' metadata logs (actors/metadata/log_recovery.py): the log of
the highest metadata version wins, however the records are split between snapshots and deltas; a peer's copy is
read without repairing a torn tail (its owner may be another process)."""

from __future__ import annotations

import random

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.log_recovery import metadata_log_path, newest, read_node_metadata_log
from actors.metadata.store import FRAME, MetadataLog


def _history() -> tuple[list[dict], list[dict]]:
    """The records of a cluster's first controller, and those a second one appended after loading its image."""
    logic = ControllerLogic(MetadataImage(), ControllerConfig(), random.Random(3))
    first: list[dict] = []
    for b in range(3):
        recs = logic.register_broker(b, {"rack": None, "log_dir": f"/d/{b}"})[0]
        first += recs
        for r in recs:
            logic.image.replay(r)
    recs, _ = logic.create_topics([{"name": "a", "num_partitions": 2, "replication_factor": 3}])
    first += recs
    for r in recs:
        logic.image.replay(r)
    # the second controller: a snapshot of the image it loaded, then its own commits
    second = logic.image.snapshot_records()
    recs, _ = logic.create_topics([{"name": "after", "num_partitions": 1, "replication_factor": 3}])
    second += recs
    return first, second


def test_the_log_of_the_highest_version_wins():
    first, second = _history()
    v1, v2 = MetadataImage.from_records(first).version, MetadataImage.from_records(second).version
    assert v2 > v1
    broker, version, records = newest({0: first, 1: [], 2: second})
    assert (broker, version) == (2, v2) and "after" in MetadataImage.from_records(records).topics
    # a log that is only a snapshot of an older image loses to the one with the commits after it
    assert newest({0: second, 1: MetadataImage.from_records(first).snapshot_records()})[0] == 0
    # equal versions: the lowest broker id, so every controller would choose alike
    assert newest({5: second, 3: list(second)})[0] == 3


def test_no_log_anywhere():
    assert newest({}) == (None, -1, [])
    assert newest({0: [], 1: []}) == (None, -1, [])


def test_a_peer_reads_a_torn_log_without_truncating_it(tmp_path):
    first, _ = _history()
    path = metadata_log_path(str(tmp_path))
    MetadataLog(path).append(first)
    with open(path, "ab") as f:  # a frame cut short by a crash mid-write
        f.write(FRAME.pack(100, 0) + b"xx")
    size = len(open(path, "rb").read())
    assert read_node_metadata_log(str(tmp_path)) == first
    assert len(open(path, "rb").read()) == size  # left for its owner to repair
    assert MetadataLog(path).read_all() == first  # the owner does
    assert len(open(path, "rb").read()) < size
    assert read_node_metadata_log(str(tmp_path / "nowhere")) == []
    assert not (tmp_path / "nowhere").exists()
