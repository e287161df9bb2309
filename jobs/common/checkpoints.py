"""What a query's checkpoint directory holds, read on the driver through Hadoop's FileSystem API."""

from __future__ import annotations

from pyspark.sql import SparkSession


class CheckpointError(RuntimeError):
    """A checkpoint the query cannot resume from."""


def require_state_if_committed(spark: SparkSession, checkpoint: str, why: str) -> None:
    """Refuse a checkpoint with committed batches but no state: one written by a version of the query
    without a stateful operator. Spark would resume it with empty state and no way to rebuild it, since
    the inputs' committed offsets are never read again. `why` says what the state holds."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM gateway (stopped, or Spark Connect)")
    root = jvm.org.apache.hadoop.fs.Path(checkpoint)
    file_system = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    commits = jvm.org.apache.hadoop.fs.Path(root, "commits")
    committed = file_system.exists(commits) and any(
        status.getPath().getName().isdigit() for status in file_system.listStatus(commits)
    )
    if committed and not file_system.exists(jvm.org.apache.hadoop.fs.Path(root, "state")):
        raise CheckpointError(
            f"checkpoint {checkpoint} has committed batches but no state ({why}): it was written by a "
            "version of the query without it; start with a new --checkpoint-dir and a new --output-topic"
        )
