"""The README's notebook tour, run as written (its code block extracted from README.md) twice in one cluster:
the package's shared 3-broker cluster stands in for the tour's ``LocalCluster(...)`` line (and is not stopped
by its last line), so the second run finds the topic, the data and the transactional id of the first
(create-if-absent) and must not fail. (The terminal tour's produce and Spark job steps run as written in
tests/e2e/test_spark_jobs.py.)"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_blocks(lang: str) -> list[str]:
    """The README's fenced code blocks of ``lang``, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_notebook_tour_runs_twice_in_one_cluster(rafka_cluster, admin):
    (code,) = [b for b in readme_blocks("python") if "LocalCluster" in b]
    lines = code.splitlines()
    start = [i for i, x in enumerate(lines) if x.startswith("cluster = rafka.LocalCluster(")]
    stop = [i for i, x in enumerate(lines) if x.startswith("cluster.stop()")]
    assert len(start) == 1 and len(stop) == 1, code
    lines[start[0]], lines[stop[0]] = "cluster = shared_cluster", "pass"
    program = compile("\n".join(lines), str(README), "exec")
    assert "clicks" not in admin.list_topics()
    sent = []
    try:
        for _ in range(2):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(program, {"__name__": "readme_tour", "shared_cluster": rafka_cluster})  # noqa: S102
            text = out.getvalue()
            assert "leader" in text, text  # describe_topics printed
            ((partition, offset),) = re.findall(r"RecordMetadata\(topic='clicks', partition=(\d+), offset=(\d+)", text)
            sent.append((int(partition), int(offset)))
        # the same key to the same partition, after the first run's record: one topic, written twice
        assert sent[1][0] == sent[0][0] and sent[1][1] > sent[0][1], sent
        assert admin.describe_topics(["clicks"])  # still the one topic
    finally:
        if "clicks" in admin.list_topics():
            admin.delete_topics(["clicks"])
