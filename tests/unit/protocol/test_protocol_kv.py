"""protocol.kv: the GCS-KV layout and encoding (pure parts; the Ray reader runs in the cluster tests)."""

from protocol import kv as K


def test_layout():
    assert K.kv_namespace("c") == "rafka:c"
    assert K.topic_key("t") == "topics/t" and K.key_suffix(K.topic_key("a/b")) == "a/b"
    assert K.broker_key(3) == "brokers/3" and int(K.key_suffix(K.broker_key(3))) == 3
    assert K.controller_epoch_key(7) == "controller_epoch/7"
    assert K.topic_key("x").startswith(K.TOPICS) and K.broker_key(0).startswith(K.BROKERS)
    assert K.controller_epoch_key(1).startswith(K.CONTROLLER_EPOCHS)


def test_pack_round_trip():
    v = {"name": "t", "partitions": {0: {"isr": [1, 2], "leader": 1}}, "topic_id": b"\x00\x01"}
    assert K.unpack(K.pack(v)) == v


def test_strip_listed_key():
    # Ray 2.60 lists keys of namespace "rafka:c" as "c:topics/x"
    assert K.strip_listed_key("c", "topics/", b"c:topics/x") == "topics/x"
    assert K.strip_listed_key("c", "topics/", "topics/x") == "topics/x"
    # a topic whose name starts like the junk is kept when it already starts with the prefix
    assert K.strip_listed_key("topics", "topics/", "topics/x") == "topics/x"
