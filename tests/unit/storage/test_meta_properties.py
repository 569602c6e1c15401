"""A log directory's meta.properties (storage/meta_properties.py): one directory.id for the life of the directory."""

from __future__ import annotations

import os

import pytest

from storage.meta_properties import META_PROPERTIES, load_or_create


def test_the_directory_id_is_kept_until_the_directory_is_emptied(tmp_path):
    first = load_or_create(str(tmp_path), 3)
    assert first["node.id"] == "3" and len(first["directory.id"]) == 22
    assert load_or_create(str(tmp_path), 3) == first  # a restart on the same disk
    os.remove(tmp_path / META_PROPERTIES)  # an emptied disk
    assert load_or_create(str(tmp_path), 3)["directory.id"] != first["directory.id"]


def test_a_directory_of_another_broker_is_refused(tmp_path):
    load_or_create(str(tmp_path), 1)
    with pytest.raises(ValueError, match="belongs to node 1, not 2"):
        load_or_create(str(tmp_path), 2)
