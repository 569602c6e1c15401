"""Topic configs over the wire without Ray (test_wire_admin's in-memory backend over the controller's real logic):
CreateTopics with Kafka's standard configs that rafka stores only, DescribeConfigs showing them with their source,
and the legacy AlterConfigs (api key 33, v0-2) with Kafka's replace-all semantics."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.alter_configs.v0 import request as ac0
from kio.schema.alter_configs.v2 import request as ac2
from test_wire_admin import AdminBackend, call, create, describe, topic

from serve.kafka_wire import versions
from serve.kafka_wire.handlers import configs as configs_handlers


def legacy_alter(b, *resources, validate_only=False, mod=ac2):
    res = tuple(
        mod.AlterConfigsResource(
            resource_type=t,
            resource_name=n,
            configs=tuple(mod.AlterableConfig(name=k, value=v) for k, v in configs),
        )
        for t, n, configs in resources
    )
    resp = call(b, mod.AlterConfigsRequest(resources=res, validate_only=validate_only))
    return [(int(r.error_code), r.error_message) for r in resp.responses]


def test_create_topics_accepts_stored_only_kafka_configs_and_describes_them():
    b = AdminBackend()
    got = create(b, topic("z", 1, 1, configs=[("compression.type", "zstd"), ("file.delete.delay.ms", "1000")]))
    assert int(got["z"].error_code) == 0, got["z"].error_message
    v7 = {c.name: (c.value, c.config_source) for c in got["z"].configs}
    assert v7["compression.type"] == ("zstd", 1) and v7["file.delete.delay.ms"] == ("1000", 1)
    assert v7["preallocate"] == ("false", 5)
    (r,) = describe(b, (2, "z", None))
    cfg = {c.name: c for c in r.configs}
    assert (cfg["compression.type"].value, cfg["compression.type"].config_source) == ("zstd", 1)
    assert int(cfg["compression.type"].config_type) == 2  # STRING
    assert (cfg["remote.storage.enable"].value, cfg["remote.storage.enable"].config_source) == ("false", 5)
    bad = create(b, topic("y", 1, 1, configs=[("compression.type", "brotli")]))
    assert int(bad["y"].error_code) == 40
    assert bad["y"].error_message == (
        "Invalid value brotli for configuration compression.type: String must be one of: "
        "uncompressed, zstd, lz4, snappy, gzip, producer"
    )


@pytest.mark.parametrize("mod", [ac0, ac2])
def test_legacy_alter_configs_replaces_all_topic_overrides(mod):
    assert versions.SUPPORTED[versions.ALTER_CONFIGS] == (0, 2)
    b = AdminBackend()
    create(b, topic("r", 1, 1, configs=[("retention.ms", "60000"), ("preallocate", "true")]))
    overrides = lambda: dict(b.logic.image.topics["r"].configs)  # noqa: E731
    given = [("max.message.bytes", "65536"), ("compression.type", "lz4")]
    assert legacy_alter(b, (2, "r", given), validate_only=True, mod=mod) == [(0, None)]
    assert overrides() == {"retention.ms": "60000", "preallocate": "true"}  # validate_only: nothing changed
    assert legacy_alter(b, (2, "r", given), mod=mod) == [(0, None)]
    assert overrides() == {"max.message.bytes": "65536", "compression.type": "lz4"}  # the others deleted
    (r,) = describe(b, (2, "r", ("retention.ms", "compression.type")))
    assert {c.name: (c.value, c.config_source) for c in r.configs} == {
        "retention.ms": ("604800000", 5),
        "compression.type": ("lz4", 1),
    }
    assert legacy_alter(b, (2, "r", []), mod=mod) == [(0, None)]
    assert overrides() == {}


def test_legacy_alter_configs_errors():
    b = AdminBackend()
    create(b, topic("e", 1, 1, configs=[("retention.ms", "60000")]))
    got = legacy_alter(
        b,
        (2, "e", [("retention.ms", "soon")]),
        (2, "nope", [("retention.ms", "1")]),
        (4, "0", [("num.partitions", "3")]),
        (4, "7", []),
        (4, "", []),
        (8, "0", []),
    )
    assert [c for c, _ in got] == [40, 3, 40, 42, 0, 42]
    assert got[0][1] == "Invalid value soon for configuration retention.ms: Not a number of type LONG"
    assert got[3][1] == "Unexpected broker id, expected 0, but received 7"
    assert got[5][1] == "Unknown resource type 8"
    assert dict(b.logic.image.topics["e"].configs) == {"retention.ms": "60000"}  # a refused set changes nothing
    dup = legacy_alter(b, (2, "e", [("retention.ms", "1"), ("retention.ms", "2")]), (2, "e", []))
    assert dup == [(42, "Each resource must appear at most once.")] * 2
    assert legacy_alter(b, (2, "e", [("retention.ms", "1"), ("retention.ms", "2")]))[0] == (
        42,
        "Error due to duplicate config keys",
    )
    assert legacy_alter(b, (2, "e", [("unknown.key", "1")]))[0] == (40, "Unknown topic config name: unknown.key")
    assert legacy_alter(b, (2, "", []))[0] == (42, "Default topic resources are not allowed.")


class SlowController(AdminBackend):
    """The controller as a separate actor: every call yields to the event loop before it is served, and the
    writes are served one at a time (the controller's lock), so two requests' calls interleave as over Ray."""

    async def describe_configs(self, topic):
        await asyncio.sleep(0.01)
        return await super().describe_configs(topic)

    async def alter_configs(self, topic, set_, delete, validate_only, replace=False):
        await asyncio.sleep(0.01)
        return await super().alter_configs(topic, set_, delete, validate_only, replace)


def test_two_concurrent_legacy_alter_configs_never_mix():
    # Kafka's controller replaces a resource's configs in one write (ConfigurationControlManager
    # .legacyAlterConfigResource in QuorumController.legacyAlterConfigs' write event): whichever replace comes
    # last leaves exactly its own configs. A read of the overrides in the handler, then a write, lets two
    # replaces read the same old set and leave a mix of both.
    b = SlowController()
    create(b, topic("race", 1, 1, configs=[("preallocate", "true")]))
    sets = [[("retention.ms", "60000")], [("max.message.bytes", "65536"), ("compression.type", "lz4")]]

    async def both():
        reqs = [
            ac2.AlterConfigsRequest(
                resources=(
                    ac2.AlterConfigsResource(
                        resource_type=2,
                        resource_name="race",
                        configs=tuple(ac2.AlterableConfig(name=k, value=v) for k, v in given),
                    ),
                ),
                validate_only=False,
            )
            for given in sets
        ]
        return await asyncio.gather(*(configs_handlers.alter_configs(b, r, 2) for r in reqs))

    answers = asyncio.run(both())
    assert [int(a.responses[0].error_code) for a in answers] == [0, 0]
    final = dict(b.logic.image.topics["race"].configs)
    assert final in (dict(sets[0]), dict(sets[1])), final
