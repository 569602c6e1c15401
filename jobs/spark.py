"""Spark on the same Ray cluster (RayDP) and the bridges between Spark DataFrames and rafka topics.

    spark = init_spark("clicks", num_executors=1)
    df = topic_to_spark(spark, cluster, "clicks")              # columns of jobs.datasource.SCHEMA
    spark_to_topic(df.selectExpr("key", "upper(value) AS value"), cluster, "shouted")
    stop_spark()

RayDP 1.6.5 on Java 17 needs the JDK's internals opened to Spark and Arrow (``--add-opens``): without
them ``ray.data.from_spark`` kills RayDP's AppMaster. The flags go on the AppMaster, the driver and the
executors (``ray-notes.md``). Spark's console progress bar stays on (it is how a long stage shows its
progress on stderr); Spark's own INFO logs are turned down to WARN.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

__all__ = ["JAVA17_OPENS", "init_spark", "stop_spark", "topic_to_spark", "spark_to_topic"]

_OPENED = (
    "java.lang",
    "java.lang.invoke",
    "java.lang.reflect",
    "java.lang.ref",
    "java.math",
    "java.text",
    "java.time",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "java.util.concurrent.locks",
    "java.util.regex",
    "java.io",
    "java.net",
    "java.nio",
    "java.security",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
    "jdk.internal.misc",
    "jdk.internal.ref",
)
JAVA17_OPENS = " ".join(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in _OPENED)
_JAVA_OPTION_KEYS = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)


def spark_configs(configs: dict | None = None) -> dict[str, str]:
    """The Spark configs ``init_spark`` uses: the Java 17 flags appended to any Java options given, the
    progress bar on, a small shuffle (jobs here are small to medium: 200 shuffle partitions of a few
    rows each cost more than they bring on a few cores)."""
    out = {
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
    }
    out.update({k: str(v) for k, v in (configs or {}).items()})
    for key in _JAVA_OPTION_KEYS:
        out[key] = f"{out[key]} {JAVA17_OPENS}" if out.get(key) else JAVA17_OPENS
    return out


def init_spark(
    app_name: str = "rafka",
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str = "1G",
    configs: dict | None = None,
):
    """A SparkSession whose executors are Ray actors on the connected Ray cluster (``raydp.init_spark``).
    Ray must be initialized (``rafka.connect()``/``LocalCluster`` do it). Executors take
    ``executor_cores`` CPUs each from Ray: leave CPUs for the read tasks
    (``spark.ray.raydp_spark_executor.actor.resource.cpu`` in ``configs`` lowers what they request)."""
    import ray
    import raydp

    if not ray.is_initialized():
        raise RuntimeError("Ray is not initialized: connect to the rafka cluster first (rafka.connect())")
    warm_data_workers()  # beside the JVMs' start, which takes seconds anyway
    # PySpark tells executors which Python runs its UDFs (to_spark's Arrow conversion is one) from this
    # variable only, default "python3" on the executor's PATH: use this interpreter, which has pyspark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = raydp.init_spark(
        app_name=app_name,
        num_executors=num_executors,
        executor_cores=executor_cores,
        executor_memory=executor_memory,
        configs=spark_configs(configs),
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


_WARMING: list = []


@functools.lru_cache(maxsize=None)
def _warm_task():
    import ray

    @ray.remote(num_cpus=0, max_retries=0)
    def warm() -> int:
        import pyarrow  # noqa: F401
        import ray.data  # noqa: F401

        import jobs.datasource  # noqa: F401

        return os.getpid()

    return warm


def warm_data_workers(n: int = 2) -> list:
    """Start ``n`` Ray worker processes that import what a topic read task needs (pyarrow, Ray Data,
    jobs.datasource) and leave them idle for the read's tasks, which Ray runs on idle workers of the same
    job whatever their CPU request. Without it the first read of a job process starts its workers then:
    under Spark's start on a 2-core machine that read took 19 s for 4 records (README tour, measured), most
    of it worker starts and imports. ``num_cpus=0``: Spark's executors may hold every CPU by then. Returns
    the ObjectRefs (each the worker's pid); nothing waits for them."""
    refs = [_warm_task().remote() for _ in range(n)]
    _WARMING[:] = refs  # keep the latest refs alive while the tasks run
    return refs


def stop_spark() -> None:
    """Stop the Spark session and its executors (a no-op when none is running)."""
    import raydp

    raydp.stop_spark()


def topic_to_spark(spark: Any, cluster: Any, topic: str, **read_options: Any):
    """A DataFrame of the topic's records (``jobs.datasource.read_topic`` options: start, end, group,
    partitions, ...): ``topic, partition, offset, timestamp, key, value, headers``."""
    from jobs.datasource import TopicDatasource

    return TopicDatasource(cluster, topic, **read_options).to_dataset().to_spark(spark)


def spark_to_topic(
    df: Any, cluster: Any, topic: str, key_column: str | None = "key", value_column: str = "value", **sink_options: Any
) -> dict:
    """Write a DataFrame to ``topic`` through ``ray.data.from_spark`` and ``TopicDatasink``; returns
    ``{"records", "partitions"}``."""
    import ray

    from jobs.datasource import write_topic

    return write_topic(ray.data.from_spark(df), cluster, topic, key_column, value_column, **sink_options)
