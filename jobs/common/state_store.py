"""The state store of queries that keep large keyed state (transformWithState): RocksDB with changelog
checkpointing, set for one query rather than the whole job, and a guard against resuming a checkpoint that a
stateless version of the query wrote."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from contracts.errors import ConfigError

# What `rocksdb_state_store` sets while a query starts.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    # A commit writes the batch's changes, not a snapshot of the whole store.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


@contextmanager
def rocksdb_state_store(spark: SparkSession) -> Iterator[None]:
    """`STATE_STORE_CONF` while a query starts (it keeps a copy of the session's settings, and its
    checkpoint keeps the provider), the session's own settings again afterwards."""
    before = {key: spark.conf.get(key, None) for key in STATE_STORE_CONF}
    for key, value in STATE_STORE_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def require_state_in_checkpoint(spark: SparkSession, checkpoint: str, why: str) -> None:
    """Refuse a checkpoint with committed batches but no `state/`: one written by a stateless version of a
    query that now keeps state (`why` says what resuming it would do)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM gateway (stopped, or Spark Connect)")
    root = jvm.org.apache.hadoop.fs.Path(checkpoint)
    file_system = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    commits = jvm.org.apache.hadoop.fs.Path(root, "commits")
    if not file_system.exists(commits):
        return
    committed = [status.getPath().getName() for status in file_system.listStatus(commits)]
    if any(name.isdigit() for name in committed) and not file_system.exists(
        jvm.org.apache.hadoop.fs.Path(root, "state")
    ):
        raise ConfigError(
            f"checkpoint {checkpoint} has committed batches but no state: {why}; replay into a new "
            "--checkpoint-dir (and a new --output-topic)"
        )
