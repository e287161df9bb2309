"""The SparkSession every job starts with: UTC, few shuffle partitions, connector jars in local mode, and the
jobs' own JVM code (jobs.jvm) wherever the image does not hold it."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from jobs.common.config import StreamingJobConfig
from jobs.jvm import IMAGE_JAR
from jobs.jvm.build import build_jar


def jvm_jars() -> tuple[str, ...]:
    """The jobs' JVM jar for spark.jars: none in the jobs image (it is in Spark's jars folder there), else the
    local build (`make setup` builds it; built here if it is missing or older than its sources)."""
    if Path(IMAGE_JAR).exists():
        return ()
    return (str(build_jar()),)


def build_session(config: StreamingJobConfig) -> SparkSession:
    builder = (
        SparkSession.builder.appName(config.query_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if config.master:
        builder = builder.master(config.master)
    jars = (*config.extra_jars, *jvm_jars())
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in config.spark_conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
