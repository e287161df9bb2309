"""What Spark's offset log says about a batch, read from inside that batch (foreachBatch).

`<checkpoint>/offsets/<batch id>` is written before the batch runs: a version line, a JSON metadata line
(`batchWatermarkMs`, `batchTimestampMs`, conf), then one line per source, its end offsets as JSON or `-`.
A batch re-run after a failure reads the same file, so whatever a batch derives from it is the same on
every run. It is read on the driver, through Hadoop's FileSystem API (any checkpoint file system works), and
never by a Spark job: a stateless job's checkpoint volume is mounted on the driver only, and an executor that
tried to read it would fail every batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from contracts.offset_log import OffsetLogEntry, parse_offset_log
from jobs.common.config import StreamingJobConfig
from jobs.common.kafka_io import read_kafka_stream, start_foreach_batch_query


def read_driver_file(spark: SparkSession, path: str) -> str:
    """A small file's text, read in the driver's JVM through Hadoop's FileSystem (file:, hdfs:, s3a: ...)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM gateway (stopped, or Spark Connect)")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    file_system = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = file_system.open(hadoop_path)
    try:
        content = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
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


@dataclass(frozen=True)
class BatchOffsets:
    """The Kafka end offsets (exclusive) a batch was planned with, as its offset log records them."""

    batch_id: int
    checkpoint: str
    by_topic: dict[str, dict[str, int]]

    def of(self, topic: str) -> dict[str, int]:
        """{partition: end offset} of one of the query's topics; fails when the log has none for it."""
        if topic not in self.by_topic:
            raise RuntimeError(f"batch {self.batch_id} has no offsets for {topic} in {self.checkpoint}")
        return self.by_topic[topic]


def require_within_end_offsets(batch: DataFrame, offsets: BatchOffsets) -> None:
    """Fail unless the batch's records lie below the end offsets read for it (guards the offset-log
    parsing). The view is computed from the topics, not from the batch: this scan of the batch is also
    what Spark counts as the query's input rows."""
    end_offsets = offsets.by_topic
    for last in batch.groupBy("topic", "partition").agg(F.max("offset").alias("offset")).collect():
        if last["offset"] >= end_offsets.get(last["topic"], {}).get(str(last["partition"]), 0):
            raise RuntimeError(
                f"batch {offsets.batch_id} holds {last['topic']}/{last['partition']}/{last['offset']}, "
                f"beyond its end offsets {end_offsets}"
            )


def start_end_offsets_query(
    spark: SparkSession,
    config: StreamingJobConfig,
    topics: Sequence[str],
    process: Callable[[DataFrame, BatchOffsets], None],
    *,
    include_headers: bool = False,
    observe: Callable[[DataFrame], DataFrame] | None = None,
) -> StreamingQuery:
    """The job's main query (`config.query_name`): reads `topics` as one stream and calls
    `process(batch, offsets)` on each batch with the end offsets the batch was planned with, so that it can
    read other topics, or the same ones as tables, exactly as far as the batch reaches. `observe` wraps the
    stream (an observed metric); it is computed when `process` scans the batch."""
    checkpoint = config.checkpoint_for(config.query_name)

    def process_batch(batch: DataFrame, batch_id: int) -> None:
        end_offsets = batch_end_offsets(batch.sparkSession, checkpoint, batch_id)
        process(batch, BatchOffsets(batch_id, checkpoint, end_offsets))

    records = read_kafka_stream(spark, config, topics, include_headers=include_headers)
    return start_foreach_batch_query(
        observe(records) if observe is not None else records,
        config,
        query_name=config.query_name,
        process=process_batch,
    )
