"""Reading and writing Kafka topics as streams; the only place jobs touch Kafka options."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from jobs.common.config import StreamingJobConfig


def read_kafka_stream(spark: SparkSession, config: StreamingJobConfig) -> DataFrame:
    """Kafka records with key, value, topic, partition, offset and timestamp columns."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("subscribe", config.input_topic)
        .option("startingOffsets", config.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    return reader.load()


def write_kafka_stream(records: DataFrame, config: StreamingJobConfig, output_mode: str) -> StreamingQuery:
    """Start the query writing `key`/`value` rows to the output topic, checkpointed."""
    return (
        records.writeStream.format("kafka")
        .queryName(config.query_name)
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("topic", config.output_topic)
        .option("checkpointLocation", config.checkpoint_dir)
        .outputMode(output_mode)
        .trigger(processingTime=config.trigger_interval)
        .start()
    )
