"""A short driver run that loads the classes the jobs' drivers load, so that a local class-data-sharing
archive of them can be written when its JVM exits (streamstack.local.class_archive): a job's session, the
Kafka source's classes, then the jobs' decoder, watermark, window counts and a foreachBatch sink on a few
batches of generated page views with checkpoints. It needs no broker.

    python -m jobs.common.jvm_training <the shared job flags> --batches 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.common.config import StreamingJobConfig, add_streaming_job_arguments, streaming_job_config
from jobs.common.events import valid_events
from jobs.common.schemas import decode_page_views
from jobs.common.session import build_session


def generated_page_view_records(spark: SparkSession) -> DataFrame:
    """A stream shaped like the Kafka source's rows: JSON page views, one in 50 malformed."""
    value = F.when(F.col("value") % 50 == 0, F.lit("{not json")).otherwise(
        F.format_string(
            '{"user_id": "user-%d", "url": "/products/%d", "event_time": "%s"}',
            F.col("value") % 100,
            F.col("value") % 7,
            F.date_format("timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
        )
    )
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .load()
        .select(
            F.col("value").cast("string").cast("binary").alias("key"),
            value.cast("binary").alias("value"),
            F.lit("page-views").alias("topic"),
            F.lit(0).alias("partition"),
            F.col("value").alias("offset"),
            F.col("timestamp"),
            F.lit(0).alias("timestampType"),
        )
    )


def train(spark: SparkSession, config: StreamingJobConfig, batches: int, checkpoint: str) -> int:
    """Run the training query for `batches` batches; returns the rows its sink saw."""
    # Built, never started: loads the Kafka source's provider without a broker.
    spark.readStream.format("kafka").option("kafka.bootstrap.servers", config.bootstrap_servers).option(
        "subscribe", "page-views"
    ).load()
    counts = (
        valid_events(decode_page_views(generated_page_view_records(spark), config.event_limits))
        .withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "10 seconds"), F.col("url"))
        .count()
    )
    seen: list[int] = []
    query = (
        counts.writeStream.outputMode("update")
        .trigger(processingTime="1 second")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(lambda batch, _batch_id: seen.append(batch.count()))
        .start()
    )
    try:
        while len(seen) < batches and query.isActive:
            query.awaitTermination(1)
    finally:
        query.stop()
    return sum(seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jvm-training", description=__doc__)
    add_streaming_job_arguments(parser, query_name="jvm-training")
    parser.add_argument("--batches", type=int, default=3, help="batches of the training query")
    args = parser.parse_args(argv)
    config = streaming_job_config(args)
    spark = build_session(config)
    with tempfile.TemporaryDirectory(prefix="jvm-training-", dir=config.checkpoint_dir) as checkpoint:
        rows = train(spark, config, args.batches, checkpoint)
    spark.stop()
    print(f"jvm-training: {args.batches} batches, {rows} rows of counts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
