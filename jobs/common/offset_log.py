"""What Spark's offset log says about a batch, read from inside that batch (foreachBatch).

`<checkpoint>/offsets/<batch id>` is written before the batch runs: a version line, a JSON metadata line
(`batchWatermarkMs`, `batchTimestampMs`, conf), then one line per source, its end offsets as JSON or `-`.
A batch re-run after a failure reads the same file, so whatever a batch derives from it is the same on
every run. It is read through Spark so that any checkpoint file system works.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession


def _offset_log_lines(spark: SparkSession, checkpoint: str, batch_id: int) -> list[str]:
    [row] = spark.read.text(f"{checkpoint}/offsets/{batch_id}", wholetext=True).collect()
    return str(row["value"]).splitlines()


def batch_end_offsets(spark: SparkSession, checkpoint: str, batch_id: int) -> dict[str, dict[str, int]]:
    """The Kafka end offsets (exclusive) the batch was planned with: {topic: {partition: offset}}."""
    offsets: dict[str, dict[str, int]] = {}
    for line in _offset_log_lines(spark, checkpoint, batch_id)[2:]:
        if line.startswith("{"):
            for topic, partitions in json.loads(line).items():
                offsets[topic] = {str(p): int(o) for p, o in partitions.items()}
    return offsets


def batch_watermark_ms(spark: SparkSession, checkpoint: str, batch_id: int) -> int:
    """The event-time watermark the batch ran with, in epoch milliseconds."""
    for line in _offset_log_lines(spark, checkpoint, batch_id):
        if line.startswith("{") and "batchWatermarkMs" in line:
            return int(json.loads(line)["batchWatermarkMs"])
    raise ValueError(f"no batchWatermarkMs in {checkpoint}/offsets/{batch_id}")
