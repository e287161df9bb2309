"""What a query's checkpoint directory holds, read on the driver through Hadoop's FileSystem API."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


class CheckpointError(RuntimeError):
    """A checkpoint the query cannot resume from."""


def driver_file_system(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for `path` (file:, hdfs:, s3a: ...) in the driver's JVM, and the path (py4j)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM gateway (stopped, or Spark Connect)")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def _batch_ids(spark: SparkSession, checkpoint: str, log: str) -> list[int]:
    """The batch ids a checkpoint's `offsets` or `commits` log holds (its files named by number)."""
    file_system, directory = driver_file_system(spark, f"{checkpoint}/{log}")
    if not file_system.exists(directory):
        return []
    names = (status.getPath().getName() for status in file_system.listStatus(directory))
    return [int(name) for name in names if name.isdigit()]


def uncommitted_batch(spark: SparkSession, checkpoint: str) -> int | None:
    """The batch a query restarted from `checkpoint` runs again first: the last one planned (in the offset
    log) and not committed, as after a failure mid-batch. None when every planned batch was committed."""
    planned, committed = _batch_ids(spark, checkpoint, "offsets"), _batch_ids(spark, checkpoint, "commits")
    if not planned or (committed and max(committed) >= max(planned)):
        return None
    return max(planned)


def require_state_if_committed(spark: SparkSession, checkpoint: str, why: str) -> None:
    """Refuse a checkpoint with committed batches but no state: one written by a version of the query
    without a stateful operator. Spark would resume it with empty state and no way to rebuild it, since
    the inputs' committed offsets are never read again. `why` says what the state holds."""
    file_system, state = driver_file_system(spark, f"{checkpoint}/state")
    if _batch_ids(spark, checkpoint, "commits") and not file_system.exists(state):
        raise CheckpointError(
            f"checkpoint {checkpoint} has committed batches but no state ({why}): it was written by a "
            "version of the query without it; start with a new --checkpoint-dir and a new --output-topic"
        )
