"""Reading and writing Kafka topics as streams; the only place jobs touch Kafka options.

Every query starts through `write_kafka_stream` or `start_foreach_batch_query`, which name the query,
checkpoint it under the job's checkpoint root and apply the job's trigger: restarting a job resumes each
query from its checkpoint. Inside foreachBatch, `read_topic_until` and `write_kafka_batch` read and write
topics as batch tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from contracts.errors import ConfigError
from contracts.record_sizes import DEAD_LETTER_MAX_MESSAGE_BYTES
from jobs.common.batch_errors import reporting_failures
from jobs.common.config import StreamingJobConfig


def kafka_options(config: StreamingJobConfig) -> dict[str, str]:
    """Where Kafka is and how to authenticate, as Spark Kafka source/sink options."""
    return {"kafka.bootstrap.servers": config.bootstrap_servers, **config.kafka_security.spark_options()}


def kafka_source_options(config: StreamingJobConfig) -> dict[str, str]:
    """`kafka_options` plus the source's fetch wait. After every poll, Kafka's consumer sends the next fetch
    ahead, at the end of the log in a small batch, where the broker holds it for the whole wait; Spark's
    reader then asks that broker for the partition's earliest and latest offsets, and the broker answers
    a connection's requests in order. So every task of every micro-batch waited the fetch wait: Kafka's
    default 500 ms, then 10 ms a task (`make bench-batch-cost`). 1 ms keeps a fetch that finds nothing
    from spinning (0 answers at once, and a consumer that polls for records not yet replicated would ask
    again and again)."""
    return {**kafka_options(config), "kafka.fetch.max.wait.ms": str(config.fetch_max_wait_ms)}


def kafka_sink_options(config: StreamingJobConfig) -> dict[str, str]:
    """`kafka_options` plus the producer's request limit, large enough for the dead letter of the largest
    record an input topic accepts (contracts.record_sizes); below it the sink fails on every retry."""
    return {**kafka_options(config), "kafka.max.request.size": str(DEAD_LETTER_MAX_MESSAGE_BYTES)}


def read_kafka_stream(
    spark: SparkSession, config: StreamingJobConfig, topics: Sequence[str], *, include_headers: bool = False
) -> DataFrame:
    """Kafka records (key, value, topic, partition, offset, timestamp, ..., and `headers` when asked for) of
    the given topics.

    `--starting-offsets` / `--starting-timestamp-ms` only apply when the query has no checkpoint yet: they
    are how a replay into a new checkpoint chooses where to start.
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_source_options(config))
        .option("subscribe", ",".join(topics))
        .option("failOnDataLoss", "false" if config.accept_data_loss else "true")
        .option("includeHeaders", "true" if include_headers else "false")
    )
    if config.starting_timestamp_ms is not None:
        reader = reader.option("startingTimestamp", str(config.starting_timestamp_ms))
    else:
        reader = reader.option("startingOffsets", config.starting_offsets)
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    return reader.load()


def read_topic_until(
    spark: SparkSession, config: StreamingJobConfig, topic: str, end_offsets: dict[str, int] | None
) -> DataFrame:
    """A topic's records from its start up to (excluding) `end_offsets`, or to its end when None, as a
    batch DataFrame. Offsets missing below the end are what compaction removed, not lost data."""
    return (
        spark.read.format("kafka")
        .options(**kafka_source_options(config))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest" if end_offsets is None else json.dumps({topic: end_offsets}))
        .option("failOnDataLoss", "false")
        .load()
    )


def write_kafka_stream(
    records: DataFrame,
    config: StreamingJobConfig,
    *,
    query_name: str | None = None,
    topic: str | None,
    output_mode: str,
    options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start a query writing `key`/`value` (and optional `headers`) rows to a topic, checkpointed.

    The query is the job's main query (`config.query_name`) unless `query_name` names another. With
    `topic=None` each row names its own topic in a `topic` column. `options`: further writer options (the
    batch-cost benchmark's levers).
    """
    if query_name is None:
        query_name = config.query_name
    writer = (
        records.writeStream.format("kafka")
        .queryName(query_name)
        .options(**kafka_sink_options(config))
        .option("checkpointLocation", config.checkpoint_for(query_name))
        .outputMode(output_mode)
        .trigger(processingTime=config.trigger_interval)
        .options(**(options or {}))
    )
    if topic is not None:
        writer = writer.option("topic", topic)
    return writer.start()


def write_kafka_batch(records: DataFrame, config: StreamingJobConfig, topic: str) -> None:
    """Write a batch DataFrame of `key`/`value` (and optional `headers`) rows to a topic (in foreachBatch)."""
    (records.write.format("kafka").options(**kafka_sink_options(config)).option("topic", topic).save())


def start_foreach_batch_query(
    records: DataFrame,
    config: StreamingJobConfig,
    *,
    query_name: str,
    process: Callable[[DataFrame, int], None],
) -> StreamingQuery:
    """Start a query running `process(batch, batch_id)` on each batch of `records`, checkpointed; a failure
    of `process` fails the query, its traceback worded as jobs.common.batch_errors explains."""
    return (
        records.writeStream.queryName(query_name)
        .option("checkpointLocation", config.checkpoint_for(query_name))
        .trigger(processingTime=config.trigger_interval)
        .foreachBatch(reporting_failures(process))
        .start()
    )


def _metadata_consumer(config: StreamingJobConfig) -> KafkaConsumer:
    """A consumer in no group, for metadata and offsets only; it gives up on an unreachable Kafka after 5 s
    (its callers retry, or fall back)."""
    return KafkaConsumer(
        bootstrap_servers=config.bootstrap_servers,
        client_id=config.query_name,
        bootstrap_timeout_ms=5000,
        **config.kafka_security.client_options(),
    )


def require_existing_topics(
    config: StreamingJobConfig, topics_by_flag: Mapping[str, str], timeout: float = 30
) -> None:
    """Fail at startup, naming the flag, when a topic the job reads or writes does not exist.

    Without this the Kafka sink waits a minute for metadata of a missing topic and the query dies with a
    timeout that does not say which setting is wrong.
    """
    wanted = {**topics_by_flag, "--dead-letter-topic": config.dead_letter_topic}
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer = _metadata_consumer(config)
            try:
                existing = consumer.topics()
            finally:
                consumer.close()
            break
        except KafkaError as error:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"--bootstrap-servers {config.bootstrap_servers}: Kafka not reachable ({error})"
                ) from error
            time.sleep(1)
    missing = [f"{flag} {topic!r}" for flag, topic in wanted.items() if topic not in existing]
    if missing:
        raise ConfigError(
            f"topic does not exist: {', '.join(missing)} (create it first; auto-creation is off)"
        )


def earliest_kept_offsets(
    config: StreamingJobConfig, topics: Sequence[str]
) -> tuple[set[str], dict[tuple[str, int], int]]:
    """Which of `topics` exist, and the earliest offset Kafka still keeps in each of their partitions."""
    consumer = _metadata_consumer(config)
    try:
        existing = consumer.topics() & set(topics)
        partitions = [
            TopicPartition(topic, partition)
            for topic in sorted(existing)
            for partition in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        earliest = consumer.beginning_offsets(partitions) if partitions else {}
    finally:
        consumer.close()
    return existing, {(tp.topic, tp.partition): offset for tp, offset in earliest.items()}
