"""The SparkSession every job starts with: UTC, few shuffle partitions, checkpoint files without checksum
sidecars, connector jars in local mode, and the jobs' own JVM code (jobs.jvm) wherever the image does not
hold it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.common.config import StreamingJobConfig
from jobs.jvm import IMAGE_JAR
from jobs.jvm.build import build_jar

# Checkpoint files on the local filesystem (a directory locally, the job's PersistentVolumeClaim mounted at
# /checkpoints in the cluster) through the jobs' own filesystem classes over Hadoop's raw local filesystem
# (jobs/jvm: NioRawLocalFileSystem, under LocalCheckpointFileSystem for FileSystem and LocalCheckpointFs for
# FileContext), for two reasons of cost on the batch's critical path (issue 16). No checksums: without
# Hadoop's `.<name>.crc` sidecars, which the default LocalFileSystem writes and renames beside every offset,
# commit and state file (ours is still a LocalFileSystem, as Hadoop's copies to and from the local
# filesystem require: RocksDB's snapshots go through them). Ours: permissions and file status through
# java.nio, where Hadoop without its native library forks `chmod`, `readlink` or `ls` for them, several
# times per checkpoint file (a commit log entry took 25-30 ms, 3 ms without the forks). Spark's checkpoint
# file manager (FileContext, so the AbstractFileSystem setting; FileSystem for the rest) still writes every
# file to a temporary name and renames it into place, so a crash never leaves a partial one. The same on
# both sides: every driver, local or in the cluster, builds its session here, executors get the driver's
# Spark settings, and the jar is on the JVM's own classpath (Spark's jars folder in the image; locally the
# extraClassPath settings below, since Hadoop loads a filesystem class before spark.jars are added). Other
# schemes (s3a://, hdfs://) are unaffected.
CHECKPOINT_FS_CONF = {
    "spark.hadoop.fs.file.impl": "streamstack.jvm.LocalCheckpointFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "streamstack.jvm.LocalCheckpointFs",
}


# For the queries that keep a table as state (user-enrichment's users, user-view's users and orders), which
# can be large (a million users in the benchmark): RocksDB keeps it off the JVM heap, and changelog
# checkpointing writes only a batch's changed rows. RocksDB's memory (memtables, block cache) is native,
# outside the heap the pod's memory is sized around, so it is bounded per executor: 64 MiB fits the dev
# pods' 224 MiB memoryOverhead (Pulumi.dev.yaml). Set per query (sql_settings): the jobs' other queries
# keep no state.
TABLE_STATE_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "64",
}


# Stops the state stores' maintenance before the driver's RPC environment goes (jobs/jvm StateStoreDrain),
# on the driver and every executor; loaded from the JVM's own classpath on both sides, like the filesystem.
STATE_STORE_DRAIN_PLUGIN = "streamstack.jvm.StateStoreDrain"


def session_conf(config: StreamingJobConfig) -> dict[str, str]:
    """Every Spark setting `build_session` gives the session besides the master and the app name: the jobs'
    own, then the job's `--spark-conf` settings, which override them, except that plugins a job names run
    beside the jobs' own."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        # A driver started from Python (locally) runs as pyspark's shell, where Spark draws stage progress
        # bars into the job's log; spark-submit (the cluster) does not. Off on both sides.
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        **CHECKPOINT_FS_CONF,
    }
    jars = (*config.extra_jars, *jvm_jars())
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if own := jvm_jars():
        conf["spark.driver.extraClassPath"] = conf["spark.executor.extraClassPath"] = ":".join(own)
    conf = conf | dict(config.spark_conf)
    named = [plugin.strip() for plugin in conf.get("spark.plugins", "").split(",") if plugin.strip()]
    conf["spark.plugins"] = ",".join(dict.fromkeys([STATE_STORE_DRAIN_PLUGIN, *named]))
    return conf


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


@contextmanager
def sql_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL settings for what runs or starts inside the block only; the previous values come back
    afterwards. A streaming query keeps the settings it started with (it copies the session's)."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, earlier in previous.items():
            if earlier is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, earlier)
