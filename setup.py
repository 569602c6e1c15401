"""Build wiring for the one C extension (everything else is declared in pyproject.toml).

``storage._crecords`` is the compiled RecordBatch v2 record decoder that ``storage.records`` uses when
it imports (``storage.records.ACCELERATED``); ``pip install -e .`` / ``pip install .`` compile it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "storage._crecords",
            sources=[
                "storage/_crecords.c",
                "storage/_crecords_encode.c",
                "storage/_crecords_validate.c",
                "storage/_crecords_place.c",
            ],
            depends=["storage/_crecords.h"],
        ),
    ],
)
