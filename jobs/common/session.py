"""The SparkSession every job starts with: UTC, few shuffle partitions, checkpoint files without checksum
sidecars, connector jars in local mode, and the jobs' own JVM code (jobs.jvm) wherever the image does not
hold it."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from jobs.common.config import StreamingJobConfig
from jobs.jvm import IMAGE_JAR
from jobs.jvm.build import build_jar

# Checkpoint files on the local filesystem (a directory locally, the job's PersistentVolumeClaim mounted at
# /checkpoints in the cluster) written without Hadoop's `.<name>.crc` checksum sidecars: the default
# ChecksumFileSystem/ChecksumFs writes and renames a sidecar beside every offset, commit and state file, two
# more file operations per write on the batch's critical path (issue 16, bench-batch-cost's raw-local-fs
# lever). Spark's checkpoint file manager (FileContext, so the AbstractFileSystem setting; FileSystem for
# the rest) still writes every offset, commit and state file to a temporary name and renames it into place,
# so a crash never leaves a partial one. The same on both sides: every driver, local or in the cluster,
# builds its session here, and executors get the driver's Spark settings. Other schemes (s3a://, hdfs://)
# are unaffected.
CHECKPOINT_FS_CONF = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}


def session_conf(config: StreamingJobConfig) -> dict[str, str]:
    """Every Spark setting `build_session` gives the session besides the master and the app name: the jobs'
    own, then the job's `--spark-conf` settings, which override them."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        **CHECKPOINT_FS_CONF,
    }
    jars = (*config.extra_jars, *jvm_jars())
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf | dict(config.spark_conf)


def jvm_jars() -> tuple[str, ...]:
    """The jobs' JVM jar for spark.jars: none in the jobs image (it is in Spark's jars folder there), else the
    local build (`make setup` builds it; built here if it is missing or older than its sources)."""
    if Path(IMAGE_JAR).exists():
        return ()
    return (str(build_jar()),)


def build_session(config: StreamingJobConfig) -> SparkSession:
    builder = SparkSession.builder.appName(config.query_name)
    if config.master:
        builder = builder.master(config.master)
    for key, value in session_conf(config).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
