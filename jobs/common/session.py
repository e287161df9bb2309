"""The SparkSession every job starts with: UTC, few shuffle partitions, connector jars in local mode."""

from __future__ import annotations

from pyspark.sql import SparkSession

from jobs.common.config import StreamingJobConfig


def build_session(config: StreamingJobConfig) -> SparkSession:
    builder = (
        SparkSession.builder.appName(config.query_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if config.master:
        builder = builder.master(config.master)
    if config.extra_jars:
        builder = builder.config("spark.jars", ",".join(config.extra_jars))
    for key, value in config.spark_conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
