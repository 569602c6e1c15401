"""The GCS's node table, read from the host by NodeCluster in a child process (run by file path, so the test
process itself never imports Ray nor switches on token auth): ``gcs_probe.py ADDRESS nodes`` prints the nodes as
JSON; ``gcs_probe.py ADDRESS wait SPEC`` polls every 50 ms until SPEC holds and prints how long it took.

SPEC (JSON): ``{"alive": [[address, [node ids it must not be]], ...], "dead": [node id, ...], "timeout": s}``."""

from __future__ import annotations

import json
import sys
import time


def nodes(client) -> list[dict]:
    out = []
    for info in client.get_all_node_info(timeout=5).values():
        out.append(
            {
                "node_id": info.node_id.hex(),
                "address": info.node_manager_address,
                "alive": info.state == 0,
                "labels": {k: v for k, v in info.labels.items() if k != "ray.io/node-id"},
                "resources": dict(info.resources_total),
                "end_time_ms": info.end_time_ms,
                "death": info.death_info.reason_message,
            }
        )
    return out


def satisfied(table: list[dict], spec: dict) -> bool:
    alive = {(n["address"], n["node_id"]) for n in table if n["alive"]}
    for address, not_ids in spec.get("alive", []):
        if not any(a == address and i not in not_ids for a, i in alive):
            return False
    dead = {n["node_id"] for n in table if not n["alive"]}
    return all(i in dead for i in spec.get("dead", []))


def main(argv: list[str]) -> int:
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # a Cython class without stubs

    address, command = argv[0], argv[1]
    client = GcsClient(address=address)
    if command == "nodes":
        print(json.dumps(nodes(client)))
        return 0
    spec = json.loads(argv[2])
    start = time.monotonic()
    deadline = start + float(spec.get("timeout", 60))
    table: list[dict] = []
    while True:
        try:
            table = nodes(client)
        except Exception as e:  # the GCS is still starting, or frozen
            table = [{"error": str(e)}]
        if satisfied([n for n in table if "error" not in n], spec):
            print(json.dumps({"elapsed_s": time.monotonic() - start, "nodes": table}))
            return 0
        if time.monotonic() > deadline:
            print(json.dumps({"elapsed_s": None, "nodes": table}))
            return 1
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
