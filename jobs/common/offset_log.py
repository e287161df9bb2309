"""What Spark's offset log says about a batch, read from inside that batch (foreachBatch).

`<checkpoint>/offsets/<batch id>` is written before the batch runs: a version line, a JSON metadata line
(`batchWatermarkMs`, `batchTimestampMs`, conf), then one line per source, its end offsets as JSON or `-`.
A batch re-run after a failure reads the same file, so whatever a batch derives from it is the same on
every run. It is read on the driver, through Hadoop's FileSystem API (any checkpoint file system works), and
never by a Spark job: a stateless job's checkpoint volume is mounted on the driver only, and an executor that
tried to read it would fail every batch.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from contracts.offset_log import OffsetLogEntry, parse_offset_log
from jobs.common.checkpoints import driver_file_system


def read_driver_file(spark: SparkSession, path: str) -> str:
    """A small file's text, read in the driver's JVM through Hadoop's FileSystem (file:, hdfs:, s3a: ...)."""
    file_system, hadoop_path = driver_file_system(spark, path)
    stream = file_system.open(hadoop_path)
    try:
        content = stream.readAllBytes()
    finally:
        stream.close()
    return bytes(content).decode("utf-8")


def read_offset_log(spark: SparkSession, checkpoint: str, batch_id: int) -> OffsetLogEntry:
    """The batch's entry of the offset log, as `contracts.offset_log` parses it for the exporter too."""
    path = f"{checkpoint}/offsets/{batch_id}"
    return parse_offset_log(read_driver_file(spark, path), path)


def batch_end_offsets(spark: SparkSession, checkpoint: str, batch_id: int) -> dict[str, dict[str, int]]:
    """The Kafka end offsets (exclusive) the batch was planned with: {topic: {partition: offset}}."""
    return read_offset_log(spark, checkpoint, batch_id).by_topic()


def batch_watermark_ms(spark: SparkSession, checkpoint: str, batch_id: int) -> int:
    """The event-time watermark the batch ran with, in epoch milliseconds."""
    return read_offset_log(spark, checkpoint, batch_id).watermark_ms
