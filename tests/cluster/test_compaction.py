"""The log cleaner runs inside replica actors: a compacted topic keeps the latest value per key on the
leader and on its followers, with offsets preserved."""

from __future__ import annotations

import pytest
import ray
from support import full_isr, keyed_batch, read_records, rstate, wait_until

from actors.bootstrap import start_cluster
from protocol.messages import ProduceRequest

pytestmark = pytest.mark.cluster


def test_compacted_topic_is_cleaned_by_its_replicas(ray_cluster, cluster_name, tmp_path):
    ch = start_cluster(cluster_name, 2, str(tmp_path), broker_config={"log.cleaner.backoff.ms": 200})
    try:
        ch.create_topic(
            "compacted",
            1,
            2,
            {"cleanup.policy": "compact", "internal.segment.bytes": "4096", "min.compaction.lag.ms": "0"},
        )
        leader, h = full_isr(ch, "compacted", n=2)
        latest = {}
        for round_ in range(8):
            pairs = [(b"k%d" % k, b"r%d-v%d" % (round_, k) + b"x" * 60) for k in range(10)]
            latest.update(pairs)
            assert ray.get(h.produce.remote(ProduceRequest(keyed_batch(pairs), -1, 5000)))["error_code"] == 0
        st = wait_until(
            lambda: (lambda s: s if s["stats"].get("compaction_passes") else None)(rstate(h)),
            30,
            "a compaction pass on the leader",
        )
        assert st["stats"]["compaction_records_removed"] > 0
        recs = read_records(h)
        offsets = [r.offset for r in recs]
        assert offsets == sorted(set(offsets)) and offsets[-1] == 79  # offsets preserved, never reused
        assert len(recs) < 80
        # the latest value of every key survives, and is the last record of that key
        last = {}
        for r in recs:
            last[r.key] = r.value
        assert last == latest
        follower = next(b for b in ch.describe("compacted")["partitions"][0]["replicas"] if b != leader)
        fst = wait_until(
            lambda: (lambda s: s if s["stats"].get("compaction_passes") else None)(
                rstate(ch.replica("compacted", 0, follower))
            ),
            30,
            "a compaction pass on the follower",
        )
        assert fst["stats"]["compaction_records_removed"] > 0 and fst["log_end_offset"] == 80
    finally:
        ch.shutdown()
