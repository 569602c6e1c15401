"""The web console (serve/console.py) on the gateway, driven as a user would: pages rendered in headless
Chromium (a screenshot of each, kept under the test's tmp dir and named in the output), the forms posted,
and every figure checked against what the cluster says. /docs must work offline: no asset from a CDN."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

import rafka
from rafka import TopicPartition

pytestmark = pytest.mark.cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def console(gateway):
    """The console is served by the package's gateway (tests/e2e/conftest.py)."""
    return gateway


def chromium(url: str, out_png, dom: bool = False) -> str:
    """Render ``url`` in headless Chromium: a 1300x900 screenshot to ``out_png``; the DOM after scripts ran
    when ``dom`` (one browser run does both: ``--screenshot`` and ``--dump-dom`` of the same page load).
    The screenshot must be a real, non-trivial PNG."""
    assert CHROMIUM, "chromium is not installed (.ci/run installs the Debian package)"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]
    shot = subprocess.run(
        [*base, f"--screenshot={out_png}", "--window-size=1300,900", *(["--dump-dom"] if dom else []), url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    head = out_png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1300, 900)
    assert out_png.stat().st_size > 8000, f"{out_png} looks blank"
    print(f"screenshot {url} -> {out_png}")
    if not dom:
        return ""
    assert "<html" in shot.stdout and "</html>" in shot.stdout, shot.stdout[:500]
    return shot.stdout


def render_all(pages: dict[str, str], shots) -> dict[str, str]:
    """``chromium(url, shots/<name>.png, dom=True)`` for every page at once (one browser process each: a run
    mostly waits, ~2 s for ~0.5 s of CPU); ``{name: DOM}``, every run checked as ``chromium`` checks it."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(pages)) as pool:
        futs = {k: pool.submit(chromium, url, shots / f"{k}.png", True) for k, url in pages.items()}
        doms = {k: f.result() for k, f in futs.items()}
    print(f"{len(pages)} pages rendered in {time.monotonic() - t0:.2f}s")
    return doms


def cells(html: str) -> list[list[str]]:
    """The table rows of a page as lists of cell texts (tags stripped)."""
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S):
        tds = re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)
        if tds:
            rows.append([htmllib.unescape(re.sub(r"<[^>]+>", "", td)).strip() for td in tds])
    return rows


def test_console_pages_forms_and_figures(console, e2e_cluster, e2e_admin, tmp_path_factory):
    shots = tmp_path_factory.mktemp("console-screenshots")
    name = "console-clicks"
    r = requests.post(
        f"{console}/console/topics",
        data={"name": name, "partitions": "2", "replication_factor": "2", "configs": "retention.ms=7200000"},
        allow_redirects=False,
        timeout=60,
    )
    assert r.status_code == 303 and r.headers["location"].startswith(f"/console/topics/{name}"), r.text[-2000:]
    (desc,) = e2e_admin.describe_topics([name])
    assert len(desc["partitions"]) == 2 and all(len(p["replicas"]) == 2 for p in desc["partitions"])
    with rafka.Producer(e2e_cluster, acks="all") as p:
        for i in range(20):
            p.send(name, json.dumps({"n": i}).encode(), key=b"k%d" % i, partition=0, headers=[("src", b"console")])
        p.send(name, b"\x00\xff\x10", partition=1)
    group = "console-group"
    c = rafka.Consumer(e2e_cluster, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([TopicPartition(name, 0)])
    got, deadline = 0, time.monotonic() + 60
    while got < 20 and time.monotonic() < deadline:
        got += sum(len(v) for v in c.poll(timeout_ms=500).values())
    c.commit({TopicPartition(name, 0): 12})
    c.close()

    # every page rendered (and screenshotted) before the forms below change anything, in parallel
    doms = render_all(
        {
            "brokers": f"{console}/console/brokers",
            "topics": f"{console}/console/topics",
            "topic": f"{console}/console/topics/{name}",
            "messages": f"{console}/console/topics/{name}/messages?partition=0&offset=15&limit=3&format=json",
            "groups": f"{console}/console/groups",
            "group": f"{console}/console/groups/{group}",
        },
        shots,
    )

    # brokers: every broker of the cluster, alive, the active controller marked
    html = doms["brokers"]
    md = e2e_admin.describe_cluster()
    rows = [r for r in cells(html) if r and r[0].isdigit()]
    assert sorted(int(r[0]) for r in rows) == sorted(b["id"] for b in md["brokers"])
    assert [int(r[0]) for r in rows if "controller" in r[2]] == [md["controller_id"]]
    assert all(r[1] == "alive" for r in rows)

    # topics: ours listed, internal ones only on request
    html = doms["topics"]
    listed = [r[0] for r in cells(html)]
    assert name in listed and not any(t.startswith("__") for t in listed)
    assert any(
        t.startswith("__consumer_offsets")
        for t in (r[0] for r in cells(requests.get(f"{console}/console/topics?internal=1", timeout=60).text))
    )

    # one topic: partitions with leader/ISR/HW/size, configs with their source
    html = doms["topic"]
    parts = {int(r[0]): r for r in cells(html) if len(r) == 11}
    ends = e2e_admin.list_offsets({TopicPartition(name, q): "latest" for q in (0, 1)})
    assert (
        {q: int(parts[q][7]) for q in parts}
        == {q: ends[TopicPartition(name, q)].offset for q in (0, 1)}
        == {0: 20, 1: 1}
    )
    for q, row in parts.items():
        d = desc["partitions"][q]
        assert int(row[1]) == d["leader"] and row[3] == ", ".join(map(str, d["replicas"]))
        assert row[9].endswith("B") and row[9] != "0 B" and int(row[10]) >= 1  # size and segments from the leader
    configs = {r[0]: (r[1], r[2]) for r in cells(html) if len(r) == 3}
    assert configs["retention.ms"] == ("7200000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["segment.bytes"][1] == "DEFAULT_CONFIG"

    # the message browser: json pretty-printed, headers, hex for binary, a page from an offset
    html = doms["messages"]
    rows = cells(html)
    assert [int(r[0]) for r in rows] == [15, 16, 17]
    assert rows[0][2] == "k15" and json.loads(rows[0][3]) == {"n": 15} and rows[0][4] == "src: console"
    hexrows = cells(
        requests.get(f"{console}/console/topics/{name}/messages?partition=1&offset=0&format=hex", timeout=60).text
    )
    assert hexrows[0][3] == "00 ff 10" and hexrows[0][2] == "null"
    newest = cells(requests.get(f"{console}/console/topics/{name}/messages?partition=0&offset=-2", timeout=60).text)
    assert [int(r[0]) for r in newest] == [18, 19]

    # groups: the group, its committed offset and lag; a reset previewed changes nothing, applied it does
    html = doms["groups"]
    assert [r for r in cells(html) if r[0] == group]
    html = doms["group"]
    (lag,) = [r for r in cells(html) if len(r) == 6 and r[0] == name]
    assert lag[1:5] == ["0", "12", "20", "8"]
    noshift = requests.post(  # partition 1 has no committed offset: Kafka's tool refuses to shift it too
        f"{console}/console/groups/{group}/reset",
        data={"topic": name, "strategy": "shift", "value": "-100", "action": "preview"},
        timeout=60,
    )
    assert noshift.status_code == 400 and "no committed offset" in noshift.text
    preview = requests.post(  # every committed partition of the group
        f"{console}/console/groups/{group}/reset",
        data={"topic": "", "strategy": "shift", "value": "-100", "action": "preview"},
        timeout=60,
    )
    assert preview.status_code == 200 and "Apply this reset" in preview.text
    plan = [r for r in cells(preview.text) if len(r) == 4 and r[0] == name]
    assert plan == [[name, "0", "12", "0"]]  # shifted below the log start: clamped to it, as Kafka does
    assert e2e_admin.list_consumer_group_offsets(group)[TopicPartition(name, 0)] == 12
    (shot_preview := shots / "reset-preview.html").write_text(preview.text)
    chromium(shot_preview.as_uri(), shots / "reset-preview.png")
    applied = requests.post(
        f"{console}/console/groups/{group}/reset",
        data={"topic": name, "strategy": "offset", "value": "5", "action": "apply"},
        allow_redirects=False,
        timeout=60,
    )
    assert applied.status_code == 303
    assert e2e_admin.list_consumer_group_offsets(group)[TopicPartition(name, 0)] == 5

    # add partitions; delete needs the name typed; errors are pages with Kafka's message, not tracebacks
    r = requests.post(
        f"{console}/console/topics/{name}/partitions", data={"count": "1"}, allow_redirects=False, timeout=60
    )
    assert r.status_code == 303 and len(e2e_admin.describe_topics([name])[0]["partitions"]) == 3
    bad = requests.post(f"{console}/console/topics/{name}/partitions", data={"count": "zero"}, timeout=60)
    assert bad.status_code == 400 and "whole number" in bad.text and "Traceback" not in bad.text
    missing = requests.get(f"{console}/console/topics/no-such-topic", timeout=60)
    assert missing.status_code == 404 and "does not exist" in missing.text
    kept = requests.post(f"{console}/console/topics/{name}/delete", data={"confirm": "nope"}, timeout=60)
    assert kept.status_code == 400 and name in e2e_admin.list_topics()
    gone = requests.post(
        f"{console}/console/topics/{name}/delete", data={"confirm": name}, allow_redirects=False, timeout=60
    )
    assert gone.status_code == 303 and name not in e2e_admin.list_topics()
    chromium(f"{console}/console/topics?message=deleted", shots / "topics-after-delete.png")


def test_api_docs_are_served_without_a_cdn(console, tmp_path_factory):
    """/docs loads Swagger UI from the gateway itself (fastapi-offline): no external URL on the page, the
    assets answer, and Chromium renders the API's title from openapi.json (the script ran)."""
    page = requests.get(f"{console}/docs", timeout=60).text
    assert not re.search(r"""(src|href)=["']https?://""", page), page
    for asset in re.findall(r"""(?:src|href)=["'](/[^"']+)["']""", page):
        assert requests.get(console + asset, timeout=60).status_code == 200, asset
    dom = chromium(f"{console}/docs", tmp_path_factory.mktemp("docs-shot") / "docs.png", dom=True)
    assert "rafka HTTP gateway" in dom and "/console" not in dom  # the console is not part of the REST API
    assert "/topics/{topic}" in dom
