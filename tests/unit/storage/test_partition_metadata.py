"""storage/partition_metadata.py: Kafka's partition.metadata (the topic id of a partition directory)."""

import os

from storage.partition_metadata import PARTITION_METADATA_FILE, prepare_partition_dir, read_topic_id, write_topic_id


def test_written_once_and_read_back(tmp_path):
    d = str(tmp_path / "t-0")
    assert not prepare_partition_dir(d, "id-1")
    with open(os.path.join(d, PARTITION_METADATA_FILE)) as f:
        assert f.read() == "version: 0\ntopic_id: id-1\n"
    assert read_topic_id(d) == "id-1"
    assert not os.path.exists(os.path.join(d, PARTITION_METADATA_FILE + ".tmp"))


def test_same_topic_id_keeps_the_log(tmp_path):
    d = str(tmp_path / "t-0")
    prepare_partition_dir(d, "id-1")
    open(os.path.join(d, "00000000000000000000.log"), "wb").close()
    assert not prepare_partition_dir(d, "id-1")
    assert os.path.exists(os.path.join(d, "00000000000000000000.log"))


def test_other_topic_id_wipes_the_directory(tmp_path):
    d = str(tmp_path / "t-0")
    prepare_partition_dir(d, "old")
    open(os.path.join(d, "00000000000000000000.log"), "wb").close()
    assert prepare_partition_dir(d, "new")
    assert os.listdir(d) == [PARTITION_METADATA_FILE]
    assert read_topic_id(d) == "new"


def test_file_without_topic_id_wipes_and_missing_file_is_none(tmp_path):
    d = str(tmp_path / "t-0")
    assert read_topic_id(d) is None
    os.makedirs(d)
    with open(os.path.join(d, PARTITION_METADATA_FILE), "w") as f:
        f.write("garbage\n")
    assert read_topic_id(d) is None
    assert prepare_partition_dir(d, "id-1")
    assert read_topic_id(d) == "id-1"


def test_write_replaces(tmp_path):
    write_topic_id(str(tmp_path), "a")
    write_topic_id(str(tmp_path), "b")
    assert read_topic_id(str(tmp_path)) == "b"
